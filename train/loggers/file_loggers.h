/* train/loggers/file_loggers.h - what the file loggers (csv, jsonl, tensorboard, plot) share. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_FILE_LOGGERS_H /* part */
#define TRAIN_FILE_LOGGERS_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* Where a logger writes: Lightning's save_dir/name/version_N/, shared by the registry's loggers, claimed
   with one mkdir (parallel runs never share one) and made at the first write on rank 0. A file the logger
   did not write is never replaced: one of its name there makes it refuse at its open, saying what to do.
   A resume continues its run's directory once the load succeeded (new_version_on_resume: a new one), the
   records after the checkpoint superseded. docs/logging.md has each rule. */
#define TR_LOGGER_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING, const char *, save_dir,      "runs",           NULL, "the directory of runs (not given: the run's, " \
    "tr_run_desc.save_dir, runs by default)") \
  X(STRING, const char *, name,          "lightning_logs", NULL, "a subdirectory for this experiment (empty: versions " \
    "directly in save_dir; not given: the run's, lightning_logs by default)") \
  X(STRING, const char *, version,       "",               NULL, "the version directory (empty: the next free version_N; " \
    "else this name: a directory that may exist, but none of the logger's files in it (a file there that the logger did " \
    "not write, an earlier run's included, is never replaced: the logger refuses at its open, naming it; give another " \
    "version or remove it; a resume continues in the directory its checkpoint was written in, its files there included); " \
    "not given: the run's, tr_run_desc.version)") \
  X(INT,    int,          flush_every,   "0",              NULL, "> 0: write after this many records; 0: at most once a " \
    "second (the first record at once) and at the end of every run. Lines are written whole: a process killed with " \
    "-9 loses at most the records not written yet (about a second, none logged before its last checkpoint), never " \
    "half a line") \
  X(TRI,    int,          fail_on_error, "false",          NULL, "an I/O error fails the run (default: reported once, " \
    "training goes on)")
typedef struct tr_logger_desc { TR_LOGGER_PARAMS(TR__FIELD) } tr_logger_desc;

typedef struct tr_logger_state {
  const char *dir;              /* the version directory ("" before the first write) */
  const char *path;             /* the file it writes ("" before the first write) */
  int64_t records;              /* records written to disk */
  const char *error;            /* the first I/O error ("" when none) */
} tr_logger_state;

TRAIN_API const tr_logger_state *tr_logger_get(const hk_registry *reg, hk_handle h); /* any of these loggers, or plot */
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
/* A file logger: the machinery here (the directory, a file written whole then appended to, whole records
   on a full disk, flushes at most once a second, errors said once) and a format from csv.h, jsonl.h,
   tensorboard.h or plot.h (a tr__log_format). */
typedef struct tr__logger tr__logger;
typedef struct tr__log_format {
  const char *name;     /* the callback's name, and the messages' */
  const char *unit;     /* what a short write keeps whole: "line" or "record" */
  /* at the first setup or record: set s->path and create what the format writes first; 0, or an errno
     with why set (ENOMEM: out of memory) */
  int (*open)(tr__logger *s, hk_ctx *ctx, char *why, size_t cap);
  hk_signal (*record)(tr__logger *s, hk_ctx *ctx, const tr_log_record *r); /* into s->out, ++s->pending */
  hk_signal (*flush)(tr__logger *s, hk_ctx *ctx, int force);   /* NULL: s->out appended as it is */
  size_t (*whole)(const tr__logger *s, size_t n, int *count);  /* NULL: whole lines */
  hk_signal (*teardown)(tr__logger *s, hk_ctx *ctx);           /* at a run's end, before the flush (or NULL) */
  void (*destroy)(void *own);                                   /* frees the format's state (or NULL) */
  hk_signal (*checkpoint)(tr__logger *s, hk_ctx *ctx);         /* before a checkpoint, after the flush (or NULL) */
} tr__log_format;

struct tr__logger {
  tr_logger_state pub;
  const tr__log_format *fmt;
  void *own;            /* the format's state */
  tr_run *run;          /* the registry's run: what the loop says (train/run.h) */
  char *save_dir, *name, *version;
  int flush_every, fail_on_error;
  double last_flush;    /* flush_every 0: when whole lines were last written (wall clock) */
  int opened, broken;   /* broken: an I/O error was reported; nothing more is written */
  int continued;        /* a resume continues its run: the logger goes on with its files there (tr__logger_take) */
  char *dir, *path;
  tr__file_id id;       /* the file at path it wrote (a later whole write replaces only that one) */
  char err[1200];
  int fd;               /* the file it appends to: the descriptor of its creation (tr__afile), never
                           reopened by name; -1 before (csv: until its first rows) */
  int64_t size;         /* bytes of whole lines (records) in the file */
  hk_bytes out;         /* whole lines (or records) waiting for one write */
  int pending;          /* records in out (jsonl, tensorboard) or rows not written yet (csv) */
};

static void tr__logger_destroy(void *user);

/* Report an I/O error once, then write nothing more. fail_on_error fails the run (HK_FAIL). */
static hk_signal tr__logger_broke(tr__logger *s, hk_ctx *ctx, const char *fmt, ...) TR__PRINTF(3, 4);
static hk_signal tr__logger_broke(tr__logger *s, hk_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  const char *who = s->fmt->name;
  if (s->broken) return HK_CONTINUE;
  s->broken = 1;
  va_start(ap, fmt);
  (void)tr__vmsg(s->err, sizeof s->err, 0, fmt, ap);
  va_end(ap);
  s->pub.error = s->err;
  if (s->fail_on_error && ctx) return hk_fail(ctx, "%s logger: %s", who, s->err);
  tr__run_say(s->run, ctx, who, "%s; this logger writes nothing more%s", s->err, ctx ? " (training goes on)" : "");
  return HK_CONTINUE;
}

/* How much of the first n bytes of s->out is whole records (lines, or the format's records), and how
   many records that is. */
static size_t tr__whole_records(const tr__logger *s, size_t n, int *count) {
  size_t at = 0, i;
  if (s->fmt->whole) return s->fmt->whole(s, n, count);
  *count = 0;
  for (i = 0; i < n; i++) if (s->out.data[i] == '\n') { at = i + 1; ++*count; }
  return at;
}

/* Append s->out to the file; a short write (a full disk) is cut back to the last whole record. 0 or
   errno; *count the records that made it, *kept their bytes. */
static int tr__logger_append(tr__logger *s, size_t *kept, int *count) {
  size_t done = 0;
  int e = tr__fd_write_n(s->fd, s->out.data, s->out.len, &done);
  if (e) *kept = tr__whole_records(s, done, count);
  else { *kept = s->out.len; *count = -1; } /* all of them: the caller knows how many */
#ifdef TR__POSIX
  if (e && *kept < done) {
    off_t end = (off_t)(s->size + (int64_t)*kept);
    if (ftruncate(s->fd, end) != 0 || lseek(s->fd, end, SEEK_SET) < 0) e = errno;
  }
#endif
  s->size += (int64_t)*kept;
  return e;
}
/* Write what waits (force: what a format holds back, at the end of a run: csv's new columns). */
static hk_signal tr__logger_flush(tr__logger *s, hk_ctx *ctx, int force) {
  size_t kept;
  int e, count;
  if (s->broken) return HK_CONTINUE;
  if (s->fmt->flush) return s->fmt->flush(s, ctx, force);
  if (!s->pending || s->fd < 0) return HK_CONTINUE;
  if (s->fd < 0) return HK_CONTINUE;
  if (s->out.failed) return tr__logger_broke(s, ctx, "out of memory");
  e = tr__logger_append(s, &kept, &count);
  s->pub.records += count < 0 ? s->pending : count;
  s->out.len = 0;
  s->pending = 0;
  if (e) return tr__logger_broke(s, ctx, "cannot write %s: %s (it ends with its last whole %s)", s->path, strerror(e),
                                 s->fmt->unit);
  return HK_CONTINUE;
}

/* The hyperparameters and the spec strings in effect as YAML (csv's hparams.yaml, plot's <desc>). */
TR__SHARED void tr__hparams_yaml(tr__logger *s, hk_ctx *ctx, hk_bytes *b) {
  tr__hparam *h;
  int i, n = tr__run_hparams(s->run, &h);
  const char *spec;
  if (n < 0) { b->failed = 1; return; }
  for (i = 0; i < n; i++) { /* keys too: a user's key may be "batch size" or "Yes" */
    tr__yaml_str(b, h[i].key);
    tr__put_s(b, ": ");
    if (h[i].num) tr__put_s(b, h[i].val); else tr__yaml_str(b, h[i].val);
    tr__put_s(b, "\n");
  }
  tr__put_s(b, "specs:");
  if (!hk_spec_applied(ctx->reg, 0)) tr__put_s(b, " []");
  for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { tr__put_s(b, "\n- "); tr__json_str(b, spec); }
  tr__put_s(b, "\n");
  free(h);
}

/* A logger's save_dir, name and version: its own desc's, else the run's, else Lightning's defaults. */
static const char *tr__logger_save_dir(const tr__logger *s) { return s->save_dir ? s->save_dir : tr__run_str(s->run, TR__RUN_SAVE_DIR, "runs"); }
static const char *tr__logger_name(const tr__logger *s) { return s->name ? s->name : tr__run_str(s->run, TR__RUN_NAME, "lightning_logs"); }
static const char *tr__logger_version(const tr__logger *s) { return s->version ? s->version : tr__run_str(s->run, TR__RUN_VERSION, NULL); }

/* Make the version directory and let the format create its file (rank 0); then append to that
   descriptor. Nothing followed through a symlink, nothing but a regular file replaced. */
static hk_signal tr__logger_open(tr__logger *s, hk_ctx *ctx) {
  char why[1100];
  int e;
  if (s->opened || s->broken || ctx->rank != 0) return HK_CONTINUE;
  why[0] = 0;
  free(s->dir); /* (asked again until opened: a failed resume's version_N is gone, the next run claims anew) */
  if (!(s->dir = tr__run_dir_get(s->run, tr__logger_save_dir(s), tr__logger_name(s), tr__logger_version(s), why, sizeof why,
                                  &s->continued))) {
    s->opened = 1;
    return tr__logger_broke(s, ctx, "%s", why);
  }
  tr__run_note_dir(s->run, s->dir);
  s->pub.dir = s->dir;
  /* a resume that has not loaded: the directory is known, no file is touched until the load succeeded */
  if (tr__run_loading(s->run, ctx->event == HK_SETUP)) return HK_CONTINUE;
  s->opened = 1;
  e = s->fmt->open(s, ctx, why, sizeof why);
  s->pub.path = s->path ? s->path : "";
  if (e) return tr__logger_broke(s, ctx, "%s", e == ENOMEM ? "out of memory" : why);
  return HK_CONTINUE;
}
/* A file of its name that the logger did not write is refused, with what to do: 0, or EEXIST and why. */
TR__SHARED int tr__logger_fresh(const char *path, char *why, size_t cap) {
#ifdef TR__POSIX
  struct stat st;
  if (lstat(path, &st) != 0) return 0;
  if (S_ISREG(st.st_mode))
    snprintf(why, cap, "%s exists, and this logger did not write it (an earlier run's, another logger's, or a file of "
             "yours): it is not replaced; give the logger another version (or none: the next free version_N), or remove "
             "the file (a resume continues its own run's files: resume from a checkpoint of that run)", path);
  else
    snprintf(why, cap, "%s is not a regular file (a symlink, a device, a FIFO or a directory): it is not replaced; give "
             "the logger another version (or none: the next free version_N), or remove it", path);
  return EEXIST;
#else
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  fclose(f);
  snprintf(why, cap, "%s exists, and this logger did not write it: it is not replaced; give the logger another version, "
           "or remove the file", path);
  return EEXIST;
#endif
}
/* The logger's file at path: refused when something is there (tr__logger_fresh), except in a continued
   run, where it is read into old and its identity into mine, so the next whole write replaces that file
   alone (without the superseded records). 0, or the format's open's error. */
TR__SHARED int tr__logger_take(const tr__logger *s, const char *path, hk_bytes *old, tr__file_id *mine, char *why, size_t cap) {
  hk_bytes scratch;
  int e;
  if (!s->continued) return tr__logger_fresh(path, why, cap);
  memset(&scratch, 0, sizeof scratch);
  e = tr__read_mine(path, old ? old : &scratch, mine);
  hk_bytes_free(&scratch);
  if (e == EEXIST)
    snprintf(why, cap, "%s is not a regular file (a symlink, a device, a FIFO or a directory): the resumed run does not "
             "continue it, nor replace it; remove it, or resume with new_version_on_resume", path);
  else if (e && e != ENOENT)
    snprintf(why, cap, "cannot read %s to continue the resumed run's log: %s", path, strerror(e));
  return e == ENOENT ? 0 : e;
}
/* The file in the version directory (csv, jsonl, tensorboard): 0, or the format's open's error. */
TR__SHARED int tr__logger_file(tr__logger *s, const char *file, hk_bytes *old, char *why, size_t cap) {
  if (!(s->path = tr__join(s->dir, file))) return ENOMEM;
#ifndef TR__POSIX
  (void)old;
  snprintf(why, cap, "file loggers need a POSIX system");
  return -1;
#else
  return tr__logger_take(s, s->path, old, &s->id, why, cap);
#endif
}

static hk_signal tr__logger_setup(hk_ctx *ctx, void *u) { return tr__logger_open((tr__logger *)u, ctx); } /* and on_fit_start */

static hk_signal tr__logger_on_log(hk_ctx *ctx, void *u) {
  tr__logger *s = (tr__logger *)u;
  const tr_log_record *r = tr_log_current(ctx);
  hk_signal sig;
  if (!r || ctx->rank != 0) return HK_CONTINUE;
  if ((sig = tr__logger_open(s, ctx)) != HK_CONTINUE || s->broken) return sig;
  if ((sig = s->fmt->record(s, ctx, r)) != HK_CONTINUE || s->broken || !s->pending) return sig;
  if (s->flush_every > 0 ? s->pending >= s->flush_every : tr__wall() - s->last_flush >= 1.0) {
    s->last_flush = tr__wall(); /* a write is a system call: at the step rate of a small model it shows */
    return tr__logger_flush(s, ctx, 0);
  }
  return HK_CONTINUE;
}

/* on_save_checkpoint (before anything is written): every waiting record to the file, so a process killed
   after the checkpoint has lost nothing the resume does not log again. A plain write suffices (the kernel
   keeps it); no fsync, so a power loss may lose lines appended since the last whole write. */
static hk_signal tr__logger_checkpoint(hk_ctx *ctx, void *u) {
  tr__logger *s = (tr__logger *)u;
  hk_signal sig;
  if (ctx->rank != 0 || !s->opened || s->broken) return HK_CONTINUE;
  if ((sig = tr__logger_flush(s, ctx, 1)) != HK_CONTINUE || !s->fmt->checkpoint) return sig;
  return s->fmt->checkpoint(s, ctx);
}

/* At the end of every run (and of a failed one): write what waits, keep the file open for the next run. */
static hk_signal tr__logger_teardown(hk_ctx *ctx, void *u) {
  tr__logger *s = (tr__logger *)u;
  hk_signal sig;
  if (ctx->rank != 0) return HK_CONTINUE;
  if (s->fmt->teardown && (sig = s->fmt->teardown(s, ctx)) != HK_CONTINUE) return sig;
  return tr__logger_flush(s, ctx, 1);
}

static void tr__logger_destroy(void *user) {
  tr__logger *s = (tr__logger *)user;
  if (!s) return;
  (void)tr__logger_flush(s, NULL, 1); /* a loop that never fired teardown still gets every record on disk */
#ifdef TR__POSIX
  if (s->fd >= 0) close(s->fd);
#endif
  if (s->fmt->destroy) s->fmt->destroy(s->own);
  free(s->save_dir); free(s->name); free(s->version); free(s->dir); free(s->path);
  hk_bytes_free(&s->out);
  free(s);
}

/* A logger of fmt with own as the format's state (fmt->destroy gets it either way: the caller never frees). */
static tr_err tr__logger_make(hk_registry *reg, const tr__log_format *fmt, const tr_logger_desc *d, void *own, int own_failed,
                              hk_handle *out, tr__why *w) {
  const char *who = fmt->name;
  char unique[64];
  tr__logger *s;
  hk_callback cb;
  hk_opts o;
  hk_err e;
  if (!d || d->flush_every < 0 || (d->version && strchr(d->version, '/')) || (d->save_dir && !d->save_dir[0]) || own_failed ||
      !(s = (tr__logger *)calloc(1, sizeof *s))) {
    if (fmt->destroy) fmt->destroy(own);
    if (!d) return tr__bad(w, "%s: desc is NULL", who);
    if (d->flush_every < 0) return tr__bad(w, "%s: flush_every must be >= 0 (0 = once a second), got %d", who, d->flush_every);
    if (d->version && strchr(d->version, '/')) return tr__bad(w, "%s: version '%s' must be a directory name without '/'", who, d->version);
    if (d->save_dir && !d->save_dir[0]) return tr__bad(w, "%s: save_dir is empty (NULL means \"runs\"; \".\" is the current directory)", who);
    return tr__bad(w, "%s: out of memory", who), TR_ERR_NOMEM;
  }
  s->fmt = fmt;
  s->own = own;
  s->run = tr_run_get(reg);
  s->fd = -1;
  s->pub.dir = s->pub.path = s->pub.error = "";
  s->flush_every = d->flush_every;
  s->fail_on_error = d->fail_on_error > 0;
  s->save_dir = d->save_dir ? tr__strdup(d->save_dir) : NULL; /* NULL: the run's (tr_run_desc) */
  s->name = d->name ? tr__strdup(d->name) : NULL;
  s->version = d->version ? tr__strdup(d->version) : NULL;
  if ((d->save_dir && !s->save_dir) || (d->name && !s->name) || (d->version && !s->version)) {
    tr__logger_destroy(s);
    return tr__bad(w, "%s: out of memory", who), TR_ERR_NOMEM;
  }
  memset(&cb, 0, sizeof cb);
  cb.name = tr__unique_name(reg, who, unique, sizeof unique);
  cb.user = s;
  cb.setup = tr__logger_setup;
  cb.on_fit_start = tr__logger_setup; /* a resume's files: once it has loaded */
  cb.on_log = tr__logger_on_log;
  cb.on_save_checkpoint = tr__logger_checkpoint;
  cb.teardown = tr__logger_teardown;
  cb.destroy = tr__logger_destroy;
  /* loggers run last at on_log (a monitoring callback on an HK_MONITOR_LAST event, high order): every
     other hook has changed the record by then */
  memset(&o, 0, sizeof o);
  o.monitor = 1;
  o.order = 1000;
  e = hk_add_callback(reg, &cb, &o, out);
  if (e) {
    tr__bad(w, "%s", hk_last_error(reg));
    tr__logger_destroy(s);
    return e == HK_ERR_NOMEM ? TR_ERR_NOMEM : TR_ERR_INVALID;
  }
  return TR_OK;
}

TRAIN_API const tr_logger_state *tr_logger_get(const hk_registry *reg, hk_handle h) {
  const hk_callback *cb = hk_callback_get(reg, h);
  return cb && cb->destroy == tr__logger_destroy ? &((const tr__logger *)cb->user)->pub : NULL;
}
TR__ARGS_OF(logger, tr_logger_desc, TR_LOGGER_PARAMS)
/* A spec's logger parameters into d: HK_OK, or the error, set on reg. */
static hk_err tr__logger_spec(hk_registry *reg, const hk_args *a, tr_logger_desc *d) {
  tr__why w;
  tr_err e = tr__logger_args(a, d, &w);
  if (e) return tr__factory_result(reg, e, &w);
  if (d->flush_every < 0)
    return hk_set_error(reg, HK_ERR_INVALID, "%s: flush_every must be between 0 and 1e9 (0: once a second), got %d", a->factory, d->flush_every);
  return HK_OK;
}
/* A file logger with the logger's parameters alone (csv, jsonl, tensorboard): tr_<name>_logger, its spec
   table and factory. */
#define TR__LOGGER_OF(name, p, make) \
  TRAIN_API tr_err tr_##name##_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out) { \
    tr__why w; \
    if (!reg) return TR_ERR_INVALID; \
    return tr__cb_result(reg, make(reg, d, out, &w), &w); \
  } \
  static const hk_param tr__##p##_params[] = { TR_LOGGER_PARAMS(TR__PARAM) }; \
  static hk_err tr__##p##_factory(hk_registry *reg, const hk_args *a, void *user) { \
    tr_logger_desc d; \
    tr__why w; \
    hk_err e = tr__logger_spec(reg, a, &d); \
    (void)user; \
    return e ? e : tr__factory_result(reg, make(reg, &d, NULL, &w), &w); \
  } \
  TR__ADD_OF(p)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
