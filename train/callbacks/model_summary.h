/* train/callbacks/model_summary.h - model_summary. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_MODEL_SUMMARY_H /* part */
#define TRAIN_MODEL_SUMMARY_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- model_summary (Lightning's ModelSummary) ---------------------------------------------------
   At on_fit_start prints the tensor table: index, name, element count, share of all parameters,
   device (cpu / gpu from hk_tensor.on_device), then the total and the size in MB (4 bytes each),
   with Lightning's count format (12.3 K, 1.2 M). max_rows limits the table (the rest is summed in
   one line). Printed on rank 0 only (Lightning's rule). Hand-written loop: fire on_fit_start with
   ctx->params (their names and counts: it never reads the data, which may be set later). */
#define TR_MODEL_SUMMARY_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(INT_ZERO, int,    max_rows, "50", NULL, "tensors listed (0: totals only)") \
  X(C_ONLY,   FILE *, out,      NULL, NULL, "NULL = the run's log (tr_run_desc.log), else stdout")
typedef struct tr_model_summary_desc { TR_MODEL_SUMMARY_PARAMS(TR__FIELD) } tr_model_summary_desc;
typedef struct tr_model_summary_state { int64_t total_params; int n_tensors; } tr_model_summary_state;
TRAIN_API tr_err tr_model_summary(hk_registry *reg, const tr_model_summary_desc *d, hk_handle *out);
TRAIN_API const tr_model_summary_state *tr_model_summary_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- model_summary -------------------------------------------------------------------------------- */
typedef struct tr__ms { tr_model_summary_state pub; tr_run *run; int max_rows; FILE *out; } tr__ms;
static void tr__ms_destroy(void *user) { free(user); }

/* Lightning's count format: 123, 1.2 K, 12.3 M, 1.2 B */
static void tr__count_str(char *out, size_t cap, double n) {
  static const char *const unit[] = { "", " K", " M", " B", " T" };
  int u = 0;
  while (n >= 999.95 && u < 4) { n /= 1000; u++; }
  if (u == 0) tr__msg(out, cap, "%.0f", n); /* a size_t: at most "18446744.1 T" */
  else tr__msg(out, cap, "%.1f%s", n, unit[u]);
}
static hk_signal tr__ms_fit_start(hk_ctx *ctx, void *user) {
  tr__ms *s = (tr__ms *)user;
  tr_run *run = s->run;
  FILE *f = s->out ? s->out : run && run->desc.log ? run->desc.log : stdout;
  size_t total = tr__views_count(ctx, ctx->params), rest = 0, name_w = 4;
  int k, shown = 0;
  char num[32];
  for (k = 0; k < ctx->n_tensors; k++) {
    size_t len = strlen(ctx->params[k].name ? ctx->params[k].name : "");
    if (k < s->max_rows && len > name_w) name_w = len > 40 ? 40 : len;
  }
  s->pub.total_params = (int64_t)total;
  s->pub.n_tensors = ctx->n_tensors;
  if (ctx->rank != 0) return HK_CONTINUE; /* one table for the job (Lightning: rank zero) */
  if (s->max_rows > 0) fprintf(f, "  | %-*s | %-8s | %-6s | Device\n", (int)name_w, "Name", "Params", "Share");
  for (k = 0; k < ctx->n_tensors; k++) {
    const hk_tensor *v = &ctx->params[k];
    if (k >= s->max_rows) { rest += v->count; continue; }
    tr__count_str(num, sizeof num, (double)v->count);
    fprintf(f, "%-2d| %-*.*s | %-8s | %5.1f%% | %s\n", k, (int)name_w, (int)name_w, v->name ? v->name : "?", num,
            total ? 100.0 * (double)v->count / (double)total : 0.0, v->on_device ? "gpu" : "cpu");
    shown++;
  }
  if (shown < ctx->n_tensors && s->max_rows > 0) {
    tr__count_str(num, sizeof num, (double)rest);
    fprintf(f, "  | (%d more tensors) %s parameters\n", ctx->n_tensors - shown, num);
  }
  tr__count_str(num, sizeof num, (double)total);
  fprintf(f, "%-9s Total params (%d tensors)\n%-9.3f Total estimated model params size (MB)\n", num, ctx->n_tensors,
          (double)total * 4 * 1e-6);
  return HK_CONTINUE;
}
static tr_err tr__ms_make(hk_registry *reg, const tr_model_summary_desc *d, hk_handle *out, tr__why *w) {
  tr__ms *s;
  hk_callback cb;
  if (!d) return tr__bad(w, "model_summary: desc is NULL");
  if (d->max_rows < 0 && d->max_rows != TR_ZERO) return tr__bad(w, "model_summary: max_rows must be >= 0 (0 = 50, TR_ZERO = totals only), got %d", d->max_rows);
  s = (tr__ms *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "model_summary: out of memory"), TR_ERR_NOMEM;
  s->run = tr_run_get(reg);
  s->max_rows = tr__zero_int(d->max_rows, 50);
  s->out = d->out;
  memset(&cb, 0, sizeof cb);
  cb.name = "model_summary";
  cb.user = s;
  cb.on_fit_start = tr__ms_fit_start;
  cb.destroy = tr__ms_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}
TR__PUBLIC_OF(tr_model_summary, ms)
TR__FACTORY_OF(ms, tr_model_summary_desc, TR_MODEL_SUMMARY_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
