/* examples/epoch_loop.c - train.h's batteries in an epoch loop of your own, a small NN library's shape: epochs over
   a training split, a validation split at each epoch's end, your model (logistic regression), your SGD and your
   checkpoint format. One spec string adds early stopping, the best-2 and last checkpoints, csv and TensorBoard,
   the progress bar and a NaN guard; the run layer keeps the loop's place (epoch, batch, step, lr, when to
   validate) and gives them a log directory, records, checkpoints in your format with their state, Ctrl-C and
   exact resume. In a scratch directory (runs/lightning_logs/version_N):  epoch_loop  (until early stopping ends
   it),  epoch_loop max_epochs=4,  epoch_loop resume=PATH  (from last.ckpt, a top-k file or interrupted.ckpt: the
   same end, bit for bit, as one run),  epoch_loop ctrl_c_at=70  (Ctrl-C at that step: exit 130; resume=
   interrupted.ckpt goes on in the middle of that epoch),  epoch_loop ctrl_c_in_val=3  (Ctrl-C during the
   validation of epoch 3),  epoch_loop nan_at=30  (a NaN loss: nan_guard fails the run, exit 2),  epoch_loop
   kill_at=N  (SIGKILL at step N: as if the machine went away; epoch_loop resume=auto then goes on from the newest
   checkpoint of the run).
   It checks its own results (exit 1). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

enum { D = 8, NTRAIN = 384, NVAL = 128, B = 32, NB = NTRAIN / B };  /* features, samples, batch, batches/epoch */
static float w[D + 1], g[D + 1], X[NTRAIN + NVAL][D + 1], Y[NTRAIN + NVAL];

static float forward(int lo, int n, int grad) {   /* mean log-loss of samples lo .. lo+n-1; grad: into g */
  float loss = 0;
  if (grad) memset(g, 0, sizeof g);
  for (int i = lo; i < lo + n; i++) {
    float z = 0;
    for (int j = 0; j <= D; j++) z += w[j] * X[i][j];
    float p = 1 / (1 + expf(-z));
    loss -= logf(Y[i] ? p + 1e-7f : 1 - p + 1e-7f) / n;
    for (int j = 0; grad && j <= D; j++) g[j] += (p - Y[i]) / n * X[i][j];
  }
  return loss;
}
static int save_model(void *u, FILE *f) { return (void)u, fwrite("EPO1", 4, 1, f) + fwrite(w, sizeof w, 1, f) != 2; }
static int load_model(void *u, FILE *f) {
  char tag[4];
  return (void)u, fread(tag, 4, 1, f) + fread(w, sizeof w, 1, f) != 2 || memcmp(tag, "EPO1", 4);
}
static hk_signal report(hk_ctx *ctx, void *u) { return (void)u, tr_print(ctx->reg, "on_exception: %s", ctx->abort_reason), HK_CONTINUE; }
int main(int argc, char **argv) {
  long max_epochs = 100, ctrl_c_at = -1, ctrl_c_in_val = -1, nan_at = -1, kill_at = -1;
  const char *resume = NULL;
  for (int i = 1; i < argc; i++)   /* max_epochs=N, ctrl_c_at=N, ctrl_c_in_val=EPOCH, nan_at=N, kill_at=N, resume=PATH|auto */
    if (!sscanf(argv[i], "max_epochs=%ld", &max_epochs) && !sscanf(argv[i], "ctrl_c_at=%ld", &ctrl_c_at) &&
        !sscanf(argv[i], "ctrl_c_in_val=%ld", &ctrl_c_in_val) && !sscanf(argv[i], "nan_at=%ld", &nan_at) &&
        !sscanf(argv[i], "kill_at=%ld", &kill_at))
      resume = argv[i] + (strncmp(argv[i], "resume=", 7) ? 0 : 7);
  unsigned seed = 11;              /* data: two overlapping clouds (odd i, even i), the last NVAL for validation */
  for (int i = 0; i < NTRAIN + NVAL; i++) {
    for (int j = 0; j < D; j++, seed = seed * 1664525u + 1013904223u)
      X[i][j] = (float)(seed >> 9) / 8388608.0f - 1 + (i % 2 ? 0.25f : -0.25f) * (j < 2);
    X[i][D] = 1, Y[i] = (float)(i % 2);
  }
  hk_registry *reg = hk_create(NULL);
  hk_on(reg, HK_ON_EXCEPTION, report, NULL, NULL, NULL);
  hk_tensor pv[] = { { "w", w, D + 1, 0 } }, gv[] = { { "w", g, D + 1, 0 } };
  hk_ctx *ctx = tr_run_begin(reg, &(tr_run_desc){ .max_epochs = max_epochs, .train_batches = NB, .val_batches = NVAL / B,
      .batch_size = B, .lr = 0.5, .log_every_n_steps = 4, .optimizer = "SGD", .hparams = "lr=0.5 batch=32",
      TR_VIEWS(pv, gv), .save_model = save_model, .load_model = load_model, .save_to = "interrupted.ckpt", /* Ctrl-C saves there */
      .spec = "nan_guard; early_stopping(monitor=val/loss, patience=3, min_delta=0.002); model_checkpoint("
              "monitor=val/loss, save_top_k=2, save_last=true); on_exception_checkpoint; csv; tensorboard; progress_bar" }, resume);
  for (int what; (what = tr_run_next(reg)); ) {
    if (what == TR_RUN_VAL_BATCH && ctx->epoch == ctrl_c_in_val && ctx->batch_idx == 1) raise(SIGINT); /* Ctrl-C in it */
    if (what == TR_RUN_VAL_BATCH) { ctx->loss = forward(NTRAIN + (int)ctx->batch_idx * B, B, 0); continue; }
    if (ctx->global_step == ctrl_c_at) raise(SIGINT);                    /* as if you pressed Ctrl-C now */
    if (ctx->global_step == kill_at) raise(SIGKILL);                    /* as if the machine went away now */
    ctx->loss = forward((int)ctx->batch_idx * B, B, 1);                 /* forward and backward */
    if (ctx->global_step == nan_at) ctx->loss = NAN;                    /* as a diverging model */
    HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, ctx);                           /* nan_guard: the loss */
    HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
    HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);                     /* nan_guard: the gradients */
    if (tr_run_update(reg))
      for (int j = 0; j <= D; j++) w[j] -= (float)ctx->lr * g[j];        /* SGD, at the lr hooks may have scaled */
  }
  tr_err e = tr_run_end(reg);      /* on_train_end .. teardown (or on_exception: it says why); logs flushed */
  const tr_early_stopping_state *es = tr_early_stopping_get(reg, hk_spec_find(reg, "early_stopping", 0));
  const tr_model_checkpoint_state *mc = tr_model_checkpoint_get(reg, hk_spec_find(reg, "model_checkpoint", 0));
  printf("ended at epoch %lld, step %lld: %s; logs in %s\n", (long long)ctx->epoch, (long long)ctx->global_step,
         e ? tr_err_name(e) : "ok", tr_run_dir(reg));
  printf("early_stopping: %s wait_count=%lld best_score=%a\n", tr_stop_reason_name(es->stopping_reason),
         (long long)es->wait_count, es->best_score);
  printf("model_checkpoint: best %s, last %s, kept %d\nweights:", mc->best_model_path, mc->last_model_path, mc->n_best_k);
  for (int j = 0; j <= D; j++) printf(" %a%s", w[j], j == D ? "\n" : "");
  int ok = nan_at >= 0 ? e == TR_ERR_HOOK : ctrl_c_at >= 0 ? e == TR_ERR_INTERRUPTED && ctx->global_step == ctrl_c_at + 1
         : ctrl_c_in_val >= 0 ? e == TR_ERR_INTERRUPTED && ctx->epoch == ctrl_c_in_val
         : e == TR_OK && (es->stopping_reason == TR_STOP_PATIENCE_EXHAUSTED || ctx->epoch == max_epochs) &&
           mc->n_best_k == (ctx->epoch >= 2 ? 2 : (int)ctx->epoch);
  if (!ok) printf("FAILED: not the expected end\n");
  hk_destroy(reg);
  return !ok ? 1 : e == TR_ERR_INTERRUPTED ? 130 : e ? 2 : 0;
}
