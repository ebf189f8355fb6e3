/* train/callbacks/model_checkpoint.h - model_checkpoint. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_MODEL_CHECKPOINT_H /* part */
#define TRAIN_MODEL_CHECKPOINT_H /* part */
#include "../battery.h" /* part */
#include "../safetensors.h" /* part */

TR__C_BEGIN /* part */
/* ---- model_checkpoint (Lightning's ModelCheckpoint) -----------------------------------------------
   At each save point (every_n_epochs, every_n_train_steps, train_time_interval) it picks a file name and
   asks the loop to save there (hk_request_checkpoint); the bookkeeping (top-k, best, last) is updated
   before the save, so the state stored in that very file already counts it. Files it replaces are deleted
   only in on_checkpoint_saved of the new file, and only files it writes (its dirpath, its names, regular
   files), whatever a loaded state lists. Names are claimed on disk when picked, so two processes with one
   dirpath never share a name. NaN is never best. Save points, top-k, where, file names, save_last, a
   hand-written loop, save_safetensors and async_save in full: docs/callbacks.md ("model_checkpoint in
   detail") in the hooks.h repository. */
typedef enum tr_save_last { TR_SAVE_LAST_NO = 0, TR_SAVE_LAST_YES, TR_SAVE_LAST_LINK } tr_save_last;

#define TR_MODEL_CHECKPOINT_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING,   const char *, dirpath,                 "",               NULL, "the directory, created (with parents) when missing; " \
    "not given or empty: the run directory's checkpoints/ (save_dir/name/version_N/checkpoints, as Lightning) when a logger made " \
    "one (or tr_run_dir gave it) by the fit's start, else ./checkpoints") \
  X(STRING,   const char *, filename,                "{epoch}-{step}", NULL, "the file name template without .ckpt (not empty), " \
    "e.g. {epoch}-{val/loss:.2f}") \
  X(STRING,   const char *, monitor,                 "",      NULL,  "the metric that ranks checkpoints (empty: none; every save is the newest)") \
  X(CHOICE,   tr_mode,      mode,                    "min",   "min|max", "which direction is better") \
  X(INT_ZERO, int,          save_top_k,              "1",     NULL,  "keep the k best files; -1 all, 0 none (only last)") \
  X(INT,      int,          keep_last_n,             "0",     NULL,  "> 0: also keep the n newest files it saved, whatever " \
    "their rank (HF's save_total_limit); they go once older and out of the top k") \
  X(INT,      int,          keep_every_n,            "0",     NULL,  "> 0: keep every n-th file it saves for good (the n-th, " \
    "2n-th, ...: never removed)") \
  X(CHOICE,   tr_save_last, save_last,               "false", "false|true|link", "also write last.ckpt (or link it)") \
  X(INT,      int64_t,      every_n_train_steps,     "0",     NULL,  "> 0: save every n optimizer steps") \
  X(INT_ZERO, int64_t,      every_n_epochs,          "1",     NULL,  "save every n epochs; 0: never by epoch (the default, 1, " \
    "only while no other trigger is given)") \
  X(DOUBLE,   double,       train_time_interval,     "0",     NULL,  "> 0: save when this many seconds passed since the last check") \
  X(AUTO,     int,          save_on_train_epoch_end, "auto",  NULL,  "epoch saves: true at on_train_epoch_end, false at " \
    "on_validation_end; auto: as early_stopping's check_on_train_epoch_end") \
  X(TRI,      int,          auto_insert_metric_name, "true",  NULL,  "{val/loss} -> val_loss=...") \
  X(TRI,      int,          enable_version_counter,  "true",  NULL,  "-v1, -v2 ... on name collisions") \
  X(BOOL,     int,          verbose,                 "false", NULL,  "print every save and eviction") \
  X(BOOL,     int,          save_safetensors,        "false", NULL,  "also write <name>.safetensors (the model's tensors, " \
    "F32, metadata step and epoch) beside each .ckpt it keeps, removed with it") \
  X(BOOL,     int,          async_save,              "false", NULL,  "the loop writes its files in the background (the " \
    "step copies the state; a thread writes, fsyncs and renames)") \
  X(C_ONLY,   tr_clock_fn,  clock,                   NULL,    NULL,  "seconds, for train_time_interval; NULL = a monotonic clock") \
  X(C_ONLY,   void *,       clock_user,              NULL,    NULL,  "clock's argument")
typedef struct tr_model_checkpoint_desc { TR_MODEL_CHECKPOINT_PARAMS(TR__FIELD) } tr_model_checkpoint_desc;

typedef struct tr_model_checkpoint_state { /* in checkpoints (all of it; only best_model_path when
                                              the checkpoint's dirpath differs, as Lightning) */
  const char *dirpath;
  const char *best_model_path;  /* "" until a save; without a monitor the newest file */
  double best_model_score;      /* NaN until a save with a monitored value */
  const char *kth_best_model_path; /* the worst kept file once k are kept (-1: always; "" before, or no monitor) */
  double kth_value;
  const char *last_model_path;  /* save_last's file ("" until written) */
  double current_score;         /* the value at the newest save */
  int n_best_k;                 /* best_k_models: path -> value, in the order they were saved (0 without a monitor) */
  const char *const *best_k_paths;
  const double *best_k_scores;
  int64_t last_global_step_saved; /* -1 = none */
} tr_model_checkpoint_state;

TRAIN_API tr_err tr_model_checkpoint(hk_registry *reg, const tr_model_checkpoint_desc *d, hk_handle *out);
TRAIN_API const tr_model_checkpoint_state *tr_model_checkpoint_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- model_checkpoint ----------------------------------------------------------------------------- */
typedef struct tr__mc {
  tr_model_checkpoint_state pub;
  tr_run *run;          /* the registry's run: what the loop says (train/run.h) */
  char *dirpath, *filename, *monitor;
  int dir_default;              /* dirpath was not given: the run's directory's checkpoints/ once it has one */
  int rank;                     /* ctx->rank at setup */
  tr_mode mode;
  int top_k;                    /* -1 all, 0 none, k */
  tr_save_last save_last;
  int64_t every_steps, every_epochs;
  double every_seconds;
  int epoch_flag, at_epoch_end, auto_insert, versions, verbose;
  int st;                       /* save_safetensors */
  int64_t st_epoch, st_step;    /* the save point's, for the sidecars' metadata (the save may come after the epoch's end) */
  double (*clock)(void *);
  void *clock_user;
  double last_time_checked;
  int deferred;                 /* a step/time save waits for the next on_validation_end */
  int val_ran, warned;          /* this fit: a validation has run; the missing-metric warning was given */
  int *pat;                     /* the names it makes, as a pattern (tr__glob) */
  size_t npat;
  int warned_stage;             /* said once that ctx->stage is unset */
  /* best_k_models, in insertion order; a NaN value is kept as NaN and ranks as the worst */
  char **paths;
  double *scores;
  int n, cap;
  char *best, *kth, *last, *newest; /* pub's strings; newest: the newest file saved (save_last's link target) */
  /* requested, not yet on disk: the file, the one it replaces; the last file, the one it replaces */
  char *want, *evict, *want_last, *old_last;
  char *spent;                  /* the last file just saved: ctx->path points at it while on_checkpoint_saved runs */
  int64_t want_step, newest_step; /* the global_step `want` / `newest` hold (-1: not known) */
  /* retention (keep_last_n, keep_every_n): files held beyond the top k, in the order saved */
  int keep_last, keep_every;
  int64_t n_saved;              /* files of `filename` this callback has saved (the n-th is kept for good when keep_every divides n) */
  char **recent;                /* the keep_last newest, oldest first */
  int n_recent;
  char **forever;               /* every keep_every-th */
  int n_forever, cap_forever;
  char *retire;                 /* pushed out of recent by `want`: removed once want is on disk, unless held */
  int link_after_want;          /* make the last link once `want` is on disk */
  char buf[TR__CB_MAX_STR];     /* names are rendered here (no allocation but the kept paths) */
} tr__mc;

static int tr__mc_default_dir(tr__mc *s);
static void tr__mc_sync(tr__mc *s) { /* point the public view at the current values */
  s->pub.dirpath = s->dirpath;
  s->pub.best_model_path = s->best ? s->best : "";
  s->pub.kth_best_model_path = s->kth ? s->kth : "";
  s->pub.last_model_path = s->last ? s->last : "";
  s->pub.n_best_k = s->n;
  s->pub.best_k_paths = (const char *const *)s->paths;
  s->pub.best_k_scores = s->scores;
}

static void tr__mc_destroy(void *user) {
  tr__mc *s = (tr__mc *)user;
  int i;
  if (!s) return;
  for (i = 0; i < s->n; i++) free(s->paths[i]);
  for (i = 0; i < s->n_recent; i++) free(s->recent[i]);
  for (i = 0; i < s->n_forever; i++) free(s->forever[i]);
  free(s->paths);
  free(s->scores);
  free(s->recent);
  free(s->forever);
  free(s->retire);
  free(s->dirpath); free(s->filename); free(s->monitor);
  free(s->best); free(s->kth); free(s->last); free(s->newest);
  free(s->want); free(s->evict); free(s->want_last); free(s->old_last);
  free(s->pat); free(s->spent);
  free(s);
}

/* -- file name templates: {name} or {name:fmt}, fmt = [0][width][.precision][f|e|g|d] -- */
typedef struct tr__field { const char *key; size_t key_len; int zero, width, prec; char type; } tr__field;

/* Parse the field at p ('{'); returns the position after '}', or NULL with a reason. */
static const char *tr__field_parse(const char *p, tr__field *f, const char **why) {
  const char *q = p + 1, *end;
  memset(f, 0, sizeof *f);
  f->prec = -1;
  f->key = q;
  while (*q && *q != '}' && *q != ':' && *q != '{') q++;
  f->key_len = (size_t)(q - f->key);
  if (*q == '{') { *why = "a '{' inside a field"; return NULL; }
  if (!*q) { *why = "a '{' without its '}'"; return NULL; }
  if (f->key_len == 0) { *why = "an empty field name"; return NULL; }
  if (*q == '}') return q + 1;
  end = strchr(q, '}');
  if (!end) { *why = "a '{' without its '}'"; return NULL; }
  q++; /* the format spec */
  if (*q == '0') { f->zero = 1; q++; }
  while (q < end && *q >= '0' && *q <= '9') { f->width = f->width * 10 + (*q - '0'); q++; if (f->width > 64) break; }
  if (q < end && *q == '.') {
    q++;
    if (q == end || *q < '0' || *q > '9') { *why = "a '.' without a precision in the format"; return NULL; }
    f->prec = 0;
    while (q < end && *q >= '0' && *q <= '9') { f->prec = f->prec * 10 + (*q - '0'); q++; if (f->prec > 30) break; }
  }
  if (q < end && strchr("fegd", *q)) f->type = *q++;
  if (q != end || f->width > 64 || f->prec > 30) { *why = "a format this library cannot render (valid: [0][width][.precision][f|e|g|d], e.g. .2f)"; return NULL; }
  return end + 1;
}

/* Check a template; 0 if fine, else a message in w. */
static int tr__template_check(const char *tpl, tr__why *w) {
  const char *p = tpl, *why = NULL;
  tr__field f;
  size_t literal = 0; /* the bytes every name has whatever the fields render */
  while (*p) {
    if (*p == '/') return tr__bad(w, "model_checkpoint: filename '%s' contains '/': put directories in dirpath", tpl), -1;
    if (*p == '}') return tr__bad(w, "model_checkpoint: filename '%s' has a '}' without its '{' (at offset %d)", tpl, (int)(p - tpl)), -1;
    if (*p != '{') { p++; literal++; continue; }
    if (!(p = tr__field_parse(p, &f, &why)) || (f.type == 'd' && f.prec >= 0))
      return tr__bad(w, "model_checkpoint: filename '%s' is not a valid template: %s; write fields as {epoch}, {step}, "
                     "{val/loss} or {val/loss:.2f}", tpl, why ? why : "'d' takes no precision"), -1;
  }
  if (literal + 5 > TR__NAME_MAX) /* known now, not at the first save (ENAMETOOLONG) */
    return tr__bad(w, "model_checkpoint: filename '%.40s...' (%zu bytes without its fields) makes file names longer than the %d "
                   "bytes a file name can have, with \".ckpt\"; shorten it", tpl, literal, TR__NAME_MAX), -1;
  return 0;
}

/* Python's str() of a float, near enough: the shortest digits that read back the same. */
static void tr__repr(char *out, size_t cap, double v) {
  int p;
  if (!hk_is_finite(v)) { snprintf(out, cap, "%s", v != v ? "nan" : v > 0 ? "inf" : "-inf"); return; }
  for (p = 1; p <= 17; p++) {
    snprintf(out, cap, "%.*g", p, v);
    if (strtod(out, NULL) == v) break;
  }
  if (!strpbrk(out, ".e")) { size_t n = strlen(out); if (n + 2 < cap) memcpy(out + n, ".0", 3); }
}

static void tr__field_render(char *out, size_t cap, const tr__field *f, int is_int, int64_t i, double v) {
  char spec[32];
  if (!is_int && !hk_is_finite(v) && f->type != 'd') { tr__repr(out, cap, v); return; }
  if (f->type == 'd' || (is_int && !f->type && f->prec < 0)) {
    long long x = is_int ? (long long)i : hk_is_finite(v) && fabs(v) < 9e18 ? (long long)floor(v + 0.5) : 0;
    snprintf(spec, sizeof spec, "%%%s%dlld", f->zero ? "0" : "", f->width);
    snprintf(out, cap, spec, x);
  } else if (!f->type && f->prec < 0 && !f->width) {
    tr__repr(out, cap, v);
  } else {
    snprintf(spec, sizeof spec, "%%%s%d.%d%c", f->zero ? "0" : "", f->width, f->prec < 0 ? 6 : f->prec, f->type ? f->type : 'g');
    snprintf(out, cap, spec, is_int ? (double)i : v);
  }
}

/* Render tpl with the current epoch, step and metrics into s->buf (without directory or extension). */
static void tr__mc_render(tr__mc *s, hk_ctx *ctx, const char *tpl) {
  const char *p = tpl, *why;
  size_t len = 0, cap = sizeof s->buf - 64; /* room for "-vN.ckpt" and the directory is added later */
  while (*p && len < cap) {
    tr__field f;
    char key[256], val[128];
    const char *next;
    int is_int = 0;
    int64_t iv = 0;
    double dv = 0;
    size_t k;
    if (*p != '{') { s->buf[len++] = *p++; continue; }
    next = tr__field_parse(p, &f, &why);
    if (!next) break; /* checked at construction */
    k = f.key_len < sizeof key - 1 ? f.key_len : sizeof key - 1;
    memcpy(key, f.key, k);
    key[k] = 0;
    if (!strcmp(key, "epoch")) { is_int = 1; iv = ctx->epoch; }
    else if (!strcmp(key, "step")) { is_int = 1; iv = ctx->global_step; }
    else if (!hk_metric_get(ctx, key, &dv)) { is_int = 1; iv = 0; } /* missing: 0, as Lightning */
    tr__field_render(val, sizeof val, &f, is_int, iv, dv);
    if (s->auto_insert) {
      size_t j;
      for (j = 0; j < k && len < cap; j++) s->buf[len++] = key[j] == '/' ? '_' : key[j];
      if (len < cap) s->buf[len++] = '=';
    }
    for (k = 0; val[k] && len < cap; k++) s->buf[len++] = val[k] == '/' ? '_' : val[k];
    p = next;
  }
  s->buf[len] = 0;
}

/* A name another hook queued at this save point (ctx->checkpoint_paths) is taken although it is not
   on disk yet: two model_checkpoints in one directory never claim one file. */
static int tr__mc_queued(const hk_ctx *ctx, const char *path) {
  int i;
  for (i = 0; i < ctx->n_checkpoint_paths && i < HK_MAX_CHECKPOINT_PATHS; i++)
    if (ctx->checkpoint_paths[i] && !strcmp(ctx->checkpoint_paths[i], path)) return 1;
  return 0;
}

/* Take a free name on disk for this process: rank 0 (the one that writes) creates it exclusively, an
   empty file its save replaces by a rename, so that another process with the same dirpath (two runs
   started together) finds it taken even before the checkpoint is written; any other error is left to
   the save, which says it. Other ranks write nothing: for them a name is free when it is missing or
   empty (rank 0's claim at this save point), so they name files as rank 0 does. 1: this name. */
static int tr__mc_claim(const hk_ctx *ctx, const char *path) {
#ifdef TR__POSIX
  struct stat st;
  if (ctx->rank == 0) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | TR__O_NOFOLLOW | TR__O_CLOEXEC, 0644);
    if (fd >= 0) { close(fd); return 1; }
    return errno != EEXIST;
  }
  return tr__lstat(path, &st) != 0 || (S_ISREG(st.st_mode) && st.st_size == 0);
#else
  (void)ctx;
  return !tr__file_exists(path);
#endif
}
/* A claim no save replaced (the run failed first): removed at teardown, when nothing can write it any
   more, or once the save that was to replace it has failed (a background write collected at the next
   save point). Only an empty regular file: a checkpoint is never empty. 1: removed. */
static int tr__mc_unclaim(const hk_ctx *ctx, const char *path) {
#ifdef TR__POSIX
  struct stat st;
  return path && path[0] && ctx->rank == 0 && tr__lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0 &&
         remove(path) == 0;
#else
  (void)ctx; (void)path;
  return 0;
#endif
}

static int tr__mc_owned(const tr__mc *s, const char *path);
/* dirpath/<rendered>[-vN].ckpt: a version while the name is taken on disk (tr__mc_claim; `reuse`, the
   file this save replaces, when that is still a file of its own, is not taken), or while another hook
   queued it at this save point (even without the counter). Without the counter the name is used as it
   is (Lightning overwrites). */
static char *tr__mc_path(tr__mc *s, const hk_ctx *ctx, const char *reuse) {
  size_t need = strlen(s->dirpath) + strlen(s->buf) + 32;
  char *path = (char *)malloc(need);
  int v;
  if (!path) return NULL;
  snprintf(path, need, "%s/%s.ckpt", s->dirpath, s->buf);
  for (v = 1; v < 1000000; v++) {
    if (!tr__mc_queued(ctx, path) &&
        (!s->versions || (reuse && !strcmp(reuse, path) && tr__mc_owned(s, path) == 0) || tr__mc_claim(ctx, path)))
      break;
    snprintf(path, need, "%s/%s-v%d.ckpt", s->dirpath, s->buf, v);
  }
  return path;
}

/* -- which files are its own: the template with any text for each field -- */
#define TR__GLOB_ONE (-1) /* any one character */
#define TR__GLOB_ANY (-2) /* any run of characters */
static int tr__glob(const int *p, size_t np, const char *s, size_t ns) { /* O(np * ns): one star to go back to */
  size_t i = 0, j = 0, star = (size_t)-1, mark = 0;
  while (j < ns) {
    if (i < np && (p[i] == TR__GLOB_ONE || p[i] == (int)(unsigned char)s[j])) { i++; j++; }
    else if (i < np && p[i] == TR__GLOB_ANY) { star = i++; mark = j; }
    else if (star != (size_t)-1) { i = star + 1; j = ++mark; }
    else return 0;
  }
  while (i < np && p[i] == TR__GLOB_ANY) i++;
  return i == np;
}
/* The template as a pattern: its text, and per field "key=" (auto_insert_metric_name, '/' as '_') and
   one or more characters (whatever the field renders to). NULL when out of memory. */
static int *tr__mc_pattern(const char *tpl, int auto_insert, size_t *n) {
  int *p = (int *)malloc((2 * strlen(tpl) + 2) * sizeof *p); /* "{k}" (k + 2 chars) gives k + 3 tokens */
  size_t len = 0, j;
  const char *q = tpl, *why = NULL;
  if (!p) return NULL;
  while (*q) {
    tr__field f;
    const char *next;
    if (*q != '{') { p[len++] = (unsigned char)*q++; continue; }
    if (!(next = tr__field_parse(q, &f, &why))) break; /* checked at construction */
    for (j = 0; auto_insert && j < f.key_len; j++) p[len++] = f.key[j] == '/' ? '_' : (unsigned char)f.key[j];
    if (auto_insert) p[len++] = '=';
    p[len++] = TR__GLOB_ONE;
    p[len++] = TR__GLOB_ANY;
    q = next;
  }
  *n = len;
  return p;
}
/* "-v<digits>" ends name[0..n): the length without it, else n */
static size_t tr__strip_version(const char *name, size_t n) {
  size_t d = n;
  while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') d--;
  return d < n && d >= 2 && name[d - 1] == 'v' && name[d - 2] == '-' ? d - 2 : n;
}
static int tr__is_last_name(const char *name, size_t n) { n = tr__strip_version(name, n); return n == 4 && !memcmp(name, "last", 4); }

/* Is path a file this callback writes, that it may delete? Inside dirpath (no further directory), its
   naming (the template or last, -vN, .ckpt), and a regular file (a symlink only as save_last's link).
   0: yes; 1: not its name or place; 2: not a regular file; 3: not there. */
static int tr__mc_owned(const tr__mc *s, const char *path) {
  size_t d = strlen(s->dirpath), n;
  const char *base = path + d + 1;
  int last;
  if (strncmp(path, s->dirpath, d) != 0 || path[d] != '/' || !*base || strchr(base, '/')) return 1;
  n = strlen(base);
  if (n <= 5 || strcmp(base + n - 5, ".ckpt") != 0) return 1;
  n -= 5;
  last = s->save_last != TR_SAVE_LAST_NO && tr__is_last_name(base, n);
  if (!last && !(s->pat && (tr__glob(s->pat, s->npat, base, n) || tr__glob(s->pat, s->npat, base, tr__strip_version(base, n)))))
    return 1;
#ifdef TR__POSIX
  {
    struct stat st;
    if (tr__lstat(path, &st) != 0) return 3;
    if (S_ISREG(st.st_mode)) return 0;
#  ifdef S_ISLNK
    if (last && s->save_last == TR_SAVE_LAST_LINK && S_ISLNK(st.st_mode)) return 0;
#  endif
    return 2;
  }
#else
  return tr__file_exists(path) ? 0 : 3;
#endif
}

/* The value kept for ranking: NaN counts as the worst (Lightning: NaN -> +-inf). */
static double tr__mc_rank(const tr__mc *s, double v) { return v != v ? tr__worst(s->mode) : v; }

/* With a monitor: best = first best non-NaN (none: ""), kth = first worst once k are kept (with
   save_top_k = -1 always: Lightning names the worst kept file); Python's min/max order. Without one,
   best is the newest file (set by the save) and there is no k-th. */
static void tr__mc_rerank(tr__mc *s) {
  int i, b = -1, k = -1;
  if (!s->monitor) { tr__mc_sync(s); return; }
  for (i = 0; i < s->n; i++) {
    double v = s->scores[i];
    if (v == v && (b < 0 || tr__better(s->mode, v, s->scores[b]))) b = i;
    if (k < 0 || tr__better(s->mode, tr__mc_rank(s, s->scores[k]), tr__mc_rank(s, v))) k = i;
  }
  tr__set_str(&s->best, b >= 0 ? s->paths[b] : "");
  s->pub.best_model_score = b >= 0 ? s->scores[b] : NAN;
  if (k >= 0 && (s->top_k < 0 || (s->top_k > 0 && s->n >= s->top_k))) {
    tr__set_str(&s->kth, s->paths[k]);
    s->pub.kth_value = tr__mc_rank(s, s->scores[k]);
  } else {
    tr__set_str(&s->kth, "");
    s->pub.kth_value = tr__worst(s->mode);
  }
  tr__mc_sync(s);
}

/* Adds path (owned) with its score; a path already listed (a fixed name without the version counter)
   keeps its place and takes the new score and string: one entry per file, as Lightning's dict. */
static int tr__mc_push(tr__mc *s, char *path, double score) {
  int i;
  for (i = 0; i < s->n; i++)
    if (!strcmp(s->paths[i], path)) {
      free(s->paths[i]);
      s->paths[i] = path;
      s->scores[i] = score;
      return 0;
    }
  if (s->n == s->cap) {
    int cap = s->cap ? s->cap * 2 : 4;
    char **p = (char **)realloc(s->paths, (size_t)cap * sizeof *p);
    double *d;
    if (!p) return -1;
    s->paths = p;
    d = (double *)realloc(s->scores, (size_t)cap * sizeof *d);
    if (!d) return -1;
    s->scores = d;
    s->cap = cap;
  }
  s->paths[s->n] = path;
  s->scores[s->n++] = score;
  return 0;
}
static char *tr__mc_pop(tr__mc *s, const char *path) { /* removes path from best_k; returns it (owned) */
  int i;
  for (i = 0; i < s->n; i++)
    if (!strcmp(s->paths[i], path)) {
      char *p = s->paths[i];
      memmove(s->paths + i, s->paths + i + 1, (size_t)(s->n - i - 1) * sizeof *s->paths);
      memmove(s->scores + i, s->scores + i + 1, (size_t)(s->n - i - 1) * sizeof *s->scores);
      s->n--;
      return p;
    }
  return NULL;
}

/* -- save_safetensors: <name>.safetensors beside <name>.ckpt -- */
static int tr__mc_link(const hk_ctx *ctx, const char *target, const char *link_path);
#define TR__MC_ST_MARK "train.h model_checkpoint"
static char *tr__mc_st_path(const char *ckpt) { /* NULL: out of memory, or not a .ckpt */
  size_t n = ckpt ? strlen(ckpt) : 0;
  char *p;
  if (n < 5 || strcmp(ckpt + n - 5, ".ckpt") || !(p = (char *)malloc(n + 8))) return NULL;
  memcpy(p, ckpt, n - 5);
  memcpy(p + n - 5, ".safetensors", 13);
  return p;
}
/* What is at the sidecar of ckpt: 0 nothing; 1 one this callback wrote (a file of its naming and place, a
   regular file or save_last's link, with its mark in the metadata); -1 anything else. */
static int tr__mc_st_whose(const tr__mc *s, const char *ckpt, const char *st) {
  tr_safetensors_meta m;
  const char *by;
  int ours;
#ifdef TR__POSIX
  struct stat sb;
  size_t n = strlen(s->dirpath);
  int last = s->save_last == TR_SAVE_LAST_LINK && !strncmp(ckpt, s->dirpath, n) && ckpt[n] == '/' &&
             tr__is_last_name(ckpt + n + 1, strlen(ckpt + n + 1) - 5);
  if (tr__lstat(st, &sb) != 0) return 0;
  if (!S_ISREG(sb.st_mode) && !(last && TR__S_ISLNK(sb.st_mode))) return -1;
#else
  if (!tr__file_exists(st)) return 0;
#endif
  if (tr__mc_owned(s, ckpt) == 1 || tr__st_read_meta(st, &m) != 0) return -1;
  by = tr_safetensors_meta_get(&m, "written_by");
  ours = by && !strcmp(by, TR__MC_ST_MARK);
  tr_safetensors_meta_free(&m);
  return ours ? 1 : -1;
}
/* The sidecar of ckpt goes with it: only one this callback wrote. */
static void tr__mc_st_remove(tr__mc *s, hk_ctx *ctx, const char *ckpt) {
  char *st;
  if (!s->st || ctx->rank != 0 || !(st = tr__mc_st_path(ckpt))) return;
  if (tr__mc_st_whose(s, ckpt, st) == 1 && remove(st) == 0 && s->verbose) tr__run_say_on(s->run, ctx, 1, "model_checkpoint", "removed %s", st);
  free(st);
}
/* on_save_checkpoint: the sidecar of the file being saved, from the parameters of this very save. */
static hk_signal tr__mc_st_save(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  char *st, step[32], epoch[32], why[600];
  const char *base, *meta[9];
  int whose;
  tr_err e;
  if (ctx->rank != 0 || !ctx->path || !((s->want && !strcmp(ctx->path, s->want)) || (s->want_last && !strcmp(ctx->path, s->want_last))))
    return HK_CONTINUE;
  if (!(st = tr__mc_st_path(ctx->path))) return hk_fail(ctx, "out of memory");
  whose = tr__mc_st_whose(s, ctx->path, st);
  if (whose < 0) {
    tr__run_say(s->run, ctx, "model_checkpoint", "not writing '%s': a file this callback did not write is there", st);
    free(st);
    return HK_CONTINUE;
  }
  snprintf(step, sizeof step, "%lld", (long long)s->st_step);
  snprintf(epoch, sizeof epoch, "%lld", (long long)s->st_epoch);
  base = strrchr(ctx->path, '/');
  meta[0] = "written_by"; meta[1] = TR__MC_ST_MARK; meta[2] = "step"; meta[3] = step; meta[4] = "epoch"; meta[5] = epoch;
  meta[6] = "checkpoint"; meta[7] = base ? base + 1 : ctx->path; meta[8] = NULL;
  e = tr_safetensors_save(st, ctx->params, ctx->params ? ctx->n_tensors : 0, NULL, meta, why, sizeof why);
  free(st);
  if (e) return hk_fail(ctx, "save_safetensors: %s", why);
  return HK_CONTINUE;
}
/* save_last=link: last.safetensors links to the sidecar of the file last.ckpt links to. */
static int tr__mc_st_link(tr__mc *s, const hk_ctx *ctx, const char *target, const char *link_path) {
  char *t, *l;
  int r = 0;
  if (!s->st || ctx->rank != 0) return 0;
  t = tr__mc_st_path(target);
  l = tr__mc_st_path(link_path);
  if (!t || !l) r = -1;
  else if (tr__file_exists(t) && tr__mc_st_whose(s, link_path, l) >= 0) r = tr__mc_link(ctx, t, l);
  free(t);
  free(l);
  return r;
}

/* Delete a file this callback wrote (tr__mc_owned: whatever a loaded state lists), unless it is `keep`
   or the checkpoint the fit resumed from. A top-k file that falls out of the top k (topk) is deleted
   even when the fit resumed from it: it stayed while it was among the k best, and the files that
   replaced it are on disk (Lightning never deletes the file it resumed from, so a resumed run with
   save_top_k=2 keeps 3 files for good). Other files (an old last, a copy the fit was handed) stay. */
static void tr__mc_remove(tr__mc *s, hk_ctx *ctx, const char *path, const char *keep, int topk) {
  tr_run *run = s->run;
  int why;
  if (!path || !path[0] || (keep && !strcmp(path, keep)) || ctx->rank != 0) return; /* files: rank 0's job */
  if (!topk && run && run->resume_from[0] && !strcmp(run->resume_from, path)) return;
  why = tr__mc_owned(s, path);
  if (why == 1 || why == 2)
    tr__run_say(run, ctx, "model_checkpoint", "not removing '%s': %s", path, why == 1 ? "not a file of this callback (its "
                "files are in its dirpath, named by its filename or last, ending in .ckpt)" : "not a regular file");
  if (why == 0 && remove(path) == 0 && s->verbose) tr__run_say_on(run, ctx, 1, "model_checkpoint", "removed %s", path);
  if (why == 0 || why == 3) tr__mc_st_remove(s, ctx, path);
}

/* -- retention: keep_last_n newest and every keep_every_n-th, beside the top k -- */
static int tr__mc_listed(char *const *list, int n, const char *path) {
  int i;
  for (i = 0; i < n; i++) if (!strcmp(list[i], path)) return 1;
  return 0;
}
/* Some rule keeps path: the top k (or, without a monitor, the newest), the newest keep_last_n, every keep_every_n-th. */
static int tr__mc_held(const tr__mc *s, const char *path) {
  return tr__mc_listed(s->paths, s->n, path) || (s->best && !strcmp(s->best, path)) ||
         tr__mc_listed(s->recent, s->n_recent, path) || tr__mc_listed(s->forever, s->n_forever, path);
}
/* `want` is picked (before its save, so that the state in that very file counts it, as the top k): it joins
   the newest, pushing out the oldest (s->retire: removed once want is on disk, unless held then), and, when
   its count says so, the kept-for-good. 0, or -1 out of memory. */
static int tr__mc_retain(tr__mc *s, const char *want) {
  char *a = s->keep_last ? tr__strdup(want) : NULL, *out = NULL;
  int i;
  if (s->keep_last && !a) return -1;
  s->n_saved++;
  if (s->keep_every && s->n_saved % s->keep_every == 0 && !tr__mc_listed(s->forever, s->n_forever, want)) {
    if (s->n_forever == s->cap_forever) {
      int cap = s->cap_forever ? 2 * s->cap_forever : 4;
      char **f = (char **)realloc(s->forever, (size_t)cap * sizeof *f);
      if (!f) { free(a); return -1; }
      s->forever = f;
      s->cap_forever = cap;
    }
    if (!(s->forever[s->n_forever] = tr__strdup(want))) { free(a); return -1; }
    s->n_forever++;
  }
  if (!a) return 0;
  for (i = 0; i < s->n_recent; i++) /* a name saved again (a fixed filename): it moves to the newest */
    if (!strcmp(s->recent[i], want)) { out = s->recent[i]; break; }
  if (!out && s->n_recent == s->keep_last) i = 0, out = s->recent[0];
  if (out) {
    memmove(s->recent + i, s->recent + i + 1, (size_t)(s->n_recent - i - 1) * sizeof *s->recent);
    s->n_recent--;
  }
  s->recent[s->n_recent++] = a;
  free(s->retire);
  s->retire = out && strcmp(out, want) ? out : NULL;
  if (!s->retire) free(out);
  return 0;
}

/* save_last as a link: a relative symlink next to its target, made under a new name (no file is
   replaced or followed) and renamed over link_path; a copy where that fails. */
static int tr__mc_link(const hk_ctx *ctx, const char *target, const char *link_path) {
  const char *slash = strrchr(target, '/');
  size_t n = strlen(link_path) + 64;
  char *tmp;
  int ok = 0;
  if (ctx->rank != 0) return 0; /* with several processes, rank 0 alone touches the files */
  if (!(tmp = (char *)malloc(n))) return -1;
#ifdef TR__POSIX
  {
    static unsigned counter;
    int tries;
    for (tries = 0; tries < 100 && !ok; tries++) { /* the name tr_save's stale-temporary sweep knows */
      snprintf(tmp, n, "%s.tmp.%ld.l%u", link_path, (long)getpid(), counter++);
      ok = symlink(slash ? slash + 1 : target, tmp) == 0;
      if (!ok && errno != EEXIST) break;
    }
  }
  if (!ok) { /* copy into a new temporary file */
    FILE *in = fopen(target, "rb");
    int fd = in ? tr__open_temp(link_path, tmp, n) : -1;
    char block[1 << 14];
    size_t got;
    ok = in && fd >= 0;
    while (ok && (got = fread(block, 1, sizeof block, in)) > 0) ok = write(fd, block, got) == (ssize_t)got;
    if (in && ferror(in)) ok = 0;
    if (in) fclose(in);
    if (fd >= 0 && close(fd) != 0) ok = 0;
    if (!ok && fd >= 0) remove(tmp);
    if (fd < 0) tmp[0] = 0;
  }
#else
  snprintf(tmp, n, "%s.link.tmp", link_path);
  {
    FILE *in = fopen(target, "rb"), *o = in ? fopen(tmp, "wb") : NULL;
    char block[1 << 14];
    size_t got;
    ok = in && o;
    while (ok && (got = fread(block, 1, sizeof block, in)) > 0) ok = fwrite(block, 1, got, o) == got;
    if (in && ferror(in)) ok = 0;
    if (in) fclose(in);
    if (o && fclose(o) != 0) ok = 0;
    if (ok) remove(link_path); /* rename does not replace files everywhere */
  }
#endif
  if (ok && rename(tmp, link_path) != 0) { ok = 0; remove(tmp); }
  free(tmp);
  return ok ? 0 : -1;
}

static hk_signal tr__mc_request(hk_ctx *ctx, const char *path) {
  hk_err e = hk_request_checkpoint(ctx, path);
  return e ? hk_fail(ctx, "cannot request a checkpoint at '%s': %s", path, hk_err_name(e)) : HK_CONTINUE;
}

/* The last file at this save point: a link to the file saved at this very step, else a save of its
   own (a link to an older file would not be the latest state). */
static hk_signal tr__mc_save_last(tr__mc *s, hk_ctx *ctx) {
  tr_run *run = s->run;
  char *path;
  int link;
  s->st_epoch = ctx->epoch;
  s->st_step = ctx->global_step;
  tr__mc_render(s, ctx, "last");
  path = tr__mc_path(s, ctx, s->last);
  if (!path) return hk_fail(ctx, "out of memory");
  if (s->last && s->last[0] && strcmp(s->last, path)) { free(s->old_last); s->old_last = tr__strdup(s->last); }
  tr__set_str(&s->last, path);
  tr__mc_sync(s);
  link = s->save_last == TR_SAVE_LAST_LINK &&
         (s->want ? s->want_step == ctx->global_step : s->newest && s->newest[0] && s->newest_step == ctx->global_step);
  if (link) {
    free(path);
    if (s->want) { s->link_after_want = 1; return HK_CONTINUE; } /* linked once the target is on disk */
    if (tr__mc_link(ctx, s->newest, s->last) != 0 || tr__mc_st_link(s, ctx, s->newest, s->last) != 0)
      return hk_fail(ctx, "cannot link %s to %s", s->last, s->newest);
    if (s->old_last) { tr__mc_remove(s, ctx, s->old_last, s->last, 0); free(s->old_last); s->old_last = NULL; }
    if (s->verbose) tr__run_say_on(run, ctx, 1, "model_checkpoint", "%s -> %s", s->last, s->newest);
    return HK_CONTINUE;
  }
  free(s->want_last);
  s->want_last = path;
  return tr__mc_request(ctx, path);
}

/* The monitored metric is missing at a save point that is not waiting for a validation: before the
   fit's first validation a warning (once) and no top-k file, after it a failure (Lightning's rule). */
static int tr__mc_missing(tr__mc *s, hk_ctx *ctx, hk_signal *sig) {
  if (s->val_ran) { *sig = tr__missing_metric(ctx, "model_checkpoint", s->monitor); return 1; }
  if (!s->warned) {
    s->warned = 1;
    tr__run_say_on(s->run, ctx, 1, "model_checkpoint", "the monitored metric '%s' is not set (at epoch %lld, step %lld); "
                "no validation has run yet, so this save point keeps no top-k file (once one has, a missing metric fails "
                "the run)", s->monitor, (long long)ctx->epoch, (long long)ctx->global_step);
  }
  return 0;
}

/* The claims of files whose on_checkpoint_saved never came (their save failed, or the run failed
   before it), removed: at teardown, and at a save point once the last one's background write has been
   collected (a failure there fails the run, and the next names would be picked over the old claims).
   A name whose claim is removed is forgotten, so that no later call removes a claim another process
   made of it since. */
static void tr__mc_drop_claims(tr__mc *s, hk_ctx *ctx) {
  if (s->link_after_want && tr__mc_unclaim(ctx, s->last)) s->link_after_want = 0; /* the link waited for want */
  if (tr__mc_unclaim(ctx, s->want)) {
    tr__mc_st_remove(s, ctx, s->want);
    free(s->want); s->want = NULL; s->link_after_want = 0;
    free(s->retire); s->retire = NULL; /* (what it pushed out stays: the run failed) */
  }
  if (tr__mc_unclaim(ctx, s->want_last)) { tr__mc_st_remove(s, ctx, s->want_last); free(s->want_last); s->want_last = NULL; }
}

/* One save point: top-k, then last. */
static hk_signal tr__mc_save(tr__mc *s, hk_ctx *ctx, int from_step) {
  tr_run *run = s->run;
  double cur = NAN;
  hk_signal sig = HK_CONTINUE;
  int saved = 0, have = 1;
  if (ctx->stage != HK_STAGE_FIT) return HK_CONTINUE;
  if (s->pub.last_global_step_saved == ctx->global_step) { if (!from_step) s->deferred = 0; return HK_CONTINUE; }
  if (s->monitor && !hk_metric_get(ctx, s->monitor, &cur)) {
    if (from_step) { s->deferred = 1; return HK_CONTINUE; } /* saved after the next validation */
    if (tr__mc_missing(s, ctx, &sig)) return sig;
    have = 0;
  }
  s->deferred = 0;
  s->st_epoch = ctx->epoch;
  s->st_step = ctx->global_step;
  /* a file of the last save point still being written: its on_checkpoint_saved (evictions, the link)
     comes first, so the decisions below see the files as they are */
  if (s->want || s->want_last) {
    tr__run_saves_settle(run, ctx, 1);
    tr__mc_drop_claims(s, ctx); /* a file still wanted now failed (the run fails): its empty claim goes */
  }
  if (tr__mkdirs(s->dirpath) != 0)
    return hk_fail(ctx, "cannot create the directory '%s': %s", s->dirpath, strerror(errno));
  if (s->top_k != 0 && have) {
    int k = s->top_k < 0 ? s->n + 1 : s->top_k;
    int ranked = !s->monitor || s->top_k < 0 || s->n < s->top_k || (cur == cur && tr__better(s->mode, cur, s->pub.kth_value));
    int take = ranked || s->keep_last || s->keep_every; /* retention keeps the newest whatever their rank */
    if (take) {
      char *evict = NULL, *path, *want;
      if (!s->monitor) { /* the newest is the best; save_top_k 1 replaces the previous one */
        if (s->top_k == 1 && s->best && s->best[0]) evict = tr__strdup(s->best);
      } else if (ranked && s->n == k && s->kth && s->kth[0]) evict = tr__mc_pop(s, s->kth);
      tr__mc_render(s, ctx, s->filename);
      path = tr__mc_path(s, ctx, evict);
      want = path ? tr__strdup(path) : NULL;
      if (!want || (s->monitor && ranked && tr__mc_push(s, path, cur))) { /* the list owns path from here */
        free(want); free(path); free(evict);
        return hk_fail(ctx, "out of memory");
      }
      if (!s->monitor) { free(s->best); s->best = path; } /* no best_k_models without a monitor (Lightning) */
      else if (!ranked) free(path);                       /* not in the top k: only retention holds it */
      if ((s->keep_last || s->keep_every) && tr__mc_retain(s, want)) { free(want); free(evict); return hk_fail(ctx, "out of memory"); }
      free(s->want);
      s->want = want;
      s->want_step = ctx->global_step;
      s->pub.current_score = cur;
      tr__mc_rerank(s);
      free(s->evict);
      s->evict = evict;
      s->link_after_want = 0;
      if (s->verbose) {
        if (s->monitor) tr__run_say_on(run, ctx, 1, "model_checkpoint", "epoch %lld, step %lld: '%s' reached %g (best %g), saving %s%s",
                                   (long long)ctx->epoch, (long long)ctx->global_step, s->monitor, cur, s->pub.best_model_score, want,
                                   ranked ? "" : " (not in the top k: kept as one of the newest)");
        else tr__run_say_on(run, ctx, 1, "model_checkpoint", "epoch %lld, step %lld: saving %s", (long long)ctx->epoch, (long long)ctx->global_step, want);
      }
      sig = tr__mc_request(ctx, s->want);
      saved = 1;
    } else if (s->verbose)
      tr__run_say_on(run, ctx, 1, "model_checkpoint", "epoch %lld, step %lld: '%s' was not in top %d", (long long)ctx->epoch,
                 (long long)ctx->global_step, s->monitor, s->top_k);
  }
  if (sig == HK_CONTINUE && s->save_last != TR_SAVE_LAST_NO) { sig = tr__mc_save_last(s, ctx); saved = 1; }
  if (saved) s->pub.last_global_step_saved = ctx->global_step;
  return sig;
}

/* What can be checked before training is: a monitor of validation metrics in a fit without validation
   data (nothing would ever set it), and a directory that cannot be made or written. */
static hk_signal tr__mc_fit_start(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  s->at_epoch_end = tr__at_epoch_end(s->run, s->epoch_flag);
  if (s->run && s->run->desc.epochs == TR_NO && s->at_epoch_end && s->every_epochs > 0)
    tr__run_say(s->run, ctx, "model_checkpoint", "saves every %lld epochs at on_train_epoch_end, which this loop never "
                "fires (tr_run_desc.epochs = TR_NO): set save_on_train_epoch_end=false to save at on_validation_end, "
                "or every_n_train_steps", (long long)s->every_epochs);
  s->val_ran = s->warned = s->deferred = 0;
  if (tr__mc_default_dir(s)) return hk_fail(ctx, "out of memory");
  if (s->monitor && s->run && s->run->desc.validation == TR_NO && tr__starts(s->monitor, "val/"))
    return hk_fail(ctx, "monitor '%s' is a validation metric, but this run never validates (no validation "
                   "data): nothing would set it; give the fit validation data, or monitor a metric training sets", s->monitor);
  if (ctx->rank != 0) return HK_CONTINUE; /* files: rank 0's job */
  return tr__cb_dir_ready(ctx, s->dirpath, "checkpoints could not be saved");
}
static hk_signal tr__mc_train_start(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  s->last_time_checked = tr__clock(s->clock, s->clock_user);
  (void)ctx;
  return HK_CONTINUE;
}
static int tr__mc_epoch_due(const tr__mc *s, const hk_ctx *ctx) { return s->every_epochs > 0 && (ctx->epoch + 1) % s->every_epochs == 0; }
/* The loop validates right after this batch (tr_run.validates_next: at this step, or at the epoch's end):
   a step or time save due now then waits for that validation's end, to be ranked on its value. */
static int tr__mc_val_follows(const tr__mc *s) { return s->run && s->run->validates_next; }
static hk_signal tr__mc_batch_end(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  int due = 0;
  tr__warn_stage(s->run, ctx, "model_checkpoint", &s->warned_stage);
  if (s->every_steps > 0) due = ctx->global_step > 0 && ctx->global_step % s->every_steps == 0;
  else if (s->every_seconds > 0) {
    double now = tr__clock(s->clock, s->clock_user);
    if (now - s->last_time_checked >= s->every_seconds) { due = 1; s->last_time_checked = now; }
  }
  if (!due || ctx->stage != HK_STAGE_FIT || s->pub.last_global_step_saved == ctx->global_step) return HK_CONTINUE;
  if (tr__mc_val_follows(s)) { s->deferred = 1; return HK_CONTINUE; }
  return tr__mc_save(s, ctx, 1);
}
static hk_signal tr__mc_epoch_end(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  tr__warn_stage(s->run, ctx, "model_checkpoint", &s->warned_stage);
  return s->at_epoch_end && tr__mc_epoch_due(s, ctx) ? tr__mc_save(s, ctx, 0) : HK_CONTINUE;
}
static hk_signal tr__mc_val_end(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  tr__warn_stage(s->run, ctx, "model_checkpoint", &s->warned_stage);
  if (ctx->stage != HK_STAGE_FIT) return HK_CONTINUE;
  s->val_ran = 1;
  if (s->deferred) return tr__mc_save(s, ctx, 0);
  return !s->at_epoch_end && tr__mc_epoch_due(s, ctx) ? tr__mc_save(s, ctx, 0) : HK_CONTINUE;
}
static hk_signal tr__mc_train_end(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  if (ctx->stage != HK_STAGE_FIT || s->save_last == TR_SAVE_LAST_NO || s->pub.last_global_step_saved == ctx->global_step)
    return HK_CONTINUE;
  s->pub.last_global_step_saved = ctx->global_step;
  return tr__mc_save_last(s, ctx);
}

/* A file is on disk: now, and only now, remove what it replaces. */
static hk_signal tr__mc_saved(hk_ctx *ctx, void *user) {
  tr__mc *s = (tr__mc *)user;
  if (!ctx->path) return HK_CONTINUE;
  if (s->want && !strcmp(ctx->path, s->want)) {
    if (s->retire && !tr__mc_held(s, s->retire)) tr__mc_remove(s, ctx, s->retire, s->want, 1);
    free(s->retire);
    s->retire = NULL;
    if (s->evict && !tr__mc_held(s, s->evict)) tr__mc_remove(s, ctx, s->evict, s->want, 1);
    free(s->evict);
    s->evict = NULL;
    free(s->newest);
    s->newest = s->want;
    s->newest_step = s->want_step;
    s->want = NULL;
    if (s->link_after_want && s->last) {
      s->link_after_want = 0;
      if (tr__mc_link(ctx, s->newest, s->last) != 0 || tr__mc_st_link(s, ctx, s->newest, s->last) != 0)
      return hk_fail(ctx, "cannot link %s to %s", s->last, s->newest);
      if (s->old_last) { tr__mc_remove(s, ctx, s->old_last, s->last, 0); free(s->old_last); s->old_last = NULL; }
    }
  } else if (s->want_last && !strcmp(ctx->path, s->want_last)) {
    if (s->old_last) { tr__mc_remove(s, ctx, s->old_last, s->want_last, 0); free(s->old_last); s->old_last = NULL; }
    free(s->spent); /* not freed yet: the other hooks of this event still read ctx->path */
    s->spent = s->want_last;
    s->want_last = NULL;
  }
  return HK_CONTINUE;
}

/* The default dirpath: the run directory's checkpoints/ (Lightning's version_N/checkpoints) once the
   run has a directory (a logger opened it at setup, or tr_run_dir gave it), else ./checkpoints. Looked
   at when a checkpoint is loaded and at on_fit_start, both after setup; fixed once it is the run's. */
static int tr__mc_default_dir(tr__mc *s) {
  const char *rd = s->run ? s->run->tr__p->dir : NULL;
  char *p;
  if (s->dir_default != 1 || !rd) return 0;
  if (!(p = tr__join(rd, "checkpoints"))) return -1;
  free(s->dirpath);
  s->dirpath = p;
  s->dir_default = 2;
  tr__mc_sync(s);
  return 0;
}
static hk_signal tr__mc_setup(hk_ctx *ctx, void *user) {
  ((tr__mc *)user)->rank = ctx->rank;
  return HK_CONTINUE;
}
static hk_signal tr__mc_teardown(hk_ctx *ctx, void *user) {
  tr__mc_drop_claims((tr__mc *)user, ctx);
  return HK_CONTINUE;
}

static int tr__mc_save_state(void *user, hk_bytes *out) {
  tr__mc *s = (tr__mc *)user;
  int i;
  int retains = s->keep_last || s->keep_every || s->n_saved;
  tr__put_u64(out, retains ? 2 : 1); /* version: 2 adds retention's lists (1 without: the same bytes as before it) */
  tr__put_str(out, s->dirpath);
  tr__put_str(out, s->best);
  tr__put_f64(out, s->pub.best_model_score);
  tr__put_str(out, s->kth);
  tr__put_f64(out, s->pub.kth_value);
  tr__put_str(out, s->last);
  tr__put_f64(out, s->pub.current_score);
  tr__put_i64(out, s->pub.last_global_step_saved);
  tr__put_str(out, s->want ? s->want : s->newest); /* a requested file is on disk by the time this is read */
  tr__put_u64(out, (uint64_t)s->n);
  for (i = 0; i < s->n; i++) { tr__put_str(out, s->paths[i]); tr__put_f64(out, s->scores[i]); }
  if (retains) {
    tr__put_i64(out, s->n_saved);
    tr__put_u64(out, (uint64_t)s->n_recent);
    for (i = 0; i < s->n_recent; i++) tr__put_str(out, s->recent[i]);
    tr__put_u64(out, (uint64_t)s->n_forever);
    for (i = 0; i < s->n_forever; i++) tr__put_str(out, s->forever[i]);
  }
  return out->failed ? -1 : 0;
}
/* *p under the directory from: under to now (a moved run directory's checkpoints/). -1 out of memory. */
static int tr__mc_rebase(char **p, const char *from, const char *to) {
  size_t n = strlen(from);
  char *moved;
  if (!*p || strncmp(*p, from, n) || (*p)[n] != '/') return 0;
  if (!(moved = tr__join(to, *p + n + 1))) return -1;
  free(*p);
  *p = moved;
  return 0;
}
static int tr__mc_load_state(void *user, hk_reader *in) {
  tr__mc *s = (tr__mc *)user;
  uint64_t version, n = 0, i;
  char *dir = NULL, *best = NULL, *kth = NULL, *last = NULL, *newest = NULL, **paths = NULL;
  double best_score, kth_value, current, *scores = NULL;
  int64_t step;
  int64_t n_saved = 0;
  uint64_t n_recent = 0, n_forever = 0;
  char **recent = NULL, **forever = NULL;
  int moved = 0;
  int ok = !tr__get_u64(in, &version) && (version == 1 || version == 2) && !tr__get_str(in, &dir) && !tr__get_str(in, &best) &&
           !tr__get_f64(in, &best_score) && !tr__get_str(in, &kth) && !tr__get_f64(in, &kth_value) &&
           !tr__get_str(in, &last) && !tr__get_f64(in, &current) && !tr__get_i64(in, &step) &&
           !tr__get_str(in, &newest) && !tr__get_u64(in, &n);
  if (!ok) hk_reject(in, "truncated, or a path longer than %d bytes or holding a NUL byte", TR__CB_MAX_STR);
  else if (step < -1 || step > TR__MAX_COUNT) /* as the LOOP counters */
    ok = hk_reject(in, "last_global_step_saved is %lld, outside -1..2^53", (long long)step) + 1;
  else if (n > (in->len - in->pos) / 12 || n >= INT_MAX)
    ok = hk_reject(in, "best_k_models has %llu entries, more than the %zu bytes left can hold", (unsigned long long)n, in->len - in->pos) + 1;
  if (ok) {
    paths = (char **)calloc((size_t)n + 1, sizeof *paths);
    scores = (double *)calloc((size_t)n + 1, sizeof *scores);
    ok = paths && scores;
    for (i = 0; ok && i < n; i++) ok = !tr__get_str(in, &paths[i]) && !tr__get_f64(in, &scores[i]);
    if (!ok) hk_reject(in, "best_k_models is truncated, or holds a path longer than %d bytes or with a NUL byte", TR__CB_MAX_STR);
  }
  if (ok && version == 2) { /* retention: the count saved, the newest, the kept-for-good */
    ok = !tr__get_i64(in, &n_saved) && n_saved >= 0 && n_saved <= TR__MAX_COUNT && !tr__get_u64(in, &n_recent) &&
         n_recent <= (in->len - in->pos) / 8 && (recent = (char **)calloc((size_t)n_recent + 1, sizeof *recent)) != NULL;
    for (i = 0; ok && i < n_recent; i++) ok = !tr__get_str(in, &recent[i]);
    ok = ok && !tr__get_u64(in, &n_forever) && n_forever <= (in->len - in->pos) / 8 && n_forever < INT_MAX &&
         (forever = (char **)calloc((size_t)n_forever + 1, sizeof *forever)) != NULL;
    for (i = 0; ok && i < n_forever; i++) ok = !tr__get_str(in, &forever[i]);
    if (!ok) hk_reject(in, "the retention lists are truncated, or hold a path longer than %d bytes or with a NUL byte", TR__CB_MAX_STR);
  }
  if (ok) {
    if (tr__get_end(in)) ok = 0;
  }
  if (ok && tr__mc_default_dir(s)) { hk_reject(in, "out of memory"); ok = 0; }
  if (ok && s->dir_default == 2 && strcmp(dir, s->dirpath) && tr__run_moved_from(s->run)) {
    /* the run's directory continued, moved or renamed: its checkpoints/ went with it (the same files) */
    char *was = tr__join(tr__run_moved_from(s->run), "checkpoints");
    int bad = !was;
    if (was && !strcmp(dir, was)) {
      bad |= tr__mc_rebase(&best, was, s->dirpath) | tr__mc_rebase(&kth, was, s->dirpath) |
             tr__mc_rebase(&last, was, s->dirpath) | tr__mc_rebase(&newest, was, s->dirpath);
      for (i = 0; i < n; i++) bad |= tr__mc_rebase(&paths[i], was, s->dirpath);
      for (i = 0; i < n_recent; i++) bad |= tr__mc_rebase(&recent[i], was, s->dirpath);
      for (i = 0; i < n_forever; i++) bad |= tr__mc_rebase(&forever[i], was, s->dirpath);
      moved = !bad;
    }
    free(was);
    if (bad) { hk_reject(in, "out of memory"); ok = 0; }
  }
  if (ok && (moved || strcmp(dir, s->dirpath) == 0)) { /* the same directory: everything */
    int k;
    for (k = 0; k < s->n; k++) free(s->paths[k]);
    free(s->paths); free(s->scores);
    s->paths = paths; s->scores = scores; s->n = (int)n;
    if (version == 2) { /* (a version 1 state: the retention lists start empty) */
      for (k = 0; k < s->n_recent; k++) free(s->recent[k]);
      for (k = 0; k < s->n_forever; k++) free(s->forever[k]);
      int keep = (int)n_recent < s->keep_last ? (int)n_recent : s->keep_last; /* a smaller keep_last_n now: the */
      for (k = 0; k < (int)n_recent - keep; k++) free(recent[k]);               /* older ones are only forgotten */
      if (keep) memcpy(s->recent, recent + (int)n_recent - keep, (size_t)keep * sizeof *recent);
      s->n_recent = keep;
      free(s->forever);
      s->forever = forever; forever = NULL;
      s->n_forever = s->cap_forever = (int)n_forever;
      s->n_saved = n_saved;
      n_recent = n_forever = 0;
    }
    s->cap = (int)n + 1; /* calloc'd n + 1 */
    free(s->best); s->best = best; best = NULL;
    free(s->kth); s->kth = kth; kth = NULL;
    free(s->last); s->last = last; last = NULL;
    free(s->newest); s->newest = newest; newest = NULL;
    s->newest_step = -1; /* not known: save_last=link writes a file of its own until the next top-k file */
    s->pub.best_model_score = best_score;
    s->pub.kth_value = kth_value;
    s->pub.current_score = current;
    s->pub.last_global_step_saved = step;
    paths = NULL; scores = NULL; n = 0;
  } else if (ok) { /* another directory: only best_model_path, as Lightning; the rest starts afresh */
    if (s->rank == 0 || !s->dir_default) /* other ranks keep ./checkpoints (no logger there): nothing to say */
      tr__run_say(s->run, NULL, "model_checkpoint", "the checkpoint's dirpath '%s' differs from '%s': only best_model_path is "
               "restored, top-k starts afresh", dir, s->dirpath);
    free(s->best); s->best = best; best = NULL;
  }
  for (i = 0; paths && i < n; i++) free(paths[i]);
  for (i = 0; recent && i < n_recent; i++) free(recent[i]);
  for (i = 0; forever && i < n_forever; i++) free(forever[i]);
  free(paths); free(scores); free(recent); free(forever);
  free(dir); free(best); free(kth); free(last); free(newest);
  tr__mc_sync(s);
  return ok ? 0 : -1;
}

static tr_err tr__mc_make(hk_registry *reg, const tr_model_checkpoint_desc *d, hk_handle *out, tr__why *w) {
  tr__mc *s;
  hk_callback cb;
  char name[400];
  int triggers;
  const char *tpl;
  if (!d) return tr__bad(w, "model_checkpoint: desc is NULL");
  tpl = d->filename ? d->filename : "{epoch}-{step}";
  if (d->mode != TR_MODE_MIN && d->mode != TR_MODE_MAX) return tr__bad(w, "model_checkpoint: mode %d is not valid (min or max)", (int)d->mode);
  if (d->save_top_k < -1 && d->save_top_k != TR_ZERO)
    return tr__bad(w, "model_checkpoint: save_top_k must be >= -1 (got %d): k best files, -1 = all, 0 = none", d->save_top_k);
  if (d->save_last < TR_SAVE_LAST_NO || d->save_last > TR_SAVE_LAST_LINK)
    return tr__bad(w, "model_checkpoint: save_last %d is not valid (no, yes or link)", (int)d->save_last);
  if (d->every_n_train_steps < 0)
    return tr__bad(w, "model_checkpoint: every_n_train_steps=%lld is out of range: give 0 (no step saves) to %lld",
                   (long long)d->every_n_train_steps, (long long)INT64_MAX);
  if (d->every_n_epochs < 0 && d->every_n_epochs != TR_ZERO)
    return tr__bad(w, "model_checkpoint: every_n_epochs=%lld is out of range: give 0 (no epoch saves) to %lld",
                   (long long)d->every_n_epochs, (long long)INT64_MAX);
  if (!(d->train_time_interval >= 0) || !hk_is_finite(d->train_time_interval))
    return tr__bad(w, "model_checkpoint: train_time_interval=%g is out of range: give 0 (no timed saves) or a finite "
                   "number of seconds", d->train_time_interval);
  triggers = (d->every_n_train_steps > 0) + (d->every_n_epochs > 0) + (d->train_time_interval > 0);
  if (triggers > 1)
    return tr__bad(w, "model_checkpoint: every_n_train_steps=%lld, every_n_epochs=%lld and train_time_interval=%g are "
                   "mutually exclusive: give at most one", (long long)d->every_n_train_steps,
                   (long long)(d->every_n_epochs == TR_ZERO ? 0 : d->every_n_epochs), d->train_time_interval);
  if (d->keep_last_n < 0 || d->keep_last_n > 100000 || d->keep_every_n < 0)
    return tr__bad(w, "model_checkpoint: keep_last_n=%d and keep_every_n=%d must be 0 (off) or more (keep_last_n at most "
                   "100000)", d->keep_last_n, d->keep_every_n);
  if ((d->keep_last_n || d->keep_every_n) && (d->save_top_k == -1 || d->save_top_k == TR_ZERO))
    return tr__bad(w, "model_checkpoint: keep_last_n / keep_every_n keep files beside the top k, but save_top_k=%d %s: "
                   "give save_top_k=1 (the newest, or the best with a monitor) or k", d->save_top_k == -1 ? -1 : 0,
                   d->save_top_k == -1 ? "keeps every file already" : "saves none (only last)");
  if ((!d->monitor || !d->monitor[0]) && d->save_top_k > 1)
    return tr__bad(w, "model_checkpoint: save_top_k=%d needs a monitor (without one only -1, 0 or 1 are valid)", d->save_top_k);
  if (d->monitor && strlen(d->monitor) > 200) return tr__bad(w, "model_checkpoint: monitor is longer than 200 characters");
  if (d->dirpath && strlen(d->dirpath) > TR__CB_MAX_STR / 2)
    return tr__bad(w, "model_checkpoint: dirpath must be a path shorter than %d characters", TR__CB_MAX_STR / 2);
  if (!tpl[0]) return tr__bad(w, "model_checkpoint: filename is empty; give a template such as {epoch}-{step} (NULL: that default)");
  if (strlen(tpl) > 1024) return tr__bad(w, "model_checkpoint: filename is longer than 1024 characters");
  if (tr__template_check(tpl, w)) return TR_ERR_INVALID;
  if (d->save_last != TR_SAVE_LAST_NO && !strchr(tpl, '{') && tr__is_last_name(tpl, strlen(tpl)))
    return tr__bad(w, "model_checkpoint: filename '%s' is save_last's name (last.ckpt, last-vN.ckpt): the top-k file and the "
                   "last file would be one file; choose another filename", tpl);
  s = (tr__mc *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "model_checkpoint: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->dir_default = !d->dirpath || !d->dirpath[0]; /* not given (NULL or "", a spec's default) */
  s->dirpath = tr__strdup(s->dir_default ? "checkpoints" : d->dirpath);
  tr__run_ckpt_dir(s->run, s->dir_default ? NULL : d->dirpath); /* where resume "auto" looks */
  s->filename = tr__strdup(tpl);
  s->monitor = d->monitor && d->monitor[0] ? tr__strdup(d->monitor) : NULL;
  s->mode = d->mode;
  s->top_k = tr__zero_int(d->save_top_k, 1);
  s->save_last = d->save_last;
  s->every_steps = d->every_n_train_steps;
  s->every_seconds = d->train_time_interval;
  s->every_epochs = d->every_n_epochs == TR_ZERO ? 0 : triggers == 0 ? 1 : d->every_n_epochs;
  s->epoch_flag = d->save_on_train_epoch_end;
  s->at_epoch_end = tr__at_epoch_end(s->run, s->epoch_flag);
  s->auto_insert = tr__flag(d->auto_insert_metric_name, 1);
  s->versions = tr__flag(d->enable_version_counter, 1);
  s->verbose = d->verbose;
  s->keep_last = d->keep_last_n;
  s->keep_every = d->keep_every_n;
  s->st = d->save_safetensors;
  if (d->async_save && s->run) s->run->async_requests = 1; /* the run's requested saves, from now on */
  s->clock = d->clock;
  s->clock_user = d->clock_user;
  s->pub.best_model_score = NAN;
  s->pub.current_score = NAN;
  s->pub.kth_value = tr__worst(s->mode);
  s->pub.last_global_step_saved = 0; /* Lightning: nothing is saved at step 0 */
  s->want_step = s->newest_step = -1;
  s->pat = tr__mc_pattern(tpl, s->auto_insert, &s->npat);
  if (s->keep_last) s->recent = (char **)calloc((size_t)s->keep_last, sizeof *s->recent);
  if (!s->dirpath || !s->filename || !s->pat || (d->monitor && d->monitor[0] && !s->monitor) || (s->keep_last && !s->recent)) {
    tr__mc_destroy(s);
    return tr__bad(w, "model_checkpoint: out of memory"), TR_ERR_NOMEM;
  }
  { /* drop trailing slashes: names are dirpath + "/" + file */
    size_t n = strlen(s->dirpath);
    while (n > 1 && s->dirpath[n - 1] == '/') s->dirpath[--n] = 0;
  }
  tr__mc_sync(s);
  /* the state key (Lightning's: monitor, mode and the triggers; not the file names) */
  snprintf(name, sizeof name, "model_checkpoint{monitor=%s,mode=%s,every_n_train_steps=%lld,every_n_epochs=%lld,"
           "train_time_interval=%g}", s->monitor ? s->monitor : "none", tr__mode_name(s->mode), (long long)s->every_steps,
           (long long)s->every_epochs, s->every_seconds);
  memset(&cb, 0, sizeof cb);
  cb.name = name;
  cb.user = s;
  cb.setup = tr__mc_setup;
  cb.teardown = tr__mc_teardown;
  cb.on_fit_start = tr__mc_fit_start;
  cb.on_train_start = tr__mc_train_start;
  if (s->every_steps > 0 || s->every_seconds > 0) cb.on_train_batch_end = tr__mc_batch_end;
  cb.on_train_epoch_end = tr__mc_epoch_end;
  cb.on_validation_end = tr__mc_val_end;
  cb.on_train_end = tr__mc_train_end;
  cb.on_checkpoint_saved = tr__mc_saved;
  if (s->st) cb.on_save_checkpoint = tr__mc_st_save;
  cb.save_state = tr__mc_save_state;
  cb.load_state = tr__mc_load_state;
  cb.destroy = tr__mc_destroy;
  return tr__cb_register(reg, &cb, 1000, out, w);
}

TR__PUBLIC_OF(tr_model_checkpoint, mc)
/* every_n_epochs: not given, the desc's 0 (1 while no other trigger is given, as Lightning) */
TR__FACTORY_OF(mc, tr_model_checkpoint_desc, TR_MODEL_CHECKPOINT_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
