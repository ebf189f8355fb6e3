/* train_callbacks.c - train.h's standard callbacks, one of each family, on the spirals MLP.

     model_summary           the tensor table at fit start
     lr_finder               sweeps the learning rate before training and trains with its suggestion
     lr_monitor              publishes lr-AdamW (+ momentum) as metrics
     gradient_monitor        gradient norms, percentiles of |g|, a histogram every 30 steps
     nan_guard               skips a step whose gradients are not finite (names the tensor)
     ema                     an average of the weights, swapped in for every validation
     accumulation_scheduler  1 micro-batch per step for 10 epochs, then 2

   Most of them come from one spec string (argv[1] replaces it: the same names and parameters). The
   gradient monitor is made in C, to show where a logger plugs in its histogram (on_histogram); a
   metrics report hook reads what the monitors published.

   Run:  make examples && build/train_callbacks ['spec string']   (exit status 0 when its checks hold) */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "mlp.h"

#include <stdio.h>
#include <stdlib.h>

#define BATCH 32
#define EPOCHS 20

static const char *default_spec =
    "model_summary; lr_finder(num_training_steps=80, min_lr=1e-5, max_lr=1); lr_monitor(log_momentum=true); "
    "nan_guard(action=skip_step); ema(decay=0.98); accumulation_scheduler(scheduling=\"{0: 1, 10: 2}\")";

/* What a logger's histogram writer receives (TensorBoard's histogram has the same fields). */
static void print_histogram(const tr_histogram *h, hk_ctx *ctx, void *user) {
    int64_t peak = 1;
    (void)ctx;
    if (h->step != *(int64_t *)user) return;          /* only the one at the chosen step */
    for (int b = 0; b < h->n_bins; b++) if (h->counts[b] > peak) peak = h->counts[b];
    printf("gradient histogram at step %lld (%lld values, sum %.3g):\n", (long long)h->step, (long long)h->num, h->sum);
    for (int b = 0; b < h->n_bins; b++)
        printf("  [%+9.2e, %+9.2e) %6lld %.*s\n", h->edges[b], h->edges[b + 1], (long long)h->counts[b],
               (int)(40 * h->counts[b] / peak), "########################################");
}

/* Every 5 epochs: what the monitors published, read like any other metric. */
static hk_signal report(hk_ctx *ctx, void *user) {
    double lr = 0, mom = 0, norm = 0, p90 = 0, val = 0;
    (void)user;
    hk_metric_get(ctx, "lr-AdamW", &lr);
    hk_metric_get(ctx, "lr-AdamW-momentum", &mom);
    hk_metric_get(ctx, "grad_2.0_norm_total", &norm);
    hk_metric_get(ctx, "grad_abs_p90", &p90);
    hk_metric_get(ctx, "val/loss", &val);
    printf("epoch %2lld step %4lld  lr-AdamW %.4g (momentum %.2g)  grad norm %.4f  |g| p90 %.2e  val/loss (EMA weights) %.4f\n",
           (long long)ctx->epoch, (long long)ctx->global_step, lr, mom, norm, p90, val);
    return HK_CONTINUE;
}

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : default_spec;
    spirals train, val;
    mlp net;
    if (spirals_make(&train, 200, 3, 0.2f, 1) || spirals_make(&val, 100, 3, 0.2f, 2) || mlp_init(&net, 2, 64, 3, BATCH, 42)) {
        fprintf(stderr, "train_callbacks: out of memory\n");
        return 1;
    }
    tr_data train_data = spirals_tr_data(&train, BATCH, 1), val_data = spirals_tr_data(&val, BATCH, 0);
    tr_tensor views[MLP_NUM_TENSORS];
    tr_trainer t;
    if (tr_init(&t, &(tr_desc){ .model = mlp_tr_model(&net, views), .optim = { .lr = 1e-3 }, .seed = 3 })) {
        fprintf(stderr, "train_callbacks: %s\n", tr_error(&t));
        return 1;
    }
    int64_t hist_step = 270;
    hk_handle gm;
    if (hk_spec_apply(t.reg, spec) != HK_OK) {            /* a bad spec names the bad part */
        fprintf(stderr, "train_callbacks: %s\n", hk_last_error(t.reg));
        return 1;
    }
    if (tr_gradient_monitor(t.reg, &(tr_gradient_monitor_desc){ .log_frequency = 30, .percentiles = "50,90",
                            .histogram_bins = 12, .on_histogram = print_histogram, .histogram_user = &hist_step }, &gm) ||
        hk_on(t.reg, HK_ON_TRAIN_EPOCH_END, report, NULL,
              &(hk_opts){ .name = "report", .filter = { .counter = HK_COUNT_EPOCH, .every = 5 } }, NULL)) {
        fprintf(stderr, "train_callbacks: %s\n", tr_error(&t));
        return 1;
    }

    /* the time per loop phase and samples/s with MFU (6 FLOPs per weight per sample; a made-up 100 GFLOP/s peak) */
    hk_handle tp, pf;
    if (tr_throughput_monitor(t.reg, &(tr_throughput_monitor_desc){ .flops_per_sample = 6.0 * (double)net.num_params,
                              .peak_flops = 1e11 }, &tp) || tr_profiler(t.reg, &(tr_profiler_desc){ .table = TR_NO }, &pf)) {
        fprintf(stderr, "train_callbacks: %s\n", hk_last_error(t.reg));
        return 1;
    }

    tr_err err = tr_fit(&t, &(tr_config){ .train = &train_data, .val = &val_data, .max_epochs = EPOCHS });
    if (err) { fprintf(stderr, "train_callbacks: %s\n", tr_error(&t)); return 1; }

    const tr_lr_finder_state *lf = tr_lr_finder_get(t.reg, hk_find(t.reg, "lr_finder"));
    const tr_ema_state *ema = tr_ema_get(t.reg, hk_find(t.reg, "ema"));
    const tr_gradient_monitor_state *g = tr_gradient_monitor_get(t.reg, gm);
    double acc = mlp_accuracy(&net, &val, BATCH);        /* the trained weights */
    int ok = 1;
    if (lf) printf("lr_finder: %d points, suggestion %.4g\n", lf->n, lf->suggestion);
    printf("gradient_monitor: %lld checks, %lld vanishing, %lld exploding\n", (long long)g->checks,
           (long long)g->vanishing, (long long)g->exploding);
    if (ema) {
        float *keep = (float *)malloc(net.num_params * sizeof(float));  /* evaluate the average by hand, too */
        memcpy(keep, net.params, net.num_params * sizeof(float));
        memcpy(net.params, ema->average, net.num_params * sizeof(float));
        printf("ema: %lld updates; val accuracy %.3f with the average, %.3f with the trained weights\n",
               (long long)ema->n_averaged, mlp_accuracy(&net, &val, BATCH), acc);
        memcpy(net.params, keep, net.num_params * sizeof(float));
        free(keep);
        ok &= ema->n_averaged > 0;
    }
    const tr_throughput_monitor_state *th = tr_throughput_monitor_get(t.reg, tp);
    const tr_profiler_state *pr = tr_profiler_get(t.reg, pf);
    printf("throughput_monitor: %.0f samples/s over the last %d batches, step p50 %.3f ms, p99 %.3f ms, MFU %.2g\n",
           th->samples_per_sec, th->n, th->step_ms_p50, th->step_ms_p99, th->mfu);
    printf("profiler: %lld batches, %.3f ms each; of that data %.4f, forward %.4f, backward %.4f, optimizer %.4f ms\n",
           (long long)pr->steps, 1e3 * pr->step_time / (double)pr->steps, 1e3 * pr->phase_time[TR_PHASE_DATA] / (double)pr->steps,
           1e3 * pr->phase_time[TR_PHASE_FORWARD] / (double)pr->steps, 1e3 * pr->phase_time[TR_PHASE_BACKWARD] / (double)pr->steps,
           1e3 * pr->phase_time[TR_PHASE_OPTIMIZER] / (double)pr->steps);
    ok &= th->steps == (int64_t)EPOCHS * 19 && pr->steps == th->steps && th->samples_per_sec > 0;
    printf("%lld optimizer steps in %d epochs (accumulation 2 from epoch 10 halves the steps per epoch)\n",
           (long long)t.global_step, EPOCHS);
    if (argc <= 1) ok &= lf && lf->suggestion == lf->suggestion && acc > 0.9 && g->checks == t.global_step / 30 &&
                         t.global_step == 10 * 19 + 10 * 10;
    tr_free(&t);
    mlp_free(&net);
    spirals_free(&train);
    spirals_free(&val);
    return !ok;
}
