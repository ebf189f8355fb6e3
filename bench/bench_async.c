/* bench/bench_async.c - what a checkpoint costs the step, saved synchronously and in the background.

   One run, side by side, on the disk under the directory given (make bench-async uses build/, a real
   disk: the printout says which file system): a model state of ASYNC_BENCH_MB (default 256) MiB is
   saved SAVES times
     - by a loop of its own (tr_run_save in its own format: save_model fwrites the floats), and
     - by train.h's trainer (tr_save from a hook during tr_fit, AdamW: parameters and both moments),
   each synchronously (write, fsync, rename inside the call) and asynchronously (tr_run_desc /
   tr_desc.async_save: the call copies the state into the staging buffer and returns), each save next
   to a memcpy of the same bytes into a buffer already touched (what "one copy" costs at best), made
   right before it. Times are
   medians of the saves after the first (the first also allocates and first touches the staging
   buffer; it is printed apart). Between two asynchronous saves the loop waits until the previous file
   is on disk (not timed), so each number is the stall of one save, not a wait for the one before.
   The goal: async stall <= 1.5x the memcpy. */
#define _POSIX_C_SOURCE 200809L
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <time.h>

#define SAVES 8 /* a disturbed save or copy (the other core busy) moves a median of 7 little */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmp_d(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static double least(const double *v, int n) { double m = v[0]; int i; for (i = 1; i < n; i++) if (v[i] < m) m = v[i]; return m; }
static double median(double *v, int n) { qsort(v, (size_t)n, sizeof *v, cmp_d); return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2; }

static unsigned char *g_dst; /* the memcpy's destination: touched before, as the staging buffer is */
static double g_copy[SAVES]; /* the memcpy of the same bytes right before each save */
static double copy_ms(const float *a, size_t na, const float *b, size_t nb) {
  double t0 = now();
  memcpy(g_dst, a, 4 * na);
  if (b) memcpy(g_dst + 4 * na, b, 4 * nb);
  return 1e3 * (now() - t0);
}

/* ---- a loop of its own ----------------------------------------------------------------------------- */
typedef struct model { float *p; size_t n; } model;
static int m_save(void *user, FILE *f) { model *m = (model *)user; return fwrite(m->p, sizeof *m->p, m->n, f) == m->n ? 0 : -1; }
static int m_load(void *user, FILE *f) { (void)user; (void)f; return 0; }
static int saved;
static hk_signal on_saved(hk_ctx *ctx, void *u) { (void)ctx; (void)u; saved++; return HK_CONTINUE; }

/* SAVES saves; first gets the first one's time, the median of the others is returned */
static double loop_saves(model *m, const char *path, int async, double *first) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_flow flow = { 0 };
  double t[SAVES];
  int i;
  memset(&ctx, 0, sizeof ctx);
  tr_run_setup(reg, &(tr_run_desc){ .epochs = TR_NO, .no_signals = 1, .log_every_n_steps = -1, .save_model = m_save,
                                    .load_model = m_load, .model_user = m, .async_save = async ? TR_YES : 0 });
  hk_on(reg, HK_ON_CHECKPOINT_SAVED, on_saved, NULL, NULL, NULL);
  tr_run_start(reg, &ctx, NULL);
  saved = 0;
  for (i = 0; i < SAVES; i++) {
    double t0;
    m->p[i] = (float)i; /* a step between saves */
    ctx.global_step = i;
    g_copy[i] = copy_ms(m->p, m->n, NULL, 0);
    t0 = now();
    if (tr_run_save(reg, &ctx, path) != TR_OK) { fprintf(stderr, "save failed: %s\n", tr_run_error(reg)); exit(1); }
    t[i] = 1e3 * (now() - t0);
    while (saved <= i) { /* training goes on until the file is on disk (not timed) */
      struct timespec ts = { 0, 1000000 };
      (void)tr_run_batch_end(reg, &ctx, &flow);
      if (saved <= i) nanosleep(&ts, NULL);
    }
  }
  if (tr_run_finish(reg, &ctx, TR_OK) != TR_OK) { fprintf(stderr, "run failed: %s\n", tr_run_error(reg)); exit(1); }
  hk_destroy(reg);
  *first = t[0];
  return median(t + 1, SAVES - 1);
}

/* ---- the trainer ------------------------------------------------------------------------------------- */
typedef struct quad { float *p, *g; size_t n; } quad;
static int q_forward(void *user, void *batch, int training, double *loss) { (void)user; (void)batch; (void)training; *loss = 1; return 0; }
static int q_backward(void *user, void *batch) { quad *q = (quad *)user; (void)batch; q->g[0] += 1; return 0; }
static int64_t q_count(void *user) { (void)user; return 2 * SAVES; }
static int q_get(void *user, int64_t i, void **batch) { (void)user; *batch = (void *)(intptr_t)i; return 0; }

typedef struct tb { tr_trainer *t; const char *path; double t_call[SAVES]; int n; } tb;
/* Until the writer thread is done with the last file (asked of the private writer, without collecting:
   the trainer collects it at its next safe point). */
static void wait_writer(tr_trainer *t) {
  tr__asave *as = t->run->tr__p->asave;
  if (!as || !as->started) return;
  pthread_mutex_lock(&as->mu);
  while (as->busy) pthread_cond_wait(&as->cv, &as->mu);
  pthread_mutex_unlock(&as->mu);
}
static hk_signal tb_batch_end(hk_ctx *ctx, void *u) {
  tb *b = (tb *)u;
  double t0;
  if (ctx->batch_idx % 2 || b->n >= SAVES) { wait_writer(b->t); return HK_CONTINUE; } /* odd batches: not timed */
  g_copy[b->n] = copy_ms(b->t->model.params, b->t->model.n_params, b->t->tr__m, b->t->model.n_params);
  t0 = now();
  if (tr_save(b->t, b->path) != TR_OK) { fprintf(stderr, "tr_save failed: %s\n", tr_error(b->t)); exit(1); }
  b->t_call[b->n++] = 1e3 * (now() - t0);
  return HK_CONTINUE;
}

static double trainer_saves(quad *q, const char *path, int async, double *first) {
  tr_trainer t;
  tr_data data = { NULL, q_count, q_get, NULL, NULL, NULL, NULL, NULL, 1 };
  tb b;
  memset(&b, 0, sizeof b);
  if (tr_init(&t, &(tr_desc){ .model = { .params = q->p, .grads = q->g, .n_params = q->n, .user = q, .forward = q_forward,
                                         .backward = q_backward },
                              .optim = { .kind = TR_OPTIM_SGD, .lr = 0.0, .momentum = 0.9 }, .async_save = async }) != TR_OK) exit(1);
  b.t = &t;
  b.path = path;
  saved = 0;
  hk_on(t.reg, HK_ON_TRAIN_BATCH_END, tb_batch_end, &b, NULL, NULL);
  hk_on(t.reg, HK_ON_CHECKPOINT_SAVED, on_saved, NULL, NULL, NULL);
  if (tr_fit(&t, &(tr_config){ .train = &data, .max_epochs = 1, .no_sigint = 1 }) != TR_OK) { fprintf(stderr, "fit: %s\n", tr_error(&t)); exit(1); }
  tr_free(&t);
  *first = b.t_call[0];
  return median(b.t_call + 1, SAVES - 1);
}

static const char *fs_name(const char *dir) {
  struct statfs s;
  if (statfs(dir, &s) != 0) return "?";
  switch ((unsigned long)s.f_type) {
  case 0xEF53: return "ext4";
  case 0x01021994: return "tmpfs (NOT a real disk)";
  case 0x58465342: return "xfs";
  case 0x9123683E: return "btrfs";
  case 0x794c7630: return "overlayfs";
  default: return "other";
  }
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "build";
  const char *mb_env = getenv("ASYNC_BENCH_MB");
  size_t mb = mb_env ? (size_t)atol(mb_env) : 256, bytes = mb << 20, i;
  char path[512];
  model m;
  quad q;
  double mc, sync_ms, async_ms, f_sync, f_async;
  g_dst = (unsigned char *)malloc(bytes);
  memset(g_dst, 1, bytes);
  snprintf(path, sizeof path, "%s/bench_async.ckpt", dir);
  printf("async saves: a %zu MiB state saved %d times into %s (%s), median of the last %d; ms per save as the step sees it\n",
         mb, SAVES, dir, fs_name(dir), SAVES - 1);
  printf("%-46s %10s %10s %10s %12s %12s\n", "", "memcpy", "sync", "async", "async/memcpy", "first async");

  m.n = bytes / 4;
  m.p = (float *)malloc(bytes);
  for (i = 0; i < m.n; i++) m.p[i] = (float)i;
  sync_ms = loop_saves(&m, path, 0, &f_sync);
  async_ms = loop_saves(&m, path, 1, &f_async);
  mc = least(g_copy + 1, SAVES - 1); /* the best of the copies made beside the asynchronous saves: the limit */
  printf("%-46s %10.1f %10.1f %10.1f %11.2fx %12.1f\n", "own loop, tr_run_save (fwrite of the floats)", mc, sync_ms, async_ms, async_ms / mc, f_async);
  free(m.p);
  remove(path);

  q.n = bytes / 8; /* SGD with momentum: parameters and one moment make the state */
  q.p = (float *)malloc(q.n * 4);
  q.g = (float *)calloc(q.n, 4);
  for (i = 0; i < q.n; i++) q.p[i] = (float)i;
  sync_ms = trainer_saves(&q, path, 0, &f_sync);
  async_ms = trainer_saves(&q, path, 1, &f_async);
  mc = least(g_copy + 1, SAVES - 1);
  printf("%-46s %10.1f %10.1f %10.1f %11.2fx %12.1f\n", "train.h trainer, tr_save (params + momentum)", mc, sync_ms, async_ms, async_ms / mc, f_async);
  free(q.p);
  free(q.g);
  remove(path);
  free(g_dst);
  return 0;
}
