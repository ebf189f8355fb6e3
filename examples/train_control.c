/* train_control.c - hooks that steer training: skip a bad optimizer step, stop when good enough.

   A hook's return value is a signal to the trainer. Two of them here, and a hook that sets the
   learning rate (the third):

     HK_SKIP_STEP  from on_before_optimizer_step: "do not apply this update" (the gradients are thrown
                   away). grad_guard returns it when the gradient norm is far above normal - here
                   because every 10th batch is corrupted on purpose (its inputs scaled by 40), the kind of
                   outlier batch that can throw a real training run off course.
     HK_STOP       from on_train_epoch_end: "finish gracefully" (train.h still runs on_train_end,
                   on_fit_end and teardown). target_stop returns it once validation accuracy reaches the
                   target, long before max_epochs.
     tr_lr_scale   halves the learning rate when the epoch's training loss has not improved for two
                   epochs: a multiplier on the schedule, kept by train.h and saved in checkpoints.

   The gradient norm is a LAZY METRIC: train.h registers a function under the name "grad_norm"
   (hk_metric_lazy) that runs only when some hook asks for the value, at most once per event. Unused,
   it costs nothing; asked for by three hooks of one event, it is computed once.

   Run:  make examples && build/train_control [max_norm [target_accuracy]]     (defaults 5 and 0.97)
         build/train_control 1000      the guard never fires: the corrupted batches get through, and
                                       the model stays far from the target for all 100 epochs */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "mlp.h"

#include <stdio.h>
#include <stdlib.h>

#define BATCH 32

/* ---- data with a corrupted batch every `every` batches ------------------------------------------------
   A tr_data is three functions over a user pointer; this one wraps the spirals glue of mlp.h. */
typedef struct poisoned { spirals *ds; int64_t every; } poisoned;

static int64_t poisoned_count(void *user) { return spirals_tr_count(((poisoned *)user)->ds); }
static void poisoned_shuffle(void *user, tr_rng *rng) { spirals_tr_shuffle(((poisoned *)user)->ds, rng); }
static int poisoned_get(void *user, int64_t index, void **batch) {
    poisoned *p = (poisoned *)user;
    if (spirals_tr_get(p->ds, index, batch)) return 1;
    if (index % p->every == p->every - 1) {            /* the batch is a copy: changing it is safe */
        mlp_batch *b = (mlp_batch *)*batch;
        for (int i = 0; i < 2 * b->n; i++) b->x[i] *= 40.0f;
    }
    return 0;
}

/* ---- hook 1: skip the optimizer step when the gradient norm is too large ----------------------------- */
typedef struct guard { double max_norm; int64_t skipped, seen; } guard;

static hk_signal grad_guard(hk_ctx *ctx, void *user) {
    guard *g = (guard *)user;
    double norm = 0;
    hk_metric_get(ctx, "grad_norm", &norm);           /* computed now, on this first request (train.h's) */
    g->seen++;
    if (norm <= g->max_norm) return HK_CONTINUE;
    if (g->skipped++ < 5)
        printf("  epoch %lld batch %2lld: gradient norm %8.2f > %.2f, step skipped\n",
               (long long)ctx->epoch, (long long)ctx->batch_idx, norm, g->max_norm);
    return HK_SKIP_STEP;
}

/* ---- hook 2: stop when validation accuracy reaches the target ---------------------------------------- */
typedef struct target { mlp *net; spirals *val; double goal, acc; int64_t stopped_epoch; } target;

static hk_signal target_stop(hk_ctx *ctx, void *user) {
    target *t = (target *)user;
    t->acc = mlp_accuracy(t->net, t->val, BATCH);
    if (t->acc < t->goal) {
        if (ctx->epoch % 5 == 0) printf("  epoch %2lld: val/acc %.3f\n", (long long)ctx->epoch, t->acc);
        return HK_CONTINUE;
    }
    printf("  epoch %2lld: val/acc %.3f, target %.3f reached: stopping\n", (long long)ctx->epoch, t->acc, t->goal);
    t->stopped_epoch = ctx->epoch;
    return HK_STOP;
}

/* ---- hook 3: halve the learning rate when the loss stays high ---------------------------------------- */
typedef struct lr_patience { double best; int bad, halved; } lr_patience;

static hk_signal halve_on_plateau(hk_ctx *ctx, void *user) {
    lr_patience *p = (lr_patience *)user;
    double loss = ctx->loss;                           /* the epoch's last training batch */
    if (loss < p->best * 0.99) { p->best = loss; p->bad = 0; return HK_CONTINUE; }
    if (++p->bad < 2) return HK_CONTINUE;
    if (tr_lr_scale(ctx, 0.5)) return hk_fail(ctx, "%s", hk_last_error(ctx->reg));
    p->bad = 0;
    if (p->halved++ < 3) printf("  epoch %2lld: loss %.3f stays high: lr halved to %.4g\n", (long long)ctx->epoch, loss, ctx->lr);
    return HK_CONTINUE;
}

int main(int argc, char **argv) {
    guard g = { argc > 1 ? atof(argv[1]) : 5.0, 0, 0 };
    spirals train, val;
    mlp net;
    if (spirals_make(&train, 200, 3, 0.2f, 1) || spirals_make(&val, 100, 3, 0.2f, 2) ||
        mlp_init(&net, 2, 64, 3, BATCH, 42)) {
        fprintf(stderr, "train_control: out of memory\n");
        return 1;
    }
    target tg = { &net, &val, argc > 2 ? atof(argv[2]) : 0.97, 0, -1 };
    spirals_tr_data(&train, BATCH, 1);                 /* sets train.batch_size for the glue */
    poisoned p = { &train, 10 };
    tr_data train_data = { .user = &p, .count = poisoned_count, .get = poisoned_get,
                           .shuffle = poisoned_shuffle, .batch_size = BATCH };

    tr_tensor views[MLP_NUM_TENSORS];
    tr_trainer t;
    if (tr_init(&t, &(tr_desc){ .model = mlp_tr_model(&net, views), .optim = { .lr = 2e-2 }, .seed = 1 })) {
        fprintf(stderr, "train_control: %s\n", tr_error(&t));
        return 1;
    }
    int bad = 0;
    bad |= hk_on(t.reg, HK_ON_BEFORE_OPTIMIZER_STEP, grad_guard, &g, &(hk_opts){ .name = "grad_guard" }, NULL);
    bad |= hk_on(t.reg, HK_ON_TRAIN_EPOCH_END, target_stop, &tg, &(hk_opts){ .name = "target_stop" }, NULL);
    lr_patience lp = { 1e30, 0, 0 };
    bad |= hk_on(t.reg, HK_ON_TRAIN_EPOCH_END, halve_on_plateau, &lp, &(hk_opts){ .name = "halve_on_plateau" }, NULL);
    if (bad) { fprintf(stderr, "train_control: %s\n", hk_last_error(t.reg)); return 1; }

    const int64_t max_epochs = 100;
    tr_err err = tr_fit(&t, &(tr_config){ .train = &train_data, .max_epochs = max_epochs });
    if (err) { fprintf(stderr, "train_control: %s\n", tr_error(&t)); return 1; }

    printf("skipped %lld of %lld optimizer steps (global_step is %lld)\n", (long long)g.skipped,
           (long long)g.seen, (long long)t.global_step);
    printf("lr halved %d times (now %.4g)\n", lp.halved, t.lr);
    printf("stopped after epoch %lld of at most %lld, val/acc %.3f\n", (long long)tg.stopped_epoch,
           (long long)max_epochs, tg.acc);
    int ok = g.skipped > 0 && tg.stopped_epoch >= 0 && tg.stopped_epoch + 1 < max_epochs;
    tr_free(&t);
    mlp_free(&net);
    spirals_free(&train);
    spirals_free(&val);
    return !ok;
}
