/* train/callbacks/device_stats.h - device_stats. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_DEVICE_STATS_H /* part */
#define TRAIN_DEVICE_STATS_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- device_stats (Lightning's DeviceStatsMonitor) ------------------------------------------------
   Every every_n_steps-th optimizer step (default log_every_n_steps) and with on_epoch_end at each
   epoch's end: device_stats/rss_mb, peak_rss_mb, cpu_percent (100 = one core), load_1m, and with
   TRAIN_CUDA gpu_util_percent, gpu_mem_used_mb, gpu_mem_total_mb through NVML loaded at run time (none:
   said once, left out). As metrics and to the loggers, riding with the run's record or in one of their
   own. Steps not due run none of its code. Hand-written loop: on_train_start, on_train_batch_end with
   global_step counted (tr_run_next does), on_train_epoch_end for on_epoch_end. docs/callbacks.md. */
#define TR_DEVICE_STATS_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(INT,    int64_t,      every_n_steps, "0",     NULL, "read every n-th optimizer step (0: the run's log_every_n_steps, 50 " \
    "when it has none; negative: never on steps)") \
  X(TRI,    int,          on_epoch_end,  "false", NULL, "also read at every on_train_epoch_end") \
  X(TRI,    int,          gpu_stats,     "true",  NULL, "with TRAIN_CUDA: the GPU's utilisation and memory through NVML") \
  X(STRING, const char *, nvml_library,  "libnvidia-ml.so.1", NULL, "the NVML library to load (TRAIN_CUDA)")
typedef struct tr_device_stats_desc { TR_DEVICE_STATS_PARAMS(TR__FIELD) } tr_device_stats_desc;
/* The metrics, X(field, name): the state's fields and the published names, in this order. */
#define TR_DEVICE_STATS_METRICS(X) \
  X(rss_mb, "device_stats/rss_mb") X(peak_rss_mb, "device_stats/peak_rss_mb") X(cpu_percent, "device_stats/cpu_percent") \
  X(load_1m, "device_stats/load_1m") X(gpu_util_percent, "device_stats/gpu_util_percent") \
  X(gpu_mem_used_mb, "device_stats/gpu_mem_used_mb") X(gpu_mem_total_mb, "device_stats/gpu_mem_total_mb")
typedef struct tr_device_stats_state {
  int64_t readings;             /* how many (this process) */
  int64_t step;                 /* ctx->global_step at the last one (-1: none) */
#define TR__X(field, name) double field;
  TR_DEVICE_STATS_METRICS(TR__X) /* the last reading; NaN: not known here (not published) */
#undef TR__X
  int gpu;                      /* 1 NVML reads the device; 0 not asked (no TRAIN_CUDA, gpu_stats false, not yet);
                                   -1 not available (said once: why in gpu_why) */
  char gpu_why[256];
} tr_device_stats_state;
TRAIN_API tr_err tr_device_stats(hk_registry *reg, const tr_device_stats_desc *d, hk_handle *out);
TRAIN_API const tr_device_stats_state *tr_device_stats_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- device_stats ---------------------------------------------------------------------------------- */
enum { TR__DS_N = 7 };
static const char *const tr__ds_names[TR__DS_N] = {
#define TR__X(field, name) name,
  TR_DEVICE_STATS_METRICS(TR__X)
#undef TR__X
};
#if defined(TRAIN_CUDA) && defined(TR__POSIX)
/* NVML's ABI, the little of it used (nvml.h is not needed to build): status 0 is success. */
typedef struct tr__nvml_util { unsigned int gpu, memory; } tr__nvml_util;
typedef struct tr__nvml_mem { unsigned long long total, free, used; } tr__nvml_mem;
typedef struct tr__nvml {
  void *lib, *dev;              /* the library, the nvmlDevice_t */
  int inited;
  int (*init)(void);
  int (*shutdown)(void);
  int (*by_bus)(const char *bus, void **dev);
  int (*util)(void *dev, tr__nvml_util *u);
  int (*mem)(void *dev, tr__nvml_mem *m);
  const char *(*error)(int status);
} tr__nvml;
#define TR__NVML 1
#endif

typedef struct tr__ds {
  tr_device_stats_state pub;
  tr_run *run;
  int64_t every;                /* 0: the run's cadence (asked at each due test) */
  int gpu_stats, on_epoch;
  int64_t ride_step;            /* the step whose training record carries the stats (-1: none) */
  double t0, cpu0;              /* the last reading's clock and CPU time (t0 < 0: none) */
  char *nvml_library;
  tr_log_record rec;            /* the stats' own record */
#ifdef TR__NVML
  tr__nvml nvml;
#endif
} tr__ds;

static void tr__ds_destroy(void *user) {
  tr__ds *s = (tr__ds *)user;
  if (!s) return;
#ifdef TR__NVML
  if (s->nvml.inited && s->nvml.shutdown) (void)s->nvml.shutdown();
  tr__dl_close(s->nvml.lib);
#endif
  tr_log_record_free(&s->rec);
  free(s->nvml_library);
  free(s);
}

/* The run's cadence: 0 means 50 there, negative none. */
static int64_t tr__ds_run_every(const tr__ds *s) {
  int64_t n = s->run ? s->run->desc.log_every_n_steps : 0;
  return n ? n : 50;
}
/* Due once per n-th optimizer step (a batch that did not step keeps global_step); other events always. */
static int tr__ds_due(const hk_ctx *ctx, void *user) {
  const tr__ds *s = (const tr__ds *)user;
  int64_t n;
  if (ctx->event != HK_ON_TRAIN_BATCH_END) return 1;
  n = s->every ? s->every : tr__ds_run_every(s);
  return n > 0 && ctx->global_step > 0 && ctx->global_step % n == 0 && ctx->global_step != s->pub.step;
}

#ifdef TR__NVML
/* Load NVML and find the process's CUDA device in it: once per callback. 0, or -1 with why. */
static int tr__ds_nvml_open(tr__ds *s, char *why, size_t cap) {
  tr__nvml *v = &s->nvml;
  char bus[64];
  int e;
  if (!(v->lib = tr__dl_open(s->nvml_library, why, cap))) return -1;
  if (tr__dl_fn(v->lib, "nvmlInit_v2", &v->init, sizeof v->init) || tr__dl_fn(v->lib, "nvmlShutdown", &v->shutdown, sizeof v->shutdown) ||
      tr__dl_fn(v->lib, "nvmlDeviceGetHandleByPciBusId_v2", &v->by_bus, sizeof v->by_bus) ||
      tr__dl_fn(v->lib, "nvmlDeviceGetUtilizationRates", &v->util, sizeof v->util) ||
      tr__dl_fn(v->lib, "nvmlDeviceGetMemoryInfo", &v->mem, sizeof v->mem) ||
      tr__dl_fn(v->lib, "nvmlErrorString", &v->error, sizeof v->error))
    return tr__msg(why, cap, "%s lacks a function of NVML's (nvmlInit_v2 .. nvmlErrorString)", s->nvml_library), -1;
  if ((e = v->init()) != 0) return tr__msg(why, cap, "nvmlInit: %s", v->error(e)), -1;
  v->inited = 1;
  if ((e = trc_pci_bus_id(bus, (int)sizeof bus)) != 0) return tr__msg(why, cap, "no CUDA device: %s", trc_error_string(e)), -1;
  if ((e = v->by_bus(bus, &v->dev)) != 0) return tr__msg(why, cap, "NVML does not know the CUDA device %s: %s", bus, v->error(e)), -1;
  return 0;
}
#endif
/* Once, at the first on_train_start: the GPU's reader, or why there is none (said once, rank 0). */
static void tr__ds_gpu_open(tr__ds *s, hk_ctx *ctx) {
#ifdef TR__NVML
  if (!s->gpu_stats || s->pub.gpu) return;
  if (tr__ds_nvml_open(s, s->pub.gpu_why, sizeof s->pub.gpu_why) == 0) { s->pub.gpu = 1; return; }
  s->pub.gpu = -1;
  tr__run_say_on(s->run, ctx, 1, "device_stats", "no GPU metrics: %s", s->pub.gpu_why);
#else
  (void)s; (void)ctx;
#endif
}

static hk_signal tr__ds_train_start(hk_ctx *ctx, void *user) {
  tr__ds *s = (tr__ds *)user;
  tr__host_use u;
  tr__ds_gpu_open(s, ctx);
  tr__host_read(&u);
  s->t0 = hk_clock();
  s->cpu0 = u.cpu;
  s->pub.step = ctx->global_step; /* a resumed run's step was read before its checkpoint (or is not due) */
  s->ride_step = -1;
  return HK_CONTINUE;
}

/* One reading: into pub, and the metrics. */
static int tr__ds_read(tr__ds *s, hk_ctx *ctx) {
  tr_device_stats_state *p = &s->pub;
  const double mb = 1.0 / (1024.0 * 1024.0);
  double now = hk_clock(), v[TR__DS_N];
  tr__host_use u;
  int k;
  tr__host_read(&u);
  p->rss_mb = u.rss * mb;
  p->peak_rss_mb = u.peak * mb;
  p->cpu_percent = s->t0 >= 0 && now > s->t0 ? 100.0 * (u.cpu - s->cpu0) / (now - s->t0) : NAN;
  p->load_1m = u.load1;
  p->gpu_util_percent = p->gpu_mem_used_mb = p->gpu_mem_total_mb = NAN;
#ifdef TR__NVML
  if (p->gpu == 1) {
    tr__nvml_util gu;
    tr__nvml_mem gm;
    if (s->nvml.util(s->nvml.dev, &gu) == 0) p->gpu_util_percent = (double)gu.gpu;
    if (s->nvml.mem(s->nvml.dev, &gm) == 0) p->gpu_mem_used_mb = (double)gm.used * mb, p->gpu_mem_total_mb = (double)gm.total * mb;
  }
#endif
  s->t0 = now;
  s->cpu0 = u.cpu;
  p->readings++;
  p->step = ctx->global_step;
#define TR__X(field, name) v[k++] = p->field;
  k = 0;
  TR_DEVICE_STATS_METRICS(TR__X)
#undef TR__X
  for (k = 0; k < TR__DS_N; k++)
    if (hk_is_finite(v[k]) && hk_metric_set(ctx, tr__ds_names[k], v[k]) != HK_OK) return -1;
  return 0;
}
/* The stats in a record of their own (the run sends none now): step as the run's records say it. */
static hk_signal tr__ds_send(tr__ds *s, hk_ctx *ctx) {
  const tr_device_stats_state *p = &s->pub;
  double v[TR__DS_N];
  int k = 0;
  if (!ctx->reg || !HK_ACTIVE(ctx->reg, HK_ON_LOG)) return HK_CONTINUE;
  s->rec.step = ctx->global_step > 0 ? ctx->global_step - 1 : 0;
  s->rec.epoch = ctx->epoch;
  s->rec.stage = "train";
  s->rec.n_metrics = s->rec.n_histograms = 0;
#define TR__X(field, name) v[k++] = p->field;
  TR_DEVICE_STATS_METRICS(TR__X)
#undef TR__X
  for (k = 0; k < TR__DS_N; k++)
    if (hk_is_finite(v[k]) && tr_log_set(&s->rec, tr__ds_names[k], v[k]) != TR_OK) return hk_fail(ctx, "out of memory");
  return tr_log_emit(ctx->reg, ctx, &s->rec);
}
static hk_signal tr__ds_batch_end(hk_ctx *ctx, void *user) { /* due (tr__ds_due) */
  tr__ds *s = (tr__ds *)user;
  int64_t n = tr__ds_run_every(s);
  if (tr__ds_read(s, ctx)) return hk_fail(ctx, "out of memory");
  if (n > 0 && ctx->global_step % n == 0) { s->ride_step = ctx->global_step; return HK_CONTINUE; } /* the run's record follows */
  return tr__ds_send(s, ctx);
}
static hk_signal tr__ds_epoch_end(hk_ctx *ctx, void *user) {
  tr__ds *s = (tr__ds *)user;
  if (tr__ds_read(s, ctx)) return hk_fail(ctx, "out of memory");
  return tr__ds_send(s, ctx);
}
/* The run's records carry metrics set since their last one: the stats only at the step read for them. */
static hk_signal tr__ds_on_log(hk_ctx *ctx, void *user) {
  tr__ds *s = (tr__ds *)user;
  tr_log_record *r = tr_log_current(ctx);
  int k;
  if (!r || r == &s->rec || s->pub.readings == 0 || s->ride_step == ctx->global_step) return HK_CONTINUE;
  for (k = 0; k < TR__DS_N; k++) tr_log_drop(r, tr__ds_names[k]);
  return HK_CONTINUE;
}

static tr_err tr__ds_make(hk_registry *reg, const tr_device_stats_desc *d, hk_handle *out, tr__why *w) {
  tr__ds *s;
  hk_callback cb;
  int on_epoch;
  if (!d) return tr__bad(w, "device_stats: desc is NULL");
  on_epoch = tr__flag(d->on_epoch_end, 0);
  if (d->every_n_steps < 0 && !on_epoch)
    return tr__bad(w, "device_stats: every_n_steps is %lld (never on steps) and on_epoch_end is false: it would read nothing; "
                   "give every_n_steps >= 0 (0: the run's log_every_n_steps) or on_epoch_end=true", (long long)d->every_n_steps);
  if (d->nvml_library && strlen(d->nvml_library) > 1000) return tr__bad(w, "device_stats: nvml_library is longer than 1000 characters");
  s = (tr__ds *)calloc(1, sizeof *s);
  if (!s) return tr__bad(w, "device_stats: out of memory"), TR_ERR_NOMEM;
  s->nvml_library = tr__strdup(d->nvml_library && d->nvml_library[0] ? d->nvml_library : "libnvidia-ml.so.1");
  if (!s->nvml_library) { free(s); return tr__bad(w, "device_stats: out of memory"), TR_ERR_NOMEM; }
  s->run = tr_run_get(reg);
  s->every = d->every_n_steps;
  s->on_epoch = on_epoch;
  s->gpu_stats = tr__flag(d->gpu_stats, 1);
  s->t0 = -1;
  s->ride_step = -1;
  s->pub.step = -1;
#define TR__X(field, name) s->pub.field = NAN;
  TR_DEVICE_STATS_METRICS(TR__X)
#undef TR__X
  memset(&cb, 0, sizeof cb);
  cb.name = "device_stats";
  cb.user = s;
  cb.on_train_start = tr__ds_train_start;
  if (s->every >= 0) cb.on_train_batch_end = tr__ds_batch_end;
  if (on_epoch) cb.on_train_epoch_end = tr__ds_epoch_end;
  cb.on_log = tr__ds_on_log;
  cb.destroy = tr__ds_destroy;
  return tr__cb_register_when(reg, &cb, 0, tr__ds_due, s, out, w);
}
TR__PUBLIC_OF(tr_device_stats, ds)
TR__FACTORY_OF(ds, tr_device_stats_desc, TR_DEVICE_STATS_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
