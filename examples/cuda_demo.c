/* cuda_demo.c - the demo's spirals MLP trained on the GPU through train.h (TRAIN_CUDA).

   This file is plain C. The model's forward and backward are CUDA kernels in cuda_mlp.cu, which is
   also where train.h's implementation is compiled, with TRAIN_CUDA, by nvcc. Parameters, gradients
   and AdamW's moments stay on the device; train.h runs kernels/train_cuda.cuh for zero_grad, clipping
   and the update. The hooks are the CPU demo's, and they are what makes the host wait:
     progress      every 200 steps: reads train/loss and grad_norm (lazy metrics: one copy each, then)
     val_accuracy  at the end of every validation: copies the parameters into a CPU mlp and measures
     epoch_report  every 10 epochs
   plus early_stopping and model_checkpoint (checkpoints in the CPU format: build/demo can load them).
   With nothing asking, a step makes the host wait for nothing (the count is printed at the end).

   Run:  make cuda-demo        (needs nvcc and a CUDA device; says "skipped" without one) */
#include "examples/cuda_mlp.h"
#include <stdio.h>

typedef struct demo_state { cuda_mlp *gpu; mlp *cpu; spirals *val; } demo_state;

static hk_signal progress(hk_ctx *ctx, void *user) {
    double loss = 0;
    (void)user;
    hk_metric_get(ctx, "train/loss", &loss);                 /* copied from the device now */
    printf("step %5lld  epoch %3lld  lr %.5f  loss %.4f  grad_norm %.4f\n", (long long)ctx->global_step,
           (long long)ctx->epoch, ctx->lr, loss, hk_grad_norm(ctx));
    return HK_CONTINUE;
}

static hk_signal val_accuracy(hk_ctx *ctx, void *user) {
    demo_state *s = (demo_state *)user;
    if (cuda_mlp_to_host(s->gpu, s->cpu)) return hk_fail(ctx, "could not copy the parameters from the GPU");
    hk_metric_set(ctx, "val/acc", mlp_accuracy(s->cpu, s->val, 100));
    return HK_CONTINUE;
}

static hk_signal epoch_report(hk_ctx *ctx, void *user) {
    double val_loss = 0, val_acc = 0;
    (void)user;
    hk_metric_get(ctx, "val/loss", &val_loss);
    hk_metric_get(ctx, "val/acc", &val_acc);
    printf("---- epoch %3lld done: val/loss %.4f  val/acc %.1f%%\n", (long long)ctx->epoch + 1, val_loss, 100.0 * val_acc);
    return HK_CONTINUE;
}

int main(int argc, char **argv) {
    const char *ckpt_dir = argc > 1 ? argv[1] : "checkpoints";
    char why[256];
    if (!trc_device_ok(why, sizeof why)) { printf("skipped: no CUDA device (%s)\n", why); return 0; }

    /* ---- data and model: the CPU demo's, then mirrored on the device ---- */
    spirals train, val;
    mlp net;
    if (spirals_make(&train, 300, 3, 0.2f, 1) || spirals_make(&val, 100, 3, 0.2f, 2) || mlp_init(&net, 2, 64, 3, 100, 42)) {
        fprintf(stderr, "cuda_demo: out of memory\n");
        return 1;
    }
    cuda_mlp gnet;
    cuda_spirals gtrain, gval;
    int e = cuda_mlp_init(&gnet, &net);
    if (!e) e = cuda_spirals_init(&gtrain, &train, 32, 1);
    if (!e) e = cuda_spirals_init(&gval, &val, 100, 0);
    if (e) { fprintf(stderr, "cuda_demo: %s\n", trc_error_string(e)); return 1; }
    tr_data train_data = cuda_spirals_tr_data(&gtrain), val_data = cuda_spirals_tr_data(&gval);
    printf("model: 2 -> 64 -> 3 MLP on the GPU, %zu parameters\n", gnet.num_params);

    /* ---- trainer: as the CPU demo, with clipping; the loss is only copied when a hook reads it ---- */
    tr_trainer t;
    tr_err err = tr_init(&t, &(tr_desc){
        .model = cuda_mlp_tr_model(&gnet),
        .optim = { .kind = TR_OPTIM_ADAMW, .lr = 1e-2, .weight_decay = 1e-4 },
        .sched = { .kind = TR_SCHED_COSINE, .per_epoch = 1, .min_factor = 0.05 },
        .seed = 7 });
    if (err) { fprintf(stderr, "cuda_demo: %s\n", tr_error(&t)); return 1; }

    demo_state state = { &gnet, &net, &val };
    int bad = 0;
    bad |= hk_on(t.reg, HK_ON_TRAIN_BATCH_END, progress, NULL,
                 &(hk_opts){ .name = "progress", .filter = { .counter = HK_COUNT_STEP, .every = 200 } }, NULL);
    bad |= hk_on(t.reg, HK_ON_VALIDATION_EPOCH_END, val_accuracy, &state, &(hk_opts){ .name = "val_accuracy" }, NULL);
    bad |= hk_on(t.reg, HK_ON_TRAIN_EPOCH_END, epoch_report, NULL,
                 &(hk_opts){ .name = "epoch_report", .filter = { .counter = HK_COUNT_CALLS, .every = 10 } }, NULL);
    bad |= hk_spec_apply(t.reg, "early_stopping(monitor=val/loss, min_delta=0.001, patience=5)");
    if (bad) { fprintf(stderr, "cuda_demo: %s\n", hk_last_error(t.reg)); return 1; }
    hk_handle ckpt;
    err = tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = ckpt_dir, .monitor = "val/loss",
        .save_top_k = 2, .save_last = TR_SAVE_LAST_LINK, .filename = "{epoch}-{val/loss:.4f}" }, &ckpt);
    if (err) { fprintf(stderr, "cuda_demo: %s\n", tr_error(&t)); return 1; }

    /* ---- train ---- */
    unsigned long long syncs_before = tr_cuda_sync_count();
    err = tr_fit(&t, &(tr_config){ .train = &train_data, .val = &val_data, .max_epochs = 60,
                                   .gradient_clip_val = 1.0, .on_nonfinite_loss = TR_NONFINITE_IGNORE });
    if (err) { fprintf(stderr, "cuda_demo: training failed: %s\n", tr_error(&t)); return 1; }
    printf("trained %lld steps (%lld epochs); the host waited for the GPU %llu times (hooks, validation, "
           "checkpoints), not once per step\n", (long long)t.global_step, (long long)t.epoch,
           tr_cuda_sync_count() - syncs_before);

    /* ---- the best checkpoint, loaded back onto the GPU; accuracy measured on the CPU copy ---- */
    const tr_model_checkpoint_state *ck = tr_model_checkpoint_get(t.reg, ckpt);
    double val_loss = 0;
    err = tr_load(&t, ck->best_model_path);
    if (!err) err = tr_validate(&t, &val_data, 0, &val_loss);
    if (err) { fprintf(stderr, "cuda_demo: %s\n", tr_error(&t)); return 1; }
    if (cuda_mlp_to_host(&gnet, &net)) { fprintf(stderr, "cuda_demo: copy failed\n"); return 1; }
    double val_acc = mlp_accuracy(&net, &val, 100);
    printf("best checkpoint: %s\nfinal validation loss %.4f, accuracy %.1f%%\n", ck->best_model_path, val_loss, 100.0 * val_acc);

    tr_free(&t);
    cuda_mlp_free(&gnet); cuda_spirals_free(&gtrain); cuda_spirals_free(&gval);
    mlp_free(&net); spirals_free(&train); spirals_free(&val);
    return val_acc > 0.95 ? 0 : 1;
}
