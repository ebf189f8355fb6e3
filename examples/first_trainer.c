/* first_trainer.c - your first trainer: a model of your own, trained by train.h with validation, early
   stopping, the best checkpoints, csv + TensorBoard logs and the progress bar; run it again and it
   resumes from its last checkpoint. Then its predictions on the validation inputs go to a csv file
   (tr_predict and the prediction_writer callback).

   The model: y = w2 . relu(w1 x + b1) + b2, one input, 16 hidden units, one output, fitted to sin(3x)
   on [-1, 1]. Forward and backward are written out below: that is all train.h needs from a model.

   Run:  build/first_trainer DIR 20    trains 20 epochs, leaves DIR/checkpoints/last.ckpt and DIR/runs
         build/first_trainer DIR 40    finds last.ckpt, resumes at epoch 20 and trains on to 40: the same
                                       weights, bit for bit, as one run of 40 epochs (make train-examples
                                       checks that)  */
#define HOOKS_IMPLEMENTATION            /* in exactly one .c file of the program */
#define TRAIN_IMPLEMENTATION
#include "train.h"                      /* includes hooks.h */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

enum { H = 16, B = 32, N = 3 * H + 1 };           /* hidden units, batch size, parameter count */
typedef struct net {
    float p[N], g[N];                             /* parameters and gradients: w1[H] b1[H] w2[H] b2 */
    float a[B][H], out[B];                        /* activations of the last forward, for backward */
} net;
static const tr_tensor views[] = { { "w1", 0, H }, { "b1", H, H }, { "w2", 2 * H, H }, { "b2", 3 * H, 1 } };

static float target(float x) { return sinf(3 * x); }

static int forward(void *user, void *batch, int training, double *loss) {
    net *m = (net *)user;
    const float *x = (const float *)batch;
    double l = 0;
    (void)training;                               /* no dropout here */
    for (int i = 0; i < B; i++) {
        float y = m->p[3 * H];
        for (int j = 0; j < H; j++) {
            float z = m->p[j] * x[i] + m->p[H + j];
            m->a[i][j] = z > 0 ? z : 0;
            y += m->p[2 * H + j] * m->a[i][j];
        }
        m->out[i] = y;
        l += (double)(y - target(x[i])) * (y - target(x[i])) / B;
    }
    *loss = l;                                    /* the batch's mean squared error */
    return 0;
}

static int backward(void *user, void *batch) {   /* ADD d(loss)/d(params) into the gradients */
    net *m = (net *)user;
    const float *x = (const float *)batch;
    for (int i = 0; i < B; i++) {
        float d = 2 * (m->out[i] - target(x[i])) / B;
        m->g[3 * H] += d;
        for (int j = 0; j < H; j++) {
            m->g[2 * H + j] += d * m->a[i][j];
            float dz = m->a[i][j] > 0 ? d * m->p[2 * H + j] : 0;
            m->g[j] += dz * x[i];
            m->g[H + j] += dz;
        }
    }
    return 0;
}

/* Predictions for tr_predict: a batch's rows of (x, the model's y, sin(3x)), as prediction_writer writes them. */
static int predict(void *user, void *batch, void **outputs) {
    static float rows[B][3];
    static const char *const names[3] = { "x", "y", "sin3x" };
    static tr_predictions pred;
    net *m = (net *)user;
    const float *x = (const float *)batch;
    double loss;
    forward(user, batch, 0, &loss);
    for (int i = 0; i < B; i++) { rows[i][0] = x[i]; rows[i][1] = m->out[i]; rows[i][2] = target(x[i]); }
    pred = (tr_predictions){ .values = &rows[0][0], .rows = B, .cols = 3, .names = names };
    *outputs = &pred;
    return 0;
}

/* The data: 8 training batches and 2 validation batches of x in [-1, 1], on different grids. */
static float train_x[8][B], val_x[2][B];
static int64_t n_train(void *u) { (void)u; return 8; }
static int64_t n_val(void *u) { (void)u; return 2; }
static int get_train(void *u, int64_t i, void **batch) { (void)u; *batch = train_x[i]; return 0; }
static int get_val(void *u, int64_t i, void **batch) { (void)u; *batch = val_x[i]; return 0; }

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "first_run";
    int64_t epochs = argc > 2 ? atoll(argv[2]) : 40;
    for (int i = 0; i < 8 * B; i++) train_x[i / B][i % B] = -1 + 2 * (float)i / (8 * B - 1);
    for (int i = 0; i < 2 * B; i++) val_x[i / B][i % B] = -1 + 2 * ((float)i + 0.5f) / (2 * B);
    static net m;
    for (int j = 0; j < N; j++) m.p[j] = (float)((j * 7919 % 101) / 101.0 - 0.5);  /* a fixed start */

    tr_trainer t;
    tr_err e = tr_init(&t, &(tr_desc){
        .model = { .params = m.p, .grads = m.g, .n_params = N, .tensors = views, .n_tensors = 4,
                   .forward = forward, .backward = backward, .predict = predict, .user = &m },
        .optim = { .kind = TR_OPTIM_ADAMW, .lr = 3e-2 } });
    if (e) { fprintf(stderr, "first_trainer: %s\n", tr_error(&t)); return 1; }

    /* The standard callbacks and loggers, from one spec string (a command line could pass it). */
    char spec[1024];
    snprintf(spec, sizeof spec,
             "early_stopping(monitor=val/loss, patience=5); "
             "model_checkpoint(dirpath=\"%s/checkpoints\", monitor=val/loss, save_top_k=2, save_last=true); "
             "csv(save_dir=\"%s/runs\"); tensorboard(save_dir=\"%s/runs\"); progress_bar", dir, dir, dir);
    if (hk_spec_apply(t.reg, spec)) { fprintf(stderr, "first_trainer: %s\n", hk_last_error(t.reg)); return 1; }

    /* Resume when an earlier run left its last checkpoint. */
    char last[1024];
    struct stat st;
    snprintf(last, sizeof last, "%s/checkpoints/last.ckpt", dir);
    int resume = stat(last, &st) == 0;
    tr_data train = { .count = n_train, .get = get_train }, val = { .count = n_val, .get = get_val };
    e = tr_fit(&t, &(tr_config){ .train = &train, .val = &val, .max_epochs = epochs,
                                 .log_every_n_steps = 8, .resume_from = resume ? last : NULL });
    if (e) { fprintf(stderr, "first_trainer: training failed: %s\n", tr_error(&t)); return 1; }

    /* Predictions on the validation inputs, into the run directory (runs/lightning_logs/version_0/predictions/).
       prediction_writer never writes over a file it did not write: each invocation names its own file. */
    char pw[128];
    snprintf(pw, sizeof pw, "prediction_writer(filename=sin3x-%lld, format=csv, write_interval=epoch)", (long long)epochs);
    hk_handle ph;
    if (hk_spec_apply(t.reg, pw) || (ph = hk_spec_find(t.reg, "prediction_writer", 0), tr_predict(&t, &val, 0))) {
        fprintf(stderr, "first_trainer: predicting failed: %s\n", t.error[0] ? tr_error(&t) : hk_last_error(t.reg));
        return 1;
    }
    const tr_prediction_writer_state *pws = tr_prediction_writer_get(t.reg, ph);

    const tr_model_checkpoint_state *ck = tr_model_checkpoint_get(t.reg, hk_spec_find(t.reg, "model_checkpoint", 0));
    const tr_early_stopping_state *es = tr_early_stopping_get(t.reg, hk_spec_find(t.reg, "early_stopping", 0));
    uint32_t h = 2166136261u;                     /* FNV-1a of the weights: equal for equal runs */
    for (size_t i = 0; i < sizeof m.p; i++) h = (h ^ ((unsigned char *)m.p)[i]) * 16777619u;
    printf("%s: %lld epochs, %lld steps in all. %s\n", resume ? "resumed from last.ckpt" : "a fresh run",
           (long long)t.epoch, (long long)t.global_step, es->stopping_reason_message);
    printf("best checkpoint: %s (val/loss %.5f)\n", ck->best_model_path, ck->best_model_score);
    printf("logs: %s (tensorboard --logdir %s/runs)\n", tr_logger_get(t.reg, hk_spec_find(t.reg, "csv", 0))->dir, dir);
    printf("weights: %08x\n", (unsigned)h);
    printf("predictions: %s (%lld rows of x, y, sin3x)\n", pws->last_path, (long long)pws->rows);
    int ok = ck->best_model_score < 0.1;          /* it learns: val/loss starts near 0.5 */
    if (!ok) fprintf(stderr, "first_trainer: best val/loss %.4f is not below 0.1: train longer\n", ck->best_model_score);
    tr_free(&t);
    return ok ? 0 : 1;
}
