/* bench.h - shared declarations of bench_hooks (see bench_hooks.c). */
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

#endif
