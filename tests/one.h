/* tests/one.h - a model of one parameter, loss p^2 (gradient 2p), over ONE_BATCHES batches (define it first): what
   test_watchdog.c and watchdog_mpi.c train. Data and model take a one * as user. */
#ifndef TESTS_ONE_H
#define TESTS_ONE_H
typedef struct one { float p[1], g[1]; } one;
static const tr_tensor one_tensors[] = { { "p", 0, 1 } };
static int one_forward(void *u, void *batch, int training, double *loss) {
  one *m = (one *)u;
  (void)batch; (void)training;
  *loss = (double)m->p[0] * m->p[0];
  return 0;
}
static int one_backward(void *u, void *batch) { one *m = (one *)u; (void)batch; m->g[0] += 2 * m->p[0]; return 0; }
static int64_t one_count(void *u) { (void)u; return ONE_BATCHES; }
static int one_get(void *u, int64_t i, void **batch) { (void)u; *batch = (void *)(intptr_t)i; return 0; }
#endif
