/* zc.h - shared declarations of the zero-cost test (tests/zero_cost/run.sh). */
#ifndef ZC_H
#define ZC_H
#include "hooks.h"

/* The registry is an extern global, defined in another translation unit, so the compiler cannot
   know that armed[] is zero and fold the guard away. */
extern hk_registry *zc_reg;

/* The measured function: n iterations of a trainer-like step with (or without) one hook site. */
void zc_step(hk_ctx *ctx, long n);

/* Defined in zc_main.c (another translation unit): a value worth computing only for a hook. */
double zc_expensive(const hk_ctx *ctx);

/* The hand-written loop's table (ZC_SITE=3): n function pointers, what a loop without hooks.h would
   call; defined in zc_main.c. */
#define ZC_MAX_FNS 16
typedef struct zc_table { int n; hk_fn fn[ZC_MAX_FNS]; void *user[ZC_MAX_FNS]; } zc_table;
extern zc_table zc_tbl;

#endif
