/* train/callbacks/accumulation_scheduler.h - accumulation_scheduler. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_ACCUMULATION_SCHEDULER_H /* part */
#define TRAIN_ACCUMULATION_SCHEDULER_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- accumulation_scheduler (Lightning's GradientAccumulationScheduler) --------------------------
   scheduling "{0: 4, 5: 2}" (epoch: factor pairs separated by commas, braces both or neither, epochs
   0-based and increasing, factors >= 1; anything else, "{0: 2" or "{0:2 1:3}", is refused): from
   epoch 0 accumulate 4 micro-batches per step, from epoch 5 on 2; an epoch before the first key gets
   1 (Lightning adds {0: 1}). Set through tr_set_accumulation at on_train_start (a resumed run gets
   its epoch's factor) and at every on_train_epoch_start. A fit whose tr_config.accumulate_grad_batches
   is not 1 fails at on_fit_start (Lightning refuses the combination too). The last window of an epoch
   steps even when short (train.h and Lightning alike). Hand-written loop: fire those events and read
   the factor from tr_accumulation_scheduler_get(...)->factor. */
#define TR_ACCUMULATION_SCHEDULER_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING, const char *, scheduling, NULL, NULL, "required: epoch: factor, e.g. \"{0: 4, 5: 2}\"")
typedef struct tr_accumulation_scheduler_desc { TR_ACCUMULATION_SCHEDULER_PARAMS(TR__FIELD) } tr_accumulation_scheduler_desc;
typedef struct tr_accumulation_scheduler_state {
  int n;                        /* entries */
  const int64_t *epochs;
  const int *factors;
  int factor;                   /* the factor set last (1 before) */
} tr_accumulation_scheduler_state;
TRAIN_API tr_err tr_accumulation_scheduler(hk_registry *reg, const tr_accumulation_scheduler_desc *d, hk_handle *out);
TRAIN_API const tr_accumulation_scheduler_state *tr_accumulation_scheduler_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- accumulation_scheduler ----------------------------------------------------------------------- */
#define TR__AS_MAX 64
typedef struct tr__as {
  tr_accumulation_scheduler_state pub;
  tr_run *run;          /* the registry's run: what the loop says (train/run.h) */
  int n;
  int64_t epochs[TR__AS_MAX];
  int factors[TR__AS_MAX];
} tr__as;
static void tr__as_destroy(void *user) { free(user); }

/* "{0: 4, 5: 2}" -> increasing epochs, factors >= 1; -1 with the reason in w. The grammar is strict:
   [ "{" ] entry { "," entry } [ "," ] [ "}" ], braces both or neither, spaces anywhere between tokens;
   entry = epoch ":" factor (decimal digits). "{0: 2" and "{0:2 1:3}" are refused, not guessed at. */
static int tr__as_parse(tr__as *s, const char *text, tr__why *w) {
  static const char *const form = "valid: a schedule like \"{0: 4, 5: 2}\" (epoch: factor pairs separated by commas, "
                                  "epochs 0-based and increasing, factors >= 1, braces optional)";
  const char *p = text;
  int braced;
#define TR__AS_BAD(...) do { char what_[200]; snprintf(what_, sizeof what_, __VA_ARGS__); \
    return tr__bad(w, "accumulation_scheduler: scheduling '%s': %s; %s", text, what_, form), -1; } while (0)
#define TR__AS_SPACE() while (*p == ' ' || *p == '\t') p++
  TR__AS_SPACE();
  braced = *p == '{';
  if (braced) p++;
  for (;;) {
    long long v[2];
    int k;
    TR__AS_SPACE();
    if (braced && *p == '}' && s->n > 0) break; /* "{0: 2,}" as a Python dict allows */
    for (k = 0; k < 2; k++) {
      const char *at;
      v[k] = 0;
      if (k) { TR__AS_SPACE(); }
      at = p;
      if (*p < '0' || *p > '9') {
        if (!*p) TR__AS_BAD("it ends where %s was expected", k ? "a factor" : "an epoch");
        TR__AS_BAD("'%c' at position %d where %s was expected", *p, (int)(p - text), k ? "a factor" : "an epoch");
      }
      while (*p >= '0' && *p <= '9') {
        if (v[k] > 10000000000000LL) TR__AS_BAD("the number at position %d is too large", (int)(at - text));
        v[k] = v[k] * 10 + (*p++ - '0');
      }
      TR__AS_SPACE();
      if (!k && *p++ != ':') TR__AS_BAD("epoch %lld is not followed by ':'", v[0]);
    }
    if (v[0] > ((int64_t)1 << 40)) TR__AS_BAD("epoch %lld is too large (at most 2^40)", v[0]);
    if (v[1] < 1 || v[1] > 1000000) return tr__bad(w, "accumulation_scheduler: the factor for epoch %lld must be in 1..1000000, got %lld", v[0], v[1]), -1;
    if (s->n && v[0] <= s->epochs[s->n - 1])
      return tr__bad(w, "accumulation_scheduler: epochs must increase (%lld after %lld) in '%s'", v[0], (long long)s->epochs[s->n - 1], text), -1;
    if (s->n == TR__AS_MAX) return tr__bad(w, "accumulation_scheduler: at most %d entries", TR__AS_MAX), -1;
    s->epochs[s->n] = v[0];
    s->factors[s->n++] = (int)v[1];
    if (*p == ',') { p++; continue; }
    if (braced && *p == '}') break;
    if (!*p && !braced) return 0;
    if (!*p) TR__AS_BAD("the closing '}' is missing");
    if (*p >= '0' && *p <= '9') TR__AS_BAD("a ',' is missing before position %d", (int)(p - text));
    TR__AS_BAD("'%c' at position %d where ','%s was expected", *p, (int)(p - text), braced ? " or '}'" : "");
  }
  p++; /* the '}' */
  TR__AS_SPACE();
  if (*p) TR__AS_BAD("'%c' at position %d after the closing '}'", *p, (int)(p - text));
  return 0;
#undef TR__AS_BAD
#undef TR__AS_SPACE
}
static int tr__as_factor(const tr__as *s, int64_t epoch) {
  int i, f = 1; /* before the first key: 1 (Lightning adds {0: 1}) */
  for (i = 0; i < s->n && s->epochs[i] <= epoch; i++) f = s->factors[i];
  return f;
}
static hk_signal tr__as_apply(hk_ctx *ctx, void *user) {
  tr__as *s = (tr__as *)user;
  tr_run *run = s->run;
  s->pub.factor = tr__as_factor(s, ctx->epoch);
  if (run) run->accumulation = s->pub.factor; /* the loop takes it as its next window begins */
  return HK_CONTINUE;
}
static hk_signal tr__as_fit_start(hk_ctx *ctx, void *user) {
  tr__as *s = (tr__as *)user;
  tr_run *run = s->run;
  if (run && run->desc.accumulate_grad_batches > 1)
    return hk_fail(ctx, "the loop's accumulate_grad_batches is %d (tr_config's; tr_run_desc's in a loop of your own); "
                   "leave it at 0 or 1 when the scheduler sets the factor", run->desc.accumulate_grad_batches);
  return HK_CONTINUE;
}
static tr_err tr__as_make(hk_registry *reg, const tr_accumulation_scheduler_desc *d, hk_handle *out, tr__why *w) {
  tr__as *s;
  hk_callback cb;
  if (!d || !d->scheduling || !d->scheduling[0]) return tr__bad(w, "accumulation_scheduler: scheduling is required, e.g. \"{0: 4, 5: 2}\"");
  s = (tr__as *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "accumulation_scheduler: out of memory"), TR_ERR_NOMEM;
  if (tr__as_parse(s, d->scheduling, w)) { free(s); return TR_ERR_INVALID; }
  s->run = tr_run_get(reg);
  s->pub.n = s->n;
  s->pub.epochs = s->epochs;
  s->pub.factors = s->factors;
  s->pub.factor = 1;
  memset(&cb, 0, sizeof cb);
  cb.name = "accumulation_scheduler";
  cb.user = s;
  cb.on_fit_start = tr__as_fit_start;
  cb.on_train_start = tr__as_apply;
  cb.on_train_epoch_start = tr__as_apply;
  cb.destroy = tr__as_destroy;
  return tr__cb_register(reg, &cb, 0, out, w);
}
TR__PUBLIC_OF(tr_accumulation_scheduler, as)
TR__FACTORY_OF(as, tr_accumulation_scheduler_desc, TR_ACCUMULATION_SCHEDULER_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
