/* bench_train.c - what train.h and its hooks cost per training step, in instructions (callgrind).

   The same training run - the spirals MLP of examples/mlp.h (2 -> 64 -> 3), batches of 32, AdamW,
   a shuffle per epoch - is run four ways:

     hand    a training loop written by hand, with no hooks: the same model and data functions (called
             through the same tr_model / tr_data pointers), the same epoch shuffle, the same AdamW
             arithmetic as train.h (its public tr_adamw_update) - so the same math, batch for batch
     off     tr_fit, built with HK_DISABLE: every hook site compiled out
     empty   tr_fit, nothing registered: every site is an empty guard
     five    tr_fit with five typical callbacks: a loss logger writing a metric, a grad-norm monitor
             reading train.h's lazy "grad_norm" metric every 10th step, an LR recorder, a NaN guard and
             a stateful step counter
     std     tr_fit with the standard callbacks early_stopping (patience 1000: it never stops, so the
             math stays the same) and model_checkpoint (top 2 by the metric, a checkpoint file written
             at every epoch's end into a temporary directory), both monitoring train/loss
     std4    std plus lr_monitor (lr-AdamW, a lazy metric) and gradient_monitor due every 50 steps (total and
             per-tensor gradient norms published as metrics): the cost goal
     spike   spike_detection at its defaults: the loss window (10) every batch, the gradient norm every
             step, a snapshot of parameters + AdamW moments every 100 steps (a memcpy); no spike happens

   Each way runs under valgrind --tool=callgrind, which counts executed instructions exactly (no
   timing noise), collecting only inside bench_run() (--toggle-collect). Each runs twice, for 2 and for
   10 epochs; the difference divided by the difference in steps is the cost of one step, with every
   one-time cost (allocation, registry, first metric insertions) cancelled out. The runs print a
   checksum of the final parameters, and the driver checks that all four agree: the comparison is of
   the same computation.

   Usage: bench_train [path/to/bench_train_off]    (make bench-train: both binaries, then the table)
          bench_train run MODE EPOCHS               (one run; what the driver starts under callgrind) */
#define _POSIX_C_SOURCE 200809L /* popen, pclose */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "examples/mlp.h"

#include <inttypes.h>
#include <unistd.h> /* mkdtemp, rmdir */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PER_CLASS 320   /* 960 points: 30 batches of 32 per epoch */
#define CLASSES 3
#define HIDDEN 64
#define BATCH 32
#define LR 1e-2
#define WD 1e-4
#define SEED 7
#define EPOCHS_SHORT 2
#define EPOCHS_LONG 10

/* ==== the hand-written loop ======================================================================= */

#if defined(__GNUC__) || defined(__clang__)
#  define BENCH_NOINLINE __attribute__((noinline))
#else
#  define BENCH_NOINLINE
#endif

/* train.h's per-epoch shuffle generator (tr__epoch_rng), derived from the seed and the epoch alone. */
static tr_rng epoch_rng(uint64_t seed, int64_t epoch) {
    tr_rng r;
    tr_rng_seed(&r, seed ^ 0x5DEECE66Dull);
    r.state = tr_rng_u64(&r) ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull);
    return r;
}

/* AdamW exactly as train.h computes it: train.h's public pass (float32 in PyTorch's order), as a
   hand-written loop that vendors train.h would call it. */
BENCH_NOINLINE static void adamw_step(float *p, float *g, float *m, float *v, size_t n, double lr, double wd, int64_t step) {
    tr_optim o = { .kind = TR_OPTIM_ADAMW, .lr = lr, .weight_decay = wd, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8 };
    tr_adamw_coef c = tr_adamw_coefs(&o, lr, step);
    tr_adamw_update(p, g, m, v, n, &c, 1);
}

/* The loop. External and noinline, so that the compiler cannot see which model and data functions
   the pointers hold and inline them here: it calls them through the pointers, as tr_fit does, and
   the model's code is the same machine code in every row. */
BENCH_NOINLINE int bench_hand(const tr_model *model, const tr_data *data, int epochs);
int bench_hand(const tr_model *model, const tr_data *data, int epochs) {
    float *m = (float *)calloc(model->n_params, sizeof(float)), *v = (float *)calloc(model->n_params, sizeof(float));
    int64_t step = 0;
    if (!m || !v) { free(m); free(v); return 1; }
    for (int64_t epoch = 0; epoch < epochs; epoch++) {
        tr_rng r = epoch_rng(SEED, epoch);
        data->shuffle(data->user, &r);
        int64_t n = data->count(data->user);
        for (int64_t b = 0; b < n; b++) {
            void *batch;
            double loss;
            if (data->get(data->user, b, &batch) || model->forward(model->user, batch, 1, &loss)) goto fail;
            memset(model->grads, 0, model->n_params * sizeof(float));
            if (model->backward(model->user, batch)) goto fail;
            adamw_step(model->params, model->grads, m, v, model->n_params, LR, WD, ++step);
        }
    }
    free(m); free(v);
    return 0;
fail:
    free(m); free(v);
    return 1;
}

/* ==== five typical callbacks ====================================================================== */

/* 1. a loss logger: the running mean of the training loss, as the metric train/loss_mean */
typedef struct loss_log { double sum; int64_t n; } loss_log;
static hk_signal log_loss(hk_ctx *ctx, void *user) {
    loss_log *l = (loss_log *)user;
    l->sum += ctx->loss;
    l->n++;
    hk_metric_set(ctx, "train/loss_mean", l->sum / (double)l->n);
    return HK_CONTINUE;
}

/* 2. a grad-norm monitor: every 10th step, read the lazy metric grad_norm (train.h computes it only
      when asked) and keep the largest */
static hk_signal watch_grad_norm(hk_ctx *ctx, void *user) {
    double *max_norm = (double *)user, norm = 0;
    if (hk_metric_get(ctx, "grad_norm", &norm) && norm > *max_norm) *max_norm = norm;
    return HK_CONTINUE;
}

/* 3. an LR recorder: the learning rate of every step, into a preallocated ring */
typedef struct lr_log { double lr[256]; int64_t n; } lr_log;
static hk_signal record_lr(hk_ctx *ctx, void *user) {
    lr_log *l = (lr_log *)user;
    l->lr[l->n++ & 255] = ctx->lr;
    return HK_CONTINUE;
}

/* 4. a NaN guard: fail the run if the loss is not finite (train.h checks too; a user guard often does) */
static hk_signal nan_guard(hk_ctx *ctx, void *user) {
    (void)user;
    return hk_is_finite(ctx->loss) ? HK_CONTINUE : hk_fail(ctx, "loss is %f", ctx->loss);
}

/* 5. a step counter with checkpointable state */
static hk_signal count_step(hk_ctx *ctx, void *user) {
    (void)ctx;
    ++*(int64_t *)user;
    return HK_CONTINUE;
}
static int counter_save(void *user, hk_bytes *out) { return hk_bytes_put(out, user, sizeof(int64_t)); }
static int counter_load(void *user, hk_reader *in) { return hk_read(in, user, sizeof(int64_t)); }

typedef struct five { loss_log loss; double max_norm; lr_log lr; int64_t steps; } five;

static int add_five(hk_registry *reg, five *f) {
    hk_callback counter = { 0 };
    counter.name = "step_counter";
    counter.user = &f->steps;
    counter.on_after_optimizer_step = count_step;
    counter.save_state = counter_save;
    counter.load_state = counter_load;
    return hk_on(reg, HK_ON_TRAIN_BATCH_END, log_loss, &f->loss, &(hk_opts){ .name = "loss_logger" }, NULL) ||
           hk_on(reg, HK_ON_BEFORE_OPTIMIZER_STEP, watch_grad_norm, &f->max_norm,
                 &(hk_opts){ .name = "grad_norm_monitor", .filter = { .every = 10 } }, NULL) ||
           hk_on(reg, HK_ON_TRAIN_BATCH_START, record_lr, &f->lr, &(hk_opts){ .name = "lr_recorder" }, NULL) ||
           hk_on(reg, HK_ON_AFTER_BACKWARD, nan_guard, NULL, &(hk_opts){ .name = "nan_guard" }, NULL) ||
           hk_add_callback(reg, &counter, NULL, NULL);
}

/* ==== the standard callbacks ======================================================================= */
static int add_std(tr_trainer *t, char *dir, hk_handle *ckpt) {
    return tr_early_stopping(t->reg, &(tr_early_stopping_desc){ .monitor = "train/loss", .patience = 1000 }, NULL) ||
           tr_model_checkpoint(t->reg, &(tr_model_checkpoint_desc){ .dirpath = dir, .monitor = "train/loss", .save_top_k = 2,
                               .filename = "{epoch}-{train/loss:.4f}" }, ckpt);
}
static int add_monitors(tr_trainer *t) {
    return tr_lr_monitor(t->reg, &(tr_lr_monitor_desc){ 0 }, NULL) ||
           tr_gradient_monitor(t->reg, &(tr_gradient_monitor_desc){ .log_frequency = 50 }, NULL);
}
/* Every logger and the progress bar (into /dev/null), a record every 50 steps (the default). What is driven by
   the clock is made count-driven, so that callgrind counts the same instructions in every run: the file loggers
   write every 4 records (flush_every; by default at most once a second), the bar prints a line per epoch (lines
   mode; on a terminal it redraws at most every 0.1 s). The clock-driven costs are in bench-log's timed run. */
static int add_logs(tr_trainer *t, const char *dir, FILE *devnull) {
    char spec[1024];
    snprintf(spec, sizeof spec, "csv(save_dir=\"%s\", flush_every=4); jsonl(save_dir=\"%s\", flush_every=4); "
             "tensorboard(save_dir=\"%s\", flush_every=4); plot(save_dir=\"%s\")", dir, dir, dir, dir);
    return hk_spec_apply(t->reg, spec) != HK_OK ||
           tr_progress_bar(t->reg, &(tr_progress_bar_desc){ .out = devnull, .mode = TR_BAR_LINES, .line_seconds = 1e9,
                                                            .width = 100 }, NULL) != TR_OK;
}
static void remove_std(tr_trainer *t, char *dir, hk_handle ckpt) {   /* what model_checkpoint left */
    const tr_model_checkpoint_state *s = tr_model_checkpoint_get(t->reg, ckpt);
    for (int i = 0; s && i < s->n_best_k; i++) remove(s->best_k_paths[i]);
    rmdir(dir);
}

/* ==== one run ====================================================================================== */

static uint64_t checksum(const float *p, size_t n) {   /* FNV-1a over the parameters' bytes */
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Everything callgrind counts. noinline keeps it a function of its own, for --toggle-collect. */
BENCH_NOINLINE int bench_run(const char *mode, int epochs, uint64_t *sum);
int bench_run(const char *mode, int epochs, uint64_t *sum) {
    spirals data;
    mlp net;
    tr_tensor views[MLP_NUM_TENSORS];
    int rc = 1;
    if (spirals_make(&data, PER_CLASS, CLASSES, 0.2f, 1)) return 1;
    if (mlp_init(&net, 2, HIDDEN, CLASSES, BATCH, 42)) { spirals_free(&data); return 1; }
    tr_model model = mlp_tr_model(&net, views);
    tr_data train = spirals_tr_data(&data, BATCH, 1);

    if (!strcmp(mode, "hand")) {
        rc = bench_hand(&model, &train, epochs);
    } else {
        tr_trainer t;
        five f;
        char dir[] = "/tmp/bench_train_ckpt.XXXXXX";
        hk_handle ckpt = 0;
        int std4 = !strcmp(mode, "std4"), std = std4 || !strcmp(mode, "std"), logs = !strcmp(mode, "logs");
        FILE *devnull = logs ? fopen("/dev/null", "w") : NULL;
        memset(&f, 0, sizeof f);
        if ((std || logs) && !mkdtemp(dir)) { perror("bench_train: mkdtemp"); return 1; }
        if (tr_init(&t, &(tr_desc){ .model = model, .optim = { .kind = TR_OPTIM_ADAMW, .lr = LR, .weight_decay = WD },
                                    .seed = SEED }) == TR_OK &&
            (strcmp(mode, "five") || add_five(t.reg, &f) == 0) && (!std || add_std(&t, dir, &ckpt) == 0) &&
            (!std4 || add_monitors(&t) == 0) && (!logs || (devnull && add_logs(&t, dir, devnull) == 0)) &&
            (strcmp(mode, "spike") || tr_spike_detection(t.reg, &(tr_spike_detection_desc){ .verbose = TR_NO }, NULL) == TR_OK)) {
            rc = tr_fit(&t, &(tr_config){ .train = &train, .max_epochs = epochs, .no_sigint = 1 }) != TR_OK;
            if (rc) fprintf(stderr, "bench_train: %s\n", tr_error(&t));
            if (!strcmp(mode, "five") && f.steps != (int64_t)epochs * spirals_num_batches(&data, BATCH)) rc = 1;
            if (std && tr_model_checkpoint_get(t.reg, ckpt)->n_best_k != 2) rc = 1;
        }
        if (std) remove_std(&t, dir, ckpt);
        tr_free(&t);
        if (logs) { /* the loggers' version directory; the same work at every epoch count */
            char cmd[128];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            if (system(cmd) != 0) rc = 1;
            fclose(devnull);
        }
    }
    *sum = checksum(net.params, net.num_params);
    mlp_free(&net);
    spirals_free(&data);
    return rc;
}

/* ==== the run layer's own cost: a loop of your own, nothing due ===================================== */

/* A model whose step is one pass each way over P parameters (the same in every loop, so it cancels): the run
   layer's cost per step is a loop's row minus the hand-written one, at 1 K and 64 K parameters. The standard
   set is registered and nothing is due in the steps measured: the record, the checkpoint, the validation and
   the monitors every 10,000 steps; the loops stop after at most 400 (a loop may end after any whole batch). */
#ifndef OWN_DUE
#  define OWN_DUE 10000
#endif
#define OWN_STD "nan_guard(check_grads=false); early_stopping(monitor=val/loss, patience=3); " \
  "model_checkpoint(dirpath=\"%s/ckpt\", monitor=val/loss, save_top_k=2, every_n_train_steps=%d); lr_monitor; " \
  "gradient_monitor(log_frequency=%d); csv(save_dir=\"%s\"); jsonl(save_dir=\"%s\"); tensorboard(save_dir=\"%s\"); " \
  "progress_bar(mode=lines, line_seconds=1e9)"
typedef struct own { float *p, *g; size_t n; } own;
BENCH_NOINLINE static double own_forward(own *m) { return 0.5 * (double)m->p[0] * (double)m->p[0] + 1.0; }
BENCH_NOINLINE static void own_backward(own *m) { for (size_t i = 0; i < m->n; i++) m->g[i] = 1e-3f * m->p[i] + 1e-4f; }
BENCH_NOINLINE static void own_sgd(own *m, float lr) { for (size_t i = 0; i < m->n; i++) m->p[i] -= lr * m->g[i]; }

/* hand: the model's work alone. new: tr_run_begin .. tr_run_end (run.h's dozen lines). old: the single calls. */
static int own_run(const char *mode, size_t n, int steps, const char *dir, own *m) {
  char spec[1024];
  hk_tensor pv[] = { { "w", NULL, 0, 0 } }, gv[] = { { "w", NULL, 0, 0 } };
  hk_registry *reg;
  int rc = 0;
  pv[0].data = m->p, gv[0].data = m->g, pv[0].count = gv[0].count = n;
  if (!strcmp(mode, "hand")) {
    for (int s = 0; s < steps; s++) { (void)own_forward(m); own_backward(m); own_sgd(m, 0.01f); }
    return 0;
  }
  snprintf(spec, sizeof spec, OWN_STD, dir, OWN_DUE, OWN_DUE, dir, dir, dir);
  if (!(reg = hk_create(NULL))) return 1;
  if (!strcmp(mode, "new")) {
    hk_ctx *ctx = tr_run_begin(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 10000, .lr = 0.01, .batch_size = 32,
        .val_every_n_steps = OWN_DUE, .val_batches = 1, .log_every_n_steps = OWN_DUE, .optimizer = "SGD",
        TR_VIEWS(pv, gv), .spec = spec }, NULL);
    for (int what; ctx && (what = tr_run_next(reg)); ) {
      if (what == TR_RUN_VAL_BATCH) { ctx->loss = own_forward(m); continue; }
      if (ctx->global_step >= steps) break; /* (a loop may leave after any whole batch: tr_run_end closes it) */
      ctx->loss = own_forward(m);
      HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, ctx);
      own_backward(m);
      HK_FIRE(reg, HK_ON_AFTER_BACKWARD, ctx);
      HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, ctx);
      if (tr_run_update(reg)) own_sgd(m, (float)ctx->lr);
    }
    rc = tr_run_end(reg) != TR_OK;
  } else {
    hk_ctx ctx = { .stage = HK_STAGE_FIT, .params = pv, .grads = gv, .n_tensors = 1 };
    hk_flow flow = { 0 };
    unsigned next;
    if (tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .max_steps = 10000, .val_every_n_steps = OWN_DUE, .val_batches = 1,
                                         .log_every_n_steps = OWN_DUE, .optimizer = "SGD" }) ||
        hk_spec_apply(reg, spec)) { fprintf(stderr, "bench_train: %s\n", hk_last_error(reg)); hk_destroy(reg); return 1; }
    next = tr_run_start(reg, &ctx, NULL) ? TR_RUN_STOP : 0;
    for (ctx.batch_idx = 0; !(next & TR_RUN_STOP) && ctx.global_step < steps; ctx.batch_idx++) {
      float lr = (float)tr_run_lr(reg, &ctx, 0.01);
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_START, &ctx, &flow);
      ctx.loss = own_forward(m);
      HK_FIRE_FLOW(reg, HK_ON_BEFORE_BACKWARD, &ctx, &flow);
      own_backward(m);
      HK_FIRE_FLOW(reg, HK_ON_AFTER_BACKWARD, &ctx, &flow);
      HK_FIRE_FLOW(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &ctx, &flow);
      if (!HK_FLOW_HAS(&flow, HK_FLOW_SKIP_STEP)) { own_sgd(m, lr); ctx.global_step++; }
      ctx.samples_seen += 32;
      if (ctx.global_step > 0) HK_FIRE_FLOW(reg, HK_ON_AFTER_OPTIMIZER_STEP, &ctx, &flow);
      HK_FIRE_FLOW(reg, HK_ON_TRAIN_BATCH_END, &ctx, &flow);
      next = tr_run_batch_end(reg, &ctx, &flow);
    }
    rc = tr_run_finish(reg, &ctx, TR_OK) != TR_OK;
    if (rc) fprintf(stderr, "bench_train: %s\n", tr_run_error(reg));
    hk_ctx_free(&ctx);
  }
  hk_destroy(reg);
  return rc;
}
/* "own-MODE-N": the loop MODE (hand, new, old) over N parameters, for `steps` steps. */
BENCH_NOINLINE int bench_own(const char *arg, int steps, uint64_t *sum);
int bench_own(const char *arg, int steps, uint64_t *sum) {
  char mode[16], dir[] = "/tmp/bench_train_own.XXXXXX", cmd[128];
  unsigned long n = 0;
  own m;
  int rc;
  if (sscanf(arg, "own-%15[a-z]-%lu", mode, &n) != 2 || !n || !mkdtemp(dir)) return 1;
  m.n = n;
  m.p = (float *)malloc(n * sizeof(float)), m.g = (float *)calloc(n, sizeof(float));
  if (!m.p || !m.g) return 1;
  for (size_t i = 0; i < n; i++) m.p[i] = (float)(i % 97) * 0.01f;
  rc = own_run(mode, n, steps, dir, &m);
  *sum = checksum(m.p, n);
  free(m.p), free(m.g);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) rc = 1;
  return rc;
}

/* ==== the driver ==================================================================================== */

typedef struct row { const char *label, *exe, *mode; double per_step; uint64_t sum; } row;

/* Run `exe run mode epochs` under callgrind; read the instruction count and the checksum. */
static int measure(const char *exe, const char *mode, int epochs, uint64_t *instr, uint64_t *sum) {
    char cmd[1024], line[512];
    int got_instr = 0, got_sum = 0;
    snprintf(cmd, sizeof cmd, "valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect=bench_run --toggle-collect=bench_own "
             "'%s' run %s %d 2>&1", exe, mode, epochs);
    FILE *p = popen(cmd, "r");
    if (!p) return 1;
    while (fgets(line, sizeof line, p)) {
        const char *c = strstr(line, "Collected :");
        if (c && sscanf(c + 11, "%" SCNu64, instr) == 1) got_instr = 1;
        if (sscanf(line, "checksum %" SCNx64, sum) == 1) got_sum = 1;
    }
    int status = pclose(p);
    if (status != 0 || !got_instr || !got_sum) {
        fprintf(stderr, "bench_train: '%s' failed (status %d)%s\n", cmd, status,
                got_instr ? "" : "; is valgrind installed? (make deps)");
        return 1;
    }
    return 0;
}

/* The run layer's table: per-step instructions of each loop over 100..400 steps, less the hand-written one's. */
#define OWN_GOAL 1000.0
static int own_table(const char *self) {
    static const char *modes[] = { "hand", "new", "old" };
    static const unsigned long sizes[] = { 1024, 65536 };
    const int s1 = 100, s2 = 400;
    double per[2][3];
    int ok = 1, same = 1;
    for (int z = 0; z < 2; z++) {
        uint64_t sum0 = 0;
        for (int k = 0; k < 3; k++) {
            char mode[64];
            uint64_t a, b, sa, sb;
            snprintf(mode, sizeof mode, "own-%s-%lu", modes[k], sizes[z]);
            if (measure(self, mode, s1, &a, &sa) || measure(self, mode, s2, &b, &sb)) return 1;
            per[z][k] = (double)(b - a) / (double)(s2 - s1);
            if (k == 0) sum0 = sb;
            else if (sb != sum0) same = 0;
        }
    }
    printf("\nthe run layer's own cost per step, a loop of your own with the standard set registered and nothing due\n"
           "(nan_guard, early_stopping, model_checkpoint, lr_monitor, gradient_monitor, csv, jsonl, tensorboard, progress_bar;\n"
           "record, checkpoint, validation, monitors every %d steps): instructions per step = (I(%d) - I(%d)) / %d\n\n",
           OWN_DUE, s2, s1, s2 - s1);
    printf("  %-52s %12s %12s %8s %8s\n", "loop", "1 K params", "64 K params", "goal", "verdict");
    printf("  %-52s %12.1f %12.1f\n", "hand-written (the model's passes alone)", per[0][0], per[1][0]);
    for (int k = 1; k < 3; k++) {
        double c0 = per[0][k] - per[0][0], c1 = per[1][k] - per[1][0];
        int met = c0 <= OWN_GOAL && c1 <= OWN_GOAL;
        ok &= met;
        printf("  %-52s %+12.1f %+12.1f %8.0f %8s\n", k == 1 ? "tr_run_begin/next/update/end, minus hand-written"
               : "tr_run_start/lr/batch_end/finish, minus hand-written", c0, c1, OWN_GOAL, met ? "met" : "NOT met");
    }
    printf("  final parameters identical in all loops: %s; the run layer's goal (at most %.0f a step, both loops): %s\n",
           same ? "yes" : "NO", OWN_GOAL, ok ? "met" : "NOT met");
    return !same;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "own")) return own_table(argv[0]);  /* that table alone */
    if (argc == 4 && !strcmp(argv[1], "run")) {         /* one run, under callgrind */
        uint64_t sum = 0;
        int rc = !strncmp(argv[2], "own-", 4) ? bench_own(argv[2], atoi(argv[3]), &sum) : bench_run(argv[2], atoi(argv[3]), &sum);
        printf("checksum %016" PRIx64 "\n", sum);
        return rc;
    }
    const char *self = argv[0], *off = argc > 1 ? argv[1] : NULL;
    row rows[] = {
        { "hand-written loop, no hooks", self, "hand", 0, 0 },
        { "train.h, HK_DISABLE (sites compiled out)", off, "empty", 0, 0 },
        { "train.h, nothing registered (empty sites)", self, "empty", 0, 0 },
        { "train.h, 5 typical callbacks", self, "five", 0, 0 },
        { "train.h, early stopping + checkpoint/epoch", self, "std", 0, 0 },
        { "  + lr_monitor + gradient_monitor/50 steps", self, "std4", 0, 0 },
        { "train.h, all loggers + progress bar/50 steps", self, "logs", 0, 0 },
        { "train.h, spike_detection (snapshot/100 steps)", self, "spike", 0, 0 },
    };
    const int n_rows = (int)(sizeof rows / sizeof rows[0]);
    const int64_t steps_per_epoch = (PER_CLASS * CLASSES + BATCH - 1) / BATCH;
    const int64_t steps = (EPOCHS_LONG - EPOCHS_SHORT) * steps_per_epoch;
    int same = 1;

    for (int i = 0; i < n_rows; i++) {
        uint64_t a, b, sa, sb;
        if (!rows[i].exe) continue;
        if (measure(rows[i].exe, rows[i].mode, EPOCHS_SHORT, &a, &sa) ||
            measure(rows[i].exe, rows[i].mode, EPOCHS_LONG, &b, &sb))
            return 1;
        rows[i].per_step = (double)(b - a) / (double)steps;
        rows[i].sum = sb;
        if (sb != rows[0].sum) same = 0;
    }

    printf("train.h per-step cost: MLP 2-%d-%d on %d-class spirals, batch %d, AdamW, %lld steps/epoch\n",
           HIDDEN, CLASSES, CLASSES, BATCH, (long long)steps_per_epoch);
    printf("instructions per optimizer step (callgrind, exact) = (I(%d epochs) - I(%d epochs)) / %lld steps\n\n",
           EPOCHS_LONG, EPOCHS_SHORT, (long long)steps);
    printf("  %-44s %14s %10s %10s\n", "loop", "instr/step", "vs hand", "extra");
    for (int i = 0; i < n_rows; i++) {
        if (!rows[i].exe) { printf("  %-44s %14s\n", rows[i].label, "(not built)"); continue; }
        double ratio = rows[i].per_step / rows[0].per_step;
        printf("  %-44s %14.1f %10.4f %+9.2f%%\n", rows[i].label, rows[i].per_step, ratio, 100.0 * (ratio - 1.0));
    }
    double empty = rows[2].per_step / rows[0].per_step - 1.0;
    printf("\nfinal parameters identical in all rows: %s\n", same ? "yes (same math, batch for batch)" : "NO");
    printf("empty sites vs hand-written: %+.2f%% (goal: under +1%%): %s\n", 100.0 * empty, empty < 0.01 ? "met" : "NOT met");
    double std = rows[4].per_step / rows[2].per_step - 1.0;
    printf("early stopping + a checkpoint every epoch vs empty sites: %+.2f%% per step (goal: under +1%%): %s\n",
           100.0 * std, std < 0.01 ? "met" : "NOT met");
    double std4 = rows[5].per_step / rows[2].per_step - 1.0;
    printf("... plus lr_monitor and gradient_monitor every 50 steps vs empty sites: %+.2f%% per step (goal: under +1%%): %s\n",
           100.0 * std4, std4 < 0.01 ? "met" : "NOT met");
    double logs = rows[6].per_step / rows[2].per_step - 1.0;
    printf("csv + jsonl + tensorboard + plot + progress bar, a record every 50 steps, vs empty sites: %+.2f%% per step (goal: under +1%%): %s\n",
           100.0 * logs, logs < 0.01 ? "met" : "NOT met");
    double spike = rows[7].per_step / rows[2].per_step - 1.0;
    printf("spike_detection (window 10, gradient norm, a snapshot every 100 steps) vs empty sites: %+.2f%% per step\n",
           100.0 * spike);
    if (own_table(self)) same = 0;
    return same ? 0 : 1;
}
