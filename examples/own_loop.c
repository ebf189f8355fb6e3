/* examples/own_loop.c - every battery of train.h in a training loop of your own, train_gpt2.c's shape: steps,
   no epochs. The loop, the model (logistic regression), its AdamW and its checkpoint format are yours; one
   spec string adds the batteries, and the run layer (tr_run_*) gives them what a trainer would: one log
   directory, log records, checkpoints in your format with the callbacks' state, Ctrl-C, exact resume.
   In a scratch directory (it writes runs/lightning_logs/version_N: logs, checkpoints):  own_loop  (until early stopping
   ends it),  own_loop max_steps=70,  own_loop resume=runs/lightning_logs/version_0/checkpoints/last.ckpt  (the same end,
   bit for bit, as one run),  own_loop ctrl_c_at=45  (Ctrl-C at step 45: on_exception, logs flushed, exit 130),
   own_loop nan_at=45  (a NaN loss: nan_guard fails the run, even at -Ofast; exit 2),  own_loop profile=1  (the
   profiler's table at the end, throughput in the logs),  own_loop mlflow=http://127.0.0.1:5000  (the run in a team's
   MLflow server too; build with -DTRAIN_MLFLOW ... -lcurl). It checks its own results (exit 1 if wrong). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

enum { D = 8, NTRAIN = 512, NVAL = 256, B = 32, VAL_EVERY = 20 }; /* features, samples, batch, steps */
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
   file atomically and appends the callbacks' state and the step counters after these bytes. */
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
static void validate(hk_registry *reg, hk_ctx *ctx, hk_flow *flow) {  /* the events as train.h fires them */
  double sum = 0;
  for (int64_t b = tr_run_eval_start(reg, ctx, flow, "val", NVAL / B); b < NVAL / B; b++) {
    ctx->batch_idx = b;
    HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_START, ctx, flow);
    sum += forward(NTRAIN + (int)b * B, B);
    HK_FIRE_FLOW(reg, HK_ON_VALIDATION_BATCH_END, ctx, flow);
  }
  tr_run_eval_end(reg, ctx, flow, sum / (NVAL / B)); /* val/loss, its record, on_validation_end: the two decide */
}
int main(int argc, char **argv) {
  long max_steps = 2000, ctrl_c_at = -1, nan_at = -1, profile = 0;
  const char *resume = NULL, *mlflow = NULL;
  for (int i = 1; i < argc; i++)                /* max_steps=N, ctrl_c_at=N, nan_at=N, profile=1, mlflow=URI, resume=PATH (or PATH) */
    if (!strncmp(argv[i], "mlflow=", 7)) mlflow = argv[i] + 7;
    else if (!sscanf(argv[i], "max_steps=%ld", &max_steps) && !sscanf(argv[i], "ctrl_c_at=%ld", &ctrl_c_at) &&
             !sscanf(argv[i], "nan_at=%ld", &nan_at) && !sscanf(argv[i], "profile=%ld", &profile))
      resume = argv[i] + (strncmp(argv[i], "resume=", 7) ? 0 : 7);
  unsigned seed = 7;                           /* data: two overlapping clouds, odd i and even i */
  for (int i = 0; i < NTRAIN + NVAL; i++) {
    for (int j = 0; j < D; j++, seed = seed * 1664525u + 1013904223u)        /* uniform in [-1, 1), shifted */
      X[i][j] = (float)(seed >> 9) / 8388608.0f - 1 + (i % 2 ? 0.3f : -0.3f) * (j < 3);
    X[i][D] = 1, Y[i] = (float)(i % 2);
  }
  hk_registry *reg = hk_create(NULL);         /* set-up: the run's shape, the batteries, your hooks */
  tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = max_steps, .val_batches = NVAL / B, .log_every_n_steps = 10, .optimizer = "AdamW",
                                    .hparams = "lr=0.02 batch=32", .save_model = save_model, .load_model = load_model });
  tr_run_hparam_num(reg, "features", D), tr_run_hparam(reg, "data", "two clouds"); /* more, typed: in every logger */
  if (hk_spec_apply(reg, "nan_guard; gradient_monitor(histogram_bins=20); early_stopping(monitor=val/loss, patience=3, "
                         "min_delta=0.001); model_checkpoint(monitor=val/loss, save_top_k=2, save_last=true); csv; jsonl; "
                         "tensorboard; progress_bar") ||  /* profile=1: every hook, event and phase timed; samples/s, */
      (profile && hk_spec_apply(reg, "profiler; throughput_monitor(window=50, flops_per_sample=54, peak_flops=1e9)")))
    return fprintf(stderr, "%s\n", hk_last_error(reg)), 1;    /* step-time percentiles, MFU (6 FLOPs a weight a sample) */
  char spec[600];                                 /* mlflow=URI: the run in an MLflow server (a checkpoint keeps its id) */
  snprintf(spec, sizeof spec, "mlflow(tracking_uri=\"%s\", experiment=own_loop, tags=\"example=own_loop\")", mlflow ? mlflow : "");
  if (mlflow && hk_spec_apply(reg, spec)) return fprintf(stderr, "%s\n", hk_last_error(reg)), 1;
  hk_on(reg, HK_ON_EXCEPTION, report, NULL, NULL, NULL);
  hk_tensor pv = { "w", w, D + 1, 0 }, gv = { "w", g, D + 1, 0 };
  hk_ctx ctx = { .params = &pv, .grads = &gv, .n_tensors = 1 };
  hk_flow flow = { 0 };
  unsigned next = tr_run_start(reg, &ctx, resume) ? TR_RUN_STOP : 0; /* setup .. on_train_start; resume */
  while (!(next & TR_RUN_STOP) && ctx.global_step < max_steps) {
    int lo = (int)(ctx.global_step % (NTRAIN / B)) * B;               /* the data's position: from the step */
    ctx.batch_idx = ctx.global_step;
    tr_run_lr(reg, &ctx, 0.02);                                       /* times what hooks set (tr_lr_scale) */
    if (ctx.global_step == ctrl_c_at) raise(SIGINT);                   /* as if you pressed Ctrl-C now */
    HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
    if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH)) {
      ctx.loss = ctx.global_step == nan_at ? NAN : forward(lo, B);    /* nan_at: as a diverging model */
      HK_FIRE_FLOW(reg, HK_ON_BEFORE_BACKWARD, &ctx, &flow);          /* nan_guard: the loss */
    }
    if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH)) {
      backward(lo);
      HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, &ctx, &flow);           /* (the run: a new gradient for hk_grad_norm) */
      HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx, &flow);    /* gradient_monitor, nan_guard */
    }
    if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP)) {
      adamw((float)ctx.lr, ++ctx.global_step);
      HK_FIRE_FLOW(reg, HK_ON_AFTER_OPTIMIZER_STEP, &ctx, &flow);
    }
    ctx.samples_seen += B;
    if (!HK_FLOW_HAS(&flow, HK_FLOW_FAIL)) HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow); /* not in a failed one */
    next = tr_run_batch_end(reg, &ctx, &flow);                        /* log record, requests, Ctrl-C, stop */
    if (ctx.global_step % VAL_EVERY == 0 || (next & TR_RUN_VALIDATE)) {
      validate(reg, &ctx, &flow);
      next |= tr_run_batch_end(reg, &ctx, &flow);                     /* its checkpoint and stop: now */
    }
  }
  tr_err e = tr_run_finish(reg, &ctx, TR_OK);  /* on_train_end .. teardown (or on_exception); logs flushed */
  /* check the claims: how it ended, what the callbacks kept (their state came back exactly on resume) */
  const tr_early_stopping_state *es = tr_early_stopping_get(reg, hk_spec_find(reg, "early_stopping", 0));
  const tr_model_checkpoint_state *mc = tr_model_checkpoint_get(reg, hk_spec_find(reg, "model_checkpoint", 0));
  printf("ended at step %lld: %s; logs in %s\n", (long long)ctx.global_step, e ? tr_run_error(reg) : "ok", tr_run_dir(reg));
  printf("early_stopping: %s wait_count=%lld best_score=%a\n", tr_stop_reason_name(es->stopping_reason),
         (long long)es->wait_count, es->best_score);
  printf("model_checkpoint: best %s (%a), last %s, kept:", mc->best_model_path, mc->best_model_score, mc->last_model_path);
  for (int k = 0; k < mc->n_best_k; k++) printf(" %s=%a", mc->best_k_paths[k], mc->best_k_scores[k]);
  printf("\nweights:");
  for (int j = 0; j <= D; j++) printf(" %a%s", w[j], j == D ? "\n" : "");
  int ok = nan_at >= 0 ? e == TR_ERR_HOOK && ctx.global_step == nan_at
         : ctrl_c_at >= 0 ? e == TR_ERR_INTERRUPTED && ctx.global_step == ctrl_c_at + 1
         : e == TR_OK && mc->n_best_k == (ctx.global_step >= 2 * VAL_EVERY ? 2 : ctx.global_step / VAL_EVERY) &&
           (es->stopping_reason == TR_STOP_PATIENCE_EXHAUSTED ? es->best_score < 0.2 : ctx.global_step == max_steps);
  if (!ok) printf("FAILED: not the expected end\n");
  hk_ctx_free(&ctx), hk_destroy(reg);          /* the metrics map, the registry */
  return !ok ? 1 : e == TR_ERR_INTERRUPTED ? 130 : e ? 2 : 0;
}
