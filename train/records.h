/* train/records.h - log records: what a loop sends the loggers (metrics, histograms) and the hyperparameters they record. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_RECORDS_H /* part */
#define TRAIN_RECORDS_H /* part */
#include "files.h" /* part */

TR__C_BEGIN /* part */
/* =================================================================================================
   LOGGERS AND PROGRESS BAR
   Logging is an event: a record (step, epoch, stage, the metrics due) is built and on_log fired with
   ctx->outputs at it; hooks change it there, then the loggers (monitoring callbacks, run last) write it.
   Records, in Lightning's rhythm: "train" every log_every_n_steps-th optimizer step (a batch that did not
   step logs nothing; train/loss and every metric but val/, test/ and the lazy lr and grad_norm: a hook
   adds grad_norm at on_log with tr_log_set), "val" after every validation of a fit (not the sanity
   check), "test" after a test, and "train" at once on HK_REQUEST_LOG. step is the optimizer steps before
   the record's batch (Lightning's: the 50th logs 49). Rank 0 writes; every file whole through the atomic
   writer, logs appended to its descriptor; an I/O error stops that logger alone (fail_on_error: the
   run). docs/logging.md has it all, a loop of your own included.
   ================================================================================================= */
#ifndef TR_LOG_MAX_HISTOGRAMS
#  define TR_LOG_MAX_HISTOGRAMS 16  /* histograms riding with one record; more are refused (an error, not a drop) */
#endif
#ifndef TR_LOG_NAME_MAX
#  define TR_LOG_NAME_MAX 64        /* a histogram tag's bytes, its NUL included (metric names have no limit) */
#endif
#define TR_LOG_HIST_BUCKETS 30      /* the most buckets a histogram keeps (tr_log_histogram uses all) */

/* Any number of metrics, names of any length (tr_log_set grows the storage, then reuses it), valid UTF-8
   only: the trainer reports another once instead of logging it. */
typedef struct tr_log_metric {
  const char *name;             /* the record's own copy */
  double value;
  size_t tr__cap;               /* private: the bytes allocated for name */
} tr_log_metric;
typedef struct tr_log_histogram_data {
  char tag[TR_LOG_NAME_MAX];
  double min, max, num, sum, sum_squares;
  int n_buckets;
  double limit[TR_LOG_HIST_BUCKETS];  /* right edge of each bucket (TensorBoard's bucket_limit) */
  double count[TR_LOG_HIST_BUCKETS];
} tr_log_histogram_data;

typedef struct tr_log_record {
  int64_t step;                 /* Lightning's step (see above) */
  int64_t epoch;
  const char *stage;            /* "train", "val" or "test" */
  int n_metrics;                /* in the order they were added */
  tr_log_metric *metrics;       /* n_metrics of them (tr_log_set's storage) */
  int n_histograms;
  tr_log_histogram_data histograms[TR_LOG_MAX_HISTOGRAMS];
  int tr__cap;                  /* private: metrics allocated (their names are kept for reuse) */
  int *tr__idx;                 /* private: the name index, tr__idx_cap slots of metric + 1 (0: empty) */
  int tr__idx_cap, tr__idx_n;   /* private: its slots (a power of two) and the metrics it holds */
} tr_log_record;

/* The record being logged, at on_log (NULL at any other event). */
TRAIN_API tr_log_record *tr_log_current(hk_ctx *ctx);
/* Add or change a metric: TR_ERR_INVALID for a NULL, empty or non-UTF-8 name, TR_ERR_NOMEM. Your own
   loop's record: zero it once, n_metrics = 0 (and n_histograms) between records, tr_log_record_free. */
TRAIN_API tr_err tr_log_set(tr_log_record *r, const char *name, double value);
TRAIN_API void tr_log_record_free(tr_log_record *r); /* its storage; the record is empty (zero) after */
TRAIN_API int tr_log_get(const tr_log_record *r, const char *name, double *value); /* 1 if present */
TRAIN_API int tr_log_drop(tr_log_record *r, const char *name);                     /* 1 if it was there */
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
TRAIN_API tr_log_record *tr_log_current(hk_ctx *ctx) {
  return ctx && ctx->event == HK_ON_LOG ? (tr_log_record *)ctx->outputs : NULL;
}
/* The name index: linear probing on FNV-1a, slots holding position + 1, so tr_log_set costs the same at
   10 metrics or 10,000 (a list search cost ~26 k instructions a value at 1,000). Not stb_ds: it may not
   be compiled here (TRAIN_HOOKS_ELSEWHERE) and it aborts out of memory. A slot counts only below
   n_metrics at the same name; a loop that cut n_metrics gets the index rebuilt. */
static uint32_t tr__log_hash(const char *name) {
  uint32_t h = 2166136261u;
  for (; *name; name++) h = (h ^ (unsigned char)*name) * 16777619u;
  return h;
}
static int tr__log_find(const tr_log_record *r, const char *name) {
  uint32_t mask, k;
  if (!r->tr__idx) return -1;
  mask = (uint32_t)r->tr__idx_cap - 1;
  for (k = tr__log_hash(name) & mask; r->tr__idx[k]; k = (k + 1) & mask) {
    int i = r->tr__idx[k] - 1;
    if (i < r->n_metrics && !strcmp(r->metrics[i].name, name)) return i;
  }
  return -1;
}
static void tr__log_index_put(tr_log_record *r, int i) {
  uint32_t mask = (uint32_t)r->tr__idx_cap - 1, k = tr__log_hash(r->metrics[i].name) & mask;
  while (r->tr__idx[k]) k = (k + 1) & mask;
  r->tr__idx[k] = i + 1;
  r->tr__idx_n++;
}
/* The index of metrics [0, n_metrics), at most half full with `want` of them. */
static tr_err tr__log_index(tr_log_record *r, int want) {
  int i, cap = r->tr__idx_cap ? r->tr__idx_cap : 64;
  while (cap < 2 * want) cap *= 2;
  if (cap != r->tr__idx_cap) {
    int *p = (int *)realloc(r->tr__idx, (size_t)cap * sizeof *p);
    if (!p) return TR_ERR_NOMEM;
    r->tr__idx = p;
    r->tr__idx_cap = cap;
  }
  memset(r->tr__idx, 0, (size_t)r->tr__idx_cap * sizeof *r->tr__idx);
  r->tr__idx_n = 0;
  for (i = 0; i < r->n_metrics; i++) tr__log_index_put(r, i);
  return TR_OK;
}

TRAIN_API tr_err tr_log_set(tr_log_record *r, const char *name, double value) {
  int i;
  size_t len = name ? strlen(name) : 0;
  if (!r || len == 0 || !tr__utf8_ok(name)) return TR_ERR_INVALID;
  if (!r->tr__idx || r->tr__idx_n != r->n_metrics || 2 * (r->n_metrics + 1) > r->tr__idx_cap) {
    tr_err e = tr__log_index(r, r->n_metrics + 1); /* the first, a new record (n_metrics cut), or full */
    if (e) return e;
  }
  if ((i = tr__log_find(r, name)) < 0) {
    tr_log_metric *m;
    if (r->n_metrics >= r->tr__cap) { /* the storage grows; entries past n_metrics keep their names' memory */
      int cap = r->tr__cap ? 2 * r->tr__cap : 32;
      tr_log_metric *p = (tr_log_metric *)realloc(r->metrics, (size_t)cap * sizeof *p);
      if (!p) return TR_ERR_NOMEM;
      memset(p + r->tr__cap, 0, (size_t)(cap - r->tr__cap) * sizeof *p);
      r->metrics = p;
      r->tr__cap = cap;
    }
    m = &r->metrics[r->n_metrics];
    if (m->tr__cap < len + 1) {
      size_t cap = len + 1 < 32 ? 32 : len + 1;
      char *p = (char *)realloc((void *)m->name, cap);
      if (!p) return TR_ERR_NOMEM;
      m->name = p;
      m->tr__cap = cap;
    }
    memcpy((void *)m->name, name, len + 1);
    i = r->n_metrics++;
    tr__log_index_put(r, i);
  }
  r->metrics[i].value = value;
  return TR_OK;
}
TRAIN_API void tr_log_record_free(tr_log_record *r) {
  int i;
  if (!r) return;
  for (i = 0; i < r->tr__cap; i++) free((void *)r->metrics[i].name);
  free(r->metrics);
  free(r->tr__idx);
  memset(r, 0, sizeof *r);
}
TRAIN_API int tr_log_get(const tr_log_record *r, const char *name, double *value) {
  int i = r && name ? tr__log_find(r, name) : -1;
  if (i >= 0 && value) *value = r->metrics[i].value;
  return i >= 0;
}
TRAIN_API int tr_log_drop(tr_log_record *r, const char *name) {
  int i = r && name ? tr__log_find(r, name) : -1;
  tr_log_metric gone;
  if (i < 0) return 0;
  gone = r->metrics[i]; /* its name's memory moves behind the last entry, for reuse */
  memmove(&r->metrics[i], &r->metrics[i + 1], (size_t)(r->n_metrics - i - 1) * sizeof r->metrics[0]);
  r->metrics[--r->n_metrics] = gone;
  if (r->tr__idx) (void)tr__log_index(r, 0); /* the ones after it moved (the same size: cannot fail) */
  return 1;
}

/* -- hyperparameters: the loop's settings, the spec strings and yours, sorted by key (the run layer collects them) -- */
#define TR__HPARAM_KEY 64   /* tr_run_hparam: a key's bytes, its NUL included */
#define TR__HPARAM_VAL 256  /* and a value's */
#define TR__MAX_HPARAMS 40  /* the trainer's and tr_run_desc.hparams' entries; tr_run_hparam's come on top */
/* num: 0 string, 1 number (val its text), 2 boolean; prio: the trainer 0, hparams 1, tr_run_hparam 2 (of
   one key the highest is kept) */
typedef struct tr__hparam { const char *key; char keybuf[64]; char val[TR__HPARAM_VAL]; int num, prio; } tr__hparam;
/* A key of the loop's own lives in its entry (keybuf, key NULL until sorted: qsort moves entries). */
static const char *tr__hparam_key(const tr__hparam *h) { return h->key ? h->key : h->keybuf; }
static int tr__hparam_cmp(const void *a, const void *b) {
  const tr__hparam *x = (const tr__hparam *)a, *y = (const tr__hparam *)b;
  int c = strcmp(tr__hparam_key(x), tr__hparam_key(y));
  return c ? c : x->prio - y->prio;
}
TR__SHARED void tr__hp(tr__hparam *h, int *n, const char *key, const char *text, double v) {
  if (*n >= TR__MAX_HPARAMS) return;
  h[*n].key = key;
  h[*n].num = text == NULL;
  h[*n].prio = 0;
  if (text) snprintf(h[*n].val, sizeof h[*n].val, "%s", text);
  else tr__num(h[*n].val, sizeof h[*n].val, v);
  ++*n;
}
/* "key=value key=value ..." words (commas separate too) into h from n on, given by prio; a value that reads
   as a number is one. Returns the new count. */
static int tr__hparam_words(const char *p, int prio, tr__hparam *h, int n) {
  while (p && *p && n < TR__MAX_HPARAMS) {
    size_t len, klen;
    const char *eq;
    char *end;
    while (*p == ' ' || *p == ',') p++;
    len = strcspn(p, " ,");
    if (!len) break;
    eq = (const char *)memchr(p, '=', len);
    klen = eq ? (size_t)(eq - p) : len;
    if (klen && klen < sizeof h[n].keybuf) {
      memcpy(h[n].keybuf, p, klen);
      h[n].keybuf[klen] = 0;
      h[n].key = NULL; /* keybuf: pointed at after the sort */
      snprintf(h[n].val, sizeof h[n].val, "%.*s", eq ? (int)(len - klen - 1) : 0, eq ? eq + 1 : "");
      h[n].num = h[n].val[0] && (strtod(h[n].val, &end), *end == 0);
      h[n].prio = prio;
      n++;
    }
    p += len;
  }
  return n;
}
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
