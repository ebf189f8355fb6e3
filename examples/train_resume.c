/* train_resume.c - stop training, save a checkpoint, resume in a fresh model, end up bit-for-bit equal.

   Three runs of the same training (the spirals MLP of examples/mlp.h, AdamW, 300 optimizer steps):
     A. straight through: 300 steps
     B. interrupted: 110 steps (in the middle of an epoch), then tr_save() writes a checkpoint
     C. a fresh start, as a new process would make it: a model initialised with a DIFFERENT seed, a new
        trainer, and tr_fit(.resume_from = the checkpoint, .max_steps = 300)
   The checkpoint holds the parameters, the AdamW moments, the step and epoch counters, the position
   inside the epoch and the random generator, so C continues exactly where B stopped: its parameters
   end up identical to A's, bit for bit. The program checks that and exits nonzero if not.

   Run:  make examples && build/train_resume [checkpoint-file]   (default: train_resume.ckpt, removed after) */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "mlp.h"

#include <stdio.h>
#include <string.h>

#define BATCH 32

/* One hook, to watch the runs: the training loss every 50 steps. */
static hk_signal print_loss(hk_ctx *ctx, void *user) {
    printf("  [%s] step %3lld  epoch %lld  batch %2lld  loss %.6f\n", (const char *)user,
           (long long)ctx->global_step, (long long)ctx->epoch, (long long)ctx->batch_idx, ctx->loss);
    return HK_CONTINUE;
}

/* Train `net` up to max_steps optimizer steps. resume_from: a checkpoint to start from (or NULL);
   save_to: where to save when done (or NULL). Returns 0 on success. Each run makes its own copy of the
   data, as a separate process would: nothing but the checkpoint carries over. */
static int train(const char *label, mlp *net, const char *resume_from, const char *save_to, int64_t max_steps) {
    spirals train_set;
    if (spirals_make(&train_set, 200, 3, 0.2f, 1)) return 1;
    tr_tensor views[MLP_NUM_TENSORS];
    tr_data data = spirals_tr_data(&train_set, BATCH, 1);
    tr_trainer t;
    if (tr_init(&t, &(tr_desc){ .model = mlp_tr_model(net, views), .optim = { .lr = 1e-2 }, .seed = 7 })) {
        fprintf(stderr, "train_resume: %s\n", tr_error(&t));
        spirals_free(&train_set);
        return 1;
    }
    hk_on(t.reg, HK_ON_TRAIN_BATCH_END, print_loss, (void *)label,
          &(hk_opts){ .name = "print_loss", .filter = { .counter = HK_COUNT_STEP, .every = 50 } }, NULL);

    tr_err err = tr_fit(&t, &(tr_config){ .train = &data, .max_steps = max_steps, .resume_from = resume_from });
    if (!err && save_to) err = tr_save(&t, save_to);
    if (err) fprintf(stderr, "train_resume: [%s] %s\n", label, tr_error(&t));
    else printf("  [%s] stopped at step %lld (epoch %lld, %lld batches into it)%s%s\n", label,
                (long long)t.global_step, (long long)t.epoch, (long long)t.epoch_batch,
                save_to ? ", saved to " : "", save_to ? save_to : "");
    tr_free(&t);
    spirals_free(&train_set);
    return err != TR_OK;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "train_resume.ckpt";
    mlp a, b, c;
    if (mlp_init(&a, 2, 32, 3, BATCH, 42) ||
        mlp_init(&b, 2, 32, 3, BATCH, 42) || mlp_init(&c, 2, 32, 3, BATCH, 999)) {  /* c: another init */
        fprintf(stderr, "train_resume: out of memory\n");
        return 1;
    }
    printf("A: straight through\n");
    if (train("A", &a, NULL, NULL, 300)) return 1;
    printf("B: interrupted after 110 steps\n");
    if (train("B", &b, NULL, path, 110)) return 1;
    printf("C: a fresh model (other initial weights) resumed from %s\n", path);
    if (train("C", &c, path, NULL, 300)) return 1;

    /* Compare A and C: the bytes of every parameter. */
    size_t differ = 0;
    float max_diff = 0;
    for (size_t i = 0; i < a.num_params; i++) {
        float d = a.params[i] > c.params[i] ? a.params[i] - c.params[i] : c.params[i] - a.params[i];
        if (memcmp(&a.params[i], &c.params[i], sizeof(float)) != 0) differ++;
        if (d > max_diff) max_diff = d;
    }
    printf("parameters of A and C: %zu of %zu differ, largest difference %g -> %s\n", differ, a.num_params,
           (double)max_diff, differ ? "NOT identical" : "identical, bit for bit");
    remove(path);
    mlp_free(&a); mlp_free(&b); mlp_free(&c);
    return differ != 0;
}
