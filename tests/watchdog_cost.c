/* tests/watchdog_cost.c - what the watchdog costs the loop's thread a training step, in instructions (callgrind,
   exact), in a loop of your own (tr_run_begin) and in tr_fit: not registered, and registered (its thread looks
   every second; callgrind counts only the loop's thread, inside measured()). Each mode runs for 2 and 402 steps;
   the difference over 400 steps is one step's cost, every one-time cost (the thread's start and join) cancelled
   (over 10 steps, how the threads interleaved under callgrind moved it by up to 10 instructions).

     watchdog_cost                  the table (every mode, twice each under callgrind; about 30 s)
     watchdog_cost own|fit MODE N   one run (what the driver starts)
   MODE: nothing | watchdog */
#include "cost.h"

static const char *const modes[] = { "nothing", "watchdog" }, *const loops[] = { "own", "fit" };
static const char *spec_of(const char *mode) { return !strcmp(mode, "watchdog") ? "watchdog(seconds=600)" : ""; }

int measured(const char *loop, const char *mode, int steps) { return cost_tiny(loop, spec_of(mode), steps); }

static void table(const char *said, const double *per) {
  printf("%s: instructions per step (callgrind: (I(402 steps) - I(2 steps)) / 400)\n", said);
  cost_rows(modes, 2, per, 8);
  printf("watchdog in %s: %.0f instructions a step in the loop's thread\n", said, per[1] - per[0]);
}

int main(int argc, char **argv) { return cost_main(argc, argv, loops, modes, 2, 400, table); }
