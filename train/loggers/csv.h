/* train/loggers/csv.h - csv. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_CSV_H /* part */
#define TRAIN_CSV_H /* part */
#include "file_loggers.h" /* part */

TR__C_BEGIN /* part */
/* csv: metrics.csv and hparams.yaml as Lightning's CSVLogger writes them: columns the sorted union of the
   keys logged (epoch, step too), one row a record, empty cells where a record lacks a column, numbers in
   the shortest form that reads back (nan, inf as Python). Rows appended as whole lines; a new column
   rewrites the file atomically. hparams.yaml: "key: value" sorted, the specs as a list. docs/logging.md. */
TRAIN_API tr_err tr_csv_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* A new column rewrites the whole file: at once while it is small; in a larger one rows go without the new
   column until the rewrite is paid for (the bytes appended since reach half of what the last rewrite
   wrote), TR__CSV_WAIT seconds (and 20 times the last rewrite) passed, or the run ends. So a column per
   record costs linear work, not cubic. */
#define TR__CSV_SMALL (16 * 1024)
#define TR__CSV_WAIT 2.0

typedef struct tr__csv { /* every row stays in memory, so that a new column can rewrite the file */
  /* csv: every row stays in memory, so that a new column can rewrite the file */
  char **cols; int n_cols, cap_cols, col_hint;  /* columns by first appearance (epoch 0, step 1) */
  int file_cols;        /* the columns in the file's header: ids 0 .. file_cols-1 */
  int *order, *pos;     /* the file's layout: its p-th column is cols[order[p]]; pos[id] = p */
  char *has; double *rowv; /* one row's cells in file order (scratch) */
  int *row_at; int n_rows, cap_rows, rows_in_file; /* row r's cells: row_at[r] .. row_at[r+1] */
  int *cell_col; double *cell_val; int n_cells, cap_cells;
  int64_t base_size, appended; /* csv: the size the last whole write left, bytes appended since */
  double waiting_since, rewrite_secs; /* csv: rows went without a new column since (0: none); the last rewrite's time */
} tr__csv;

static int tr__csv_col(tr__csv *csv, const char *name) { /* the column's id, added when new; -1 on OOM */
  int i;
  if (csv->col_hint < csv->n_cols && !strcmp(csv->cols[csv->col_hint], name)) return csv->col_hint++; /* the last record's order */
  for (i = 0; i < csv->n_cols; i++) if (!strcmp(csv->cols[i], name)) { csv->col_hint = i + 1; return i; }
  if (csv->n_cols == csv->cap_cols) {
    int cap = csv->cap_cols ? 2 * csv->cap_cols : 16;
    char **p = (char **)realloc(csv->cols, (size_t)cap * sizeof *p);
    if (!p) return -1;
    csv->cols = p;
    csv->cap_cols = cap;
  }
  if (!(csv->cols[csv->n_cols] = tr__strdup(name))) return -1;
  csv->col_hint = csv->n_cols + 1;
  return csv->n_cols++;
}
static int tr__csv_cell_add(tr__csv *csv, int col, double v) {
  if (col < 0) return -1;
  if (csv->n_cells == csv->cap_cells) {
    int cap = csv->cap_cells ? 2 * csv->cap_cells : 256;
    int *c = (int *)realloc(csv->cell_col, (size_t)cap * sizeof *c);
    double *d;
    if (!c) return -1;
    csv->cell_col = c;
    if (!(d = (double *)realloc(csv->cell_val, (size_t)cap * sizeof *d))) return -1;
    csv->cell_val = d;
    csv->cap_cells = cap;
  }
  csv->cell_col[csv->n_cells] = col;
  csv->cell_val[csv->n_cells++] = v;
  return 0;
}
static int tr__csv_add_row(tr__csv *csv, const tr_log_record *r) {
  int i;
  if (csv->n_rows + 2 > csv->cap_rows) {
    int cap = csv->cap_rows ? 2 * csv->cap_rows : 64;
    int *p = (int *)realloc(csv->row_at, (size_t)cap * sizeof *p);
    if (!p) return -1;
    csv->row_at = p;
    csv->cap_rows = cap;
  }
  if (csv->n_rows == 0) csv->row_at[0] = 0;
  csv->col_hint = 0;
  if (tr__csv_cell_add(csv, tr__csv_col(csv, "epoch"), (double)r->epoch) ||
      tr__csv_cell_add(csv, tr__csv_col(csv, "step"), (double)r->step)) return -1;
  for (i = 0; i < r->n_metrics; i++)
    if (strcmp(r->metrics[i].name, "epoch") && strcmp(r->metrics[i].name, "step") &&
        tr__csv_cell_add(csv, tr__csv_col(csv, r->metrics[i].name), r->metrics[i].value)) return -1;
  csv->row_at[++csv->n_rows] = csv->n_cells;
  return 0;
}

/* The file's layout from every column known now, in Lightning's order (sorted by name). */
typedef struct tr__csv_key { const char *name; int id; } tr__csv_key;
static int tr__csv_key_cmp(const void *a, const void *b) { return strcmp(((const tr__csv_key *)a)->name, ((const tr__csv_key *)b)->name); }
static int tr__csv_layout(tr__csv *csv) {
  size_t n = (size_t)csv->n_cols;
  tr__csv_key *k = (tr__csv_key *)malloc(n * sizeof *k);
  int *order = k ? (int *)realloc(csv->order, n * sizeof *order) : NULL, *pos;
  char *has;
  double *rowv;
  size_t i;
  if (order) csv->order = order;
  if (!order || !(pos = (int *)realloc(csv->pos, n * sizeof *pos))) { free(k); return -1; }
  csv->pos = pos;
  if (!(has = (char *)realloc(csv->has, n))) { free(k); return -1; }
  csv->has = has;
  if (!(rowv = (double *)realloc(csv->rowv, n * sizeof *rowv))) { free(k); return -1; }
  csv->rowv = rowv;
  for (i = 0; i < n; i++) { k[i].name = csv->cols[i]; k[i].id = (int)i; }
  qsort(k, n, sizeof *k, tr__csv_key_cmp);
  for (i = 0; i < n; i++) { order[i] = k[i].id; pos[k[i].id] = (int)i; }
  free(k);
  csv->file_cols = (int)n;
  return 0;
}
static void tr__put_commas(hk_bytes *b, int n) {
  static const char commas[] = ",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,"; /* 32 */
  for (; n > 0; n -= 32) hk_bytes_put(b, commas, n < 32 ? (size_t)n : 32);
}
/* Rows [from, n_rows) as lines (the header first with header); cells of columns not in the file left out. */
static int tr__csv_text(tr__csv *csv, hk_bytes *b, int header, int from) {
  int nc = csv->file_cols, i, r, c;
  char num[40];
  if (header) {
    for (i = 0; i < nc; i++) { if (i) tr__put_s(b, ","); tr__csv_cell(b, csv->cols[csv->order[i]]); }
    tr__put_s(b, "\n");
  }
  for (r = from; r < csv->n_rows; r++) {
    int owed = 0; /* commas before the next cell */
    memset(csv->has, 0, (size_t)nc);
    for (c = csv->row_at[r]; c < csv->row_at[r + 1]; c++) {
      int id = csv->cell_col[c];
      if (id < nc) { csv->has[csv->pos[id]] = 1; csv->rowv[csv->pos[id]] = csv->cell_val[c]; }
    }
    for (i = 0; i < nc; i++) {
      if (i) owed++;
      if (!csv->has[i]) continue;
      tr__put_commas(b, owed);
      owed = 0;
      if (csv->order[i] < 2) snprintf(num, sizeof num, "%lld", (long long)csv->rowv[i]); /* epoch, step */
      else tr__num(num, sizeof num, csv->rowv[i]);
      tr__put_s(b, num);
    }
    tr__put_commas(b, owed);
    tr__put_s(b, "\n");
  }
  return b->failed ? -1 : 0;
}

/* csv: the whole file (header and every row) written anew and renamed over metrics.csv, its descriptor
   kept for the appends that follow. 0, or errno with why set. */
static int tr__csv_put_whole(tr__logger *s, char *why, size_t cap) {
  tr__csv *csv = (tr__csv *)s->own;
  double t0 = tr__wall();
  int fd, e;
  if (tr__csv_layout(csv) || tr__csv_text(csv, &s->out, 1, 0)) { snprintf(why, cap, "out of memory"); return ENOMEM; }
  if ((e = tr__write_mine(s->path, s->out.data, s->out.len, &s->id, &fd, why, cap)) != 0) return e;
#ifdef TR__POSIX
  if (s->fd >= 0) close(s->fd);
#endif
  s->fd = fd;
  s->size = csv->base_size = (int64_t)s->out.len;
  csv->appended = 0;
  csv->waiting_since = 0;
  csv->rewrite_secs = tr__wall() - t0;
  s->pub.records = csv->rows_in_file = csv->n_rows;
  return 0;
}
static hk_signal tr__csv_write_whole(tr__logger *s, hk_ctx *ctx) {
  char why[1100];
  int e = tr__csv_put_whole(s, why, sizeof why);
  if (e) return tr__logger_broke(s, ctx, "%s%s", why, s->fd >= 0 && e != EEXIST && e != ENOMEM ? " (the file keeps the rows it had)" : "");
  return HK_CONTINUE;
}

static hk_signal tr__csv_flush(tr__logger *s, hk_ctx *ctx, int force) {
  tr__csv *csv = (tr__csv *)s->own;
  hk_signal sig = HK_CONTINUE;
  int whole = s->fd < 0, count, e;
  size_t kept;
  s->out.len = 0;
  s->out.failed = 0;
  if (!whole && csv->file_cols != csv->n_cols) { /* new columns: rewrite now, or once it is paid for */
    double now = tr__wall();
    if (force || s->size <= TR__CSV_SMALL || 2 * csv->appended >= csv->base_size ||
        (csv->waiting_since > 0 && now - csv->waiting_since >= TR__CSV_WAIT && now - csv->waiting_since >= 20 * csv->rewrite_secs))
      whole = 1;
    else if (csv->waiting_since == 0) csv->waiting_since = now;
  }
  if (whole) sig = tr__csv_write_whole(s, ctx);
  else {
    if (tr__csv_text(csv, &s->out, 0, csv->rows_in_file)) return tr__logger_broke(s, ctx, "out of memory");
    e = tr__logger_append(s, &kept, &count);
    if (count < 0) count = csv->n_rows - csv->rows_in_file;
    csv->appended += (int64_t)kept;
    csv->rows_in_file += count;
    s->pub.records += count;
    if (e) return tr__logger_broke(s, ctx, "cannot write %s: %s (it ends with its last whole row)", s->path, strerror(e));
  }
  s->out.len = 0;
  s->pending = 0;
  return sig;
}

static hk_signal tr__csv_flush_if(tr__logger *s, hk_ctx *ctx, int force) {
  tr__csv *csv = (tr__csv *)s->own;
  if (!s->pending && !(force && s->fd >= 0 && csv->file_cols != csv->n_cols)) return HK_CONTINUE;
  return tr__csv_flush(s, ctx, force);
}
/* One cell at p (quoted as tr__csv_cell writes, or plain to a comma or line end) into cell; returns its end. */
static const char *tr__csv_read_cell(const char *p, const char *end, hk_bytes *cell) {
  cell->len = 0;
  if (p < end && *p == '"') { /* "" inside is one quote */
    for (p++; p < end; p++) {
      if (*p == '"' && (p + 1 >= end || p[1] != '"')) { p++; break; }
      hk_bytes_put(cell, p, 1);
      p += *p == '"';
    }
  } else
    for (; p < end && *p != ',' && *p != '\n'; p++) hk_bytes_put(cell, p, 1);
  hk_bytes_put(cell, "", 1);
  return p;
}
/* A resumed run's rows back from old, without those after its checkpoint (a row's stage: val with a val/
   cell, test with a test/ one, else train); columns only they had go too. EINVAL for a file not ours. */
static int tr__csv_take_back(tr__logger *s, const hk_bytes *old, char *why, size_t cap) {
  const char *p = (const char *)old->data, *end = p + old->len;
  char **names = NULL;
  int n = 0, k, e = 0;
  hk_bytes cell;
  tr_log_record r;
  memset(&cell, 0, sizeof cell);
  memset(&r, 0, sizeof r);
  while (p < end && !e) { /* the header */
    char **grown = (char **)realloc(names, (size_t)(n + 1) * sizeof *names);
    if (!grown) { e = ENOMEM; break; }
    names = grown;
    p = tr__csv_read_cell(p, end, &cell);
    if (cell.failed || !(names[n++] = tr__strdup((const char *)cell.data))) e = ENOMEM;
    if (p >= end || *p++ == '\n') break;
  }
  while (p < end && !e) { /* the rows */
    int has_epoch = 0, has_step = 0;
    tr_err te;
    const char *stage = "train";
    r.n_metrics = 0;
    for (k = 0; !e; k++) {
      char *num;
      double v;
      p = tr__csv_read_cell(p, end, &cell);
      if (cell.failed) e = ENOMEM;
      else if (k >= n) e = EINVAL;
      else if (cell.data[0]) {
        v = strtod((const char *)cell.data, &num);
        int counter = !strcmp(names[k], "epoch") || !strcmp(names[k], "step");
        if (*num) e = EINVAL;
        else if (counter && !(v >= 0 && v < 9.2e18 && v == floor(v))) e = EINVAL; /* nan, 1e300, -1, 2.5: not this logger's (a cast would be undefined) */
        else if (!strcmp(names[k], "epoch")) { r.epoch = (int64_t)v; has_epoch = 1; }
        else if (!strcmp(names[k], "step")) { r.step = (int64_t)v; has_step = 1; }
        else if ((te = tr_log_set(&r, names[k], v)) != TR_OK) e = te == TR_ERR_NOMEM ? ENOMEM : EINVAL;
        else if (!strncmp(names[k], "val/", 4) || !strncmp(names[k], "test/", 5)) stage = names[k][0] == 'v' ? "val" : "test";
      }
      if (p >= end || *p++ == '\n') break;
    }
    if (!e && (!has_epoch || !has_step)) e = EINVAL;
    if (!e && !tr__run_superseded(s->run, r.step, stage) && tr__csv_add_row((tr__csv *)s->own, &r)) e = ENOMEM;
  }
  if (e == EINVAL)
    snprintf(why, cap, "%s is not a metrics.csv this logger wrote (a row without epoch or step, a cell that is not a number, an epoch or "
             "step that is not a whole number >= 0, or "
             "more cells than columns): the resumed run does not continue it, nor replace it; move it away, or resume with "
             "new_version_on_resume", s->path);
  for (k = 0; k < n; k++) free(names[k]);
  free(names);
  hk_bytes_free(&cell);
  tr_log_record_free(&r);
  return e;
}

/* hparams.yaml now, metrics.csv with its first rows (none when nothing is logged, as Lightning); both
   checked before either is written. A continued run takes both back, metrics.csv rewritten at once. */
static int tr__csv_open(tr__logger *s, hk_ctx *ctx, char *why, size_t cap) {
  hk_bytes b, old;
  char *yaml;
  tr__file_id id = { 0, 0, 0 };
  int e;
  memset(&old, 0, sizeof old);
  e = tr__logger_file(s, "metrics.csv", &old, why, cap);
  if (!e && old.len) e = tr__csv_take_back(s, &old, why, cap);
  hk_bytes_free(&old);
  if (e) return e;
  if (!(yaml = tr__join(s->dir, "hparams.yaml"))) return ENOMEM;
  if ((e = tr__logger_take(s, yaml, NULL, &id, why, cap)) != 0) { free(yaml); return e; }
  memset(&b, 0, sizeof b);
  tr__hparams_yaml(s, ctx, &b);
  e = b.failed ? ENOMEM : tr__write_mine(yaml, b.data, b.len, &id, NULL, why, cap);
  free(yaml);
  hk_bytes_free(&b);
  if (!e && s->id.set) e = tr__csv_put_whole(s, why, cap); /* the file it continues, without what was superseded */
  s->out.len = 0;
  return e;
}
static hk_signal tr__csv_record(tr__logger *s, hk_ctx *ctx, const tr_log_record *r) {
  if (tr__csv_add_row((tr__csv *)s->own, r)) return tr__logger_broke(s, ctx, "out of memory");
  ++s->pending;
  return HK_CONTINUE;
}
static void tr__csv_destroy(void *own) {
  tr__csv *csv = (tr__csv *)own;
  int i;
  if (!csv) return;
  for (i = 0; i < csv->n_cols; i++) free(csv->cols[i]);
  free(csv->cols); free(csv->row_at); free(csv->cell_col); free(csv->cell_val);
  free(csv->order); free(csv->pos); free(csv->has); free(csv->rowv);
  free(csv);
}
static const tr__log_format tr__csv_format = { "csv", "line", tr__csv_open, tr__csv_record, tr__csv_flush_if, NULL, NULL, tr__csv_destroy, NULL };
static tr_err tr__csv_make(hk_registry *reg, const tr_logger_desc *d, hk_handle *out, tr__why *w) {
  tr__csv *csv = (tr__csv *)calloc(1, sizeof *csv);
  return tr__logger_make(reg, &tr__csv_format, d, csv, !csv, out, w);
}
TR__LOGGER_OF(csv, csv, tr__csv_make)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
