/* bench_hooks.c - what one hook site costs, side by side with what it could cost at best.

   make bench   (or: build/bench_hooks)   prints one table, measured in one run:
     instructions  callgrind Ir per loop iteration, exact: the program re-runs itself under
                   valgrind --tool=callgrind for each variant at N1 and N2 iterations and takes
                   (Ir(N2) - Ir(N1)) / (N2 - N1); everything outside the loop cancels.
     time          ns per loop iteration with clock_gettime, the minimum over interleaved rounds
                   (every round runs every variant once, in a rotating order).
   "per site" is per iteration minus the loop with no site.

   Variants (one step loop each, bench_site.c compiled with different flags; the hook is an empty
   function in another translation unit, bench_body.c):
     no site, HK_FIRE under -DHK_DISABLE, HK_FIRE with nothing registered, with 1 / 4 / 16 hooks,
     with 1 hook that has a filter (every = 1: it runs every time, entered through its filter check), a direct
     call of the same hook, and a hand-written loop over 1 / 4 / 16 function pointers
     (the physical limit of calling k hooks through pointers).

   bench_hooks --count ID N   runs variant ID for N iterations and nothing else (used under callgrind). */
#define _POSIX_C_SOURCE 200809L
#define HOOKS_IMPLEMENTATION
#include "bench.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N1 100000L
#define N2 200000L
#define TIME_ITERS 1000000L
#define ROUNDS 15

typedef struct variant {
  const char *id, *label;
  bench_step_fn step;
  int hooks;     /* hooks registered on BENCH_EVENT (HK_FIRE variants) */
  int fnptrs;    /* entries in bench_tbl (fn-pointer loop) */
  int filtered;  /* 1: the hook has a filter (every = 1); 2: the registry profiles (hk_profile) */
  double ir, ns; /* measured per iteration; ir < 0 when callgrind is unavailable */
} variant;

static variant V[] = {
  { "nosite", "no site",                        bench_step_nosite, 0, 0, 0, 0, 0 },
  { "off",    "HK_FIRE, -DHK_DISABLE",          bench_step_off,    0, 0, 0, 0, 0 },
  { "empty",  "HK_FIRE, nothing registered",    bench_step_site,   0, 0, 0, 0, 0 },
  { "hk1",    "HK_FIRE, 1 hook",                bench_step_site,   1, 0, 0, 0, 0 },
  { "hk4",    "HK_FIRE, 4 hooks",               bench_step_site,   4, 0, 0, 0, 0 },
  { "hk16",   "HK_FIRE, 16 hooks",              bench_step_site,  16, 0, 0, 0, 0 },
  { "hk1f",   "HK_FIRE, 1 hook with a filter",  bench_step_site,   1, 0, 1, 0, 0 },
  { "direct", "direct call of the hook",        bench_step_direct, 0, 0, 0, 0, 0 },
  { "fp1",    "fn-pointer loop, 1 (limit)",     bench_step_fnptr,  0, 1, 0, 0, 0 },
  { "fp4",    "fn-pointer loop, 4 (limit)",     bench_step_fnptr,  0, 4, 0, 0, 0 },
  { "fp16",   "fn-pointer loop, 16 (limit)",    bench_step_fnptr,  0, 16, 0, 0, 0 },
  { "hk1p",   "HK_FIRE, 1 hook, profiling",     bench_step_site,   1, 0, 2, 0, 0 },
  { "hk4p",   "HK_FIRE, 4 hooks, profiling",    bench_step_site,   4, 0, 2, 0, 0 },
};
#define NV ((int)(sizeof V / sizeof V[0]))

/* One registry per hook count, all built before anything is measured; a variant only points
   bench_reg at its registry and sets bench_tbl.n. Every registry also holds one hook on another
   event, so "nothing registered" means nothing on this event, not an empty registry. */
static hk_registry *regs[BENCH_MAX_FNS + 1], *reg_filtered, *reg_prof[2];

static hk_registry *make_registry(int hooks, int filtered) {
  hk_registry *reg = hk_create(NULL);
  hk_opts o;
  int k;
  if (!reg) { fprintf(stderr, "bench: hk_create failed\n"); exit(2); }
  memset(&o, 0, sizeof o);
  o.filter.every = 1;
  if (hk_on(reg, HK_ON_VALIDATION_END, bench_hook, NULL, NULL, NULL) != HK_OK) goto fail;
  for (k = 0; k < hooks; k++)
    if (hk_on(reg, BENCH_EVENT, bench_hook, NULL, filtered == 1 ? &o : NULL, NULL) != HK_OK) goto fail;
  if (hk_count(reg, BENCH_EVENT) != hooks) goto fail;
  if (filtered == 2) hk_profile(reg, 1);
  return reg;
fail:
  fprintf(stderr, "bench: registering %d hooks failed: %s\n", hooks, hk_last_error(reg));
  exit(2);
}

static void setup(void) {
  int k;
  regs[0] = make_registry(0, 0);
  regs[1] = make_registry(1, 0);
  regs[4] = make_registry(4, 0);
  regs[16] = make_registry(16, 0);
  reg_filtered = make_registry(1, 1);
  reg_prof[0] = make_registry(1, 2);
  reg_prof[1] = make_registry(4, 2);
  for (k = 0; k < BENCH_MAX_FNS; k++) { bench_tbl.fn[k] = bench_hook; bench_tbl.user[k] = NULL; }
}

static void select_variant(const variant *v) {
  bench_reg = v->filtered == 2 ? reg_prof[v->hooks > 1] : v->filtered ? reg_filtered : regs[v->hooks];
  bench_tbl.n = v->fnptrs;
}

static void teardown(void) {
  int k;
  for (k = 0; k <= BENCH_MAX_FNS; k++) if (regs[k]) hk_destroy(regs[k]);
  hk_destroy(reg_filtered);
  hk_destroy(reg_prof[0]);
  hk_destroy(reg_prof[1]);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Ir of "self --count id n" under callgrind; -1 if valgrind is missing or the run failed. */
static double callgrind_ir(const char *self, const char *id, long n) {
  char cmd[1024], line[512];
  double ir = -1;
  FILE *p;
  snprintf(cmd, sizeof cmd,
           "valgrind --tool=callgrind --callgrind-out-file=/dev/null '%s' --count %s %ld 2>&1", self, id, n);
  p = popen(cmd, "r");
  if (!p) return -1;
  while (fgets(line, sizeof line, p)) {
    const char *c = strstr(line, "Collected :");
    if (c) ir = strtod(c + strlen("Collected :"), NULL);
  }
  if (pclose(p) != 0) return -1;
  return ir;
}

static void fmt(char *buf, size_t n, double x, int ok, const char *f) {
  if (ok) snprintf(buf, n, f, x); else snprintf(buf, n, "n/a");
}

int main(int argc, char **argv) {
  hk_ctx ctx;
  int i, r, have_ir = 1;
  memset(&ctx, 0, sizeof ctx);
  ctx.stage = HK_STAGE_FIT;
  setup();

  if (argc == 4 && strcmp(argv[1], "--count") == 0) {
    long n = strtol(argv[3], NULL, 10);
    for (i = 0; i < NV; i++) if (strcmp(V[i].id, argv[2]) == 0) break;
    if (i == NV) { fprintf(stderr, "bench: unknown variant %s\n", argv[2]); return 2; }
    select_variant(&V[i]);
    V[i].step(&ctx, n);
    hk_ctx_free(&ctx);
    teardown();
    return 0;
  }

  /* Instructions: callgrind on this same binary, one variant at a time. */
  for (i = 0; i < NV && have_ir; i++) {
    double a = callgrind_ir(argv[0], V[i].id, N1), b = a < 0 ? -1 : callgrind_ir(argv[0], V[i].id, N2);
    if (a < 0 || b < 0) { have_ir = 0; break; }
    V[i].ir = (b - a) / (double)(N2 - N1);
  }

  /* Time: warm up, then ROUNDS interleaved rounds, rotating the order; keep the minimum. */
  for (i = 0; i < NV; i++) { select_variant(&V[i]); V[i].step(&ctx, TIME_ITERS / 10); V[i].ns = 1e300; }
  for (r = 0; r < ROUNDS; r++) {
    for (i = 0; i < NV; i++) {
      variant *v = &V[(i + r) % NV];
      double t0, t1;
      select_variant(v);
      t0 = now_ns();
      v->step(&ctx, TIME_ITERS);
      t1 = now_ns();
      if ((t1 - t0) / (double)TIME_ITERS < v->ns) v->ns = (t1 - t0) / (double)TIME_ITERS;
    }
  }

  {
    const variant *base = &V[0], *direct = &V[7];
    const variant *hk[3] = { &V[3], &V[4], &V[5] }, *fp[3] = { &V[8], &V[9], &V[10] };
    char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
    double marg_hk = 0, marg_fp = 0, beyond = 0;

    printf("hooks.h bench: one hook site in a step loop; compiler: %s\n", bench_cc);
    printf("  Ir = instructions per site (callgrind, exact: Ir(N=%ld) - Ir(N=%ld) per iteration, minus the no-site loop)\n", N2, N1);
    printf("  ns = time per site (min over %d interleaved rounds of %ld iterations, minus the no-site loop)\n", ROUNDS, TIME_ITERS);
    printf("  limit = a hand-written loop over the same number of function pointers; the hook is an empty function in another file\n\n");
    printf("  %-30s %9s %9s   %13s %9s   %9s %9s %12s\n", "variant", "Ir/site", "ns/site",
           "limit Ir/site", "limit ns", "Ir/limit", "ns/limit", "Ir-limit/hook");
    for (i = 0; i < NV; i++) {
      const variant *v = &V[i];
      double ir = v->ir - base->ir, ns = v->ns - base->ns;
      fmt(a, sizeof a, ir, have_ir, "%.2f");
      snprintf(b, sizeof b, "%.2f", ns);
      if (v->hooks > 0) {
        const variant *l = fp[v->hooks == 1 ? 0 : v->hooks == 4 ? 1 : 2];
        double lir = l->ir - base->ir, lns = l->ns - base->ns;
        fmt(c, sizeof c, lir, have_ir, "%.2f");
        snprintf(d, sizeof d, "%.2f", lns);
        fmt(e, sizeof e, lir > 0 ? ir / lir : 0, have_ir && lir > 0, "%.2fx");
        fmt(f, sizeof f, lns > 0 ? ns / lns : 0, lns > 0.05, "%.2fx");
        fmt(g, sizeof g, (ir - lir) / v->hooks, have_ir, "%+.2f");
      } else {
        strcpy(c, "-"); strcpy(d, "-"); strcpy(e, "-"); strcpy(f, "-"); strcpy(g, "-");
      }
      printf("  %-30s %9s %9s   %13s %9s   %9s %9s %12s\n", v->label, i == 0 ? "0 (ref)" : a,
             i == 0 ? "0 (ref)" : b, c, d, e, f, g);
    }
    printf("\n  absolute, per loop iteration: no site %.2f Ir, %.3f ns\n", base->ir, base->ns);
    /* hk_profile: every dispatch takes the general loop and two clock reads, each hook two more */
    printf("  profiling on (train.h's profiler): a dispatch with 1 hook %+.1f ns over profiling off; each hook more %.1f ns "
           "(4 hooks - 1 hook, / 3; off: %.1f)", V[11].ns - V[3].ns, (V[12].ns - V[11].ns) / 3, (V[4].ns - V[3].ns) / 3);
    if (have_ir) printf("; %+.0f Ir and %.0f Ir", V[11].ir - V[3].ir, (V[12].ir - V[11].ir) / 3);
    printf("\n");
    if (have_ir) {
      marg_hk = (hk[2]->ir - hk[0]->ir) / 15.0;
      marg_fp = (fp[2]->ir - fp[0]->ir) / 15.0;
      beyond = marg_hk - marg_fp;
      printf("  each additional hook (1 -> 16): HK_FIRE %.2f Ir, fn-pointer loop %.2f Ir: %+.2f Ir beyond the loop"
             " (budget <= +4): %s\n", marg_hk, marg_fp, beyond, beyond <= 4.0 + 1e-9 ? "met" : "NOT met");
      printf("  1 hook: HK_FIRE %.2f Ir per site against the 1-pointer loop's %.2f (%.2fx; goal <= 2x: %s); per loop iteration,"
             " the loop's own %.2f included: %.2f against %.2f (%.2fx)\n",
             hk[0]->ir - base->ir, fp[0]->ir - base->ir, (hk[0]->ir - base->ir) / (fp[0]->ir - base->ir),
             hk[0]->ir - base->ir <= 2 * (fp[0]->ir - base->ir) + 1e-9 ? "met" : "NOT met", base->ir, hk[0]->ir, fp[0]->ir,
             hk[0]->ir / fp[0]->ir);
      printf("  fixed cost of a dispatch (HK_FIRE with 1 hook minus the 1-pointer loop): %+.2f Ir (budget <= the loop's own"
             " %.2f, i.e. 2x): %s\n", hk[0]->ir - fp[0]->ir, fp[0]->ir - base->ir,
             hk[0]->ir - fp[0]->ir <= fp[0]->ir - base->ir + 1e-9 ? "met" : "NOT met");
      printf("  HK_FIRE with 1 hook vs a direct call of the hook: %.2f vs %.2f Ir (%.1fx), %.2f vs %.2f ns\n",
             hk[0]->ir - base->ir, direct->ir - base->ir, (hk[0]->ir - base->ir) / (direct->ir - base->ir),
             hk[0]->ns - base->ns, direct->ns - base->ns);
      printf("  empty site: %.2f Ir (budget <= 3): %s; compiled out: %.2f Ir (budget 0): %s\n",
             V[2].ir - base->ir, V[2].ir - base->ir <= 3 + 1e-9 ? "met" : "NOT met",
             V[1].ir - base->ir, V[1].ir == base->ir ? "met" : "NOT met");
    } else {
      printf("  instructions: n/a (valgrind is missing or failed: run make deps, or run valgrind --tool=callgrind %s --count hk1 10)\n", argv[0]);
    }
  }
  hk_ctx_free(&ctx);
  teardown();
  return 0;
}
