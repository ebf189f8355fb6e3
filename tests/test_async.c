/* tests/test_async.c - checkpoints written in the background (tr_desc.async_save,
   tr_run_desc.async_save, model_checkpoint's async_save).

   The step copies the state and returns; a thread writes, fsyncs and renames. Pinned here: the same
   bytes as a synchronous save (the run layer's format and the trainer's, model_checkpoint's top-k
   files included); on_checkpoint_saved only once the file is whole at its path; a second save waits
   for the first (both files, both events, in order); a save from teardown is written at once; a
   failed background write (a file size limit, a full disk; in a loop of its own and in tr_fit)
   reaches the run at the next step or at its end, the previous file intact and no temporary left,
   model_checkpoint's empty claim of the name removed;
   kill -9 while the writer writes leaves the old file or the new one, and the next save removes the
   dead writer's temporary; Ctrl-C during a background write (its fsync one a signal interrupts, as
   FUSE's) stops the run after the step with the checkpoint whole: the writer blocks signals; an fsync
   that fails with EINTR is retried. Built plain, with ASan+UBSan and with TSan (tests/async.mk). */
/* train.h's fsync calls come to test_fsync (below): a file system whose fsync a signal interrupts */
static int test_fsync(int fd);
#define fsync test_fsync
#include "test.h"
#undef fsync
int fsync(int fd); /* <unistd.h>, read with the macro on, declared test_fsync */

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_root[256];

/* fsync as a FUSE or NFS ("intr") file system has it: a signal handled by the thread waiting in it
   interrupts it (EINTR). g_fsync_slow: on a thread other than the main one it waits 300 ms first,
   saying so in g_in_fsync and whether that thread blocks SIGINT and SIGTERM in g_writer_blocks;
   g_fsync_eintr: that many fsyncs fail with EINTR at once. */
static pthread_t g_main_thread;
static int g_fsync_slow, g_fsync_eintr, g_in_fsync, g_writer_blocks;
static int test_fsync(int fd) {
  if (__atomic_load_n(&g_fsync_slow, __ATOMIC_SEQ_CST) && !pthread_equal(pthread_self(), g_main_thread)) {
    sigset_t cur;
    struct timespec ts = { 0, 300000000 };
    int blocks = pthread_sigmask(SIG_BLOCK, NULL, &cur) == 0 && sigismember(&cur, SIGINT) == 1 && sigismember(&cur, SIGTERM) == 1;
    __atomic_store_n(&g_writer_blocks, blocks, __ATOMIC_SEQ_CST);
    __atomic_store_n(&g_in_fsync, 1, __ATOMIC_SEQ_CST);
    if (nanosleep(&ts, NULL) != 0 && errno == EINTR) return -1; /* the request was interrupted */
  }
  if (g_fsync_eintr > 0) {
    g_fsync_eintr--;
    errno = EINTR;
    return -1;
  }
  return fsync(fd);
}

static void path_in(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_root, name); }

static int same_file(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  unsigned char *x = (unsigned char *)slurp_len(a, &na), *y = (unsigned char *)slurp_len(b, &nb);
  int same = x && y && na == nb && !memcmp(x, y, na);
  free(x);
  free(y);
  return same;
}
/* Entries of dir whose name contains part. */
static int count_names(const char *dir, const char *part) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  if (!d) return -1;
  while ((e = readdir(d)) != NULL) n += strstr(e->d_name, part) != NULL;
  closedir(d);
  return n;
}

/* ---- a loop of its own: n floats, "BIG1" then the floats ------------------------------------------ */
typedef struct big { float *p; size_t n; } big;
static int big_save(void *user, FILE *f) {
  big *m = (big *)user;
  return fwrite("BIG1", 1, 4, f) == 4 && fwrite(m->p, sizeof *m->p, m->n, f) == m->n ? 0 : -1;
}
static int big_load(void *user, FILE *f) {
  big *m = (big *)user;
  char magic[4];
  return fread(magic, 1, 4, f) == 4 && !memcmp(magic, "BIG1", 4) && fread(m->p, sizeof *m->p, m->n, f) == m->n ? 0 : -1;
}
static void big_make(big *m, size_t n, float base) {
  size_t i;
  m->n = n;
  m->p = (float *)malloc(n * sizeof *m->p);
  for (i = 0; i < n; i++) m->p[i] = base + (float)(i % 1000);
}

/* on_checkpoint_saved: the file at ctx->path is whole when it fires (its size is the staged one) */
typedef struct seen { int n; char paths[4][256]; long sizes[4]; } seen;
static hk_signal on_saved(hk_ctx *ctx, void *user) {
  seen *s = (seen *)user;
  struct stat st;
  if (s->n < 4) {
    snprintf(s->paths[s->n], sizeof s->paths[0], "%s", ctx->path);
    s->sizes[s->n] = stat(ctx->path, &st) == 0 ? (long)st.st_size : -1;
  }
  s->n++;
  return HK_CONTINUE;
}

static hk_registry *loop_reg(big *m, int async, seen *s) {
  hk_registry *reg = hk_create(NULL);
  tr_run_desc d;
  memset(&d, 0, sizeof d);
  d.epochs = TR_NO;
  d.no_signals = 1;
  d.save_model = big_save;
  d.load_model = big_load;
  d.model_user = m;
  d.async_save = async ? TR_YES : 0;
  d.log_every_n_steps = -1;
  assert_int_equal(tr_run_setup(reg, &d), TR_OK);
  if (s) assert_int_equal(hk_on(reg, HK_ON_CHECKPOINT_SAVED, on_saved, s, NULL, NULL), HK_OK);
  return reg;
}
/* A model of n parameters at v, its loop's registry with asynchronous saves, nothing seen yet, a fresh context. */
static hk_registry *async_loop(big *m, size_t n, float v, seen *s, hk_ctx *c) {
  big_make(m, n, v);
  memset(s, 0, sizeof *s);
  memset(c, 0, sizeof *c);
  return loop_reg(m, 1, s);
}

/* The same bytes as a synchronous save; on_checkpoint_saved at the next safe point, the file whole. */
static void test_run_same_bytes(void **st) {
  big m;
  seen s1, s2;
  hk_ctx c1, c2;
  hk_flow flow = { 0 };
  char a[300], b[300];
  hk_registry *sync_reg, *async_reg;
  size_t n = 300000; /* 1.2 MB: the staging buffer grows past its first 1 MiB */
  (void)st;
  big_make(&m, n, 0.5f);
  memset(&s1, 0, sizeof s1);
  memset(&s2, 0, sizeof s2);
  memset(&c1, 0, sizeof c1);
  memset(&c2, 0, sizeof c2);
  path_in(a, sizeof a, "sync.ckpt");
  path_in(b, sizeof b, "async.ckpt");
  sync_reg = loop_reg(&m, 0, &s1);
  async_reg = loop_reg(&m, 1, &s2);
  assert_int_equal(tr_run_start(sync_reg, &c1, NULL), TR_OK);
  assert_int_equal(tr_run_start(async_reg, &c2, NULL), TR_OK);
  c1.global_step = c2.global_step = 7;
  assert_int_equal(tr_run_save(sync_reg, &c1, a), TR_OK);
  assert_int_equal(s1.n, 1);
  assert_int_equal(tr_run_save(async_reg, &c2, b), TR_OK);
  assert_int_equal(s2.n, 0); /* not before it is on disk and the loop is at a safe point */
  m.p[0] = 99.0f;            /* the step goes on: the file holds the state of the save */
  assert_int_equal(tr_run_finish(async_reg, &c2, TR_OK), TR_OK); /* the run ends once it is on disk */
  assert_int_equal(s2.n, 1);
  assert_string_equal(s2.paths[0], b);
  assert_true(s2.sizes[0] > (long)(4 * n));
  assert_true(same_file(a, b));
  (void)tr_run_batch_end(sync_reg, &c1, &flow);
  assert_int_equal(tr_run_finish(sync_reg, &c1, TR_OK), TR_OK);
  { /* and it loads */
    hk_ctx c3;
    memset(&c3, 0, sizeof c3);
    assert_int_equal(tr_run_load(async_reg, &c3, b), TR_OK);
    assert_true(m.p[0] == 0.5f);
    assert_int_equal(c3.global_step, 7);
  }
  hk_destroy(sync_reg);
  hk_destroy(async_reg);
  free(m.p);
}

/* Two saves in a row: the second waits for the first; both files, both events, in order; the
   staging buffer is reused (and the loop's safe point collects the last one). */
static void test_run_second_waits(void **st) {
  big m;
  seen s;
  hk_ctx c;
  hk_flow flow = { 0 };
  char a[300], b[300], ref[300];
  hk_registry *reg, *sync_reg;
  int i;
  (void)st;
  path_in(a, sizeof a, "first.ckpt");
  path_in(b, sizeof b, "second.ckpt");
  path_in(ref, sizeof ref, "second_ref.ckpt");
  reg = async_loop(&m, 100000, 2.0f, &s, &c);
  assert_int_equal(tr_run_start(reg, &c, NULL), TR_OK);
  assert_int_equal(tr_run_save(reg, &c, a), TR_OK);
  m.p[1] = -3.0f;
  c.global_step = 1;
  assert_int_equal(tr_run_save(reg, &c, b), TR_OK);
  assert_int_equal(s.n, 1); /* the first one's event, before the second was staged */
  assert_string_equal(s.paths[0], a);
  for (i = 0; i < 2000 && s.n < 2; i++) { /* a safe point collects it once written */
    struct timespec ts = { 0, 1000000 };
    (void)tr_run_batch_end(reg, &c, &flow);
    nanosleep(&ts, NULL);
  }
  assert_int_equal(s.n, 2);
  assert_string_equal(s.paths[1], b);
  assert_int_equal(tr_run_finish(reg, &c, TR_OK), TR_OK);
  assert_int_equal(s.n, 2);
  sync_reg = loop_reg(&m, 0, NULL);
  assert_int_equal(tr_run_start(sync_reg, &c, NULL), TR_OK);
  assert_int_equal(tr_run_save(sync_reg, &c, ref), TR_OK);
  assert_int_equal(tr_run_finish(sync_reg, &c, TR_OK), TR_OK);
  assert_true(same_file(b, ref));
  hk_destroy(reg);
  hk_destroy(sync_reg);
  free(m.p);
}

/* A save from teardown (or on_exception) is written at once: nothing would collect it later. */
typedef struct td { hk_registry *reg; const char *path; int saved_before_return; seen *s; } td;
static hk_signal teardown_save(hk_ctx *ctx, void *user) {
  td *d = (td *)user;
  struct stat st;
  if (tr_run_save(d->reg, ctx, d->path) == TR_OK && stat(d->path, &st) == 0 && d->s->n == 2) d->saved_before_return = 1;
  return HK_CONTINUE;
}
static void test_teardown_save_at_once(void **st) {
  big m;
  seen s;
  hk_ctx c;
  char a[300], b[300];
  hk_registry *reg;
  td d;
  (void)st;
  path_in(a, sizeof a, "in_run.ckpt");
  path_in(b, sizeof b, "teardown.ckpt");
  reg = async_loop(&m, 1000, 1.0f, &s, &c);
  d.reg = reg;
  d.path = b;
  d.saved_before_return = 0;
  d.s = &s;
  assert_int_equal(hk_on(reg, HK_TEARDOWN, teardown_save, &d, NULL, NULL), HK_OK);
  assert_int_equal(tr_run_start(reg, &c, NULL), TR_OK);
  assert_int_equal(tr_run_save(reg, &c, a), TR_OK); /* in the background, collected by tr_run_finish */
  assert_int_equal(tr_run_finish(reg, &c, TR_OK), TR_OK);
  assert_int_equal(d.saved_before_return, 1);
  assert_int_equal(s.n, 2);
  assert_string_equal(s.paths[0], a);
  assert_string_equal(s.paths[1], b);
  hk_destroy(reg);
  free(m.p);
}

/* A background write that fails (writes past RLIMIT_FSIZE fail with EFBIG): the run fails at the next
   step (or at its end), naming the file; the previous file is intact; no temporary is left. In a child
   process, so that the limit stays there. */
static int fail_child(const char *dir, int at_teardown) {
  big m;
  hk_ctx c;
  hk_flow flow = { 0 };
  char path[400];
  hk_registry *reg;
  struct rlimit rl = { 64 << 10, 64 << 10 };
  unsigned r = 0;
  int i;
  tr_err e;
  big_make(&m, 1 << 20, 1.0f); /* 4 MiB, over the 64 KiB limit */
  memset(&c, 0, sizeof c);
  snprintf(path, sizeof path, "%s/prev.ckpt", dir);
  signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 10;
  reg = loop_reg(&m, 1, NULL);
  if (tr_run_start(reg, &c, NULL) != TR_OK) return 11;
  if (tr_run_save(reg, &c, path) != TR_OK) return 12; /* staged: the error comes later */
  if (!at_teardown) {
    for (i = 0; i < 5000 && !(r & TR_RUN_STOP); i++) {
      struct timespec ts = { 0, 1000000 };
      r = tr_run_batch_end(reg, &c, &flow);
      if (!(r & TR_RUN_STOP)) nanosleep(&ts, NULL);
    }
    if (!(r & TR_RUN_STOP)) return 13; /* the next step saw it */
  }
  e = tr_run_finish(reg, &c, TR_OK);
  if (e != TR_ERR_IO) return 14;
  if (!strstr(tr_run_error(reg), "prev.ckpt") || !strstr(tr_run_error(reg), "File too large")) {
    fprintf(stderr, "message: %s\n", tr_run_error(reg));
    return 15;
  }
  hk_destroy(reg);
  free(m.p);
  return 0;
}
/* A background write that fails in a child process (child(dir, arg) exits 0 when its run failed as it
   should): the previous file, `old` at dir/name, is left byte for byte, and no temporary file stays. */
static void expect_failed_write_keeps(const char *sub, const char *name, const char *old,
                                      int (*child)(const char *dir, int arg), int arg) {
  char dir[300], path[400];
  pid_t pid;
  int status = -1;
  FILE *f;
  size_t n = 0;
  char *b;
  snprintf(dir, sizeof dir, "%s/%s", g_root, sub);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  assert_non_null(f = fopen(path, "wb"));
  fputs(old, f);
  fclose(f);
  fflush(NULL);
  pid = fork();
  if (pid == 0) _exit(child(dir, arg));
  assert_true(waitpid(pid, &status, 0) == pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  assert_non_null(b = slurp_len(path, &n));
  assert_int_equal(n, strlen(old));
  assert_memory_equal(b, old, n);
  free(b);
  assert_int_equal(count_names(dir, ".tmp."), 0);
}
static void test_write_error_next_step(void **st) {
  (void)st;
  expect_failed_write_keeps("fail0", "prev.ckpt", "the previous checkpoint", fail_child, 0);
}
static void test_write_error_at_teardown(void **st) {
  (void)st;
  expect_failed_write_keeps("fail1", "prev.ckpt", "the previous checkpoint", fail_child, 1);
}

/* A full disk: a 64 KiB tmpfs (root only; skipped with a message elsewhere). */
static void test_full_disk(void **st) {
  char dir[300], path[400];
  big m;
  hk_ctx c;
  hk_registry *reg;
  tr_err e;
  size_t n = 0;
  unsigned char *b;
  FILE *f;
  (void)st;
  snprintf(dir, sizeof dir, "%s/full", g_root);
  assert_int_equal(mkdir(dir, 0755), 0);
  if (mount("tmpfs", dir, "tmpfs", 0, "size=64k") != 0) {
    printf("      test_full_disk skipped: cannot mount a 64 KiB tmpfs on %s (%s; needs root)\n", dir, strerror(errno));
    skip();
  }
  snprintf(path, sizeof path, "%s/model.ckpt", dir);
  f = fopen(path, "wb");
  fputs("old", f);
  fclose(f);
  big_make(&m, 1 << 16, 1.0f); /* 256 KiB: more than the disk holds */
  memset(&c, 0, sizeof c);
  reg = loop_reg(&m, 1, NULL);
  assert_int_equal(tr_run_start(reg, &c, NULL), TR_OK);
  assert_int_equal(tr_run_save(reg, &c, path), TR_OK);
  e = tr_run_finish(reg, &c, TR_OK);
  assert_int_equal(e, TR_ERR_IO);
  assert_non_null(strstr(tr_run_error(reg), "No space left on device"));
  b = (unsigned char *)slurp_len(path, &n);
  assert_non_null(b);
  assert_int_equal(n, 3);
  assert_memory_equal(b, "old", 3);
  free(b);
  assert_int_equal(count_names(dir, ".tmp."), 0);
  hk_destroy(reg);
  free(m.p);
  assert_int_equal(umount(dir), 0);
}

/* kill -9 while the writer thread writes a 64 MiB checkpoint: the path holds the old file or the new
   one, whole (tr_run_load checks the checksum of the state block and the model's bytes); the dead
   writer's temporary is removed by the next save to that path. */
static void test_kill_mid_write(void **st) {
  char dir[300], path[400];
  big m, r;
  hk_ctx c;
  hk_registry *reg;
  pid_t pid;
  int status, i, killed_mid = 0, fds[2];
  size_t n = 16 << 20; /* floats: 64 MiB */
  (void)st;
  snprintf(dir, sizeof dir, "%s/kill", g_root);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(path, sizeof path, "%s/model.ckpt", dir);
  big_make(&m, n, 1.0f);
  memset(&c, 0, sizeof c);
  reg = loop_reg(&m, 0, NULL); /* the old file, written synchronously */
  assert_int_equal(tr_run_start(reg, &c, NULL), TR_OK);
  assert_int_equal(tr_run_save(reg, &c, path), TR_OK);
  assert_int_equal(tr_run_finish(reg, &c, TR_OK), TR_OK);
  hk_destroy(reg);
  assert_int_equal(pipe(fds), 0);
  fflush(NULL);
  pid = fork();
  if (pid == 0) { /* a run that saves in the background, then keeps stepping */
    char x = 'x';
    close(fds[0]);
    for (i = 0; i < (int)n; i++) m.p[i] = 2.0f;
    memset(&c, 0, sizeof c);
    reg = loop_reg(&m, 1, NULL);
    if (tr_run_start(reg, &c, NULL) != TR_OK || tr_run_save(reg, &c, path) != TR_OK) _exit(3);
    if (write(fds[1], &x, 1) != 1) _exit(4);
    for (;;) pause();
  }
  close(fds[1]);
  {
    char x;
    assert_int_equal(read(fds[0], &x, 1), 1);
  }
  close(fds[0]);
  for (i = 0; i < 2000 && !killed_mid; i++) { /* the temporary appears: the writer is writing */
    struct timespec ts = { 0, 200000 };
    if (count_names(dir, ".tmp.") > 0) killed_mid = 1;
    else nanosleep(&ts, NULL);
  }
  kill(pid, SIGKILL);
  assert_true(waitpid(pid, &status, 0) == pid);
  assert_true(WIFSIGNALED(status));
  if (!killed_mid) printf("      test_kill_mid_write: the write ended before the kill (still checked: whole file)\n");
  r.n = n;
  r.p = (float *)malloc(n * sizeof *r.p);
  memset(&c, 0, sizeof c);
  reg = loop_reg(&r, 0, NULL);
  assert_int_equal(tr_run_load(reg, &c, path), TR_OK); /* whole: old or new */
  assert_true((r.p[0] == 1.0f && r.p[n - 1] == 1.0f + (float)((n - 1) % 1000)) || /* the old file */
              (r.p[0] == 2.0f && r.p[n - 1] == 2.0f));                              /* the new one */
  if (killed_mid) assert_true(count_names(dir, ".tmp.") > 0); /* the dead writer's temporary is there */
  assert_int_equal(tr_run_start(reg, &c, NULL), TR_OK); /* the next run's save cleans it */
  assert_int_equal(tr_run_save(reg, &c, path), TR_OK);
  assert_int_equal(tr_run_finish(reg, &c, TR_OK), TR_OK);
  assert_int_equal(count_names(dir, ".tmp."), 0);
  remove(path); /* 64 MiB: not left in build/ */
  hk_destroy(reg);
  free(r.p);
  free(m.p);
}

/* ---- the trainer: a quadratic model, model_checkpoint top-2 with async_save ----------------------- */
#define QN 5000
typedef struct quad { float p[QN], g[QN]; } quad;
static int q_forward(void *user, void *batch, int training, double *loss) {
  quad *q = (quad *)user;
  double s = 0;
  int i;
  (void)training;
  for (i = 0; i < QN; i++) s += (double)(q->p[i] - (float)(intptr_t)batch) * (q->p[i] - (float)(intptr_t)batch);
  *loss = s / QN;
  return 0;
}
static int q_backward(void *user, void *batch) {
  quad *q = (quad *)user;
  int i;
  for (i = 0; i < QN; i++) q->g[i] += 2.0f * (q->p[i] - (float)(intptr_t)batch) / QN;
  return 0;
}
static int64_t q_count(void *user) { (void)user; return 4; }
static int q_get(void *user, int64_t i, void **batch) { (void)user; *batch = (void *)(intptr_t)(i % 3); return 0; }

/* One fit into dir: async as given; returns the number of on_checkpoint_saved calls. */
static int fit_into(const char *dir, int async, int via_desc) {
  static quad q;
  tr_trainer t;
  tr_data data = { NULL, q_count, q_get, NULL, NULL, NULL, NULL, NULL, 1 };
  seen s;
  char last[300];
  int i;
  tr_model_checkpoint_desc mc;
  memset(&s, 0, sizeof s);
  for (i = 0; i < QN; i++) q.p[i] = (float)(i % 7);
  assert_int_equal(tr_init(&t, &(tr_desc){ .model = { .params = q.p, .grads = q.g, .n_params = QN, .user = &q,
                                                      .forward = q_forward, .backward = q_backward },
                                           .optim = { .kind = TR_OPTIM_ADAMW, .lr = 0.05 }, .seed = 3,
                                           .sched = { .kind = TR_SCHED_PLATEAU, .patience = 1 }, /* its state: LRST */
                                           .async_save = via_desc }), TR_OK);
  mc = (tr_model_checkpoint_desc){ .dirpath = dir, .monitor = "val/loss", .save_top_k = 2, .save_last = TR_SAVE_LAST_YES,
                                   .async_save = async };
  assert_int_equal(tr_model_checkpoint(t.reg, &mc, NULL), TR_OK);
  assert_int_equal(hk_on(t.reg, HK_ON_CHECKPOINT_SAVED, on_saved, &s, NULL, NULL), HK_OK);
  snprintf(last, sizeof last, "%s/final.ckpt", dir);
  assert_int_equal(tr_fit(&t, &(tr_config){ .train = &data, .val = &data, .max_epochs = 6, .no_sigint = 1 }), TR_OK);
  assert_int_equal(tr_save(&t, last), TR_OK); /* outside a run: written at once */
  tr_free(&t);
  return s.n;
}
static void test_trainer_same_files(void **st) {
  char a[300], b[300], c[300], fa[600], fb[600], fc[600];
  const char *names[] = { "final.ckpt", "last.ckpt" };
  DIR *d;
  struct dirent *e;
  int na, nb, nc, files = 0;
  size_t i;
  (void)st;
  path_in(a, sizeof a, "mc_sync");
  path_in(b, sizeof b, "mc_async");
  path_in(c, sizeof c, "mc_desc");
  path_in(fa, sizeof fa, "mc"); /* each fit in the same directory (model_checkpoint's state names it), then moved */
  na = fit_into(fa, 0, 0);
  assert_int_equal(rename(fa, a), 0);
  nb = fit_into(fa, 1, 0);
  assert_int_equal(rename(fa, b), 0);
  nc = fit_into(fa, 0, 1);
  assert_int_equal(rename(fa, c), 0);
  assert_int_equal(na, nb);
  assert_int_equal(na, nc);
  assert_true(na >= 6);
  for (i = 0; i < sizeof names / sizeof *names; i++) {
    snprintf(fa, sizeof fa, "%s/%s", a, names[i]);
    snprintf(fb, sizeof fb, "%s/%s", b, names[i]);
    snprintf(fc, sizeof fc, "%s/%s", c, names[i]);
    assert_true(same_file(fa, fb));
    assert_true(same_file(fa, fc));
  }
  d = opendir(a); /* the top-2 files: the same names, the same bytes, the evicted ones gone in both */
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(fa, sizeof fa, "%s/%s", a, e->d_name);
    snprintf(fb, sizeof fb, "%s/%s", b, e->d_name);
    snprintf(fc, sizeof fc, "%s/%s", c, e->d_name);
    assert_true(same_file(fa, fb));
    assert_true(same_file(fa, fc));
    files++;
  }
  closedir(d);
  assert_int_equal(files, 4); /* two top-k files, last.ckpt, final.ckpt */
  assert_int_equal(count_names(b, "."), 2 + 4);
  assert_int_equal(count_names(b, ".tmp."), 0);
}

/* The trainer's background write fails (a file size limit): tr_fit fails with TR_ERR_IO naming the file,
   before the run's end; the previous file intact. In a child process. */
static hk_signal request_once(hk_ctx *ctx, void *user) {
  struct timespec ts = { 0, 1000000 }; /* steps of 1 ms: the writer's failure comes within a few */
  (void)user;
  if (ctx->global_step == 1) hk_request(ctx, HK_REQUEST_CHECKPOINT);
  nanosleep(&ts, NULL);
  return HK_CONTINUE;
}
static int trainer_fail_child(const char *dir, int unused) {
  char path[400];
  static quad q;
  tr_trainer t;
  tr_data data = { NULL, q_count, q_get, NULL, NULL, NULL, NULL, NULL, 1 };
  struct rlimit rl = { 16 << 10, 16 << 10 };
  tr_err e;
  (void)unused;
  snprintf(path, sizeof path, "%s/model.ckpt", dir);
  signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 10;
  if (tr_init(&t, &(tr_desc){ .model = { .params = q.p, .grads = q.g, .n_params = QN, .user = &q, .forward = q_forward,
                                         .backward = q_backward },
                              .optim = { .kind = TR_OPTIM_ADAMW, .lr = 0.05 }, .async_save = 1 }) != TR_OK) return 11;
  hk_on(t.reg, HK_ON_TRAIN_BATCH_END, request_once, NULL, NULL, NULL);
  e = tr_fit(&t, &(tr_config){ .train = &data, .max_epochs = 50, .save_to = path, .no_sigint = 1 });
  if (e != TR_ERR_IO) return 12;
  if (!strstr(tr_error(&t), "in the background") || !strstr(tr_error(&t), "File too large") || !strstr(tr_error(&t), path)) {
    fprintf(stderr, "message: %s\n", tr_error(&t));
    return 13;
  }
  if (t.global_step >= 200) return 14; /* it ended the run at a step, not at the run's end */
  tr_free(&t);
  return 0;
}
static void test_trainer_write_error(void **st) {
  (void)st;
  expect_failed_write_keeps("tfail", "model.ckpt", "old", trainer_fail_child, 0);
}

/* model_checkpoint's background write fails (a file size limit): its name was claimed on disk (an empty
   file) when picked; the failure, collected at the next save point, fails the run and removes the claim
   as a synchronous save's failure does at teardown: no empty .ckpt is left for a later run to stumble on
   (it skipped the name, and a load of it fails). In a child process; epoch saves (the failure collected
   at the next save point, which picks the next name) and step saves, with save_last or without. */
static int mc_fail_child(const char *dir, int every_steps, int last) {
  static quad q;
  tr_trainer t;
  tr_data data = { NULL, q_count, q_get, NULL, NULL, NULL, NULL, NULL, 1 };
  struct rlimit rl = { 16 << 10, 16 << 10 }; /* the state of 5000 floats with AdamW's moments is 60 KB */
  tr_model_checkpoint_desc mc;
  tr_err e;
  signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 10;
  if (tr_init(&t, &(tr_desc){ .model = { .params = q.p, .grads = q.g, .n_params = QN, .user = &q, .forward = q_forward,
                                         .backward = q_backward },
                              .optim = { .kind = TR_OPTIM_ADAMW, .lr = 0.05 } }) != TR_OK) return 11;
  memset(&mc, 0, sizeof mc);
  mc.dirpath = dir;
  mc.save_top_k = -1;
  mc.every_n_train_steps = every_steps;
  mc.save_last = last ? TR_SAVE_LAST_YES : TR_SAVE_LAST_NO;
  mc.async_save = 1;
  if (tr_model_checkpoint(t.reg, &mc, NULL) != TR_OK) return 12;
  e = tr_fit(&t, &(tr_config){ .train = &data, .max_epochs = 5, .no_sigint = 1 });
  if (e != TR_ERR_IO || !strstr(tr_error(&t), "in the background") || !strstr(tr_error(&t), "File too large")) {
    fprintf(stderr, "tr_fit: %s: %s\n", tr_err_name(e), tr_error(&t));
    return 13;
  }
  tr_free(&t);
  return 0;
}
static void test_mc_failed_write_unclaims(void **st) {
  static const int cases[][2] = { { 0, 0 }, { 0, 1 }, { 1, 0 }, { 1, 1 } }; /* every_n_train_steps, save_last */
  char dir[300];
  size_t i;
  (void)st;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pid_t pid;
    int status = -1;
    snprintf(dir, sizeof dir, "%s/mc_fail%d%d", g_root, cases[i][0], cases[i][1]);
    assert_int_equal(mkdir(dir, 0755), 0);
    fflush(NULL);
    pid = fork();
    if (pid == 0) _exit(mc_fail_child(dir, cases[i][0], cases[i][1]));
    assert_true(waitpid(pid, &status, 0) == pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    if (count_names(dir, ".ckpt") != 0) { /* an empty claim left behind */
      char cmd[400];
      snprintf(cmd, sizeof cmd, "ls -la '%s' >&2", dir);
      if (system(cmd) != 0) fprintf(stderr, "(ls failed)\n");
    }
    assert_int_equal(count_names(dir, ".ckpt"), 0);
  }
}

/* Ctrl-C while a checkpoint is written in the background: the run stops after the step (through
   on_exception, TR_ERR_INTERRUPTED, as documented), the checkpoint is whole and on_checkpoint_saved
   fired. The main thread masks SIGINT while it is sent, so the kernel must give it to
   another thread if one takes it (Linux prefers the main thread, other systems pick any): the writer
   blocks every signal, so the signal waits for the main thread, and the writer's fsync (one a signal
   would interrupt, as FUSE's) is never cut short. */
static void test_sigint_during_write(void **st) {
  char dir[300], path[400];
  big m, r;
  hk_ctx c;
  hk_flow flow = { 0 };
  hk_registry *reg;
  tr_run_desc d;
  seen s;
  sigset_t one, old;
  unsigned got = 0;
  int i;
  tr_err e;
  (void)st;
  snprintf(dir, sizeof dir, "%s/sigint", g_root);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(path, sizeof path, "%s/model.ckpt", dir);
  big_make(&m, 1 << 20, 3.0f);
  memset(&c, 0, sizeof c);
  memset(&d, 0, sizeof d);
  memset(&s, 0, sizeof s);
  d.epochs = TR_NO;
  d.save_model = big_save;
  d.load_model = big_load;
  d.model_user = &m;
  d.async_save = TR_YES;
  d.log_every_n_steps = -1; /* d.no_signals = 0: tr_run_start installs the stop signals */
  reg = hk_create(NULL);
  assert_int_equal(tr_run_setup(reg, &d), TR_OK);
  assert_int_equal(hk_on(reg, HK_ON_CHECKPOINT_SAVED, on_saved, &s, NULL, NULL), HK_OK);
  assert_int_equal(tr_run_start(reg, &c, NULL), TR_OK);
  g_main_thread = pthread_self();
  __atomic_store_n(&g_in_fsync, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_fsync_slow, 1, __ATOMIC_SEQ_CST);
  c.global_step = 3;
  assert_int_equal(tr_run_save(reg, &c, path), TR_OK);
  for (i = 0; i < 5000 && !__atomic_load_n(&g_in_fsync, __ATOMIC_SEQ_CST); i++) {
    struct timespec ts = { 0, 1000000 };
    nanosleep(&ts, NULL);
  }
  assert_true(__atomic_load_n(&g_in_fsync, __ATOMIC_SEQ_CST)); /* the writer waits in its fsync */
  sigemptyset(&one);
  sigaddset(&one, SIGINT);
  assert_int_equal(pthread_sigmask(SIG_BLOCK, &one, &old), 0);
  assert_int_equal(kill(getpid(), SIGINT), 0);
  { /* time for another thread to take it (the writer, if it did not block it) */
    struct timespec ts = { 0, 100000000 };
    nanosleep(&ts, NULL);
  }
  assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0); /* a signal left pending comes here now */
  for (i = 0; i < 5000 && !(got & TR_RUN_STOP); i++) { /* the loop's next safe points */
    struct timespec ts = { 0, 1000000 };
    got = tr_run_batch_end(reg, &c, &flow);
    if (!(got & TR_RUN_STOP)) nanosleep(&ts, NULL);
  }
  assert_true(got & TR_RUN_STOP);
  e = tr_run_finish(reg, &c, TR_OK);
  __atomic_store_n(&g_fsync_slow, 0, __ATOMIC_SEQ_CST);
  if (e != TR_ERR_INTERRUPTED || s.n != 1) fprintf(stderr, "tr_run_finish: %s\n", tr_run_error(reg));
  assert_int_equal(e, TR_ERR_INTERRUPTED);    /* the signal's stop, after the step */
  assert_int_equal(s.n, 1);                   /* the save itself did not fail */
  assert_int_equal(hk_stop_requested(), 1);   /* counted once */
  assert_true(__atomic_load_n(&g_writer_blocks, __ATOMIC_SEQ_CST));
  hk_destroy(reg);
  r.n = m.n;
  r.p = (float *)calloc(r.n, sizeof *r.p);
  memset(&c, 0, sizeof c);
  reg = loop_reg(&r, 0, NULL);
  assert_int_equal(tr_run_load(reg, &c, path), TR_OK); /* whole */
  assert_int_equal(c.global_step, 3);
  assert_true(r.p[0] == 3.0f && r.p[r.n - 1] == m.p[m.n - 1]);
  assert_int_equal(count_names(dir, ".tmp."), 0);
  hk_destroy(reg);
  free(r.p);
  free(m.p);
}

/* An fsync that a signal interrupted (EINTR) is asked again: the save succeeds. */
static void test_fsync_eintr_retried(void **st) {
  char path[300];
  big m;
  hk_ctx c;
  hk_registry *reg;
  (void)st;
  path_in(path, sizeof path, "eintr.ckpt");
  big_make(&m, 1000, 1.0f);
  memset(&c, 0, sizeof c);
  reg = loop_reg(&m, 0, NULL);
  assert_int_equal(tr_run_start(reg, &c, NULL), TR_OK);
  g_fsync_eintr = 2;
  assert_int_equal(tr_run_save(reg, &c, path), TR_OK);
  assert_int_equal(g_fsync_eintr, 0);
  assert_int_equal(tr_run_finish(reg, &c, TR_OK), TR_OK);
  hk_destroy(reg);
  free(m.p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_run_same_bytes),
    cmocka_unit_test(test_run_second_waits),
    cmocka_unit_test(test_teardown_save_at_once),
    cmocka_unit_test(test_write_error_next_step),
    cmocka_unit_test(test_write_error_at_teardown),
    cmocka_unit_test(test_full_disk),
    cmocka_unit_test(test_kill_mid_write),
    cmocka_unit_test(test_trainer_same_files),
    cmocka_unit_test(test_trainer_write_error),
    cmocka_unit_test(test_mc_failed_write_unclaims),
    cmocka_unit_test(test_sigint_during_write),
    cmocka_unit_test(test_fsync_eintr_retried),
  };
  const char *base = getenv("TEST_TMP") ? getenv("TEST_TMP") : "build";
  snprintf(g_root, sizeof g_root, "%s/test_async.%ld", base, (long)getpid());
  mkdir(base, 0755);
  if (mkdir(g_root, 0755) != 0) { perror(g_root); return 1; }
  return cmocka_run_group_tests(tests, NULL, NULL);
}
