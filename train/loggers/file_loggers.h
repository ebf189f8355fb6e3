/* train/loggers/file_loggers.h - what the file loggers (csv, jsonl, tensorboard, plot) share. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_FILE_LOGGERS_H /* part */
#define TRAIN_FILE_LOGGERS_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* Where a logger writes: Lightning's layout  save_dir/name/version_N/  (N = 1 + the largest
   version_<int> there, 0 when none). The loggers of one trainer with the same save_dir and name share
   one version directory. The directory is made at the logger's first write (setup of the first run
   on rank 0); the configuration (hparams) is written then. version_N is claimed with one mkdir: when
   it exists already (another run started at the same moment took it) N+1 is tried, so parallel runs
   never share a version directory. */
#define TR_LOGGER_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING, const char *, save_dir,      "runs",           NULL, "the directory of runs (not given: the run's, " \
    "tr_run_desc.save_dir, runs by default)") \
  X(STRING, const char *, name,          "lightning_logs", NULL, "a subdirectory for this experiment (empty: versions " \
    "directly in save_dir; not given: the run's, lightning_logs by default)") \
  X(STRING, const char *, version,       "",               NULL, "the version directory (empty: the next free version_N; " \
    "else this name, its old metrics file, if a regular file, replaced at the first write, as Lightning; not " \
    "given: the run's, tr_run_desc.version)") \
  X(INT,    int,          flush_every,   "0",              NULL, "> 0: write after this many records; 0: at most once a " \
    "second (the first record at once) and at the end of every run. Lines are written whole: a process killed with " \
    "-9 loses at most the records not written yet (about a second), never half a line") \
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

/* plot: curves of logged metrics against step, written as SVG (no dependency; any browser shows it)
   at every teardown, i.e. at the end of each run, failed runs included. The hparams go into the
   SVG's <desc> element (as hparams.yaml's lines). */
#define TR_PLOT_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD); a spec also takes TR_LOGGER_PARAMS */ \
  X(C_ONLY, tr_logger_desc, dir,     NULL, NULL, "the version directory (a spec: the logger parameters)") \
  X(STRING, const char *,   path,    "",   NULL, "the SVG file (empty: metrics.svg in the version directory)") \
  X(STRING, const char *,   metrics, "",   NULL, "space-separated metric names (empty: every metric with loss in its name)") \
  X(STRING, const char *,   title,   "",   NULL, "the plot's title (empty: the file's directory)")
typedef struct tr_plot_desc { TR_PLOT_PARAMS(TR__FIELD) } tr_plot_desc; /* (also without plot: the factories use it) */
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* -- the file loggers: csv, jsonl, tensorboard, and plot's bookkeeping -- */
#define TR__LOGGERS(X) /* X(enum, name) */ \
  X(TR__LOG_CSV, "csv") X(TR__LOG_JSONL, "jsonl") X(TR__LOG_TB, "tensorboard") X(TR__LOG_PLOT, "plot")
typedef enum tr__log_kind {
#define TR__X(sym, name) sym,
  TR__LOGGERS(TR__X)
#undef TR__X
  TR__LOG_KINDS
} tr__log_kind;
static const char *const tr__log_kind_name[TR__LOG_KINDS] = {
#define TR__X(sym, name) name,
  TR__LOGGERS(TR__X)
#undef TR__X
};

typedef struct tr__series { char *name; double *x, *y; int n, cap; } tr__series;

/* csv: a new column rewrites the whole file; while the file is small (TR__CSV_SMALL) that happens at
   once. In a larger file rows that bring new columns are appended without them (every row and every
   known column is on disk as usual), and the rewrite that adds them waits until it is paid for: the
   bytes appended since the last rewrite reach half of what that rewrite wrote (so rewrites cost at
   most a constant times the bytes logged: a new column costs linear work in the rows, where rewriting
   at every new column made a column per record cubic), or TR__CSV_WAIT seconds have passed since
   rows first went without it (and 20 times the last rewrite's duration), or the run ends (teardown). */
#define TR__CSV_SMALL (16 * 1024)
#define TR__CSV_WAIT 2.0

typedef struct tr__logger {
  tr_logger_state pub;
  tr__log_kind kind;
  tr_run *run;          /* the registry's run: what the loop says (section THE RUN LAYER) */
  char *save_dir, *name, *version;
  int flush_every, fail_on_error;
  double last_flush;    /* flush_every 0: when whole lines were last written (wall clock) */
  int opened, broken;   /* broken: an I/O error was reported; nothing more is written */
  char *dir, *path;
  char err[1200];
  int fd;               /* the file it appends to: the descriptor of its creation (tr__afile), never
                           reopened by name; -1 before (csv: until its first rows) */
  int64_t size;         /* bytes of whole lines (records) in the file */
  hk_bytes out;         /* whole lines (or records) waiting for one write */
  int pending;          /* records in out (jsonl, tensorboard) or rows not written yet (csv) */
  hk_bytes scratch, vals, tmp; /* tensorboard: an event, its summary values, one value (reused) */
  int session_ended;    /* tensorboard: the fit's session_end_info is written */
  /* csv: every row stays in memory, so that a new column can rewrite the file */
  char **cols; int n_cols, cap_cols, col_hint;  /* columns by first appearance (epoch 0, step 1) */
  int file_cols;        /* the columns in the file's header: ids 0 .. file_cols-1 */
  int *order, *pos;     /* the file's layout: its p-th column is cols[order[p]]; pos[id] = p */
  char *has; double *rowv; /* one row's cells in file order (scratch) */
  int *row_at; int n_rows, cap_rows, rows_in_file; /* row r's cells: row_at[r] .. row_at[r+1] */
  int *cell_col; double *cell_val; int n_cells, cap_cells;
  int64_t base_size, appended; /* csv: the size the last whole write left, bytes appended since */
  double waiting_since, rewrite_secs; /* csv: rows went without a new column since (0: none); the last rewrite's time */
  /* plot */
  char *plot_path, *metrics, *title;
  tr__series *series; int n_series;
} tr__logger;

static void tr__logger_destroy(void *user);

/* Report an I/O error once, then write nothing more. fail_on_error fails the run (HK_FAIL). */
static hk_signal tr__logger_broke(tr__logger *s, hk_ctx *ctx, const char *fmt, ...) TR__PRINTF(3, 4);
static hk_signal tr__logger_broke(tr__logger *s, hk_ctx *ctx, const char *fmt, ...) {
  va_list ap;
  const char *who = tr__log_kind_name[s->kind];
  if (s->broken) return HK_CONTINUE;
  s->broken = 1;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  s->pub.error = s->err;
  if (s->fail_on_error && ctx) return hk_fail(ctx, "%s logger: %s", who, s->err);
  tr__run_say(s->run, ctx, who, "%s; this logger writes nothing more%s", s->err, ctx ? " (training goes on)" : "");
  return HK_CONTINUE;
}

#if TR__ON_CSV
static int tr__csv_col(tr__logger *s, const char *name) { /* the column's id, added when new; -1 on OOM */
  int i;
  if (s->col_hint < s->n_cols && !strcmp(s->cols[s->col_hint], name)) return s->col_hint++; /* the last record's order */
  for (i = 0; i < s->n_cols; i++) if (!strcmp(s->cols[i], name)) { s->col_hint = i + 1; return i; }
  if (s->n_cols == s->cap_cols) {
    int cap = s->cap_cols ? 2 * s->cap_cols : 16;
    char **p = (char **)realloc(s->cols, (size_t)cap * sizeof *p);
    if (!p) return -1;
    s->cols = p;
    s->cap_cols = cap;
  }
  if (!(s->cols[s->n_cols] = tr__strdup(name))) return -1;
  s->col_hint = s->n_cols + 1;
  return s->n_cols++;
}
static int tr__csv_cell_add(tr__logger *s, int col, double v) {
  if (col < 0) return -1;
  if (s->n_cells == s->cap_cells) {
    int cap = s->cap_cells ? 2 * s->cap_cells : 256;
    int *c = (int *)realloc(s->cell_col, (size_t)cap * sizeof *c);
    double *d;
    if (!c) return -1;
    s->cell_col = c;
    if (!(d = (double *)realloc(s->cell_val, (size_t)cap * sizeof *d))) return -1;
    s->cell_val = d;
    s->cap_cells = cap;
  }
  s->cell_col[s->n_cells] = col;
  s->cell_val[s->n_cells++] = v;
  return 0;
}
static int tr__csv_add_row(tr__logger *s, const tr_log_record *r) {
  int i;
  if (s->n_rows + 2 > s->cap_rows) {
    int cap = s->cap_rows ? 2 * s->cap_rows : 64;
    int *p = (int *)realloc(s->row_at, (size_t)cap * sizeof *p);
    if (!p) return -1;
    s->row_at = p;
    s->cap_rows = cap;
  }
  if (s->n_rows == 0) s->row_at[0] = 0;
  s->col_hint = 0;
  if (tr__csv_cell_add(s, tr__csv_col(s, "epoch"), (double)r->epoch) ||
      tr__csv_cell_add(s, tr__csv_col(s, "step"), (double)r->step)) return -1;
  for (i = 0; i < r->n_metrics; i++)
    if (strcmp(r->metrics[i].name, "epoch") && strcmp(r->metrics[i].name, "step") &&
        tr__csv_cell_add(s, tr__csv_col(s, r->metrics[i].name), r->metrics[i].value)) return -1;
  s->row_at[++s->n_rows] = s->n_cells;
  return 0;
}

/* The file's layout from every column known now, in Lightning's order (sorted by name). */
typedef struct tr__csv_key { const char *name; int id; } tr__csv_key;
static int tr__csv_key_cmp(const void *a, const void *b) { return strcmp(((const tr__csv_key *)a)->name, ((const tr__csv_key *)b)->name); }
static int tr__csv_layout(tr__logger *s) {
  size_t n = (size_t)s->n_cols;
  tr__csv_key *k = (tr__csv_key *)malloc(n * sizeof *k);
  int *order = k ? (int *)realloc(s->order, n * sizeof *order) : NULL, *pos;
  char *has;
  double *rowv;
  size_t i;
  if (order) s->order = order;
  if (!order || !(pos = (int *)realloc(s->pos, n * sizeof *pos))) { free(k); return -1; }
  s->pos = pos;
  if (!(has = (char *)realloc(s->has, n))) { free(k); return -1; }
  s->has = has;
  if (!(rowv = (double *)realloc(s->rowv, n * sizeof *rowv))) { free(k); return -1; }
  s->rowv = rowv;
  for (i = 0; i < n; i++) { k[i].name = s->cols[i]; k[i].id = (int)i; }
  qsort(k, n, sizeof *k, tr__csv_key_cmp);
  for (i = 0; i < n; i++) { order[i] = k[i].id; pos[k[i].id] = (int)i; }
  free(k);
  s->file_cols = (int)n;
  return 0;
}
static void tr__put_commas(hk_bytes *b, int n) {
  static const char commas[] = ",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,"; /* 32 */
  for (; n > 0; n -= 32) hk_bytes_put(b, commas, n < 32 ? (size_t)n : 32);
}
/* Rows [from, n_rows) as CSV lines in the file's layout (the header first when header is set); a cell
   of a column the file does not have yet is left out. Work: the row's text and its cells. */
static int tr__csv_text(tr__logger *s, hk_bytes *b, int header, int from) {
  int nc = s->file_cols, i, r, c;
  char num[40];
  if (header) {
    for (i = 0; i < nc; i++) { if (i) tr__put_s(b, ","); tr__csv_cell(b, s->cols[s->order[i]]); }
    tr__put_s(b, "\n");
  }
  for (r = from; r < s->n_rows; r++) {
    int owed = 0; /* commas before the next cell */
    memset(s->has, 0, (size_t)nc);
    for (c = s->row_at[r]; c < s->row_at[r + 1]; c++) {
      int id = s->cell_col[c];
      if (id < nc) { s->has[s->pos[id]] = 1; s->rowv[s->pos[id]] = s->cell_val[c]; }
    }
    for (i = 0; i < nc; i++) {
      if (i) owed++;
      if (!s->has[i]) continue;
      tr__put_commas(b, owed);
      owed = 0;
      if (s->order[i] < 2) snprintf(num, sizeof num, "%lld", (long long)s->rowv[i]); /* epoch, step */
      else tr__num(num, sizeof num, s->rowv[i]);
      tr__put_s(b, num);
    }
    tr__put_commas(b, owed);
    tr__put_s(b, "\n");
  }
  return b->failed ? -1 : 0;
}
#endif

/* How much of the first n bytes of s->out is whole records (lines; TensorBoard's length-framed
   records), and how many records that is. */
static size_t tr__whole_records(const tr__logger *s, size_t n, int *count) {
  size_t at = 0, i;
  *count = 0;
  if (s->kind == TR__LOG_TB) {
    while (at + 12 <= n) {
      uint64_t len = tr__get(s->out.data + at, 8);
      if (len > n - at - 12 || n - at - 12 - len < 4) break;
      at += 16 + (size_t)len;
      ++*count;
    }
    return at;
  }
  for (i = 0; i < n; i++) if (s->out.data[i] == '\n') { at = i + 1; ++*count; }
  return at;
}

/* Append s->out (whole lines or records) to the file. On a short write (a full disk) the file is cut
   back to its last whole record, so no reader ever sees half of one. 0 or errno; *count gets the
   records that made it, *kept their bytes. */
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

#if TR__ON_CSV
/* csv: the whole file (header and every row) written anew and renamed over metrics.csv, its descriptor
   kept for the appends that follow. */
static hk_signal tr__csv_write_whole(tr__logger *s, hk_ctx *ctx) {
  char why[1100];
  double t0 = tr__wall();
  int fd, e;
  if (tr__csv_layout(s) || tr__csv_text(s, &s->out, 1, 0)) return tr__logger_broke(s, ctx, "out of memory");
  if ((e = tr__write_whole(s->path, s->out.data, s->out.len, 0, &fd, why, sizeof why)) != 0)
    return tr__logger_broke(s, ctx, "%s%s", why, s->fd >= 0 && e != EEXIST ? " (the file keeps the rows it had)" : "");
#ifdef TR__POSIX
  if (s->fd >= 0) close(s->fd);
#endif
  s->fd = fd;
  s->size = s->base_size = (int64_t)s->out.len;
  s->appended = 0;
  s->waiting_since = 0;
  s->rewrite_secs = tr__wall() - t0;
  s->pub.records = s->rows_in_file = s->n_rows;
  return HK_CONTINUE;
}

static hk_signal tr__csv_flush(tr__logger *s, hk_ctx *ctx, int force) {
  hk_signal sig = HK_CONTINUE;
  int whole = s->fd < 0, count, e;
  size_t kept;
  s->out.len = 0;
  s->out.failed = 0;
  if (!whole && s->file_cols != s->n_cols) { /* new columns: rewrite now, or once it is paid for */
    double now = tr__wall();
    if (force || s->size <= TR__CSV_SMALL || 2 * s->appended >= s->base_size ||
        (s->waiting_since > 0 && now - s->waiting_since >= TR__CSV_WAIT && now - s->waiting_since >= 20 * s->rewrite_secs))
      whole = 1;
    else if (s->waiting_since == 0) s->waiting_since = now;
  }
  if (whole) sig = tr__csv_write_whole(s, ctx);
  else {
    if (tr__csv_text(s, &s->out, 0, s->rows_in_file)) return tr__logger_broke(s, ctx, "out of memory");
    e = tr__logger_append(s, &kept, &count);
    if (count < 0) count = s->n_rows - s->rows_in_file;
    s->appended += (int64_t)kept;
    s->rows_in_file += count;
    s->pub.records += count;
    if (e) return tr__logger_broke(s, ctx, "cannot write %s: %s (it ends with its last whole row)", s->path, strerror(e));
  }
  s->out.len = 0;
  s->pending = 0;
  return sig;
}
#endif

/* Write what waits (force: csv's pending new columns too, at the end of a run). */
static hk_signal tr__logger_flush(tr__logger *s, hk_ctx *ctx, int force) {
  size_t kept;
  int e, count;
  (void)force; /* csv's */
  if (s->broken) return HK_CONTINUE;
#if TR__ON_CSV
  if (s->kind == TR__LOG_CSV && (s->pending || (force && s->fd >= 0 && s->file_cols != s->n_cols))) return tr__csv_flush(s, ctx, force);
#endif
  if (!s->pending || s->kind == TR__LOG_CSV) return HK_CONTINUE;
  if (s->fd < 0) return HK_CONTINUE;
  if (s->out.failed) return tr__logger_broke(s, ctx, "out of memory");
  e = tr__logger_append(s, &kept, &count);
  s->pub.records += count < 0 ? s->pending : count;
  s->out.len = 0;
  s->pending = 0;
  if (e) return tr__logger_broke(s, ctx, "cannot write %s: %s (it ends with its last whole %s)", s->path, strerror(e),
                                 s->kind == TR__LOG_TB ? "record" : "line");
  return HK_CONTINUE;
}

#if TR__ON_TENSORBOARD
/* -- tensorboard: protobuf fields and TFRecord framing (field numbers from TensorFlow's event.proto,
   summary.proto, tensor.proto) -- */
static void tr__pb_varint(hk_bytes *b, uint64_t v) {
  unsigned char x[10];
  int n = 0;
  do { x[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)); v >>= 7; } while (v);
  hk_bytes_put(b, x, (size_t)n);
}
static void tr__pb_key(hk_bytes *b, int field, int wire) { tr__pb_varint(b, (uint64_t)(field << 3 | wire)); }
static void tr__pb_f64(hk_bytes *b, int field, double v) { unsigned char x[8]; uint64_t u; memcpy(&u, &v, 8); tr__le(x, u, 8); tr__pb_key(b, field, 1); hk_bytes_put(b, x, 8); }
static void tr__pb_f32(hk_bytes *b, int field, float v) { unsigned char x[4]; uint32_t u; memcpy(&u, &v, 4); tr__le(x, u, 4); tr__pb_key(b, field, 5); hk_bytes_put(b, x, 4); }
static void tr__pb_bytes(hk_bytes *b, int field, const void *p, size_t n) { tr__pb_key(b, field, 2); tr__pb_varint(b, n); hk_bytes_put(b, p, n); }
static void tr__pb_str(hk_bytes *b, int field, const char *s) { tr__pb_bytes(b, field, s, strlen(s)); }

/* One TFRecord: length, its masked CRC, the data, its masked CRC. */
static void tr__tf_record(hk_bytes *out, const hk_bytes *event) {
  unsigned char len[8], crc[4];
  tr__le(len, (uint64_t)event->len, 8);
  hk_bytes_put(out, len, 8);
  tr__le(crc, tr_crc32c_masked(len, 8), 4);
  hk_bytes_put(out, crc, 4);
  hk_bytes_put(out, event->data, event->len);
  tr__le(crc, tr_crc32c_masked(event->data, event->len), 4);
  hk_bytes_put(out, crc, 4);
}
/* Event{wall_time, step, summary{values}} where summary holds the Summary.Value messages in vals */
static void tr__tf_event(tr__logger *s, int64_t step, const hk_bytes *vals) {
  s->scratch.len = 0;
  tr__pb_f64(&s->scratch, 1, tr__wall());
  tr__pb_key(&s->scratch, 2, 0);
  tr__pb_varint(&s->scratch, (uint64_t)step);
  tr__pb_bytes(&s->scratch, 5, vals->data, vals->len);
  if (s->scratch.failed) s->out.failed = 1;
  tr__tf_record(&s->out, &s->scratch);
}
/* Summary.Value{tag, metadata{plugin_data{plugin_name "text"}}, tensor{DT_STRING, shape {}, string_val}} */
static void tr__tf_text(hk_bytes *vals, const char *tag, const char *text) {
  hk_bytes meta, plugin, tensor, value;
  memset(&meta, 0, sizeof meta); memset(&plugin, 0, sizeof plugin); memset(&tensor, 0, sizeof tensor); memset(&value, 0, sizeof value);
  tr__pb_str(&plugin, 1, "text");
  tr__pb_bytes(&meta, 1, plugin.data, plugin.len);
  tr__pb_key(&tensor, 1, 0); tr__pb_varint(&tensor, 7); /* DT_STRING */
  tr__pb_bytes(&tensor, 2, "", 0);                      /* a scalar: an empty shape */
  tr__pb_str(&tensor, 8, text);
  tr__pb_str(&value, 1, tag);
  tr__pb_bytes(&value, 9, meta.data, meta.len);
  tr__pb_bytes(&value, 8, tensor.data, tensor.len);
  tr__pb_bytes(vals, 1, value.data, value.len);
  if (meta.failed || plugin.failed || tensor.failed || value.failed) vals->failed = 1;
  hk_bytes_free(&meta); hk_bytes_free(&plugin); hk_bytes_free(&tensor); hk_bytes_free(&value);
}
/* TensorBoard's hparams plugin (its HParams tab): a summary value tagged _hparams_/session_start_info
   (the run's hyperparameters) or _hparams_/session_end_info (its status), whose metadata's plugin
   content is an HParamsPluginData message (version 0), with the plugin's null tensor (an empty float
   tensor), as tensorboard.plugins.hparams.summary writes them. No _hparams_/experiment summary: the
   plugin takes one run's experiment for every run in the log directory (the first it finds), so
   runs with other keys would lose theirs; without it the tab gathers the hyperparameters of every
   run's session_start_info and lists every scalar tag as a metric (its last value). */
static void tr__tf_hparams_value(hk_bytes *vals, const char *tag, const hk_bytes *content) {
  hk_bytes meta, plugin, value;
  static const unsigned char null_tensor[] = { 0x08, 0x01, 0x12, 0x02, 0x12, 0x00 }; /* DT_FLOAT, shape (0,) */
  memset(&meta, 0, sizeof meta); memset(&plugin, 0, sizeof plugin); memset(&value, 0, sizeof value);
  tr__pb_str(&plugin, 1, "hparams");
  tr__pb_bytes(&plugin, 2, content->data, content->len);
  tr__pb_bytes(&meta, 1, plugin.data, plugin.len);
  tr__pb_str(&value, 1, tag);
  tr__pb_bytes(&value, 9, meta.data, meta.len);
  tr__pb_bytes(&value, 8, null_tensor, sizeof null_tensor);
  tr__pb_bytes(vals, 1, value.data, value.len);
  if (meta.failed || plugin.failed || value.failed || content->failed) vals->failed = 1;
  hk_bytes_free(&meta); hk_bytes_free(&plugin); hk_bytes_free(&value);
}
/* A protobuf string is UTF-8: a stray byte becomes U+FFFD (tr__utf8_put). */
static void tr__pb_utf8(hk_bytes *b, int field, const char *text) {
  hk_bytes u;
  memset(&u, 0, sizeof u);
  tr__utf8_put(&u, text);
  tr__pb_bytes(b, field, u.data, u.len);
  if (u.failed) b->failed = 1;
  hk_bytes_free(&u);
}
/* SessionStartInfo { map<string, google.protobuf.Value> hparams = 1; double start_time_secs = 5; } */
static void tr__tf_hparams_start(hk_bytes *vals, const tr__hparam *h, int n, double start) {
  hk_bytes info, entry, v, data;
  int i;
  memset(&info, 0, sizeof info); memset(&entry, 0, sizeof entry); memset(&v, 0, sizeof v); memset(&data, 0, sizeof data);
  for (i = 0; i < n; i++) {
    entry.len = v.len = 0;
    if (h[i].num == 1) tr__pb_f64(&v, 2, strtod(h[i].val, NULL));                          /* number_value */
    else if (h[i].num == 2) { tr__pb_key(&v, 4, 0); tr__pb_varint(&v, h[i].val[0] == 't'); } /* bool_value */
    else tr__pb_utf8(&v, 3, h[i].val);                                                          /* string_value */
    tr__pb_utf8(&entry, 1, h[i].key);
    tr__pb_bytes(&entry, 2, v.data, v.len);
    tr__pb_bytes(&info, 1, entry.data, entry.len);
    if (entry.failed || v.failed) info.failed = 1;
  }
  tr__pb_f64(&info, 5, start);
  tr__pb_bytes(&data, 3, info.data, info.len);
  if (info.failed) data.failed = 1;
  tr__tf_hparams_value(vals, "_hparams_/session_start_info", &data);
  hk_bytes_free(&info); hk_bytes_free(&entry); hk_bytes_free(&v); hk_bytes_free(&data);
}
/* SessionEndInfo { Status status = 1 (1 success, 2 failure); double end_time_secs = 2; } */
static void tr__tf_hparams_end(hk_bytes *vals, int failed, double end) {
  hk_bytes info, data;
  memset(&info, 0, sizeof info); memset(&data, 0, sizeof data);
  tr__pb_key(&info, 1, 0); tr__pb_varint(&info, failed ? 2 : 1);
  tr__pb_f64(&info, 2, end);
  tr__pb_bytes(&data, 4, info.data, info.len);
  if (info.failed) data.failed = 1;
  tr__tf_hparams_value(vals, "_hparams_/session_end_info", &data);
  hk_bytes_free(&info); hk_bytes_free(&data);
}
static void tr__tf_scalar(hk_bytes *vals, hk_bytes *tmp, const char *tag, double v) {
  tmp->len = 0;
  tr__pb_str(tmp, 1, tag);
  tr__pb_f32(tmp, 2, (float)v);
  tr__pb_bytes(vals, 1, tmp->data, tmp->len);
  if (tmp->failed) vals->failed = 1;
}
static void tr__tf_histogram(hk_bytes *vals, hk_bytes *tmp, const tr_log_histogram_data *h) {
  hk_bytes histo;
  unsigned char x[8];
  int k;
  memset(&histo, 0, sizeof histo);
  tr__pb_f64(&histo, 1, h->min);
  tr__pb_f64(&histo, 2, h->max);
  tr__pb_f64(&histo, 3, h->num);
  tr__pb_f64(&histo, 4, h->sum);
  tr__pb_f64(&histo, 5, h->sum_squares);
  tr__pb_key(&histo, 6, 2); tr__pb_varint(&histo, 8 * (uint64_t)h->n_buckets); /* packed doubles */
  for (k = 0; k < h->n_buckets; k++) { uint64_t u; memcpy(&u, &h->limit[k], 8); tr__le(x, u, 8); hk_bytes_put(&histo, x, 8); }
  tr__pb_key(&histo, 7, 2); tr__pb_varint(&histo, 8 * (uint64_t)h->n_buckets);
  for (k = 0; k < h->n_buckets; k++) { uint64_t u; memcpy(&u, &h->count[k], 8); tr__le(x, u, 8); hk_bytes_put(&histo, x, 8); }
  tmp->len = 0;
  tr__pb_str(tmp, 1, h->tag);
  tr__pb_bytes(tmp, 5, histo.data, histo.len);
  tr__pb_bytes(vals, 1, tmp->data, tmp->len);
  if (tmp->failed || histo.failed) vals->failed = 1;
  hk_bytes_free(&histo);
}
#endif /* TR__ON_TENSORBOARD */

/* The hparams as text in a logger's format (csv: hparams.yaml; plot uses that too). */
static void tr__hparams_text(tr__logger *s, hk_ctx *ctx, tr__log_kind format, hk_bytes *b) {
  tr__hparam *h;
  int i, n = tr__run_hparams(s->run, &h);
  const char *spec;
  if (n < 0) { b->failed = 1; return; }
  if (format == TR__LOG_CSV || format == TR__LOG_PLOT) { /* hparams.yaml */
    for (i = 0; i < n; i++) { tr__putf(b, "%s: ", h[i].key); if (h[i].num) tr__put_s(b, h[i].val); else tr__yaml_str(b, h[i].val); tr__put_s(b, "\n"); }
    tr__put_s(b, "specs:");
    if (!hk_spec_applied(ctx->reg, 0)) tr__put_s(b, " []");
    for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { tr__put_s(b, "\n- "); tr__json_str(b, spec); }
    tr__put_s(b, "\n");
  } else if (format == TR__LOG_JSONL) {
    tr__put_s(b, "{\"hparams\":{");
    for (i = 0; i < n; i++) { if (i) tr__put_s(b, ","); tr__json_str(b, h[i].key); tr__put_s(b, ":"); if (h[i].num) tr__put_s(b, h[i].val); else tr__json_str(b, h[i].val); }
    tr__put_s(b, n ? ",\"specs\":[" : "\"specs\":[");
    for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { if (i) tr__put_s(b, ","); tr__json_str(b, spec); }
    tr__put_s(b, "]}}\n");
  } else { /* a Markdown table for TensorBoard's text plugin */
    tr__put_s(b, "| hparam | value |\n|---|---|\n");
    for (i = 0; i < n; i++) tr__putf(b, "| %s | %s |\n", h[i].key, h[i].val);
    for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { tr__put_s(b, "| spec | `"); tr__utf8_put(b, spec); tr__put_s(b, "` |\n"); }
    hk_bytes_put(b, "", 1); /* a C string */
  }
  free(h);
}

/* A logger's save_dir, name and version: its own desc's, else the run's, else Lightning's defaults. */
static const char *tr__logger_save_dir(const tr__logger *s) { return s->save_dir ? s->save_dir : tr__run_str(s->run, TR__RUN_SAVE_DIR, "runs"); }
static const char *tr__logger_name(const tr__logger *s) { return s->name ? s->name : tr__run_str(s->run, TR__RUN_NAME, "lightning_logs"); }
static const char *tr__logger_version(const tr__logger *s) { return s->version ? s->version : tr__run_str(s->run, TR__RUN_VERSION, NULL); }


/* Make the version directory and create the file (rank 0, at the first setup or record): hparams.yaml
   (csv), or the file with its first lines (jsonl: the hparams; tensorboard: file_version and the
   hparams), written whole by tr__afile; the logger then appends to that descriptor. metrics.csv is
   made with its first rows (no empty file when nothing is logged, as Lightning). Nothing here follows a
   symlink or replaces anything but a regular file. */
static hk_signal tr__logger_open(tr__logger *s, hk_ctx *ctx) {
  char why[1100], file[160];
  hk_bytes b;
  int e = 0;
  if (s->opened || s->broken || ctx->rank != 0) return HK_CONTINUE;
  s->opened = 1;
  why[0] = 0;
  if (!(s->dir = tr__run_dir_get(s->run, tr__logger_save_dir(s), tr__logger_name(s), tr__logger_version(s), why, sizeof why)))
    return tr__logger_broke(s, ctx, "%s", why);
  tr__run_note_dir(s->run, s->dir);
  s->pub.dir = s->dir;
  if (TR__ON_PLOT && s->kind == TR__LOG_PLOT) {
    if (!s->plot_path || !s->plot_path[0]) { free(s->plot_path); s->plot_path = tr__join(s->dir, "metrics.svg"); }
    if (!s->plot_path) return tr__logger_broke(s, ctx, "out of memory");
    s->path = tr__strdup(s->plot_path);
    s->pub.path = s->path ? s->path : "";
    return HK_CONTINUE;
  }
  if (s->kind == TR__LOG_TB) { /* TensorBoard's name; two in one second and process get .1, .2 ... */
    char host[64] = "localhost";
    long pid = 0;
    int k;
#ifdef TR__POSIX
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    pid = (long)getpid();
#endif
    for (k = 0; k < 1000; k++) {
      snprintf(file, sizeof file, "events.out.tfevents.%010lld.%s.%ld.%d", (long long)time(NULL), host, pid, k);
      free(s->path);
      if (!(s->path = tr__join(s->dir, file)) || !tr__file_exists(s->path)) break;
    }
  } else s->path = tr__join(s->dir, s->kind == TR__LOG_CSV ? "metrics.csv" : "metrics.jsonl");
  if (!s->path) return tr__logger_broke(s, ctx, "out of memory");
  s->pub.path = s->path;
#ifndef TR__POSIX
  return tr__logger_broke(s, ctx, "file loggers need a POSIX system");
#endif
  memset(&b, 0, sizeof b);
  tr__hparams_text(s, ctx, s->kind, &b);
  if (b.failed) e = ENOMEM;
  else if (s->kind == TR__LOG_CSV) {
    char *yaml = tr__join(s->dir, "hparams.yaml");
    e = yaml ? tr__write_whole(yaml, b.data, b.len, 0, NULL, why, sizeof why) : ENOMEM;
    free(yaml);
  } else if (s->kind == TR__LOG_JSONL) {
    if ((e = tr__write_whole(s->path, b.data, b.len, 0, &s->fd, why, sizeof why)) == 0) s->size = (int64_t)b.len;
  }
#if TR__ON_TENSORBOARD
  else { /* file_version, then the hparams as text */
    hk_bytes vals;
    memset(&vals, 0, sizeof vals);
    s->scratch.len = 0;
    tr__pb_f64(&s->scratch, 1, tr__wall());
    tr__pb_str(&s->scratch, 3, "brain.Event:2");
    tr__tf_record(&s->out, &s->scratch);
    tr__tf_text(&vals, "hparams", (const char *)b.data);
    { /* and for the HParams tab */
      tr__hparam *h;
      int n = tr__run_hparams(s->run, &h);
      if (n < 0) vals.failed = 1;
      else tr__tf_hparams_start(&vals, h, n, tr__wall());
      free(h);
    }
    tr__tf_event(s, 0, &vals);
    if (vals.failed) s->out.failed = 1;
    hk_bytes_free(&vals);
    if (s->out.failed) e = ENOMEM;
    else if ((e = tr__write_whole(s->path, s->out.data, s->out.len, 0, &s->fd, why, sizeof why)) == 0) s->size = (int64_t)s->out.len;
    s->out.len = 0;
  }
#endif
  hk_bytes_free(&b);
  if (e) return tr__logger_broke(s, ctx, "%s", e == ENOMEM ? "out of memory" : why);
  return HK_CONTINUE;
}

static hk_signal tr__logger_setup(hk_ctx *ctx, void *u) { return tr__logger_open((tr__logger *)u, ctx); }


#if TR__ON_PLOT
static hk_signal tr__plot_add(tr__logger *s, hk_ctx *ctx, const tr_log_record *r);
static hk_signal tr__plot_write(tr__logger *s, hk_ctx *ctx);
#endif
static hk_signal tr__logger_on_log(hk_ctx *ctx, void *u) {
  tr__logger *s = (tr__logger *)u;
  const tr_log_record *r = tr_log_current(ctx);
  hk_signal sig;
  int i;
  if (!r || ctx->rank != 0) return HK_CONTINUE;
  if ((sig = tr__logger_open(s, ctx)) != HK_CONTINUE || s->broken) return sig;
  switch (s->kind) {
#if TR__ON_CSV
  case TR__LOG_CSV:
    if (tr__csv_add_row(s, r)) return tr__logger_broke(s, ctx, "out of memory");
    break;
#endif
  case TR__LOG_JSONL:
    tr__putf(&s->out, "{\"step\":%lld,\"epoch\":%lld,\"stage\":", (long long)r->step, (long long)r->epoch);
    tr__json_str(&s->out, r->stage ? r->stage : "");
    tr__put_s(&s->out, ",\"metrics\":{");
    for (i = 0; i < r->n_metrics; i++) {
      if (i) tr__put_s(&s->out, ",");
      tr__json_str(&s->out, r->metrics[i].name);
      tr__put_s(&s->out, ":");
      tr__json_num(&s->out, r->metrics[i].value);
    }
    tr__put_s(&s->out, "}}\n");
    break;
#if TR__ON_TENSORBOARD
  case TR__LOG_TB:
    s->vals.len = 0;
    for (i = 0; i < r->n_metrics; i++) tr__tf_scalar(&s->vals, &s->tmp, r->metrics[i].name, r->metrics[i].value);
    for (i = 0; i < r->n_histograms; i++) tr__tf_histogram(&s->vals, &s->tmp, &r->histograms[i]);
    if (s->vals.failed) s->out.failed = 1;
    if (s->vals.len) tr__tf_event(s, r->step, &s->vals);
    break;
#endif
#if TR__ON_PLOT
  case TR__LOG_PLOT:
    return tr__plot_add(s, ctx, r);
#endif
  default: break;
  }
  ++s->pending;
  if (s->flush_every > 0 ? s->pending >= s->flush_every : tr__wall() - s->last_flush >= 1.0) {
    s->last_flush = tr__wall(); /* a write is a system call: at the step rate of a small model it shows */
    return tr__logger_flush(s, ctx, 0);
  }
  return HK_CONTINUE;
}

/* At the end of every run (and of a failed one): write what waits, keep the file open for the next run. */
static hk_signal tr__logger_teardown(hk_ctx *ctx, void *u) {
  tr__logger *s = (tr__logger *)u;
  if (ctx->rank != 0) return HK_CONTINUE;
#if TR__ON_PLOT
  if (s->kind == TR__LOG_PLOT) return tr__plot_write(s, ctx);
#endif
#if TR__ON_TENSORBOARD
  if (s->kind == TR__LOG_TB && ctx->stage == HK_STAGE_FIT && !s->session_ended && s->opened && !s->broken) {
    s->session_ended = 1; /* the fit's status for the HParams tab (the plugin reads a run's first one) */
    s->vals.len = 0;
    tr__tf_hparams_end(&s->vals, s->run && s->run->failed, tr__wall());
    tr__tf_event(s, ctx->global_step, &s->vals);
    s->pending++;
  }
#endif
  return tr__logger_flush(s, ctx, 1);
}

#if TR__ON_PLOT
/* -- plot: SVG curves -- */
static int tr__plot_wants(const char *metrics, const char *name) { /* metrics: space-separated names, or NULL */
  size_t n = strlen(name);
  const char *p = metrics;
  if (!metrics || !metrics[0]) return strstr(name, "loss") != NULL;
  while ((p = strstr(p, name)) != NULL) {
    if ((p == metrics || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return 1;
    p += n;
  }
  return 0;
}
static tr__series *tr__series_get(tr__series **all, int *n, const char *name) {
  int i;
  tr__series *grown;
  char *copy;
  for (i = 0; i < *n; i++) if (!strcmp((*all)[i].name, name)) return &(*all)[i];
  if (!(copy = tr__strdup(name))) return NULL;
  if (!(grown = (tr__series *)realloc(*all, (size_t)(*n + 1) * sizeof *grown))) { free(copy); return NULL; }
  *all = grown;
  memset(&grown[*n], 0, sizeof grown[0]);
  grown[*n].name = copy;
  return &grown[(*n)++];
}
static int tr__series_add(tr__series *s, double x, double y) {
  if (s->n == s->cap) {
    int cap = s->cap ? 2 * s->cap : 64;
    double *nx = (double *)realloc(s->x, (size_t)cap * sizeof *nx), *ny;
    if (!nx) return -1;
    s->x = nx;
    if (!(ny = (double *)realloc(s->y, (size_t)cap * sizeof *ny))) return -1;
    s->y = ny;
    s->cap = cap;
  }
  s->x[s->n] = x;
  s->y[s->n++] = y;
  return 0;
}
static void tr__series_free(tr__series *all, int n) {
  int i;
  for (i = 0; i < n; i++) { free(all[i].name); free(all[i].x); free(all[i].y); }
  free(all);
}
static hk_signal tr__plot_add(tr__logger *s, hk_ctx *ctx, const tr_log_record *r) {
  int i;
  for (i = 0; i < r->n_metrics; i++) {
    tr__series *se;
    if (!tr__plot_wants(s->metrics, r->metrics[i].name)) continue;
    se = tr__series_get(&s->series, &s->n_series, r->metrics[i].name);
    if (!se || tr__series_add(se, (double)r->step, r->metrics[i].value)) return tr__logger_broke(s, ctx, "out of memory");
  }
  s->pub.records++;
  return HK_CONTINUE;
}

static double tr__nice(double span) { /* a tick spacing of 1, 2 or 5 times a power of ten, about span/5 */
  double raw = span / 5, p = pow(10, floor(log10(raw))), f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}
/* XML text: markup escaped, bytes that are not UTF-8 and control characters XML forbids as U+FFFD */
static void tr__svg_text(hk_bytes *b, const char *s) {
  while (*s) {
    unsigned char c = (unsigned char)*s;
    size_t k;
    const char *seq;
    if (c == '<') tr__put_s(b, "&lt;");
    else if (c == '>') tr__put_s(b, "&gt;");
    else if (c == '&') tr__put_s(b, "&amp;");
    else if (c == '"') tr__put_s(b, "&quot;");
    else if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') tr__put_s(b, "\xEF\xBF\xBD");
    else {
      seq = tr__utf8_next(s, &k);
      hk_bytes_put(b, seq, k);
      s += seq == s ? k : 1;
      continue;
    }
    s++;
  }
}
/* Curves of every series against x, one colour each, with axes, ticks, grid and a legend; written
   whole (tr__afile). 0, or errno with why filled. */
static int tr__svg_write(const char *path, const char *title, const char *desc, const char *xlabel, const tr__series *s, int n, char *why, size_t why_len) {
  static const char *const colour[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf" };
  const double W = 760, H = 420, L = 70, R = 190, T = 40, B = 50, pw = W - L - R, ph = H - T - B;
  double x0 = HUGE_VAL, x1 = -HUGE_VAL, y0 = HUGE_VAL, y1 = -HUGE_VAL, dx, dy, v;
  hk_bytes f;
  int i, k, e;
  for (i = 0; i < n; i++)
    for (k = 0; k < s[i].n; k++)
      if (hk_is_finite(s[i].y[k]) && hk_is_finite(s[i].x[k])) {
        if (s[i].x[k] < x0) x0 = s[i].x[k];
        if (s[i].x[k] > x1) x1 = s[i].x[k];
        if (s[i].y[k] < y0) y0 = s[i].y[k];
        if (s[i].y[k] > y1) y1 = s[i].y[k];
      }
  if (x0 > x1) { x0 = 0; x1 = 1; y0 = 0; y1 = 1; } /* nothing finite: empty axes */
  if (x1 == x0) { x0 -= 1; x1 += 1; }
  if (y1 == y0) { y0 -= fabs(y0) * 0.1 + 1e-9; y1 += fabs(y1) * 0.1 + 1e-9; }
  dx = tr__nice(x1 - x0);
  dy = tr__nice(y1 - y0);
  y0 = floor(y0 / dy) * dy;
  y1 = ceil(y1 / dy) * dy;
  memset(&f, 0, sizeof f);
#define TR__SX(x) (L + ((x) - x0) / (x1 - x0) * pw)
#define TR__SY(y) (T + ph - ((y) - y0) / (y1 - y0) * ph)
  tr__putf(&f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
  tr__putf(&f, "<rect width=\"%g\" height=\"%g\" fill=\"white\"/>\n<text x=\"%g\" y=\"24\" font-size=\"15\">", W, H, L);
  tr__svg_text(&f, title);
  tr__put_s(&f, "</text>\n");
  if (desc && desc[0]) { tr__put_s(&f, "<desc>"); tr__svg_text(&f, desc); tr__put_s(&f, "</desc>\n"); } /* the hparams */
  for (v = ceil(x0 / dx) * dx; v <= x1 + dx * 1e-9; v += dx)
    tr__putf(&f, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#e5e5e5\"/><text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%g</text>\n",
             TR__SX(v), T, TR__SX(v), T + ph, TR__SX(v), T + ph + 16, v);
  for (v = y0; v <= y1 + dy * 1e-9; v += dy)
    tr__putf(&f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#e5e5e5\"/><text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%.4g</text>\n",
             L, TR__SY(v), L + pw, TR__SY(v), L - 6, TR__SY(v) + 4, fabs(v) < dy * 1e-9 ? 0.0 : v);
  tr__putf(&f, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#333\"/>\n", L, T, pw, ph);
  tr__putf(&f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%s</text>\n", L + pw / 2, H - 12, xlabel);
  for (i = 0; i < n; i++) {
    const char *c = colour[i % 8];
    int open = 0;
    for (k = 0; k < s[i].n; k++) { /* a non-finite value breaks the line */
      if (!hk_is_finite(s[i].y[k]) || !hk_is_finite(s[i].x[k])) { if (open) tr__put_s(&f, "\"/>\n"); open = 0; continue; }
      if (!open) tr__putf(&f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
      tr__putf(&f, "%s%.1f,%.1f", open ? " " : "", TR__SX(s[i].x[k]), TR__SY(s[i].y[k]));
      open = 1;
    }
    if (open) tr__put_s(&f, "\"/>\n");
    if (s[i].n <= 60) /* few points (a validation curve): mark them */
      for (k = 0; k < s[i].n; k++)
        if (hk_is_finite(s[i].y[k]) && hk_is_finite(s[i].x[k]))
          tr__putf(&f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", TR__SX(s[i].x[k]), TR__SY(s[i].y[k]), c);
    tr__putf(&f, "<rect x=\"%g\" y=\"%g\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%g\" y=\"%g\">", L + pw + 14, T + 10 + 20.0 * i, c, L + pw + 34, T + 15 + 20.0 * i);
    tr__svg_text(&f, s[i].name);
    tr__put_s(&f, "</text>\n");
  }
#undef TR__SX
#undef TR__SY
  tr__put_s(&f, "</svg>\n");
  if (f.failed) { snprintf(why, why_len, "out of memory"); e = ENOMEM; }
  else e = tr__write_whole(path, f.data, f.len, 0, NULL, why, why_len);
  hk_bytes_free(&f);
  return e;
}

static hk_signal tr__plot_write(tr__logger *s, hk_ctx *ctx) {
  char why[600];
  hk_bytes desc;
  int e;
  hk_signal sig = tr__logger_open(s, ctx);
  if (sig != HK_CONTINUE || s->broken || !s->n_series) return sig;
  memset(&desc, 0, sizeof desc);
  tr__hparams_text(s, ctx, TR__LOG_PLOT, &desc);
  hk_bytes_put(&desc, "", 1);
  e = tr__svg_write(s->path, s->title && s->title[0] ? s->title : s->dir, desc.failed ? NULL : (const char *)desc.data, "step",
                    s->series, s->n_series, why, sizeof why);
  hk_bytes_free(&desc);
  return e ? tr__logger_broke(s, ctx, "%s", why) : HK_CONTINUE;
}

/* Read a CSV line's cells in place (quotes removed); returns the number of cells. */
static int tr__csv_split(char *line, char **cells, int max) {
  int n = 0;
  char *p = line, *w;
  while (n < max) {
    cells[n++] = w = p;
    if (*p == '"') {
      p++;
      while (*p && !(*p == '"' && p[1] != '"')) { if (*p == '"') p++; *w++ = *p++; }
      if (*p == '"') p++;
    } else while (*p && *p != ',') *w++ = *p++;
    if (*p != ',') { *w = 0; break; }
    *w = 0;
    p++;
  }
  return n;
}

TRAIN_API tr_err tr_plot_csv(const char *csv_path, const char *svg_path, const char *metrics, char *why, size_t why_len) {
  enum { MAXC = 256 };
  char dummy[8], *line = NULL, *cells[MAXC];
  size_t cap = 0;
  FILE *f;
  int n_cols = 0, step_col = -1, job_col = -1, i, line_no = 0, e;
  int col_series[MAXC];
  tr__series *series = NULL;
  int n_series = 0;
  tr_err err = TR_OK;
  if (!why) { why = dummy; why_len = sizeof dummy; }
  why[0] = 0;
  if (!csv_path || !svg_path) { snprintf(why, why_len, "tr_plot_csv: the CSV and SVG paths are required"); return TR_ERR_INVALID; }
  if (!(f = fopen(csv_path, "r"))) { snprintf(why, why_len, "cannot read %s: %s", csv_path, strerror(errno)); return TR_ERR_IO; }
  for (;;) { /* whole lines of any length */
    size_t len = 0;
    int c;
    while ((c = fgetc(f)) != EOF && c != '\n') {
      if (len + 2 > cap) {
        char *p = (char *)realloc(line, cap = cap ? 2 * cap : 256);
        if (!p) { err = TR_ERR_NOMEM; break; }
        line = p;
      }
      line[len++] = (char)c;
    }
    if (err || (c == EOF && len == 0)) break;
    if (!line && !(line = (char *)malloc(cap = 256))) { err = TR_ERR_NOMEM; break; }
    line[len] = 0;
    if (len && line[len - 1] == '\r') line[--len] = 0;
    if (line_no++ == 0) {
      n_cols = tr__csv_split(line, cells, MAXC);
      for (i = 0; i < n_cols; i++) {
        col_series[i] = -1;
        if (!strcmp(cells[i], "step")) step_col = i;
        else if (!strcmp(cells[i], "job")) job_col = i; /* a sweep's summary.csv: one row per job */
        else if (tr__plot_wants(metrics, cells[i])) {
          tr__series *s = tr__series_get(&series, &n_series, cells[i]);
          if (!s) { err = TR_ERR_NOMEM; break; }
          col_series[i] = (int)(s - series);
        }
      }
      if (step_col < 0) step_col = job_col; /* else "job" is a column like any other */
      else if (job_col >= 0 && tr__plot_wants(metrics, "job")) {
        tr__series *s = tr__series_get(&series, &n_series, "job");
        if (!s) err = TR_ERR_NOMEM;
        else col_series[job_col] = (int)(s - series);
      }
      if (!err && step_col < 0) { snprintf(why, why_len, "%s: the header has no \"step\" column (expected metrics.csv's layout, or a \"job\" column: a sweep's summary.csv)", csv_path); err = TR_ERR_INVALID; }
      if (!err && n_series == 0) { snprintf(why, why_len, "%s: no column to plot (%s)", csv_path, metrics && metrics[0] ? "none of the metrics asked for" : "no column name contains \"loss\""); err = TR_ERR_INVALID; }
      if (err) break;
    } else {
      int n = tr__csv_split(line, cells, MAXC);
      char *end;
      double x;
      if (n != n_cols) { snprintf(why, why_len, "%s:%d: %d cells, the header has %d", csv_path, line_no, n, n_cols); err = TR_ERR_INVALID; break; }
      x = strtod(cells[step_col], &end);
      if (end == cells[step_col] || *end) continue;
      for (i = 0; i < n; i++) {
        double y;
        if (col_series[i] < 0 || !cells[i][0]) continue;
        y = strtod(cells[i], &end);
        if (*end) continue;
        if (tr__series_add(&series[col_series[i]], x, y)) { err = TR_ERR_NOMEM; break; }
      }
      if (err) break;
    }
  }
  if (!err && ferror(f)) { snprintf(why, why_len, "cannot read %s", csv_path); err = TR_ERR_IO; }
  if (!err && line_no == 0) { snprintf(why, why_len, "%s is empty", csv_path); err = TR_ERR_INVALID; }
  fclose(f);
  free(line);
  if (err == TR_ERR_NOMEM) snprintf(why, why_len, "out of memory");
  if (!err && (e = tr__svg_write(svg_path, csv_path, NULL, step_col == job_col ? "job" : "step", series, n_series, why, why_len)) != 0) err = TR_ERR_IO;
  tr__series_free(series, n_series);
  return err;
}
#endif /* TR__ON_PLOT */

static void tr__logger_destroy(void *user) {
  tr__logger *s = (tr__logger *)user;
  int i;
  if (!s) return;
  (void)tr__logger_flush(s, NULL, 1); /* a loop that never fired teardown still gets every record on disk */
#ifdef TR__POSIX
  if (s->fd >= 0) close(s->fd);
#endif
  free(s->save_dir); free(s->name); free(s->version); free(s->dir); free(s->path);
  hk_bytes_free(&s->out); hk_bytes_free(&s->scratch); hk_bytes_free(&s->vals); hk_bytes_free(&s->tmp);
  for (i = 0; i < s->n_cols; i++) free(s->cols[i]);
  free(s->cols); free(s->row_at); free(s->cell_col); free(s->cell_val);
  free(s->order); free(s->pos); free(s->has); free(s->rowv);
  free(s->plot_path); free(s->metrics); free(s->title);
#if TR__ON_PLOT
  tr__series_free(s->series, s->n_series);
#endif
  free(s);
}


static tr_err tr__logger_make(hk_registry *reg, tr__log_kind kind, const tr_logger_desc *d,
                              const tr_plot_desc *pd, hk_handle *out, tr__why *w) {
  const char *who = tr__log_kind_name[kind];
  char unique[64];
  tr__logger *s;
  hk_callback cb;
  hk_opts o;
  hk_err e;
  if (!d) return tr__bad(w, "%s: desc is NULL", who);
  if (d->flush_every < 0) return tr__bad(w, "%s: flush_every must be >= 0 (0 = once a second), got %d", who, d->flush_every);
  if (d->version && strchr(d->version, '/')) return tr__bad(w, "%s: version '%s' must be a directory name without '/'", who, d->version);
  if (d->save_dir && !d->save_dir[0]) return tr__bad(w, "%s: save_dir is empty (NULL means \"runs\"; \".\" is the current directory)", who);
  if (!(s = (tr__logger *)calloc(1, sizeof *s))) return tr__bad(w, "%s: out of memory", who), TR_ERR_NOMEM;
  s->kind = kind;
  s->run = tr_run_get(reg);
  s->fd = -1;
  s->pub.dir = s->pub.path = s->pub.error = "";
  s->flush_every = d->flush_every;
  s->fail_on_error = d->fail_on_error > 0;
  s->save_dir = d->save_dir ? tr__strdup(d->save_dir) : NULL; /* NULL: the run's (tr_run_desc) */
  s->name = d->name ? tr__strdup(d->name) : NULL;
  s->version = d->version ? tr__strdup(d->version) : NULL;
  if (pd) {
    s->plot_path = tr__strdup(pd->path);
    s->metrics = tr__strdup(pd->metrics);
    s->title = tr__strdup(pd->title);
  }
  if ((d->save_dir && !s->save_dir) || (d->name && !s->name) || (d->version && !s->version) ||
      (pd && (!s->plot_path || !s->metrics || !s->title))) {
    tr__logger_destroy(s);
    return tr__bad(w, "%s: out of memory", who), TR_ERR_NOMEM;
  }
  memset(&cb, 0, sizeof cb);
  cb.name = tr__unique_name(reg, who, unique, sizeof unique);
  cb.user = s;
  cb.setup = tr__logger_setup;
  cb.on_log = tr__logger_on_log;
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

#if TR__ON_CSV
TRAIN_API tr_err tr_csv_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__logger_make(reg, TR__LOG_CSV, d, NULL, out, &w), &w);
}
#endif
#if TR__ON_JSONL
TRAIN_API tr_err tr_jsonl_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__logger_make(reg, TR__LOG_JSONL, d, NULL, out, &w), &w);
}
#endif
#if TR__ON_TENSORBOARD
TRAIN_API tr_err tr_tensorboard_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__logger_make(reg, TR__LOG_TB, d, NULL, out, &w), &w);
}
#endif
#if TR__ON_PLOT
TRAIN_API tr_err tr_plot(hk_registry *reg, const tr_plot_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  if (!d) return tr__cb_result(reg, tr__bad(&w, "plot: desc is NULL"), &w);
  return tr__cb_result(reg, tr__logger_make(reg, TR__LOG_PLOT, &d->dir, d, out, &w), &w);
}
#endif
TRAIN_API const tr_logger_state *tr_logger_get(const hk_registry *reg, hk_handle h) {
  const hk_callback *cb = hk_callback_get(reg, h);
  return cb && cb->destroy == tr__logger_destroy ? &((const tr__logger *)cb->user)->pub : NULL;
}
TR__ARGS_OF(logger, tr_logger_desc, TR_LOGGER_PARAMS)
TR__ARGS_OF(plot, tr_plot_desc, TR_PLOT_PARAMS)
static hk_err tr__log_factory(hk_registry *reg, const hk_args *a, void *user, tr__log_kind kind) {
  tr_plot_desc pd;
  tr__why w;
  tr_err e = tr__plot_args(a, &pd, &w); /* csv, jsonl, tensorboard: no plot keys, a zero plot desc */
  (void)user;
  if (!e) e = tr__logger_args(a, &pd.dir, &w);
  if (!e && pd.dir.flush_every < 0)
    return hk_set_error(reg, HK_ERR_INVALID, "%s: flush_every must be between 0 and 1e9 (0: once a second), got %d", a->factory, pd.dir.flush_every);
  return tr__factory_result(reg, e ? e : tr__logger_make(reg, kind, &pd.dir, kind == TR__LOG_PLOT ? &pd : NULL, NULL, &w), &w);
}
/* csv, jsonl and tensorboard take the logger's parameters; plot takes them and its own */
#define TR__LOG_FACTORY_OF(p, kind, LIST) \
  static const hk_param tr__##p##_params[] = { LIST(TR__PARAM) }; \
  static hk_err tr__##p##_factory(hk_registry *reg, const hk_args *a, void *user) { return tr__log_factory(reg, a, user, kind); }
#if TR__ON_CSV
TR__LOG_FACTORY_OF(csv, TR__LOG_CSV, TR_LOGGER_PARAMS)
#endif
#if TR__ON_JSONL
TR__LOG_FACTORY_OF(jsonl, TR__LOG_JSONL, TR_LOGGER_PARAMS)
#endif
#if TR__ON_TENSORBOARD
TR__LOG_FACTORY_OF(tb, TR__LOG_TB, TR_LOGGER_PARAMS)
#endif
#if TR__ON_PLOT
#  define TR__LOGGER_AND_PLOT_PARAMS(X) TR_LOGGER_PARAMS(X) TR_PLOT_PARAMS(X)
TR__LOG_FACTORY_OF(plot, TR__LOG_PLOT, TR__LOGGER_AND_PLOT_PARAMS)
#endif
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
