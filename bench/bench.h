/* bench.h - what the benches share: bench_hooks' declarations (see bench_hooks.c), and, with BENCH_DISK defined
   first (POSIX: define _POSIX_C_SOURCE too), the clock, a median and the disk's copy speed for the benches that
   write files (bench_safetensors, bench_predwriter). */
#ifndef BENCH_H
#define BENCH_H
#include "hooks.h"

#define BENCH_EVENT HK_ON_TRAIN_BATCH_END
#define BENCH_MAX_FNS 16

/* The hand-written function-pointer table: the physical limit of "call k hooks". */
typedef struct bench_table {
  int n;
  hk_fn fn[BENCH_MAX_FNS];
  void *user[BENCH_MAX_FNS];
} bench_table;

/* Globals with external linkage, defined in bench_body.c: the compiler cannot fold the guard. */
extern hk_registry *bench_reg;
extern bench_table bench_tbl;
extern const char *bench_cc;

/* The hook: an empty function in another translation unit. */
hk_signal bench_hook(hk_ctx *ctx, void *user);

/* One step loop per variant, each from bench_site.c compiled with different -D flags. */
typedef void (*bench_step_fn)(hk_ctx *ctx, long n);
void bench_step_nosite(hk_ctx *ctx, long n);  /* no site */
void bench_step_off(hk_ctx *ctx, long n);     /* HK_FIRE under -DHK_DISABLE */
void bench_step_site(hk_ctx *ctx, long n);    /* HK_FIRE */
void bench_step_direct(hk_ctx *ctx, long n);  /* bench_hook(ctx, NULL) called directly */
void bench_step_fnptr(hk_ctx *ctx, long n);   /* for (k < bench_tbl.n) bench_tbl.fn[k](...) */

#ifdef BENCH_DISK
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static inline double bench_now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec; }
static inline int bench_cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
/* The middle of n (odd) times; sorts v. */
static inline double bench_median(double *v, int n) { qsort(v, (size_t)n, sizeof *v, bench_cmp); return v[n / 2]; }
/* Seconds to copy from to to and fsync it: what cp and sync do, the disk's speed a writer is set against. */
static inline double bench_copy_file(const char *from, const char *to) {
  static char buf[1 << 20];
  double t0 = bench_now();
  int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ssize_t n;
  if (in < 0 || out < 0) { perror("copy"); exit(1); }
  while ((n = read(in, buf, sizeof buf)) > 0) if (write(out, buf, (size_t)n) != n) { perror("write"); exit(1); }
  if (fsync(out) != 0) { perror("fsync"); exit(1); }
  close(in);
  close(out);
  return bench_now() - t0;
}
#endif
#endif
