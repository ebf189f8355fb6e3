/* tests/device_stats_cost.c - what device_stats costs a training step, in instructions (callgrind, exact), in a
   loop of your own (tr_run_begin) and in tr_fit: not registered, registered on steps that are not due, and
   on steps that are (a reading every step: RSS, peak, CPU time, load and the metrics; no logger, so no
   record). Each mode runs under valgrind --tool=callgrind collecting inside measured() only, for 2 and 12
   steps; the difference over 10 steps is one step's cost, every one-time cost cancelled out.

     device_stats_cost                  the table (every mode, twice each under callgrind; about 10 s)
     device_stats_cost own|fit MODE N   one run (what the driver starts)
   MODE: nothing | not_due | due */
#include "cost.h"

static const char *const modes[] = { "nothing", "not_due", "due" }, *const loops[] = { "own", "fit" };
static const char *spec_of(const char *mode) {
  return !strcmp(mode, "due") ? "device_stats(every_n_steps=1)" : !strcmp(mode, "not_due") ? "device_stats(every_n_steps=1000000)" : "";
}

int measured(const char *loop, const char *mode, int steps) { return cost_tiny(loop, spec_of(mode), steps); }

static void table(const char *said, const double *per) {
  printf("%s: instructions per step (callgrind: (I(12 steps) - I(2 steps)) / 10)\n", said);
  cost_rows(modes, 3, per, 8);
  printf("device_stats in %s: %.0f instructions a step not due, %.0f a step due\n", said, per[1] - per[0], per[2] - per[0]);
}

int main(int argc, char **argv) { return cost_main(argc, argv, loops, modes, 3, 10, table); }
