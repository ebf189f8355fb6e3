/* train/loggers/plot.h - plot. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_PLOT_H /* part */
#define TRAIN_PLOT_H /* part */
#include "file_loggers.h" /* part */

TR__C_BEGIN /* part */
/* plot: curves of logged metrics against step, written as SVG (no dependency; any browser shows it)
   at every teardown, i.e. at the end of each run, failed runs included, and before every checkpoint
   that has new points to show (a resume after a kill reads them back). The hparams go into the
   SVG's <desc> element (as hparams.yaml's lines). */
#define TR_PLOT_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD); a spec also takes TR_LOGGER_PARAMS */ \
  X(C_ONLY, tr_logger_desc, dir,     NULL, NULL, "the version directory (a spec: the logger parameters)") \
  X(STRING, const char *,   path,    "",   NULL, "the SVG file, a regular file there replaced (you named it); empty: " \
    "metrics.svg in the version directory, refused when a file the logger did not write is there") \
  X(STRING, const char *,   metrics, "",   NULL, "space-separated metric names (empty: every metric with loss in its name)") \
  X(STRING, const char *,   title,   "",   NULL, "the plot's title (empty: the file's directory)")
typedef struct tr_plot_desc { TR_PLOT_PARAMS(TR__FIELD) } tr_plot_desc;
TRAIN_API tr_err tr_plot(hk_registry *reg, const tr_plot_desc *d, hk_handle *out);
/* The same plot from a CSV file in metrics.csv's layout (a "step" column and metric columns; empty
   cells are skipped), or with a "job" column instead of "step" (a sweep's summary.csv: x is the job). why (may be NULL) gets the reason on error: TR_ERR_IO, TR_ERR_INVALID. */
TRAIN_API tr_err tr_plot_csv(const char *csv_path, const char *svg_path, const char *metrics, char *why, size_t why_len);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
typedef struct tr__plot { char *path, *metrics, *title; int own_path; struct tr__series *series; int n_series; int fresh; } tr__plot; /* fresh: points the file lacks */

typedef struct tr__series { char *name; double *x, *y; int n, cap; } tr__series;

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
  tr__plot *p = (tr__plot *)s->own;
  int i;
  for (i = 0; i < r->n_metrics; i++) {
    tr__series *se;
    if (!tr__plot_wants(p->metrics, r->metrics[i].name)) continue;
    se = tr__series_get(&p->series, &p->n_series, r->metrics[i].name);
    if (!se || tr__series_add(se, (double)r->step, r->metrics[i].value)) return tr__logger_broke(s, ctx, "out of memory");
    p->fresh = 1;
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
static int tr__svg_write(const char *path, tr__file_id *mine, const char *title, const char *desc, const char *xlabel,
                         const tr__series *s, int n, char *why, size_t why_len) {
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
  /* the points as logged, for the logger's own file: a resume that continues the run reads them back (the
     polylines are scaled and rounded), so its plot shows the whole run */
  if (mine) {
    tr__put_s(&f, "<metadata id=\"train.h-points\">\n");
    for (i = 0; i < n; i++) {
      tr__put_s(&f, "<series name=\"");
      tr__svg_text(&f, s[i].name);
      tr__put_s(&f, "\">");
      for (k = 0; k < s[i].n; k++) tr__putf(&f, "%s%.17g %.17g", k ? " " : "", s[i].x[k], s[i].y[k]);
      tr__put_s(&f, "</series>\n");
    }
    tr__put_s(&f, "</metadata>\n");
  }
  tr__put_s(&f, "</svg>\n");
  if (f.failed) { snprintf(why, why_len, "out of memory"); e = ENOMEM; }
  else if (mine) e = tr__write_mine(path, f.data, f.len, mine, NULL, why, why_len);
  else e = tr__write_whole(path, f.data, f.len, 0, NULL, why, why_len);
  hk_bytes_free(&f);
  return e;
}
static hk_signal tr__plot_write(tr__logger *s, hk_ctx *ctx) {
  tr__plot *p = (tr__plot *)s->own;
  char why[600];
  hk_bytes desc;
  int e;
  hk_signal sig = tr__logger_open(s, ctx);
  if (sig != HK_CONTINUE || s->broken || !p->n_series) return sig;
  memset(&desc, 0, sizeof desc);
  tr__hparams_yaml(s, ctx, &desc);
  hk_bytes_put(&desc, "", 1);
  e = tr__svg_write(s->path, p->own_path ? NULL : &s->id, p->title && p->title[0] ? p->title : s->dir,
                    desc.failed ? NULL : (const char *)desc.data, "step", p->series, p->n_series, why, sizeof why);
  hk_bytes_free(&desc);
  if (!e) p->fresh = 0;
  return e ? tr__logger_broke(s, ctx, "%s", why) : HK_CONTINUE;
}
/* before a checkpoint: the points so far, so that a resume after a kill -9 reads them back (tr__plot_take_back) */
static hk_signal tr__plot_checkpoint(tr__logger *s, hk_ctx *ctx) {
  return ((tr__plot *)s->own)->fresh ? tr__plot_write(s, ctx) : HK_CONTINUE;
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
  int n_cols = 0, step_col = -1, job_col = -1, i, line_no = 0;
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
  if (!err && tr__svg_write(svg_path, NULL, csv_path, NULL, step_col == job_col ? "job" : "step", series, n_series, why, why_len) != 0) err = TR_ERR_IO;
  tr__series_free(series, n_series);
  return err;
}

/* the SVG's path: the desc's (the file it names is written, a regular file there replaced: you named
   it), else metrics.svg in the version directory (refused when a file is there already, as every
   logger's file: written where nothing is, then over its own file only) */
/* A name as tr__svg_text wrote it, back (in place) */
static void tr__svg_untext(char *t) {
  static const char *const ent[4][2] = { { "&lt;", "<" }, { "&gt;", ">" }, { "&quot;", "\"" }, { "&amp;", "&" } };
  char *w = t;
  int i;
  while (*t) {
    for (i = 0; i < 4 && strncmp(t, ent[i][0], strlen(ent[i][0])); i++) {}
    if (i < 4) { *w++ = ent[i][1][0]; t += strlen(ent[i][0]); }
    else *w++ = *t++;
  }
  *w = 0;
}
/* A continued run's points from its metrics.svg (tr__svg_write's metadata), those logged after the
   checkpoint left out (the resumed run logs them again). A file without them (an older one) adds none. */
static int tr__plot_take_back(tr__logger *s, tr__plot *p, char *text) {
  char *at = strstr(text, "<metadata id=\"train.h-points\">"), *end = at ? strstr(at, "</metadata>") : NULL;
  if (!at || !end) return 0;
  *end = 0;
  while ((at = strstr(at, "<series name=\"")) != NULL) {
    char *name = at + 14, *q = strchr(name, '"'), *num, *stop;
    const char *stage;
    tr__series *se;
    if (!q || q[1] != '>' || !(stop = strstr(q, "</series>"))) break;
    *q = 0;
    *stop = 0;
    tr__svg_untext(name);
    stage = !strncmp(name, "val/", 4) ? "val" : !strncmp(name, "test/", 5) ? "test" : "train"; /* as csv's read-back */
    if (!(se = tr__series_get(&p->series, &p->n_series, name))) return ENOMEM;
    for (num = q + 2; *num;) {
      char *e1, *e2;
      double x = strtod(num, &e1), y = e1 != num ? strtod(e1, &e2) : 0;
      if (e1 == num || e2 == e1) break;
      num = e2;
      if (!(x >= -9.2e18 && x <= 9.2e18) || tr__run_superseded(s->run, (int64_t)x, stage)) continue;
      if (tr__series_add(se, x, y)) return ENOMEM;
    }
    at = stop + 1;
  }
  return 0;
}
static int tr__plot_open(tr__logger *s, hk_ctx *ctx, char *why, size_t cap) {
  tr__plot *p = (tr__plot *)s->own;
  hk_bytes old;
  int e;
  (void)ctx;
  p->own_path = p->path && p->path[0];
  if (!p->own_path) { free(p->path); p->path = tr__join(s->dir, "metrics.svg"); }
  if (!p->path || !(s->path = tr__strdup(p->path))) return ENOMEM;
  if (p->own_path) return 0;
  memset(&old, 0, sizeof old);
  e = tr__logger_take(s, s->path, &old, &s->id, why, cap);
  if (!e && s->continued && old.len) {
    hk_bytes_put(&old, "", 1);
    e = old.failed ? ENOMEM : tr__plot_take_back(s, p, (char *)old.data);
  }
  hk_bytes_free(&old);
  return e;
}
static void tr__plot_destroy(void *own) {
  tr__plot *p = (tr__plot *)own;
  if (!p) return;
  free(p->path); free(p->metrics); free(p->title);
  tr__series_free(p->series, p->n_series);
  free(p);
}
static const tr__log_format tr__plot_format = { "plot", "line", tr__plot_open, tr__plot_add, NULL, NULL, tr__plot_write, tr__plot_destroy, tr__plot_checkpoint };
static tr_err tr__plot_make(hk_registry *reg, const tr_plot_desc *d, hk_handle *out, tr__why *w) {
  tr__plot *p = (tr__plot *)calloc(1, sizeof *p);
  int failed = !p;
  if (p) {
    p->path = tr__strdup(d->path);
    p->metrics = tr__strdup(d->metrics);
    p->title = tr__strdup(d->title);
    failed = !p->path || !p->metrics || !p->title;
  }
  return tr__logger_make(reg, &tr__plot_format, &d->dir, p, failed, out, w);
}
TRAIN_API tr_err tr_plot(hk_registry *reg, const tr_plot_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  if (!d) return tr__cb_result(reg, tr__bad(&w, "plot: desc is NULL"), &w);
  return tr__cb_result(reg, tr__plot_make(reg, d, out, &w), &w);
}
/* plot takes the logger's parameters and its own */
#define TR__LOGGER_AND_PLOT_PARAMS(X) TR_LOGGER_PARAMS(X) TR_PLOT_PARAMS(X)
static const hk_param tr__plot_params[] = { TR__LOGGER_AND_PLOT_PARAMS(TR__PARAM) };
TR__ARGS_OF(plot, tr_plot_desc, TR_PLOT_PARAMS)
static hk_err tr__plot_factory(hk_registry *reg, const hk_args *a, void *user) {
  tr_plot_desc d;
  tr__why w = {""}; /* gcc -O1 cannot see that w is read only after an error wrote it */
  tr_err e = tr__plot_args(a, &d, &w);
  hk_err he;
  (void)user;
  if (e) return tr__factory_result(reg, e, &w);
  if ((he = tr__logger_spec(reg, a, &d.dir)) != HK_OK) return he;
  return tr__factory_result(reg, tr__plot_make(reg, &d, NULL, &w), &w);
}
TR__ADD_OF(plot)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
