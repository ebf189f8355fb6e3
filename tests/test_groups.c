/* tests/test_groups.c - parameter groups and fine-tuning: param_group (a learning-rate multiplier, weight decay,
   freezing by tensor name) and finetuning (Lightning's BackboneFinetuning), in tr_fit and in a loop of your own,
   against torch's AdamW and SGD with parameter groups (tests/groups_ref.h, made by tests/gen_groups_ref.py: the
   parameters after 15 steps, as float32 bits, compared exactly); the same bits as before when no group is given;
   an exact resume in the middle of a fine-tuning run; the refusals. */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"
#include "groups_ref.h"

/* ---- the model of tests/gen_groups_ref.py: 7 named tensors, a gradient that depends on the parameters -------- */
#define NP 43
#define EPOCHS 5
#define BATCHES 3
static const char *const g_names[] = { "emb", "bb.w", "bb.b", "bb.norm", "fc.w", "fc.b", "head.w" };
static const size_t g_sizes[] = { 6, 8, 4, 3, 12, 4, 6 };
#define NT ((int)(sizeof g_sizes / sizeof g_sizes[0]))
static const tr_tensor g_tensors[] = { { "emb", 0, 6 }, { "bb.w", 6, 8 }, { "bb.b", 14, 4 }, { "bb.norm", 18, 3 },
                                       { "fc.w", 21, 12 }, { "fc.b", 33, 4 }, { "head.w", 37, 6 } };
static const char g_groups[] = "param_group(match=*.b|*norm|emb, weight_decay=0); param_group(match=head.*, lr_mult=10); "
                               "param_group(match=emb, frozen=true)";
static const char g_finetune[] = "finetuning(match=bb.*, norms=*norm, unfreeze_at_epoch=2, initial_ratio=0.3, lr_factor=2)";

typedef struct model { float p[NP], g[NP]; int64_t backwards; } model;
static void model_init(model *m) {
  int j;
  memset(m, 0, sizeof *m);
  for (j = 0; j < NP; j++) m->p[j] = (float)(((j * 5) % 11 - 5) * 0.1);
}
/* the s-th backward: k/8 + p/2 (both exact, one rounding), as the generator's grad() */
static void model_grad(model *m, float *g) {
  int j;
  for (j = 0; j < NP; j++) g[j] += (float)((j * 7 + (int)m->backwards * 13) % 17 - 8) * 0.125f + 0.5f * m->p[j];
  m->backwards++;
}
static int m_forward(void *u, void *b, int training, double *loss) { (void)u, (void)b, (void)training; *loss = 1; return 0; }
static int m_backward(void *u, void *b) { model *m = (model *)u; (void)b; model_grad(m, m->g); return 0; }
static int64_t d_count(void *u) { (void)u; return BATCHES; }
static int d_get(void *u, int64_t i, void **b) { (void)u; *b = (void *)(intptr_t)i; return 0; }
static tr_data g_data = { .count = d_count, .get = d_get };

static void expect_bits(const float *p, const uint32_t *ref, const char *what) {
  int j;
  for (j = 0; j < NP; j++) {
    uint32_t b;
    memcpy(&b, &p[j], sizeof b);
    if (b != ref[j]) {
      float r;
      memcpy(&r, &ref[j], sizeof r);
      fail_msg("%s: parameter %d is %.9g (0x%08x), torch's %.9g (0x%08x)", what, j, (double)p[j], (unsigned)b, (double)r, (unsigned)ref[j]);
    }
  }
}

/* tr_fit over the model with the spec (NULL: none) and the optimizer; max_steps 0: all 5 epochs */
static tr_err fit(model *m, tr_optim_kind kind, const char *spec, int threads, const char *resume, int64_t max_steps,
                  const char *save_to) {
  tr_trainer t;
  tr_err e;
  tr_optim o;
  memset(&o, 0, sizeof o);
  o.kind = kind;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  if (kind == TR_OPTIM_SGD) o.momentum = 0.9;
  e = tr_init(&t, &(tr_desc){ .model = { .params = m->p, .grads = m->g, .n_params = NP, .tensors = g_tensors, .n_tensors = NT,
                                         .user = m, .forward = m_forward, .backward = m_backward },
                              .optim = o, .threads = threads });
  assert_int_equal(e, TR_OK);
  if (spec && hk_spec_apply(t.reg, spec) != HK_OK) fail_msg("%s: %s", spec, hk_last_error(t.reg));
  e = tr_fit(&t, &(tr_config){ .train = &g_data, .max_epochs = EPOCHS, .max_steps = max_steps, .resume_from = resume,
                               .log_every_n_steps = -1 });
  if (!e && save_to) assert_int_equal(tr_save(&t, save_to), TR_OK);
  if (e) fprintf(stderr, "(fit: %s)\n", tr_error(&t));
  tr_free(&t);
  return e;
}

/* A fresh model fitted by tr_fit with spec (NULL: none) on threads threads ends with torch's bits, want. */
static void fit_gives(tr_optim_kind kind, const char *spec, int threads, const uint32_t *want, const char *what) {
  model m;
  model_init(&m);
  assert_int_equal(fit(&m, kind, spec, threads, NULL, 0, NULL), TR_OK);
  expect_bits(m.p, want, what);
}
static void test_fit_no_groups(void **state) {
  (void)state;
  fit_gives(TR_OPTIM_ADAMW, NULL, 1, groups_ref_plain, "tr_fit, no groups");
}
/* The pin: a group that changes nothing takes the per-tensor path and gives the bits of the one flat update. */
static void test_fit_identity_group_same_bits(void **state) {
  model a, b;
  (void)state;
  model_init(&a);
  model_init(&b);
  assert_int_equal(fit(&a, TR_OPTIM_ADAMW, NULL, 1, NULL, 0, NULL), TR_OK);
  assert_int_equal(fit(&b, TR_OPTIM_ADAMW, "param_group(match=*, lr_mult=1)", 2, NULL, 0, NULL), TR_OK);
  assert_memory_equal(a.p, b.p, sizeof a.p);
  model_init(&a);
  model_init(&b);
  assert_int_equal(fit(&a, TR_OPTIM_SGD, NULL, 1, NULL, 0, NULL), TR_OK);
  assert_int_equal(fit(&b, TR_OPTIM_SGD, "param_group(match=*, weight_decay=0.1)", 1, NULL, 0, NULL), TR_OK);
  assert_memory_equal(a.p, b.p, sizeof a.p);
}
static void test_fit_groups_adamw(void **state) {
  (void)state;
  fit_gives(TR_OPTIM_ADAMW, g_groups, 1, groups_ref_groups, "tr_fit, AdamW with groups");
  fit_gives(TR_OPTIM_ADAMW, g_groups, 3, groups_ref_groups, "tr_fit, AdamW with groups, 3 threads"); /* the same bits */
}
static void test_fit_groups_sgd(void **state) {
  (void)state;
  fit_gives(TR_OPTIM_SGD, g_groups, 1, groups_ref_groups_sgd, "tr_fit, SGD with momentum and groups");
}
static void test_fit_finetuning(void **state) {
  char spec[512];
  (void)state;
  snprintf(spec, sizeof spec, "%s; %s", g_groups, g_finetune);
  fit_gives(TR_OPTIM_ADAMW, spec, 1, groups_ref_finetune, "tr_fit, finetuning");
}
/* Stopped in the middle of epoch 2 (step 8: the backbone unfrozen at step 6), resumed from the checkpoint by a
   new trainer: the same bits as the run in one go (the backbone's own step counts and ratio came back). */
static void test_fit_finetuning_resume(void **state) {
  model m;
  char spec[512], path[64];
  (void)state;
  snprintf(path, sizeof path, "/tmp/test_groups_%d.ckpt", (int)getpid());
  snprintf(spec, sizeof spec, "%s; %s", g_groups, g_finetune);
  model_init(&m);
  assert_int_equal(fit(&m, TR_OPTIM_ADAMW, spec, 1, NULL, 8, path), TR_OK);
  memset(m.p, 0, sizeof m.p); /* from the checkpoint only */
  assert_int_equal(fit(&m, TR_OPTIM_ADAMW, spec, 1, path, 0, NULL), TR_OK);
  expect_bits(m.p, groups_ref_finetune, "tr_fit, finetuning resumed at step 8");
  remove(path);
  /* and before the unfreeze (step 4): the backbone is still frozen after the resume */
  model_init(&m);
  assert_int_equal(fit(&m, TR_OPTIM_ADAMW, spec, 1, NULL, 4, path), TR_OK);
  assert_int_equal(fit(&m, TR_OPTIM_ADAMW, spec, 1, path, 0, NULL), TR_OK);
  expect_bits(m.p, groups_ref_finetune, "tr_fit, finetuning resumed at step 4");
  remove(path);
}

/* ---- a loop of your own: the run's settings per tensor, its own AdamW (train/math.h's passes) --------------- */
typedef struct own { model m; float mom[NP], var[NP], *pp, *gp; } own;
static int own_run(own *o, const char *spec, int grouped) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx *ctx;
  tr_optim opt;
  int what, i;
  tr_err e;
  memset(&opt, 0, sizeof opt);
  opt.weight_decay = 0.1;
  o->pp = o->m.p, o->gp = o->m.g;
  ctx = tr_run_begin(reg, &(tr_run_desc){ .max_epochs = EPOCHS, .train_batches = BATCHES, .validation = TR_NO, .lr = 1e-2,
                                          .optimizer = "AdamW", .weight_decay = 0.1, .log_every_n_steps = -1,
                                          TR_TENSORS(&o->pp, &o->gp, g_names, g_sizes), .spec = spec }, NULL);
  assert_non_null(ctx);
  while ((what = tr_run_next(reg))) {
    memset(o->m.g, 0, sizeof o->m.g);
    model_grad(&o->m, o->m.g);
    if (!tr_run_update(reg)) continue;
    assert_int_equal(tr_run_grouped(reg), grouped);
    for (i = 0; i < NT; i++) { /* per tensor, with its lr, decay and step count */
      tr_tensor_opt s = tr_run_tensor_opt(reg, i, ctx->lr, ctx->global_step);
      size_t off = (size_t)(ctx->params[i].data - o->m.p);
      tr_adamw_coef c;
      if (s.frozen) continue;
      opt.weight_decay = s.weight_decay;
      c = tr_adamw_coefs(&opt, s.lr, s.step);
      tr_adamw_update(o->m.p + off, o->m.g + off, o->mom + off, o->var + off, g_sizes[i], &c, 1);
    }
  }
  e = tr_run_end(reg);
  hk_destroy(reg);
  return e;
}
static void test_own_loop(void **state) {
  own *o = (own *)calloc(1, sizeof *o);
  char spec[512];
  (void)state;
  model_init(&o->m);
  assert_int_equal(own_run(o, NULL, 0), TR_OK);
  expect_bits(o->m.p, groups_ref_plain, "a loop of your own, no groups");
  memset(o, 0, sizeof *o);
  model_init(&o->m);
  assert_int_equal(own_run(o, g_groups, 1), TR_OK);
  expect_bits(o->m.p, groups_ref_groups, "a loop of your own, groups");
  memset(o, 0, sizeof *o);
  model_init(&o->m);
  snprintf(spec, sizeof spec, "%s; %s", g_groups, g_finetune);
  assert_int_equal(own_run(o, spec, 1), TR_OK);
  expect_bits(o->m.p, groups_ref_finetune, "a loop of your own, finetuning");
  free(o);
}

/* ---- what the run says per tensor; the finetuning's ratio; the C descs ---------------------------------------- */
static double factor3(void *user, int64_t e) { *(int64_t *)user = e; return 3; }
static hk_signal check_opts(hk_ctx *ctx, void *user) {
  int64_t *seen = (int64_t *)user;
  tr_tensor_opt emb = tr_run_tensor_opt(ctx->reg, 0, 1.0, ctx->global_step + 1),
                bbw = tr_run_tensor_opt(ctx->reg, 1, 1.0, ctx->global_step + 1),
                norm = tr_run_tensor_opt(ctx->reg, 3, 1.0, ctx->global_step + 1),
                head = tr_run_tensor_opt(ctx->reg, 6, 1.0, ctx->global_step + 1);
  assert_true(emb.frozen);
  assert_false(norm.frozen);                    /* norms train from the start */
  assert_true(norm.weight_decay == 0.25 && head.weight_decay == 0.1); /* the run's, else the group's */
  assert_true(head.lr == 4.0);
  if (ctx->epoch < 1) assert_true(bbw.frozen);
  else {
    double want = ctx->epoch == 1 ? 0.5 : 1.0;  /* 0.5, then 1.5 aligned to 1 */
    assert_false(bbw.frozen);
    assert_true(bbw.lr == want);
    assert_int_equal(bbw.step, ctx->global_step + 1 - BATCHES); /* its own count, from the unfreeze */
    assert_int_equal(norm.step, ctx->global_step + 1);
  }
  seen[1]++;
  return HK_CONTINUE;
}
static void test_desc_and_accessor(void **state) {
  model m;
  tr_trainer t;
  hk_handle h;
  int64_t seen[2] = { 0, 0 };
  const tr_finetuning_state *fs;
  (void)state;
  model_init(&m);
  assert_int_equal(tr_init(&t, &(tr_desc){ .model = { .params = m.p, .grads = m.g, .n_params = NP, .tensors = g_tensors,
                                                      .n_tensors = NT, .user = &m, .forward = m_forward, .backward = m_backward },
                                           .optim = { .lr = 1, .weight_decay = 0.1 } }), TR_OK);
  assert_int_equal(tr_param_group(t.reg, &(tr_param_group_desc){ .match = "bb.norm", .weight_decay = 0.25 }, NULL), TR_OK);
  assert_int_equal(tr_param_group(t.reg, &(tr_param_group_desc){ .match = "head.?", .lr_mult = 4 }, NULL), TR_OK);
  assert_int_equal(tr_param_group(t.reg, &(tr_param_group_desc){ .match = "emb", .frozen = TR_YES }, NULL), TR_OK);
  assert_int_equal(tr_finetuning(t.reg, &(tr_finetuning_desc){ .match = "bb.*", .norms = "*.norm", .unfreeze_at_epoch = 1,
                                                               .initial_lr = 0.5, .lr_factor_at = factor3,
                                                               .lr_factor_user = &seen[0] }, &h), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_BEFORE_OPTIMIZER_STEP, check_opts, seen, NULL, NULL), HK_OK);
  assert_int_equal(tr_fit(&t, &(tr_config){ .train = &g_data, .max_epochs = 3, .log_every_n_steps = -1 }), TR_OK);
  assert_int_equal(seen[0], 3);                 /* lr_factor_at(e + 1) at epoch 2's start */
  assert_int_equal(seen[1], 9);
  fs = tr_finetuning_get(t.reg, h);
  assert_non_null(fs);
  assert_true(fs->unfrozen && fs->unfrozen_at == BATCHES && fs->ratio == 1.0);
  tr_free(&t);
}

static void test_name_match(void **state) {
  (void)state;
  assert_true(tr_name_match("*.bias|*norm*|wte", "h.0.ln.bias"));
  assert_true(tr_name_match("*.bias|*norm*|wte", "layernorm"));
  assert_true(tr_name_match("*.bias|*norm*|wte", "wte"));
  assert_false(tr_name_match("*.bias|*norm*|wte", "wtex"));
  assert_false(tr_name_match("*.bias|*norm*|wte", "bias"));
  assert_true(tr_name_match("h.?.w", "h.3.w"));
  assert_false(tr_name_match("h.?.w", "h.13.w"));
  assert_true(tr_name_match("*", ""));
  assert_true(tr_name_match("a|", ""));          /* an empty alternative matches the empty name only */
  assert_true(tr_name_match("*a*b*c", "xxaxxbxxbc"));
  assert_false(tr_name_match("*a*b*c", "xxaxxbxxb"));
}

/* ---- refusals: each names what is wrong ------------------------------------------------------------------------ */
static void test_refusals(void **state) {
  model m;
  own *o = (own *)calloc(1, sizeof *o);
  hk_registry *reg;
  hk_ctx *ctx;
  (void)state;
  expect_spec_refused("param_group(lr_mult=2)", "missing required key(s): match");
  expect_spec_refused("param_group(match=x, lr_mult=-1)", "lr_mult is -1");
  expect_spec_refused("param_group(match=x, weight_decay=-0.5)", "weight_decay is -0.5");
  expect_spec_refused("finetuning(unfreeze_at_epoch=2)", "missing required key(s): match");
  expect_spec_refused("finetuning(match=x, initial_ratio=0)", "initial_ratio");
  expect_spec_refused("finetuning(match=x, unfreeze_at_epoch=-1)", "unfreeze_at_epoch is -1");
  /* a pattern that names no tensor fails the run at its start, naming it */
  model_init(&m);
  assert_int_equal(fit(&m, TR_OPTIM_ADAMW, "param_group(match=fc.weight, weight_decay=0)", 1, NULL, 0, NULL), TR_ERR_INVALID);
  assert_int_equal(m.backwards, 0); /* refused before anything ran */
  /* and in a loop of your own, at tr_run_begin */
  reg = hk_create(NULL);
  o->pp = o->m.p, o->gp = o->m.g;
  ctx = tr_run_begin(reg, &(tr_run_desc){ .max_epochs = 1, .train_batches = 1, .validation = TR_NO, .lr = 1e-2,
                                          TR_TENSORS(&o->pp, &o->gp, g_names, g_sizes), .spec = "param_group(match=bias, lr_mult=2)",
                                          .log = fopen("/dev/null", "w") }, NULL);
  assert_non_null(ctx);
  assert_int_equal(tr_run_next(reg), 0);
  assert_int_equal(tr_run_end(reg), TR_ERR_INVALID);
  assert_non_null(strstr(tr_run_error(reg), "param_group: match=bias names none of the 7 tensors (the first is 'emb')"));
  fclose(tr_run_get(reg)->desc.log);
  hk_destroy(reg);
  /* finetuning in a step loop */
  reg = hk_create(NULL);
  o->pp = o->m.p, o->gp = o->m.g;
  ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 3, .validation = TR_NO, .lr = 1e-2,
                                          TR_TENSORS(&o->pp, &o->gp, g_names, g_sizes), .spec = g_finetune,
                                          .log = fopen("/dev/null", "w") }, NULL);
  assert_non_null(ctx);
  while (tr_run_next(reg)) (void)tr_run_update(reg);
  assert_int_not_equal(tr_run_end(reg), TR_OK);
  assert_non_null(strstr(tr_run_error(reg), "no epochs"));
  fclose(tr_run_get(reg)->desc.log);
  hk_destroy(reg);
  /* tr_run_tensor_set without groups, or out of range */
  reg = hk_create(NULL);
  assert_int_equal(tr_run_tensor_set(reg, 0, 1, 1, 0), TR_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "no parameter groups"));
  hk_destroy(reg);
  free(o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_name_match),
    cmocka_unit_test(test_fit_no_groups),
    cmocka_unit_test(test_fit_identity_group_same_bits),
    cmocka_unit_test(test_fit_groups_adamw),
    cmocka_unit_test(test_fit_groups_sgd),
    cmocka_unit_test(test_fit_finetuning),
    cmocka_unit_test(test_fit_finetuning_resume),
    cmocka_unit_test(test_own_loop),
    cmocka_unit_test(test_desc_and_accessor),
    cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
