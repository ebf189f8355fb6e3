/* tests/test_own_loop.c - cmocka tests of what hooks.h gives a hand-written loop: hk_flow and
   HK_FIRE_FLOW (sticky, degraded signals), hk_grad_norm (cached until hk_grads_changed), and the
   bit-level finite checks. Built by tests/own_loop.mk: plain, ASan+UBSan, valgrind. */
#define TEST_HOOKS_ONLY
#include "test.h"

static void quiet(const char *msg, void *user) { (void)msg; (void)user; }
static hk_registry *mkreg(void) {
  hk_desc d;
  memset(&d, 0, sizeof d);
  d.log = quiet;
  return hk_create(&d);
}

static hk_signal ret_sig(hk_ctx *ctx, void *user) { (void)ctx; return *(hk_signal *)user; }

/* HK_FIRE_FLOW degrades to what the event honours and ORs it in; the masks imply weaker decisions. */
static void test_flow_signals(void **state) {
  hk_registry *reg = mkreg();
  hk_ctx ctx;
  hk_flow flow = { 0 };
  hk_signal sig = HK_SKIP_STEP;
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_START, ret_sig, &sig, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, ret_sig, &sig, NULL, NULL), HK_OK);

  /* nothing registered on the event: nothing happens */
  assert_int_equal(HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_START, &ctx, &flow), HK_CONTINUE);
  assert_int_equal(flow.signals, 0);

  assert_int_equal(HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow), HK_SKIP_STEP);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP));
  assert_false(HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH));
  assert_false(HK_FLOW_HAS(&flow, HK_FLOW_STOP_EPOCH));

  /* on_train_batch_end does not honour skip_step: it degrades to continue and adds nothing */
  hk_flow_clear(&flow, HK_FLOW_BATCH_SIGNALS);
  assert_int_equal(HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow), HK_CONTINUE);
  assert_int_equal(flow.signals, 0);

  /* skip_batch implies skip_step; stop implies stop_epoch; a held stop survives clearing a batch */
  sig = HK_SKIP_BATCH;
  (void)HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP));
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH));
  sig = HK_STOP;
  (void)HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_STOP_EPOCH));
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_STOP));
  assert_false(HK_FLOW_HAS(&flow, HK_FLOW_FAIL));
  hk_flow_clear(&flow, HK_FLOW_EPOCH_SIGNALS);
  assert_false(HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH));
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_STOP));

  /* the loop raises its own decisions into the same flow; a fail implies every skip and stop */
  flow.signals = 0;
  hk_flow_raise(&flow, HK_CONTINUE);
  assert_int_equal(flow.signals, 0);
  hk_flow_raise(&flow, HK_FAIL);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP) && HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH) &&
              HK_FLOW_HAS(&flow, HK_FLOW_STOP_EPOCH) && HK_FLOW_HAS(&flow, HK_FLOW_STOP));
  hk_ctx_free(&ctx);
  hk_destroy(reg);
}

/* A hook's failure reaches the flow as HK_FAIL and the message as ctx->hook_failure. */
static hk_signal failing(hk_ctx *ctx, void *user) { (void)user; return hk_fail(ctx, "loss is %g", ctx->loss); }
static void test_flow_fail(void **state) {
  hk_registry *reg = mkreg();
  hk_ctx ctx;
  hk_flow flow = { 0 };
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  ctx.loss = 7;
  assert_int_equal(hk_on(reg, HK_ON_AFTER_BACKWARD, failing, NULL, &(hk_opts){ .name = "guard" }, NULL), HK_OK);
  assert_int_equal(HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, &ctx, &flow), HK_FAIL);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_FAIL));
  assert_non_null(ctx.hook_failure);
  assert_non_null(strstr(ctx.hook_failure, "'guard'"));
  assert_non_null(strstr(ctx.hook_failure, "on_after_backward: loss is 7"));
  /* teardown honours no signal: a failure there is reported, not acted on */
  flow.signals = 0;
  assert_int_equal(hk_on(reg, HK_TEARDOWN, failing, NULL, &(hk_opts){ .name = "td" }, NULL), HK_OK);
  assert_int_equal(HK_FIRE_FLOW(reg, HK_TEARDOWN, &ctx, &flow), HK_CONTINUE);
  assert_int_equal(flow.signals, 0);
  /* a user-defined event honours everything */
  {
    int ev;
    hk_signal sig = HK_STOP_EPOCH;
    assert_int_equal(hk_event_define(reg, "on_my_event", 0, &ev), HK_OK);
    assert_int_equal(hk_on(reg, ev, ret_sig, &sig, NULL, NULL), HK_OK);
    assert_int_equal(HK_FIRE_FLOW(reg, ev, &ctx, &flow), HK_STOP_EPOCH);
    assert_true(HK_FLOW_HAS(&flow, HK_FLOW_STOP_EPOCH));
  }
  /* a NULL flow is allowed (the signal is still returned) */
  assert_int_equal(hk__dispatch_flow(reg, HK_ON_AFTER_BACKWARD, &ctx, NULL), HK_FAIL);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
}

/* hk_grad_norm: over every view, cached until hk_grads_changed; hk_grad_norm_set hands one over. */
static void test_grad_norm(void **state) {
  float a[3] = { 3, 0, 0 }, b[2] = { 0, 4 };
  hk_tensor g[2] = { { "a", a, 3, 0 }, { "b", b, 2, 0 } };
  hk_ctx ctx;
  double v = 0;
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  ctx.grads = g;
  ctx.n_tensors = 2;
  assert_true(hk_grad_norm(&ctx) == 5.0);
  a[0] = 0; /* not announced: the cached value stays (that is the point of the cache) */
  assert_true(hk_grad_norm(&ctx) == 5.0);
  hk_grads_changed(&ctx);
  assert_true(hk_grad_norm(&ctx) == 4.0);
  hk_grad_norm_set(&ctx, 42.0);
  assert_true(hk_grad_norm(&ctx) == 42.0);
  /* through the metrics map, lazily */
  assert_int_equal(hk_metric_lazy(&ctx, "grad_norm", hk_grad_norm_metric, NULL), HK_OK);
  hk_grads_changed(&ctx);
  assert_int_equal(hk_metric_get(&ctx, "grad_norm", &v), 1);
  assert_true(v == 4.0);
  /* device memory cannot be read here: NaN unless the loop set the value */
  g[1].on_device = 1;
  hk_grads_changed(&ctx);
  assert_false(hk_is_finite(hk_grad_norm(&ctx)));
  hk_grad_norm_set(&ctx, 1.5);
  assert_true(hk_grad_norm(&ctx) == 1.5);
  /* no views at all: 0; no context: NaN */
  ctx.n_tensors = 0;
  hk_grads_changed(&ctx);
  assert_true(hk_grad_norm(&ctx) == 0.0);
  assert_false(hk_is_finite(hk_grad_norm(NULL)));
  hk_ctx_free(&ctx);
}

/* The finite checks look at the bits. (This file is built without -ffast-math; the -Ofast build of
   tests/ofast_loop.c shows the guard still fires there.) */
static void test_finite_bits(void **state) {
  volatile double zero = 0.0;
  double inf = 1.0 / zero, nan_d = zero / zero;
  float inff = (float)inf, nanf_ = (float)nan_d;
  (void)state;
  assert_false(hk_is_finite(inf));
  assert_false(hk_is_finite(-inf));
  assert_false(hk_is_finite(nan_d));
  assert_true(hk_is_finite(1.7976931348623157e308));
  assert_true(hk_is_finite(-0.0));
  assert_true(hk_is_finite(4.9e-324)); /* the smallest denormal */
  assert_false(hk_is_finitef(inff));
  assert_false(hk_is_finitef(-inff));
  assert_false(hk_is_finitef(nanf_));
  assert_true(hk_is_finitef(3.4028235e38f));
  assert_true(hk_is_finitef(1e-45f));
  assert_true(hk_is_finitef(0.0f));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_flow_signals),
    cmocka_unit_test(test_flow_fail),
    cmocka_unit_test(test_grad_norm),
    cmocka_unit_test(test_finite_bits),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
