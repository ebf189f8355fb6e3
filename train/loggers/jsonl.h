/* train/loggers/jsonl.h - jsonl. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_JSONL_H /* part */
#define TRAIN_JSONL_H /* part */
#include "file_loggers.h" /* part */

TR__C_BEGIN /* part */
/* jsonl: metrics.jsonl, one JSON object per line. The first line is {"hparams": {...}} (numbers as
   numbers, the rest as strings, "specs" as a list); then one line per record:
   {"step":49,"epoch":0,"stage":"train","metrics":{"train/loss":0.25}}. NaN and infinities, which
   JSON cannot hold, are written as the strings "NaN", "Infinity" and "-Infinity". */
TRAIN_API tr_err tr_jsonl_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* the first line: {"hparams": {...}} */
static int tr__jsonl_open(tr__logger *s, hk_ctx *ctx, char *why, size_t cap) {
  tr__hparam *h;
  hk_bytes b;
  const char *spec;
  int i, n, e = tr__logger_file(s, "metrics.jsonl", why, cap);
  if (e) return e;
  if ((n = tr__run_hparams(s->run, &h)) < 0) return ENOMEM;
  memset(&b, 0, sizeof b);
  tr__put_s(&b, "{\"hparams\":{");
  for (i = 0; i < n; i++) { if (i) tr__put_s(&b, ","); tr__json_str(&b, h[i].key); tr__put_s(&b, ":"); if (h[i].num) tr__put_s(&b, h[i].val); else tr__json_str(&b, h[i].val); }
  tr__put_s(&b, n ? ",\"specs\":[" : "\"specs\":[");
  for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { if (i) tr__put_s(&b, ","); tr__json_str(&b, spec); }
  tr__put_s(&b, "]}}\n");
  free(h);
  e = b.failed ? ENOMEM : tr__write_mine(s->path, b.data, b.len, &s->id, &s->fd, why, cap);
  if (!e) s->size = (int64_t)b.len;
  hk_bytes_free(&b);
  return e;
}
static hk_signal tr__jsonl_record(tr__logger *s, hk_ctx *ctx, const tr_log_record *r) {
  int i;
  (void)ctx;
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
  ++s->pending;
  return HK_CONTINUE;
}
static const tr__log_format tr__jsonl_format = { "jsonl", "line", tr__jsonl_open, tr__jsonl_record, NULL, NULL, NULL, NULL };
static tr_err tr__jsonl_make(hk_registry *reg, const tr_logger_desc *d, hk_handle *out, tr__why *w) {
  return tr__logger_make(reg, &tr__jsonl_format, d, NULL, 0, out, w);
}
TR__LOGGER_OF(jsonl, jsonl, tr__jsonl_make)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
