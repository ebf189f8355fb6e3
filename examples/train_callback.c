/* train_callback.c - write your own stateful callback, make it from a config string, and see its state
   survive a checkpoint.

   The callback, "best_tracker", watches one metric (val/loss by default) after every validation and
   remembers the best value, the epoch it was seen in, and how many validations have passed since.
   That memory is STATE: if training stops and resumes, a tracker that forgot it would report the wrong
   best. So the callback gives hooks.h two functions, save_state and load_state; train.h calls them when
   it writes and reads checkpoints, under the callback's name.

   It is made by a FACTORY from a SPEC string, so a user can configure it from the command line:

       build/train_callback                                        (default spec below)
       build/train_callback 'best_tracker(monitor=val/acc, mode=max)'
       build/train_callback 'best_tracker(monitr=val/loss)'        (a typo: see the error message)

   The program trains 16 epochs, saves a checkpoint, then builds everything again from scratch (new
   trainer, new tracker from the same spec, fresh state) and resumes to epoch 24. It checks that the
   tracker's state after loading equals its state at saving, and exits nonzero if not.

   Run:  make examples && build/train_callback ['spec'] */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "mlp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 32

/* ==== the callback ================================================================================= */
typedef struct best_tracker {
    char monitor[64];       /* the metric's name, copied from the spec */
    int maximize;           /* mode=max */
    int verbose;
    /* the state: everything a resume must restore */
    double best;            /* best value so far (+inf / -inf before the first) */
    int64_t best_epoch;     /* epoch it was seen in, -1 before the first */
    int64_t since_best;     /* validations since the best one */
} best_tracker;

/* on_validation_epoch_end: train.h has just set val/loss; the model hooks may have set more. */
static hk_signal tracker_check(hk_ctx *ctx, void *user) {
    best_tracker *bt = (best_tracker *)user;
    double v;
    if (ctx->stage != HK_STAGE_FIT) return HK_CONTINUE;          /* skip the sanity check */
    if (!hk_metric_get(ctx, bt->monitor, &v))                     /* a typo in monitor= ends up here */
        return hk_fail(ctx, "metric '%s' was not set by any hook", bt->monitor);
    if (bt->maximize ? v > bt->best : v < bt->best) {
        bt->best = v;
        bt->best_epoch = ctx->epoch;
        bt->since_best = 0;
    } else {
        bt->since_best++;
    }
    hk_metric_set(ctx, "best", bt->best);                         /* for other hooks (and loggers) */
    if (bt->verbose)
        printf("  epoch %2lld  %s %.5f   best %.5f (epoch %lld, %lld validations ago)\n", (long long)ctx->epoch,
               bt->monitor, v, bt->best, (long long)bt->best_epoch, (long long)bt->since_best);
    return HK_CONTINUE;
}

/* The state as bytes: a version number, then the three fields. (Native byte order: a checkpoint is read
   back on the same kind of machine. A portable format would fix the endianness.) */
#define TRACKER_STATE_VERSION 1
static int tracker_save(void *user, hk_bytes *out) {
    const best_tracker *bt = (const best_tracker *)user;
    uint32_t version = TRACKER_STATE_VERSION;
    return hk_bytes_put(out, &version, sizeof version) || hk_bytes_put(out, &bt->best, sizeof bt->best) ||
           hk_bytes_put(out, &bt->best_epoch, sizeof bt->best_epoch) ||
           hk_bytes_put(out, &bt->since_best, sizeof bt->since_best);
}

/* Read into temporaries first and only then commit: bad data must leave the tracker as it was. */
static int tracker_load(void *user, hk_reader *in) {
    best_tracker *bt = (best_tracker *)user;
    uint32_t version;
    double best;
    int64_t best_epoch, since_best;
    if (hk_read(in, &version, sizeof version) || version != TRACKER_STATE_VERSION ||
        hk_read(in, &best, sizeof best) || hk_read(in, &best_epoch, sizeof best_epoch) ||
        hk_read(in, &since_best, sizeof since_best) || in->pos != in->len)
        return -1;
    bt->best = best;
    bt->best_epoch = best_epoch;
    bt->since_best = since_best;
    return 0;
}

/* What the tracker held right after a load, for main() to compare with what was saved. */
static struct { int valid; best_tracker state; } loaded;

/* on_load_checkpoint fires after every hook's state was restored. */
static hk_signal tracker_loaded(hk_ctx *ctx, void *user) {
    const best_tracker *bt = (const best_tracker *)user;
    loaded.valid = 1;
    loaded.state = *bt;
    printf("  restored from %s: best %s %.5f at epoch %lld, %lld validations ago\n", ctx->path, bt->monitor,
           bt->best, (long long)bt->best_epoch, (long long)bt->since_best);
    return HK_CONTINUE;
}

/* ==== the factory ==================================================================================
   Parameters are declared with a type and a default (NULL = required); hk_spec_apply checks names,
   types and choices of the whole spec before any factory runs. */
static const hk_param tracker_params[] = {
    { "monitor", HK_PARAM_STRING, "val/loss", NULL,      "the metric to watch" },
    { "mode",    HK_PARAM_CHOICE, "min",      "min|max", "whether lower or higher is better" },
    { "verbose", HK_PARAM_BOOL,   "true",     NULL,      "print after every validation" },
};

/* `user` of the factory: where to leave a pointer to the tracker it made, so main() can look at it. */
static hk_err make_tracker(hk_registry *reg, const hk_args *args, void *user) {
    best_tracker *bt = (best_tracker *)calloc(1, sizeof *bt);
    if (!bt) return HK_ERR_NOMEM;
    const char *monitor = hk_arg_str(args, "monitor"), *mode = hk_arg_str(args, "mode");
    if (!monitor || !mode) { free(bt); return HK_ERR_SPEC; }     /* cannot happen: both have defaults */
    snprintf(bt->monitor, sizeof bt->monitor, "%s", monitor);      /* copy: args die after the call */
    bt->maximize = strcmp(mode, "max") == 0;
    bt->verbose = hk_arg_bool(args, "verbose");
    bt->best = bt->maximize ? -INFINITY : INFINITY;
    bt->best_epoch = -1;

    hk_callback cb = { 0 };
    cb.name = "best_tracker";                     /* also the key of its state in checkpoints */
    cb.user = bt;
    cb.on_validation_epoch_end = tracker_check;
    cb.on_load_checkpoint = tracker_loaded;
    cb.save_state = tracker_save;
    cb.load_state = tracker_load;
    cb.destroy = free;                            /* the registry frees bt when it goes away */
    hk_err err = hk_add_callback(reg, &cb, NULL, NULL);
    if (err) { free(bt); return err; }            /* on failure the registry did not take it */
    *(best_tracker **)user = bt;
    return HK_OK;
}

/* ==== the program ================================================================================== */

/* val/acc, for a tracker configured with monitor=val/acc: accuracy is model-specific, so the program
   computes it itself. order = -1 makes it run before the tracker on the same event. */
typedef struct acc_ctx { mlp *net; spirals *val; } acc_ctx;
static hk_signal set_val_acc(hk_ctx *ctx, void *user) {
    acc_ctx *a = (acc_ctx *)user;
    hk_metric_set(ctx, "val/acc", mlp_accuracy(a->net, a->val, BATCH));
    return HK_CONTINUE;
}

/* One process's worth of work: data, model, trainer, the tracker from `spec`; fit to max_epochs
   (from a checkpoint if resume_from), then save (if save_to). *at_end gets the tracker's last state. */
static int run(const char *spec, const char *resume_from, const char *save_to, int64_t max_epochs,
               best_tracker *at_end) {
    spirals train, val;
    mlp net;
    tr_tensor views[MLP_NUM_TENSORS];
    tr_trainer t;
    best_tracker *bt = NULL;
    int rc = 1;
    if (spirals_make(&train, 200, 3, 0.2f, 1) || spirals_make(&val, 100, 3, 0.2f, 2) ||
        mlp_init(&net, 2, 64, 3, BATCH, 42))
        return 1;
    tr_data train_data = spirals_tr_data(&train, BATCH, 1), val_data = spirals_tr_data(&val, BATCH, 0);
    if (tr_init(&t, &(tr_desc){ .model = mlp_tr_model(&net, views), .optim = { .lr = 3e-2 }, .seed = 3 })) {
        fprintf(stderr, "train_callback: %s\n", tr_error(&t));
        goto done;
    }
    acc_ctx acc = { &net, &val };
    hk_on(t.reg, HK_ON_VALIDATION_EPOCH_END, set_val_acc, &acc, &(hk_opts){ .name = "val_acc", .order = -1 }, NULL);

    /* the factory, then the spec: this is all a config file or a command line needs */
    hk_factory_add(t.reg, "best_tracker", tracker_params, 3, make_tracker, &bt, "remember the best value of a metric");
    hk_err spec_err = hk_spec_apply(t.reg, spec);
    if (spec_err || !bt) {
        fprintf(stderr, "train_callback: %s\n", spec_err ? hk_last_error(t.reg) : "the spec made no best_tracker");
        tr_free(&t);
        goto done;
    }

    tr_err err = tr_fit(&t, &(tr_config){ .train = &train_data, .val = &val_data, .max_epochs = max_epochs,
                                          .ckpt_path = resume_from });
    if (!err && save_to) err = tr_save(&t, save_to);
    if (err) fprintf(stderr, "train_callback: %s\n", tr_error(&t));
    else rc = 0;
    *at_end = *bt;                               /* copy it before tr_free frees it */
    tr_free(&t);
done:
    mlp_free(&net);
    spirals_free(&train);
    spirals_free(&val);
    return rc;
}

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "best_tracker(monitor=val/loss, mode=min)";
    const char *path = argc > 2 ? argv[2] : "train_callback.ckpt";
    best_tracker saved, resumed;
    printf("spec: %s\n", spec);
    printf("run 1: 16 epochs, then save %s\n", path);
    if (run(spec, NULL, path, 16, &saved)) return 1;
    printf("run 2: everything new, resume from %s, continue to 24 epochs\n", path);
    int rc = run(spec, path, NULL, 24, &resumed);
    remove(path);
    if (rc) return 1;
    /* run 2's tracker started fresh (best = inf); right after the load it must hold run 1's state */
    int ok = loaded.valid && loaded.state.best == saved.best && loaded.state.best_epoch == saved.best_epoch &&
             loaded.state.since_best == saved.since_best;
    printf("state at save: best %.5f (epoch %lld, %lld ago); right after load: best %.5f (epoch %lld, %lld ago) -> %s\n",
           saved.best, (long long)saved.best_epoch, (long long)saved.since_best, loaded.state.best,
           (long long)loaded.state.best_epoch, (long long)loaded.state.since_best, ok ? "restored" : "NOT restored");
    printf("final: best %s %.5f at epoch %lld\n", resumed.monitor, resumed.best, (long long)resumed.best_epoch);
    return !ok;
}
