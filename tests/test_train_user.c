/* tests/test_train_user.c - train.h used from a translation unit without its implementation (that
   is in tests/test_train_impl.c), compiled as C and as C++ by `make test-train-compile`.
   Fits y = 2x + 1 with SGD, saves, perturbs, loads, and checks the result; returns nonzero on a
   mismatch. With -DHK_DISABLE the hook below never runs; with -DTEST_TRAIN_STATIC this TU carries
   its own static copy of train.h's implementation. */
#ifdef TEST_TRAIN_STATIC
#  define TRAIN_STATIC
#  define TRAIN_IMPLEMENTATION
#  define TRAIN_HOOKS_ELSEWHERE /* hooks.h's implementation is in test_train_impl.c */
#endif
#include "train.h"
#include <stdio.h>
#include <string.h>

static float P[2], G[2], X[8], R;
static float last_x;

static int forward(void *user, void *batch, int training, double *loss) {
  float x = *(const float *)batch;
  (void)user;
  (void)training;
  R = P[0] * x + P[1] - (2.0f * x + 1.0f);
  last_x = x;
  *loss = (double)R * R;
  return 0;
}
static int backward(void *user, void *batch) {
  (void)user;
  (void)batch;
  G[0] += 2.0f * R * last_x;
  G[1] += 2.0f * R;
  return 0;
}
static int64_t count(void *user) { (void)user; return 8; }
static int get(void *user, int64_t i, void **batch) { (void)user; *batch = &X[i]; return 0; }

static int fired;
static hk_signal on_end(hk_ctx *ctx, void *user) { (void)ctx; (void)user; fired++; return HK_CONTINUE; }

/* argv[1]: where to write the checkpoint (inside the build directory). */
int main(int argc, char **argv) {
  const char *ckpt = argc > 1 ? argv[1] : "test_train_user.ckpt";
  tr_trainer t;
  tr_desc d;
  tr_config c;
  tr_data data;
  double loss = 1;
  float saved[2];
  int i;
  for (i = 0; i < 8; i++) X[i] = (float)i / 8.0f;
  memset(&d, 0, sizeof d);
  d.model.params = P;
  d.model.grads = G;
  d.model.n_params = 2;
  d.model.forward = forward;
  d.model.backward = backward;
  d.optim.kind = TR_OPTIM_SGD;
  d.optim.lr = 0.05;
  d.optim.momentum = 0.9;
  if (tr_init(&t, &d) != TR_OK) { printf("tr_init: %s\n", tr_error(&t)); return 1; }
  hk_on(t.reg, HK_ON_TRAIN_EPOCH_END, on_end, NULL, NULL, NULL);
  memset(&data, 0, sizeof data);
  data.count = count;
  data.get = get;
  memset(&c, 0, sizeof c);
  c.train = &data;
  c.val = &data;
  c.max_epochs = 60;
  c.no_sigint = 1;
  if (tr_fit(&t, &c) != TR_OK) { printf("tr_fit: %s\n", tr_error(&t)); return 1; }
  if (tr_validate(&t, &data, 0, &loss) != TR_OK || loss > 1e-3) { printf("loss %g\n", loss); return 1; }
#ifdef HK_DISABLE
  if (fired != 0) { printf("a hook ran under HK_DISABLE\n"); return 1; }
#else
  if (fired != 60) { printf("on_train_epoch_end fired %d times\n", fired); return 1; }
#endif
  memcpy(saved, P, sizeof saved);
  if (tr_save(&t, ckpt) != TR_OK) { printf("tr_save: %s\n", tr_error(&t)); return 1; }
  P[0] = P[1] = 0;
  if (tr_load(&t, ckpt) != TR_OK) { printf("tr_load: %s\n", tr_error(&t)); return 1; }
  if (memcmp(saved, P, sizeof saved) != 0 || t.global_step != 480) { printf("restore differs\n"); return 1; }
  remove(ckpt);
  tr_free(&t);
  printf("test_train_user: ok (w=%.4f b=%.4f, val loss %.2e)\n", P[0], P[1], loss);
  return 0;
}
