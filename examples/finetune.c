/* finetune.c - fine-tuning with parameter groups: a pretrained body, a new head, the body frozen and then
   brought in at a reduced learning rate (Lightning's BackboneFinetuning), and no weight decay on the biases.

   1. pretrain the spirals MLP (2 -> 64 -> 3): w1, b1 are the body, w2, b2 the head
   2. a new task: the same points with the labels turned (class k is now k + 1), a fresh head
   3. fine-tune with one spec string:
        param_group(match=b*, weight_decay=0)            no decay on the biases (the usual recipe)
        finetuning(match=w1|b1, unfreeze_at_epoch=4, initial_ratio=0.1, lr_factor=2, verbose=true)
      the body is frozen for epochs 0-3 (only the head learns), then trains at 0.1, 0.2, 0.4, 0.8, then 1 x lr
   The checks: the body is bit for bit the pretrained one until epoch 4 starts, it moves after, and the new task
   is learned. A loop of your own reads the same per-tensor settings with tr_run_tensor_opt (docs/callbacks.md,
   "Parameter groups and fine-tuning").

   Run:  make examples && build/finetune ['spec string']   (exit status 0 when its checks hold) */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "mlp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 32
static const char *default_spec =
    "param_group(match=b*, weight_decay=0); finetuning(match=w1|b1, unfreeze_at_epoch=4, initial_ratio=0.1, lr_factor=2, verbose=true)";

typedef struct body { const mlp *net; float *w1, *b1; int moved_early, moved_late; } body;
/* at each epoch's end: is the body still the pretrained one? */
static hk_signal check_body(hk_ctx *ctx, void *user) {
    body *b = (body *)user;
    const mlp *m = b->net;
    int same = !memcmp(b->w1, m->w1, m->tensors[MLP_W1].count * sizeof(float)) &&
               !memcmp(b->b1, m->b1, m->tensors[MLP_B1].count * sizeof(float));
    if (ctx->epoch < 4) b->moved_early |= !same;
    else b->moved_late |= !same;
    if (ctx->epoch == 3 || ctx->epoch == 4)
        printf("epoch %lld ends: the body is %s\n", (long long)ctx->epoch, same ? "still the pretrained one" : "training");
    return HK_CONTINUE;
}

static int fit(mlp *net, spirals *train, const char *spec, int epochs, hk_signal (*hook)(hk_ctx *, void *), void *user) {
    tr_data data = spirals_tr_data(train, BATCH, 1);
    tr_tensor views[MLP_NUM_TENSORS];
    tr_trainer t;
    tr_err e = tr_init(&t, &(tr_desc){ .model = mlp_tr_model(net, views), .optim = { .lr = 1e-2, .weight_decay = 1e-2 }, .seed = 3 });
    if (!e && spec && hk_spec_apply(t.reg, spec) != HK_OK) { fprintf(stderr, "finetune: %s\n", hk_last_error(t.reg)); e = TR_ERR_INVALID; }
    if (!e && hook && hk_on(t.reg, HK_ON_TRAIN_EPOCH_END, hook, user, NULL, NULL) != HK_OK) e = TR_ERR_NOMEM;
    if (!e) e = tr_fit(&t, &(tr_config){ .train = &data, .max_epochs = epochs, .log_every_n_steps = -1 });
    if (e) fprintf(stderr, "finetune: %s\n", tr_error(&t));
    tr_free(&t);
    return e != TR_OK;
}

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : default_spec;
    spirals task;
    mlp net;
    if (spirals_make(&task, 200, 3, 0.2f, 1) || mlp_init(&net, 2, 64, 3, BATCH, 42)) return 1;
    if (fit(&net, &task, NULL, 15, NULL, NULL)) return 1;
    printf("pretrained: accuracy %.3f on the first task\n", mlp_accuracy(&net, &task, BATCH));

    for (int i = 0; i < task.n; i++) task.y[i] = (task.y[i] + 1) % task.classes;   /* the new task */
    mlp_rng rng = { 99 };
    for (size_t i = 0; i < net.tensors[MLP_W2].count; i++) net.w2[i] = 0.1f * (2.0f * mlp_rng_uniform(&rng) - 1.0f);
    for (size_t i = 0; i < net.tensors[MLP_B2].count; i++) net.b2[i] = 0;
    double before = mlp_accuracy(&net, &task, BATCH);
    body b = { &net, NULL, NULL, 0, 0 };
    b.w1 = (float *)malloc(net.tensors[MLP_W1].count * sizeof(float));
    b.b1 = (float *)malloc(net.tensors[MLP_B1].count * sizeof(float));
    if (!b.w1 || !b.b1) return 1;
    memcpy(b.w1, net.w1, net.tensors[MLP_W1].count * sizeof(float));
    memcpy(b.b1, net.b1, net.tensors[MLP_B1].count * sizeof(float));

    printf("fine-tuning with: %s\n", spec);
    if (fit(&net, &task, spec, 12, check_body, &b)) return 1;
    double after = mlp_accuracy(&net, &task, BATCH);
    printf("new task: accuracy %.3f with the fresh head, %.3f after fine-tuning\n", before, after);
    int ok = argc > 1 || (!b.moved_early && b.moved_late && after > 0.9);
    if (argc <= 1) printf("the body stayed frozen for 4 epochs and trained after: %s\n", !b.moved_early && b.moved_late ? "yes" : "NO");
    free(b.w1);
    free(b.b1);
    mlp_free(&net);
    spirals_free(&task);
    return !ok;
}
