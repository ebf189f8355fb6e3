/* tests/test_train_fastmath.c - built with -Ofast (-ffast-math), where the compiler may assume that
   no value is NaN or infinite and fold isnan()/isinf() to 0: train.h's bit-pattern test must still
   catch a NaN or an infinite training loss, and tr_count_nonfinite (the NaN/Inf scan of the per-step
   math) must still count them in a gradient buffer. Returns nonzero on failure. */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include <stdio.h>
#include <string.h>

static float P[1], G[1], X[4] = { 1, 2, 3, 4 };
static uint64_t bad_bits; /* the loss pattern of call `bad_at` */
static int calls, bad_at = 2;

static int forward(void *user, void *batch, int training, double *loss) {
  float x = *(const float *)batch;
  (void)user;
  (void)training;
  *loss = (double)(P[0] * x - x) * (P[0] * x - x);
  if (calls++ == bad_at) memcpy(loss, &bad_bits, sizeof *loss); /* arithmetic here could be folded */
  return 0;
}
static int backward(void *user, void *batch) { (void)user; G[0] += *(const float *)batch; return 0; }
static int64_t count(void *user) { (void)user; return 4; }
static int get(void *user, int64_t i, void **batch) { (void)user; *batch = &X[i]; return 0; }

static int run(uint64_t bits, const char *name) {
  tr_trainer t;
  tr_data data = { .count = count, .get = get };
  tr_err e;
  if (tr_init(&t, &(tr_desc){ .model = { .params = P, .grads = G, .n_params = 1, .forward = forward, .backward = backward } }) != TR_OK)
    return 1;
  bad_bits = bits;
  calls = 0;
  e = tr_fit(&t, &(tr_config){ .train = &data, .max_epochs = 1, .no_sigint = 1 });
  if (e != TR_ERR_NONFINITE || t.global_step != 2) {
    printf("test_train_fastmath: %s loss not caught (%s, step %lld)\n", name, tr_err_name(e), (long long)t.global_step);
    tr_free(&t);
    return 1;
  }
  printf("test_train_fastmath: %s loss caught: %s\n", name, tr_error(&t));
  tr_free(&t);
  return 0;
}

/* The scan, over a buffer long enough for its vector blocks, chunks and threads, with the bit
   patterns written in (arithmetic that makes them could be folded under -ffast-math). */
static int scan(void) {
  static float g[70000];
  static const uint32_t odd[] = { 0x7fc00000u, 0xff800000u, 0x7f800000u, 0x7f800001u, 0xffffffffu };
  size_t i, got;
  for (i = 0; i < 70000; i++) g[i] = (float)i * 0.5f;
  for (i = 0; i < 5; i++) memcpy(&g[i * 13001 + 7], &odd[i], sizeof odd[i]);
  got = tr_count_nonfinite(g, 70000, 2);
  printf("test_train_fastmath: tr_count_nonfinite found %zu of 5 non-finite values\n", got);
  return got != 5;
}

int main(void) {
  int bad = scan();
#ifndef __FAST_MATH__
  printf("test_train_fastmath: warning: not built with -ffast-math\n");
#endif
  bad |= run(0x7ff8000000000000ull, "NaN");
  bad |= run(0xfff0000000000000ull, "-inf");
  bad |= run(0x7ff0000000000001ull, "signalling NaN");
  return bad;
}
