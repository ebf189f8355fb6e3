/* train/callbacks/prediction_writer.h - prediction_writer. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_PREDICTION_WRITER_H /* part */
#define TRAIN_PREDICTION_WRITER_H /* part */
#include "../battery.h" /* part */
#include "../safetensors.h" /* part */

TR__C_BEGIN /* part */
/* ---- prediction_writer (Lightning's BasePredictionWriter, with the writing done) --------------------------
   Writes what a predict run predicts: at every on_predict_batch_end ctx->outputs must point at a
   tr_predictions (train/base.h), else the run fails at that batch naming what it expected. write_interval
   as Lightning's (batch streams, epoch writes once at the epoch's end, batch_and_epoch both); formats csv,
   jsonl (9 significant digits: floats read back exactly) and safetensors; dirpath defaults to the run's
   predictions/, else ./predictions. Every file written atomically, replacing only a file it wrote (anyone
   else's fails the run at on_predict_start; a later process of the same run takes its own back through a
   record kept beside them). MPI: rank 0 writes, {rank} in filename for every rank's own.
   Hand-written loop: tr_run_enter(reg, &ctx, HK_STAGE_PREDICT, NULL), the predict events with
   ctx->outputs and ctx->batch_idx set, tr_run_leave. docs/callbacks.md ("prediction_writer in detail"). */
typedef enum tr_prediction_format { TR_PREDICTION_CSV = 0, TR_PREDICTION_JSONL, TR_PREDICTION_SAFETENSORS } tr_prediction_format;
typedef enum tr_write_interval { TR_WRITE_BATCH = 0, TR_WRITE_EPOCH, TR_WRITE_BATCH_AND_EPOCH } tr_write_interval;

#define TR_PREDICTION_WRITER_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING, const char *,          dirpath,        "",            NULL, "the directory; empty: <run directory>/predictions when a logger made one, else ./predictions") \
  X(STRING, const char *,          filename,       "predictions", NULL, "the files' name without the extension; {rank}: one set of files per rank") \
  X(CHOICE, tr_prediction_format,  format,         "csv",         "csv|jsonl|safetensors", "the files' format") \
  X(CHOICE, tr_write_interval,     write_interval, "batch",       "batch|epoch|batch_and_epoch", "write as each batch ends, once at the epoch's end, or both")
typedef struct tr_prediction_writer_desc { TR_PREDICTION_WRITER_PARAMS(TR__FIELD) } tr_prediction_writer_desc;

typedef struct tr_prediction_writer_state {
  const char *dirpath;          /* where it writes (the default resolved at on_predict_start) */
  int64_t rows;                 /* rows written by the last predict run (its batches' rows; 0 on ranks that do not write) */
  int64_t files;                /* files put in place by the last predict run */
  const char *last_path;        /* the last file written, "" before the first */
} tr_prediction_writer_state;

TRAIN_API tr_err tr_prediction_writer(hk_registry *reg, const tr_prediction_writer_desc *d, hk_handle *out);
TRAIN_API const tr_prediction_writer_state *tr_prediction_writer_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- prediction_writer ------------------------------------------------------------------------------ */
static const char *const tr__pw_ext[] = { "csv", "jsonl", "safetensors" };

typedef struct tr__pw {
  tr_prediction_writer_state pub;
  tr_run *run;
  tr_prediction_format format;
  tr_write_interval interval;
  char *dir_given, *filename;    /* as given ("" dir: the default) */
  char *dir, *base, *path;       /* this run's directory, <dir>/<filename with {rank}>, the last path written */
  int writes;                    /* this rank writes */
  int64_t cols;                  /* the first batch's columns; -1 before it */
  int64_t batches;               /* batches seen in this epoch */
  char **names;                  /* the first batch's names (cols of them), or NULL */
  hk_bytes text, all;            /* a batch's text; the epoch's text (csv, jsonl) */
  float *vals;                   /* the epoch's values (safetensors) */
  int64_t n_vals, cap_vals;
  hk_bytes per_batch;            /* "4,4,3": rows of each batch (safetensors, epoch) */
  int fd;                        /* the streamed file, open at its end; -1 */
  tr__file_id id;                /* the whole file (csv, jsonl; safetensors epoch) it wrote */
  tr__file_id *batch_id;         /* safetensors batch files it wrote, by batch index */
  int64_t n_batch_id;
  tr__file_id record;            /* the record of its files (tr__pw_keep) it wrote or read back */
  int kept;                      /* this predict run's record is kept (at on_predict_end; else at teardown) */
} tr__pw;

static void tr__pw_free_names(tr__pw *s) {
  int64_t i;
  for (i = 0; s->names && i < s->cols; i++) free(s->names[i]);
  free(s->names);
  s->names = NULL;
}
static void tr__pw_destroy(void *user) {
  tr__pw *s = (tr__pw *)user;
  if (!s) return;
  tr__fd_close(&s->fd);
  tr__pw_free_names(s);
  free(s->dir_given); free(s->filename); free(s->dir); free(s->base); free(s->path);
  free(s->text.data); free(s->all.data); free(s->per_batch.data); free(s->vals); free(s->batch_id);
  free(s);
}

static int tr__pw_has_batch(const tr__pw *s) { return s->interval != TR_WRITE_EPOCH; }
static int tr__pw_has_epoch(const tr__pw *s) { return s->interval != TR_WRITE_BATCH; }

/* <base>.<ext>, or <base>-batch_<N>.safetensors (batch >= 0), into s->path. */
/* The file of the whole run (batch < 0) or of one batch (safetensors), in p of tr__pw_cap(s) bytes. */
static size_t tr__pw_cap(const tr__pw *s) { return strlen(s->base) + 48; }
static void tr__pw_name(const tr__pw *s, int64_t batch, char *p) {
  if (batch < 0) snprintf(p, tr__pw_cap(s), "%s.%s", s->base, tr__pw_ext[s->format]);
  else snprintf(p, tr__pw_cap(s), "%s-batch_%lld.safetensors", s->base, (long long)batch);
}
static int tr__pw_path(tr__pw *s, int64_t batch) {
  char *p = (char *)realloc(s->path, tr__pw_cap(s));
  if (!p) return -1;
  s->path = p;
  tr__pw_name(s, batch, p);
  s->pub.last_path = s->path;
  return 0;
}
static tr__file_id *tr__pw_batch_id(tr__pw *s, int64_t b) {
  if (b >= s->n_batch_id) {
    int64_t n = b + 1 > 2 * s->n_batch_id ? b + 1 : 2 * s->n_batch_id;
    tr__file_id *p = (tr__file_id *)realloc(s->batch_id, (size_t)n * sizeof *p);
    if (!p) return NULL;
    memset(p + s->n_batch_id, 0, (size_t)(n - s->n_batch_id) * sizeof *p);
    s->batch_id = p;
    s->n_batch_id = n;
  }
  return &s->batch_id[b];
}
/* ---- a later process of the run takes its files back ----------------------------------------------------------
   Which files are the writer's is known in memory only, so a resume that continues the run (a second process)
   found them there and refused them as anyone's. At a predict run's end a record is kept beside them,
   <dirpath>/.<filename>.prediction_writer: the run's id (the one in the run directory and its checkpoints), then
   a line per file it wrote, "dev ino size mtime ctime name". At on_predict_start a run of that id takes back
   each of its names whose file still has that stamp; anything else at its paths stays refused. No run id yet
   (no checkpoint written): no record, as before. */
static char *tr__pw_file(const tr__pw *s, int64_t batch) { /* tr__pw_path's path, s->path untouched */
  char *p = (char *)malloc(tr__pw_cap(s));
  if (p) tr__pw_name(s, batch, p);
  return p;
}
static char *tr__pw_record_path(const tr__pw *s) {
  size_t d = strlen(s->dir), n = strlen(s->base) + 32;
  char *p = (char *)malloc(n);
  if (p) snprintf(p, n, "%s/.%s.prediction_writer", s->dir, s->base + d + 1);
  return p;
}
static void tr__pw_record_line(const tr__pw *s, hk_bytes *b, int64_t batch, const tr__file_id *id) {
  uint64_t st[5] = { 0 };
  char line[160], *p = tr__pw_file(s, batch);
  if (!p) { b->failed = 1; return; }
  if (tr__file_stamp(p, st) == 0 && st[0] == id->dev && st[1] == id->ino) {
    snprintf(line, sizeof line, "%llu %llu %llu %llu %llu ", (unsigned long long)st[0], (unsigned long long)st[1],
             (unsigned long long)st[2], (unsigned long long)st[3], (unsigned long long)st[4]);
    tr__put_s(b, line);
    tr__put_s(b, p + strlen(s->dir) + 1);
    hk_bytes_put(b, "\n", 1);
  }
  free(p);
}
static void tr__pw_keep(tr__pw *s, hk_ctx *ctx) {
  const char *id = s->run ? s->run->tr__p->id : "";
  char why[700], *rec;
  hk_bytes b;
  int64_t k;
  int e;
  if (s->kept || !s->writes || s->pub.files == 0 || !id[0] || !s->base) return;
  s->kept = 1;
  memset(&b, 0, sizeof b);
  tr__put_s(&b, "prediction_writer 1 ");
  tr__put_s(&b, id);
  hk_bytes_put(&b, "\n", 1);
  if (s->id.set) tr__pw_record_line(s, &b, -1, &s->id);
  for (k = 0; k < s->n_batch_id; k++) if (s->batch_id[k].set) tr__pw_record_line(s, &b, k, &s->batch_id[k]);
  rec = tr__pw_record_path(s);
  e = b.failed || !rec ? ENOMEM : tr__write_mine(rec, b.data, b.len, &s->record, NULL, why, sizeof why);
  if (e) tr__run_say(s->run, ctx, "prediction_writer", "the record of its files was not kept (%s): a resumed run will not "
                     "replace them", e == ENOMEM ? "out of memory" : why);
  free(rec);
  free(b.data);
}
/* The record's files that are still as this run left them: its own again. */
static void tr__pw_take_back(tr__pw *s) {
  const char *id = s->run ? s->run->tr__p->id : "", *line, *end;
  char *rec = tr__pw_record_path(s), *whole = tr__pw_file(s, -1), *text;
  size_t dn = strlen(s->dir) + 1, bn = strlen(s->base) - dn;
  tr__file_id got;
  hk_bytes b;
  memset(&b, 0, sizeof b);
  memset(&got, 0, sizeof got);
  if (rec && whole && tr__read_mine(rec, &b, &got) == 0 && hk_bytes_put(&b, "", 1) == 0 && !b.failed &&
      !strncmp(text = (char *)b.data, "prediction_writer 1 ", 20) && (end = strchr(text, '\n')) != NULL) {
    s->record = got; /* its own record: the next one replaces it */
    if (id[0] && (size_t)(end - text - 20) == strlen(id) && !strncmp(text + 20, id, strlen(id)))
      for (line = end + 1; *line; line = end + 1) {
        unsigned long long v[5];
        uint64_t st[5] = { 0 };
        long long batch = -2;
        int n = 0, k;
        char *path;
        if (!(end = strchr(line, '\n'))) break;
        if (sscanf(line, "%llu %llu %llu %llu %llu%n", &v[0], &v[1], &v[2], &v[3], &v[4], &n) != 5 || line + n >= end ||
            line[n] != ' ')
          continue;
        line += n + 1;
        if ((size_t)(end - line) == strlen(whole + dn) && !strncmp(line, whole + dn, (size_t)(end - line))) batch = -1;
        else if (s->format == TR_PREDICTION_SAFETENSORS && !strncmp(line, s->base + dn, bn) &&
                 sscanf(line + bn, "-batch_%lld.safetensors", &batch) != 1) batch = -2;
        if (batch < -1 || !(path = tr__pw_file(s, batch))) continue;
        /* (the name read must be the one this writer gives that batch) */
        if ((size_t)(end - line) == strlen(path + dn) && !strncmp(line, path + dn, (size_t)(end - line)) &&
            tr__file_stamp(path, st) == 0) {
          for (k = 0; k < 5 && st[k] == (uint64_t)v[k]; k++) {}
          if (k == 5) {
            tr__file_id *fid = batch < 0 ? &s->id : tr__pw_batch_id(s, batch);
            if (fid) { fid->set = 1; fid->dev = st[0]; fid->ino = st[1]; }
          }
        }
        free(path);
      }
  }
  free(b.data);
  free(rec);
  free(whole);
}
static hk_signal tr__pw_foreign(hk_ctx *ctx, const char *path) {
  return hk_fail(ctx, "'%s' is there and was not written by this prediction_writer (another run's predictions, or a file "
                 "of yours): it is not replaced; give another dirpath or filename, or move it", path);
}

/* The directory (the default resolved), the files' base name ({rank} expanded), the directory made and
   probed, and no file of anyone else where this run will write. */
static hk_signal tr__pw_start(hk_ctx *ctx, void *user) {
  tr__pw *s = (tr__pw *)user;
  const char *rd = s->run ? s->run->tr__p->dir : NULL, *f = s->filename, *at;
  hk_bytes b;
  int64_t k, n;
  s->batches = 0;
  tr__pw_free_names(s); /* (cols of them) */
  s->cols = -1;
  s->all.len = 0; s->all.failed = 0;
  s->per_batch.len = 0; s->per_batch.failed = 0;
  s->n_vals = 0;
  s->pub.rows = s->pub.files = 0;
  s->kept = 0;
  tr__fd_close(&s->fd);
  free(s->dir);
  s->dir = s->dir_given[0] ? tr__strdup(s->dir_given) : rd ? tr__join(rd, "predictions") : tr__strdup("predictions");
  memset(&b, 0, sizeof b);
  tr__put_s(&b, s->dir ? s->dir : "");
  hk_bytes_put(&b, "/", 1);
  for (; (at = strstr(f, "{rank}")) != NULL; f = at + 6) {
    char r[24];
    hk_bytes_put(&b, f, (size_t)(at - f));
    snprintf(r, sizeof r, "%d", ctx->rank);
    tr__put_s(&b, r);
  }
  tr__put_s(&b, f);
  hk_bytes_put(&b, "", 1);
  free(s->base);
  s->base = (char *)b.data;
  if (!s->dir || b.failed) return hk_fail(ctx, "out of memory");
  s->pub.dirpath = s->dir;
  s->writes = ctx->rank == 0 || strstr(s->filename, "{rank}") != NULL;
  if (ctx->rank == 0 && ctx->world_size > 1 && !strstr(s->filename, "{rank}"))
    tr__run_say_on(s->run, ctx, 1, "prediction_writer", "%d processes: rank 0 writes its share of the batches only; "
                   "put {rank} in filename for a file of every rank's", ctx->world_size);
  if (!s->writes) return HK_CONTINUE;
  if (tr__cb_dir_ready(ctx, s->dir, "predictions could not be written") == HK_FAIL) return HK_FAIL;
  tr__pw_take_back(s); /* a later process of this run: its files again */
  if (s->format != TR_PREDICTION_SAFETENSORS || tr__pw_has_epoch(s)) {
    if (tr__pw_path(s, -1)) return hk_fail(ctx, "out of memory");
    if (tr__whose(s->path, &s->id) < 0) return tr__pw_foreign(ctx, s->path);
  }
  if (s->format == TR_PREDICTION_SAFETENSORS && tr__pw_has_batch(s)) {
    n = s->run && s->run->eval_batches > 0 ? s->run->eval_batches : 1;
    for (k = 0; k < n; k++) {
      tr__file_id *id = tr__pw_batch_id(s, k);
      if (!id || tr__pw_path(s, k)) return hk_fail(ctx, "out of memory");
      if (tr__whose(s->path, id) < 0) return tr__pw_foreign(ctx, s->path);
    }
  }
  s->pub.last_path = "";
  return HK_CONTINUE;
}

/* ctx->outputs as a tr_predictions, checked: NULL and a message in why when it is not one. */
static const tr_predictions *tr__pw_outputs(tr__pw *s, const hk_ctx *ctx, char *why, size_t cap) {
  const tr_predictions *p = (const tr_predictions *)ctx->outputs;
  int64_t i;
  const char *expect = "ctx->outputs must point at a tr_predictions { values, rows, cols, names } (model.predict sets it in "
                       "tr_predict; a loop of yours before on_predict_batch_end)";
  if (!p) { snprintf(why, cap, "batch %lld: ctx->outputs is NULL: %s", (long long)ctx->batch_idx, expect); return NULL; }
  if (p->rows < 0 || p->cols < 1 || p->cols > 1000000 || p->rows > (INT64_C(1) << 40) / p->cols) {
    snprintf(why, cap, "batch %lld: the tr_predictions at ctx->outputs has rows %lld, cols %lld: rows >= 0 and cols in "
             "1..1000000 (rows * cols < 2^40) expected; %s", (long long)ctx->batch_idx, (long long)p->rows,
             (long long)p->cols, expect);
    return NULL;
  }
  if (!p->values && p->rows > 0) {
    snprintf(why, cap, "batch %lld: the tr_predictions at ctx->outputs has values NULL for %lld rows: rows * cols floats "
             "expected", (long long)ctx->batch_idx, (long long)p->rows);
    return NULL;
  }
  if (s->cols >= 0 && p->cols != s->cols) {
    snprintf(why, cap, "batch %lld has %lld columns, the first batch had %lld: every batch of a predict run gives the same "
             "columns", (long long)ctx->batch_idx, (long long)p->cols, (long long)s->cols);
    return NULL;
  }
  for (i = 0; p->names && i < p->cols; i++)
    if (!p->names[i] || !p->names[i][0] || strpbrk(p->names[i], ",\"\r\n")) {
      snprintf(why, cap, "batch %lld: column name %lld of the tr_predictions at ctx->outputs is %s: names are not empty and "
               "hold no comma, quote or line break", (long long)ctx->batch_idx, (long long)i,
               !p->names[i] ? "NULL" : !p->names[i][0] ? "empty" : "not that");
      return NULL;
    }
  return p;
}

/* A finite nonzero float as "%.9g" writes it, ~10x faster than snprintf: scaled by a power of ten to 9
   digits and rounded once (printf's text where the power is exact, 1e-14 < |f| < 1e31; elsewhere within
   half a unit of the 9th digit, still reading back as the same float). Its length; out holds 24 (a double's
   "%.9g" fits 17: "-1.23456789e+308"). */
static int tr__pw_f9(char *out, float f) {
  static const double p10[23] = { 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                  1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22 };
  double x = f < 0 ? -(double)f : (double)f, m;
  char dig[10];
  int e, k, n = 0, i, last, tries;
  uint64_t d = 0;
  if (!(x >= 1e-46 && x <= 1e39)) return snprintf(out, 24, "%.9g", (double)f); /* (denormals read as 0: -ffast-math) */
  e = (int)floor(log10(x));
  for (tries = 0; tries < 4; tries++) {
    k = 8 - e;
    if (k < 0) m = -k > 22 ? x / p10[22] / p10[-k - 22] : x / p10[-k]; /* -k <= 30: |f| < 3.5e38 */
    else { m = x; while (k > 22) { m *= p10[22]; k -= 22; } m *= p10[k]; }
    d = (uint64_t)llrint(m);
    if (d >= 1000000000u) e++;
    else if (d < 100000000u) e--;
    else break;
  }
  if (tries == 4) return snprintf(out, 24, "%.9g", (double)f);
  for (i = 8; i >= 0; i--) { dig[i] = (char)('0' + d % 10); d /= 10; }
  for (last = 8; last > 0 && dig[last] == '0'; last--) {} /* %g drops trailing zeros */
  if (f < 0) out[n++] = '-';
  if (e < -4 || e >= 9) { /* d.ddde+XX */
    out[n++] = dig[0];
    if (last > 0) { out[n++] = '.'; for (i = 1; i <= last; i++) out[n++] = dig[i]; }
    out[n++] = 'e';
    out[n++] = e < 0 ? '-' : '+';
    k = e < 0 ? -e : e;
    out[n++] = (char)('0' + k / 10);
    out[n++] = (char)('0' + k % 10);
  } else if (e >= 0) { /* ddd.ddd */
    for (i = 0; i <= e; i++) out[n++] = dig[i];
    if (last > e) { out[n++] = '.'; for (i = e + 1; i <= last; i++) out[n++] = dig[i]; }
  } else { /* 0.000ddd */
    out[n++] = '0';
    out[n++] = '.';
    for (i = -1; i > e; i--) out[n++] = '0';
    for (i = 0; i <= last; i++) out[n++] = dig[i];
  }
  return n;
}
/* A value as text ("%.9g"), appended */
static void tr__pw_num(hk_bytes *b, float v) {
  char num[32];
  int m = v != 0 && hk_is_finitef(v) ? tr__pw_f9(num, v) : snprintf(num, sizeof num, "%.9g", (double)v);
  hk_bytes_put(b, num, (size_t)m);
}
static void tr__pw_col(const tr__pw *s, hk_bytes *b, int64_t k) {
  char c[32];
  if (s->names) { tr__put_s(b, s->names[k]); return; }
  snprintf(c, sizeof c, "col%lld", (long long)k);
  tr__put_s(b, c);
}
static void tr__pw_header(const tr__pw *s, hk_bytes *b) {
  int64_t k;
  if (s->format != TR_PREDICTION_CSV) return;
  tr__put_s(b, "batch,row");
  for (k = 0; k < s->cols; k++) { hk_bytes_put(b, ",", 1); tr__pw_col(s, b, k); }
  hk_bytes_put(b, "\n", 1);
}
/* The batch's rows as csv or jsonl text, appended to b. */
static void tr__pw_rows(const tr__pw *s, hk_bytes *b, const tr_predictions *p, int64_t batch) {
  char num[64]; /* {"batch":19 digits,"row":19 digits */
  int64_t r, k;
  for (r = 0; r < p->rows; r++) {
    const float *v = p->values + r * p->cols;
    if (s->format == TR_PREDICTION_CSV) {
      snprintf(num, sizeof num, "%lld,%lld", (long long)batch, (long long)r);
      tr__put_s(b, num);
      for (k = 0; k < p->cols; k++) { hk_bytes_put(b, ",", 1); tr__pw_num(b, v[k]); }
    } else {
      snprintf(num, sizeof num, "{\"batch\":%lld,\"row\":%lld", (long long)batch, (long long)r);
      tr__put_s(b, num);
      for (k = 0; k < p->cols; k++) {
        hk_bytes_put(b, ",\"", 2);
        tr__pw_col(s, b, k);
        hk_bytes_put(b, "\":", 2);
        if (!hk_is_finitef(v[k])) tr__json_num(b, (double)v[k]);
        else if (v[k] == 0 && 1 / v[k] < 0) tr__put_s(b, "-0.0"); /* JSON's -0 is an integer: readers make it 0 */
        else tr__pw_num(b, v[k]);
      }
      hk_bytes_put(b, "}", 1);
    }
    hk_bytes_put(b, "\n", 1);
  }
}

static char *tr__pw_columns(const tr__pw *s) { /* the names joined with commas, for safetensors' metadata */
  hk_bytes b;
  int64_t k;
  memset(&b, 0, sizeof b);
  for (k = 0; k < s->cols; k++) { if (k) hk_bytes_put(&b, ",", 1); tr__put_s(&b, s->names[k]); }
  hk_bytes_put(&b, "", 1);
  if (b.failed) { free(b.data); return NULL; }
  return (char *)b.data;
}
/* One safetensors file of rows x cols values at s->path. */
static hk_signal tr__pw_put_st(tr__pw *s, hk_ctx *ctx, const float *values, int64_t rows, tr__file_id *id, const char *per_batch) {
  hk_tensor v;
  tr_safetensors_shape shape;
  const char *meta[5];
  char why[1200], *cols = s->names ? tr__pw_columns(s) : NULL;
  static const float none = 0;
  int m = 0;
  tr_err e;
  if (s->names && !cols) return hk_fail(ctx, "out of memory");
  if (cols) { meta[m++] = "columns"; meta[m++] = cols; }
  if (per_batch) { meta[m++] = "rows_per_batch"; meta[m++] = per_batch; }
  meta[m] = NULL;
  memset(&v, 0, sizeof v);
  v.name = "predictions";
  v.data = (float *)(rows ? values : &none); /* read only */
  v.count = (size_t)(rows * s->cols);
  shape.ndim = 2;
  shape.dims[0] = rows;
  shape.dims[1] = s->cols;
  if (tr__whose(s->path, id) < 0) { free(cols); return tr__pw_foreign(ctx, s->path); }
  e = tr__st_save_as(s->path, &v, 1, &shape, meta, id, why, sizeof why);
  free(cols);
  if (e) return tr__whose(s->path, id) < 0 ? tr__pw_foreign(ctx, s->path) : hk_fail(ctx, "%s", why);
  s->pub.files++;
  return HK_CONTINUE;
}
/* A whole csv or jsonl file (header and data) at s->path; keep: its descriptor kept for appends. */
static hk_signal tr__pw_put_text(tr__pw *s, hk_ctx *ctx, const hk_bytes *data, int keep) {
  hk_bytes b;
  char why[1200];
  int e, fd = -1;
  memset(&b, 0, sizeof b);
  tr__pw_header(s, &b);
  if (data->len) hk_bytes_put(&b, data->data, data->len);
  if (b.failed || data->failed) { free(b.data); return hk_fail(ctx, "out of memory"); }
  tr__fd_close(&s->fd);
  e = tr__write_mine(s->path, b.data, b.len, &s->id, keep ? &fd : NULL, why, sizeof why);
  free(b.data);
  if (e == EEXIST && tr__whose(s->path, &s->id) < 0) return tr__pw_foreign(ctx, s->path);
  if (e) return hk_fail(ctx, "%s", why);
  s->fd = fd;
  s->pub.files++;
  return HK_CONTINUE;
}

static hk_signal tr__pw_batch_end(hk_ctx *ctx, void *user) {
  tr__pw *s = (tr__pw *)user;
  char why[600];
  const tr_predictions *p = tr__pw_outputs(s, ctx, why, sizeof why);
  int64_t b = ctx->batch_idx, k;
  int text = s->format != TR_PREDICTION_SAFETENSORS;
  hk_signal sig = HK_CONTINUE;
  if (!p) return hk_fail(ctx, "%s", why);
  if (s->cols < 0) { /* the first batch: its columns and names are the run's */
    s->cols = p->cols;
    if (p->names) {
      if (!(s->names = (char **)calloc((size_t)p->cols, sizeof *s->names))) return hk_fail(ctx, "out of memory");
      for (k = 0; k < p->cols; k++) if (!(s->names[k] = tr__strdup(p->names[k]))) return hk_fail(ctx, "out of memory");
    }
  }
  s->batches++;
  if (!s->writes) return HK_CONTINUE;
  s->pub.rows += p->rows;
  if (text) {
    s->text.len = 0; s->text.failed = 0;
    tr__pw_rows(s, &s->text, p, b);
    if (s->text.failed) return hk_fail(ctx, "out of memory");
    if (tr__pw_has_epoch(s)) hk_bytes_put(&s->all, s->text.data, s->text.len); /* for the epoch's file */
    if (!tr__pw_has_batch(s)) return s->all.failed ? hk_fail(ctx, "out of memory") : HK_CONTINUE;
    if (tr__pw_path(s, -1)) return hk_fail(ctx, "out of memory");
    if (s->fd >= 0) { /* streamed: appended to the file the first batch put in place */
      int e = tr__fd_write(s->fd, s->text.data, s->text.len);
      return e ? hk_fail(ctx, "cannot write %s: %s", s->path, strerror(e)) : HK_CONTINUE;
    }
    /* the first batch (and every batch where no descriptor is kept: no POSIX): the file whole */
    if (!tr__pw_has_epoch(s)) hk_bytes_put(&s->all, s->text.data, s->text.len);
    sig = tr__pw_put_text(s, ctx, &s->all, 1);
    if (s->fd >= 0 && !tr__pw_has_epoch(s)) s->all.len = 0;
    return sig;
  }
  if (tr__pw_has_epoch(s)) { /* gathered for the epoch's file */
    int64_t need = s->n_vals + p->rows * p->cols;
    char num[24];
    if (need > s->cap_vals) {
      int64_t cap = need > 2 * s->cap_vals ? need : 2 * s->cap_vals;
      float *v = (float *)realloc(s->vals, (size_t)cap * sizeof *v);
      if (!v) return hk_fail(ctx, "out of memory: %lld predictions gathered for the epoch's file", (long long)need);
      s->vals = v;
      s->cap_vals = cap;
    }
    if (p->rows) memcpy(s->vals + s->n_vals, p->values, (size_t)(p->rows * p->cols) * sizeof *s->vals);
    s->n_vals = need;
    snprintf(num, sizeof num, "%s%lld", s->per_batch.len ? "," : "", (long long)p->rows);
    tr__put_s(&s->per_batch, num);
  }
  if (tr__pw_has_batch(s)) {
    tr__file_id *id = b >= 0 ? tr__pw_batch_id(s, b) : NULL;
    if (!id || tr__pw_path(s, b)) return hk_fail(ctx, b < 0 ? "ctx->batch_idx is %lld" : "out of memory", (long long)b);
    sig = tr__pw_put_st(s, ctx, p->values, p->rows, id, NULL);
  }
  return sig;
}

static hk_signal tr__pw_epoch_end(hk_ctx *ctx, void *user) {
  tr__pw *s = (tr__pw *)user;
  if (!s->writes || s->batches == 0) return HK_CONTINUE;
  if (tr__pw_path(s, -1)) return hk_fail(ctx, "out of memory");
  if (!tr__pw_has_epoch(s)) { /* streamed: on the disk for good now */
    int e = s->fd >= 0 ? tr__fd_sync(s->fd) : 0;
    return e ? hk_fail(ctx, "cannot write %s: %s", s->path, strerror(e)) : HK_CONTINUE;
  }
  if (s->format == TR_PREDICTION_SAFETENSORS) {
    if (s->per_batch.failed) return hk_fail(ctx, "out of memory");
    hk_bytes_put(&s->per_batch, "", 1);
    s->per_batch.len--;
    return tr__pw_put_st(s, ctx, s->vals, s->n_vals / s->cols, &s->id, (const char *)s->per_batch.data);
  }
  return tr__pw_put_text(s, ctx, &s->all, 0);
}
static hk_signal tr__pw_end(hk_ctx *ctx, void *user) {
  tr__pw *s = (tr__pw *)user;
  tr__fd_close(&s->fd);
  if (ctx->stage == HK_STAGE_PREDICT) tr__pw_keep(s, ctx); /* (a failed run's files too: its own) */
  return HK_CONTINUE;
}

static tr_err tr__pw_make(hk_registry *reg, const tr_prediction_writer_desc *d, hk_handle *out, tr__why *w) {
  tr__pw *s;
  hk_callback cb;
  const char *f;
  if (!d) return tr__bad(w, "prediction_writer: desc is NULL");
  if ((unsigned)d->format > TR_PREDICTION_SAFETENSORS)
    return tr__bad(w, "prediction_writer: format %d is not valid (csv, jsonl or safetensors)", (int)d->format);
  if ((unsigned)d->write_interval > TR_WRITE_BATCH_AND_EPOCH)
    return tr__bad(w, "prediction_writer: write_interval %d is not valid (batch, epoch or batch_and_epoch)", (int)d->write_interval);
  f = d->filename && d->filename[0] ? d->filename : "predictions";
  if (strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, ".."))
    return tr__bad(w, "prediction_writer: filename '%s' is a name without '/' (the directory is dirpath)", f);
  if (strlen(f) > 255 || (d->dirpath && strlen(d->dirpath) > TR__CB_MAX_STR - 300))
    return tr__bad(w, "prediction_writer: %s is too long", strlen(f) > 255 ? "filename" : "dirpath");
  s = (tr__pw *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "prediction_writer: out of memory"), TR_ERR_NOMEM;
  s->fd = -1;
  s->cols = -1;
  s->run = tr_run_get(reg);
  s->format = d->format;
  s->interval = d->write_interval;
  s->dir_given = tr__strdup(d->dirpath ? d->dirpath : "");
  s->filename = tr__strdup(f);
  s->pub.dirpath = s->pub.last_path = "";
  if (!s->dir_given || !s->filename) { tr__pw_destroy(s); return tr__bad(w, "prediction_writer: out of memory"), TR_ERR_NOMEM; }
  memset(&cb, 0, sizeof cb);
  cb.name = "prediction_writer";
  cb.user = s;
  cb.on_predict_start = tr__pw_start;
  cb.on_predict_batch_end = tr__pw_batch_end;
  cb.on_predict_epoch_end = tr__pw_epoch_end;
  cb.on_predict_end = tr__pw_end;
  cb.teardown = tr__pw_end; /* a run that failed: the streamed file's descriptor closed */
  cb.destroy = tr__pw_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}

TR__PUBLIC_OF(tr_prediction_writer, pw)
TR__FACTORY_OF(pw, tr_prediction_writer_desc, TR_PREDICTION_WRITER_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
