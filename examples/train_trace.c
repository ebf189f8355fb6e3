/* train_trace.c - every hook of one small tr_fit, in the order train.h fires them, as a tree.

   hk_trace(reg, HK_TRACE_TREE, stdout) prints each dispatched event (indented by nesting: a *_start
   opens a level, its *_end closes it) and, under it, each hook that ran, with its tier. While tracing,
   every site dispatches, so events with no hooks show up too: the tree is the whole map of where your
   code can plug in. The fit is kept tiny so the tree fits on a screen:
     a sanity check of 1 validation batch, 1 epoch of 2 training batches, validation of 1 batch,
     gradient clipping on.
   Two registrations show the order within an event: a callback ("printer", tier callback) and the
   model's own hook ("model", tier model): callbacks run first, as in Lightning.

   Run:  make examples && build/train_trace
         (any program: HOOKS_TRACE=tree build/demo 2>&1 | less     prints the same, to stderr) */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "mlp.h"

#include <stdio.h>

static hk_signal nothing(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_CONTINUE; }

int main(void) {
    spirals train, val;
    mlp net;
    if (spirals_make(&train, 16, 2, 0.2f, 1) || spirals_make(&val, 16, 2, 0.2f, 2) || mlp_init(&net, 2, 8, 2, 16, 1)) {
        fprintf(stderr, "train_trace: out of memory\n");
        return 1;
    }
    tr_data train_data = spirals_tr_data(&train, 16, 1), val_data = spirals_tr_data(&val, 16, 0);
    tr_tensor views[MLP_NUM_TENSORS];
    tr_trainer t;
    if (tr_init(&t, &(tr_desc){ .model = mlp_tr_model(&net, views) })) {
        fprintf(stderr, "train_trace: %s\n", tr_error(&t));
        return 1;
    }
    /* a callback with a few events, and a model-tier hook on two of the same events */
    hk_callback printer = { 0 };
    printer.name = "printer";
    printer.on_train_batch_end = nothing;
    printer.on_validation_epoch_end = nothing;
    printer.on_train_epoch_end = nothing;
    int bad = hk_add_callback(t.reg, &printer, NULL, NULL);
    bad |= hk_on(t.reg, HK_ON_TRAIN_BATCH_END, nothing, NULL, &(hk_opts){ .name = "model", .tier = HK_TIER_MODEL }, NULL);
    bad |= hk_on(t.reg, HK_ON_TRAIN_EPOCH_END, nothing, NULL, &(hk_opts){ .name = "model_epoch", .tier = HK_TIER_MODEL }, NULL);
    if (bad) { fprintf(stderr, "train_trace: %s\n", hk_last_error(t.reg)); return 1; }

    hk_trace(t.reg, HK_TRACE_TREE, stdout);
    tr_err err = tr_fit(&t, &(tr_config){ .train = &train_data, .val = &val_data, .max_epochs = 1,
                                          .num_sanity_val_steps = 1, .limit_val_batches = 1,
                                          .gradient_clip_val = 1.0 });
    hk_trace(t.reg, HK_TRACE_OFF, NULL);
    if (err) fprintf(stderr, "train_trace: %s\n", tr_error(&t));
    tr_free(&t);
    mlp_free(&net);
    spirals_free(&train);
    spirals_free(&val);
    return err != TR_OK;
}
