/* train/loggers/tensorboard.h - tensorboard. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_TENSORBOARD_H /* part */
#define TRAIN_TENSORBOARD_H /* part */
#include "file_loggers.h" /* part */

TR__C_BEGIN /* part */
/* tensorboard: events.out.tfevents.<secs>.<host>.<pid>.0, TFRecord-framed Event protos with real
   CRC-32C: a file_version event, the hparams as a text summary (tag "hparams", a Markdown table),
   then per record one event holding every metric as a scalar (tag = the metric's name) and every
   histogram. Look at it with  tensorboard --logdir <save_dir>. A resume that continues its run starts a
   new file in the run's directory, named to be read after the others, whose SessionLog START event at
   the checkpoint's global step makes TensorBoard drop what the earlier files hold from that step on
   (its purge of orphaned data): each step is shown once. */
TRAIN_API tr_err tr_tensorboard_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
#if defined(TR__POSIX) && !defined(__cplusplus)
extern int gethostname(char *name, size_t len); /* strict C99 headers hide it */
#endif
typedef struct tr__tb { hk_bytes scratch, vals, tmp; int session_ended; } tr__tb; /* an event, its summary values, one value (reused); the fit's end written */

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
  tr__tb *t = (tr__tb *)s->own;
  t->scratch.len = 0;
  tr__pb_f64(&t->scratch, 1, tr__wall());
  tr__pb_key(&t->scratch, 2, 0);
  tr__pb_varint(&t->scratch, (uint64_t)step);
  tr__pb_bytes(&t->scratch, 5, vals->data, vals->len);
  if (t->scratch.failed) s->out.failed = 1;
  tr__tf_record(&s->out, &t->scratch);
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

/* TFRecords: 8 bytes of length, 4 of CRC, the data, 4 of CRC */
static size_t tr__tb_whole(const tr__logger *s, size_t n, int *count) {
  size_t at = 0;
  *count = 0;
  while (at + 12 <= n) {
    uint64_t len = tr__get(s->out.data + at, 8);
    if (len > n - at - 12 || n - at - 12 - len < 4) break;
    at += 16 + (size_t)len;
    ++*count;
  }
  return at;
}
/* -- a resume that continues its run: what TensorBoard shows at the purge step, read back -- */
static int tr__pb_read_varint(const unsigned char *p, size_t n, size_t *at, uint64_t *v) {
  int shift;
  *v = 0;
  for (shift = 0; *at < n && shift < 64; shift += 7) {
    unsigned char c = p[(*at)++];
    *v |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) return 0;
  }
  return -1;
}
/* The next field of a message (p, n) at *at: its number; a varint's value in *v, a length-delimited
   field's bytes in *b, *blen (*b NULL for the fixed-size ones, skipped). 0, or -1 at its end or on bad bytes. */
static int tr__pb_field(const unsigned char *p, size_t n, size_t *at, int *field, uint64_t *v, const unsigned char **b, size_t *blen) {
  uint64_t key;
  *b = NULL;
  if (*at >= n || tr__pb_read_varint(p, n, at, &key)) return -1;
  *field = (int)(key >> 3);
  switch (key & 7) {
  case 0: return tr__pb_read_varint(p, n, at, v);
  case 1: if (n - *at < 8) return -1; *at += 8; return 0;
  case 5: if (n - *at < 4) return -1; *at += 4; return 0;
  case 2:
    if (tr__pb_read_varint(p, n, at, v) || *v > n - *at) return -1;
    *b = p + *at;
    *blen = (size_t)*v;
    *at += *blen;
    return 0;
  default: return -1;
  }
}
/* An Event's step, and what it is: 1 a SessionLog START, 2 a record's summary (*stage from its tags: val
   with a val/ one, test with a test/ one, else train), 0 anything else (file_version, the hparams' own). */
static int tr__tb_event_kind(const unsigned char *e, size_t n, int64_t *step, const char **stage) {
  size_t at = 0, vat, tat;
  int field, kind = 0, f;
  uint64_t v;
  const unsigned char *b, *vb, *tb;
  size_t blen, vlen, tlen;
  *step = 0;
  *stage = "train";
  while (tr__pb_field(e, n, &at, &field, &v, &b, &blen) == 0) {
    if (field == 2 && !b) *step = (int64_t)v;
    else if (field == 7 && b) { /* SessionLog{status = 1} */
      size_t sat = 0;
      while (tr__pb_field(b, blen, &sat, &f, &v, &vb, &vlen) == 0) if (f == 1 && !vb && v == 1) kind = 1;
    } else if (field == 5 && b) { /* Summary{value: Value{tag}} */
      kind = 2;
      for (vat = 0; tr__pb_field(b, blen, &vat, &f, &v, &vb, &vlen) == 0;) {
        int g;
        for (tat = 0; f == 1 && vb && tr__pb_field(vb, vlen, &tat, &g, &v, &tb, &tlen) == 0;) {
          if (g != 1 || !tb) continue;
          if ((tlen >= 10 && !memcmp(tb, "_hparams_/", 10)) || (tlen == 7 && !memcmp(tb, "hparams", 7))) return 0;
          if (tlen >= 4 && !memcmp(tb, "val/", 4)) *stage = "val";
          else if (tlen >= 5 && !memcmp(tb, "test/", 5) && strcmp(*stage, "val")) *stage = "test";
          break;
        }
      }
    }
  }
  return kind;
}
/* The records TensorBoard shows now at step `purge` that were written before the checkpoint
   (tr__run_superseded), from the directory's event files read in name order as TensorBoard reads them
   (a START at or below that step drops what came before), appended to out as TFRecords: the new file
   states them again after its START at that step. 0, or ENOMEM. */
static int tr__tb_kept_at(const tr__logger *s, int64_t purge, hk_bytes *out) {
  char **names, *path;
  int i, n = tr__dir_names(s->dir, "events.out.tfevents.", &names), e = n < 0 ? ENOMEM : 0;
  for (i = 0; i < n; i++) {
    hk_bytes file;
    tr__file_id id = { 0, 0, 0 };
    size_t at = 0;
    memset(&file, 0, sizeof file);
    if (!e && (path = tr__join(s->dir, names[i])) != NULL) {
      if (tr__read_mine(path, &file, &id) == ENOMEM) e = ENOMEM;
      free(path);
    }
    while (!e && file.len - at >= 16 && tr__get(file.data + at, 8) <= file.len - at - 16) {
      size_t len = (size_t)tr__get(file.data + at, 8);
      hk_bytes event;
      int64_t step;
      const char *stage;
      int kind = tr__tb_event_kind(file.data + at + 12, len, &step, &stage);
      if (kind == 1 && step <= purge) out->len = 0;
      else if (kind == 2 && step == purge && !tr__run_superseded(s->run, step, stage)) {
        event.data = file.data + at + 12;
        event.len = len;
        tr__tf_record(out, &event);
      }
      at += 16 + len;
    }
    hk_bytes_free(&file);
    free(names[i]);
  }
  free(names);
  return e ? e : out->failed ? ENOMEM : 0;
}

/* Event{wall_time, step, session_log{status START}}. TensorBoard drops the events it has read with a step
   at or above a START's, but takes the first START of a run as its beginning (the plugins' reader): a
   resumed run's file writes it twice, so that a run whose earlier files hold none is purged too. */
static void tr__tf_session_start(tr__logger *s, int64_t step) {
  tr__tb *t = (tr__tb *)s->own;
  static const unsigned char start[] = { 0x08, 0x01 }; /* SessionLog.status = START */
  int i;
  for (i = 0; i < 2; i++) {
    t->scratch.len = 0;
    tr__pb_f64(&t->scratch, 1, tr__wall());
    tr__pb_key(&t->scratch, 2, 0);
    tr__pb_varint(&t->scratch, (uint64_t)step);
    tr__pb_bytes(&t->scratch, 7, start, sizeof start);
    if (t->scratch.failed) s->out.failed = 1;
    tr__tf_record(&s->out, &t->scratch);
  }
}

/* events.out.tfevents.<secs>.<host>.<pid>.<k> (two in one second and process get .1, .2 ...): a
   file_version event, the hparams as a Markdown table for the text plugin and for the HParams tab. A
   resume that continues its run: TensorBoard reads a directory's files in the order of their names,
   so <secs> is after every earlier file's (a second on when the clock is not); the START events at the
   step of the checkpoint's last records (tr__tf_session_start: Lightning's step, global_step - 1),
   those of its records written before the checkpoint again (tr__tb_kept_at), and the hparams only
   when the purge takes the first file's (a purge at step 0) */
static int tr__tb_open(tr__logger *s, hk_ctx *ctx, char *why, size_t cap) {
  tr__tb *t = (tr__tb *)s->own;
  char host[64] = "localhost", file[160];
  long pid = 0;
  int k, n, e, i;
  long long secs = (long long)time(NULL), last;
  int64_t purge = s->continued && s->run->tr__p->cont_step > 0 ? s->run->tr__p->cont_step - 1 : 0;
  tr__hparam *h;
  const char *spec;
  hk_bytes b, vals;
#ifdef TR__POSIX
  if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = 0;
  pid = (long)getpid();
#endif
  if (s->continued && (last = (long long)tr__dir_max_number(s->dir, "events.out.tfevents.")) >= secs) secs = last + 1;
  for (k = 0; k < 1000; k++) { /* a name nothing has (tr__logger_file refuses one that exists) */
    snprintf(file, sizeof file, "events.out.tfevents.%010lld.%s.%ld.%d", secs, host, pid, k);
    free(s->path);
    if ((e = tr__logger_file(s, file, NULL, why, cap)) == 0) break;
    if (e != EEXIST || k == 999) return e;
  }
  if ((n = tr__run_hparams(s->run, &h)) < 0) return ENOMEM;
  memset(&b, 0, sizeof b);
  memset(&vals, 0, sizeof vals);
  tr__put_s(&b, "| hparam | value |\n|---|---|\n");
  for (i = 0; i < n; i++) tr__putf(&b, "| %s | %s |\n", h[i].key, h[i].val);
  for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { tr__put_s(&b, "| spec | `"); tr__utf8_put(&b, spec); tr__put_s(&b, "` |\n"); }
  hk_bytes_put(&b, "", 1); /* a C string */
  t->scratch.len = 0;
  tr__pb_f64(&t->scratch, 1, tr__wall());
  tr__pb_str(&t->scratch, 3, "brain.Event:2");
  tr__tf_record(&s->out, &t->scratch);
  if (s->continued) {
    hk_bytes kept;
    memset(&kept, 0, sizeof kept);
    tr__tf_session_start(s, purge);
    e = tr__tb_kept_at(s, purge, &kept);
    hk_bytes_put(&s->out, kept.data, kept.len);
    hk_bytes_free(&kept);
  }
  if (!e && (!s->continued || purge == 0)) {
    tr__tf_text(&vals, "hparams", (const char *)b.data);
    tr__tf_hparams_start(&vals, h, n, tr__wall());
    tr__tf_event(s, 0, &vals);
  }
  free(h);
  if (vals.failed || b.failed) s->out.failed = 1;
  hk_bytes_free(&vals);
  hk_bytes_free(&b);
  if (s->out.failed) e = ENOMEM;
  else if ((e = tr__write_mine(s->path, s->out.data, s->out.len, &s->id, &s->fd, why, cap)) == 0) s->size = (int64_t)s->out.len;
  s->out.len = 0;
  return e;
}
static hk_signal tr__tb_record(tr__logger *s, hk_ctx *ctx, const tr_log_record *r) {
  tr__tb *t = (tr__tb *)s->own;
  int i;
  (void)ctx;
  t->vals.len = 0;
  for (i = 0; i < r->n_metrics; i++) tr__tf_scalar(&t->vals, &t->tmp, r->metrics[i].name, r->metrics[i].value);
  for (i = 0; i < r->n_histograms; i++) tr__tf_histogram(&t->vals, &t->tmp, &r->histograms[i]);
  if (t->vals.failed) s->out.failed = 1;
  if (t->vals.len) tr__tf_event(s, r->step, &t->vals);
  ++s->pending;
  return HK_CONTINUE;
}
/* the fit's status for the HParams tab (the plugin reads a run's first one) */
static hk_signal tr__tb_teardown(tr__logger *s, hk_ctx *ctx) {
  tr__tb *t = (tr__tb *)s->own;
  if (ctx->stage == HK_STAGE_FIT && !t->session_ended && s->opened && !s->broken) {
    t->session_ended = 1;
    t->vals.len = 0;
    tr__tf_hparams_end(&t->vals, s->run && s->run->failed, tr__wall());
    tr__tf_event(s, ctx->global_step, &t->vals);
    s->pending++;
  }
  return HK_CONTINUE;
}
static void tr__tb_destroy(void *own) {
  tr__tb *t = (tr__tb *)own;
  if (!t) return;
  hk_bytes_free(&t->scratch); hk_bytes_free(&t->vals); hk_bytes_free(&t->tmp);
  free(t);
}
static const tr__log_format tr__tb_format = { "tensorboard", "record", tr__tb_open, tr__tb_record, NULL, tr__tb_whole, tr__tb_teardown, tr__tb_destroy, NULL };
static tr_err tr__tb_make(hk_registry *reg, const tr_logger_desc *d, hk_handle *out, tr__why *w) {
  tr__tb *t = (tr__tb *)calloc(1, sizeof *t);
  return tr__logger_make(reg, &tr__tb_format, d, t, !t, out, w);
}
TR__LOGGER_OF(tensorboard, tb, tr__tb_make)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
