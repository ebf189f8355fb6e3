/* train/sweep.h - tr_sweep: Hydra's multirun. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_SWEEP_H /* part */
#define TRAIN_SWEEP_H /* part */
#include "battery.h" /* part */
#include "loggers/plot.h" /* part */
#include "factories.h" /* part */

TR__C_BEGIN /* part */
/* =================================================================================================
   SWEEPS (Hydra's multirun)
   tr_sweep runs a program's job once per combination of command-line overrides (key=v1,v2,...: a field
   of the program, tr_sweep_field, or factory.param of a callback in the spec), the last key varying
   fastest, one job after another, each with a registry of its own in version_<job> of the sweep's
   directory with its hyperparameters; everything is checked before the first job. The sweep's hooks get
   Hydra's lifecycle events (on_multirun_start, on_job_start/end, on_multirun_end; one job without -m:
   on_run_start/end); a failing job is reported and the sweep goes on; summary.csv and summary.svg compare
   the jobs' final metrics. The example, the override rules, the events and the summary in full:
   docs/sweeps.md in the hooks.h repository; examples/sweep.c is a complete program.
   ================================================================================================= */
#define TR_SWEEP_TYPES(X) /* X(enum, name in messages) */ \
  X(TR_SWEEP_INT,    "an integer (int)") \
  X(TR_SWEEP_INT64,  "an integer (int64_t)") \
  X(TR_SWEEP_DOUBLE, "a number (double)") \
  X(TR_SWEEP_FLOAT,  "a number (float)") \
  X(TR_SWEEP_BOOL,   "true or false (also yes/no, on/off, 1/0)") \
  X(TR_SWEEP_STRING, "one line of UTF-8 text without a comma, at most 255 bytes (const char *)")
typedef enum tr_sweep_type {
#define TR__X(sym, doc) sym,
  TR_SWEEP_TYPES(TR__X)
#undef TR__X
  TR_SWEEP_TYPE_COUNT
} tr_sweep_type;

/* One of the program's configuration fields: ptr points at a variable of the type's C type (int,
   int64_t, double, float, int for bool, const char * for string). Each job sees its value there; the
   sweep puts the old values back when it returns (a string's text lives until then). */
typedef struct tr_sweep_field { const char *name; tr_sweep_type type; void *ptr; } tr_sweep_field;

typedef struct tr_sweep_job {
  int index, count;              /* this job's number (from 0; Hydra's job.num) and the jobs in the sweep */
  const char *overrides;         /* this job's values of the swept keys: "optim.lr=1e-2 batch=32" */
  const char *dir;               /* its run directory (tr_run_dir of its registry; "" in a plain run until made) */
  const char *spec;              /* the spec string applied to its registry, spec overrides in ("" when none) */
  const tr_run_desc *run;        /* the run it was set up with (a job that calls tr_run_setup starts from it) */
  /* on_job_end: */
  tr_err status;                 /* TR_OK, or the job's error */
  const char *error;             /* why it failed ("" when it did not) */
  int n_metrics;                 /* its final metrics, in the order first seen */
  const tr_log_metric *metrics;
  void *tr__p;                   /* private */
} tr_sweep_job;

typedef tr_err (*tr_sweep_fn)(hk_registry *reg, tr_sweep_job *job, void *user);

typedef struct tr_sweep_desc {
  const tr_sweep_field *fields;  /* the program's configuration fields */
  int n_fields;
  const char *spec;              /* every job's callbacks and loggers (NULL: none); factory.param keys rewrite it */
  tr_sweep_fn job;               /* runs one job on reg; returns TR_OK or its error (required) */
  void *user;
  hk_registry *reg;              /* the sweep's hooks (on_multirun_start ...); NULL: none */
  tr_run_desc run;               /* every job's run (in a sweep save_dir, name and version are the sweep's) */
  const char *save_dir;          /* where the sweep's directory version_N is claimed; NULL = "multirun" */
  hk_err (*add_factories)(hk_registry *reg); /* your own spec factories, for the check and every job */
  int stop_on_failure;           /* 1: a failing job ends the sweep (the rest are skipped); 0: go on */
  int multirun;                  /* 1: a sweep even for one job (as -m on the command line) */
  const char *metrics;           /* summary.svg's metrics, space-separated; NULL/"": those with loss in the name */
  FILE *log;                     /* where the sweep says what it runs; NULL = stderr */
} tr_sweep_desc;

typedef struct tr_sweep_result {
  int jobs, ok, failed, skipped; /* jobs in the sweep; how they ended */
  int multirun;                  /* 1: it ran as a sweep (summary written), 0: a plain run */
  char dir[512];                 /* the sweep's directory ("" in a plain run) */
  char error[1024];              /* why tr_sweep did not return TR_OK ("" when it did) */
} tr_sweep_result;

/* Parse argc/argv (overrides, "-m"), check them, run the jobs, write the summary. Returns TR_OK when
   every job that ran succeeded; TR_ERR_INVALID for bad overrides or desc (no job ran); else the first
   failed job's error (or TR_ERR_HOOK from a sweep hook, TR_ERR_IO when the summary cannot be
   written), with res->error saying which job and why. res may be NULL. */
TRAIN_API tr_err tr_sweep(const tr_sweep_desc *d, int argc, char **argv, tr_sweep_result *res);
/* The job at on_job_start / on_job_end of a sweep's hooks (NULL elsewhere). */
TRAIN_API tr_sweep_job *tr_sweep_current(hk_ctx *ctx);
/* A final metric of the job, set by the job itself (it wins over a logged value of the same name). */
TRAIN_API tr_err tr_sweep_metric(tr_sweep_job *job, const char *name, double value);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* =================================================================================================
   SWEEPS (implementation)
   Nothing here runs unless the program calls tr_sweep: a job's registry gets one extra on_log hook
   (its final metrics), which runs only where a record is sent.
   ================================================================================================= */
typedef struct tr__sweep_key {
  const char *key;               /* the override's key (in the argument's copy) */
  const tr_sweep_field *field;   /* the program's field, or NULL: a spec parameter */
  char factory[64];              /* a spec parameter: factory.param */
  const char *param;
  char **vals;                   /* the values (in the argument's copy) */
  int n, cur;
} tr__sweep_key;
typedef union tr__sweep_old { int i; int64_t l; double d; float f; const char *s; } tr__sweep_old;
typedef struct tr__sweep_done { /* what the summary needs of a job */
  int status;                    /* 0 ok, 1 failed, 2 skipped */
  char *error;
  tr_log_record final;
} tr__sweep_done;
typedef struct tr__sweep_priv { tr_log_record logged, set; } tr__sweep_priv;

static int tr__sweep_word_char(char c) { return c && c != ' ' && c != '\t' && c != '\n' && c != '\r' && !strchr(",;()=\"'", c); }
static int tr__sweep_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}
static int tr__sweep_digits(const char *t) { /* [+-]digits and nothing else */
  if (*t == '+' || *t == '-') t++;
  if (!(*t >= '0' && *t <= '9')) return 0;
  while (*t >= '0' && *t <= '9') t++;
  return *t == 0;
}
/* Text -> the field's type; out may be NULL (a check). 0, or -1 when the text is not of the type
   (*why, when not NULL, then says what is wrong beyond "not of the type", or stays NULL). Numbers are
   decimal: no hex (strtod would take 0x10), nothing that rounds to 0 or a subnormal (1e-400, or 1e-40
   for a float) where a nonzero value was written. */
static int tr__sweep_parse(tr_sweep_type type, const char *text, void *out, const char **why) {
  char *end;
  long long l;
  double d;
  const char *t;
  errno = 0;
  if (why) *why = NULL;
  switch (type) {
  case TR_SWEEP_INT: case TR_SWEEP_INT64:
    if (!tr__sweep_digits(text)) return -1;
    l = strtoll(text, NULL, 10);
    if (errno == ERANGE || (type == TR_SWEEP_INT && (l < INT_MIN || l > INT_MAX))) return -1;
    if (out && type == TR_SWEEP_INT) *(int *)out = (int)l;
    if (out && type == TR_SWEEP_INT64) *(int64_t *)out = (int64_t)l;
    return 0;
  case TR_SWEEP_DOUBLE: case TR_SWEEP_FLOAT:
    if (!text[0] || !tr__sweep_word_char(text[0])) return -1;
    t = text + (*text == '+' || *text == '-');
    if (*t == '0' && (t[1] == 'x' || t[1] == 'X')) {
      if (why) *why = "hexadecimal is not taken: write it in decimal";
      return -1;
    }
    d = strtod(text, &end);
    if (*end) return -1;
    if (errno == ERANGE && hk_is_finite(d)) { /* strtod's underflow: 0 or a subnormal for what was not 0 */
      if (why) *why = "it underflows a double (nonzero, below 2.2250738585072014e-308): it would lose its digits or become 0";
      return -1;
    }
    if (!hk_is_finite(d) || (type == TR_SWEEP_FLOAT && (d > 3.4028234663852886e38 || d < -3.4028234663852886e38)))
      return -1;
    if (type == TR_SWEEP_FLOAT && d != 0 && fabs(d) < 1.1754943508222875e-38) {
      if (why) *why = "it underflows a float (nonzero, below 1.1754943508222875e-38): it would lose its digits or become 0";
      return -1;
    }
    if (out && type == TR_SWEEP_DOUBLE) *(double *)out = d;
    if (out && type == TR_SWEEP_FLOAT) *(float *)out = (float)d;
    return 0;
  case TR_SWEEP_BOOL: {
    int v;
    if (!strcmp(text, "true") || !strcmp(text, "yes") || !strcmp(text, "on") || !strcmp(text, "1")) v = 1;
    else if (!strcmp(text, "false") || !strcmp(text, "no") || !strcmp(text, "off") || !strcmp(text, "0")) v = 0;
    else return -1;
    if (out) *(int *)out = v;
    return 0;
  }
  case TR_SWEEP_STRING:
    if (out) *(const char **)out = text;
    return 0;
  default:
    return -1;
  }
}
/* What every value must be, whatever its type: it goes into the job's hyperparameters (a string of
   at most TR__HPARAM_VAL - 1 bytes), overrides.yaml, the sweep's log lines and summary.csv, each one
   line of UTF-8 text. NULL when it is fine, else why not. */
static const char *tr__sweep_text_bad(const char *v) {
  const char *p;
  for (p = v; *p; p++)
    if ((unsigned char)*p < 32 || *p == 127) return "it holds a control character (a line break, a tab ...): a value is one line of text";
  if (!tr__utf8_ok(v)) return "it is not valid UTF-8 (every file the sweep writes is UTF-8 text)";
  if (strlen(v) >= TR__HPARAM_VAL) return "it is longer than 255 bytes, the most a hyperparameter holds";
  return NULL;
}
/* A key (a field's name, factory.param): a hyperparameter's key too. NULL when fine, else why not. */
static const char *tr__sweep_key_bad(const char *k) {
  const char *p;
  for (p = k; *p; p++)
    if ((unsigned char)*p < 32 || *p == 127 || *p == '=') return "holds a control character or '=': give a plain name";
  if (!tr__utf8_ok(k)) return "is not valid UTF-8";
  if (strlen(k) >= TR__HPARAM_KEY) return "is longer than 63 bytes, the most a hyperparameter's key holds";
  return NULL;
}
/* A value in a message: printable text as it is, other bytes as \xNN, at most about 60 bytes. */
static const char *tr__sweep_show(const char *v, char *buf, size_t cap) {
  size_t n = 0;
  const unsigned char *p = (const unsigned char *)v;
  while (*p && n + 8 < cap) {
    size_t k = tr__utf8_len(p);
    if (n >= 60) { memcpy(buf + n, "...", 3); n += 3; break; }
    if (*p < 32 || *p == 127 || k == 0) { snprintf(buf + n, cap - n, "\\x%02x", *p); n += 4; p++; continue; }
    if (n + k + 1 >= cap) break;
    memcpy(buf + n, p, k);
    n += k;
    p += k;
  }
  buf[n] = 0;
  return buf;
}
static const char *tr__sweep_type_doc(tr_sweep_type t) {
  static const char *const docs[] = {
#define TR__X(sym, doc) doc,
    TR_SWEEP_TYPES(TR__X)
#undef TR__X
  };
  return (int)t >= 0 && t < TR_SWEEP_TYPE_COUNT ? docs[t] : "?";
}
static void tr__sweep_keep(const tr_sweep_field *f, tr__sweep_old *o, int restore) {
  void *p = f->ptr, *q = NULL;
  size_t n = 0;
  switch (f->type) {
  case TR_SWEEP_INT: case TR_SWEEP_BOOL: q = &o->i; n = sizeof o->i; break;
  case TR_SWEEP_INT64: q = &o->l; n = sizeof o->l; break;
  case TR_SWEEP_DOUBLE: q = &o->d; n = sizeof o->d; break;
  case TR_SWEEP_FLOAT: q = &o->f; n = sizeof o->f; break;
  case TR_SWEEP_STRING: q = (void *)&o->s; n = sizeof o->s; break;
  default: return;
  }
  if (restore) memcpy(p, q, n);
  else memcpy(q, p, n);
}

/* ---- spec strings: set factory(param=value) in every item of that factory ---------------------- */
static const char *tr__sweep_skip_quoted(const char *p) {
  char q = *p++;
  while (*p && *p != q) p += (*p == '\\' && p[1]) ? 2 : 1;
  return *p ? p + 1 : p;
}
static void tr__sweep_put_value(hk_bytes *b, const char *v) {
  const char *p;
  int bare = v[0] != 0;
  for (p = v; *p && bare; p++) bare = tr__sweep_word_char(*p);
  if (bare) { tr__put_s(b, v); return; }
  hk_bytes_put(b, "\"", 1);
  for (p = v; *p; p++) {
    if (*p == '"' || *p == '\\') hk_bytes_put(b, "\\", 1);
    if (*p == '\n') tr__put_s(b, "\\n");
    else if (*p == '\t') tr__put_s(b, "\\t");
    else hk_bytes_put(b, p, 1);
  }
  hk_bytes_put(b, "\"", 1);
}
/* A new string (or NULL out of memory); *found counts the items of factory. The spec's other bytes are
   copied as they are; a malformed spec is left for hk_spec_check to explain. */
static char *tr__sweep_spec_set(const char *spec, const char *factory, const char *param, const char *value, int *found) {
  hk_bytes b;
  const char *p = spec;
  size_t fl = strlen(factory), pl = strlen(param);
  memset(&b, 0, sizeof b);
  *found = 0;
  while (*p) {
    const char *name = p, *after, *q, *close;
    int target;
    if (*p == '"' || *p == '\'') { q = tr__sweep_skip_quoted(p); hk_bytes_put(&b, p, (size_t)(q - p)); p = q; continue; }
    if (!tr__sweep_ident_char(*p)) { hk_bytes_put(&b, p++, 1); continue; }
    while (tr__sweep_ident_char(*p)) p++;
    target = (size_t)(p - name) == fl && !strncmp(name, factory, fl);
    hk_bytes_put(&b, name, (size_t)(p - name));
    for (after = p; *after == ' ' || *after == '\t' || *after == '\n' || *after == '\r'; after++) {}
    close = NULL;
    if (*after == '(') { /* its arguments: to the matching ')' (quoted strings skipped) */
      for (q = after + 1; *q && *q != ')';) q = (*q == '"' || *q == '\'') ? tr__sweep_skip_quoted(q) : q + 1;
      if (*q == ')') close = q;
    }
    if (!target) {
      if (close) { hk_bytes_put(&b, p, (size_t)(close + 1 - p)); p = close + 1; }
      continue;
    }
    ++*found;
    hk_bytes_put(&b, "(", 1);
    if (close) { /* each argument: replaced when it is param=..., else copied */
      const char *a = after + 1;
      int n = 0, set = 0;
      while (a < close) {
        const char *e = a, *k;
        while (e < close && *e != ',') e = (*e == '"' || *e == '\'') ? tr__sweep_skip_quoted(e) : e + 1;
        if (e > close) e = close;
        for (k = a; k < e && (*k == ' ' || *k == '\t' || *k == '\n' || *k == '\r'); k++) {}
        if (k < e) {
          const char *eq = k + pl;
          while (eq < e && (*eq == ' ' || *eq == '\t')) eq++;
          if (n++) tr__put_s(&b, ", ");
          if ((size_t)(e - k) > pl && !strncmp(k, param, pl) && !tr__sweep_ident_char(k[pl]) && *eq == '=') {
            tr__putf(&b, "%s=", param);
            tr__sweep_put_value(&b, value);
            set = 1;
          } else {
            const char *t = e;
            while (t > k && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\n' || t[-1] == '\r')) t--;
            hk_bytes_put(&b, k, (size_t)(t - k));
          }
        }
        a = e < close ? e + 1 : close;
      }
      if (!set) { if (n) tr__put_s(&b, ", "); tr__putf(&b, "%s=", param); tr__sweep_put_value(&b, value); }
      p = close + 1;
    } else {
      tr__putf(&b, "%s=", param);
      tr__sweep_put_value(&b, value);
    }
    hk_bytes_put(&b, ")", 1);
  }
  hk_bytes_put(&b, "", 1);
  if (b.failed) { hk_bytes_free(&b); return NULL; }
  return (char *)b.data;
}

/* ---- the job's final metrics: the last value of every metric its loggers were sent ---------------- */
static hk_signal tr__sweep_capture(hk_ctx *ctx, void *user) {
  tr__sweep_priv *p = (tr__sweep_priv *)user;
  const tr_log_record *r = tr_log_current(ctx);
  int i;
  for (i = 0; r && i < r->n_metrics; i++) tr_log_set(&p->logged, r->metrics[i].name, r->metrics[i].value);
  return HK_CONTINUE;
}
TRAIN_API tr_err tr_sweep_metric(tr_sweep_job *job, const char *name, double value) {
  if (!job || !job->tr__p) return TR_ERR_INVALID;
  return tr_log_set(&((tr__sweep_priv *)job->tr__p)->set, name, value);
}
TRAIN_API tr_sweep_job *tr_sweep_current(hk_ctx *ctx) {
  if (!ctx || (ctx->event != HK_ON_JOB_START && ctx->event != HK_ON_JOB_END)) return NULL;
  return (tr_sweep_job *)ctx->outputs;
}

static void tr__sweep_say(const tr_sweep_desc *d, const char *fmt, ...) TR__PRINTF(2, 3);
static void tr__sweep_say(const tr_sweep_desc *d, const char *fmt, ...) {
  char line[1200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(d->log ? d->log : stderr, "sweep: %s\n", line);
  fflush(d->log ? d->log : stderr);
}

/* The values of job j: the last key varies fastest (Hydra's basic sweeper, itertools.product). */
static void tr__sweep_pick(tr__sweep_key *k, int n, long j) {
  int i;
  for (i = n - 1; i >= 0; i--) { k[i].cur = (int)(j % k[i].n); j /= k[i].n; }
}

static int tr__sweep_metric_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }
/* A cell of text the sweep did not check (a job's error, a metric's name): one line of UTF-8, control
   characters as spaces and stray bytes as U+FFFD, so that every reader (tr_plot_csv too) sees one row
   per line. */
static void tr__sweep_cell(hk_bytes *b, const char *s) {
  hk_bytes t;
  const char *p;
  memset(&t, 0, sizeof t);
  for (p = s; *p; p++) if ((unsigned char)*p < 32 || *p == 127) break;
  if (!*p && tr__utf8_ok(s)) { tr__csv_cell(b, s); return; }
  for (p = s; *p;) {
    size_t k = tr__utf8_len((const unsigned char *)p);
    if ((unsigned char)*p < 32 || *p == 127) { hk_bytes_put(&t, " ", 1); p++; }
    else if (k == 0) { hk_bytes_put(&t, "\xEF\xBF\xBD", 3); p++; }
    else { hk_bytes_put(&t, p, k); p += k; }
  }
  hk_bytes_put(&t, "", 1);
  if (t.failed) b->failed = 1;
  else tr__csv_cell(b, (const char *)t.data);
  hk_bytes_free(&t);
}
/* summary.csv, one row per job of the first `count`, and with plot summary.svg (the sweep rewrites
   summary.csv after every job, so that the jobs done are on disk whatever happens to the process next;
   the SVG at the end). */
static tr_err tr__sweep_summary(const tr_sweep_desc *d, const char *dir, tr__sweep_key *keys, int n_keys,
                                tr__sweep_done *done, long count, int plot, char *why, size_t why_len) {
  static const char *const status[] = { "ok", "failed", "skipped" };
  const char **names = NULL;
  int n_names = 0, cap = 0, i, k;
  long j;
  hk_bytes b;
  char *path, num[40];
  tr_err err = TR_OK;
  for (j = 0; j < count; j++) /* every final metric's name, once */
    for (i = 0; i < done[j].final.n_metrics; i++) {
      const char *nm = done[j].final.metrics[i].name;
      for (k = 0; k < n_names && strcmp(names[k], nm); k++) {}
      if (k < n_names) continue;
      if (n_names == cap) {
        const char **g = (const char **)realloc((void *)names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
        if (!g) { free((void *)names); snprintf(why, why_len, "out of memory"); return TR_ERR_NOMEM; }
        names = g;
      }
      names[n_names++] = nm;
    }
  if (n_names) qsort((void *)names, (size_t)n_names, sizeof *names, tr__sweep_metric_cmp);
  memset(&b, 0, sizeof b);
  tr__put_s(&b, "job,status");
  for (k = 0; k < n_keys; k++) { hk_bytes_put(&b, ",", 1); tr__sweep_cell(&b, keys[k].key); }
  for (i = 0; i < n_names; i++) { hk_bytes_put(&b, ",", 1); tr__sweep_cell(&b, names[i]); }
  tr__put_s(&b, ",error\n");
  for (j = 0; j < count; j++) {
    tr__sweep_pick(keys, n_keys, j);
    tr__putf(&b, "%ld,%s", j, status[done[j].status]);
    for (k = 0; k < n_keys; k++) { hk_bytes_put(&b, ",", 1); tr__sweep_cell(&b, keys[k].vals[keys[k].cur]); }
    for (i = 0; i < n_names; i++) {
      double v;
      hk_bytes_put(&b, ",", 1);
      if (tr_log_get(&done[j].final, names[i], &v)) { tr__num(num, sizeof num, v); tr__put_s(&b, num); }
    }
    hk_bytes_put(&b, ",", 1);
    if (done[j].error) tr__sweep_cell(&b, done[j].error);
    hk_bytes_put(&b, "\n", 1);
  }
  free((void *)names);
  path = tr__join(dir, "summary.csv");
  if (b.failed || !path) { snprintf(why, why_len, "out of memory"); err = TR_ERR_NOMEM; }
  else if (tr__write_whole(path, b.data, b.len, 0, NULL, why, why_len) != 0) err = TR_ERR_IO;
  hk_bytes_free(&b);
#if TR__ON_PLOT
  if (!err && plot) {
    char *svg = tr__join(dir, "summary.svg");
    if (!svg) { snprintf(why, why_len, "out of memory"); err = TR_ERR_NOMEM; }
    else err = tr_plot_csv(path, svg, d->metrics, why, why_len);
    free(svg);
  }
#else
  (void)d; (void)plot;
#endif
  free(path);
  return err;
}

static void tr__sweep_job_free(tr__sweep_done *done, long count) {
  long j;
  for (j = 0; done && j < count; j++) { free(done[j].error); tr_log_record_free(&done[j].final); }
  free(done);
}

/* The job's hyperparameters (tr_run_hparam*, typed): every field's value, every spec override. */
static tr_err tr__sweep_hparams(hk_registry *reg, const tr_sweep_desc *d, const tr__sweep_key *keys, int n_keys) {
  tr_err e = TR_OK;
  int i;
  for (i = 0; i < d->n_fields && !e; i++) {
    const tr_sweep_field *f = &d->fields[i];
    switch (f->type) {
    case TR_SWEEP_INT: e = tr_run_hparam_num(reg, f->name, (double)*(const int *)f->ptr); break;
    case TR_SWEEP_INT64: e = tr_run_hparam_num(reg, f->name, (double)*(const int64_t *)f->ptr); break;
    case TR_SWEEP_DOUBLE: e = tr_run_hparam_num(reg, f->name, *(const double *)f->ptr); break;
    case TR_SWEEP_FLOAT: e = tr_run_hparam_num(reg, f->name, (double)*(const float *)f->ptr); break;
    case TR_SWEEP_BOOL: e = tr_run_hparam_bool(reg, f->name, *(const int *)f->ptr); break;
    default: e = tr_run_hparam(reg, f->name, *(const char *const *)f->ptr ? *(const char *const *)f->ptr : ""); break;
    }
  }
  for (i = 0; i < n_keys && !e; i++)
    if (!keys[i].field) e = tr_run_hparam(reg, keys[i].key, keys[i].vals[keys[i].cur]);
  return e;
}

/* A job's registry: its run, the program's factories, the final-metrics hook, the hyperparameters, the spec. */
static tr_err tr__sweep_job_setup(hk_registry *jreg, const tr_run_desc *rd, const tr_sweep_desc *d, tr__sweep_priv *priv,
                                  const hk_opts *o, const tr__sweep_key *keys, int n_keys, const char *spec) {
  tr_err st = tr_run_setup(jreg, rd);
  if (!st && d->add_factories && d->add_factories(jreg) != HK_OK) st = TR_ERR_INVALID;
  if (!st && hk_on(jreg, HK_ON_LOG, tr__sweep_capture, priv, o, NULL) != HK_OK) st = TR_ERR_NOMEM;
  if (!st) st = tr__sweep_hparams(jreg, d, keys, n_keys);
  if (!st && spec[0] && hk_spec_apply(jreg, spec) != HK_OK) st = TR_ERR_INVALID;
  return st;
}

TRAIN_API tr_err tr_sweep(const tr_sweep_desc *d, int argc, char **argv, tr_sweep_result *res) {
  tr_sweep_result scratch;
  tr__sweep_key *keys = NULL;
  tr__sweep_old *old = NULL;
  tr__sweep_done *done = NULL;
  char **copies = NULL, *sweep_dir = NULL, *msg;
  hk_registry *check = NULL;
  hk_ctx sctx;
  int n_keys = 0, multirun, i, k, stopped = 0, summary_said = 0;
  long count = 1, j;
  tr_err first = TR_OK, err = TR_OK;
  size_t cap;
  if (!res) res = &scratch;
  memset(res, 0, sizeof *res);
  memset(&sctx, 0, sizeof sctx);
  msg = res->error;
  cap = sizeof res->error;
  if (!d || !d->job) { tr__msg(msg, cap, "tr_sweep: %s", d ? "desc.job (the function that runs a job) is NULL" : "the desc is NULL"); return TR_ERR_INVALID; }
  if (argc < 0 || (argc > 0 && !argv) || d->n_fields < 0 || (d->n_fields > 0 && !d->fields)) {
    tr__msg(msg, cap, "tr_sweep: argc/argv or fields/n_fields do not match (argc %d, n_fields %d)", argc, d->n_fields);
    return TR_ERR_INVALID;
  }
  for (i = 0; i < d->n_fields; i++)
    if (!d->fields[i].name || !d->fields[i].name[0] || !d->fields[i].ptr || (int)d->fields[i].type < 0 || d->fields[i].type >= TR_SWEEP_TYPE_COUNT) {
      tr__msg(msg, cap, "tr_sweep: field %d needs a name, a pointer and a type (TR_SWEEP_INT .. TR_SWEEP_STRING)", i);
      return TR_ERR_INVALID;
    } else if (tr__sweep_key_bad(d->fields[i].name)) { /* each job's hyperparameter: refused there, in every job */
      char shown[80];
      tr__msg(msg, cap, "tr_sweep: field %d's name '%s' %s", i, tr__sweep_show(d->fields[i].name, shown, sizeof shown),
              tr__sweep_key_bad(d->fields[i].name));
      return TR_ERR_INVALID;
    }
  multirun = d->multirun;
  keys = (tr__sweep_key *)calloc((size_t)argc + 1, sizeof *keys);
  copies = (char **)calloc((size_t)argc + 1, sizeof *copies);
  old = (tr__sweep_old *)calloc((size_t)d->n_fields + 1, sizeof *old);
  if (!keys || !copies || !old) { tr__msg(msg, cap, "tr_sweep: out of memory"); err = TR_ERR_NOMEM; goto out; }
  check = hk_create(NULL);
  if (!check || tr_run_setup(check, NULL) || (d->add_factories && d->add_factories(check) != HK_OK)) {
    tr__msg(msg, cap, "tr_sweep: %s", check ? hk_last_error(check) : "out of memory");
    err = check ? TR_ERR_INVALID : TR_ERR_NOMEM;
    goto out;
  }
  if (d->spec && d->spec[0] && hk_spec_check(check, d->spec)) {
    tr__msg(msg, cap, "tr_sweep: the spec: %s", hk_last_error(check));
    err = TR_ERR_INVALID;
    goto out;
  }

  /* ---- every override checked before anything runs ---- */
  for (i = 0; i < argc; i++) {
    tr__sweep_key *kk = &keys[n_keys];
    char *eq, *p;
    const char *a = argv[i] ? argv[i] : "", *at = strchr(a, '=');
    if (!strcmp(a, "-m") || !strcmp(a, "--multirun")) { multirun = 1; continue; }
    if (!at || at == a) {
      tr__msg(msg, cap, "tr_sweep: argument '%s' is not an override: expected key=value or key=v1,v2,... (or -m)", a);
      err = TR_ERR_INVALID;
      goto out;
    }
    if (!(copies[i] = tr__strdup(a))) { tr__msg(msg, cap, "tr_sweep: out of memory"); err = TR_ERR_NOMEM; goto out; }
    eq = copies[i] + (at - a);
    *eq = 0;
    kk->key = copies[i];
    for (k = 0; k < n_keys; k++)
      if (!strcmp(keys[k].key, kk->key)) {
        tr__msg(msg, cap, "tr_sweep: key '%s' is given twice: give one list (%s=v1,v2,...)", kk->key, kk->key);
        err = TR_ERR_INVALID;
        goto out;
      }
    for (k = 0; k < d->n_fields; k++) if (!strcmp(d->fields[k].name, kk->key)) kk->field = &d->fields[k];
    if (!kk->field) { /* factory.param of the spec */
      const char *dot = strrchr(kk->key, '.');
      char *trial;
      int found = 0;
      if (dot && dot != kk->key && dot[1] && (size_t)(dot - kk->key) < sizeof kk->factory) {
        snprintf(kk->factory, sizeof kk->factory, "%.*s", (int)(dot - kk->key), kk->key);
        kk->param = dot + 1;
        if (!(trial = tr__sweep_spec_set(d->spec ? d->spec : "", kk->factory, kk->param, "0", &found))) {
          tr__msg(msg, cap, "tr_sweep: out of memory");
          err = TR_ERR_NOMEM;
          goto out;
        }
        free(trial);
      }
      if (!found) {
        char shown[80];
        hk_bytes fl;
        memset(&fl, 0, sizeof fl);
        for (k = 0; k < d->n_fields; k++) tr__putf(&fl, "%s%s", k ? ", " : "", d->fields[k].name);
        hk_bytes_put(&fl, "", 1);
        tr__msg(msg, cap, "tr_sweep: unknown key '%s': not a field of the program (fields: %s) nor factory.param of a "
                "callback in the spec (\"%s\")", tr__sweep_show(kk->key, shown, sizeof shown), fl.data && !fl.failed && d->n_fields ? (const char *)fl.data : "none",
                d->spec ? d->spec : "");
        hk_bytes_free(&fl);
        err = TR_ERR_INVALID;
        goto out;
      }
      if (tr__sweep_key_bad(kk->key)) { /* each job's hyperparameter: refused there, in every job */
        tr__msg(msg, cap, "tr_sweep: key '%s' %s", kk->key, tr__sweep_key_bad(kk->key));
        err = TR_ERR_INVALID;
        goto out;
      }
    }
    /* the values: a comma list, none empty */
    for (p = eq + 1;; ) {
      char *c = strchr(p, ','), **g;
      if (c) *c = 0;
      if (!*p) {
        tr__msg(msg, cap, "tr_sweep: '%s=%s' has an empty %s: give %s=v1,v2,... with %s", kk->key, a + (eq + 1 - copies[i]),
                eq[1] ? "value" : "list", kk->key, kk->field ? tr__sweep_type_doc(kk->field->type) : "values of its spec parameter");
        err = TR_ERR_INVALID;
        goto out;
      }
      if (!(g = (char **)realloc(kk->vals, (size_t)(kk->n + 1) * sizeof *g))) { tr__msg(msg, cap, "tr_sweep: out of memory"); err = TR_ERR_NOMEM; goto out; }
      kk->vals = g;
      kk->vals[kk->n++] = p;
      {
        const char *bad = tr__sweep_text_bad(p), *why = NULL;
        char shown[80];
        if (bad || (kk->field && tr__sweep_parse(kk->field->type, p, NULL, &why))) {
          if (bad) tr__msg(msg, cap, "tr_sweep: bad value '%s' for '%s': %s", tr__sweep_show(p, shown, sizeof shown), kk->key, bad);
          else tr__msg(msg, cap, "tr_sweep: bad value '%s' for '%s': expected %s%s%s", tr__sweep_show(p, shown, sizeof shown), kk->key,
                       tr__sweep_type_doc(kk->field->type), why ? "; " : "", why ? why : "");
          err = TR_ERR_INVALID;
          goto out;
        }
      }
      if (!kk->field) { /* the factory checks it: its spec with this value */
        int found;
        char *trial = tr__sweep_spec_set(d->spec ? d->spec : "", kk->factory, kk->param, p, &found);
        hk_err he = trial ? hk_spec_check(check, trial) : HK_ERR_NOMEM;
        free(trial);
        if (he) {
          tr__msg(msg, cap, "tr_sweep: bad override '%s=%s': %s", kk->key, p, he == HK_ERR_NOMEM ? "out of memory" : hk_last_error(check));
          err = he == HK_ERR_NOMEM ? TR_ERR_NOMEM : TR_ERR_INVALID;
          goto out;
        }
      }
      if (!c) break;
      p = c + 1;
    }
    if (count > 100000 / kk->n) {
      tr__msg(msg, cap, "tr_sweep: more than 100000 jobs (at '%s'): sweep fewer values", kk->key);
      err = TR_ERR_INVALID;
      goto out;
    }
    count *= kk->n;
    n_keys++;
  }
  if (count > 1) multirun = 1;
  res->jobs = (int)count;
  res->multirun = multirun;
  if (!(done = (tr__sweep_done *)calloc((size_t)count, sizeof *done))) { tr__msg(msg, cap, "tr_sweep: out of memory"); err = TR_ERR_NOMEM; goto out; }

  /* ---- the sweep's directory ---- */
  if (multirun) {
    tr_run_desc sd;
    const char *dir;
    memset(&sd, 0, sizeof sd);
    sd.save_dir = d->save_dir ? d->save_dir : "multirun";
    sd.name = "";
    if (tr_run_setup(check, &sd) || !(dir = tr_run_dir(check)) || !(sweep_dir = tr__strdup(dir))) {
      tr__msg(msg, cap, "tr_sweep: the sweep's directory: %s", hk_last_error(check));
      err = TR_ERR_IO;
      goto out;
    }
    snprintf(res->dir, sizeof res->dir, "%s", sweep_dir);
    tr__sweep_say(d, "%ld job%s in %s", count, count == 1 ? "" : "s", sweep_dir);
  }
  for (i = 0; i < d->n_fields; i++) tr__sweep_keep(&d->fields[i], &old[i], 0);

  sctx.reg = d->reg;
  if (d->reg && HK_FIRE(d->reg, multirun ? HK_ON_MULTIRUN_START : HK_ON_RUN_START, &sctx) == HK_FAIL) {
    tr__msg(msg, cap, "tr_sweep: %s", sctx.hook_failure ? sctx.hook_failure : "a hook failed");
    err = TR_ERR_HOOK;
    for (i = 0; i < d->n_fields; i++) tr__sweep_keep(&d->fields[i], &old[i], 1);
    goto out;
  }

  /* ---- the jobs, one after another ---- */
  for (j = 0; j < count; j++) {
    tr_sweep_job job;
    tr__sweep_priv priv;
    tr_run_desc rd;
    hk_bytes ov;
    char *spec = NULL, leaf[40], why[600], keep[512];
    hk_registry *jreg = NULL;
    tr_err st = TR_OK;
    memset(&job, 0, sizeof job);
    memset(&priv, 0, sizeof priv);
    memset(&ov, 0, sizeof ov);
    why[0] = 0;
    if (stopped) { done[j].status = 2; res->skipped++; continue; }
    tr__sweep_pick(keys, n_keys, j);
    spec = tr__strdup(d->spec ? d->spec : "");
    for (k = 0; k < n_keys; k++) {
      tr__sweep_key *kk = &keys[k];
      tr__putf(&ov, "%s%s=%s", k ? " " : "", kk->key, kk->vals[kk->cur]);
      if (kk->field) tr__sweep_parse(kk->field->type, kk->vals[kk->cur], kk->field->ptr, NULL);
      else if (spec) {
        int found;
        char *next = tr__sweep_spec_set(spec, kk->factory, kk->param, kk->vals[kk->cur], &found);
        free(spec);
        spec = next;
      }
    }
    hk_bytes_put(&ov, "", 1);
    rd = d->run;
    if (multirun) {
      snprintf(leaf, sizeof leaf, "version_%ld", j);
      rd.save_dir = sweep_dir;
      rd.name = "";
      rd.version = leaf;
    }
    job.index = (int)j;
    job.count = (int)count;
    job.overrides = ov.failed ? "" : (const char *)ov.data;
    job.spec = spec ? spec : "";
    job.run = &rd;
    job.dir = "";
    job.error = "";
    job.tr__p = &priv;
    if (multirun) tr__sweep_say(d, "#%ld %s", j, job.overrides);
    if (!spec || ov.failed) { st = TR_ERR_NOMEM; snprintf(why, sizeof why, "out of memory"); }
    hk_metric_clear(&sctx);
    sctx.outputs = &job;
    if (!st && d->reg && HK_FIRE(d->reg, HK_ON_JOB_START, &sctx) == HK_FAIL) {
      st = TR_ERR_HOOK;
      snprintf(why, sizeof why, "%s", sctx.hook_failure ? sctx.hook_failure : "a hook failed at on_job_start");
    }
    if (!st) { /* its registry: the run, the factories, the spec, the final-metrics hook */
      hk_opts o;
      memset(&o, 0, sizeof o);
      o.name = "sweep_final_metrics";
      o.monitor = 1;
      o.order = INT_MAX; /* after the loggers: what they were sent */
      if (!(jreg = hk_create(NULL))) { st = TR_ERR_NOMEM; snprintf(why, sizeof why, "out of memory"); }
      else if ((st = tr__sweep_job_setup(jreg, &rd, d, &priv, &o, keys, n_keys, spec)) != TR_OK)
        snprintf(why, sizeof why, "%s", hk_last_error(jreg));
      else {
        const char *dir = tr_run_dir(jreg);
        if (!dir) { st = TR_ERR_IO; snprintf(why, sizeof why, "%s", hk_last_error(jreg)); }
        else {
          char *path = tr__join(dir, "overrides.yaml");
          hk_bytes y;
          memset(&y, 0, sizeof y);
          job.dir = dir;
          for (k = 0; k < n_keys; k++) { /* Hydra's .hydra/overrides.yaml: "- key=value" */
            char *entry = (char *)malloc(strlen(keys[k].key) + strlen(keys[k].vals[keys[k].cur]) + 2);
            if (!entry) { y.failed = 1; break; }
            sprintf(entry, "%s=%s", keys[k].key, keys[k].vals[keys[k].cur]);
            tr__put_s(&y, "- ");
            tr__yaml_str(&y, entry);
            tr__put_s(&y, "\n");
            free(entry);
          }
          if (!path || y.failed) { st = TR_ERR_NOMEM; snprintf(why, sizeof why, "out of memory"); }
          else if (tr__write_whole(path, y.data ? (const void *)y.data : (const void *)"", y.len, 0, NULL, why, sizeof why)) st = TR_ERR_IO;
          free(path);
          hk_bytes_free(&y);
        }
      }
      if (!st) {
        st = d->job(jreg, &job, d->user);
        if (st) snprintf(why, sizeof why, "%s", tr_run_error(jreg)[0] ? tr_run_error(jreg) : tr_err_name(st));
      }
      if (jreg) { /* the job's files are complete before on_job_end */
        snprintf(keep, sizeof keep, "%s", job.dir);
        hk_destroy(jreg);
        job.dir = keep;
      }
    }
    /* final metrics: the logged ones, then the job's own */
    for (i = 0; i < priv.logged.n_metrics; i++) tr_log_set(&done[j].final, priv.logged.metrics[i].name, priv.logged.metrics[i].value);
    for (i = 0; i < priv.set.n_metrics; i++) tr_log_set(&done[j].final, priv.set.metrics[i].name, priv.set.metrics[i].value);
    job.status = st;
    job.error = why;
    job.n_metrics = done[j].final.n_metrics;
    job.metrics = done[j].final.metrics;
    for (i = 0; i < job.n_metrics; i++) hk_metric_set(&sctx, job.metrics[i].name, job.metrics[i].value);
    sctx.outputs = &job;
    if (d->reg) {
      hk_signal sig = HK_FIRE(d->reg, HK_ON_JOB_END, &sctx);
      sig = hk_honoured(d->reg, HK_ON_JOB_END, sig);
      if (sig == HK_FAIL && !st) {
        st = job.status = TR_ERR_HOOK;
        snprintf(why, sizeof why, "%s", sctx.hook_failure ? sctx.hook_failure : "a hook failed at on_job_end");
      }
      if (sig == HK_STOP) stopped = 1;
    }
    sctx.outputs = NULL;
    if (st) {
      done[j].status = 1;
      done[j].error = tr__strdup(why);
      res->failed++;
      tr__sweep_say(d, "#%ld failed (%s): %s", j, tr_err_name(st), why);
      if (!first) {
        first = st;
        tr__msg(msg, cap, "job %ld (%s) failed: %s", j, job.overrides[0] ? job.overrides : "no overrides", why);
      }
      if (d->stop_on_failure || st == TR_ERR_INTERRUPTED) stopped = 1;
    } else res->ok++;
    if (multirun && j + 1 < count) { /* the jobs done so far, on disk now: a process that dies in a later job leaves them */
      char swhy[600];
      if (tr__sweep_summary(d, sweep_dir, keys, n_keys, done, j + 1, 0, swhy, sizeof swhy) && !summary_said) {
        summary_said = 1;
        tr__sweep_say(d, "the summary so far: %s", swhy);
      }
    }
    free(spec);
    hk_bytes_free(&ov);
    tr_log_record_free(&priv.logged);
    tr_log_record_free(&priv.set);
  }
  for (i = 0; i < d->n_fields; i++) tr__sweep_keep(&d->fields[i], &old[i], 1);

  /* ---- the summary, then the end events ---- */
  err = first;
  if (multirun) {
    char why[600];
    tr_err e = tr__sweep_summary(d, sweep_dir, keys, n_keys, done, count, 1, why, sizeof why);
    if (e) {
      if (!err) { err = e; tr__msg(msg, cap, "tr_sweep: the summary: %s", why); }
      tr__sweep_say(d, "the summary: %s", why);
    } else tr__sweep_say(d, "%d ok, %d failed, %d skipped: %s/summary.csv", res->ok, res->failed, res->skipped, sweep_dir);
  }
  hk_metric_clear(&sctx);
  if (d->reg && HK_FIRE(d->reg, multirun ? HK_ON_MULTIRUN_END : HK_ON_RUN_END, &sctx) == HK_FAIL && !err) {
    tr__msg(msg, cap, "tr_sweep: %s", sctx.hook_failure ? sctx.hook_failure : "a hook failed");
    err = TR_ERR_HOOK;
  }
out:
  hk_ctx_free(&sctx);
  if (check) hk_destroy(check);
  for (i = 0; keys && i <= argc; i++) free(keys[i].vals);
  for (i = 0; copies && i <= argc; i++) free(copies[i]);
  free(keys);
  free(copies);
  free(old);
  free(sweep_dir);
  tr__sweep_job_free(done, count);
  if (!err) res->error[0] = 0;
  return err;
}
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
