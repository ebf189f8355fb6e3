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
/* A resumed run's records, back from the metrics.jsonl it continues (old), each line as it was, without
   its hparams line and the records written after the checkpoint (tr__run_superseded): appended to b. 0,
   or EINVAL (why says so) for a file this logger did not write. */
static int tr__jsonl_take_back(const tr__logger *s, const hk_bytes *old, hk_bytes *b, char *why, size_t cap) {
  const char *p = (const char *)old->data, *end = p + old->len, *nl;
  int first = 1;
  for (; p < end; p = nl + 1, first = 0) {
    char *num, stage[8];
    long long step;
    size_t k;
    if (!(nl = (const char *)memchr(p, '\n', (size_t)(end - p)))) { p = end; break; } /* a line cut short by a kill: dropped */
    if (first) { if (nl - p < 11 || memcmp(p, "{\"hparams\":", 11)) break; continue; }
    if (nl - p < 8 || memcmp(p, "{\"step\":", 8)) break; /* {"step":S,"epoch":E,"stage":"...", as written below */
    step = strtoll(p + 8, &num, 10);
    if (num == p + 8 || nl - num < 9 || memcmp(num, ",\"epoch\":", 9)) break;
    (void)strtoll(num + 9, &num, 10);
    if (nl - num < 10 || memcmp(num, ",\"stage\":\"", 10)) break;
    num += 10;
    for (k = 0; k + 1 < sizeof stage && num + k < nl && num[k] != '"'; k++) stage[k] = num[k];
    stage[k] = 0;
    if (!tr__run_superseded(s->run, step, stage)) hk_bytes_put(b, p, (size_t)(nl + 1 - p));
  }
  if (p >= end) return 0;
  snprintf(why, cap, "%s is not a metrics.jsonl this logger wrote (line %s): the resumed run does not continue it, nor replace "
           "it; move it away, or resume with new_version_on_resume", s->path, first ? "1 is not its hparams" : "of a record");
  return EINVAL;
}

/* the first line: {"hparams": {...}}; a resume that continues its run takes the file back: the line
   anew, then the records up to the checkpoint */
static int tr__jsonl_open(tr__logger *s, hk_ctx *ctx, char *why, size_t cap) {
  tr__hparam *h;
  hk_bytes b, old;
  const char *spec;
  int i, n, e;
  memset(&old, 0, sizeof old);
  if ((e = tr__logger_file(s, "metrics.jsonl", &old, why, cap)) != 0) { hk_bytes_free(&old); return e; }
  if ((n = tr__run_hparams(s->run, &h)) < 0) { hk_bytes_free(&old); return ENOMEM; }
  memset(&b, 0, sizeof b);
  tr__put_s(&b, "{\"hparams\":{");
  for (i = 0; i < n; i++) { if (i) tr__put_s(&b, ","); tr__json_str(&b, h[i].key); tr__put_s(&b, ":"); if (h[i].num) tr__put_s(&b, h[i].val); else tr__json_str(&b, h[i].val); }
  tr__put_s(&b, n ? ",\"specs\":[" : "\"specs\":[");
  for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { if (i) tr__put_s(&b, ","); tr__json_str(&b, spec); }
  tr__put_s(&b, "]}}\n");
  free(h);
  e = old.len ? tr__jsonl_take_back(s, &old, &b, why, cap) : 0;
  hk_bytes_free(&old);
  if (!e) e = b.failed ? ENOMEM : tr__write_mine(s->path, b.data, b.len, &s->id, &s->fd, why, cap);
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
static const tr__log_format tr__jsonl_format = { "jsonl", "line", tr__jsonl_open, tr__jsonl_record, NULL, NULL, NULL, NULL, NULL };
static tr_err tr__jsonl_make(hk_registry *reg, const tr_logger_desc *d, hk_handle *out, tr__why *w) {
  return tr__logger_make(reg, &tr__jsonl_format, d, NULL, 0, out, w);
}
TR__LOGGER_OF(jsonl, jsonl, tr__jsonl_make)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
