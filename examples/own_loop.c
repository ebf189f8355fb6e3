/* examples/own_loop.c - every battery of train.h in a training loop of your own, train_gpt2.c's shape: steps,
   no epochs. The model (logistic regression), its AdamW and its checkpoint format are yours; the run layer keeps
   the loop's place (step, learning rate, when to validate, Ctrl-C, resume) and gives the batteries of one spec
   string what a trainer would: one log directory, records, checkpoints in your format with their state.
   In a scratch directory (it writes runs/lightning_logs/version_N: logs, checkpoints):  own_loop  (until early
   stopping ends it),  own_loop max_steps=70,  own_loop resume=runs/lightning_logs/version_0/checkpoints/last.ckpt
   (the same end, bit for bit, as one run),  own_loop ctrl_c_at=45  (Ctrl-C at step 45: on_exception, logs
   flushed, exit 130),  own_loop nan_at=45  (a NaN loss: nan_guard fails the run, even at -Ofast; exit 2),
   own_loop kill_at=N  (SIGKILL at step N: as if the machine went away; own_loop resume=auto then goes on from the
   newest checkpoint that loads),  own_loop profile=1  (the profiler's table at the end, throughput in the logs),  own_loop mlflow=http://127.0.0.1:5000
   (the run in a team's MLflow server too; build with -DTRAIN_MLFLOW ... -lcurl). It checks its own results. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

enum { D = 8, NTRAIN = 512, NVAL = 256, B = 32 }; /* features, samples, batch */
static float w[D + 1], g[D + 1], m[D + 1], v[D + 1];  /* weights and bias, gradient, AdamW's moments */
static float X[NTRAIN + NVAL][D + 1], Y[NTRAIN + NVAL], err[B]; /* X[i][D] = 1: the bias's input */

static float forward(int lo, int n) {         /* mean log-loss of samples lo .. lo+n-1 */
  float loss = 0;
  for (int i = lo; i < lo + n; i++) {
    float z = 0;
    for (int j = 0; j <= D; j++) z += w[j] * X[i][j];
    float p = 1 / (1 + expf(-z));
    err[(i - lo) % B] = (p - Y[i]) / n;      /* d(loss)/dz, for backward */
    loss -= logf(Y[i] ? p + 1e-7f : 1 - p + 1e-7f) / n;
  }
  return loss;
}
static void backward(int lo) {
  memset(g, 0, sizeof g);
  for (int i = 0; i < B; i++)
    for (int j = 0; j <= D; j++) g[j] += err[i] * X[lo + i][j];
}
static void adamw(float lr, int64_t t) {      /* PyTorch's formula, weight decay 0.01 */
  for (int j = 0; j <= D; j++) {
    w[j] -= lr * 0.01f * w[j];
    m[j] = 0.9f * m[j] + 0.1f * g[j];
    v[j] = 0.999f * v[j] + 0.001f * g[j] * g[j];
    w[j] -= lr * (m[j] / (1 - powf(0.9f, (float)t))) / (sqrtf(v[j] / (1 - powf(0.999f, (float)t))) + 1e-8f);
  }
}
/* The model's own checkpoint format: a tag, the weights, the optimizer's moments. The run layer writes the
   file atomically and appends the callbacks' state and the loop's place after these bytes. */
static int save_model(void *u, FILE *f) {
  (void)u;
  return fwrite("OWN1", 4, 1, f) + fwrite(w, sizeof w, 1, f) + fwrite(m, sizeof m, 1, f) + fwrite(v, sizeof v, 1, f) != 4;
}
static int load_model(void *u, FILE *f) {
  char tag[4];
  (void)u;
  return fread(tag, 4, 1, f) + fread(w, sizeof w, 1, f) + fread(m, sizeof m, 1, f) + fread(v, sizeof v, 1, f) != 4 ||
         memcmp(tag, "OWN1", 4);
}
static hk_signal report(hk_ctx *ctx, void *u) {            /* a hook of your own beside the batteries */
  tr_print(ctx->reg, "on_exception: %s", ctx->abort_reason); /* a line above the progress bar */
  return (void)u, HK_CONTINUE;
}
int main(int argc, char **argv) {
  long max_steps = 2000, ctrl_c_at = -1, nan_at = -1, kill_at = -1, profile = 0;
  const char *resume = NULL, *mlflow = NULL;
  for (int i = 1; i < argc; i++)                /* max_steps=N, ctrl_c_at=N, nan_at=N, kill_at=N, profile=1, mlflow=URI, resume=PATH|auto */
    if (!strncmp(argv[i], "mlflow=", 7)) mlflow = argv[i] + 7;
    else if (!sscanf(argv[i], "max_steps=%ld", &max_steps) && !sscanf(argv[i], "ctrl_c_at=%ld", &ctrl_c_at) &&
             !sscanf(argv[i], "nan_at=%ld", &nan_at) && !sscanf(argv[i], "kill_at=%ld", &kill_at) &&
             !sscanf(argv[i], "profile=%ld", &profile))
      resume = argv[i] + (strncmp(argv[i], "resume=", 7) ? 0 : 7);
  unsigned seed = 7;                           /* data: two overlapping clouds, odd i and even i */
  for (int i = 0; i < NTRAIN + NVAL; i++) {
    for (int j = 0; j < D; j++, seed = seed * 1664525u + 1013904223u)        /* uniform in [-1, 1), shifted */
      X[i][j] = (float)(seed >> 9) / 8388608.0f - 1 + (i % 2 ? 0.3f : -0.3f) * (j < 3);
    X[i][D] = 1, Y[i] = (float)(i % 2);
  }
  hk_registry *reg = hk_create(NULL);          /* your hooks and extra batteries first: the run starts with them */
  hk_on(reg, HK_ON_EXCEPTION, report, NULL, NULL, NULL);
  tr_run_hparam_num(reg, "features", D), tr_run_hparam(reg, "data", "two clouds"); /* in every logger, typed */
  char spec[800];                              /* profile=1: every hook, event and phase timed, samples/s, MFU; */
  snprintf(spec, sizeof spec, "nan_guard; gradient_monitor(histogram_bins=20); early_stopping(monitor=val/loss, "
           "patience=3, min_delta=0.001); model_checkpoint(monitor=val/loss, save_top_k=2, save_last=true); csv; jsonl; "
           "tensorboard; progress_bar; watchdog(seconds=600, action=exit)" /* hung 10 min: say where, exit 124, requeue */
           "%s%s%s%s", profile ? "; profiler; throughput_monitor(window=50, flops_per_sample=54, peak_flops=1e9)" : "", mlflow ? "; mlflow(tracking_uri=\"" : "", mlflow ? mlflow : "", /* mlflow=URI: */
           mlflow ? "\", experiment=own_loop, tags=\"example=own_loop\")" : "");     /* the run in an MLflow server */
  hk_tensor pv[] = { { "w", w, D + 1, 0 } }, gv[] = { { "w", g, D + 1, 0 } };
  hk_ctx *ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = max_steps, .lr = 0.02, .batch_size = B,
      .val_every_n_steps = 20, .val_batches = NVAL / B, .log_every_n_steps = 10, .optimizer = "AdamW",
      .hparams = "lr=0.02 batch=32", TR_VIEWS(pv, gv), .save_model = save_model, .load_model = load_model, .spec = spec }, resume);
  for (int what; (what = tr_run_next(reg)); ) {
    if (what == TR_RUN_VAL_BATCH) { ctx->loss = forward(NTRAIN + (int)ctx->batch_idx * B, B); continue; }
    int lo = (int)(ctx->global_step % (NTRAIN / B)) * B;               /* the data's position: from the step */
    if (ctx->global_step == ctrl_c_at) raise(SIGINT);                   /* as if you pressed Ctrl-C now */
    if (ctx->global_step == kill_at) raise(SIGKILL);                    /* as if the machine went away now */
    ctx->loss = forward(lo, B);
    if (ctx->global_step == nan_at) ctx->loss = NAN;                    /* nan_at: as a diverging model */
    HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, ctx);                           /* nan_guard: the loss */
    backward(lo);
    HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
    HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);                     /* gradient_monitor, nan_guard */
    if (tr_run_update(reg)) adamw((float)ctx->lr, ctx->global_step);   /* the lr hooks may have scaled */
  }
  tr_err e = tr_run_end(reg);                  /* on_train_end .. teardown (or on_exception: it says why) */
  /* check the claims: how it ended, what the callbacks kept (their state came back exactly on resume) */
  const tr_early_stopping_state *es = tr_early_stopping_get(reg, hk_spec_find(reg, "early_stopping", 0));
  const tr_model_checkpoint_state *mc = tr_model_checkpoint_get(reg, hk_spec_find(reg, "model_checkpoint", 0));
  if (!es || !mc) return 1;                    /* the spec was refused: tr_run_end said why */
  printf("ended at step %lld: %s; logs in %s\n", (long long)ctx->global_step, e ? tr_err_name(e) : "ok", tr_run_dir(reg));
  printf("early_stopping: %s wait_count=%lld best_score=%a\n", tr_stop_reason_name(es->stopping_reason),
         (long long)es->wait_count, es->best_score);
  printf("model_checkpoint: best %s (%a), last %s, kept:", mc->best_model_path, mc->best_model_score, mc->last_model_path);
  for (int k = 0; k < mc->n_best_k; k++) printf(" %s=%a", mc->best_k_paths[k], mc->best_k_scores[k]);
  printf("\nweights:");
  for (int j = 0; j <= D; j++) printf(" %a%s", w[j], j == D ? "\n" : "");
  int ok = nan_at >= 0 ? e == TR_ERR_HOOK && ctx->global_step == nan_at
         : ctrl_c_at >= 0 ? e == TR_ERR_INTERRUPTED && ctx->global_step == ctrl_c_at + 1
         : e == TR_OK && mc->n_best_k == (ctx->global_step >= 40 ? 2 : ctx->global_step / 20) &&
           (es->stopping_reason == TR_STOP_PATIENCE_EXHAUSTED ? es->best_score < 0.2 : ctx->global_step == max_steps);
  if (!ok) printf("FAILED: not the expected end\n");
  hk_destroy(reg);                             /* the run, its context, the batteries */
  return !ok ? 1 : e == TR_ERR_INTERRUPTED ? 130 : e ? 2 : 0;
}
