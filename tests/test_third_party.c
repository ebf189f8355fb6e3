/* tests/test_third_party.c - train.h drives a model and a data loader it does not own, the way an
   llm.c-style program has them: the model allocates its gradient buffer on the first backward (so
   tr_init gets none), and the data comes from an iterator with a cursor (next(), reset(), and the
   cursor saved in checkpoints) instead of "get batch i".

   Built by tests/train.mk (plain, ASan+UBSan, valgrind). */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"


/* ---- the "third-party" model: y = w.x + b, gradients allocated late, llm.c style ---------------- */
enum { D = 6, NP = D + 1, B = 4, TOKENS = 4096 };
typedef struct ext_model {
  float params[NP];
  float *grads;           /* NULL until ext_alloc_grads (llm.c: on the first backward) */
  float x[B][D], y[B];    /* the batch of the last forward */
} ext_model;

static void ext_alloc_grads(ext_model *m) { if (!m->grads) m->grads = (float *)calloc(NP, sizeof(float)); }

static int ext_forward(void *user, void *batch, int training, double *loss) {
  ext_model *m = (ext_model *)user;
  const float *data = (const float *)batch;
  double l = 0;
  int i, j;
  (void)training;
  for (i = 0; i < B; i++) {
    float p = m->params[D];
    for (j = 0; j < D; j++) p += m->params[j] * (m->x[i][j] = data[i * (D + 1) + j]);
    m->y[i] = data[i * (D + 1) + D];
    l += (double)(p - m->y[i]) * (p - m->y[i]) / B;
  }
  *loss = l;
  return 0;
}
static int ext_backward(void *user, void *batch) {
  ext_model *m = (ext_model *)user;
  int i, j;
  (void)batch;
  for (i = 0; i < B; i++) {
    float p = m->params[D], e;
    for (j = 0; j < D; j++) p += m->params[j] * m->x[i][j];
    e = 2 * (p - m->y[i]) / B;
    for (j = 0; j < D; j++) m->grads[j] += e * m->x[i][j];
    m->grads[D] += e;
  }
  return 0;
}

/* configure_model: the adapter lets the model allocate, then hands the buffer to the trainer. */
static hk_signal hand_over_grads(hk_ctx *ctx, void *user) {
  ext_model *m = (ext_model *)user;
  ext_alloc_grads(m);
  return tr_set_buffers((tr_trainer *)ctx->trainer, NULL, m->grads) ? hk_fail(ctx, "tr_set_buffers failed") : HK_CONTINUE;
}

/* ---- the "third-party" loader: a cursor over a token stream, llm.c's DataLoader shape --------- */
typedef struct ext_loader {
  float *tokens;          /* TOKENS rows of D inputs + 1 target */
  int64_t cursor;         /* the next row */
  int resets, nexts;
} ext_loader;

static int64_t ext_count(void *user) { (void)user; return 10; }
static int ext_next(void *user, void **batch) {
  ext_loader *l = (ext_loader *)user;
  if (l->cursor + B > TOKENS) l->cursor = 0; /* wrap, as llm.c's loader moves to the next shard */
  *batch = l->tokens + l->cursor * (D + 1);
  l->cursor += B + (l->cursor % 3 == 0); /* an irregular stride: positions are not a function of the index */
  l->nexts++;
  return 0;
}
static int ext_reset(void *user) { ext_loader *l = (ext_loader *)user; l->cursor = 0; l->resets++; return 0; }
static int ext_save(void *user, hk_bytes *out) {
  return hk_bytes_put(out, &((ext_loader *)user)->cursor, sizeof(int64_t));
}
static int ext_load(void *user, hk_reader *in) {
  int64_t c;
  if (hk_read(in, &c, sizeof c) || in->pos != in->len || c < 0 || c > TOKENS) return -1;
  ((ext_loader *)user)->cursor = c;
  return 0;
}

static void ext_loader_init(ext_loader *l) {
  uint32_t s = 7;
  int i, j;
  memset(l, 0, sizeof *l);
  l->tokens = (float *)malloc(sizeof(float) * TOKENS * (D + 1));
  for (i = 0; i < TOKENS; i++) {
    float y = 0.5f;
    for (j = 0; j < D; j++) {
      s = s * 1664525u + 1013904223u;
      l->tokens[i * (D + 1) + j] = (float)(s >> 8) / 16777216.0f - 0.5f;
      y += (float)(j + 1) * 0.1f * l->tokens[i * (D + 1) + j];
    }
    l->tokens[i * (D + 1) + D] = y;
  }
}

static int ext_get(void *user, int64_t i, void **batch) { (void)user; (void)i; (void)batch; return 1; }

static tr_data ext_data(ext_loader *l) {
  tr_data d = { .user = l, .count = ext_count, .next = ext_next, .reset = ext_reset, .save_state = ext_save,
                .load_state = ext_load, .batch_size = B };
  return d;
}

/* One trainer around the external model; grads come late. */
static tr_err ext_trainer(tr_trainer *t, ext_model *m, int hand_over) {
  tr_desc desc;
  tr_err e;
  memset(&desc, 0, sizeof desc);
  desc.model.params = m->params;
  desc.model.grads = NULL; /* not allocated yet */
  desc.model.n_params = NP;
  desc.model.user = m;
  desc.model.forward = ext_forward;
  desc.model.backward = ext_backward;
  desc.optim.kind = TR_OPTIM_SGD;
  desc.optim.lr = 0.05;
  desc.optim.momentum = 0.9;
  desc.seed = 3;
  e = tr_init(t, &desc);
  if (!e && hand_over) e = hk_on(t->reg, HK_CONFIGURE_MODEL, hand_over_grads, m, NULL, NULL) ? TR_ERR_INVALID : TR_OK;
  return e;
}

static hk_signal count_exceptions(hk_ctx *ctx, void *user) { (void)ctx; ++*(int *)user; return HK_CONTINUE; }

/* Without a gradient buffer, fit fails with a message that says how to provide one. */
static void test_grads_missing(void **state) {
  ext_model m;
  ext_loader l;
  tr_trainer t;
  tr_data d;
  tr_config c;
  int exceptions = 0;
  (void)state;
  memset(&m, 0, sizeof m);
  ext_loader_init(&l);
  d = ext_data(&l);
  assert_int_equal(ext_trainer(&t, &m, 0), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_EXCEPTION, count_exceptions, &exceptions, NULL, NULL), HK_OK);
  memset(&c, 0, sizeof c);
  c.train = &d;
  c.max_steps = 3;
  assert_int_equal(tr_fit(&t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&t), "model.grads is not set"));
  assert_non_null(strstr(tr_error(&t), "tr_set_buffers"));
  assert_int_equal(exceptions, 1);
  assert_int_equal(l.nexts, 0); /* refused before the first batch */
  tr_free(&t);
  free(l.tokens);
}

/* Handed over in configure_model, the model trains; the iterator is reset once per epoch. */
static void test_grads_late_and_iterator(void **state) {
  ext_model m;
  ext_loader l;
  tr_trainer t;
  tr_data d;
  tr_config c;
  double first = 0, last = 0;
  (void)state;
  memset(&m, 0, sizeof m);
  ext_loader_init(&l);
  d = ext_data(&l);
  assert_int_equal(ext_trainer(&t, &m, 1), TR_OK);
  memset(&c, 0, sizeof c);
  c.train = &d;
  c.max_epochs = 1;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  first = t.ctx.loss;
  c.max_epochs = 30;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  last = t.ctx.loss;
  assert_true(last < first / 10);
  assert_int_equal(l.resets, 30);
  assert_int_equal(l.nexts, 300);
  assert_true(t.ctx.grads[0].data == m.grads); /* the views follow the handed-over buffer */
  /* a buffer cannot change in the middle of an accumulation window; a refusal changes nothing */
  t.tr__accum_pos = 1;
  assert_int_equal(tr_set_buffers(&t, NULL, m.grads), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&t), "accumulation window"));
  t.tr__accum_pos = 0;
  tr_free(&t);
  free(m.grads);
  free(l.tokens);
}

/* Data with both access shapes, or neither, or half of the state pair, is refused up front. */
static void test_data_shapes(void **state) {
  ext_model m;
  ext_loader l;
  tr_trainer t;
  tr_data d;
  tr_config c;
  (void)state;
  memset(&m, 0, sizeof m);
  ext_loader_init(&l);
  assert_int_equal(ext_trainer(&t, &m, 1), TR_OK);
  memset(&c, 0, sizeof c);
  c.train = &d;
  d = ext_data(&l);
  d.get = ext_get; /* never called: refused first */
  assert_int_equal(tr_fit(&t, &c), TR_ERR_INVALID);
  assert_string_equal(tr_error(&t), "tr_fit: config.train needs count, and get or next (one of them)");
  d.get = NULL;
  d.next = NULL;
  assert_int_equal(tr_fit(&t, &c), TR_ERR_INVALID);
  d = ext_data(&l);
  d.load_state = NULL;
  assert_int_equal(tr_fit(&t, &c), TR_ERR_INVALID);
  assert_string_equal(tr_error(&t), "tr_fit: config.train has only one of save_state/load_state; give both or neither");
  assert_int_equal(tr_validate(&t, &d, 0, NULL), TR_OK); /* evaluation only needs next */
  assert_int_equal(l.resets, 1);                         /* an evaluation starts from the beginning */
  tr_free(&t);
  free(m.grads);
  free(l.tokens);
}


/* Exact resume with an iterator: 2N steps straight equal N steps, a checkpoint, and N more steps in a
   new trainer with a new model and a new loader (cursor 0) - bit for bit, and the loader ends at the
   same position. Once with the checkpoint saved after tr_fit returned (the position kept at the
   fit's end), once saved by a request in the middle of the fit (the position asked live). */
static hk_signal request_save_at_7(hk_ctx *ctx, void *user) {
  (void)user;
  if (ctx->global_step == 7) hk_request(ctx, HK_REQUEST_CHECKPOINT);
  return HK_CONTINUE;
}
static void run_steps(ext_model *m, ext_loader *l, int64_t steps, const char *resume, const char *save, int request) {
  tr_trainer t;
  tr_data d = ext_data(l);
  tr_config c;
  memset(&c, 0, sizeof c);
  c.train = &d;
  c.max_steps = steps;
  c.resume_from = resume;
  c.save_to = request ? save : NULL;
  assert_int_equal(ext_trainer(&t, m, 1), TR_OK);
  if (request) assert_int_equal(hk_on(t.reg, HK_ON_TRAIN_BATCH_END, request_save_at_7, NULL, NULL, NULL), HK_OK);
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  if (save && !request) assert_int_equal(tr_save(&t, save), TR_OK);
  tr_free(&t);
}
static void test_iterator_resume(void **state) {
  char path[64];
  int request;
  (void)state;
  snprintf(path, sizeof path, "/tmp/test_third_party_%d.ckpt", (int)getpid());
  for (request = 0; request <= 1; request++) {
    ext_model straight, resumed;
    ext_loader l1, l2, l3;
    memset(&straight, 0, sizeof straight);
    memset(&resumed, 0, sizeof resumed);
    ext_loader_init(&l1);
    ext_loader_init(&l2);
    ext_loader_init(&l3);
    run_steps(&straight, &l1, 14, NULL, NULL, 0);                  /* 14 steps: epoch 1, batch 4 */
    run_steps(&resumed, &l2, request ? 8 : 7, NULL, path, request); /* saved at step 7, mid-epoch */
    free(resumed.grads);
    memset(&resumed, 0, sizeof resumed);                           /* a new process: nothing kept */
    run_steps(&resumed, &l3, 14, path, NULL, 0);
    assert_memory_equal(straight.params, resumed.params, sizeof straight.params);
    assert_true(l1.cursor == l3.cursor);
    assert_int_equal(l3.resets, 1); /* only epoch 1's start: the resumed epoch 0 kept its position */
    free(straight.grads);
    free(resumed.grads);
    free(l1.tokens);
    free(l2.tokens);
    free(l3.tokens);
  }
  remove(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_grads_missing),
    cmocka_unit_test(test_grads_late_and_iterator),
    cmocka_unit_test(test_data_shapes),
    cmocka_unit_test(test_iterator_resume),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
