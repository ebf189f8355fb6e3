/* train_mpi.c - the same training on several processes: data parallelism with MPI (train.h's TRAIN_MPI).

   Every process (a "rank") holds the whole model and trains on its own share of each epoch's batches;
   once per optimizer step train.h adds up the ranks' gradients, so every rank takes the same step and
   the parameters stay identical everywhere. The program is the one-process program plus one define:

       #define TRAIN_MPI          (before including train.h, in the file with TRAIN_IMPLEMENTATION)

   tr_init starts MPI itself (MPI_Init, and MPI_Finalize at exit). Hooks see ctx->rank and
   ctx->world_size. Here:
     - a rank-zero-only hook prints progress once for the whole job (hk_opts.rank_zero_only), while
     - an early stop decided from val/loss (the mean over ALL ranks' validation batches, the same
       number on every rank) stops every rank at the same step, and
     - at the end every rank checks that its parameters are bit-identical to rank 0's.
   With --zero (tr_desc.zero = 1, ZeRO-1) each rank keeps only its 1/W shard of AdamW's state and the
   ranks exchange the updated parameters after every step: the same bits as without it, less memory.

   Build and run (Open MPI; as root add --allow-run-as-root, on few cores --oversubscribe):
       mpicc -O2 -I. -I/usr/include examples/train_mpi.c -o build/train_mpi -lm
       mpirun -np 4 build/train_mpi
       mpirun -np 4 build/train_mpi --zero  the optimizer state sharded over the 4 ranks: the same result
       build/train_mpi                      without mpirun: one process, the plain trainer
       build/train_mpi ckpt=PATH            under Slurm (examples/slurm_job.sh): SIGUSR1 saves to PATH and
                                            requeues the job, which resumes from PATH by itself */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#define TRAIN_MPI
#include "train.h"
#include "mlp.h"

#include <stdio.h>

#define BATCH 16

/* Printing: rank 0 only (registered with rank_zero_only, so the other ranks never call it). */
static hk_signal report(hk_ctx *ctx, void *user) {
    double val = 0;
    (void)user;
    hk_metric_get(ctx, "val/loss", &val);
    printf("epoch %2lld  step %4lld  val/loss %.4f  (%d ranks)\n", (long long)ctx->epoch,
           (long long)ctx->global_step, val, ctx->world_size);
    return HK_CONTINUE;
}

/* Stop when good enough. It runs on every rank and sees the same val/loss everywhere; a stop from any
   one rank would stop all of them anyway (train.h agrees on signals after each batch and epoch). */
static hk_signal good_enough(hk_ctx *ctx, void *user) {
    double val = 1e9;
    hk_metric_get(ctx, "val/loss", &val);
    return val < *(double *)user ? HK_STOP : HK_CONTINUE;
}

/* The parameters of every rank must be rank 0's, bit for bit. A hash of the bytes, compared by MPI. */
static int same_on_every_rank(const float *p, size_t n) {
    unsigned long long h = 1469598103934665603ull, lo, hi;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n * sizeof(float); i++) { h ^= b[i]; h *= 1099511628211ull; }
    MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

int main(int argc, char **argv) {
    spirals train, val;
    mlp net;
    tr_tensor views[MLP_NUM_TENSORS];
    tr_trainer t;
    double target = 0.25;
    int ok, zero = 0;
    const char *ckpt = NULL;
    for (int i = 1; i < argc; i++) /* --zero, ckpt=PATH */
        if (!strcmp(argv[i], "--zero")) zero = 1;
        else if (!strncmp(argv[i], "ckpt=", 5)) ckpt = argv[i] + 5;
    if (spirals_make(&train, 200, 3, 0.2f, 1) || spirals_make(&val, 50, 3, 0.2f, 2) ||
        mlp_init(&net, 2, 64, 3, BATCH, 42)) return 1;
    tr_data train_data = spirals_tr_data(&train, BATCH, 1), val_data = spirals_tr_data(&val, BATCH, 0);

    /* Each rank takes 1/W of the batches, so the global batch is W * BATCH: scale the learning rate
       with it if you want the same curve as one process with batches of W * BATCH. */
    tr_err e = tr_init(&t, &(tr_desc){ .model = mlp_tr_model(&net, views), .optim = { .lr = 1e-2 }, .seed = 7, .zero = zero });
    if (e) { fprintf(stderr, "tr_init: %s\n", tr_error(&t)); return 1; }
    if (t.ctx.rank == 0) /* AdamW's m and v: 8 bytes per parameter, or this rank's 1/W shard of them with --zero */
        printf("optimizer state on rank 0: %zu bytes for %zu parameters%s\n", tr_optim_state_bytes(&t), net.num_params,
               zero ? " (zero: its shard)" : "");
    hk_on(t.reg, HK_ON_VALIDATION_END, report, NULL, &(hk_opts){ .name = "report", .rank_zero_only = 1 }, NULL);
    hk_on(t.reg, HK_ON_VALIDATION_END, good_enough, &target, &(hk_opts){ .name = "good_enough" }, NULL);

    e = tr_fit(&t, &(tr_config){ .train = &train_data, .val = &val_data, .max_epochs = 200,
                                 .num_sanity_val_steps = -1, .gradient_clip_val = 1.0, .save_to = ckpt,
                                 .preempt = { .requeue = ckpt ? TR_YES : 0 } }); /* Slurm: docs/scaling.md */
    ok = e == TR_OK && same_on_every_rank(net.params, net.num_params);
    if (t.ctx.rank == 0)
        printf("%s after %lld steps on %d rank(s); accuracy %.3f; parameters identical on every rank: %s\n",
               e ? tr_error(&t) : "done", (long long)t.global_step, t.ctx.world_size, mlp_accuracy(&net, &val, BATCH),
               ok ? "yes" : "NO");
    tr_free(&t);
    mlp_free(&net);
    spirals_free(&train);
    spirals_free(&val);
    return ok ? 0 : 1;
}
