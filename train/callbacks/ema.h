/* train/callbacks/ema.h - ema. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_EMA_H /* part */
#define TRAIN_EMA_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- ema (Lightning's EMAWeightAveraging; StochasticWeightAveraging as an option) ----------------
   avg = decay*avg + (1-decay)*params at on_after_optimizer_step (from start_step, every every_n_steps;
   the first copies), or with swa_epoch_start an equal-weight average at each epoch's end. The average is
   swapped in for validation, test and predict (the sanity check too) and back after; copy_at_end (default
   no) copies it into the model at the end. In checkpoints. On a device model it lives on the device (the
   same bits, no wait a step). Hand-written loop: on_after_optimizer_step with host ctx->params, the
   evaluation start/end events, on_train_epoch_end for SWA. docs/callbacks.md. */
#define TR_EMA_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(DOUBLE_ZERO, double, decay,      "0.999", NULL, "in (0, 1): avg = decay*avg + (1-decay)*params") \
  X(INT_ZERO, int64_t, every_n_steps,  "1",     NULL, "update every n optimizer steps") \
  X(INT,    int64_t, start_step,      "0",     NULL, "the first global_step that updates") \
  X(INT,    int64_t, swa_epoch_start, "0",     NULL, "> 0: SWA (an equal average per epoch) from this epoch (0-based) " \
    "instead of the EMA") \
  X(TRI,    int,     copy_at_end,     "false", NULL, "copy the average into the model at on_train_end") \
  X(TRI,    int,     swap_for_eval,   "true",  NULL, "use the average for validation, test and predict (false: never " \
    "swap; read the average with the getter)")
typedef struct tr_ema_desc { TR_EMA_PARAMS(TR__FIELD) } tr_ema_desc;
typedef struct tr_ema_state {
  int64_t n_averaged;           /* updates so far (0: no average yet) */
  const float *average;         /* count floats, the layout of ctx->params (NULL before the first update) */
  size_t count;
  int swapped;                  /* the average is in the model now */
  int on_device;                /* average is device memory (a model with tr_model.on_device) */
} tr_ema_state;
TRAIN_API tr_err tr_ema(hk_registry *reg, const tr_ema_desc *d, hk_handle *out);
TRAIN_API const tr_ema_state *tr_ema_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- ema ------------------------------------------------------------------------------------------ */
typedef struct tr__ema {
  tr_ema_state pub;
  double decay;
  int64_t every, start_step, swa_from;
  int copy_at_end, swap;
  float *avg;                   /* host memory: the average, or on a device model the checkpoints' copy of it */
  size_t count;
  int swapped;
  const tr__dev_ops *dev;       /* a device model: the seam to it (train/battery.h), its trainer's ctx, */
  hk_ctx *dev_ctx;              /* and the average on the device (count floats) */
  float *d_avg;
  int dirty;                    /* avg (host) holds a loaded average not yet on the device */
} tr__ema;

static void tr__ema_destroy(void *user) {
  tr__ema *s = (tr__ema *)user;
  free(s->avg);
  if (s->dev) s->dev->release(s->d_avg);
  free(s);
}
static void tr__ema_sync(tr__ema *s) {
  s->pub.average = s->pub.n_averaged ? (s->d_avg ? s->d_avg : s->avg) : NULL;
  s->pub.count = s->count;
  s->pub.swapped = s->swapped;
  s->pub.on_device = s->d_avg != NULL;
}
/* The buffer has ctx->params' layout (sized at first use or by a checkpoint); data checked where read. */
static int tr__ema_ready(tr__ema *s, hk_ctx *ctx) {
  size_t n = tr__views_count(ctx, ctx->params);
  const tr__dev_ops *dev;
  int where;
  if (!ctx->params || n == 0)
    return hk_fail(ctx, "the loop has no parameter views at %s: set ctx->params and ctx->n_tensors by then",
                   hk_event_name(ctx->reg, ctx->event)), -1;
  if ((where = tr__views_where(ctx, ctx->params, &dev)) < 0) return -1;
  if (s->avg && s->count != n)
    return hk_fail(ctx, "the average has %zu values but the model has %zu parameters (a checkpoint of another model?)", s->count, n), -1;
  if (!s->avg) {
    if (!(s->avg = (float *)calloc(n, sizeof(float)))) return hk_fail(ctx, "out of memory"), -1;
    s->count = n;
  }
  if (where == 1 && !s->d_avg) { /* the average moves to the device once; avg stays as its host copy */
    if (!(s->d_avg = dev->alloc(ctx, n))) return -1;
    s->dev = dev;
    s->dev_ctx = ctx;
    s->dirty = 1;
  }
  if (s->d_avg && s->dirty) { /* what a checkpoint loaded (or zeros) */
    if (s->dev->to_device(ctx, s->d_avg, s->avg, n * sizeof(float))) return -1;
    s->dirty = 0;
  }
  tr__ema_sync(s);
  return 0;
}
/* Sized at the start (parameters exist before training): allocated before the first step, and a resumed
   average of another model's size fails before a step is spent. */
static hk_signal tr__ema_train_start(hk_ctx *ctx, void *user) { return tr__ema_ready((tr__ema *)user, ctx) ? HK_FAIL : HK_CONTINUE; }

/* avg += w*(p - avg) over the views; w = 1 at the first update (a copy); trc_ema on a device. */
static int tr__ema_update(tr__ema *s, hk_ctx *ctx, double w) {
  float *a = s->d_avg ? s->d_avg : s->avg;
  int k;
  size_t i;
  if (s->pub.n_averaged == 0) w = 1.0;
  if (tr__views_data(ctx, ctx->params, "ctx->params")) return -1;
  for (k = 0; k < ctx->n_tensors; a += ctx->params[k].count, k++) {
    const float *p = ctx->params[k].data;
    if (s->d_avg) { if (s->dev->average(ctx, a, p, ctx->params[k].count, w)) return -1; continue; }
    for (i = 0; i < ctx->params[k].count; i++) a[i] = (float)((double)a[i] + w * ((double)p[i] - (double)a[i]));
  }
  s->pub.n_averaged++;
  tr__ema_sync(s);
  return 0;
}
static hk_signal tr__ema_step(hk_ctx *ctx, void *user) {
  tr__ema *s = (tr__ema *)user;
  if (s->swa_from > 0 || ctx->global_step < s->start_step || ctx->global_step % s->every != 0) return HK_CONTINUE;
  if (!s->avg && tr__ema_ready(s, ctx)) return HK_FAIL;
  return tr__ema_update(s, ctx, 1.0 - s->decay) ? HK_FAIL : HK_CONTINUE; /* d*avg + (1-d)*p */
}
static hk_signal tr__ema_epoch_end(hk_ctx *ctx, void *user) {
  tr__ema *s = (tr__ema *)user;
  if (s->swa_from <= 0 || ctx->epoch < s->swa_from || ctx->stage != HK_STAGE_FIT) return HK_CONTINUE;
  if (!s->avg && tr__ema_ready(s, ctx)) return HK_FAIL;
  return tr__ema_update(s, ctx, 1.0 / (double)(s->pub.n_averaged + 1)) ? HK_FAIL : HK_CONTINUE;
}
static int tr__ema_exchange(tr__ema *s, hk_ctx *ctx) {
  float *a = s->d_avg ? s->d_avg : s->avg;
  int k;
  size_t i;
  for (k = 0; k < ctx->n_tensors; a += ctx->params[k].count, k++) {
    float *p = ctx->params[k].data;
    if (s->d_avg) { if (s->dev->swap(ctx, p, a, ctx->params[k].count)) return -1; continue; }
    for (i = 0; i < ctx->params[k].count; i++) { float x = p[i]; p[i] = a[i]; a[i] = x; }
  }
  s->swapped = !s->swapped;
  tr__ema_sync(s);
  return 0;
}
static hk_signal tr__ema_eval_start(hk_ctx *ctx, void *user) {
  tr__ema *s = (tr__ema *)user;
  if (!s->swap || s->swapped || s->pub.n_averaged == 0) return HK_CONTINUE;
  if (tr__ema_ready(s, ctx)) return HK_FAIL;
  return tr__ema_exchange(s, ctx) ? HK_FAIL : HK_CONTINUE;
}
static hk_signal tr__ema_eval_end(hk_ctx *ctx, void *user) {
  tr__ema *s = (tr__ema *)user;
  return s->swapped && tr__ema_exchange(s, ctx) ? HK_FAIL : HK_CONTINUE;
}
static hk_signal tr__ema_train_end(hk_ctx *ctx, void *user) {
  tr__ema *s = (tr__ema *)user;
  int k;
  const float *a;
  if (!s->copy_at_end || s->pub.n_averaged == 0 || s->swapped || tr__ema_ready(s, ctx)) return HK_CONTINUE;
  a = s->d_avg ? s->d_avg : s->avg; /* (ready may have just put it on the device) */
  for (k = 0; k < ctx->n_tensors; a += ctx->params[k].count, k++) {
    if (s->d_avg) { if (s->dev->copy(ctx, ctx->params[k].data, a, ctx->params[k].count)) return HK_FAIL; }
    else memcpy(ctx->params[k].data, a, ctx->params[k].count * sizeof(float));
  }
  return HK_CONTINUE;
}
/* The average as it is outside evaluations: while swapped, the model holds it and avg the trained weights. */
static int tr__ema_save(void *user, hk_bytes *out) {
  tr__ema *s = (tr__ema *)user;
  size_t i;
  tr__put_u64(out, 1);
  tr__put_i64(out, s->pub.n_averaged);
  tr__put_u64(out, s->pub.n_averaged ? s->count : 0);
  if (s->swapped) return -1; /* a checkpoint from inside an evaluation would store the wrong buffer */
  if (s->d_avg && s->pub.n_averaged && !s->dirty && s->dev->to_host(s->dev_ctx, s->avg, s->d_avg, s->count * sizeof(float)))
    return -1; /* (its hk_fail names the CUDA error) */
  for (i = 0; s->pub.n_averaged && i < s->count; i++) {
    unsigned char x[4];
    uint32_t u;
    memcpy(&u, &s->avg[i], 4);
    tr__le(x, u, 4);
    hk_bytes_put(out, x, 4);
  }
  return out->failed ? -1 : 0;
}
static int tr__ema_load(void *user, hk_reader *in) {
  tr__ema *s = (tr__ema *)user;
  uint64_t n = 0;
  int64_t averaged = 0;
  float *buf = NULL;
  size_t i;
  if (tr__get_version(in, 1) || tr__get_count(in, "n_averaged", 0, &averaged)) return -1;
  if (tr__get_u64(in, &n)) return hk_reject(in, "truncated at the average's size");
  if ((averaged > 0) != (n > 0))
    return hk_reject(in, "n_averaged is %lld but the average holds %llu values (both zero or both not)", (long long)averaged, (unsigned long long)n);
  if (n > (in->len - in->pos) / 4 || (in->len - in->pos) != n * 4)
    return hk_reject(in, "the average should hold %llu values, and %zu bytes follow", (unsigned long long)n, in->len - in->pos);
  if (s->swapped) return hk_reject(in, "the average is swapped into the model (inside a validation): load it outside one");
  if (s->avg && n && n != s->count)
    return hk_reject(in, "the average holds %llu values, this model %zu (a checkpoint of another model?)", (unsigned long long)n, s->count);
  if (n && !(buf = (float *)malloc((size_t)n * sizeof(float)))) return hk_reject(in, "out of memory for %llu values", (unsigned long long)n);
  for (i = 0; i < n; i++) {
    unsigned char x[4];
    uint32_t u;
    if (hk_read(in, x, 4)) { free(buf); return -1; }
    u = (uint32_t)tr__get(x, 4);
    memcpy(&buf[i], &u, 4);
  }
  if (buf) { free(s->avg); s->avg = buf; s->count = (size_t)n; }
  else if (s->avg) memset(s->avg, 0, s->count * sizeof(float));
  if (s->d_avg) { /* to the device now if its trainer's queue takes it, else at the next ready */
    s->dirty = 1;
    if (s->avg && !s->dev->to_device(s->dev_ctx, s->d_avg, s->avg, s->count * sizeof(float))) s->dirty = 0;
  }
  s->pub.n_averaged = averaged;
  tr__ema_sync(s);
  return 0;
}
static tr_err tr__ema_make(hk_registry *reg, const tr_ema_desc *d, hk_handle *out, tr__why *w) {
  tr__ema *s;
  hk_callback cb;
  double decay;
  int64_t every;
  if (!d) return tr__bad(w, "ema: desc is NULL");
  decay = tr__zero_double(d->decay, 0.999);
  every = tr__zero_int64(d->every_n_steps, 1);
  if (!hk_is_finite(decay) || decay <= 0 || decay >= 1) return tr__bad(w, "ema: decay must be in (0, 1), got %g", decay);
  if (every < 1) return tr__bad(w, "ema: every_n_steps must be >= 1, got %lld", (long long)every);
  if (d->start_step < 0) return tr__bad(w, "ema: start_step must be >= 0, got %lld", (long long)d->start_step);
  if (d->swa_epoch_start < 0) return tr__bad(w, "ema: swa_epoch_start must be >= 0 (0 = EMA, > 0 = SWA from that epoch), got %lld", (long long)d->swa_epoch_start);
  if (d->swa_epoch_start > 0 && (d->decay != 0 || d->every_n_steps != 0 || d->start_step != 0))
    return tr__bad(w, "ema: swa_epoch_start (SWA: an equal average per epoch) does not take decay, every_n_steps or start_step");
  s = (tr__ema *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "ema: out of memory"), TR_ERR_NOMEM;
  s->decay = decay;
  s->every = every;
  s->start_step = d->start_step;
  s->swa_from = d->swa_epoch_start;
  s->copy_at_end = tr__flag(d->copy_at_end, 0);
  s->swap = tr__flag(d->swap_for_eval, 1);
  memset(&cb, 0, sizeof cb);
  cb.name = "ema";
  cb.user = s;
  cb.on_train_start = tr__ema_train_start;
  if (s->swa_from > 0) cb.on_train_epoch_end = tr__ema_epoch_end;
  else cb.on_after_optimizer_step = tr__ema_step;
  cb.on_validation_start = cb.on_test_start = cb.on_predict_start = tr__ema_eval_start;
  cb.on_validation_end = cb.on_test_end = cb.on_predict_end = tr__ema_eval_end;
  cb.on_train_end = tr__ema_train_end;
  cb.teardown = tr__ema_eval_end; /* a run that failed inside an evaluation gets its trained weights back */
  cb.save_state = tr__ema_save;
  cb.load_state = tr__ema_load;
  cb.destroy = tr__ema_destroy;
  return tr__cb_register(reg, &cb, -20, out, w); /* first at on_train_epoch_end, so SWA averages before checkpoints are asked for */
}
TR__PUBLIC_OF(tr_ema, ema)
TR__FACTORY_OF(ema, tr_ema_desc, TR_EMA_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
