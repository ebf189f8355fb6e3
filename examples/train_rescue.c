/* train_rescue.c - a run that fails keeps its work, and a loss spike is rolled back instead of
   ending the run: on_exception_checkpoint and spike_detection.

   The spirals MLP of examples/mlp.h, AdamW, 240 optimizer steps (20 epochs of 12 batches):
     A. straight through
     B. a hook fails in the middle of step 101 (think: a node dies, Ctrl-C, a NaN): on_exception_checkpoint
        saves the state after step 100 to rescue/on_exception.ckpt before teardown
     C. a fresh model (other initial weights) resumed from that file: ends bit for bit as A
     D. the loss of batch 150 is made 1000 times larger (a spike): spike_detection, with a snapshot every
        20 steps, rolls back to step 140, skips 5 more batches and trains on
     E. no spike, and a hook that skips batches 141..155 (what D undid and skipped): the same bits as D
   In a loop of your own, both work through the run layer (tr_run_desc.save_model / load_model for the
   checkpoint, tr_run_desc.state for the snapshot): tests/test_callbacks_b.c has such a loop.

   Run:  make examples && build/train_rescue [directory]   (default: rescue, removed after) */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "mlp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 32
#define STEPS 240

typedef struct plan { tr_trainer *t; int64_t fail_at, spike_at, skip_lo, skip_hi; } plan;
static int64_t batch_no(const tr_trainer *t) { return t->epoch * t->train_batches + t->epoch_batch + 1; }
static hk_signal fail_hook(hk_ctx *ctx, void *user) { /* on_after_backward: inside the step */
    plan *p = (plan *)user;
    return batch_no(p->t) == p->fail_at ? hk_fail(ctx, "the node died at batch %lld", (long long)p->fail_at) : HK_CONTINUE;
}
static hk_signal spike_hook(hk_ctx *ctx, void *user) { /* on_before_backward, first: the loss the others see */
    plan *p = (plan *)user;
    if (batch_no(p->t) == p->spike_at) ctx->loss *= 1000;
    return HK_CONTINUE;
}
static hk_signal skip_hook(hk_ctx *ctx, void *user) { /* on_train_batch_start */
    plan *p = (plan *)user;
    int64_t b = batch_no(p->t);
    (void)ctx;
    return b >= p->skip_lo && b <= p->skip_hi ? HK_SKIP_BATCH : HK_CONTINUE;
}

static int train(const char *label, mlp *net, plan p, const char *spec, const char *resume_from) {
    spirals train_set;
    if (spirals_make(&train_set, 128, 3, 0.2f, 1)) return 1;
    tr_tensor views[MLP_NUM_TENSORS];
    tr_data data = spirals_tr_data(&train_set, BATCH, 1);
    tr_trainer t;
    if (tr_init(&t, &(tr_desc){ .model = mlp_tr_model(net, views), .optim = { .lr = 1e-2 }, .seed = 7 })) {
        fprintf(stderr, "train_rescue: %s\n", tr_error(&t));
        spirals_free(&train_set);
        return 1;
    }
    p.t = &t;
    hk_on(t.reg, HK_ON_AFTER_BACKWARD, fail_hook, &p, NULL, NULL);
    hk_on(t.reg, HK_ON_BEFORE_BACKWARD, spike_hook, &p, &(hk_opts){ .order = -100 }, NULL);
    hk_on(t.reg, HK_ON_TRAIN_BATCH_START, skip_hook, &p, NULL, NULL);
    if (spec && hk_spec_apply(t.reg, spec) != HK_OK) {
        fprintf(stderr, "train_rescue: %s\n", hk_last_error(t.reg));
        return 1;
    }
    tr_err err = tr_fit(&t, &(tr_config){ .train = &data, .max_steps = STEPS, .resume_from = resume_from });
    printf("  [%s] %s at step %lld (epoch %lld)%s%s\n", label, err ? "failed" : "done", (long long)t.global_step,
           (long long)t.epoch, err ? ": " : "", err ? tr_error(&t) : "");
    hk_handle h = hk_spec_find(t.reg, "spike_detection", 0);
    const tr_spike_detection_state *sd = tr_spike_detection_get(t.reg, h);
    if (sd) printf("  [%s] spikes %lld, rollbacks %lld, batches undone or skipped %lld (%lld..%lld)\n", label,
                   (long long)sd->spikes, (long long)sd->rollbacks, (long long)sd->skipped_batches,
                   (long long)sd->last_first, (long long)sd->last_last);
    tr_free(&t);
    spirals_free(&train_set);
    return err != TR_OK;
}

static int same(const char *what, const mlp *x, const mlp *y) {
    int ok = x->num_params == y->num_params && !memcmp(x->params, y->params, x->num_params * sizeof(float));
    printf("%s: %s\n", what, ok ? "identical, bit for bit" : "NOT identical");
    return ok;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "rescue";
    char spec[300], path[300], cmd[400];
    mlp a, b, c, d, e;
    plan none = { NULL, 0, 0, 0, 0 };
    int ok = 1;
    if (mlp_init(&a, 2, 32, 3, BATCH, 42) || mlp_init(&b, 2, 32, 3, BATCH, 42) || mlp_init(&c, 2, 32, 3, BATCH, 999) ||
        mlp_init(&d, 2, 32, 3, BATCH, 42) || mlp_init(&e, 2, 32, 3, BATCH, 42)) {
        fprintf(stderr, "train_rescue: out of memory\n");
        return 1;
    }
    snprintf(spec, sizeof spec, "on_exception_checkpoint(dirpath=\"%s\")", dir);
    snprintf(path, sizeof path, "%s/on_exception.ckpt", dir);
    printf("A: straight through\n");
    ok &= !train("A", &a, none, NULL, NULL);
    printf("B: fails inside step 101, with %s\n", spec);
    plan fail = none;
    fail.fail_at = 101;
    ok &= train("B", &b, fail, spec, NULL) == 1; /* it fails, on purpose */
    printf("C: a fresh model resumed from %s\n", path);
    ok &= !train("C", &c, none, NULL, path);
    ok &= same("A and C", &a, &c);
    printf("D: a spike at batch 150\n");
    plan spike = none;
    spike.spike_at = 150;
    ok &= !train("D", &d, spike, "spike_detection(every_n_steps=20, skip_after=5, threshold=10)", NULL);
    printf("E: no spike, batches 141..155 skipped\n");
    plan skip = none;
    skip.skip_lo = 141;
    skip.skip_hi = 155;
    ok &= !train("E", &e, skip, NULL, NULL);
    ok &= same("D and E", &d, &e);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "train_rescue: could not remove %s\n", dir);
    mlp_free(&a); mlp_free(&b); mlp_free(&c); mlp_free(&d); mlp_free(&e);
    return !ok;
}
