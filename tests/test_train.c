/* tests/test_train.c - train.h: hook order, optimizers against PyTorch's formulas (bit for bit
   against a plain float32 implementation, tests/ref_f32.c, and within bounds of a float64 one),
   schedules, signals, requests, the failure path, Ctrl-C, checkpoints (corruption, mismatch, hook
   state) and exact resume across processes.

   The binary re-runs itself (argv[0]) for the resume tests:
     test_train --phase NAME CKPT [OUT]     one half of a resumed run, see resume_child() */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"
#include "ref_f32.h"


static const char *g_self;  /* this binary, for the resume children */
static char g_dir[256];     /* a private temporary directory */

static void path_in_dir(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_dir, name); }

/* =================================================================================================
   A tiny model: linear regression y = w.x + b with a mean squared error.
   ================================================================================================= */
#define BS 4     /* samples per batch */
#define DMAX 8   /* largest input width */

typedef struct lin_batch { float x[BS][DMAX]; float y[BS]; } lin_batch;

typedef struct lin_model {
  int d;                    /* inputs; parameters are w[0..d-1] then b */
  float *p, *g;
  tr_tensor tensors[2];
  const char *names[2];
  float resid[BS], pred[BS];
  tr_trainer *t;            /* noise: backward adds 1e-3 * normal from t->rng (checks the RNG's resume) */
  int noise;
  int forward_calls, backward_calls, predict_calls;
  int nan_at;               /* forward call (0-based) whose loss is NaN; -1: never */
} lin_model;

static void lin_init(lin_model *m, int d, unsigned seed) {
  tr_rng r;
  int i;
  memset(m, 0, sizeof *m);
  m->d = d;
  m->p = (float *)calloc((size_t)d + 1, sizeof(float));
  m->g = (float *)calloc((size_t)d + 1, sizeof(float));
  m->names[0] = "w";
  m->names[1] = "b";
  m->tensors[0].name = m->names[0];
  m->tensors[0].offset = 0;
  m->tensors[0].count = (size_t)d;
  m->tensors[1].name = m->names[1];
  m->tensors[1].offset = (size_t)d;
  m->tensors[1].count = 1;
  m->nan_at = -1;
  tr_rng_seed(&r, seed);
  for (i = 0; i <= d; i++) m->p[i] = 0.1f * tr_rng_normal(&r);
}
static void lin_free(lin_model *m) { free(m->p); free(m->g); }

static int lin_forward(void *user, void *batch, int training, double *loss) {
  lin_model *m = (lin_model *)user;
  const lin_batch *bt = (const lin_batch *)batch;
  double sum = 0;
  int k, j;
  (void)training;
  for (k = 0; k < BS; k++) {
    float pr = m->p[m->d];
    for (j = 0; j < m->d; j++) pr += m->p[j] * bt->x[k][j];
    m->pred[k] = pr;
    m->resid[k] = pr - bt->y[k];
    sum += (double)m->resid[k] * m->resid[k];
  }
  *loss = sum / BS;
  if (m->forward_calls == m->nan_at) { /* a NaN made from bits: immune to -ffast-math folding */
    uint64_t bits = 0x7ff8000000000000ull;
    memcpy(loss, &bits, sizeof bits);
  }
  m->forward_calls++;
  return 0;
}

static int lin_backward(void *user, void *batch) {
  lin_model *m = (lin_model *)user;
  const lin_batch *bt = (const lin_batch *)batch;
  int k, j;
  for (k = 0; k < BS; k++) {
    float r2 = 2.0f * m->resid[k] / BS;
    for (j = 0; j < m->d; j++) m->g[j] += r2 * bt->x[k][j];
    m->g[m->d] += r2;
  }
  if (m->noise)
    for (j = 0; j <= m->d; j++) m->g[j] += 1e-3f * tr_rng_normal(&m->t->rng);
  m->backward_calls++;
  return 0;
}

static int lin_predict(void *user, void *batch, void **outputs) {
  lin_model *m = (lin_model *)user;
  double loss;
  lin_forward(user, batch, 0, &loss);
  m->forward_calls--;
  m->predict_calls++;
  *outputs = m->pred;
  return 0;
}

/* The data: n_batches * BS samples of y = w_true.x + 0.5, in an order the shuffle may change. */
typedef struct lin_data {
  int d, n;                 /* width, samples */
  float *x, *y;
  int64_t *perm;
  lin_batch batch;
  int gets;
} lin_data;

static void data_init(lin_data *s, int d, int n_batches, unsigned seed) {
  tr_rng r;
  int i, j;
  memset(s, 0, sizeof *s);
  s->d = d;
  s->n = n_batches * BS;
  s->x = (float *)calloc((size_t)s->n * (size_t)d, sizeof(float));
  s->y = (float *)calloc((size_t)s->n, sizeof(float));
  s->perm = (int64_t *)calloc((size_t)s->n, sizeof(int64_t));
  tr_rng_seed(&r, seed);
  for (i = 0; i < s->n; i++) {
    float y = 0.5f;
    for (j = 0; j < d; j++) {
      s->x[i * d + j] = tr_rng_normal(&r);
      y += (float)(j + 1) * 0.25f * s->x[i * d + j];
    }
    s->y[i] = y;
    s->perm[i] = i;
  }
}
static void data_free(lin_data *s) { free(s->x); free(s->y); free(s->perm); }

static int64_t data_count(void *user) { return ((lin_data *)user)->n / BS; }
static int data_get(void *user, int64_t index, void **batch) {
  lin_data *s = (lin_data *)user;
  int k, j;
  if (index < 0 || index >= s->n / BS) return 7;
  for (k = 0; k < BS; k++) {
    int64_t i = s->perm[index * BS + k];
    for (j = 0; j < s->d; j++) s->batch.x[k][j] = s->x[i * s->d + j];
    s->batch.y[k] = s->y[i];
  }
  s->gets++;
  *batch = &s->batch;
  return 0;
}
static void data_shuffle(void *user, tr_rng *rng) {
  lin_data *s = (lin_data *)user;
  tr_rng_perm(rng, s->perm, s->n);
}

static tr_data as_data(lin_data *s, int shuffle) {
  tr_data d;
  memset(&d, 0, sizeof d);
  d.user = s;
  d.count = data_count;
  d.get = data_get;
  d.shuffle = shuffle ? data_shuffle : NULL;
  d.batch_size = BS;
  return d;
}

static tr_model as_model(lin_model *m) {
  tr_model tm;
  memset(&tm, 0, sizeof tm);
  tm.params = m->p;
  tm.grads = m->g;
  tm.n_params = (size_t)m->d + 1;
  tm.tensors = m->tensors;
  tm.n_tensors = 2;
  tm.user = m;
  tm.forward = lin_forward;
  tm.backward = lin_backward;
  tm.predict = lin_predict;
  return tm;
}

/* =================================================================================================
   A probe: one callback on every event. It records the events' names in order and lets a test act
   (return a signal, request something, raise SIGINT) through `act`.
   ================================================================================================= */
typedef struct probe {
  char log[32768];
  size_t len;
  int calls[HK_EVENT_COUNT];
  hk_signal (*act)(struct probe *p, hk_ctx *ctx);
  int64_t arg, arg2;         /* for act */
  hk_stage stages[HK_EVENT_COUNT]; /* the stage seen the last time each event fired */
  char paths[HK_EVENT_COUNT][256];  /* ctx->path, the last time each event fired */
  char error_seen[512];
  double lr_seen[64];
  int n_lr;
} probe;

static hk_signal probe_fn(hk_ctx *ctx, void *user) {
  probe *p = (probe *)user;
  const char *name = hk_event_name(ctx->reg, ctx->event);
  size_t n = strlen(name);
  if (p->len + n + 2 < sizeof p->log) {
    memcpy(p->log + p->len, name, n);
    p->len += n;
    p->log[p->len++] = ' ';
    p->log[p->len] = 0;
  }
  p->calls[ctx->event]++;
  p->stages[ctx->event] = ctx->stage;
  snprintf(p->paths[ctx->event], sizeof p->paths[0], "%s", ctx->path ? ctx->path : "(null)");
  if (ctx->event == HK_ON_EXCEPTION && ctx->abort_reason) snprintf(p->error_seen, sizeof p->error_seen, "%s", ctx->abort_reason);
  if (ctx->event == HK_ON_TRAIN_BATCH_START && p->n_lr < 64) p->lr_seen[p->n_lr++] = ctx->lr;
  return p->act ? p->act(p, ctx) : HK_CONTINUE;
}

static hk_callback probe_callback(probe *p, const char *name) {
  hk_callback cb;
  memset(&cb, 0, sizeof cb);
  cb.name = name;
  cb.user = p;
#define X(NAME, name, pairing, signals, doc) cb.name = probe_fn;
  HK_EVENTS(X)
#undef X
  return cb;
}

static hk_signal noop_fn(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_CONTINUE; }

static hk_callback noop_callback(const char *name) {
  hk_callback cb;
  memset(&cb, 0, sizeof cb);
  cb.name = name;
#define X(NAME, name, pairing, signals, doc) cb.name = noop_fn;
  HK_EVENTS(X)
#undef X
  return cb;
}

/* hooks.h reports hook failures through this; the tests keep the last message. */
static char g_hk_log[1024];
static void quiet_log(const char *message, void *user) { (void)user; snprintf(g_hk_log, sizeof g_hk_log, "%s", message); }

/* =================================================================================================
   A fixture: model, data, trainer, probe.
   ================================================================================================= */
typedef struct fx {
  lin_model m;
  lin_data train, val;
  tr_data train_d, val_d;
  hk_registry *reg;
  tr_trainer t;
  probe p;
  memlog log;               /* the trainer's log (warnings, log requests) */
} fx;

static fx *fx_new(int n_train, int n_val, const tr_optim *optim, const tr_sched *sched, int with_probe) {
  fx *f = (fx *)calloc(1, sizeof(fx));
  tr_desc d;
  hk_desc hd;
  lin_init(&f->m, 4, 1);
  data_init(&f->train, 4, n_train, 2);
  data_init(&f->val, 4, n_val, 3);
  f->train_d = as_data(&f->train, 0);
  f->val_d = as_data(&f->val, 0);
  memset(&hd, 0, sizeof hd);
  hd.log = quiet_log;
  f->reg = hk_create(&hd);
  assert_non_null(f->reg);
  memlog_open(&f->log);
  memset(&d, 0, sizeof d);
  d.model = as_model(&f->m);
  d.reg = f->reg;
  if (optim) d.optim = *optim;
  if (sched) d.sched = *sched;
  d.seed = 42;
  d.log = f->log.f;
  assert_int_equal(tr_init(&f->t, &d), TR_OK);
  f->m.t = &f->t;
  if (with_probe) {
    hk_callback cb = probe_callback(&f->p, "probe");
    assert_int_equal(hk_add_callback(f->reg, &cb, NULL, NULL), HK_OK);
  }
  return f;
}

static const char *fx_logtext(fx *f) { return memlog_text(&f->log); }

static void fx_free(fx *f) {
  tr_free(&f->t);
  hk_destroy(f->reg);
  memlog_close(&f->log);
  lin_free(&f->m);
  data_free(&f->train);
  data_free(&f->val);
  free(f);
}

static tr_config fx_config(fx *f, int with_val) { return test_config(&f->train_d, with_val ? &f->val_d : NULL, 0); }

/* Events as they must appear, one name per word. */
static void assert_log(const probe *p, const char *expected) {
  if (strcmp(p->log, expected) != 0) {
    fprintf(stderr, "expected: %s\n     got: %s\n", expected, p->log);
    fail_msg("event sequence differs");
  }
}

#define TRAIN_BATCH_NO_CLIP "on_train_batch_start on_before_zero_grad on_before_backward on_after_backward " \
  "on_before_optimizer_step on_after_optimizer_step on_train_batch_end "
#define VALIDATION_1 "on_validation_start on_validation_epoch_start on_validation_batch_start " \
  "on_validation_batch_end on_validation_epoch_end on_log on_validation_end "

/* =================================================================================================
   Order
   ================================================================================================= */

/* fit: 1 epoch, 2 training batches, 1 validation batch, a 1-batch sanity check, clipping on. A
   callback-tier and a model-tier hook on every event, plus a monitoring callback on
   on_train_epoch_end registered first (it must still run after the model). The trace is compared
   line by line with the order of seeds/000 and lightning.md 2.3-2.7. */
static void test_order_fit_trace(void **state) {
  static const char *events[] = {
    "setup", "configure_model", "on_fit_start",
    "on_sanity_check_start",
      "on_validation_start", "on_validation_epoch_start", "on_validation_batch_start", "on_validation_batch_end",
      "on_validation_epoch_end", "on_validation_end",
    "on_sanity_check_end",
    "on_train_start",
    "on_train_epoch_start",
      "on_train_batch_start", "on_before_zero_grad", "on_before_backward", "on_after_backward",
      "on_before_optimizer_step", "on_gradient_clip", "on_after_optimizer_step", "on_train_batch_end",
      "on_train_batch_start", "on_before_zero_grad", "on_before_backward", "on_after_backward",
      "on_before_optimizer_step", "on_gradient_clip", "on_after_optimizer_step", "on_train_batch_end",
      "on_validation_start", "on_validation_epoch_start", "on_validation_batch_start", "on_validation_batch_end",
      "on_validation_epoch_end", "on_log", "on_validation_end",
    "on_train_epoch_end",
    "on_train_end", "on_fit_end", "teardown",
  };
  fx *f = fx_new(2, 1, NULL, NULL, 0);
  hk_callback mon, cb = noop_callback("cb"), model = noop_callback("model");
  hk_opts mon_opts, model_opts;
  tr_config c = fx_config(f, 1);
  char *trace = NULL, expected[16384];
  size_t trace_len = 0, n = 0, i;
  FILE *out = open_memstream(&trace, &trace_len);
  (void)state;
  memset(&mon, 0, sizeof mon); /* a monitoring callback with on_train_epoch_end only */
  mon.name = "monitor";
  mon.on_train_epoch_end = noop_fn;
  memset(&mon_opts, 0, sizeof mon_opts);
  mon_opts.monitor = 1;
  memset(&model_opts, 0, sizeof model_opts);
  model_opts.tier = HK_TIER_MODEL;
  assert_int_equal(hk_add_callback(f->reg, &mon, &mon_opts, NULL), HK_OK);
  assert_int_equal(hk_add_callback(f->reg, &model, &model_opts, NULL), HK_OK); /* registered before cb */
  assert_int_equal(hk_add_callback(f->reg, &cb, NULL, NULL), HK_OK);
  hk_trace(f->reg, HK_TRACE_LINES, out);
  c.max_epochs = 1;
  c.num_sanity_val_steps = 1;
  c.gradient_clip_val = 100.0;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  hk_trace(f->reg, HK_TRACE_OFF, NULL);
  fclose(out);

  expected[0] = 0;
  for (i = 0; i < sizeof events / sizeof events[0]; i++) {
    n += (size_t)snprintf(expected + n, sizeof expected - n, "%s callback cb\n%s model model\n", events[i], events[i]);
    if (!strcmp(events[i], "on_train_epoch_end"))
      n += (size_t)snprintf(expected + n, sizeof expected - n, "on_train_epoch_end callback monitor\n");
  }
  if (strcmp(trace, expected) != 0) {
    fprintf(stderr, "--- expected\n%s--- got\n%s", expected, trace);
    fail_msg("trace differs");
  }
  assert_int_equal(f->t.global_step, 2);
  assert_int_equal(f->t.epoch, 1);
  free(trace);
  fx_free(f);
}

/* Stages and the context seen by hooks. */
static void test_order_stages_and_ctx(void **state) {
  fx *f = fx_new(2, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 1);
  (void)state;
  c.max_epochs = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->p.stages[HK_SETUP], HK_STAGE_FIT);
  assert_int_equal(f->p.stages[HK_TEARDOWN], HK_STAGE_FIT);
  assert_int_equal(f->p.stages[HK_ON_SANITY_CHECK_START], HK_STAGE_SANITY_CHECK);
  assert_int_equal(f->p.stages[HK_ON_TRAIN_BATCH_END], HK_STAGE_FIT);
  assert_int_equal(f->p.stages[HK_ON_VALIDATION_END], HK_STAGE_FIT); /* the last one ran inside fit */
  /* sanity check: 1 batch (the data has 1); then the epoch's validation */
  assert_int_equal(f->p.calls[HK_ON_VALIDATION_BATCH_START], 2);
  assert_int_equal(f->t.samples_seen, 2 * BS);
  assert_int_equal(f->t.ctx.samples_seen, 2 * BS);
  assert_int_equal(f->t.running, HK_STAGE_NONE);
  assert_int_equal(tr_validate(&f->t, &f->val_d, 0, NULL), TR_OK);
  assert_int_equal(f->p.stages[HK_SETUP], HK_STAGE_VALIDATE);
  assert_int_equal(f->p.stages[HK_ON_VALIDATION_BATCH_END], HK_STAGE_VALIDATE);
  fx_free(f);
}

/* Gradient accumulation over 2 micro-batches, 5 batches: zero_grad on the first micro-batch of each
   window only, no optimizer hooks on the others, and the odd last batch closes its own window. */
static void test_order_accumulation(void **state) {
  fx *f = fx_new(5, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 0);
  (void)state;
  c.max_epochs = 1;
  c.accumulate_grad_batches = 2;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_log(&f->p,
    "setup configure_model on_fit_start on_train_start on_train_epoch_start "
    "on_train_batch_start on_before_zero_grad on_before_backward on_after_backward on_train_batch_end "
    "on_train_batch_start on_before_backward on_after_backward on_before_optimizer_step on_after_optimizer_step on_train_batch_end "
    "on_train_batch_start on_before_zero_grad on_before_backward on_after_backward on_train_batch_end "
    "on_train_batch_start on_before_backward on_after_backward on_before_optimizer_step on_after_optimizer_step on_train_batch_end "
    TRAIN_BATCH_NO_CLIP
    "on_train_epoch_end on_train_end on_fit_end teardown ");
  assert_int_equal(f->t.global_step, 3);
  assert_int_equal(f->m.backward_calls, 5);
  fx_free(f);
}

/* The accumulated gradient is the mean of the micro-batches' gradients: the same arithmetic done by
   hand (accumulate, then multiply by 0.5f) gives the same bits. */
static hk_signal grab_grads(probe *p, hk_ctx *ctx) {
  if (ctx->event == HK_ON_BEFORE_OPTIMIZER_STEP && p->arg2++ == 0) {
    float *out = (float *)(intptr_t)p->arg;
    memcpy(out, ctx->grads[0].data, 4 * sizeof(float));
    out[4] = ctx->grads[1].data[0];
  }
  return HK_CONTINUE;
}
static void test_accumulation_mean(void **state) {
  fx *f = fx_new(2, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 0);
  lin_model ref;
  float seen[5];
  double loss;
  void *b;
  int j;
  (void)state;
  lin_init(&ref, 4, 1); /* the fixture's model starts from the same parameters */
  for (j = 0; j < 2; j++) {
    data_get(&f->train, j, &b);
    lin_forward(&ref, b, 1, &loss);
    lin_backward(&ref, b);
  }
  for (j = 0; j < 5; j++) ref.g[j] *= 0.5f;
  f->p.act = grab_grads;
  f->p.arg = (int64_t)(intptr_t)seen;
  c.max_epochs = 1;
  c.accumulate_grad_batches = 2;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_memory_equal(seen, ref.g, sizeof seen);
  lin_free(&ref);
  fx_free(f);
}

/* issue 28 item 7: the epoch's short last window (5 batches, 3 per step: windows of 3 and 2). By default
   the sum is divided by accumulate_grad_batches, as Lightning divides every loss by it (the last step
   moves 2/3 as far as a full one); with accumulate_mean_of_window by the 2 it holds. Both against the
   same arithmetic by hand: sum the micro-batches' gradients, multiply by 1/divisor as a float, then
   PyTorch's SGD step (tests/ref_f32.c); the gradients at on_before_optimizer_step and the parameters
   after the fit, bit for bit. */
static hk_signal grab_window_grads(probe *p, hk_ctx *ctx) {
  if (ctx->event == HK_ON_BEFORE_OPTIMIZER_STEP && p->arg2 < 2) {
    float *out = (float *)(intptr_t)p->arg + 5 * p->arg2++;
    memcpy(out, ctx->grads[0].data, 4 * sizeof(float));
    out[4] = ctx->grads[1].data[0];
  }
  return HK_CONTINUE;
}
static void accumulation_by_hand(int mean_of_window, double lr, float grads[10], float params[5]) {
  static const int first[2] = { 0, 3 }, size[2] = { 3, 2 };
  lin_model ref;
  lin_data data;
  double loss;
  void *b;
  int w, j;
  lin_init(&ref, 4, 1);   /* fx_new's model and training data */
  data_init(&data, 4, 5, 2);
  for (w = 0; w < 2; w++) {
    float k = 1.0f / (float)(mean_of_window ? size[w] : 3);
    memset(ref.g, 0, 5 * sizeof(float));
    for (j = first[w]; j < first[w] + size[w]; j++) {
      data_get(&data, j, &b);
      lin_forward(&ref, b, 1, &loss);
      lin_backward(&ref, b);
    }
    for (j = 0; j < 5; j++) ref.g[j] *= k;
    memcpy(grads + 5 * w, ref.g, 5 * sizeof(float));
    ref_sgd_f32(ref.p, ref.g, NULL, 5, lr, 0, 0, 0, 0, 1);
  }
  memcpy(params, ref.p, 5 * sizeof(float));
  lin_free(&ref);
  data_free(&data);
}
static void test_accumulation_short_window(void **state) {
  float want[2][10], want_p[2][5];
  int mode, j;
  (void)state;
  for (mode = 0; mode < 2; mode++) {
    tr_optim sgd;
    fx *f;
    tr_config c;
    float seen[10];
    memset(&sgd, 0, sizeof sgd);
    sgd.kind = TR_OPTIM_SGD;
    sgd.lr = 0.05;
    f = fx_new(5, 1, &sgd, NULL, 1);
    c = fx_config(f, 0);
    accumulation_by_hand(mode, sgd.lr, want[mode], want_p[mode]);
    f->p.act = grab_window_grads;
    f->p.arg = (int64_t)(intptr_t)seen;
    c.max_epochs = 1;
    c.accumulate_grad_batches = 3;
    c.accumulate_mean_of_window = mode;
    assert_int_equal(tr_fit(&f->t, &c), TR_OK);
    assert_int_equal(f->t.global_step, 2);
    assert_int_equal(f->p.arg2, 2);
    assert_memory_equal(seen, want[mode], sizeof seen);
    assert_memory_equal(f->m.p, want_p[mode], sizeof want_p[mode]);
    fx_free(f);
  }
  /* the same full first window; the short one's gradient is 2/3 of its mean by default */
  assert_memory_equal(want[0], want[1], 5 * sizeof(float));
  for (j = 5; j < 10; j++) assert_float_equal(want[0][j], want[1][j] * 2.0f / 3.0f, 1e-6 * fabs(want[1][j]) + 1e-9);
}

/* Validation every 2 optimizer steps; the epoch-end validation is skipped when a step validation
   just ran after the last batch. */
static void test_order_val_every_n_steps(void **state) {
  fx *f = fx_new(3, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 1);
  (void)state;
  c.max_epochs = 2;
  c.num_sanity_val_steps = -1;
  c.val_every_n_steps = 2;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_log(&f->p,
    "setup configure_model on_fit_start on_train_start "
    "on_train_epoch_start " TRAIN_BATCH_NO_CLIP TRAIN_BATCH_NO_CLIP VALIDATION_1 TRAIN_BATCH_NO_CLIP
    VALIDATION_1 "on_train_epoch_end "                       /* step 3: epoch end validation */
    "on_train_epoch_start " TRAIN_BATCH_NO_CLIP VALIDATION_1 /* step 4 */
    TRAIN_BATCH_NO_CLIP TRAIN_BATCH_NO_CLIP VALIDATION_1     /* step 6 = last batch: no second one */
    "on_train_epoch_end on_train_end on_fit_end teardown ");
  fx_free(f);
}

/* issue 28 item 8: Lightning's integer val_check_interval counts training batches within each epoch from
   the epoch's start (training_epoch_loop.py, _should_check_val_fx: (batch_idx + 1) % val_check_batch == 0
   with check_val_every_n_epoch set; that test replaces the last-batch one, so the epoch's end validates
   only when N divides the epoch). 5 batches an epoch, N = 2, 2 epochs: after global batches 2, 4, 7, 9 (no
   validation at either epoch's end). val_every_n_steps = 2 counts optimizer steps over the run and adds the
   epoch's end: 2, 4, 5, 6, 8, 10. The steps each validation came after, one list per setting. */
typedef struct val_steps { int64_t at[32]; int n; } val_steps;
static hk_signal record_val_step(hk_ctx *ctx, void *user) {
  val_steps *v = (val_steps *)user;
  if (ctx->stage == HK_STAGE_FIT && v->n < 32) v->at[v->n++] = ctx->global_step;
  return HK_CONTINUE;
}
static hk_signal stop_at_step(probe *p, hk_ctx *ctx) {
  return ctx->event == HK_ON_TRAIN_BATCH_END && ctx->global_step == p->arg ? HK_STOP : HK_CONTINUE;
}
static void val_steps_of(int64_t check_interval, int64_t every_n_steps, int64_t every_n_epochs, int stop_at, val_steps *v,
                         tr_err expect, const char *error_part) {
  fx *f = fx_new(5, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 1);
  memset(v, 0, sizeof *v);
  assert_int_equal(hk_on(f->reg, HK_ON_VALIDATION_START, record_val_step, v, NULL, NULL), HK_OK);
  if (stop_at) { /* HK_STOP after this optimizer step */
    f->p.act = stop_at_step;
    f->p.arg = stop_at;
  }
  c.max_epochs = 2;
  c.num_sanity_val_steps = -1;
  c.val_check_interval = check_interval;
  c.val_every_n_steps = every_n_steps;
  c.val_every_n_epochs = every_n_epochs;
  assert_int_equal(tr_fit(&f->t, &c), expect);
  if (error_part) assert_non_null(strstr(tr_error(&f->t), error_part));
  fx_free(f);
}
static void assert_steps(const val_steps *v, const int64_t *want, int n) {
  int i;
  if (v->n != n) fail_msg("%d validations, want %d", v->n, n);
  for (i = 0; i < n; i++)
    if (v->at[i] != want[i]) fail_msg("validation %d after step %lld, want %lld", i, (long long)v->at[i], (long long)want[i]);
}
static void test_val_check_interval(void **state) {
  static const int64_t lightning[] = { 2, 4, 7, 9 }, global_steps[] = { 2, 4, 5, 6, 8, 10 }, divides[] = { 5, 10 },
                       second_epoch[] = { 7, 9 }, stopped[] = { 2, 3 };
  val_steps v;
  (void)state;
  val_steps_of(2, 0, 0, 0, &v, TR_OK, NULL);
  assert_steps(&v, lightning, 4);
  val_steps_of(0, 2, 0, 0, &v, TR_OK, NULL); /* the global-step form stays */
  assert_steps(&v, global_steps, 6);
  val_steps_of(5, 0, 0, 0, &v, TR_OK, NULL); /* N divides the epoch: its end, once */
  assert_steps(&v, divides, 2);
  val_steps_of(2, 0, 2, 0, &v, TR_OK, NULL); /* check_val_every_n_epoch = 2: the second epoch only */
  assert_steps(&v, second_epoch, 2);
  val_steps_of(2, 0, 0, 3, &v, TR_OK, NULL); /* a stop after batch 3 validates there (Lightning forces it) */
  assert_steps(&v, stopped, 2);
  /* more than an epoch's batches never validates: refused, as Lightning's ValueError */
  val_steps_of(6, 0, 0, 0, &v, TR_ERR_INVALID, "val_check_interval (6) is more than the 5 training batches of an epoch");
  assert_int_equal(v.n, 0);
  val_steps_of(2, 3, 0, 0, &v, TR_ERR_INVALID, "both set");
  val_steps_of(-1, 0, 0, 0, &v, TR_ERR_INVALID, "must be >= 0");
}

/* Validation only every 2nd epoch; limit_train_batches / limit_val_batches. */
static void test_val_every_n_epochs_and_limits(void **state) {
  fx *f = fx_new(5, 4, NULL, NULL, 1);
  tr_config c = fx_config(f, 1);
  (void)state;
  c.max_epochs = 4;
  c.val_every_n_epochs = 2;
  c.limit_train_batches = 2;
  c.limit_val_batches = 3;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_BATCH_START], 8);
  assert_int_equal(f->p.calls[HK_ON_SANITY_CHECK_START], 1);
  assert_int_equal(f->p.calls[HK_ON_VALIDATION_START], 1 + 2);
  assert_int_equal(f->p.calls[HK_ON_VALIDATION_BATCH_START], 2 + 3 + 3); /* sanity: 2 (default) */
  assert_int_equal(f->t.global_step, 8);
  fx_free(f);
}

static void test_order_test_and_predict(void **state) {
  fx *f = fx_new(1, 2, NULL, NULL, 1);
  double mean = -1, expect = 0, loss;
  void *b;
  int i;
  (void)state;
  assert_int_equal(tr_test(&f->t, &f->val_d, 0, &mean), TR_OK);
  assert_log(&f->p,
    "setup configure_model on_test_start on_test_epoch_start on_test_batch_start on_test_batch_end "
    "on_test_batch_start on_test_batch_end on_test_epoch_end on_log on_test_end teardown ");
  assert_int_equal(f->p.stages[HK_SETUP], HK_STAGE_TEST);
  for (i = 0; i < 2; i++) {
    data_get(&f->val, i, &b);
    lin_forward(&f->m, b, 0, &loss);
    expect += loss / 2;
  }
  assert_float_equal(mean, expect, 1e-12);
  {
    double v = 0;
    assert_true(hk_metric_get(&f->t.ctx, "test/loss", &v));
    assert_float_equal(v, expect, 1e-12);
  }
  f->p.len = 0;
  f->p.log[0] = 0;
  assert_int_equal(tr_predict(&f->t, &f->val_d, 1), TR_OK);
  assert_log(&f->p,
    "setup configure_model on_predict_start on_predict_epoch_start on_predict_batch_start on_predict_batch_end "
    "on_predict_epoch_end on_predict_end teardown ");
  assert_int_equal(f->m.predict_calls, 1);
  assert_int_equal(f->p.stages[HK_TEARDOWN], HK_STAGE_PREDICT);
  fx_free(f);
}

/* ctx->outputs in on_predict_batch_end is what model.predict returned. */
static hk_signal check_outputs(probe *p, hk_ctx *ctx) {
  if (ctx->event == HK_ON_PREDICT_BATCH_END) {
    const lin_model *m = (const lin_model *)(intptr_t)p->arg;
    p->arg2 += ctx->outputs == (const void *)m->pred;
  }
  return HK_CONTINUE;
}
static void test_predict_outputs(void **state) {
  fx *f = fx_new(1, 3, NULL, NULL, 1);
  (void)state;
  f->p.act = check_outputs;
  f->p.arg = (int64_t)(intptr_t)&f->m;
  assert_int_equal(tr_predict(&f->t, &f->val_d, 0), TR_OK);
  assert_int_equal(f->p.arg2, 3);
  f->t.model.predict = NULL;
  assert_int_equal(tr_predict(&f->t, &f->val_d, 0), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&f->t), "predict"));
  fx_free(f);
}

/* =================================================================================================
   Optimizers against a float64 reference of PyTorch's formulas
   ================================================================================================= */
#define GEN_N 256
#define GEN_STEPS 100

/* A "model" whose gradient at step k is a fixed random vector: the optimizer is all that moves it. */
typedef struct gen_model { float p[GEN_N], g[GEN_N]; float *seq; int step; } gen_model;
static int gen_forward(void *user, void *batch, int training, double *loss) {
  (void)user; (void)batch; (void)training;
  *loss = 0.0;
  return 0;
}
static int gen_backward(void *user, void *batch) {
  gen_model *m = (gen_model *)user;
  int i;
  (void)batch;
  for (i = 0; i < GEN_N; i++) m->g[i] += m->seq[m->step * GEN_N + i];
  m->step++;
  return 0;
}
static int64_t gen_count(void *user) { (void)user; return GEN_STEPS; }
static int gen_get(void *user, int64_t i, void **batch) { (void)i; *batch = user; return 0; }

typedef struct ref_result {
  double rel_norm, rel_max64, rel_max32;  /* the trainer vs the float64 references */
  double f32_norm, f32_max32;             /* the plain float32 reference (tests/ref_f32.c) vs the same */
  int bits_equal;                         /* the trainer's p, m, v are the float32 reference's, bit for bit */
} ref_result;

/* One step of PyTorch's torch.optim.AdamW / SGD on one element, in double, written out plainly. */
static void ref_step(const tr_optim *o, double lr, int k, double g, double *p, double *m, double *v) {
  if (o->kind == TR_OPTIM_ADAMW) {
    double b1 = 0.9, b2 = 0.999, eps = 1e-8, mhat, vhat, step = k + 1;
    *p -= lr * o->weight_decay * *p;
    *m = b1 * *m + (1 - b1) * g;
    *v = b2 * *v + (1 - b2) * g * g;
    mhat = *m / (1 - pow(b1, step));
    vhat = *v / (1 - pow(b2, step));
    *p -= lr * mhat / (sqrt(vhat) + eps);
  } else {
    double dp = g + o->weight_decay * *p;
    if (o->momentum != 0) {
      *m = k == 0 ? dp : o->momentum * *m + (1 - o->dampening) * dp;
      dp = o->nesterov ? dp + o->momentum * *m : *m;
    }
    *p -= lr * dp;
  }
}

/* Normwise (max|x-ref| / max|ref|) and elementwise (|ref| > floor) relative distance of x from ref. */
static double rel_norm_of(const float *x, const double *ref, int n) {
  double max_ref = 0, max_diff = 0;
  int i;
  for (i = 0; i < n; i++) {
    if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
    if (fabs(x[i] - ref[i]) > max_diff) max_diff = fabs(x[i] - ref[i]);
  }
  return max_diff / max_ref;
}
static double rel_max_of(const float *x, const double *ref, int n, double floor) {
  double worst = 0;
  int i;
  for (i = 0; i < n; i++)
    if (fabs(ref[i]) > floor && fabs(x[i] - ref[i]) / fabs(ref[i]) > worst) worst = fabs(x[i] - ref[i]) / fabs(ref[i]);
  return worst;
}

/* Run GEN_STEPS steps of the trainer and of three references: one entirely in double, one in double
   that stores p, m, v as float after every step, and the plain float32 one of tests/ref_f32.c. */
static ref_result run_against_reference(const tr_optim *o, const tr_sched *s) {
  static gen_model m;
  tr_trainer t;
  tr_desc d;
  tr_config c;
  tr_data data;
  tr_rng r;
  static double p[GEN_N], mom[GEN_N], v[GEN_N], p32d[GEN_N];
  static float p32[GEN_N], mom32[GEN_N], v32[GEN_N], fp[GEN_N], fm[GEN_N], fv[GEN_N];
  int i, k;
  ref_result res;
  memset(&m, 0, sizeof m);
  m.seq = (float *)malloc(sizeof(float) * GEN_N * GEN_STEPS);
  tr_rng_seed(&r, 7);
  for (i = 0; i < GEN_N; i++) m.p[i] = tr_rng_normal(&r);
  for (i = 0; i < GEN_N * GEN_STEPS; i++) m.seq[i] = 0.1f * tr_rng_normal(&r) + 0.01f;
  for (i = 0; i < GEN_N; i++) {
    p[i] = p32[i] = fp[i] = m.p[i];
    mom[i] = v[i] = 0;
    mom32[i] = v32[i] = fm[i] = fv[i] = 0;
  }

  memset(&d, 0, sizeof d);
  d.model.params = m.p;
  d.model.grads = m.g;
  d.model.n_params = GEN_N;
  d.model.user = &m;
  d.model.forward = gen_forward;
  d.model.backward = gen_backward;
  d.optim = *o;
  if (s) d.sched = *s;
  assert_int_equal(tr_init(&t, &d), TR_OK);
  memset(&data, 0, sizeof data);
  data.user = &m;
  data.count = gen_count;
  data.get = gen_get;
  memset(&c, 0, sizeof c);
  c.train = &data;
  c.max_steps = GEN_STEPS;
  c.no_sigint = 1;
  assert_int_equal(tr_fit(&t, &c), TR_OK);
  assert_int_equal(t.global_step, GEN_STEPS);

  for (k = 0; k < GEN_STEPS; k++) {
    double lr = o->lr;
    const tr_optim *f = &t.optim; /* with the defaults filled in */
    tr_sched rs = t.sched;
    if (s && s->kind == TR_SCHED_COSINE) { /* warmup then cosine, as documented, computed independently */
      if (k < s->warmup) lr = o->lr * (k + 1.0) / s->warmup;
      else lr = o->lr * (s->min_factor + (1 - s->min_factor) * 0.5 *
                         (1 + cos(3.141592653589793 * (double)(k - s->warmup) / (double)(s->total - s->warmup))));
    }
    for (i = 0; i < GEN_N; i++) {
      double g = m.seq[k * GEN_N + i], a = p32[i], b = mom32[i], e = v32[i];
      ref_step(o, lr, k, g, &p[i], &mom[i], &v[i]);
      ref_step(o, lr, k, g, &a, &b, &e);
      p32[i] = (float)a;
      mom32[i] = (float)b;
      v32[i] = (float)e;
    }
    /* the float32 reference takes the trainer's lr (the schedule has its own tests) */
    rs.total = t.tr__total;
    if (f->kind == TR_OPTIM_ADAMW)
      ref_adamw_f32(fp, m.seq + k * GEN_N, fm, fv, GEN_N, tr_lr_at(&rs, f->lr, k), f->beta1, f->beta2, f->eps, f->weight_decay, k + 1);
    else
      ref_sgd_f32(fp, m.seq + k * GEN_N, fm, GEN_N, tr_lr_at(&rs, f->lr, k), f->momentum, f->dampening,
                  f->weight_decay, f->nesterov, k == 0);
  }
  for (i = 0; i < GEN_N; i++) p32d[i] = p32[i];
  res.rel_norm = rel_norm_of(m.p, p, GEN_N);
  res.rel_max64 = rel_max_of(m.p, p, GEN_N, 0.1);
  res.rel_max32 = rel_max_of(m.p, p32d, GEN_N, 1e-3);
  res.f32_norm = rel_norm_of(fp, p, GEN_N);
  res.f32_max32 = rel_max_of(fp, p32d, GEN_N, 1e-3);
  res.bits_equal = memcmp(fp, m.p, sizeof fp) == 0 &&
                   (t.tr__n_buf < 1 || memcmp(fm, t.tr__m, sizeof fm) == 0) &&
                   (t.tr__n_buf < 2 || memcmp(fv, t.tr__v, sizeof fv) == 0);
  tr_free(&t);
  free(m.seq);
  return res;
}

/* The trainer computes in float32 in PyTorch's order: it must equal the plain float32 reference bit
   for bit, and it is then exactly as far from float64 as any float32 implementation of PyTorch's
   formula. Against the float64 reference:
   - normwise (max|p - ref| / max|ref|) below 1e-6, except where float32 itself cannot: AdamW with
     weight decay multiplies p by float(1 - lr*wd) every step (PyTorch's param.mul_ takes the scalar
     as a float), and float(0.999) = 0.999 + 1.3e-8, a bias that compounds to 100 * 1.3e-8 = 1.3e-6
     over 100 steps on every parameter. There the bound is the float32 reference's own distance.
   - elementwise against the double reference that rounds only the stored p, m, v: a parameter near
     zero is a difference of nearly equal numbers, so float32's per-operation roundings (1e-7 absolute)
     become up to 2e-5 relative at |p| = 1e-2. Held: no worse than the float32 reference, and < 5e-5. */
static void report(const char *what, ref_result r) {
  printf("    %-40s bit-exact vs float32 ref: %s\n"
         "      vs float64: max|p-ref|/max|ref| %.2e (float32 ref %.2e; elementwise, |ref|>0.1: %.2e);"
         " vs float64 with float storage: max elementwise %.2e (float32 ref %.2e)\n", what,
         r.bits_equal ? "yes" : "NO", r.rel_norm, r.f32_norm, r.rel_max64, r.rel_max32, r.f32_max32);
  assert_true(r.bits_equal);
  assert_true(r.rel_norm < 1e-6 || r.rel_norm <= r.f32_norm);
  assert_true(r.rel_norm < 2e-6);
  assert_true(r.rel_max32 <= r.f32_max32);
  assert_true(r.rel_max32 < 5e-5);
}

static void test_adamw_reference(void **state) {
  tr_optim o;
  tr_sched s;
  (void)state;
  memset(&o, 0, sizeof o);
  o.kind = TR_OPTIM_ADAMW;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  report("AdamW lr=1e-2 wd=0.1, 100 steps", run_against_reference(&o, NULL));
  memset(&s, 0, sizeof s);
  s.kind = TR_SCHED_COSINE;
  s.warmup = 10;
  s.total = 100;
  s.min_factor = 0.1;
  report("AdamW + warmup(10)/cosine(100, min 0.1)", run_against_reference(&o, &s));
  o.weight_decay = 0;
  report("AdamW lr=1e-2 wd=0", run_against_reference(&o, NULL));
}

static void test_sgd_reference(void **state) {
  tr_optim o;
  (void)state;
  memset(&o, 0, sizeof o);
  o.kind = TR_OPTIM_SGD;
  o.lr = 1e-2;
  report("SGD lr=1e-2", run_against_reference(&o, NULL));
  o.momentum = 0.9;
  o.weight_decay = 1e-2;
  o.dampening = 0.1;
  report("SGD momentum=0.9 dampening=0.1 wd=1e-2", run_against_reference(&o, NULL));
  o.dampening = 0;
  o.nesterov = 1;
  report("SGD nesterov momentum=0.9 wd=1e-2", run_against_reference(&o, NULL));
}

/* =================================================================================================
   Schedules
   ================================================================================================= */
/* An error message longer than the buffer that keeps it ends in "..." (at a UTF-8 character's start), so the
   cut shows: the trainer's, a run's refusal, and hooks.h's. */
static void expect_cut(const char *msg, size_t cap) {
  size_t n = strlen(msg);
  if (n + 1 != cap && n + 2 != cap) fail_msg("a cut message of %zu bytes in a buffer of %zu", n, cap);
  assert_string_equal(msg + n - 3, "...");
  assert_int_equal((n - 3) % 2, 0); /* whole two-byte characters before it */
}
static hk_signal fail_long(hk_ctx *ctx, void *u) { return hk_fail(ctx, "%s", (const char *)u); }
static void test_long_errors_show_cut(void **state) {
  char text[2400];
  tr_trainer t;
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  size_t i;
  (void)state;
  for (i = 0; i + 2 < sizeof text; i += 2) memcpy(text + i, "\xc3\xa9", 2); /* U+00E9, 2 bytes each */
  text[i] = 0;
  memset(&t, 0, sizeof t);
  assert_int_equal(tr__fail(&t, TR_ERR_INVALID, "%s", text), TR_ERR_INVALID);
  expect_cut(tr_error(&t), sizeof t.error);
  assert_non_null(reg);
  assert_int_equal(hk_set_error(reg, HK_ERR_INVALID, "%s", text), HK_ERR_INVALID);
  expect_cut(hk_last_error(reg), strlen(hk_last_error(reg)) + 1);
  assert_true(strlen(hk_last_error(reg)) > 400);
  memset(&ctx, 0, sizeof ctx);
  assert_int_equal(fail_long(&ctx, text), HK_FAIL);
  expect_cut(ctx.hk__fail_msg, sizeof ctx.hk__fail_msg);
  hk_destroy(reg);
}

static void test_schedule_values(void **state) {
  tr_sched s;
  (void)state;
  memset(&s, 0, sizeof s);
  assert_true(tr_lr_at(&s, 0.5, 0) == 0.5);
  assert_true(tr_lr_at(&s, 0.5, 1000) == 0.5);
  s.warmup = 4;
  assert_true(tr_lr_at(&s, 1.0, 0) == 0.25);
  assert_true(tr_lr_at(&s, 1.0, 2) == 0.75);
  assert_true(tr_lr_at(&s, 1.0, 3) == 1.0);
  assert_true(tr_lr_at(&s, 1.0, 1) == 0.5);
  assert_true(tr_lr_at(&s, 1.0, 99) == 1.0);
  memset(&s, 0, sizeof s);
  s.kind = TR_SCHED_STEP;
  s.step_size = 3;
  s.gamma = 0.5;
  assert_true(tr_lr_at(&s, 1.0, 2) == 1.0);
  assert_true(tr_lr_at(&s, 1.0, 3) == 0.5);
  assert_true(tr_lr_at(&s, 1.0, 8) == 0.25);
  s.gamma = 0; /* default 0.1 */
  assert_float_equal(tr_lr_at(&s, 1.0, 3), 0.1, 1e-15);
  memset(&s, 0, sizeof s);
  s.kind = TR_SCHED_COSINE;
  s.warmup = 2;
  s.total = 12;
  s.min_factor = 0.1;
  assert_true(tr_lr_at(&s, 1.0, 0) == 0.5);
  assert_true(tr_lr_at(&s, 1.0, 2) == 1.0);
  assert_float_equal(tr_lr_at(&s, 1.0, 7), 0.55, 1e-15);
  assert_float_equal(tr_lr_at(&s, 1.0, 12), 0.1, 1e-15);
  assert_float_equal(tr_lr_at(&s, 1.0, 50), 0.1, 1e-15);
}

/* ctx->lr before each batch: per step (cosine resolved from max_steps) and per epoch. */
static void test_schedule_in_loop(void **state) {
  tr_sched s;
  fx *f;
  tr_config c;
  int k;
  (void)state;
  memset(&s, 0, sizeof s);
  s.kind = TR_SCHED_COSINE;
  s.warmup = 2;
  f = fx_new(3, 1, NULL, &s, 1);
  c = fx_config(f, 0);
  c.max_steps = 6;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->p.n_lr, 6);
  s.total = 6;
  for (k = 0; k < 6; k++) assert_true(f->p.lr_seen[k] == tr_lr_at(&s, 1e-3, k));
  assert_true(f->p.lr_seen[0] == 0.5e-3);
  fx_free(f);

  memset(&s, 0, sizeof s);
  s.kind = TR_SCHED_STEP;
  s.per_epoch = 1;
  s.step_size = 1;
  s.gamma = 0.5;
  f = fx_new(2, 1, NULL, &s, 1);
  c = fx_config(f, 0);
  c.max_epochs = 3;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->p.n_lr, 6);
  assert_true(f->p.lr_seen[0] == 1e-3 && f->p.lr_seen[1] == 1e-3);
  assert_true(f->p.lr_seen[2] == 0.5e-3 && f->p.lr_seen[3] == 0.5e-3);
  assert_true(f->p.lr_seen[4] == 0.25e-3 && f->p.lr_seen[5] == 0.25e-3);
  fx_free(f);

  /* cosine without total, max_steps or an explicit max_epochs cannot be resolved */
  memset(&s, 0, sizeof s);
  s.kind = TR_SCHED_COSINE;
  f = fx_new(2, 1, NULL, &s, 1);
  c = fx_config(f, 0);
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&f->t), "cosine"));
  assert_int_equal(f->p.calls[HK_SETUP], 0); /* config errors come before any hook */
  fx_free(f);
}


/* Every new schedule against PyTorch's own scheduler objects (tests/sched_ref.h, generated by
   tests/gen_sched_ref.py). Tolerance: 1e-12 relative (plus 1e-18 absolute for the zeros): PyTorch's
   LinearLR, ExponentialLR and CosineAnnealingLR compute each lr from the previous one (their
   "chainable" form), which rounds once per step; train.h's closed forms round a few times in all. */
#include "sched_ref.h"
static void test_schedule_torch_ref(void **state) {
  size_t c;
  int i, cases = 0, values = 0;
  double worst = 0;
  (void)state;
  for (c = 0; c < sizeof sched_refs / sizeof sched_refs[0]; c++) {
    const sched_ref *r = &sched_refs[c];
    tr_sched s;
    tr_sched_state st;
    char why[256];
    memset(&st, 0, sizeof st);
    if (tr_sched_parse(&s, r->spec, why, sizeof why) != TR_OK || tr_sched_check(&s, s.total, why, sizeof why) != TR_OK)
      fail_msg("%s: %s", r->spec, why);
    for (i = 0; i < r->n; i++) {
      double lr, want = r->lr[i];
      if (s.kind == TR_SCHED_PLATEAU) {
        (void)tr_plateau_step(&s, &st, SCHED_REF_BASE, sched_ref_metric[i]);
        lr = tr_sched_lr(&s, &st, SCHED_REF_BASE, i + 1);
      } else
        lr = tr_sched_lr(&s, &st, SCHED_REF_BASE, i);
      if (!(fabs(lr - want) <= 1e-12 * fabs(want) + 1e-18))
        fail_msg("%s: step %d: train.h %.17g, PyTorch %.17g", r->name, i, lr, want);
      if (want != 0 && fabs(lr - want) / fabs(want) > worst) worst = fabs(lr - want) / fabs(want);
      values++;
    }
    cases++;
  }
  printf("  schedules vs PyTorch's schedulers: %d cases, %d values, largest relative difference %.2g\n", cases, values, worst);
  assert_true(cases >= 12);
}

/* Spec strings: every kind, the defaults a spec leaves, and refusals that say what is wrong. */
static void test_schedule_spec(void **state) {
  tr_sched s;
  char why[512];
  tr_desc d;
  tr_trainer t;
  lin_model m;
  static const struct { const char *spec, *says; } bad[] = {
    { "exponential(gamma=-0.5)", "gamma must be > 0" },
    { "exponential", "gamma" },                          /* required there */
    { "onecycle(pct_start=1.5)", "pct_start must be in (0, 1)" },
    { "onecycle(pct_start=0)", "cannot be 0" },
    { "onecycle(pct_start=0.6, three_phase=true)", "three_phase needs sched.pct_start < 0.5" },
    { "onecycle(anneal=1-sqrt)", "cos or linear" },
    { "onecycle(warmup=3)", "pct_start is its warmup" },
    { "plateau(factor=1)", "factor must be in (0, 1)" },
    { "plateau(patience=-1)", "patience must be >= 0" },
    { "plateau(mode=up)", "min|max" },                  /* hooks.h lists the choices */
    { "plateau(threshold=-1)", "threshold must be >= 0" },
    { "step", "step_size" },
    { "wsd(total=10)", "decay" },
    { "cosine(patience=3)", "patience" },               /* not a key of cosine */
    { "linear(min_factor=2)", "min_factor must be in [0, 1]" },
    { "bogus", "bogus" },
    { "cosine; linear", "give one schedule" },
  };
  size_t i;
  (void)state;
  assert_int_equal(tr_sched_parse(&s, "cosine(warmup=100, min_factor=0.1, total=1000)", why, sizeof why), TR_OK);
  assert_int_equal(s.kind, TR_SCHED_COSINE);
  assert_true(s.warmup == 100 && s.total == 1000 && s.min_factor == 0.1);
  assert_int_equal(tr_sched_parse(&s, "plateau(monitor=val/acc, mode=max, patience=0, threshold=0, threshold_mode=abs, cooldown=2)",
                                  why, sizeof why), TR_OK);
  assert_int_equal(s.kind, TR_SCHED_PLATEAU);
  assert_string_equal(s.monitor, "val/acc");
  assert_true(s.mode == 1 && s.patience == TR_ZERO && s.threshold == 0 && signbit(s.threshold) && s.threshold_mode == 1 && s.cooldown == 2);
  assert_true(s.factor == 0.1 && s.eps == 1e-8); /* the defaults, filled in */
  assert_int_equal(tr_sched_parse(&s, "plateau", why, sizeof why), TR_OK);
  assert_string_equal(s.monitor, "val/loss");
  assert_int_equal(tr_sched_parse(&s, "onecycle(max_lr=0.01, pct_start=0.25, anneal=linear, three_phase=true)", why, sizeof why), TR_OK);
  assert_true(s.kind == TR_SCHED_ONECYCLE && s.max_lr == 0.01 && s.pct_start == 0.25 && s.anneal == TR_ANNEAL_LINEAR && s.three_phase);
  assert_true(s.div_factor == 25 && s.final_div_factor == 1e4);
  assert_int_equal(tr_sched_parse(&s, "wsd(warmup=10, decay=100, anneal=1-sqrt, min_factor=0.01)", why, sizeof why), TR_OK);
  assert_true(s.kind == TR_SCHED_WSD && s.decay == 100 && s.anneal == TR_ANNEAL_SQRT);
  assert_int_equal(tr_sched_parse(&s, "exponential(gamma=0.99, per_epoch=true)", why, sizeof why), TR_OK);
  assert_true(s.kind == TR_SCHED_EXPONENTIAL && s.gamma == 0.99 && s.per_epoch == 1);
  assert_int_equal(tr_sched_parse(&s, "linear(warmup=5)", why, sizeof why), TR_OK);
  assert_int_equal(tr_sched_parse(&s, "step(step_size=3, gamma=0.5)", why, sizeof why), TR_OK);
  assert_int_equal(tr_sched_parse(&s, "constant", why, sizeof why), TR_OK);
  assert_int_equal(s.kind, TR_SCHED_CONSTANT);
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    why[0] = 0;
    if (tr_sched_parse(&s, bad[i].spec, why, sizeof why) != TR_ERR_INVALID || !strstr(why, bad[i].says))
      fail_msg("'%s': expected a refusal saying '%s', got '%s'", bad[i].spec, bad[i].says, why);
  }
  { /* a message longer than the caller's buffer shows its cut: "..." at the end */
    char small[24];
    assert_int_equal(tr_sched_parse(&s, "cosine; linear", small, sizeof small), TR_ERR_INVALID);
    assert_string_equal(small, "tr_sched_parse: 'cos...");
  }
  /* tr_init refuses the same things in a desc, before anything runs */
  lin_init(&m, 4, 1);
  memset(&d, 0, sizeof d);
  d.model = as_model(&m);
  d.sched.kind = TR_SCHED_EXPONENTIAL;
  d.sched.gamma = -0.5;
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&t), "tr_init: exponential: sched.gamma must be > 0"));
  memset(&d.sched, 0, sizeof d.sched);
  d.sched.kind = TR_SCHED_ONECYCLE;
  d.sched.pct_start = 1.5;
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&t), "pct_start must be in (0, 1)"));
  memset(&d.sched, 0, sizeof d.sched);
  d.sched.kind = (tr_sched_kind)42;
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&t), "not a schedule"));
  lin_free(&m);
  assert_string_equal(tr_sched_kind_name(TR_SCHED_WSD), "wsd");
}

/* A decay that cannot stay finite over the run (issue 28 item 3): gamma^steps overflowing or
   underflowing is refused at set-up when the run's length is known, a subnormal gamma always; when the
   length is not known (an epoch-bounded run of a per-step schedule), the first step with an inf lr
   fails the run, naming the schedule, with every parameter as the last good step left it. */
static int params_finite(const lin_model *m) {
  int i;
  for (i = 0; i <= m->d; i++) if (!hk_is_finitef(m->p[i])) return 0;
  return 1;
}
static void test_schedule_stays_finite(void **state) {
  tr_sched s;
  char why[512];
  fx *f;
  tr_config c;
  (void)state;
  /* tr_sched_check: subnormal gamma, gamma^(decays) past a double's range */
  assert_int_equal(tr_sched_parse(&s, "exponential(gamma=1e-320)", why, sizeof why), TR_ERR_INVALID);
  assert_non_null(strstr(why, "exponential: sched.gamma 9.99989e-321 is subnormal"));
  assert_int_equal(tr_sched_parse(&s, "step(step_size=1, gamma=1e308)", why, sizeof why), TR_OK); /* no length yet */
  assert_int_equal(tr_sched_check(&s, 3, why, sizeof why), TR_ERR_INVALID);
  assert_non_null(strstr(why, "step: sched.gamma 1e+308 to the power 2 (its decays over the run's 3 scheduler steps) overflows: the lr would be inf"));
  assert_int_equal(tr_sched_check(&s, 2, why, sizeof why), TR_OK); /* one decay: 1e308 itself */
  assert_int_equal(tr_sched_parse(&s, "exponential(gamma=0.5)", why, sizeof why), TR_OK);
  assert_int_equal(tr_sched_check(&s, 2000, why, sizeof why), TR_ERR_INVALID);
  assert_non_null(strstr(why, "underflows: the lr would be 0"));
  assert_int_equal(tr_sched_check(&s, 1000, why, sizeof why), TR_OK);

  /* tr_fit with max_steps: refused before any hook */
  assert_int_equal(tr_sched_parse(&s, "step(step_size=1, gamma=1e308)", why, sizeof why), TR_OK);
  f = fx_new(3, 1, NULL, &s, 1);
  c = fx_config(f, 0);
  c.max_steps = 6;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&f->t), "tr_fit: step: sched.gamma 1e+308 to the power 5"));
  assert_int_equal(f->p.calls[HK_SETUP], 0);
  assert_int_equal(f->t.global_step, 0);
  fx_free(f);
  /* finite as a double, inf as the float32 the update uses: 1e-3 * 1.2^999 */
  assert_int_equal(tr_sched_parse(&s, "exponential(gamma=1.2)", why, sizeof why), TR_OK);
  f = fx_new(3, 1, NULL, &s, 1);
  c = fx_config(f, 0);
  c.max_steps = 1000;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&f->t), "the exponential schedule (gamma 1.2) takes the learning rate to"));
  assert_non_null(strstr(tr_error(&f->t), "which float32 updates turn into inf"));
  assert_int_equal(f->p.calls[HK_SETUP], 0);
  fx_free(f);
  /* ... and to 0: 1e-3 * 0.9^999 is 1e-49 */
  assert_int_equal(tr_sched_parse(&s, "exponential(gamma=0.9)", why, sizeof why), TR_OK);
  f = fx_new(3, 1, NULL, &s, 1);
  c = fx_config(f, 0);
  c.max_steps = 1000;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&f->t), "which float32 updates round to 0"));
  fx_free(f);
  /* per epoch: max_epochs is the length */
  assert_int_equal(tr_sched_parse(&s, "exponential(gamma=1e200, per_epoch=true)", why, sizeof why), TR_OK);
  f = fx_new(3, 1, NULL, &s, 1);
  c = fx_config(f, 0);
  c.max_epochs = 3;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&f->t), "to the power 2 (its decays over the run's 3 scheduler steps) overflows"));
  fx_free(f);

  /* a per-step schedule in a run bounded by epochs: the length is not known at set-up; the step that
     would take the inf lr is not taken, and the run fails naming the schedule */
  assert_int_equal(tr_sched_parse(&s, "exponential(gamma=1e308)", why, sizeof why), TR_OK);
  f = fx_new(3, 1, NULL, &s, 1);
  c = fx_config(f, 0);
  c.max_epochs = 2;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&f->t), "step 2: the learning rate is 1e+305, inf as a float32 (the exponential schedule, gamma 1e+308 at scheduler step 1)"));
  assert_int_equal(f->t.global_step, 1);
  assert_true(params_finite(&f->m));
  fx_free(f);
  assert_int_equal(tr_sched_parse(&s, "step(step_size=2, gamma=1e-300)", why, sizeof why), TR_OK);
  f = fx_new(3, 1, NULL, &s, 1);
  c = fx_config(f, 0);
  c.max_epochs = 2;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&f->t), "step 3: the learning rate is 1e-303, 0 as a float32: it decayed away (the step schedule, gamma 1e-300 at scheduler step 2)"));
  assert_int_equal(f->t.global_step, 2);
  fx_free(f);
}

/* The lr of every optimizer step (read after it), and a hook that halves it at two fixed steps. */
typedef struct lr_rec { double lr[256]; int n; } lr_rec;
static hk_signal lr_rec_fn(hk_ctx *ctx, void *user) {
  lr_rec *r = (lr_rec *)user;
  if (r->n < 256) r->lr[r->n++] = ctx->lr;
  return HK_CONTINUE;
}
static hk_signal lr_halve_fn(hk_ctx *ctx, void *user) {
  (void)user;
  if (ctx->global_step == 5 || ctx->global_step == 13) assert_int_equal(tr_lr_scale(ctx, 0.5), TR_OK);
  return HK_CONTINUE;
}
/* One schedule, n_first steps, then (path != NULL) a save and a new trainer that resumes to n_all. */
static void sched_run(const tr_sched *s, int64_t n_first, int64_t n_all, const char *path, lr_rec *out) {
  fx *f = fx_new(4, 2, NULL, s, 0);
  tr_config c = fx_config(f, 1);
  assert_int_equal(hk_on(f->reg, HK_ON_AFTER_OPTIMIZER_STEP, lr_rec_fn, out, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(f->reg, HK_ON_TRAIN_BATCH_END, lr_halve_fn, NULL, NULL, NULL), HK_OK);
  c.max_steps = n_first;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  if (path) {
    assert_int_equal(tr_save(&f->t, path), TR_OK);
    fx_free(f);
    f = fx_new(4, 2, NULL, s, 0);
    c = fx_config(f, 1);
    assert_int_equal(hk_on(f->reg, HK_ON_AFTER_OPTIMIZER_STEP, lr_rec_fn, out, NULL, NULL), HK_OK);
    assert_int_equal(hk_on(f->reg, HK_ON_TRAIN_BATCH_END, lr_halve_fn, NULL, NULL, NULL), HK_OK);
    c.resume_from = path;
    c.max_steps = n_all;
    assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  }
  if (s->kind == TR_SCHED_PLATEAU) { /* it did reduce, so the state mattered */
    assert_true(f->t.run->lr_state.checks > 0);
    assert_true(f->t.run->lr_state.plateau_lr > 0);
  }
  assert_true(f->t.run->lr_state.scale == 0.25);
  fx_free(f);
}

/* Stop mid-epoch, save, resume in a new trainer: the same lr sequence, bit for bit, for every kind,
   with a hook's tr_lr_scale (saved with the schedule) on top. */
static void test_schedule_resume_exact(void **state) {
  static const char *const specs[] = {
    "linear(warmup=3, total=24, min_factor=0.1)", "exponential(gamma=0.9, warmup=2)",
    "wsd(warmup=2, total=24, decay=8, anneal=1-sqrt)", "onecycle(total=24, pct_start=0.25, three_phase=true)",
    "plateau(patience=0, factor=0.5, threshold=0.5, cooldown=1, per_epoch=true)", "cosine(total=24, warmup=4)",
    "step(step_size=5, gamma=0.5)",
  };
  char path[512], why[256];
  size_t i;
  (void)state;
  path_in_dir(path, sizeof path, "sched.ckpt");
  for (i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    tr_sched s;
    lr_rec *whole = (lr_rec *)calloc(1, sizeof *whole), *split = (lr_rec *)calloc(1, sizeof *split);
    if (tr_sched_parse(&s, specs[i], why, sizeof why)) fail_msg("%s: %s", specs[i], why);
    sched_run(&s, 24, 0, NULL, whole);
    sched_run(&s, 10, 24, path, split); /* step 10: epoch 2, batch 2 */
    assert_int_equal(whole->n, 24);
    assert_int_equal(split->n, 24);
    split->n = 0;
    if (!memcmp(whole->lr, split->lr, sizeof(double) * 24)) /* step 8: epoch 1's end (the plateau has checked) */
      sched_run(&s, 8, 24, path, split);
    assert_int_equal(split->n, 24);
    if (memcmp(whole->lr, split->lr, sizeof(double) * 24) != 0) {
      int k;
      for (k = 0; k < 24; k++) fprintf(stderr, "%s step %d: %.17g %.17g\n", specs[i], k, whole->lr[k], split->lr[k]);
      fail_msg("%s: the resumed lr sequence differs", specs[i]);
    }
    free(whole);
    free(split);
  }
}

/* tr_lr_scale / tr_lr_set: the step of the batch uses the new lr; bad values refused with a reason;
   the plateau fails the run when its metric is missing. */
static void test_lr_from_hook(void **state) {
  tr_sched s;
  fx *f;
  tr_config c;
  lr_rec *r = (lr_rec *)calloc(1, sizeof *r);
  hk_ctx ctx;
  (void)state;
  memset(&s, 0, sizeof s);
  f = fx_new(4, 2, NULL, &s, 0);
  c = fx_config(f, 0);
  assert_int_equal(hk_on(f->reg, HK_ON_AFTER_OPTIMIZER_STEP, lr_rec_fn, r, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(f->reg, HK_ON_TRAIN_BATCH_END, lr_halve_fn, NULL, NULL, NULL), HK_OK);
  c.max_steps = 16;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_true(r->lr[4] == 1e-3 && r->lr[5] == 0.5e-3 && r->lr[12] == 0.5e-3 && r->lr[13] == 0.25e-3);
  ctx = f->t.ctx;
  ctx.lr = 0.25e-3;
  assert_int_equal(tr_lr_set(&ctx, 2e-3), TR_OK);
  assert_true(ctx.lr == 2e-3 && f->t.run->lr_state.scale == 2.0);
  assert_int_equal(tr_lr_scale(&ctx, 0), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(f->reg), "tr_lr_scale: factor must be > 0"));
  assert_int_equal(tr_lr_set(&ctx, -1), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(f->reg), "tr_lr_set: lr must be > 0"));
  fx_free(f);
  free(r);

  /* plateau monitoring val/loss without validation data: the run fails at the first epoch's end */
  memset(&s, 0, sizeof s);
  s.kind = TR_SCHED_PLATEAU;
  f = fx_new(4, 2, NULL, &s, 0);
  c = fx_config(f, 0);
  c.max_epochs = 2;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INVALID);
  assert_non_null(strstr(tr_error(&f->t), "plateau schedule monitors 'val/loss', which is not set at the end of epoch 0"));
  fx_free(f);
}

/* The plateau's metric is read at the epoch's end as it is then, whatever a hook read earlier: a lazy
   metric (here the global step) read by a hook at on_train_epoch_start, with no hook on the batches'
   events (no dispatch until the epoch's end), was seen with its epoch-start value. mode=max: the best
   of the checks is the last epoch's end, global step 16 (4 epochs of 4 batches), not 12. */
static double step_metric(const hk_ctx *ctx, void *user) { (void)user; return (double)ctx->global_step; }
static hk_signal read_step_metric(hk_ctx *ctx, void *user) {
  double v;
  (void)user;
  assert_int_equal(hk_metric_get(ctx, "my/step", &v), 1);
  return HK_CONTINUE;
}
static void test_plateau_reads_now(void **state) {
  tr_sched s;
  char why[256];
  fx *f;
  tr_config c;
  (void)state;
  assert_int_equal(tr_sched_parse(&s, "plateau(monitor=my/step, mode=max, patience=100)", why, sizeof why), TR_OK);
  f = fx_new(4, 2, NULL, &s, 0);
  c = fx_config(f, 0);
  c.max_epochs = 4;
  assert_int_equal(hk_metric_lazy(&f->t.ctx, "my/step", step_metric, NULL), HK_OK);
  assert_int_equal(hk_on(f->reg, HK_ON_TRAIN_EPOCH_START, read_step_metric, NULL, NULL, NULL), HK_OK);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->t.global_step, 16);
  assert_int_equal(f->t.run->lr_state.checks, 4);
  assert_true(f->t.run->lr_state.best == 16.0);
  fx_free(f);
}

/* =================================================================================================
   Gradient clipping
   ================================================================================================= */
typedef struct clip_seen { double norm_before, norm_reported, norm_after, max_abs_after; } clip_seen;
static double norm_of(const hk_ctx *ctx, double *max_abs) {
  double s = 0;
  int i;
  size_t j;
  if (max_abs) *max_abs = 0;
  for (i = 0; i < ctx->n_tensors; i++)
    for (j = 0; j < ctx->grads[i].count; j++) {
      double g = ctx->grads[i].data[j];
      s += g * g;
      if (max_abs && fabs(g) > *max_abs) *max_abs = fabs(g);
    }
  return sqrt(s);
}
static hk_signal watch_clip(probe *p, hk_ctx *ctx) {
  clip_seen *c = (clip_seen *)(intptr_t)p->arg;
  if (ctx->event == HK_ON_BEFORE_OPTIMIZER_STEP) {
    double lazy = -1;
    c->norm_before = norm_of(ctx, NULL);
    assert_true(hk_metric_get(ctx, "grad_norm", &lazy)); /* the lazy metric agrees */
    assert_float_equal(lazy, c->norm_before, 1e-12);
  }
  if (ctx->event == HK_ON_GRADIENT_CLIP) {
    c->norm_reported = hk_grad_norm(ctx); /* still the norm before clipping */
    c->norm_after = norm_of(ctx, &c->max_abs_after);
  }
  return HK_CONTINUE;
}
static void test_clipping(void **state) {
  fx *f = fx_new(1, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 0);
  clip_seen seen;
  (void)state;
  memset(&seen, 0, sizeof seen);
  f->p.act = watch_clip;
  f->p.arg = (int64_t)(intptr_t)&seen;
  c.max_steps = 1;
  c.gradient_clip_val = 0.01;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_true(seen.norm_before > 0.1);
  assert_float_equal(seen.norm_reported, seen.norm_before, 1e-9);
  assert_float_equal(seen.norm_after, 0.01, 1e-6);
  fx_free(f);

  f = fx_new(1, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  memset(&seen, 0, sizeof seen);
  f->p.act = watch_clip;
  f->p.arg = (int64_t)(intptr_t)&seen;
  c.max_steps = 1;
  c.gradient_clip_val = 0.001;
  c.gradient_clip_algorithm = TR_CLIP_VALUE;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_float_equal(seen.norm_reported, seen.norm_before, 1e-9);
  assert_true(seen.max_abs_after <= 0.001f);
  assert_float_equal(seen.max_abs_after, 0.001, 1e-9);
  fx_free(f);
}

/* =================================================================================================
   Signals
   ================================================================================================= */

/* Return g_act.sig from event g_act.event on its g_act.call-th call. */
typedef struct act_spec { int event; int call; hk_signal sig; } act_spec;
static act_spec g_act;
static hk_signal act_signal(probe *p, hk_ctx *ctx) {
  if (ctx->event == g_act.event && p->calls[ctx->event] == g_act.call) return g_act.sig;
  return HK_CONTINUE;
}
static hk_signal request_at(probe *p, hk_ctx *ctx);
static hk_signal request_then_act(probe *p, hk_ctx *ctx) {
  request_at(p, ctx);
  return act_signal(p, ctx);
}
static void set_act(fx *f, int event, int call, hk_signal sig) {
  g_act.event = event;
  g_act.call = call;
  g_act.sig = sig;
  f->p.act = act_signal;
}

/* HK_SKIP_STEP: the step is not taken, global_step does not move, the batch still ends. */
static void test_signal_skip_step(void **state) {
  static const int events[] = { HK_ON_TRAIN_BATCH_START, HK_ON_BEFORE_ZERO_GRAD, HK_ON_BEFORE_BACKWARD,
                                HK_ON_AFTER_BACKWARD, HK_ON_BEFORE_OPTIMIZER_STEP, HK_ON_GRADIENT_CLIP };
  size_t k;
  (void)state;
  for (k = 0; k < sizeof events / sizeof events[0]; k++) {
    fx *f = fx_new(3, 1, NULL, NULL, 1);
    tr_config c = fx_config(f, 0);
    c.max_epochs = 1;
    c.gradient_clip_val = 1e9;
    set_act(f, events[k], 2, HK_SKIP_STEP);
    assert_int_equal(tr_fit(&f->t, &c), TR_OK);
    assert_int_equal(f->t.global_step, 2);
    assert_int_equal(f->p.calls[HK_ON_AFTER_OPTIMIZER_STEP], 2);
    assert_int_equal(f->p.calls[HK_ON_TRAIN_BATCH_END], 3);
    assert_int_equal(f->m.backward_calls, 3);
    fx_free(f);
  }
}

/* The skipped step leaves the parameters exactly as they were. */
static hk_signal skip_and_copy(probe *p, hk_ctx *ctx) {
  float *keep = (float *)(intptr_t)p->arg;
  if (ctx->event == HK_ON_TRAIN_BATCH_START && p->calls[ctx->event] == 2) {
    memcpy(keep, ctx->params[0].data, 4 * sizeof(float));
    return HK_SKIP_STEP;
  }
  if (ctx->event == HK_ON_TRAIN_BATCH_END && p->calls[ctx->event] == 2)
    assert_memory_equal(keep, ctx->params[0].data, 4 * sizeof(float));
  return HK_CONTINUE;
}
static void test_signal_skip_step_params(void **state) {
  fx *f = fx_new(3, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 0);
  float keep[4];
  (void)state;
  f->p.act = skip_and_copy;
  f->p.arg = (int64_t)(intptr_t)keep;
  c.max_epochs = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_BATCH_END], 3);
  fx_free(f);
}

/* HK_SKIP_BATCH from on_train_batch_start: no forward, no backward, no step; batch_end still fires. */
static void test_signal_skip_batch(void **state) {
  fx *f = fx_new(3, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 0);
  (void)state;
  c.max_epochs = 1;
  set_act(f, HK_ON_TRAIN_BATCH_START, 2, HK_SKIP_BATCH);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_log(&f->p,
    "setup configure_model on_fit_start on_train_start on_train_epoch_start " TRAIN_BATCH_NO_CLIP
    "on_train_batch_start on_train_batch_end " TRAIN_BATCH_NO_CLIP
    "on_train_epoch_end on_train_end on_fit_end teardown ");
  assert_int_equal(f->m.forward_calls, 2);
  assert_int_equal(f->t.global_step, 2);
  fx_free(f);

  /* from on_before_backward: forward ran, backward did not */
  f = fx_new(3, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  c.max_epochs = 1;
  set_act(f, HK_ON_BEFORE_BACKWARD, 1, HK_SKIP_BATCH);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->m.forward_calls, 3);
  assert_int_equal(f->m.backward_calls, 2);
  assert_int_equal(f->t.global_step, 2);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_BATCH_END], 3);
  fx_free(f);

  /* in validation: the batch is not counted in the mean */
  f = fx_new(1, 3, NULL, NULL, 1);
  set_act(f, HK_ON_VALIDATION_BATCH_START, 2, HK_SKIP_BATCH);
  assert_int_equal(tr_validate(&f->t, &f->val_d, 0, NULL), TR_OK);
  assert_int_equal(f->m.forward_calls, 2);
  assert_int_equal(f->p.calls[HK_ON_VALIDATION_BATCH_END], 3);
  fx_free(f);
}

/* HK_STOP_EPOCH: the epoch ends after this batch (its validation and on_train_epoch_end run); the
   next epoch starts normally. */
static void test_signal_stop_epoch(void **state) {
  fx *f = fx_new(4, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 1);
  (void)state;
  c.max_epochs = 2;
  c.num_sanity_val_steps = -1;
  set_act(f, HK_ON_TRAIN_BATCH_END, 2, HK_STOP_EPOCH);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_log(&f->p,
    "setup configure_model on_fit_start on_train_start "
    "on_train_epoch_start " TRAIN_BATCH_NO_CLIP TRAIN_BATCH_NO_CLIP VALIDATION_1 "on_train_epoch_end "
    "on_train_epoch_start " TRAIN_BATCH_NO_CLIP TRAIN_BATCH_NO_CLIP TRAIN_BATCH_NO_CLIP TRAIN_BATCH_NO_CLIP
    VALIDATION_1 "on_train_epoch_end on_train_end on_fit_end teardown ");
  assert_int_equal(f->t.global_step, 6);
  assert_int_equal(f->t.epoch, 2);
  fx_free(f);

  /* from on_train_epoch_start: the epoch has no batches */
  f = fx_new(4, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  c.max_epochs = 2;
  set_act(f, HK_ON_TRAIN_EPOCH_START, 1, HK_STOP_EPOCH);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->t.global_step, 4);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_EPOCH_END], 2);

  /* in a validation run: the loop ends after that batch */
  f->p.calls[HK_ON_VALIDATION_BATCH_END] = 0;
  set_act(f, HK_ON_VALIDATION_BATCH_END, 1, HK_STOP_EPOCH);
  assert_int_equal(tr_validate(&f->t, &f->val_d, 0, NULL), TR_OK);
  assert_int_equal(f->p.calls[HK_ON_VALIDATION_BATCH_END], 1);
  fx_free(f);
}

/* HK_STOP: training ends gracefully after the current batch: epoch end (with validation),
   on_train_end, on_fit_end, teardown, and tr_fit returns TR_OK. */
static void test_signal_stop(void **state) {
  fx *f = fx_new(4, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 1);
  (void)state;
  c.max_epochs = 5;
  c.num_sanity_val_steps = -1;
  set_act(f, HK_ON_TRAIN_BATCH_START, 2, HK_STOP);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_log(&f->p,
    "setup configure_model on_fit_start on_train_start "
    "on_train_epoch_start " TRAIN_BATCH_NO_CLIP TRAIN_BATCH_NO_CLIP VALIDATION_1
    "on_train_epoch_end on_train_end on_fit_end teardown ");
  assert_int_equal(f->t.global_step, 2);
  assert_int_equal(f->t.epoch, 1);
  fx_free(f);

  /* held back by min_epochs = 2: training stops once two epochs are complete */
  f = fx_new(4, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  c.max_epochs = 5;
  c.min_epochs = 2;
  set_act(f, HK_ON_TRAIN_BATCH_END, 1, HK_STOP);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->t.global_step, 8);
  assert_int_equal(f->t.epoch, 2);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_EPOCH_START], 2);
  fx_free(f);

  /* held back by min_steps = 6 */
  f = fx_new(4, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  c.max_epochs = 5;
  c.min_steps = 6;
  set_act(f, HK_ON_TRAIN_BATCH_END, 1, HK_STOP);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->t.global_step, 6);
  fx_free(f);

  /* from the sanity check's validation: no training at all */
  f = fx_new(4, 1, NULL, NULL, 1);
  c = fx_config(f, 1);
  set_act(f, HK_ON_VALIDATION_END, 1, HK_STOP);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->t.global_step, 0);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_START], 1);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_EPOCH_START], 0);
  assert_int_equal(f->p.calls[HK_ON_FIT_END], 1);
  fx_free(f);
}

/* Signals an event does not honour degrade (hooks.h's table): they change nothing here. */
static void test_signal_not_honoured(void **state) {
  static const struct { int event; hk_signal sig; } cases[] = {
    { HK_ON_AFTER_OPTIMIZER_STEP, HK_SKIP_STEP }, { HK_ON_TRAIN_BATCH_END, HK_SKIP_BATCH },
    { HK_ON_VALIDATION_START, HK_STOP_EPOCH }, { HK_ON_VALIDATION_BATCH_END, HK_SKIP_BATCH },
    { HK_ON_TRAIN_EPOCH_END, HK_STOP_EPOCH }, { HK_TEARDOWN, HK_FAIL }, { HK_SETUP, HK_SKIP_STEP },
  };
  size_t k;
  (void)state;
  for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    fx *f = fx_new(3, 2, NULL, NULL, 1);
    tr_config c = fx_config(f, 1);
    c.max_epochs = 2;
    set_act(f, cases[k].event, 1, cases[k].sig);
    assert_int_equal(tr_fit(&f->t, &c), TR_OK);
    assert_int_equal(f->t.global_step, 6);
    assert_int_equal(f->p.calls[HK_ON_VALIDATION_BATCH_END], 2 + 2 * 2);
    assert_int_equal(f->p.calls[HK_ON_EXCEPTION], 0);
    fx_free(f);
  }
  /* HK_STOP from a checkpoint event is not a stop */
  {
    fx *f = fx_new(3, 1, NULL, NULL, 1);
    tr_config c = fx_config(f, 0);
    char p[512];
    path_in_dir(p, sizeof p, "stop.ckpt");
    c.max_epochs = 2;
    c.save_to = p;
    f->p.act = request_at;
    f->p.arg = HK_REQUEST_CHECKPOINT;
    f->p.arg2 = 1;
    set_act(f, HK_ON_SAVE_CHECKPOINT, 1, HK_STOP);
    f->p.act = request_then_act;
    assert_int_equal(tr_fit(&f->t, &c), TR_OK);
    assert_int_equal(f->p.calls[HK_ON_SAVE_CHECKPOINT], 1);
    assert_int_equal(f->t.global_step, 6);
    fx_free(f);
  }
}

/* HK_FAIL: on_exception, then teardown; no on_train_end / on_fit_end; an error with the hook's
   name and message. Every event that can fail is tried. */
static hk_signal fail_at(probe *p, hk_ctx *ctx) {
  if (ctx->event == g_act.event && p->calls[ctx->event] == 1) return hk_fail(ctx, "boom at %s", hk_event_name(ctx->reg, ctx->event));
  return HK_CONTINUE;
}
static void test_signal_fail(void **state) {
  int ev;
  (void)state;
  for (ev = 0; ev < HK_EVENT_COUNT; ev++) {
    fx *f;
    tr_config c;
    char want[128];
    tr_err e;
    if (ev == HK_ON_EXCEPTION || ev == HK_TEARDOWN || ev == HK_ON_SAVE_CHECKPOINT || ev == HK_ON_LOAD_CHECKPOINT ||
        ev == HK_ON_CHECKPOINT_SAVED || (ev >= HK_ON_TEST_START && ev <= HK_ON_PREDICT_END) || ev > HK_TEARDOWN)
      continue; /* not fired by fit (checkpoint events: see the checkpoint tests; after teardown: tr_sweep's) */
    f = fx_new(2, 1, NULL, NULL, 1);
    c = fx_config(f, 1);
    c.max_epochs = 1;
    c.gradient_clip_val = 1.0;
    g_act.event = ev;
    f->p.act = fail_at;
    e = tr_fit(&f->t, &c);
    assert_int_equal(e, TR_ERR_HOOK);
    snprintf(want, sizeof want, "callback 'probe' failed in %s: boom at %s", hk_event_name(NULL, ev), hk_event_name(NULL, ev));
    if (strcmp(tr_error(&f->t), want) != 0) fail_msg("error '%s', expected '%s'", tr_error(&f->t), want);
    assert_string_equal(f->p.error_seen, want); /* on_exception saw it in ctx->abort_reason */
    assert_int_equal(f->p.calls[HK_ON_EXCEPTION], 1);
    assert_int_equal(f->p.calls[HK_TEARDOWN], 1);
    assert_int_equal(f->p.stages[HK_TEARDOWN], HK_STAGE_FIT);
    if (ev != HK_ON_FIT_END) assert_int_equal(f->p.calls[HK_ON_FIT_END], 0);
    if (ev != HK_ON_TRAIN_END && ev != HK_ON_FIT_END) assert_int_equal(f->p.calls[HK_ON_TRAIN_END], 0);
    /* the last two events are on_exception and teardown */
    assert_non_null(strstr(f->p.log, "on_exception teardown "));
    assert_int_equal(strlen(strstr(f->p.log, "on_exception teardown ")), strlen("on_exception teardown "));
    assert_int_equal(f->t.running, HK_STAGE_NONE);
    fx_free(f);
  }
}

/* Failing in a test run takes the same path. */
static void test_signal_fail_in_test(void **state) {
  fx *f = fx_new(1, 2, NULL, NULL, 1);
  (void)state;
  g_act.event = HK_ON_TEST_BATCH_END;
  f->p.act = fail_at;
  assert_int_equal(tr_test(&f->t, &f->val_d, 0, NULL), TR_ERR_HOOK);
  assert_int_equal(f->p.calls[HK_ON_EXCEPTION], 1);
  assert_int_equal(f->p.calls[HK_TEARDOWN], 1);
  assert_int_equal(f->p.stages[HK_TEARDOWN], HK_STAGE_TEST);
  assert_int_equal(f->p.calls[HK_ON_TEST_END], 0);
  fx_free(f);
}

/* =================================================================================================
   The failure path
   ================================================================================================= */
typedef struct exc_rec { int order[8]; int n; char seen[8][160]; } exc_rec;
static exc_rec g_exc;
/* each handler records the abort reason it sees in ctx->abort_reason: a failing handler must not change it */
static void exc_note(hk_ctx *ctx, int who) {
  snprintf(g_exc.seen[g_exc.n], sizeof g_exc.seen[0], "%s", ctx->abort_reason ? ctx->abort_reason : "(null)");
  g_exc.order[g_exc.n++] = who;
}
static hk_signal exc_a(hk_ctx *ctx, void *u) { (void)u; exc_note(ctx, 1); return hk_fail(ctx, "handler A broke too"); }
static hk_signal exc_b(hk_ctx *ctx, void *u) { (void)u; exc_note(ctx, 2); return HK_CONTINUE; }
static hk_signal exc_c(hk_ctx *ctx, void *u) { (void)u; exc_note(ctx, 3); return hk_fail(ctx, "C as well"); }
static hk_signal td(hk_ctx *ctx, void *u) { (void)u; (void)ctx; g_exc.order[g_exc.n++] = 9; return HK_CONTINUE; }

/* Every on_exception handler runs even when others fail; teardown runs; the error is the original. */
static void test_on_exception_all_run(void **state) {
  fx *f = fx_new(2, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 0);
  hk_opts model;
  (void)state;
  memset(&g_exc, 0, sizeof g_exc);
  memset(&model, 0, sizeof model);
  model.tier = HK_TIER_MODEL;
  assert_int_equal(hk_on(f->reg, HK_ON_EXCEPTION, exc_a, NULL, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(f->reg, HK_ON_EXCEPTION, exc_b, NULL, &model, NULL), HK_OK);
  assert_int_equal(hk_on(f->reg, HK_ON_EXCEPTION, exc_c, NULL, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(f->reg, HK_TEARDOWN, td, NULL, NULL, NULL), HK_OK);
  g_act.event = HK_ON_AFTER_BACKWARD;
  f->p.act = fail_at;
  c.max_epochs = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_HOOK);
  assert_int_equal(g_exc.n, 4);
  assert_int_equal(g_exc.order[0], 1); /* callbacks in registration order (probe, A, C), then the model */
  assert_int_equal(g_exc.order[1], 3);
  assert_int_equal(g_exc.order[2], 2);
  assert_int_equal(g_exc.order[3], 9);
  assert_string_equal(tr_error(&f->t), "callback 'probe' failed in on_after_backward: boom at on_after_backward");
  assert_string_equal(g_exc.seen[0], "callback 'probe' failed in on_after_backward: boom at on_after_backward");
  assert_string_equal(g_exc.seen[1], g_exc.seen[0]); /* C runs after A failed: same reason */
  assert_string_equal(g_exc.seen[2], g_exc.seen[0]); /* and so does the model's handler */
  assert_int_equal(f->p.calls[HK_ON_EXCEPTION], 1);
  assert_int_equal(f->t.global_step, 0);
  fx_free(f);
}

/* A model or data function that fails takes the same path. */
static int bad_get(void *user, int64_t index, void **batch) { (void)user; (void)batch; return index == 1 ? 5 : data_get(user, index, batch); }
static void test_model_error(void **state) {
  fx *f = fx_new(3, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 0);
  (void)state;
  f->train_d.get = bad_get;
  c.max_epochs = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_MODEL);
  assert_string_equal(tr_error(&f->t), "train data: get(1) returned 5");
  assert_int_equal(f->p.calls[HK_ON_EXCEPTION], 1);
  assert_int_equal(f->p.calls[HK_TEARDOWN], 1);
  assert_int_equal(f->t.global_step, 1);
  fx_free(f);
}

/* A NaN loss: fail (default), skip the batch, or ignore it. */
static void test_nonfinite_loss(void **state) {
  fx *f = fx_new(3, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 0);
  (void)state;
  f->m.nan_at = 1;
  c.max_epochs = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_NONFINITE);
  assert_string_equal(tr_error(&f->t), "the training loss is nan at epoch 0, batch 1, step 1");
  assert_int_equal(f->p.calls[HK_ON_EXCEPTION], 1);
  assert_int_equal(f->p.calls[HK_TEARDOWN], 1);
  assert_int_equal(f->m.backward_calls, 1);
  fx_free(f);

  f = fx_new(3, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  f->m.nan_at = 1;
  c.max_epochs = 1;
  c.on_nonfinite_loss = TR_NONFINITE_SKIP;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->m.backward_calls, 2);
  assert_int_equal(f->t.global_step, 2);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_BATCH_END], 3);
  assert_non_null(strstr(fx_logtext(f), "warning: the training loss is nan at epoch 0, batch 1: batch skipped"));
  fx_free(f);

  f = fx_new(3, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  f->m.nan_at = 1;
  c.max_epochs = 1;
  c.on_nonfinite_loss = TR_NONFINITE_IGNORE;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->m.backward_calls, 3);
  fx_free(f);

  {
    double inf = HUGE_VAL, nan_v;
    uint64_t bits = 0xfff8000000000001ull;
    memcpy(&nan_v, &bits, 8);
    assert_false(hk_is_finite(inf));
    assert_false(hk_is_finite(-inf));
    assert_false(hk_is_finite(nan_v));
    assert_true(hk_is_finite(1e308));
    assert_true(hk_is_finite(-0.0));
  }
}

/* =================================================================================================
   Ctrl-C
   ================================================================================================= */
static volatile sig_atomic_t g_user_sigint;
static void user_handler(int sig) { (void)sig; g_user_sigint++; }

static int g_stop_sig = SIGINT; /* what raise_sigint raises */
static hk_signal raise_sigint(probe *p, hk_ctx *ctx) {
  if (ctx->event == g_act.event && p->calls[ctx->event] == g_act.call) {
    int i;
    for (i = 0; i < (int)p->arg; i++) raise(g_stop_sig);
  }
  return HK_CONTINUE;
}

/* A one-epoch fit of 4 batches whose probe raises g_stop_sig `times` times at event's call-th call, with the
   trainer's handler on (no_sigint = 0). */
static fx *fx_raising(tr_config *c, hk_event event, int call, int times) {
  fx *f = fx_new(4, 1, NULL, NULL, 1);
  *c = fx_config(f, 0);
  c->no_sigint = 0;
  c->max_epochs = 1;
  g_act.event = event;
  g_act.call = call;
  f->p.arg = times;
  f->p.act = raise_sigint;
  return f;
}

static hk_signal save_on_exception(hk_ctx *ctx, void *u);
static int file_exists(const char *path);
static void test_sigint(void **state) {
  fx *f;
  tr_config c;
  char ck[512];
  void (*prev)(int);
  int k;
  (void)state;
  prev = signal(SIGINT, user_handler);
  g_user_sigint = 0;

  /* once: the current batch completes (step taken, on_train_batch_end fired), then the abort path; SIGTERM
     (Slurm's scancel, mpirun, a pod's shutdown) ends the same way, and the message names the signal */
  for (k = 0; k < 2; k++) {
    static const int sig[] = { SIGINT, SIGTERM };
    static const char *const said[] = { "interrupted (Ctrl-C)", "interrupted (SIGTERM)" };
    void (*before)(int) = sig[k] == SIGINT ? user_handler : SIG_DFL; /* what the program had */
    f = fx_raising(&c, HK_ON_TRAIN_BATCH_START, 2, 1);
    g_stop_sig = sig[k];
    assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INTERRUPTED);
    g_stop_sig = SIGINT;
    assert_string_equal(tr_error(&f->t), said[k]);
    assert_int_equal(f->t.global_step, 2);
    assert_int_equal(f->p.calls[HK_ON_TRAIN_BATCH_END], 2);
    assert_int_equal(f->p.calls[HK_ON_EXCEPTION], 1);
    assert_string_equal(f->p.error_seen, said[k]);
    assert_int_equal(f->p.calls[HK_TEARDOWN], 1);
    assert_int_equal(f->p.calls[HK_ON_TRAIN_END], 0);
    assert_int_equal(g_user_sigint, 0);           /* the trainer's handler caught it */
    assert_true(signal(sig[k], before) == before); /* and the program's is back */
    fx_free(f);
  }

  /* twice: stops at once, in the middle of the batch: no step, no on_train_batch_end; an
     on_exception handler can still save a checkpoint */
  f = fx_raising(&c, HK_ON_AFTER_BACKWARD, 2, 2);
  path_in_dir(ck, sizeof ck, "ctrl-c.ckpt");
  assert_int_equal(hk_on(f->reg, HK_ON_EXCEPTION, save_on_exception, ck, NULL, NULL), HK_OK);
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INTERRUPTED);
  assert_string_equal(tr_error(&f->t), "interrupted (Ctrl-C twice)");
  assert_int_equal(f->t.global_step, 1);
  assert_int_equal(f->p.calls[HK_ON_BEFORE_OPTIMIZER_STEP], 1);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_BATCH_END], 1);
  assert_int_equal(f->p.calls[HK_ON_EXCEPTION], 1);
  assert_int_equal(f->p.calls[HK_TEARDOWN], 1);
  assert_int_equal(f->p.calls[HK_ON_CHECKPOINT_SAVED], 1);
  assert_true(file_exists(ck));
  assert_string_equal(tr_error(&f->t), "interrupted (Ctrl-C twice)"); /* the save kept the run's error */
  assert_true(signal(SIGINT, user_handler) == user_handler);
  fx_free(f);

  /* no_sigint: the trainer leaves SIGINT to the program */
  f = fx_raising(&c, HK_ON_TRAIN_BATCH_START, 1, 1);
  c.no_sigint = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(g_user_sigint, 1);
  assert_int_equal(f->t.global_step, 4);
  fx_free(f);

  /* a program that ignores SIGINT (a background job of a script) keeps ignoring it during tr_fit */
  signal(SIGINT, SIG_IGN);
  f = fx_raising(&c, HK_ON_TRAIN_BATCH_START, 1, 2);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->t.global_step, 4);
  assert_true(signal(SIGINT, user_handler) == SIG_IGN);
  fx_free(f);

  /* inside a loop that installed hooks.h's helper itself: only the signals during tr_fit count there,
     and the loop's count and handler are there afterwards */
  g_user_sigint = 0;
  assert_int_equal(hk_stop_signals_install(0), 0);
  raise(SIGINT); /* the loop's own: tr_fit does not act on it */
  f = fx_raising(&c, HK_ON_TRAIN_BATCH_START, 3, 1); /* the second signal: counted (tr_fit counts only), the first for tr_fit */
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INTERRUPTED);
  assert_string_equal(tr_error(&f->t), "interrupted (Ctrl-C)");
  assert_int_equal(f->t.global_step, 3);
  assert_int_equal(hk_stop_requested(), 2);
  fx_free(f);
  hk_stop_signals_restore();
  assert_true(signal(SIGINT, prev) == user_handler);
  assert_int_equal(g_user_sigint, 0);
}

/* =================================================================================================
   Requests
   ================================================================================================= */
static hk_signal request_at(probe *p, hk_ctx *ctx) {
  if (ctx->event == HK_ON_TRAIN_BATCH_END && p->calls[ctx->event] == (int)p->arg2) hk_request(ctx, (unsigned)p->arg);
  return HK_CONTINUE;
}
static void test_requests(void **state) {
  fx *f = fx_new(3, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 1);
  char ck[512];
  FILE *fp;
  (void)state;
  path_in_dir(ck, sizeof ck, "requested.ckpt");
  remove(ck);
  c.max_epochs = 1;
  c.num_sanity_val_steps = -1;
  c.save_to = ck;
  f->p.act = request_at;
  f->p.arg = HK_REQUEST_VALIDATION | HK_REQUEST_CHECKPOINT | HK_REQUEST_LOG;
  f->p.arg2 = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_log(&f->p,
    "setup configure_model on_fit_start on_train_start on_train_epoch_start " TRAIN_BATCH_NO_CLIP
    VALIDATION_1 "on_save_checkpoint on_checkpoint_saved on_log "
    TRAIN_BATCH_NO_CLIP TRAIN_BATCH_NO_CLIP VALIDATION_1 "on_train_epoch_end on_train_end on_fit_end teardown ");
  assert_string_equal(f->p.paths[HK_ON_CHECKPOINT_SAVED], ck);
  fp = fopen(ck, "rb");
  assert_non_null(fp);
  fclose(fp);
  assert_non_null(strstr(fx_logtext(f), "epoch=0 step=1 batch=0 loss="));
  assert_non_null(strstr(fx_logtext(f), " train/loss="));
  assert_int_equal(f->t.ctx.requests, 0);
  fx_free(f);

  /* a checkpoint request without save_to only warns */
  f = fx_new(2, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  c.max_epochs = 1;
  f->p.act = request_at;
  f->p.arg = HK_REQUEST_CHECKPOINT;
  f->p.arg2 = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_non_null(strstr(fx_logtext(f), "warning: a hook requested a checkpoint but no default path is set (tr_run_desc.save_to; tr_config.save_to for train.h's trainer)"));
  assert_int_equal(f->p.calls[HK_ON_SAVE_CHECKPOINT], 0);
  fx_free(f);
}

/* =================================================================================================
   Checkpoints
   ================================================================================================= */

/* A stateful hook: counts training batches and steps and hashes what it saw. */
typedef struct stats { int64_t batch_ends, steps; uint64_t hash; int reject; } stats;
static uint64_t mix(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  size_t i;
  for (i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}
static hk_signal stats_batch_end(hk_ctx *ctx, void *u) {
  stats *s = (stats *)u;
  s->batch_ends++;
  s->hash = mix(s->hash, &ctx->loss, sizeof ctx->loss);
  return HK_CONTINUE;
}
static hk_signal stats_step(hk_ctx *ctx, void *u) {
  stats *s = (stats *)u;
  s->steps++;
  s->hash = mix(s->hash, &ctx->lr, sizeof ctx->lr);
  s->hash = mix(s->hash, ctx->params[0].data, ctx->params[0].count * sizeof(float));
  return HK_CONTINUE;
}
static int stats_save(void *u, hk_bytes *out) {
  stats *s = (stats *)u;
  return hk_bytes_put(out, &s->batch_ends, 8) || hk_bytes_put(out, &s->steps, 8) || hk_bytes_put(out, &s->hash, 8);
}
static int stats_load(void *u, hk_reader *in) {
  stats *s = (stats *)u, tmp;
  if (s->reject) return 1;
  if (hk_read(in, &tmp.batch_ends, 8) || hk_read(in, &tmp.steps, 8) || hk_read(in, &tmp.hash, 8) || in->pos != in->len) return 1;
  s->batch_ends = tmp.batch_ends;
  s->steps = tmp.steps;
  s->hash = tmp.hash;
  return 0;
}
static void add_stats(fx *f, stats *s, const char *name) {
  hk_callback cb;
  memset(&cb, 0, sizeof cb);
  cb.name = name;
  cb.user = s;
  cb.on_train_batch_end = stats_batch_end;
  cb.on_after_optimizer_step = stats_step;
  cb.save_state = stats_save;
  cb.load_state = stats_load;
  assert_int_equal(hk_add_callback(f->reg, &cb, NULL, NULL), HK_OK);
}


static int file_exists(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (fp) fclose(fp);
  return fp != NULL;
}

/* The trainer's whole state, as bytes: a checkpoint written to a scratch file. */
static unsigned char *state_bytes(fx *f, size_t *len) {
  char p[512];
  path_in_dir(p, sizeof p, "state.ckpt");
  assert_int_equal(tr_save(&f->t, p), TR_OK);
  return (unsigned char *)slurp_len(p, len);
}

typedef struct ckpt_fx { fx *f; stats st; unsigned char *file, *before; size_t len, before_len; char path[512]; } ckpt_fx;

/* A trainer with a saved checkpoint, then trained a bit further so that its state differs. */
static void ckpt_setup(ckpt_fx *k) {
  tr_config c;
  memset(k, 0, sizeof *k);
  k->f = fx_new(3, 1, NULL, NULL, 1);
  add_stats(k->f, &k->st, "stats");
  c = fx_config(k->f, 0);
  c.max_steps = 2;
  assert_int_equal(tr_fit(&k->f->t, &c), TR_OK);
  path_in_dir(k->path, sizeof k->path, "good.ckpt");
  assert_int_equal(tr_save(&k->f->t, k->path), TR_OK);
  k->file = (unsigned char *)slurp_len(k->path, &k->len);
  c.max_steps = 3;
  assert_int_equal(tr_fit(&k->f->t, &c), TR_OK);
  k->before = state_bytes(k->f, &k->before_len);
}
static void ckpt_teardown(ckpt_fx *k) {
  free(k->file);
  free(k->before);
  fx_free(k->f);
}
/* Loading `data` fails with `want`, and leaves the trainer and its hooks exactly as they were.
   The error message is kept in g_reject_msg. */
static char g_reject_msg[512];
static void expect_reject(ckpt_fx *k, const unsigned char *data, size_t len, tr_err want, const char *what) {
  size_t n;
  unsigned char *after;
  tr_err e = tr_load_mem(&k->f->t, data, len);
  snprintf(g_reject_msg, sizeof g_reject_msg, "%s", tr_error(&k->f->t));
  if (e != want) fail_msg("%s: got %s (%s), expected %s", what, tr_err_name(e), tr_error(&k->f->t), tr_err_name(want));
  after = state_bytes(k->f, &n);
  if (n != k->before_len || memcmp(after, k->before, n) != 0) fail_msg("%s: the trainer changed", what);
  free(after);
}

static void test_ckpt_roundtrip_and_events(void **state) {
  ckpt_fx k;
  stats keep;
  (void)state;
  ckpt_setup(&k);
  assert_int_equal(k.f->p.calls[HK_ON_SAVE_CHECKPOINT], 2); /* good.ckpt, then state.ckpt */
  assert_int_equal(k.f->p.calls[HK_ON_CHECKPOINT_SAVED], 2);
  assert_non_null(strstr(k.f->p.paths[HK_ON_CHECKPOINT_SAVED], "/state.ckpt"));
  assert_string_equal(k.f->p.paths[HK_ON_TRAIN_BATCH_END], "(null)");
  keep = k.st;
  assert_int_equal(k.st.steps, 3);
  assert_int_equal(tr_load(&k.f->t, k.path), TR_OK);
  assert_int_equal(k.f->p.calls[HK_ON_LOAD_CHECKPOINT], 1);
  assert_string_equal(k.f->p.paths[HK_ON_LOAD_CHECKPOINT], k.path);
  assert_int_equal(k.st.steps, 2);       /* hook state restored */
  assert_true(k.st.hash != keep.hash);
  assert_int_equal(k.f->t.global_step, 2);
  assert_int_equal(k.f->t.epoch_batch, 2);
  {
    size_t n;
    unsigned char *again = state_bytes(k.f, &n);
    assert_int_equal(n, k.len);
    assert_memory_equal(again, k.file, n); /* load then save gives the same file */
    free(again);
  }
  {
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", k.path);
    assert_false(file_exists(tmp));
  }
  ckpt_teardown(&k);
}

static void test_ckpt_missing_and_io(void **state) {
  ckpt_fx k;
  char p[512];
  (void)state;
  ckpt_setup(&k);
  path_in_dir(p, sizeof p, "no-such.ckpt");
  assert_int_equal(tr_load(&k.f->t, p), TR_ERR_NOT_FOUND);
  assert_non_null(strstr(tr_error(&k.f->t), "does not exist"));
  assert_non_null(strstr(tr_error(&k.f->t), "no-such.ckpt"));
  assert_int_equal(tr_save(&k.f->t, "/nonexistent-dir/x.ckpt"), TR_ERR_IO);
  assert_non_null(strstr(tr_error(&k.f->t), "/nonexistent-dir/x.ckpt"));
  assert_int_equal(tr_load(&k.f->t, g_dir), TR_ERR_IO); /* a directory */
  ckpt_teardown(&k);
}

static void test_ckpt_truncated_everywhere(void **state) {
  ckpt_fx k;
  size_t cut;
  char what[64];
  (void)state;
  ckpt_setup(&k);
  for (cut = 0; cut < k.len; cut++) {
    snprintf(what, sizeof what, "truncated to %zu of %zu bytes", cut, k.len);
    expect_reject(&k, k.file, cut, TR_ERR_FORMAT, what);
  }
  assert_non_null(strstr(g_reject_msg, "truncated"));
  {
    unsigned char *longer = (unsigned char *)malloc(k.len + 3);
    memcpy(longer, k.file, k.len);
    memset(longer + k.len, 0, 3);
    expect_reject(&k, longer, k.len + 3, TR_ERR_FORMAT, "trailing bytes");
    assert_non_null(strstr(g_reject_msg, "after the END section"));
    free(longer);
  }
  /* also through a truncated file on disk */
  {
    char p[512];
    FILE *fp;
    path_in_dir(p, sizeof p, "short.ckpt");
    fp = fopen(p, "wb");
    fwrite(k.file, 1, k.len / 2, fp);
    fclose(fp);
    assert_int_equal(tr_load(&k.f->t, p), TR_ERR_FORMAT);
  }
  ckpt_teardown(&k);
}

/* What a refusal names (issue 28 item 10): a truncated, corrupted or foreign file names the file; a
   run layer's checkpoint (tr_run_save) says what it is and what loads it; a file name that cannot be
   made is refused at set-up, not at the first save; a schedule without its total says what the total
   is and how to set it. */
static int own_model_save(void *user, FILE *f) { return fwrite(user, 1, 16, f) == 16 ? 0 : -1; }
static int own_model_load(void *user, FILE *f) { return fread(user, 1, 16, f) == 16 ? 0 : -1; }
static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, n, fp), n);
  fclose(fp);
}
static void test_refusals_name_what(void **state) {
  ckpt_fx k;
  char p[512], want[1024], longname[301];
  unsigned char *bad;
  (void)state;
  ckpt_setup(&k);
  /* truncated, corrupted, not a checkpoint: each names the file */
  path_in_dir(p, sizeof p, "short.ckpt");
  write_bytes(p, k.file, k.len / 2);
  assert_int_equal(tr_load(&k.f->t, p), TR_ERR_FORMAT);
  snprintf(want, sizeof want, "checkpoint '%s' truncated: ", p);
  if (strncmp(tr_error(&k.f->t), want, strlen(want))) fail_msg("'%s' does not start with '%s'", tr_error(&k.f->t), want);
  bad = (unsigned char *)malloc(k.len);
  memcpy(bad, k.file, k.len);
  bad[k.len / 2] ^= 0x40;
  path_in_dir(p, sizeof p, "flipped.ckpt");
  write_bytes(p, bad, k.len);
  free(bad);
  assert_int_equal(tr_load(&k.f->t, p), TR_ERR_FORMAT);
  snprintf(want, sizeof want, "checkpoint '%s' corrupted: ", p);
  if (strncmp(tr_error(&k.f->t), want, strlen(want))) fail_msg("'%s' does not start with '%s'", tr_error(&k.f->t), want);
  path_in_dir(p, sizeof p, "notes.txt");
  write_bytes(p, "these are my notes, not a checkpoint\n", 37);
  assert_int_equal(tr_load(&k.f->t, p), TR_ERR_FORMAT);
  snprintf(want, sizeof want, "'%s' is not a train.h checkpoint (bad magic)", p);
  assert_string_equal(tr_error(&k.f->t), want);
  /* a checkpoint of a loop of one's own, handed to tr_fit */
  {
    hk_registry *reg = hk_create(NULL);
    hk_ctx ctx;
    unsigned char model[16] = { 1, 2, 3 };
    tr_run_desc d;
    tr_config c = fx_config(k.f, 0);
    memset(&ctx, 0, sizeof ctx);
    memset(&d, 0, sizeof d);
    d.epochs = TR_NO;
    d.save_model = own_model_save;
    d.load_model = own_model_load;
    d.model_user = model;
    d.log_every_n_steps = -1;
    d.no_signals = 1;
    path_in_dir(p, sizeof p, "own_loop.ckpt");
    assert_int_equal(tr_run_setup(reg, &d), TR_OK);
    assert_int_equal(tr_run_start(reg, &ctx, NULL), TR_OK);
    assert_int_equal(tr_run_save(reg, &ctx, p), TR_OK);
    assert_int_equal(tr_run_finish(reg, &ctx, TR_OK), TR_OK);
    hk_ctx_free(&ctx);
    hk_destroy(reg);
    c.max_steps = 2;
    c.resume_from = p;
    assert_int_equal(tr_fit(&k.f->t, &c), TR_ERR_FORMAT);
    snprintf(want, sizeof want, "'%s' is not a checkpoint of train.h's trainer: it is the checkpoint of a loop of your own "
             "(tr_run_save wrote it, your model's bytes first); tr_run_load loads it (tr_run_start's resume_from), not tr_fit's "
             "resume_from or tr_load", p);
    assert_string_equal(tr_error(&k.f->t), want);
  }
  ckpt_teardown(&k);

  /* a 300-byte file name: refused when the callback is made */
  {
    hk_registry *reg = hk_create(NULL);
    tr_model_checkpoint_desc md;
    tr_on_exception_checkpoint_desc od;
    memset(&md, 0, sizeof md);
    memset(&od, 0, sizeof od);
    memset(longname, 'x', 300);
    longname[300] = 0;
    md.dirpath = od.dirpath = "/tmp";
    md.filename = od.filename = longname;
    assert_int_equal(tr_model_checkpoint(reg, &md, NULL), TR_ERR_INVALID);
    assert_non_null(strstr(hk_last_error(reg), "model_checkpoint: filename 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' (300 bytes "
                                               "without its fields) makes file names longer than the 255 bytes a file name can have"));
    assert_int_equal(tr_on_exception_checkpoint(reg, &od, NULL), TR_ERR_INVALID);
    assert_non_null(strstr(hk_last_error(reg), "on_exception_checkpoint: filename 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' is "
                                               "300 bytes: with \".ckpt\" longer than the 255 bytes a file name can have"));
    longname[250] = 0; /* 250 + ".ckpt": taken */
    assert_int_equal(tr_model_checkpoint(reg, &md, NULL), TR_OK);
    assert_int_equal(tr_on_exception_checkpoint(reg, &od, NULL), TR_OK);
    hk_destroy(reg);
  }

  /* cosine without a total it can take from the run */
  {
    tr_sched s;
    fx *f;
    tr_config c;
    memset(&s, 0, sizeof s);
    s.kind = TR_SCHED_COSINE;
    f = fx_new(2, 1, NULL, &s, 1);
    c = fx_config(f, 0);
    c.max_epochs = 3;
    assert_int_equal(tr_fit(&f->t, &c), TR_ERR_INVALID);
    assert_string_equal(tr_error(&f->t), "tr_fit: the cosine schedule needs its total, the scheduler steps of the whole curve "
                        "(optimizer steps; epochs with per_epoch=true): give sched.total (in a spec: cosine(total=N)), or "
                        "tr_config.max_steps (max_epochs does not give the steps: the batches per epoch are not known before the fit) "
                        "so that the run's length is the total");
    fx_free(f);
  }
}

static void test_ckpt_flipped_bytes(void **state) {
  ckpt_fx k;
  size_t i;
  int m;
  static const unsigned char masks[] = { 0x01, 0x80, 0xff };
  unsigned char *bad;
  char what[64];
  (void)state;
  ckpt_setup(&k);
  bad = (unsigned char *)malloc(k.len);
  for (i = 0; i < k.len; i++)
    for (m = 0; m < 3; m++) {
      tr_err want = (i >= 8 && i < 12) ? TR_ERR_VERSION : TR_ERR_FORMAT;
      memcpy(bad, k.file, k.len);
      bad[i] ^= masks[m];
      if (i == 8 && bad[i] >= 1 && bad[i] < TR__VERSION) want = TR_ERR_FORMAT; /* an older version: its checksums differ */
      snprintf(what, sizeof what, "byte %zu ^ 0x%02x", i, masks[m]);
      expect_reject(&k, bad, k.len, want, what);
    }
  /* the messages say what is wrong */
  memcpy(bad, k.file, k.len);
  bad[0] = 'X';
  expect_reject(&k, bad, k.len, TR_ERR_FORMAT, "magic");
  assert_string_equal(g_reject_msg, "not a train.h checkpoint (bad magic)");
  memcpy(bad, k.file, k.len);
  bad[8] = 4;
  expect_reject(&k, bad, k.len, TR_ERR_VERSION, "version");
  assert_string_equal(g_reject_msg, "checkpoint format version 4; this build reads versions 1 to 3");
  bad[8] = 0;
  expect_reject(&k, bad, k.len, TR_ERR_VERSION, "version 0");

  memcpy(bad, k.file, k.len);
  bad[k.len - 30] ^= 0x10; /* inside the last HOOK section's payload */
  expect_reject(&k, bad, k.len, TR_ERR_FORMAT, "payload");
  assert_non_null(strstr(g_reject_msg, "checksum"));
  memcpy(bad, k.file, k.len);
  bad[8] = 1; /* version 1 is version 2 without DATA sections: this file has none, so it loads */
  ckpt_checksums_as(bad, k.len, 1);
  assert_int_equal(tr_load_mem(&k.f->t, bad, k.len), TR_OK);
  free(bad);
  ckpt_teardown(&k);
}

/* Shapes, names and the optimizer must match. */
/* A load's refusal names the file: "checkpoint '<path>' <rest>". */
static void assert_ckpt_error(const tr_trainer *t, const char *path, const char *rest) {
  char want[1024];
  snprintf(want, sizeof want, "checkpoint '%s' %s", path, rest);
  assert_string_equal(tr_error(t), want);
}
static void test_ckpt_mismatch(void **state) {
  ckpt_fx k;
  tr_trainer t;
  tr_desc d;
  lin_model m5;
  (void)state;
  ckpt_setup(&k);
  lin_init(&m5, 5, 1);
  memset(&d, 0, sizeof d);
  d.model = as_model(&m5);
  assert_int_equal(tr_init(&t, &d), TR_OK);
  {
    float copy[6];
    memcpy(copy, m5.p, sizeof copy);
    assert_int_equal(tr_load(&t, k.path), TR_ERR_MISMATCH);
    assert_memory_equal(copy, m5.p, sizeof copy);
  }
  assert_ckpt_error(&t, k.path, "mismatch: tensor 'w' has 4 elements at offset 0 in the checkpoint, 5 at offset 0 in the model"); /* the message names the file */
  assert_int_equal(t.global_step, 0);
  tr_free(&t);
  lin_free(&m5);

  lin_init(&m5, 4, 1);
  m5.names[0] = "weight";
  m5.tensors[0].name = m5.names[0];
  d.model = as_model(&m5);
  assert_int_equal(tr_init(&t, &d), TR_OK);
  assert_int_equal(tr_load(&t, k.path), TR_ERR_MISMATCH);
  assert_ckpt_error(&t, k.path, "mismatch: tensor 0 is 'w' in the checkpoint, 'weight' in the model"); /* the message names the file */
  tr_free(&t);

  m5.tensors[0].name = "w";
  d.model = as_model(&m5);
  d.optim.kind = TR_OPTIM_SGD;
  assert_int_equal(tr_init(&t, &d), TR_OK);
  assert_int_equal(tr_load(&t, k.path), TR_ERR_MISMATCH);
  assert_ckpt_error(&t, k.path, "mismatch: it holds AdamW state, this trainer uses SGD"); /* the message names the file */
  tr_free(&t);

  /* a model without names (one tensor "params") */
  d.optim.kind = TR_OPTIM_ADAMW;
  d.model.tensors = NULL;
  d.model.n_tensors = 0;
  assert_int_equal(tr_init(&t, &d), TR_OK);
  assert_int_equal(tr_load(&t, k.path), TR_ERR_MISMATCH);
  assert_ckpt_error(&t, k.path, "mismatch: it has 2 tensors, the model has 1"); /* the message names the file */
  tr_free(&t);
  lin_free(&m5);
  ckpt_teardown(&k);
}

/* SGD with and without momentum keep different state. */
static void test_ckpt_sgd_momentum_mismatch(void **state) {
  fx *a, *b;
  tr_optim o;
  char p[512];
  (void)state;
  memset(&o, 0, sizeof o);
  o.kind = TR_OPTIM_SGD;
  o.momentum = 0.9;
  a = fx_new(2, 1, &o, NULL, 0);
  o.momentum = 0;
  b = fx_new(2, 1, &o, NULL, 0);
  path_in_dir(p, sizeof p, "sgd.ckpt");
  assert_int_equal(tr_save(&a->t, p), TR_OK);
  assert_int_equal(tr_load(&b->t, p), TR_ERR_MISMATCH);
  assert_non_null(strstr(tr_error(&b->t), "optimizer buffers"));
  assert_int_equal(tr_load(&a->t, p), TR_OK);
  fx_free(a);
  fx_free(b);
}

/* Hook state: a hook that rejects its state makes the load fail and every hook keeps its state;
   a key no hook owns only warns. */
static void test_ckpt_hook_state(void **state) {
  ckpt_fx k;
  stats picky, keep;
  fx *g;
  stats gst;
  tr_config c;
  (void)state;
  ckpt_setup(&k);
  memset(&picky, 0, sizeof picky);
  /* a checkpoint with both hooks' state */
  add_stats(k.f, &picky, "picky");
  {
    char p[512];
    size_t n;
    unsigned char *both;
    path_in_dir(p, sizeof p, "both.ckpt");
    assert_int_equal(tr_save(&k.f->t, p), TR_OK);
    both = (unsigned char *)slurp_len(p, &n);
    free(k.before);
    k.before = state_bytes(k.f, &k.before_len);
    keep = k.st; /* "stats" loads first (it was registered first), then "picky" rejects */
    picky.reject = 1;
    expect_reject(&k, both, n, TR_ERR_STATE, "rejected state");
    assert_string_equal(g_reject_msg, "loading hook state: callback 'picky' rejected its saved state (24 bytes); the callbacks loaded before it were restored");
    assert_memory_equal(&k.st, &keep, sizeof keep);
    free(both);
  }

  /* unknown key: a trainer without "picky" loads the file with a warning */
  g = fx_new(3, 1, NULL, NULL, 1);
  memset(&gst, 0, sizeof gst);
  add_stats(g, &gst, "stats");
  {
    char p[512];
    path_in_dir(p, sizeof p, "both.ckpt");
    assert_int_equal(tr_load(&g->t, p), TR_OK);
  }
  assert_non_null(strstr(fx_logtext(g), "warning: the checkpoint has state for an unknown hook 'picky'; ignored"));
  assert_int_equal(gst.steps, 3);
  c = fx_config(g, 0);
  c.max_steps = 4;
  assert_int_equal(tr_fit(&g->t, &c), TR_OK);
  assert_int_equal(g->p.calls[HK_ON_SANITY_CHECK_START], 0); /* no sanity check after a restore */
  assert_int_equal(gst.steps, 4);
  fx_free(g);
  ckpt_teardown(&k);
}

/* A hook failing in on_save_checkpoint: no file; in on_load_checkpoint: the error is reported. */
static void test_ckpt_hook_fail(void **state) {
  fx *f = fx_new(2, 1, NULL, NULL, 1);
  char p[512], tmp[600];
  (void)state;
  path_in_dir(p, sizeof p, "never.ckpt");
  snprintf(tmp, sizeof tmp, "%s.tmp", p);
  remove(p);
  g_act.event = HK_ON_SAVE_CHECKPOINT;
  f->p.act = fail_at;
  assert_int_equal(tr_save(&f->t, p), TR_ERR_HOOK);
  assert_string_equal(tr_error(&f->t), "callback 'probe' failed in on_save_checkpoint: boom at on_save_checkpoint");
  assert_false(file_exists(p));
  assert_false(file_exists(tmp));
  assert_int_equal(f->p.calls[HK_ON_CHECKPOINT_SAVED], 0);
  f->p.act = NULL;
  assert_int_equal(tr_save(&f->t, p), TR_OK);
  assert_true(file_exists(p));
  assert_int_equal(f->p.calls[HK_ON_CHECKPOINT_SAVED], 1);
  fx_free(f);
}

/* =================================================================================================
   Exact resume: 2N steps in one go == N steps, save, load in a new process, N more steps.
   Everything is compared through a checkpoint written at the end: parameters, AdamW's moments,
   counters, RNG and hook state, bit for bit.
   ================================================================================================= */
#define RESUME_N 6

typedef struct resume_run { fx *f; stats st; } resume_run;

/* The same setup in every process: shuffled data, gradient noise from the trainer's RNG, AdamW,
   warmup + cosine (explicit total: it must not depend on max_steps), accumulation, clipping. */
static void resume_setup(resume_run *r) {
  tr_optim o;
  tr_sched s;
  memset(r, 0, sizeof *r);
  memset(&o, 0, sizeof o);
  o.lr = 0.05;
  o.weight_decay = 0.01;
  memset(&s, 0, sizeof s);
  s.kind = TR_SCHED_COSINE;
  s.warmup = 3;
  s.total = 20;
  r->f = fx_new(8, 2, &o, &s, 0);
  r->f->train_d.shuffle = data_shuffle;
  r->f->m.noise = 1;
  add_stats(r->f, &r->st, "stats");
}
static tr_config resume_config(resume_run *r, int64_t max_steps) {
  tr_config c = fx_config(r->f, 1);
  c.max_steps = max_steps;
  c.accumulate_grad_batches = 2;
  c.gradient_clip_val = 1.0;
  return c;
}

/* Ask for a checkpoint after epoch 1's batch 2: the first micro-batch of a window (the gradient
   sum is in the file). */
static hk_signal request_mid_window(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->epoch == 1 && ctx->batch_idx == 2) hk_request(ctx, HK_REQUEST_CHECKPOINT);
  return HK_CONTINUE;
}

/* tr_save called directly from hooks: at the end of epoch 0 (inside on_train_epoch_end) and at the
   end of epoch 1's validation (inside on_validation_end). Both must resume exactly. */
static const char *g_hooksave_base;
static hk_signal save_from_hook(hk_ctx *ctx, void *u) {
  char path[600];
  (void)u;
  if (ctx->event == HK_ON_TRAIN_EPOCH_END && ctx->epoch == 0) snprintf(path, sizeof path, "%s-epochend", g_hooksave_base);
  else if (ctx->event == HK_ON_VALIDATION_END && ctx->stage == HK_STAGE_FIT && ctx->epoch == 1)
    snprintf(path, sizeof path, "%s-valend", g_hooksave_base);
  else return HK_CONTINUE;
  return tr_save((tr_trainer *)ctx->trainer, path) == TR_OK ? HK_CONTINUE : HK_FAIL;
}

/* Ctrl-C after step N; an on_exception handler saves a checkpoint (Lightning's
   OnExceptionCheckpoint). The interrupted batch completed, so the run resumes exactly. */
static hk_signal interrupt_at_n(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->global_step == RESUME_N && ctx->batch_idx % 2 == 1) raise(SIGINT);
  return HK_CONTINUE;
}
static hk_signal save_on_exception(hk_ctx *ctx, void *u) {
  return tr_save((tr_trainer *)ctx->trainer, (const char *)u) == TR_OK ? HK_CONTINUE : HK_FAIL;
}

/* Counts of on_train_epoch_end and of in-fit validations in this process (the finish phase checks
   them: a resumed run must not repeat an epoch end or a validation that happened before the save). */
static int g_epoch_ends, g_val_ends;
static hk_signal count_ends(hk_ctx *ctx, void *u) {
  (void)u;
  if (ctx->event == HK_ON_TRAIN_EPOCH_END) g_epoch_ends++;
  if (ctx->event == HK_ON_VALIDATION_END && ctx->stage == HK_STAGE_FIT) g_val_ends++;
  return HK_CONTINUE;
}

/* The child side: test_train --phase NAME CKPT [OUT] */
static int resume_child(const char *phase, const char *ckpt, const char *out) {
  resume_run r;
  tr_config c;
  tr_err e = TR_OK;
  resume_setup(&r);
  if (!strcmp(phase, "half")) {         /* N steps, then save */
    c = resume_config(&r, RESUME_N);
    e = tr_fit(&r.f->t, &c);
    if (!e) e = tr_save(&r.f->t, ckpt);
  } else if (!strncmp(phase, "finish", 6)) { /* load, then up to 2N; "finish:E:V" checks the counts */
    int want_e = -1, want_v = -1;
    sscanf(phase, "finish:%d:%d", &want_e, &want_v);
    hk_on(r.f->reg, HK_ON_TRAIN_EPOCH_END, count_ends, NULL, NULL, NULL);
    hk_on(r.f->reg, HK_ON_VALIDATION_END, count_ends, NULL, NULL, NULL);
    c = resume_config(&r, 2 * RESUME_N);
    c.resume_from = ckpt;
    e = tr_fit(&r.f->t, &c);
    if (!e) e = tr_save(&r.f->t, out);
    if (!e && want_e >= 0 && (g_epoch_ends != want_e || g_val_ends != want_v)) {
      fprintf(stderr, "resume child %s: %d epoch ends, %d validations\n", phase, g_epoch_ends, g_val_ends);
      e = TR_ERR_INVALID;
    }
  } else if (!strcmp(phase, "request")) { /* 2N steps, with a requested checkpoint mid-run */
    hk_on(r.f->reg, HK_ON_TRAIN_BATCH_END, request_mid_window, NULL, NULL, NULL);
    c = resume_config(&r, 2 * RESUME_N);
    c.save_to = ckpt;
    e = tr_fit(&r.f->t, &c);
    if (!e) e = tr_save(&r.f->t, out);
  } else if (!strcmp(phase, "hooksave")) { /* 2N steps, saving from inside two hooks */
    g_hooksave_base = ckpt;
    hk_on(r.f->reg, HK_ON_TRAIN_EPOCH_END, save_from_hook, NULL, NULL, NULL);
    hk_on(r.f->reg, HK_ON_VALIDATION_END, save_from_hook, NULL, NULL, NULL);
    c = resume_config(&r, 2 * RESUME_N);
    e = tr_fit(&r.f->t, &c);
    if (!e) e = tr_save(&r.f->t, out);
  } else if (!strcmp(phase, "sigint")) { /* 2N steps, Ctrl-C at step N; succeed if interrupted */
    hk_on(r.f->reg, HK_ON_TRAIN_BATCH_END, interrupt_at_n, NULL, NULL, NULL);
    hk_on(r.f->reg, HK_ON_EXCEPTION, save_on_exception, (void *)ckpt, NULL, NULL);
    c = resume_config(&r, 2 * RESUME_N);
    c.no_sigint = 0;
    e = tr_fit(&r.f->t, &c);
    e = (e == TR_ERR_INTERRUPTED && r.f->t.global_step == RESUME_N) ? TR_OK : TR_ERR_INVALID;
  } else e = TR_ERR_INVALID;
  if (e) fprintf(stderr, "resume child %s: %s\n", phase, tr_error(&r.f->t));
  fx_free(r.f);
  return e ? 1 : 0;
}

static void run_child(const char *phase, const char *ckpt, const char *out) {
  pid_t pid = fork();
  int status = 0;
  assert_true(pid >= 0);
  if (pid == 0) {
    char *argv[6];
    argv[0] = (char *)g_self;
    argv[1] = (char *)"--phase";
    argv[2] = (char *)phase;
    argv[3] = (char *)ckpt;
    argv[4] = (char *)(out ? out : "-");
    argv[5] = NULL;
    execv(g_self, argv);
    _exit(127);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static void assert_same_file(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  unsigned char *x = (unsigned char *)slurp_len(a, &na), *y = (unsigned char *)slurp_len(b, &nb);
  assert_non_null(x);
  assert_non_null(y);
  assert_int_equal(na, nb);
  assert_memory_equal(x, y, na);
  free(x);
  free(y);
}

static void test_resume_exact(void **state) {
  resume_run r;
  tr_config c;
  char whole[512], half[512], finished[512], mid[512], requested[512], finished2[512];
  (void)state;
  path_in_dir(whole, sizeof whole, "whole.ckpt");
  path_in_dir(half, sizeof half, "half.ckpt");
  path_in_dir(finished, sizeof finished, "finished.ckpt");
  path_in_dir(mid, sizeof mid, "mid.ckpt");
  path_in_dir(requested, sizeof requested, "requested-run.ckpt");
  path_in_dir(finished2, sizeof finished2, "finished2.ckpt");

  /* 2N steps in this process */
  resume_setup(&r);
  c = resume_config(&r, 2 * RESUME_N);
  assert_int_equal(tr_fit(&r.f->t, &c), TR_OK);
  assert_int_equal(r.f->t.global_step, 2 * RESUME_N);
  assert_int_equal(r.st.steps, 2 * RESUME_N);
  assert_int_equal(r.st.batch_ends, 4 * RESUME_N);
  assert_int_equal(tr_save(&r.f->t, whole), TR_OK);
  fx_free(r.f);

  /* N steps in one process, N more in another */
  run_child("half", half, NULL);
  run_child("finish:2:2", half, finished); /* the end of epochs 1 and 2, and their validations */
  assert_same_file(whole, finished);

  /* a checkpoint requested mid-epoch, inside an accumulation window, resumed in a new process */
  run_child("request", mid, requested);
  assert_same_file(whole, requested); /* saving did not disturb the run */
  run_child("finish:2:2", mid, finished2);
  assert_same_file(whole, finished2);
  /* Ctrl-C, a checkpoint from on_exception, resumed in a new process */
  {
    char p[512], out[512];
    path_in_dir(p, sizeof p, "sigint.ckpt");
    path_in_dir(out, sizeof out, "sigint-finished.ckpt");
    run_child("sigint", p, NULL);
    run_child("finish:2:2", p, out);
    assert_same_file(whole, out);
  }
  /* checkpoints written by tr_save inside on_train_epoch_end and on_validation_end */
  {
    char base[512], p1[600], p2[600], out1[512], out2[512];
    path_in_dir(base, sizeof base, "hook");
    path_in_dir(out1, sizeof out1, "hook-run.ckpt");
    path_in_dir(out2, sizeof out2, "hook-finished.ckpt");
    snprintf(p1, sizeof p1, "%s-epochend", base);
    snprintf(p2, sizeof p2, "%s-valend", base);
    run_child("hooksave", base, out1);
    assert_same_file(whole, out1);
    run_child("finish:2:2", p1, out2); /* epoch 0 is over: epochs 1 and 2 remain */
    assert_same_file(whole, out2);
    run_child("finish:2:1", p2, out2); /* epoch 1's validation is done, its on_train_epoch_end is not */
    assert_same_file(whole, out2);
  }
  {
    size_t n;
    unsigned char *m = (unsigned char *)slurp_len(mid, &n);
    size_t i;
    int has_grad = 0;
    for (i = 0; i + 4 <= n; i++) has_grad |= !memcmp(m + i, "GRAD", 4);
    assert_true(has_grad);
    free(m);
  }
}

/* SGD with momentum resumes exactly too (the momentum buffer and its "first step" flag). In one
   process, with three trainers: straight through, first half, second half from the file. */
static void test_resume_sgd_momentum(void **state) {
  tr_optim o;
  fx *a, *b, *c;
  tr_config ca, cb, cc;
  char p[512];
  (void)state;
  memset(&o, 0, sizeof o);
  o.kind = TR_OPTIM_SGD;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.nesterov = 1;
  o.weight_decay = 1e-3;
  a = fx_new(3, 1, &o, NULL, 0);
  b = fx_new(3, 1, &o, NULL, 0);
  c = fx_new(3, 1, &o, NULL, 0);
  ca = fx_config(a, 0);
  cb = fx_config(b, 0);
  cc = fx_config(c, 0);
  ca.max_steps = 5;
  cb.max_steps = 2;
  cc.max_steps = 5;
  path_in_dir(p, sizeof p, "sgd-half.ckpt");
  assert_int_equal(tr_fit(&a->t, &ca), TR_OK);
  assert_int_equal(tr_fit(&b->t, &cb), TR_OK);
  assert_int_equal(tr_save(&b->t, p), TR_OK);
  cc.resume_from = p;
  assert_int_equal(tr_fit(&c->t, &cc), TR_OK);
  assert_memory_equal(a->m.p, c->m.p, 5 * sizeof(float));
  assert_int_equal(c->t.global_step, 5);
  fx_free(a);
  fx_free(b);
  fx_free(c);
}

/* tr_fit again continues where the last one stopped: a max_steps cut mid-epoch is resumed without
   a second on_train_epoch_start. */
/* =================================================================================================
   Where train.h follows Lightning 2.6, and where it differs on purpose (the list in docs/trainer.md,
   "Where train.h differs from Lightning 2.6"): each item is pinned here.
   ================================================================================================= */

/* A stateful callback that counts its saves: on_save_checkpoint bumps the count before the state is
   taken, and on_load_checkpoint records what the state holds by then. */
typedef struct saver { int64_t value, seen_at_load; char *order; } saver;
static hk_signal saver_on_save(hk_ctx *ctx, void *user) { (void)ctx; ((saver *)user)->value++; return HK_CONTINUE; }
static hk_signal saver_on_load(hk_ctx *ctx, void *user) {
  saver *s = (saver *)user;
  (void)ctx;
  s->seen_at_load = s->value;
  strcat(s->order, "callback ");
  return HK_CONTINUE;
}
static int saver_save(void *user, hk_bytes *out) { return hk_bytes_put(out, &((saver *)user)->value, 8); }
static int saver_load(void *user, hk_reader *in) { return hk_read(in, &((saver *)user)->value, 8); }
static hk_signal model_on_load(hk_ctx *ctx, void *user) { (void)ctx; strcat((char *)user, "model "); return HK_CONTINUE; }
static hk_signal fit_start_step(hk_ctx *ctx, void *user) { *(int64_t *)user = ctx->global_step; return HK_CONTINUE; }

static void add_saver(fx *f, saver *s, char *order) {
  hk_callback cb;
  hk_opts model;
  memset(&cb, 0, sizeof cb);
  cb.name = "saver";
  cb.user = s;
  cb.on_save_checkpoint = saver_on_save;
  cb.on_load_checkpoint = saver_on_load;
  cb.save_state = saver_save;
  cb.load_state = saver_load;
  s->order = order;
  assert_int_equal(hk_add_callback(f->reg, &cb, NULL, NULL), HK_OK);
  /* registered after the callback, in the model tier: Lightning still runs it first on load */
  memset(&model, 0, sizeof model);
  model.name = "model.on_load_checkpoint";
  model.tier = HK_TIER_MODEL;
  assert_int_equal(hk_on(f->reg, HK_ON_LOAD_CHECKPOINT, model_on_load, order, &model, NULL), HK_OK);
}

static void test_lightning_checkpoint_order(void **state) {
  char ck[300], order[64] = "";
  saver a, b;
  int64_t step_at_fit_start = -1;
  fx *f = fx_new(4, 1, NULL, NULL, 0), *g;
  tr_config c = fx_config(f, 0);
  (void)state;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  path_in_dir(ck, sizeof ck, "lightning_order.ckpt");
  add_saver(f, &a, order);
  c.max_steps = 2;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(tr_save(&f->t, ck), TR_OK);
  assert_int_equal(a.value, 1); /* on_save_checkpoint ran before the state was taken ... */

  g = fx_new(4, 1, NULL, NULL, 0);
  add_saver(g, &b, order);
  assert_int_equal(hk_on(g->reg, HK_ON_FIT_START, fit_start_step, &step_at_fit_start, NULL, NULL), HK_OK);
  c = fx_config(g, 0);
  c.resume_from = ck;
  c.max_steps = 3;
  assert_int_equal(tr_fit(&g->t, &c), TR_OK);
  assert_int_equal(b.seen_at_load, 1); /* ... so the file holds 1, and on_load_checkpoint already sees it */
  assert_string_equal(order, "model callback "); /* the model's on_load_checkpoint first, as Lightning */
  assert_int_equal(step_at_fit_start, 2); /* on_fit_start sees the restored counters (Lightning: not yet) */
  fx_free(f);
  fx_free(g);
  remove(ck);
}

/* Lightning runs the sanity check after resuming from an end-of-epoch checkpoint and skips it after a
   mid-epoch (or mid-validation) one. */
static void test_lightning_sanity_after_resume(void **state) {
  char ck[300];
  fx *f = fx_new(4, 2, NULL, NULL, 0), *g;
  tr_config c = fx_config(f, 1);
  (void)state;
  path_in_dir(ck, sizeof ck, "sanity.ckpt");
  c.max_epochs = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);          /* ends at the epoch's end */
  assert_int_equal(tr_save(&f->t, ck), TR_OK);
  g = fx_new(4, 2, NULL, NULL, 1);
  c = fx_config(g, 1);
  c.resume_from = ck;
  c.max_epochs = 2;
  assert_int_equal(tr_fit(&g->t, &c), TR_OK);
  assert_int_equal(g->p.calls[HK_ON_SANITY_CHECK_START], 1);
  fx_free(g);

  c = fx_config(f, 1);
  c.max_steps = 6;                                      /* stops in the middle of epoch 1 */
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->t.epoch_batch, 2);
  assert_int_equal(tr_save(&f->t, ck), TR_OK);
  g = fx_new(4, 2, NULL, NULL, 1);
  c = fx_config(g, 1);
  c.resume_from = ck;
  c.max_steps = 8;
  assert_int_equal(tr_fit(&g->t, &c), TR_OK);
  assert_int_equal(g->p.calls[HK_ON_SANITY_CHECK_START], 0);
  assert_int_equal(g->p.calls[HK_ON_TRAIN_EPOCH_START], 0); /* and no second epoch start, as Lightning */
  fx_free(g);
  fx_free(f);
  remove(ck);
}

/* Stages, stop-epoch and teardown on failure. */
static hk_signal stop_epoch_at_first(probe *p, hk_ctx *ctx) {
  (void)p;
  return ctx->event == HK_ON_TRAIN_BATCH_START && ctx->epoch == 0 && ctx->batch_idx == 0 ? HK_STOP_EPOCH : HK_CONTINUE;
}
static hk_signal fail_at_train_start(probe *p, hk_ctx *ctx) {
  (void)p;
  return ctx->event == HK_ON_TRAIN_START ? hk_fail(ctx, "no") : HK_CONTINUE;
}
static void test_lightning_run_differences(void **state) {
  fx *f = fx_new(3, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 1);
  (void)state;
  c.max_epochs = 1;
  f->p.act = stop_epoch_at_first;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  /* the stage inside fit's validation stays FIT (Lightning: "validating"); the sanity check has its own */
  assert_int_equal(f->p.stages[HK_ON_VALIDATION_BATCH_END], HK_STAGE_FIT);
  assert_int_equal(f->p.stages[HK_ON_SANITY_CHECK_END], HK_STAGE_SANITY_CHECK);
  /* HK_STOP_EPOCH from a callback: that batch's on_train_batch_end still fires, and the epoch's
     validation still runs (Lightning's -1 is the model's only, and skips both) */
  assert_int_equal(f->p.calls[HK_ON_TRAIN_BATCH_START], 1);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_BATCH_END], 1);
  assert_int_equal(f->p.calls[HK_ON_VALIDATION_START], 2); /* the sanity check and the epoch's end */
  fx_free(f);

  /* teardown runs after on_exception when a run fails (Lightning skips teardown) */
  f = fx_new(3, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  f->p.act = fail_at_train_start;
  assert_int_equal(tr_fit(&f->t, &c), TR_ERR_HOOK);
  assert_int_equal(f->p.calls[HK_ON_EXCEPTION], 1);
  assert_int_equal(f->p.calls[HK_TEARDOWN], 1);
  assert_non_null(strstr(f->p.log, "on_exception teardown "));
  fx_free(f);
}

static void test_fit_continues(void **state) {
  fx *f = fx_new(4, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 0);
  (void)state;
  c.max_steps = 3;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->t.epoch, 0);
  assert_int_equal(f->t.epoch_batch, 3);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_EPOCH_END], 1);
  c.max_steps = 8;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->t.global_step, 8);
  assert_int_equal(f->t.epoch, 2);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_EPOCH_START], 2);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_EPOCH_END], 3);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_BATCH_START], 8);
  fx_free(f);
}

/* The run layer's calls for a loop of your own, from a hook during the trainer's fit: tr_run_batch_end
   and tr_run_finish ran a safe point or ended the run under the trainer (on_train_end, teardown in the
   middle of a fit), tr_run_setup replaced the settings the batteries were reading. All refused now,
   each saying why in tr_run_error and hk_last_error, and the fit goes on. */
static int g_meddled;
static hk_signal meddle_in_fit(hk_ctx *ctx, void *user) {
  hk_registry *reg = ctx->reg;
  (void)user;
  if (g_meddled++) return HK_CONTINUE;
  assert_int_equal(tr_run_batch_end(reg, ctx, NULL), TR_RUN_STOP);
  assert_non_null(strstr(tr_run_error(reg), "tr_run_batch_end: this fit run was entered with tr_run_enter (train.h's trainer's runs are)"));
  assert_string_equal(hk_last_error(reg), tr_run_error(reg));
  assert_int_equal(tr_run_epoch_end(reg, ctx, NULL), TR_RUN_STOP);
  assert_int_equal(tr_run_finish(reg, ctx, TR_OK), TR_ERR_INVALID);
  assert_non_null(strstr(tr_run_error(reg), "tr_run_finish: this fit run was entered with tr_run_enter"));
  assert_int_equal(tr_run_start(reg, ctx, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(tr_run_error(reg), "tr_run_start: a fit run is going already (tr_run_enter began it: train.h's trainer"));
  assert_int_equal(tr_run_setup(reg, NULL), TR_ERR_INVALID);
  assert_non_null(strstr(tr_run_error(reg), "call tr_run_setup before the trainer's run (tr_fit, tr_validate, ...) or "
                                            "after it returns"));
  assert_string_equal(hk_last_error(reg), tr_run_error(reg));
  return HK_CONTINUE;
}
static void test_run_layer_calls_in_a_fit(void **state) {
  fx *f = fx_new(4, 1, NULL, NULL, 1);
  tr_config c = fx_config(f, 0);
  (void)state;
  g_meddled = 0;
  assert_int_equal(hk_on(f->reg, HK_ON_TRAIN_BATCH_END, meddle_in_fit, NULL, NULL, NULL), HK_OK);
  c.max_epochs = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->t.global_step, 4);                    /* the whole epoch */
  assert_int_equal(f->p.calls[HK_ON_TRAIN_END], 1);
  assert_int_equal(f->p.calls[HK_TEARDOWN], 1);
  assert_int_equal(tr_run_setup(f->reg, NULL), TR_OK);      /* after the fit: fine */
  fx_free(f);
}

/* =================================================================================================
   Bad arguments
   ================================================================================================= */
/* Starts runs from inside a fit, ignoring what they return except for the record in p->arg. */
static hk_signal nested(probe *p, hk_ctx *ctx) {
  tr_trainer *t = (tr_trainer *)ctx->trainer;
  if (ctx->event == HK_ON_TRAIN_START) {
    tr_config c;
    tr_data none;
    memset(&c, 0, sizeof c);
    memset(&none, 0, sizeof none);
    p->arg = tr_fit(t, &c);
    assert_string_equal(tr_error(t), "tr_fit called during a fit run (from a hook?); call it when the run has returned");
    assert_int_equal(tr_validate(t, &none, 0, NULL), TR_ERR_INVALID);
    assert_int_equal(tr_predict(t, &none, 0), TR_ERR_INVALID);
    assert_string_equal(tr_error(t), "tr_predict called during a fit run (from a hook?); call it when the run has returned");
  }
  return HK_CONTINUE;
}
static void test_bad_arguments(void **state) {
  tr_trainer t;
  tr_desc d;
  lin_model m;
  fx *f;
  tr_config c;
  (void)state;
  lin_init(&m, 4, 1);
  memset(&d, 0, sizeof d);
  assert_int_equal(tr_init(&t, NULL), TR_ERR_INVALID);
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  assert_string_equal(tr_error(&t), "tr_init: model.params and model.n_params are required (model.grads may come "
                      "later, through tr_set_buffers)");
  d.model = as_model(&m);
  d.model.forward = NULL;
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  d.model = as_model(&m);
  m.tensors[1].offset = 4;
  m.tensors[1].count = 2;
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  assert_string_equal(tr_error(&t), "tr_init: tensor 'b' (offset 4, count 2) lies outside the 5 parameters");
  m.tensors[1].offset = 3; /* overlaps w (0..3) */
  m.tensors[1].count = 1;
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  assert_string_equal(tr_error(&t), "tr_init: tensors 'w' and 'b' overlap (each parameter must belong to exactly one tensor)");
  m.tensors[0].count = 2; /* w is 0..1, b is 3: parameter 2 is in no tensor */
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  assert_string_equal(tr_error(&t), "tr_init: parameters 2..2 belong to no tensor (the tensors must cover all 5 "
                      "parameters, without gaps)");
  m.tensors[0].count = 4;
  m.tensors[1].offset = 4;
  m.tensors[1].name = "w";
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  assert_string_equal(tr_error(&t), "tr_init: two tensors are named 'w'");
  m.tensors[1].name = "b";
  d.optim.kind = TR_OPTIM_SGD;
  d.optim.nesterov = 1;
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  assert_string_equal(tr_error(&t), "tr_init: nesterov needs momentum > 0 and dampening 0");
  d.optim.nesterov = 0;
  d.optim.lr = -1;
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  d.optim.lr = 0;
  d.sched.kind = TR_SCHED_STEP;
  assert_int_equal(tr_init(&t, &d), TR_ERR_INVALID);
  assert_string_equal(tr_error(&t), "tr_init: the step schedule needs sched.step_size");
  d.sched.kind = TR_SCHED_CONSTANT;
  assert_int_equal(tr_init(&t, &d), TR_OK);
  assert_true(t.optim.lr == 1e-3 && t.optim.beta1 == 0.9 && t.optim.beta2 == 0.999 && t.optim.eps == 1e-8);
  assert_non_null(t.reg); /* made by the trainer, freed by tr_free */
  assert_int_equal(tr_fit(&t, NULL), TR_ERR_INVALID);
  memset(&c, 0, sizeof c);
  assert_int_equal(tr_fit(&t, &c), TR_ERR_INVALID);
  assert_string_equal(tr_error(&t), "tr_fit: config.train needs count, and get or next (one of them)");
  assert_int_equal(tr_validate(&t, NULL, 0, NULL), TR_ERR_INVALID);
  assert_int_equal(tr_load(&t, NULL), TR_ERR_INVALID);
  assert_int_equal(tr_save(&t, ""), TR_ERR_INVALID);
  assert_string_equal(tr_err_name(TR_ERR_MISMATCH), "checkpoint does not match");
  assert_string_equal(tr_err_name((tr_err)99), "unknown error");
  tr_free(&t);
  tr_free(&t); /* harmless twice */
  lin_free(&m);

  /* a run started from inside a hook is refused; the refusal does not touch the run in progress,
     which completes as if nothing had happened */
  f = fx_new(2, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  c.max_epochs = 1;
  f->p.act = nested;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->p.arg, TR_ERR_INVALID);
  assert_int_equal(f->p.calls[HK_ON_EXCEPTION], 0);
  assert_int_equal(f->p.calls[HK_ON_FIT_END], 1);
  assert_int_equal(f->t.epoch, 1);
  fx_free(f);

  /* training data without batches: nothing happens, with a warning */
  f = fx_new(0, 1, NULL, NULL, 1);
  c = fx_config(f, 0);
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
  assert_int_equal(f->p.calls[HK_ON_TRAIN_EPOCH_START], 0);
  assert_int_equal(f->p.calls[HK_ON_FIT_END], 1);
  assert_non_null(strstr(fx_logtext(f), "no batches"));
  fx_free(f);
}

static void test_rng(void **state) {
  tr_rng a, b;
  int64_t perm[100], seen[100];
  int i;
  (void)state;
  tr_rng_seed(&a, 5);
  tr_rng_seed(&b, 5);
  for (i = 0; i < 10; i++) assert_true(tr_rng_u64(&a) == tr_rng_u64(&b));
  tr_rng_seed(&a, 0);
  assert_true(tr_rng_u64(&a) == 0xe220a8397b1dcdafull); /* splitmix64's published first output for seed 0 */
  memset(seen, 0, sizeof seen);
  tr_rng_perm(&a, perm, 100);
  for (i = 0; i < 100; i++) seen[perm[i]]++;
  for (i = 0; i < 100; i++) assert_int_equal(seen[i], 1);
  for (i = 0; i < 1000; i++) {
    float u = tr_rng_float(&a);
    assert_true(u >= 0.0f && u < 1.0f);
    assert_true(tr_rng_below(&a, 7) < 7);
  }
}

/* =================================================================================================
   main
   ================================================================================================= */
int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_order_fit_trace),
    cmocka_unit_test(test_order_stages_and_ctx),
    cmocka_unit_test(test_order_accumulation),
    cmocka_unit_test(test_accumulation_mean),
    cmocka_unit_test(test_accumulation_short_window),
    cmocka_unit_test(test_order_val_every_n_steps),
    cmocka_unit_test(test_val_every_n_epochs_and_limits),
    cmocka_unit_test(test_val_check_interval),
    cmocka_unit_test(test_order_test_and_predict),
    cmocka_unit_test(test_predict_outputs),
    cmocka_unit_test(test_adamw_reference),
    cmocka_unit_test(test_sgd_reference),
    cmocka_unit_test(test_long_errors_show_cut),
    cmocka_unit_test(test_schedule_values),
    cmocka_unit_test(test_schedule_in_loop),
    cmocka_unit_test(test_schedule_torch_ref),
    cmocka_unit_test(test_schedule_spec),
    cmocka_unit_test(test_schedule_stays_finite),
    cmocka_unit_test(test_schedule_resume_exact),
    cmocka_unit_test(test_lr_from_hook),
    cmocka_unit_test(test_plateau_reads_now),
    cmocka_unit_test(test_clipping),
    cmocka_unit_test(test_signal_skip_step),
    cmocka_unit_test(test_signal_skip_step_params),
    cmocka_unit_test(test_signal_skip_batch),
    cmocka_unit_test(test_signal_stop_epoch),
    cmocka_unit_test(test_signal_stop),
    cmocka_unit_test(test_signal_not_honoured),
    cmocka_unit_test(test_signal_fail),
    cmocka_unit_test(test_signal_fail_in_test),
    cmocka_unit_test(test_on_exception_all_run),
    cmocka_unit_test(test_model_error),
    cmocka_unit_test(test_nonfinite_loss),
    cmocka_unit_test(test_sigint),
    cmocka_unit_test(test_requests),
    cmocka_unit_test(test_ckpt_roundtrip_and_events),
    cmocka_unit_test(test_ckpt_missing_and_io),
    cmocka_unit_test(test_ckpt_truncated_everywhere),
    cmocka_unit_test(test_ckpt_flipped_bytes),
    cmocka_unit_test(test_refusals_name_what),
    cmocka_unit_test(test_ckpt_mismatch),
    cmocka_unit_test(test_ckpt_sgd_momentum_mismatch),
    cmocka_unit_test(test_ckpt_hook_state),
    cmocka_unit_test(test_ckpt_hook_fail),
    cmocka_unit_test(test_resume_exact),
    cmocka_unit_test(test_resume_sgd_momentum),
    cmocka_unit_test(test_fit_continues),
    cmocka_unit_test(test_run_layer_calls_in_a_fit),
    cmocka_unit_test(test_lightning_checkpoint_order),
    cmocka_unit_test(test_lightning_sanity_after_resume),
    cmocka_unit_test(test_lightning_run_differences),
    cmocka_unit_test(test_bad_arguments),
    cmocka_unit_test(test_rng),
  };
  g_self = argv[0];
  if (argc == 5 && !strcmp(argv[1], "--phase")) return resume_child(argv[2], argv[3], argv[4]);
  return run_tests_in_dir(tests, "test_train", g_dir);
}
