/* train_callback.c - your own stateful callback, made from a config string; its state survives a
   checkpoint.

   "best_tracker" watches a metric after every validation and remembers the best value, its epoch and
   the validations since. That memory is STATE: a resumed run must get it back, so the callback gives
   hooks.h save_state/load_state, which train.h calls when it writes and reads checkpoints.
   A FACTORY makes it from a SPEC string, so the command line configures it:
       build/train_callback                                        (default spec below)
       build/train_callback 'best_tracker(monitor=val/acc, mode=max)'
       build/train_callback 'best_tracker(monitr=val/loss)'        (a typo: see the error message)
   Parameters are declared with a type and a default (NULL = required); hk_spec_apply checks names,
   types and choices of the whole spec before any factory runs.
   It trains 16 epochs and saves, then rebuilds everything from scratch and resumes to epoch 24; it
   exits nonzero unless the tracker's state right after the load equals its state at the save. */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "mlp.h"
#include <stdlib.h>
#define BATCH 32

/* ==== the callback ================================================================================= */
typedef struct best_tracker {
    char monitor[64];       /* the metric's name, copied from the spec */
    int maximize;           /* mode=max */
    struct { double best; int64_t best_epoch, since_best; } s; /* the state: what a resume restores */
} best_tracker;

/* on_validation_epoch_end: train.h has just set val/loss; other hooks may have set more. */
static hk_signal tracker_check(hk_ctx *ctx, void *user) {
    best_tracker *bt = (best_tracker *)user;
    double v;
    if (ctx->stage != HK_STAGE_FIT) return HK_CONTINUE;          /* skip the sanity check */
    if (!hk_metric_get(ctx, bt->monitor, &v))                     /* a typo in monitor= ends up here */
        return hk_fail(ctx, "metric '%s' was not set by any hook", bt->monitor);
    bt->s.since_best++;
    if (bt->maximize ? v > bt->s.best : v < bt->s.best) { bt->s.best = v; bt->s.best_epoch = ctx->epoch; bt->s.since_best = 0; }
    hk_metric_set(ctx, "best", bt->s.best);                       /* for other hooks (and loggers) */
    printf("  epoch %2lld  %s %.5f   best %.5f (epoch %lld, %lld validations ago)\n", (long long)ctx->epoch,
           bt->monitor, v, bt->s.best, (long long)bt->s.best_epoch, (long long)bt->s.since_best);
    return HK_CONTINUE;
}

/* The state as bytes: a version number, then the fields (native byte order: the checkpoint is read
   back on the same kind of machine). Loading checks everything before it commits anything. */
#define TRACKER_STATE_VERSION 1u
static int tracker_save(void *user, hk_bytes *out) {
    uint32_t version = TRACKER_STATE_VERSION;
    return hk_bytes_put(out, &version, sizeof version) || hk_bytes_put(out, &((best_tracker *)user)->s, sizeof ((best_tracker *)user)->s);
}
static int tracker_load(void *user, hk_reader *in) {
    uint32_t version;
    best_tracker tmp;
    if (hk_read(in, &version, sizeof version) || version != TRACKER_STATE_VERSION ||
        hk_read(in, &tmp.s, sizeof tmp.s) || in->pos != in->len) return -1;
    ((best_tracker *)user)->s = tmp.s;
    return 0;
}

/* on_load_checkpoint fires after every hook's state was restored: keep it for main() to compare. */
static struct { int valid; best_tracker state; } loaded;
static hk_signal tracker_loaded(hk_ctx *ctx, void *user) {
    const best_tracker *bt = (const best_tracker *)user;
    loaded.valid = 1, loaded.state = *bt;
    printf("  restored from %s: best %s %.5f at epoch %lld\n", ctx->path, bt->monitor, bt->s.best, (long long)bt->s.best_epoch);
    return HK_CONTINUE;
}

/* ==== the factory ================================================================================== */
static const hk_param tracker_params[] = {
    { "monitor", HK_PARAM_STRING, "val/loss", NULL,      "the metric to watch" },
    { "mode",    HK_PARAM_CHOICE, "min",      "min|max", "whether lower or higher is better" },
};

/* `user` of the factory: where to leave a pointer to the tracker it made, for main() to look at. */
static hk_err make_tracker(hk_registry *reg, const hk_args *args, void *user) {
    best_tracker *bt = (best_tracker *)calloc(1, sizeof *bt);
    const char *monitor = hk_arg_str(args, "monitor"), *mode = hk_arg_str(args, "mode");
    if (!bt || !monitor || !mode) { free(bt); return HK_ERR_NOMEM; } /* (both have defaults) */
    snprintf(bt->monitor, sizeof bt->monitor, "%s", monitor); /* a copy: args die after the call */
    bt->maximize = strcmp(mode, "max") == 0;
    bt->s.best = bt->maximize ? -INFINITY : INFINITY;
    bt->s.best_epoch = -1;
    hk_callback cb = { .name = "best_tracker", .user = bt,      /* the name is also its state's key */
                       .on_validation_epoch_end = tracker_check, .on_load_checkpoint = tracker_loaded,
                       .save_state = tracker_save, .load_state = tracker_load, .destroy = free };
    hk_err err = hk_add_callback(reg, &cb, NULL, NULL);        /* from now on the registry frees bt */
    if (err) { free(bt); return err; }
    *(best_tracker **)user = bt;
    return HK_OK;
}

/* ==== the program ================================================================================== */
/* val/acc for monitor=val/acc; order = -1 runs it before the tracker on the same event. */
typedef struct acc_ctx { mlp *net; spirals *val; } acc_ctx;
static hk_signal set_val_acc(hk_ctx *ctx, void *user) {
    acc_ctx *a = (acc_ctx *)user;
    hk_metric_set(ctx, "val/acc", mlp_accuracy(a->net, a->val, BATCH));
    return HK_CONTINUE;
}

/* Data, model, trainer, the tracker from `spec`; fit to max_epochs (resuming if resume_from), then
   save (if save_to). *at_end gets the tracker's last state. */
static int run(const char *spec, const char *resume_from, const char *save_to, int64_t max_epochs, best_tracker *at_end) {
    spirals train, val; mlp net;
    tr_tensor views[MLP_NUM_TENSORS];
    tr_trainer t;
    best_tracker *bt = NULL;
    int rc = 1;
    if (spirals_make(&train, 200, 3, 0.2f, 1) || spirals_make(&val, 100, 3, 0.2f, 2) || mlp_init(&net, 2, 64, 3, BATCH, 42))
        return 1;
    tr_data train_data = spirals_tr_data(&train, BATCH, 1), val_data = spirals_tr_data(&val, BATCH, 0);
    acc_ctx acc = { &net, &val };
    tr_err err = tr_init(&t, &(tr_desc){ .model = mlp_tr_model(&net, views), .optim = { .lr = 3e-2 }, .seed = 3 });
    if (!err) {
        hk_on(t.reg, HK_ON_VALIDATION_EPOCH_END, set_val_acc, &acc, &(hk_opts){ .name = "val_acc", .order = -1 }, NULL);
        /* the factory, then the spec: this is all a config file or a command line needs */
        hk_factory_add(t.reg, "best_tracker", tracker_params, 2, make_tracker, &bt, "remember the best value of a metric");
        hk_err spec_err = hk_spec_apply(t.reg, spec);
        if (spec_err || !bt) fprintf(stderr, "train_callback: %s\n", spec_err ? hk_last_error(t.reg) : "no best_tracker in the spec");
        else {
            err = tr_fit(&t, &(tr_config){ .train = &train_data, .val = &val_data, .max_epochs = max_epochs, .resume_from = resume_from });
            if (!err && save_to) err = tr_save(&t, save_to);
            rc = err != TR_OK;
            *at_end = *bt;                       /* copy it before tr_free frees it */
        }
    }
    if (err) fprintf(stderr, "train_callback: %s\n", tr_error(&t));
    tr_free(&t);
    mlp_free(&net), spirals_free(&train), spirals_free(&val);
    return rc;
}

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "best_tracker(monitor=val/loss, mode=min)";
    const char *path = argc > 2 ? argv[2] : "train_callback.ckpt";
    best_tracker saved, resumed;
    printf("spec: %s\nrun 1: 16 epochs, then save %s\n", spec, path);
    if (run(spec, NULL, path, 16, &saved)) return 1;
    printf("run 2: everything new, resume from %s, continue to 24 epochs\n", path);
    int rc = run(spec, path, NULL, 24, &resumed);
    if (remove(path), rc) return 1;
    /* run 2's tracker started fresh (best = inf); right after the load it must hold run 1's state */
    int ok = loaded.valid && !memcmp(&loaded.state.s, &saved.s, sizeof saved.s);
    printf("state at save: best %.5f (epoch %lld); right after load: best %.5f (epoch %lld) -> %s\n", saved.s.best,
           (long long)saved.s.best_epoch, loaded.state.s.best, (long long)loaded.state.s.best_epoch, ok ? "restored" : "NOT restored");
    printf("final: best %s %.5f at epoch %lld\n", resumed.monitor, resumed.s.best, (long long)resumed.s.best_epoch);
    return !ok;
}
