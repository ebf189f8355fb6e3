/* demo.c - train a small neural network with train.h, and watch it with hooks.

   The task: three interleaved spiral arms in the plane, one class per arm (examples/mlp.h makes them).
   The model: a two-layer MLP, 2 -> 64 -> 3, with hand-written forward and backward (also mlp.h).
   The trainer: train.h's tr_fit, with AdamW and a cosine learning-rate schedule.

   The hooks (each is a plain C function the trainer calls at one point of the loop):
     1. loss_ema      after every training batch: keeps a smoothed loss and publishes it as the metric
                      "train/loss_ema", the way hooks pass values to each other
     2. log_lr        at on_log, right before the loggers write a record: adds the learning rate to
                      the records of every 100th step (a FILTER: the dispatcher skips the other calls)
     3. val_accuracy  at the end of every validation: measures accuracy and sets the metric "val/acc"
   and train.h's standard callbacks:
     early_stopping    stops when val/loss has not improved by 0.001 for 5 epochs (from a spec string)
     model_checkpoint  keeps the 2 best checkpoints by val/loss, and last.ckpt: the latest state (a link
                      to the epoch's file when it kept one)
     progress_bar      tqdm's bar (plain lines when stdout is not a terminal)
     csv, jsonl, tensorboard, plot   the same records as metrics.csv, metrics.jsonl, TensorBoard event
                      files and metrics.svg, in runs/lightning_logs/version_N/

   Run:  make demo            (builds, then runs build/demo build/checkpoints build/runs; installs what is missing)
         HOOKS_TRACE=lines build/demo 2>&1 | head    (every hook call as it happens; the trace goes to stderr) */
#define HOOKS_IMPLEMENTATION        /* exactly one .c file of a program compiles the implementations */
#define TRAIN_IMPLEMENTATION
#include "train.h"                  /* includes hooks.h */
#include "mlp.h"                    /* after train.h, so it also defines the train.h glue */

#include <stdio.h>
#include <string.h>

/* What the hooks share with main(): the model and the validation set (passed as `user` pointers). */
typedef struct demo_state {
    mlp *net;
    spirals *val;
    double ema;                     /* smoothed training loss; < 0 until the first batch */
} demo_state;

/* ---- hook 1: a smoothed loss, published as a metric ----------------------------------------------
   Every hook has this signature: it gets the context (what the trainer knows right now: ctx->loss,
   ctx->global_step, ctx->epoch, ctx->lr, ...) and the `user` pointer given at registration, and
   returns a signal telling the trainer what to do next: HK_CONTINUE = carry on. */
static hk_signal loss_ema(hk_ctx *ctx, void *user) {
    demo_state *s = (demo_state *)user;
    s->ema = s->ema < 0 ? ctx->loss : 0.98 * s->ema + 0.02 * ctx->loss;
    hk_metric_set(ctx, "train/loss_ema", s->ema);   /* any later hook can read it by name */
    return HK_CONTINUE;
}

/* ---- hook 2: change what gets logged (the filter is set at registration, see main) --------------- */
static hk_signal log_lr(hk_ctx *ctx, void *user) {
    tr_log_record *r = tr_log_current(ctx);          /* the record the loggers write next */
    (void)user;
    if (!strcmp(r->stage, "train")) tr_log_set(r, "lr", ctx->lr);
    return HK_CONTINUE;
}

/* ---- hook 3: validation accuracy --------------------------------------------------------------------
   train.h computes the validation loss itself ("val/loss"); accuracy is model-specific, so we add it.
   on_validation_epoch_end runs once the validation batches are done: a safe point to run the model. */
static hk_signal val_accuracy(hk_ctx *ctx, void *user) {
    demo_state *s = (demo_state *)user;
    hk_metric_set(ctx, "val/acc", mlp_accuracy(s->net, s->val, 100));
    return HK_CONTINUE;
}

int main(int argc, char **argv) {
    const char *ckpt_dir = argc > 1 ? argv[1] : "checkpoints", *runs = argc > 2 ? argv[2] : "runs";
    /* ---- data: 3 spiral arms; 300 training and 100 validation points per arm, different seeds ---- */
    spirals train, val;
    if (spirals_make(&train, 300, 3, 0.2f, 1) || spirals_make(&val, 100, 3, 0.2f, 2)) {
        fprintf(stderr, "demo: out of memory\n");
        return 1;
    }
    tr_data train_data = spirals_tr_data(&train, 32, 1);   /* batches of 32, reshuffled every epoch */
    tr_data val_data = spirals_tr_data(&val, 100, 0);      /* batches of 100, fixed order */

    /* ---- model: 2 inputs, 64 hidden units, 3 classes; batches of up to 100 rows ---- */
    mlp net;
    if (mlp_init(&net, 2, 64, 3, 100, 42)) { fprintf(stderr, "demo: out of memory\n"); return 1; }
    printf("model: 2 -> 64 -> 3 MLP, %zu parameters; data: %d training, %d validation points\n",
           net.num_params, train.n, val.n);

    /* ---- trainer: AdamW, learning rate 0.01 decaying along a cosine over the epochs ---- */
    const int64_t epochs = 60;
    tr_tensor views[MLP_NUM_TENSORS];                     /* the named tensors train.h shows hooks */
    tr_trainer t;
    tr_err err = tr_init(&t, &(tr_desc){
        .model = mlp_tr_model(&net, views),
        .optim = { .kind = TR_OPTIM_ADAMW, .lr = 1e-2, .weight_decay = 1e-4 },
        .sched = { .kind = TR_SCHED_COSINE, .per_epoch = 1, .min_factor = 0.05 },
        .seed = 7 });
    if (err) { fprintf(stderr, "demo: %s\n", tr_error(&t)); return 1; }

    /* ---- hooks: registered on the trainer's registry, t.reg ----
       hk_opts: a name (shown in errors and traces), an order (lower runs first within an event), and a
       filter (when to run). Hooks of one event run in order, then registration order. */
    demo_state state = { &net, &val, -1.0 };
    int bad = 0;                                           /* hk_on returns an hk_err: 0 = fine */
    bad |= hk_on(t.reg, HK_ON_TRAIN_BATCH_END, loss_ema, &state,
                 &(hk_opts){ .name = "loss_ema", .order = -1 }, NULL);
    bad |= hk_on(t.reg, HK_ON_LOG, log_lr, NULL,
                 &(hk_opts){ .name = "log_lr", .filter = { .counter = HK_COUNT_STEP, .every = 100 } }, NULL);
    bad |= hk_on(t.reg, HK_ON_VALIDATION_EPOCH_END, val_accuracy, &state,
                 &(hk_opts){ .name = "val_accuracy" }, NULL);
    /* ---- standard callbacks: a spec string (tr_init registered the factories), or a C desc ---- */
    bad |= hk_spec_apply(t.reg, "early_stopping(monitor=val/loss, min_delta=0.001, patience=5)");
    char loggers[512];                                      /* they share runs/lightning_logs/version_N */
    snprintf(loggers, sizeof loggers, "progress_bar; csv(save_dir=\"%s\"); jsonl(save_dir=\"%s\"); tensorboard(save_dir=\"%s\"); "
             "plot(save_dir=\"%s\", metrics=\"train/loss_ema val/loss val/acc\", title=\"demo: spirals MLP\")", runs, runs, runs, runs);
    bad |= hk_spec_apply(t.reg, loggers);
    if (bad) { fprintf(stderr, "demo: %s\n", hk_last_error(t.reg)); return 1; }
    hk_handle ckpt, stopper = hk_find(t.reg, "early_stopping{monitor=val/loss,mode=min}"); /* its state key */
    err = tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = ckpt_dir, .monitor = "val/loss",
        .save_top_k = 2, .save_last = TR_SAVE_LAST_LINK, .filename = "{epoch}-{val/loss:.4f}" }, &ckpt);
    if (err) { fprintf(stderr, "demo: %s\n", tr_error(&t)); return 1; }

    /* ---- train ---- */
    err = tr_fit(&t, &(tr_config){ .train = &train_data, .val = &val_data, .max_epochs = epochs, .log_every_n_steps = 25 });
    if (err) { fprintf(stderr, "demo: training failed: %s\n", tr_error(&t)); return 1; }

    const char *why = tr_early_stopping_get(t.reg, stopper)->stopping_reason_message; /* "" if it did not stop */
    printf("trained %lld steps (%lld epochs). %s\n", (long long)t.global_step, (long long)t.epoch, why);
    /* ---- the best checkpoint: where it is; then the final numbers of the model loaded from it ---- */
    const tr_model_checkpoint_state *ck = tr_model_checkpoint_get(t.reg, ckpt);
    printf("best checkpoint: %s (val/loss %.4f); last: %s\n", ck->best_model_path, ck->best_model_score, ck->last_model_path);
    const tr_logger_state *lg = tr_logger_get(t.reg, hk_find(t.reg, "plot"));
    printf("logs in %s: metrics.csv, metrics.jsonl, hparams.yaml, events.out.tfevents.*; plot: %s\n"
           "look at them:  tensorboard --logdir %s\n"
           "  (no tensorboard command? python3 -m venv venv && venv/bin/pip install tensorboard, then\n"
           "   venv/bin/tensorboard --logdir %s; make test installs one as build/venv/bin/tensorboard)\n",
           lg->dir, lg->path, runs, runs);
    double val_loss = 0;
    err = tr_load(&t, ck->best_model_path);
    if (!err) err = tr_validate(&t, &val_data, 0, &val_loss);
    if (err) { fprintf(stderr, "demo: %s\n", tr_error(&t)); return 1; }
    double train_acc = mlp_accuracy(&net, &train, 100), val_acc = mlp_accuracy(&net, &val, 100);
    printf("final training accuracy:   %.1f%%\n", 100.0 * train_acc);
    printf("final validation loss:     %.4f\n", val_loss);
    printf("final validation accuracy: %.1f%%\n", 100.0 * val_acc);

    tr_free(&t);                  /* frees the registry it made, and with it the hooks */
    mlp_free(&net);
    spirals_free(&train);
    spirals_free(&val);
    return val_acc > 0.95 ? 0 : 1;  /* a failed demo should say so to make */
}
