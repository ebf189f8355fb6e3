/* sweep.c - Hydra's multirun in C: one job per combination of command-line values, each in its own
   directory, a summary of their final metrics at the end, and Hydra's lifecycle hooks.

     build/sweep                                             the default sweep below (4 jobs)
     build/sweep optim.lr=1e-2,3e-3 batch=16,64 early_stopping.patience=2,5     (8 jobs)
     build/sweep optim.name=adamw,sgdx early_stopping.patience=2    a job that fails (sgdx is no optimizer)

   Keys are the program's fields (the table `fields`) or factory.param of a callback in the spec
   string. The jobs are the cartesian product of the lists, the last key varying fastest (Hydra's
   basic sweeper). A failing job is reported and the sweep goes on (stop_on_failure would end it).
   Look at multirun/version_N/summary.csv and summary.svg; each job's logs are in version_<job>.

   Run:  make examples && build/sweep   (exit status 0 when every job succeeded) */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "mlp.h"

#include <stdio.h>
#include <stdlib.h>

/* The program's configuration: what a sweep may override, with its defaults. */
static double lr = 3e-3;
static int batch = 32, hidden = 32, epochs = 6;
static const char *optim = "adamw";
static const tr_sweep_field fields[] = {
    { "optim.lr",   TR_SWEEP_DOUBLE, &lr },
    { "optim.name", TR_SWEEP_STRING, &optim },
    { "batch",      TR_SWEEP_INT,    &batch },
    { "hidden",     TR_SWEEP_INT,    &hidden },
    { "epochs",     TR_SWEEP_INT,    &epochs },
};
static const char *default_argv[] = { "optim.lr=1e-2,1e-3", "batch=16,64" };

/* One job: the fields hold this job's values; reg has the job's run and spec callbacks. */
static tr_err job(hk_registry *reg, tr_sweep_job *job, void *user) {
    spirals train, val;
    mlp net;
    tr_tensor views[MLP_NUM_TENSORS];
    tr_trainer t;
    tr_err e;
    (void)user;
    if (strcmp(optim, "adamw") && strcmp(optim, "sgd")) {       /* the program's own check: the job fails */
        tr_run_fail(reg, TR_ERR_INVALID, "optim.name '%s': expected adamw or sgd", optim);
        return TR_ERR_INVALID;
    }
    if (spirals_make(&train, 200, 3, 0.2f, 1) || spirals_make(&val, 100, 3, 0.2f, 2) ||
        mlp_init(&net, 2, hidden, 3, batch, 42))
        return TR_ERR_NOMEM;
    tr_data train_data = spirals_tr_data(&train, batch, 1), val_data = spirals_tr_data(&val, batch, 0);
    e = tr_init(&t, &(tr_desc){ .reg = reg, .model = mlp_tr_model(&net, views), .seed = 3,
                               .optim = { .kind = strcmp(optim, "sgd") ? TR_OPTIM_ADAMW : TR_OPTIM_SGD, .lr = (float)lr } });
    if (!e) e = tr_fit(&t, &(tr_config){ .train = &train_data, .val = &val_data, .max_epochs = epochs,
                                         .log_every_n_steps = 5 });
    if (e) tr_run_fail(reg, e, "%s", tr_error(&t));              /* the message the sweep reports */
    else tr_sweep_metric(job, "params", (double)t.model.n_params);  /* a final metric of the job's own */
    tr_free(&t);
    mlp_free(&net);
    spirals_free(&train);
    spirals_free(&val);
    return e;
}

/* Hydra's callbacks: start events in registration order, end events reversed. */
static hk_signal multirun_start(hk_ctx *ctx, void *user) {
    (void)ctx; (void)user;
    printf("multirun starts\n");
    return HK_CONTINUE;
}
static hk_signal job_end(hk_ctx *ctx, void *user) {
    const tr_sweep_job *j = tr_sweep_current(ctx);
    double v = 0;
    (void)user;
    if (j->status == TR_OK && hk_metric_get(ctx, "val/loss", &v))
        printf("job %d/%d [%s] val/loss %.4f in %s\n", j->index + 1, j->count, j->overrides, v, j->dir);
    else printf("job %d/%d [%s] failed: %s\n", j->index + 1, j->count, j->overrides, j->error);
    return HK_CONTINUE;
}
static hk_signal multirun_end(hk_ctx *ctx, void *user) {
    (void)ctx; (void)user;
    printf("multirun ends\n");
    return HK_CONTINUE;
}

int main(int argc, char **argv) {
    hk_registry *hooks = hk_create(NULL);
    tr_sweep_result res;
    if (!hooks) return 1;
    hk_on(hooks, HK_ON_MULTIRUN_START, multirun_start, NULL, &(hk_opts){ .name = "hello" }, NULL);
    hk_on(hooks, HK_ON_JOB_END, job_end, NULL, &(hk_opts){ .name = "report" }, NULL);
    hk_on(hooks, HK_ON_MULTIRUN_END, multirun_end, NULL, &(hk_opts){ .name = "bye" }, NULL);
    tr_err e = tr_sweep(&(tr_sweep_desc){
                            .fields = fields, .n_fields = (int)(sizeof fields / sizeof fields[0]),
                            .spec = "early_stopping(monitor=val/loss, patience=3); csv",
                            .job = job, .reg = hooks, .metrics = "val/loss train/loss",
                            .run = { .save_dir = "runs" } },             /* a plain run (one job) writes here */
                        argc > 1 ? argc - 1 : 2, argc > 1 ? argv + 1 : (char **)default_argv, &res);
    if (e == TR_ERR_INVALID && res.jobs == 0) fprintf(stderr, "%s\n", res.error);  /* bad overrides: nothing ran */
    else printf("%d jobs: %d ok, %d failed, %d skipped%s%s\n", res.jobs, res.ok, res.failed, res.skipped,
                res.multirun ? "; summary in " : "", res.dir);
    hk_destroy(hooks);
    return e == TR_OK ? 0 : 1;
}
