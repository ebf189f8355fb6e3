/* tests/readme_messages.c - the messages docs/ quotes, produced by the program itself.

     readme_messages                                   print every quoted message
     readme_messages --check docs/reference.md docs/callbacks.md exit 1, with a diff, when a quote drifted
     readme_messages --write docs/reference.md docs/callbacks.md rewrite them in place (make readme-messages)

   A quote sits between <!-- msg:NAME --> and <!-- /msg -->, inline in a sentence. Each one here runs
   the real API (hk_spec_apply with train.h's factories, a constructor, a failing hook) and writes what
   the page shows: the input, where it matters, and the message hk_last_error or ctx->hook_failure
   gives, so a message that changes (a parameter added: its list of valid keys) changes the page. */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include <math.h>
#include "doc_sections.h"

static int g_bad; /* a call did not fail as the quote says it does */

static void expect_failure(int failed, const char *what) {
  if (!failed) {
    fprintf(stderr, "readme_messages: %s did not fail; the quote needs another example\n", what);
    g_bad = 1;
  }
}

/* docs/reference.md, Specs: a misspelt key of train.h's early_stopping (its message lists every valid key). */
#define UNKNOWN_KEY_SPEC "early_stopping(monitor=val/loss, patiense=5)"
static void spec_unknown_key(ds_buf *o) {
  hk_registry *reg = hk_create(NULL);
  tr_add_factories(reg);
  expect_failure(hk_spec_apply(reg, UNKNOWN_KEY_SPEC) != HK_OK, UNKNOWN_KEY_SPEC);
  ds_put(o, "`%s` gives `%s`", UNKNOWN_KEY_SPEC, hk_last_error(reg));
  hk_destroy(reg);
}

/* docs/reference.md, Errors: what ctx->hook_failure says after a hook failed (the call is quoted as compiled). */
#define FAIL_CALL hk_fail(ctx, "loss is %f", ctx->loss)
#define STR(x) STR_(x)
#define STR_(x) #x
static hk_signal check_loss(hk_ctx *ctx, void *user) {
  (void)user;
  return FAIL_CALL;
}
static void hook_failure(ds_buf *o) {
  hk_registry *reg = hk_create(NULL);
  hk_opts opts = { 0 };
  hk_ctx ctx = { 0 };
  opts.name = "check";
  ctx.stage = HK_STAGE_FIT;
  ctx.loss = NAN;
  hk_on(reg, HK_ON_TRAIN_BATCH_END, check_loss, NULL, &opts, NULL);
  expect_failure(HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx) == HK_FAIL && ctx.hook_failure, "the hook 'check'");
  ds_put(o, "`return %s;` in a hook named `%s` at `%s` gives `%s`", STR(FAIL_CALL), opts.name,
         hk_event_name(reg, HK_ON_TRAIN_BATCH_END), ctx.hook_failure ? ctx.hook_failure : "");
  hk_ctx_free(&ctx);
  hk_destroy(reg);
}

/* docs/callbacks.md: three constructors refusing a desc; the message names the field and its value. */
static void constructor_error(ds_buf *o, tr_err e, hk_registry *reg, const char *what) {
  expect_failure(e == TR_ERR_INVALID, what);
  ds_put(o, "`%s`", hk_last_error(reg));
  hk_destroy(reg);
}
static void es_patience(ds_buf *o) {
  hk_registry *reg = hk_create(NULL);
  tr_early_stopping_desc d = { 0 };
  d.monitor = "val/loss";
  d.patience = -1;
  constructor_error(o, tr_early_stopping(reg, &d, NULL), reg, "early_stopping with patience -1");
}
static void mc_exclusive(ds_buf *o) {
  hk_registry *reg = hk_create(NULL);
  tr_model_checkpoint_desc d = { 0 };
  d.every_n_train_steps = 10;
  d.every_n_epochs = 2;
  constructor_error(o, tr_model_checkpoint(reg, &d, NULL), reg, "model_checkpoint with two triggers");
}
static void mc_filename(ds_buf *o) {
  hk_registry *reg = hk_create(NULL);
  tr_model_checkpoint_desc d = { 0 };
  d.filename = "{epoch";
  constructor_error(o, tr_model_checkpoint(reg, &d, NULL), reg, "model_checkpoint with filename '{epoch'");
}

/* docs/callbacks.md, prediction_writer: a loop whose on_predict_batch_end comes without ctx->outputs (nothing is
   written: the check comes first) */
static void pw_null(ds_buf *o) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow;
  memset(&ctx, 0, sizeof ctx);
  memset(&flow, 0, sizeof flow);
  tr_run_setup(reg, NULL);
  expect_failure(tr_prediction_writer(reg, &(tr_prediction_writer_desc){ .format = TR_PREDICTION_CSV }, NULL) != TR_OK ||
                 tr_run_enter(reg, &ctx, HK_STAGE_PREDICT, NULL) != TR_OK ? 0 : (HK_FIRE_FLOW(reg, HK_ON_PREDICT_BATCH_END, &ctx, &flow),
                 HK_FLOW_HAS(&flow, HK_FLOW_FAIL)), "prediction_writer without ctx->outputs");
  ds_put(o, "`%s`", ctx.hook_failure ? ctx.hook_failure : "");
  tr_run_leave(reg, &ctx);
  hk_destroy(reg);
}

static const struct { const char *name; void (*make)(ds_buf *); } g_messages[] = {
  { "spec-unknown-key", spec_unknown_key },
  { "hook-failure", hook_failure },
  { "early-stopping-patience", es_patience },
  { "model-checkpoint-exclusive", mc_exclusive },
  { "model-checkpoint-filename", mc_filename },
  { "prediction-writer-null", pw_null },
};
#define N_MESSAGES ((int)(sizeof g_messages / sizeof g_messages[0]))

int main(int argc, char **argv) {
  ds_section s[N_MESSAGES];
  ds_pages pg = { .tool = "readme_messages", .source = "hooks.h's and train.h's messages", .family = "<!-- msg:",
                   .fix = "make readme-messages" };
  char what[80];
  int i;
  memset(s, 0, sizeof s);
  for (i = 0; i < N_MESSAGES; i++) {
    snprintf(s[i].begin, sizeof s[i].begin, "<!-- msg:%s -->", g_messages[i].name);
    s[i].end = "<!-- /msg -->";
    g_messages[i].make(&s[i].want);
  }
  if (g_bad) return 1;
  if (argc == 1) {
    for (i = 0; i < N_MESSAGES; i++) printf("%s%s%s\n", s[i].begin, s[i].want.p, s[i].end);
    return 0;
  }
  snprintf(what, sizeof what, "the %d quoted messages", N_MESSAGES);
  return ds_main(argc, argv, &pg, s, N_MESSAGES, what, "are what the program says");
}
