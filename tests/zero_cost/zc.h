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

#endif
