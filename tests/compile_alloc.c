/* tests/compile_alloc.c - HOOKS_REALLOC / HOOKS_FREE / HOOKS_ASSERT overrides (compile matrix).
   Every allocation of the library must go through the user's pair: this counts live blocks and
   checks that a full create/register/dispatch/spec/destroy cycle ends with none left, and that the
   pair was used at all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long live_blocks, realloc_calls, assert_calls;
static void *my_realloc(void *p, size_t n) {
  void *q;
  realloc_calls++;
  if (n == 0) { if (p) live_blocks--; free(p); return NULL; }
  q = realloc(p, n);
  if (q && !p) live_blocks++;
  return q;
}
static void my_free(void *p) { if (p) live_blocks--; free(p); }
static int my_assert(int c) { assert_calls++; if (!c) { fprintf(stderr, "HOOKS_ASSERT failed\n"); abort(); } return 1; }

#define HOOKS_REALLOC(p, n) my_realloc((p), (n))
#define HOOKS_FREE(p) my_free(p)
#define HOOKS_ASSERT(c) ((void)my_assert(!!(c)))
#define HOOKS_IMPLEMENTATION
#include "hooks.h"

static hk_signal noop(hk_ctx *ctx, void *user) { (void)user; hk_metric_set(ctx, "x", 1.0); return HK_CONTINUE; }
static hk_err make(hk_registry *reg, const hk_args *a, void *user) {
  hk_opts o;
  (void)user;
  memset(&o, 0, sizeof o);
  o.name = hk_arg_str(a, "name");
  return hk_on(reg, HK_ON_TRAIN_BATCH_END, noop, NULL, &o, NULL);
}

int main(void) {
  static const hk_param params[] = { { "name", HK_PARAM_STRING, NULL, NULL, "hook name" } };
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  int i, ev = -1;
  char name[32];
  if (!reg) return 1;
  memset(&ctx, 0, sizeof ctx);
  for (i = 0; i < 40; i++) {
    hk_opts o;
    memset(&o, 0, sizeof o);
    snprintf(name, sizeof name, "h%d", i);
    o.name = name;
    if (hk_on(reg, i % 2 ? HK_ON_TRAIN_BATCH_END : HK_ON_TRAIN_BATCH_START, noop, NULL, &o, NULL) != HK_OK) return 2;
  }
  if (hk_event_define(reg, "my_event", 0, &ev) != HK_OK) return 3;
  if (hk_factory_add(reg, "maker", params, 1, make, NULL, "makes one hook") != HK_OK) return 4;
  if (hk_spec_apply(reg, "maker(name=a); maker(name=b)") != HK_OK) return 5;
  if (hk_spec_apply(reg, "maker(name=c); maker(name=a)") == HK_OK) return 6; /* duplicate: undone */
  if (hk_spec_apply(reg, "maker(nam=c)") != HK_ERR_SPEC) return 7;
  (void)HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx);
  (void)HK_FIRE(reg, HK_ON_TRAIN_BATCH_START, &ctx);
  for (i = 0; i < 40; i += 3) { snprintf(name, sizeof name, "h%d", i); hk_off(reg, hk_find(reg, name)); }
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  if (realloc_calls == 0) { fprintf(stderr, "HOOKS_REALLOC was never used\n"); return 8; }
  if (live_blocks != 0) { fprintf(stderr, "%ld blocks from HOOKS_REALLOC not released through HOOKS_FREE\n", live_blocks); return 9; }
  printf("compile_alloc.c (HOOKS_REALLOC/HOOKS_FREE: %ld calls, 0 live; HOOKS_ASSERT: %ld checks): ok\n",
         realloc_calls, assert_calls);
  return 0;
}
