/* train/callbacks/on_exception_checkpoint.h - on_exception_checkpoint. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_ON_EXCEPTION_CHECKPOINT_H /* part */
#define TRAIN_ON_EXCEPTION_CHECKPOINT_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- on_exception_checkpoint (Lightning's OnExceptionCheckpoint) ---------------------------------
   When a fit fails or is interrupted (every path through on_exception), saves the state after the last
   completed optimizer step to dirpath/filename.ckpt before teardown, the window in progress undone, so a
   resume ends with the bits of a run that never failed. Nothing before on_train_start (a good file
   would be overwritten) nor outside a fit. dirpath defaults to model_checkpoint's (the run's
   checkpoints/), made at on_fit_start: one that cannot be made or written fails the run there. Stateless.
   Hand-written loop: save_model / load_model, tr_run_start, tr_run_finish.
   docs/callbacks.md has the rest. */
#define TR_ON_EXCEPTION_CHECKPOINT_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING, const char *, dirpath,  "",             NULL, "the checkpoint's directory (made when missing); not given or " \
    "empty: where model_checkpoint's last.ckpt goes by default, the run directory's checkpoints/ " \
    "(save_dir/name/version_N/checkpoints) when the run has one, else ./checkpoints") \
  X(STRING, const char *, filename, "on_exception", NULL, "the file's name without \".ckpt\" (no '/')") \
  X(TRI,    int,          verbose,  "true",         NULL, "say where it saved, or why it could not")
typedef struct tr_on_exception_checkpoint_desc { TR_ON_EXCEPTION_CHECKPOINT_PARAMS(TR__FIELD) } tr_on_exception_checkpoint_desc;
typedef struct tr_on_exception_checkpoint_state {
  const char *ckpt_path;        /* dirpath/filename.ckpt (the default dirpath: as of on_train_start, and the save) */
  int64_t saved;                /* checkpoints written (one per failed fit) */
  int64_t saved_step;           /* global_step of the last one (-1: none) */
  tr_err last_error;            /* TR_OK, or why the last save failed */
} tr_on_exception_checkpoint_state;
TRAIN_API tr_err tr_on_exception_checkpoint(hk_registry *reg, const tr_on_exception_checkpoint_desc *d, hk_handle *out);
TRAIN_API const tr_on_exception_checkpoint_state *tr_on_exception_checkpoint_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- on_exception_checkpoint ------------------------------------------------------------------------ */
typedef struct tr__oec {
  tr_on_exception_checkpoint_state pub;
  tr_run *run;
  hk_registry *reg;
  char *dirpath, *path, *name;
  int dir_default;              /* dirpath was not given: 1 ./checkpoints until the run has a directory, 2 the run's */
  int verbose;
  int training;                 /* on_train_start of this fit has fired: there is a state worth saving */
} tr__oec;
static void tr__oec_destroy(void *user) {
  tr__oec *s = (tr__oec *)user;
  free(s->dirpath);
  free(s->path);
  free(s->name);
  free(s);
}
/* dirpath/name.ckpt; -1 out of memory (the old paths stay) */
static int tr__oec_paths(tr__oec *s, const char *dirpath) {
  size_t n = strlen(dirpath) + strlen(s->name) + 7;
  char *dir = tr__strdup(dirpath), *path = (char *)malloc(n);
  if (!dir || !path) { free(dir); free(path); return -1; }
  snprintf(path, n, "%s/%s.ckpt", dirpath, s->name);
  free(s->dirpath);
  free(s->path);
  s->dirpath = dir;
  s->path = path;
  s->pub.ckpt_path = s->path;
  return 0;
}
/* The default dirpath, model_checkpoint's rule: the run's checkpoints/, else ./checkpoints. */
static void tr__oec_default_dir(tr__oec *s) {
  const char *rd = s->run ? s->run->tr__p->dir : NULL;
  char *p;
  if (s->dir_default != 1 || !rd || !(p = tr__join(rd, "checkpoints"))) return; /* out of memory: ./checkpoints */
  if (tr__oec_paths(s, p) == 0) s->dir_default = 2;
  free(p);
}
/* A directory that cannot be made or written: said before the first step, as model_checkpoint says it, not
   found when the failure comes and its state is lost. Files: rank 0's job. */
static hk_signal tr__oec_fit_start(hk_ctx *ctx, void *user) {
  tr__oec *s = (tr__oec *)user;
  tr__oec_default_dir(s);
  if (ctx->rank != 0) return HK_CONTINUE;
  return tr__cb_dir_ready(ctx, s->dirpath, "the checkpoint of a failure could not be saved");
}
static hk_signal tr__oec_train_start(hk_ctx *ctx, void *user) {
  tr__oec *s = (tr__oec *)user;
  (void)ctx;
  s->training = 1;
  tr__oec_default_dir(s); /* the loggers opened the run's directory at setup: ckpt_path says where, from now */
  return HK_CONTINUE;
}
static hk_signal tr__oec_over(hk_ctx *ctx, void *user) { (void)ctx; ((tr__oec *)user)->training = 0; return HK_CONTINUE; }
static hk_signal tr__oec_exception(hk_ctx *ctx, void *user) {
  tr__oec *s = (tr__oec *)user;
  tr_run *run = s->run;
  char why[600];
  tr_err e;
  if (!s->training || run->running != HK_STAGE_FIT) return HK_CONTINUE;
  s->training = 0;
  why[0] = 0;
  tr__oec_default_dir(s);
  if (tr__mkdirs(s->dirpath) != 0) {
    tr__msg(why, sizeof why, "cannot create the directory '%s': %s", s->dirpath, strerror(errno));
    e = TR_ERR_IO;
  } else e = tr__run_checkpoint_to(s->reg, ctx, s->path, why, sizeof why); /* the loop's own save, when it gave one */
  s->pub.last_error = e;
  if (e) {
    if (s->verbose) tr__run_say(run, ctx, "on_exception_checkpoint", "could not save '%s': %s", s->path, why);
    return HK_CONTINUE; /* the run has failed already; its own error stands */
  }
  s->pub.saved++;
  s->pub.saved_step = ctx->global_step;
  if (s->verbose)
    tr__run_say(run, ctx, "on_exception_checkpoint", "the run failed (%s); saved its state after step %lld to '%s' "
                "(resume from it)", ctx->abort_reason ? ctx->abort_reason : "interrupted", (long long)ctx->global_step, s->path);
  return HK_CONTINUE;
}
static tr_err tr__oec_make(hk_registry *reg, const tr_on_exception_checkpoint_desc *d, hk_handle *out, tr__why *w) {
  tr__oec *s;
  hk_callback cb;
  const char *name;
  if (!d) return tr__bad(w, "on_exception_checkpoint: desc is NULL");
  name = d->filename ? d->filename : "on_exception";
  if (!name[0] || strchr(name, '/'))
    return tr__bad(w, "on_exception_checkpoint: filename '%s' must be a file name without '/' (\".ckpt\" is added)", name);
  if (strlen(name) + 5 > TR__NAME_MAX) /* known now, not when the run fails and the save cannot be made */
    return tr__bad(w, "on_exception_checkpoint: filename '%.40s...' is %zu bytes: with \".ckpt\" longer than the %d bytes a file "
                   "name can have; shorten it", name, strlen(name), TR__NAME_MAX);
  s = (tr__oec *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "on_exception_checkpoint: out of memory"), TR_ERR_NOMEM;
  s->dir_default = !d->dirpath || !d->dirpath[0]; /* not given (NULL, or "": a spec's default) */
  if (!(s->name = tr__strdup(name)) || tr__oec_paths(s, s->dir_default ? "checkpoints" : d->dirpath)) {
    tr__oec_destroy(s);
    return tr__bad(w, "on_exception_checkpoint: out of memory"), TR_ERR_NOMEM;
  }
  s->run = tr_run_get(reg);
  s->reg = reg;
  tr__run_ckpt_dir(s->run, s->dir_default ? NULL : s->dirpath); /* where resume "auto" looks */
  s->verbose = tr__flag(d->verbose, 1);
  s->pub.saved_step = -1;
  memset(&cb, 0, sizeof cb);
  cb.name = "on_exception_checkpoint";
  cb.user = s;
  cb.on_fit_start = tr__oec_fit_start;
  cb.on_train_start = tr__oec_train_start;
  cb.on_train_end = tr__oec_over; /* the fit got through: a later failure (on_fit_end, teardown) has nothing new */
  cb.on_exception = tr__oec_exception;
  cb.destroy = tr__oec_destroy;
  return tr__cb_register(reg, &cb, -20, out, w); /* first of on_exception: the state before other handlers change it */
}
TR__PUBLIC_OF(tr_on_exception_checkpoint, oec)
TR__FACTORY_OF(oec, tr_on_exception_checkpoint_desc, TR_ON_EXCEPTION_CHECKPOINT_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
