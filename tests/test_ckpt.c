/* tests/test_ckpt.c - hardening of train.h's checkpoints and of hooks.h's state loading: write errors
   (a full disk), safe temporary files (symlinks, stale files of killed saves), all-or-nothing loads (a
   failing on_load_checkpoint hook), field ranges, file kinds and sizes, 40,000 hook sections, the
   policy for missing hook state, nested and refused calls from hooks. Every test is a regression
   test: each failed before the fix it covers. Built by tests/ckpt.mk: plain, ASan+UBSan, valgrind. */
#include "test.h"

#include <dirent.h>
#include <sys/resource.h>
#include <time.h>
#ifdef __linux__
extern int unshare(int flags); /* (a strict -std=c99 <sched.h> hides it) */
#endif

static char g_dir[256];
static void in_dir(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_dir, name); }

/* ---- a model of any size: y = w.x, MSE, one batch ----------------------------------------------- */
typedef struct big { float *p, *g; size_t n; } big;
static int big_forward(void *u, void *batch, int training, double *loss) {
  big *m = (big *)u;
  double s = 0;
  size_t i;
  (void)batch; (void)training;
  for (i = 0; i < m->n; i += 97) s += (double)m->p[i] * m->p[i];
  *loss = s;
  return 0;
}
static int big_backward(void *u, void *batch) {
  big *m = (big *)u;
  size_t i;
  (void)batch;
  for (i = 0; i < m->n; i += 97) m->g[i] += 2 * m->p[i];
  return 0;
}
static int64_t one_count(void *u) { (void)u; return 3; }
static int one_get(void *u, int64_t i, void **b) { (void)u; (void)i; *b = NULL; return 0; }

typedef struct fixture { big m; tr_trainer t; tr_data d; memlog log; } fixture;

static void quiet(const char *msg, void *user) { (void)msg; (void)user; }

static fixture *fixture_new(size_t n, int strict, uint64_t max_bytes) {
  fixture *f = (fixture *)calloc(1, sizeof *f);
  tr_desc d;
  hk_desc hd;
  size_t i;
  f->m.n = n;
  f->m.p = (float *)calloc(n, sizeof(float));
  f->m.g = (float *)calloc(n, sizeof(float));
  for (i = 0; i < n; i++) f->m.p[i] = (float)(i % 13) * 0.01f;
  memset(&d, 0, sizeof d);
  memset(&hd, 0, sizeof hd);
  hd.log = quiet;
  hd.max_hooks = 50000;
  d.model.params = f->m.p;
  d.model.grads = f->m.g;
  d.model.n_params = n;
  d.model.user = &f->m;
  d.model.forward = big_forward;
  d.model.backward = big_backward;
  d.reg = hk_create(&hd);
  d.strict_hook_state = strict;
  d.max_checkpoint_bytes = max_bytes;
  memlog_open(&f->log);
  d.log = f->log.f;
  assert_int_equal(tr_init(&f->t, &d), TR_OK);
  memset(&f->d, 0, sizeof f->d);
  f->d.count = one_count;
  f->d.get = one_get;
  return f;
}
static const char *fixture_log(fixture *f) { return memlog_text(&f->log); }
static void fixture_free(fixture *f) {
  hk_registry *reg = f->t.reg;
  tr_free(&f->t);
  hk_destroy(reg);
  memlog_close(&f->log);
  free(f->m.p);
  free(f->m.g);
  free(f);
}
static void train(fixture *f, int64_t steps) {
  tr_config c;
  memset(&c, 0, sizeof c);
  c.train = &f->d;
  c.max_steps = steps;
  c.no_sigint = 1;
  assert_int_equal(tr_fit(&f->t, &c), TR_OK);
}

/* Files in g_dir whose names start with prefix. */
static int count_files(const char *prefix) {
  DIR *d = opendir(g_dir);
  struct dirent *e;
  int n = 0;
  while (d && (e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  if (d) closedir(d);
  return n;
}

/* ---- writing -------------------------------------------------------------------------------------- */

/* A symlink planted at the old temporary name, and at the first names the new scheme tries, is never
   followed: the files it points to stay as they were. (Runs first: the name counter starts at 0.) */
static void test_save_ignores_planted_symlinks(void **state) {
  fixture *f = fixture_new(100, 0, 0);
  char path[300], link[400], victim[300];
  size_t vlen = 0;
  unsigned char *v;
  int i;
  FILE *fp;
  (void)state;
  in_dir(path, sizeof path, "planted.ckpt");
  in_dir(victim, sizeof victim, "victim.txt");
  fp = fopen(victim, "w");
  fputs("precious", fp);
  fclose(fp);
  snprintf(link, sizeof link, "%s.tmp", path);
  assert_int_equal(symlink(victim, link), 0);
  for (i = 0; i < 30; i++) {
    snprintf(link, sizeof link, "%s.tmp.%ld.%d", path, (long)getpid(), i);
    assert_int_equal(symlink(victim, link), 0);
  }
  assert_int_equal(tr_save(&f->t, path), TR_OK);
  v = (unsigned char *)slurp_len(victim, &vlen);
  assert_int_equal(vlen, 8);
  assert_memory_equal(v, "precious", 8);
  free(v);
  assert_int_equal(tr_load(&f->t, path), TR_OK);
  fixture_free(f);
}

/* A write error (here: the file size limit, as on a full disk) with a checkpoint over 64 KiB used to
   spin forever. Now: TR_ERR_IO naming the temporary file, no temporary file left, the previous
   checkpoint intact. */
static void test_save_write_error(void **state) {
  fixture *f = fixture_new(200000, 0, 0); /* an 800 KB checkpoint */
  char path[300];
  struct rlimit old, small;
  unsigned char *before, *after;
  size_t blen = 0, alen = 0;
  (void)state;
  in_dir(path, sizeof path, "full.ckpt");
  assert_int_equal(tr_save(&f->t, path), TR_OK);
  before = (unsigned char *)slurp_len(path, &blen);
  train(f, 1);
  signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  small = old;
  small.rlim_cur = 100000;
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  assert_int_equal(tr_save(&f->t, path), TR_ERR_IO);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_DFL);
  assert_non_null(strstr(tr_error(&f->t), "tr_save: writing '"));
  assert_non_null(strstr(tr_error(&f->t), "full.ckpt.tmp."));
  assert_non_null(strstr(tr_error(&f->t), "File too large"));
  assert_non_null(strstr(tr_error(&f->t), "(the previous '"));
  assert_int_equal(count_files("full.ckpt.tmp"), 0);
  after = (unsigned char *)slurp_len(path, &alen);
  assert_int_equal(alen, blen);
  assert_memory_equal(after, before, blen);
  free(before);
  free(after);
  /* and a directory that does not exist names the file it could not create */
  in_dir(path, sizeof path, "no/such/dir/x.ckpt");
  assert_int_equal(tr_save(&f->t, path), TR_ERR_IO);
  assert_non_null(strstr(tr_error(&f->t), "tr_save: creating '"));
  assert_non_null(strstr(tr_error(&f->t), "No such file or directory"));
  fixture_free(f);
}

/* Temporary files of processes that no longer exist are removed by the next save; a live process's
   are kept. Includes a real kill -9 in the middle of a large save. */
static void test_stale_temporary_files(void **state) {
  fixture *f = fixture_new(2000000, 0, 0); /* an 8 MB checkpoint: the child is caught mid-write */
  char path[300], name[400], tag[9], other[9], kept[3][400];
  pid_t dead, child;
  int status, i;
  FILE *fp;
  (void)state;
  in_dir(path, sizeof path, "stale.ckpt");
  tr__temp_tag(tag);
  snprintf(other, sizeof other, "%08x", (unsigned)strtoul(tag, NULL, 16) ^ 1u); /* another host's, or PID namespace's */
  dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, &status, 0); /* now no process has this pid here */
  snprintf(name, sizeof name, "%s.tmp.%s.%ld.0", path, tag, (long)dead);
  fp = fopen(name, "w"); fputs("stale", fp); fclose(fp);
  /* kept: our parent's (alive); a live writer's on another host or in another PID namespace, whose pid means
     nothing here (issue 37, item 11: it lost its temporary mid-save); an untagged one (not ours to judge) */
  snprintf(kept[0], sizeof kept[0], "%s.tmp.%s.%ld.0", path, tag, (long)getppid());
  snprintf(kept[1], sizeof kept[1], "%s.tmp.%s.%ld.0", path, other, (long)dead);
  snprintf(kept[2], sizeof kept[2], "%s.tmp.%ld.1", path, (long)dead);
  for (i = 0; i < 3; i++) { fp = fopen(kept[i], "w"); fputs("live", fp); fclose(fp); }
  assert_int_equal(tr_save(&f->t, path), TR_OK);
  assert_int_equal(count_files("stale.ckpt.tmp"), 3); /* the live ones */
  for (i = 0; i < 3; i++) assert_int_equal(access(kept[i], F_OK), 0);
  for (i = 0; i < 3; i++) remove(kept[i]);
#ifdef __linux__
  { /* a process in another PID namespace tags its temporaries otherwise (where namespaces can be made: root) */
    int fds[2];
    char got[9] = "";
    assert_int_equal(pipe(fds), 0);
    child = fork();
    if (child == 0) {
      pid_t inner;
      if (unshare(0x20000000 /* CLONE_NEWPID */) != 0) _exit(0); /* not allowed: nothing said */
      if ((inner = fork()) == 0) { tr__temp_tag(got); _exit(write(fds[1], got, 8) == 8 ? 0 : 1); }
      _exit(inner > 0 && waitpid(inner, &status, 0) == inner ? 0 : 1);
    }
    close(fds[1]);
    waitpid(child, &status, 0);
    if (read(fds[0], got, 8) == 8) { assert_true(strcmp(got, tag) != 0); fprintf(stderr, "(another PID namespace's tag: %s, ours %s)\n", got, tag); }
    close(fds[0]);
  }
#endif

  child = fork();
  if (child == 0) { /* saves forever, until killed */
    for (i = 0; i < 1000; i++) (void)tr_save(&f->t, path);
    _exit(0);
  }
  for (i = 0; i < 200 && count_files("stale.ckpt.tmp") == 0; i++) {
    struct timespec ms = { 0, 5000000 };
    nanosleep(&ms, NULL);
  }
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(count_files("stale.ckpt.tmp"), 1); /* what the kill left behind */
  assert_int_equal(tr_save(&f->t, path), TR_OK);
  assert_int_equal(count_files("stale.ckpt.tmp"), 0);
  assert_int_equal(tr_load(&f->t, path), TR_OK);
  fixture_free(f);
}

/* ---- loading -------------------------------------------------------------------------------------- */

typedef struct counter_cb { int64_t value; int fail_on_load; } counter_cb;
static int counter_save(void *u, hk_bytes *out) { return hk_bytes_put(out, &((counter_cb *)u)->value, 8); }
static int counter_load(void *u, hk_reader *in) { return hk_read(in, &((counter_cb *)u)->value, 8) || in->pos != in->len; }
static hk_signal counter_on_load(hk_ctx *ctx, void *u) {
  return ((counter_cb *)u)->fail_on_load ? hk_fail(ctx, "refusing %s", ctx->path) : HK_CONTINUE;
}
static void add_counter(fixture *f, const char *name, counter_cb *c, hk_tier tier) {
  hk_callback cb = { .name = name, .user = c, .save_state = counter_save, .load_state = counter_load,
                     .on_load_checkpoint = counter_on_load };
  hk_opts o = { .tier = tier };
  assert_int_equal(hk_add_callback(f->t.reg, &cb, &o, NULL), HK_OK);
}

/* Everything a load may replace, as bytes, to compare before and after. */
static size_t snapshot(fixture *f, unsigned char *out, size_t cap) {
  tr_trainer *t = &f->t;
  size_t n = f->m.n * 4, at = 0;
#define PUT(p, len) do { assert_true(at + (len) <= cap); memcpy(out + at, (p), (len)); at += (len); } while (0)
  PUT(f->m.p, n); PUT(f->m.g, n); PUT(t->tr__m, n); PUT(t->tr__v, n);
  PUT(&t->epoch, 8); PUT(&t->global_step, 8); PUT(&t->epoch_batch, 8); PUT(&t->samples_seen, 8);
  PUT(&t->rng.state, 8); PUT(&t->seed, 8); PUT(&t->tr__accum_pos, 8); PUT(&t->tr__val_at, 8);
  PUT(&t->tr__flow.signals, sizeof t->tr__flow.signals);
#undef PUT
  return at;
}

/* A failing on_load_checkpoint used to leave the checkpoint's parameters, counters and hook state in
   place while tr_load reported TR_ERR_HOOK. Now everything is as before, bit for bit. */
static void test_load_rolls_back_on_hook_failure(void **state) {
  fixture *f = fixture_new(1000, 0, 0);
  counter_cb a = { 0, 0 }, b = { 0, 0 };
  char path[300];
  static unsigned char s1[20000], s2[20000];
  size_t n1, n2;
  (void)state;
  in_dir(path, sizeof path, "rollback.ckpt");
  add_counter(f, "a", &a, HK_TIER_CALLBACK);
  add_counter(f, "b", &b, HK_TIER_MODEL);
  a.value = 5; b.value = 6;
  train(f, 2);
  assert_int_equal(tr_save(&f->t, path), TR_OK);
  train(f, 5);
  a.value = 50; b.value = 60;
  n1 = snapshot(f, s1, sizeof s1);
  a.fail_on_load = 1;
  assert_int_equal(tr_load(&f->t, path), TR_ERR_HOOK);
  assert_non_null(strstr(tr_error(&f->t), "callback 'a' failed in on_load_checkpoint: refusing"));
  n2 = snapshot(f, s2, sizeof s2);
  assert_int_equal(n1, n2);
  assert_memory_equal(s1, s2, n1);
  assert_int_equal(a.value, 50);
  assert_int_equal(b.value, 60);
  a.fail_on_load = 0; /* and the same load then succeeds */
  assert_int_equal(tr_load(&f->t, path), TR_OK);
  assert_int_equal(a.value, 5);
  assert_int_equal(b.value, 6);
  assert_int_equal(f->t.global_step, 2);
  fixture_free(f);
}

/* Checksums recomputed after an edit, so that only the range check can catch it. */
static void fix_checksums(unsigned char *buf, size_t len) { ckpt_checksums_as(buf, len, (uint32_t)tr__get(buf + 8, 4)); }
static size_t loop_at(const unsigned char *buf) { /* the LOOP payload: after the header and META */
  size_t meta = 16 + 12 + (size_t)tr__get(buf + 16 + 4, 8) + 8;
  return meta + 12;
}

static void test_load_rejects_out_of_range_fields(void **state) {
  fixture *f = fixture_new(50, 0, 0);
  char path[300];
  unsigned char *good, *bad;
  size_t len = 0, lp;
  /* LOOP's 8-byte slots: seed 0, rng 1, epoch 2, global_step 3, epoch_batch 4, samples_seen 5,
     val_at 6, accum_pos 7, accum_n 8; then the u32 flags */
  static const struct { int slot; int64_t value; const char *msg; } cases[] = {
    { 3, INT64_MAX, "LOOP's global_step is 9223372036854775807, outside 0..2^53" },
    { 2, -5, "LOOP's epoch is -5, outside 0..2^53" },
    { 5, ((int64_t)1 << 53) + 1, "LOOP's samples_seen is 9007199254740993, outside 0..2^53" },
    { 6, -2, "LOOP's val_at is -2, outside -1..2^53" },
    { 6, 3, "LOOP's val_at (3) is after epoch_batch (1)" },
    { 7, 5, "accumulation counters (accum_pos 5, accum_n 0) do not fit epoch_batch 1" },
  };
  int i;
  (void)state;
  in_dir(path, sizeof path, "range.ckpt");
  train(f, 1);
  assert_int_equal(tr_save(&f->t, path), TR_OK);
  good = (unsigned char *)slurp_len(path, &len);
  bad = (unsigned char *)malloc(len);
  lp = loop_at(good);
  for (i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
    memcpy(bad, good, len);
    tr__le(bad + lp + 8 * (size_t)cases[i].slot, (uint64_t)cases[i].value, 8);
    fix_checksums(bad, len);
    assert_int_equal(tr_load_mem(&f->t, bad, len), TR_ERR_FORMAT);
    if (!strstr(tr_error(&f->t), cases[i].msg)) fail_msg("case %d: '%s' lacks '%s'", i, tr_error(&f->t), cases[i].msg);
  }
  memcpy(bad, good, len);
  tr__le(bad + lp + 72, 0x100, 4);
  fix_checksums(bad, len);
  assert_int_equal(tr_load_mem(&f->t, bad, len), TR_ERR_FORMAT);
  assert_non_null(strstr(tr_error(&f->t), "LOOP's flags 0x100 has unknown bits"));
  assert_int_equal(tr_load_mem(&f->t, good, len), TR_OK);
  free(good);
  free(bad);
  fixture_free(f);
}

/* The checksum of format 3 as docs/trainer.md states it, against the streaming tr__sum the writer uses. */
static uint64_t mix(uint64_t h, uint64_t w) {
  h = (h ^ w) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 32);
}
static uint64_t plain_sum(const unsigned char *p, size_t n) {
  uint64_t h[4] = { 0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull, 0x3c6ef372fe94f82bull, 0xa54ff53a5f1d36f1ull }, w;
  size_t k, j;
  for (k = 0; k <= n / 8; k++) { /* the bytes and 1 to 8 zero bytes: words 0 .. n/8 */
    for (w = 0, j = 0; j < 8; j++) w |= (uint64_t)(8 * k + j < n ? p[8 * k + j] : 0) << (8 * j);
    h[k % 4] = mix(h[k % 4], w);
  }
  return mix(mix(mix(mix(h[0], h[1]), h[2]), h[3]), (uint64_t)n);
}

/* Format 3's checksum: the same for any split of the bytes into pieces, equal to its plain statement, and
   every one-bit change of a checkpoint is refused, two sign bits in neighbouring words too (which a plain
   multiply-xor hash would let cancel). Format 2's files (FNV-1a) still load, to the same state; a file with
   the other format's checksums is refused. */
static void test_checksum_formats(void **state) {
  fixture *f = fixture_new(300, 0, 0);
  char path[300];
  static const size_t pieces[4] = { 3, 45, 8, 33 };
  unsigned char bytes[403], *good, *bad;
  size_t len = 0, n, cut, i, parm, piece;
  float before[300];
  (void)state;
  for (i = 0; i < sizeof bytes; i++) bytes[i] = (unsigned char)(i * 37 + 11);
  for (n = 0; n <= sizeof bytes; n += 1 + n / 17) {
    tr__sum all = TR__SUM_START;
    uint64_t whole;
    tr__sum_add(&all, bytes, n);
    whole = tr__sum_end(&all);
    assert_true(whole == plain_sum(bytes, n));
    for (cut = 0; cut <= n; cut += 1 + cut / 5) {
      tr__sum s = TR__SUM_START;
      size_t k;
      tr__sum_add(&s, bytes, cut);
      for (k = cut, i = 0; k < n; k += piece, i++) { /* then pieces of 3, 45, 8 and 33 bytes */
        piece = pieces[i % 4];
        if (piece > n - k) piece = n - k;
        tr__sum_add(&s, bytes + k, piece);
      }
      assert_true(tr__sum_end(&s) == whole);
    }
  }
  in_dir(path, sizeof path, "formats.ckpt");
  train(f, 2);
  memcpy(before, f->m.p, sizeof before);
  assert_int_equal(tr_save(&f->t, path), TR_OK);
  good = (unsigned char *)slurp_len(path, &len);
  assert_int_equal(tr__get(good + 8, 4), 3);
  bad = (unsigned char *)malloc(len);
  parm = loop_at(good) + TR__LOOP_SIZE + 8 + 12; /* PARM's payload */
  for (i = 16; i < len; i += 1 + i / 16) { /* one bit anywhere: header, sizes, payloads, checksums */
    memcpy(bad, good, len);
    bad[i] ^= (unsigned char)(1u << (i % 8));
    assert_int_not_equal(tr_load_mem(&f->t, bad, len), TR_OK);
  }
  memcpy(bad, good, len);
  bad[parm + 7] ^= 0x80; /* the sign bits of floats 1 and 3: the top bits of words 0 and 1 */
  bad[parm + 15] ^= 0x80;
  assert_int_equal(tr_load_mem(&f->t, bad, len), TR_ERR_FORMAT);
  assert_non_null(strstr(tr_error(&f->t), "checksum of section 'PARM'"));

  memcpy(bad, good, len); /* format 2: the same sections, FNV-1a 64 */
  tr__le(bad + 8, 2, 4);
  fix_checksums(bad, len);
  for (i = 0; i < 300; i++) f->m.p[i] = -1.0f;
  assert_int_equal(tr_load_mem(&f->t, bad, len), TR_OK);
  assert_memory_equal(f->m.p, before, sizeof before);
  tr__le(bad + 8, 3, 4); /* FNV-1a under version 3 */
  assert_int_equal(tr_load_mem(&f->t, bad, len), TR_ERR_FORMAT);
  assert_non_null(strstr(tr_error(&f->t), "checksum of section 'META'"));
  memcpy(bad, good, len); /* format 3's checksums under version 2 */
  tr__le(bad + 8, 2, 4);
  assert_int_equal(tr_load_mem(&f->t, bad, len), TR_ERR_FORMAT);
  free(good);
  free(bad);
  fixture_free(f);
}

/* Not every path is a checkpoint file: directories, devices and pipes are refused up front, and so is
   a file larger than the limit. */
static void test_load_file_kinds_and_limit(void **state) {
  fixture *f = fixture_new(50, 0, 4096), *g;
  char path[300];
  (void)state;
  assert_int_equal(tr_load(&f->t, g_dir), TR_ERR_IO);
  assert_non_null(strstr(tr_error(&f->t), "is a directory, not a checkpoint file"));
  assert_int_equal(tr_load(&f->t, "/dev/zero"), TR_ERR_IO);
  assert_non_null(strstr(tr_error(&f->t), "'/dev/zero' is not a regular file"));
  in_dir(path, sizeof path, "fifo");
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(tr_load(&f->t, path), TR_ERR_IO);
  assert_non_null(strstr(tr_error(&f->t), "is not a regular file"));
  remove(path);
  /* a 4 KiB limit: a checkpoint with 2,000 parameters is over it */
  g = fixture_new(2000, 0, 0);
  in_dir(path, sizeof path, "big.ckpt");
  assert_int_equal(tr_save(&g->t, path), TR_OK);
  fixture_free(g);
  g = fixture_new(2000, 0, 4096);
  assert_int_equal(tr_load(&g->t, path), TR_ERR_FORMAT);
  assert_non_null(strstr(tr_error(&g->t), "more than the 4096 this model's checkpoints can need (raise tr_desc.max_checkpoint_bytes"));
  fixture_free(g);
  g = fixture_new(2000, 0, 0); /* the default limit fits the model */
  assert_int_equal(tr_load(&g->t, path), TR_OK);
  fixture_free(g);
  fixture_free(f);
}

/* 40,000 HOOK sections: loading used to be quadratic (38 s); every hook gets its own state back. */
enum { MANY = 40000 };
static void test_load_many_hook_sections(void **state) {
  fixture *f = fixture_new(10, 0, 0), *g;
  counter_cb *a = (counter_cb *)calloc(MANY, sizeof *a), *b = (counter_cb *)calloc(MANY, sizeof *b);
  char path[300], name[32];
  clock_t t0;
  int i;
  (void)state;
  in_dir(path, sizeof path, "many.ckpt");
  for (i = 0; i < MANY; i++) {
    snprintf(name, sizeof name, "cb%d", i);
    a[i].value = i * 7 + 1;
    add_counter(f, name, &a[i], HK_TIER_CALLBACK);
  }
  assert_int_equal(tr_save(&f->t, path), TR_OK);
  g = fixture_new(10, 1, 0);
  for (i = 0; i < MANY; i++) {
    snprintf(name, sizeof name, "cb%d", i);
    add_counter(g, name, &b[i], HK_TIER_CALLBACK);
  }
  t0 = clock();
  assert_int_equal(tr_load(&g->t, path), TR_OK);
  printf("    40,000 hook sections loaded in %.3f s of CPU\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
  for (i = 0; i < MANY; i++) if (b[i].value != i * 7 + 1) fail_msg("hook %d got %lld", i, (long long)b[i].value);
  fixture_free(f);
  fixture_free(g);
  free(a);
  free(b);
}

/* A registered stateful hook the checkpoint knows nothing about, and state no hook loads: warned about
   by default, refused under tr_desc.strict_hook_state (nothing changes). */
static void test_missing_hook_state_policy(void **state) {
  fixture *f = fixture_new(10, 0, 0), *g, *h;
  counter_cb a = { 3, 0 }, gone = { 4, 0 }, b = { 0, 0 }, extra = { 9, 0 }, c = { 0, 0 }, extra2 = { 9, 0 };
  char path[300];
  (void)state;
  in_dir(path, sizeof path, "policy.ckpt");
  add_counter(f, "a", &a, HK_TIER_CALLBACK);
  add_counter(f, "gone", &gone, HK_TIER_CALLBACK);
  assert_int_equal(tr_save(&f->t, path), TR_OK);

  g = fixture_new(10, 0, 0);
  add_counter(g, "a", &b, HK_TIER_CALLBACK);
  add_counter(g, "extra", &extra, HK_TIER_CALLBACK);
  assert_int_equal(tr_load(&g->t, path), TR_OK);
  assert_int_equal(b.value, 3);
  assert_int_equal(extra.value, 9); /* kept, and said so */
  assert_non_null(strstr(fixture_log(g), "warning: the checkpoint holds no saved state for 'extra': kept as it is now"));
  assert_non_null(strstr(fixture_log(g), "warning: the checkpoint has state for an unknown hook 'gone'; ignored"));

  h = fixture_new(10, 1, 0);
  add_counter(h, "a", &c, HK_TIER_CALLBACK);
  add_counter(h, "extra", &extra2, HK_TIER_CALLBACK);
  assert_int_equal(tr_load(&h->t, path), TR_ERR_STATE);
  assert_non_null(strstr(tr_error(&h->t), "the checkpoint holds state for 'gone', which no registered hook loads (tr_desc.strict_hook_state)"));
  assert_int_equal(c.value, 0); /* nothing changed */
  fixture_free(h);
  h = fixture_new(10, 1, 0);
  add_counter(h, "a", &c, HK_TIER_CALLBACK);
  add_counter(h, "gone", &gone, HK_TIER_CALLBACK);
  add_counter(h, "extra", &extra2, HK_TIER_CALLBACK);
  assert_int_equal(tr_load(&h->t, path), TR_ERR_STATE);
  assert_non_null(strstr(tr_error(&h->t), "the checkpoint holds no saved state for 'extra' (tr_desc.strict_hook_state)"));
  assert_int_equal(c.value, 0);
  fixture_free(h);
  fixture_free(g);
  fixture_free(f);
}

/* hk_state_check: duplicates, unknown keys, the missing count and its message; hk_state_load_all
   loads the model tier first. */
static char g_order[64];
static int order_load(void *u, hk_reader *in) { strcat(g_order, (const char *)u); (void)in; return 0; }
static int order_save(void *u, hk_bytes *out) { (void)u; (void)out; return 0; }
static void test_state_check_and_order(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_state_blob blobs[4];
  int missing = -1, i;
  static const char *const names[4] = { "cbA", "model", "strategy", "cbB" };
  static const hk_tier tiers[4] = { HK_TIER_CALLBACK, HK_TIER_MODEL, HK_TIER_STRATEGY, HK_TIER_CALLBACK };
  (void)state;
  for (i = 0; i < 4; i++) {
    hk_callback cb;
    hk_opts o;
    memset(&cb, 0, sizeof cb);
    memset(&o, 0, sizeof o);
    cb.name = names[i];
    cb.user = (void *)names[i];
    cb.save_state = order_save;
    cb.load_state = order_load;
    o.tier = tiers[i];
    assert_int_equal(hk_add_callback(reg, &cb, &o, NULL), HK_OK);
  }
  memset(blobs, 0, sizeof blobs);
  for (i = 0; i < 4; i++) blobs[i].key = names[i];
  g_order[0] = 0;
  assert_int_equal(hk_state_load_all(reg, blobs, 4), HK_OK);
  assert_string_equal(g_order, "modelcbAcbBstrategy");
  blobs[3].key = "nobody";
  assert_int_equal(hk_state_check(reg, blobs, 4, &missing), HK_OK);
  assert_int_equal(blobs[3].result, HK_ERR_NOT_FOUND);
  assert_int_equal(missing, 1);
  assert_string_equal(hk_last_error(reg), "no saved state for 'cbB'");
  blobs[3].key = "cbA";
  assert_int_equal(hk_state_check(reg, blobs, 4, &missing), HK_ERR_DUPLICATE);
  assert_int_equal(blobs[3].result, HK_ERR_DUPLICATE);
  g_order[0] = 0;
  assert_int_equal(hk_state_load_all(reg, blobs, 4), HK_ERR_DUPLICATE);
  assert_string_equal(g_order, ""); /* nothing loaded */
  { /* names too long for the message's list: it ends in "..." where it is cut, the count after it */
    static char longer[2][121];
    hk_callback cb;
    hk_opts o;
    const char *err;
    for (i = 0; i < 2; i++) {
      memset(longer[i], 'a' + i, 120);
      memset(&cb, 0, sizeof cb);
      memset(&o, 0, sizeof o);
      cb.name = longer[i];
      cb.save_state = order_save;
      cb.load_state = order_load;
      assert_int_equal(hk_add_callback(reg, &cb, &o, NULL), HK_OK);
    }
    blobs[3].key = "cbB";
    assert_int_equal(hk_state_check(reg, blobs, 4, &missing), HK_OK);
    assert_int_equal(missing, 2);
    err = hk_last_error(reg);
    assert_int_equal(strncmp(err, "no saved state for 'aaaa", 24), 0);
    assert_int_equal(strlen(err), strlen("no saved state for ") + 199); /* the list's 200 bytes, less its NUL */
    assert_string_equal(err + strlen(err) - 4, "b...");
  }
  hk_destroy(reg);
}

/* ---- calls from hooks ---------------------------------------------------------------------------- */

typedef struct caller { const char *path; tr_err got; int calls; } caller;
static hk_signal save_again(hk_ctx *ctx, void *u) {
  caller *c = (caller *)u;
  c->calls++;
  c->got = tr_save((tr_trainer *)ctx->trainer, c->path);
  return HK_CONTINUE;
}
static hk_signal save_badly(hk_ctx *ctx, void *u) {
  caller *c = (caller *)u;
  if (ctx->global_step == 1) { c->calls++; c->got = tr_save((tr_trainer *)ctx->trainer, c->path); }
  return HK_CONTINUE;
}
static hk_signal load_inside(hk_ctx *ctx, void *u) {
  caller *c = (caller *)u;
  if (ctx->global_step == 1) { c->calls++; c->got = tr_load((tr_trainer *)ctx->trainer, c->path); }
  return HK_CONTINUE;
}

static void test_calls_from_hooks(void **state) {
  fixture *f = fixture_new(10, 0, 0);
  char path[300], bad[400];
  caller c;
  hk_handle h;
  (void)state;
  in_dir(path, sizeof path, "nested.ckpt");
  /* tr_save from on_save_checkpoint used to recurse until the stack overflowed */
  memset(&c, 0, sizeof c);
  c.path = path;
  assert_int_equal(hk_on(f->t.reg, HK_ON_SAVE_CHECKPOINT, save_again, &c, NULL, &h), HK_OK);
  assert_int_equal(tr_save(&f->t, path), TR_OK);
  assert_int_equal(c.calls, 1);
  assert_int_equal(c.got, TR_ERR_INVALID);
  hk_off(f->t.reg, h);
  /* a failing tr_save whose result the hook ignores does not end the fit */
  memset(&c, 0, sizeof c);
  snprintf(bad, sizeof bad, "%s/no/such/dir/x.ckpt", g_dir);
  c.path = bad;
  assert_int_equal(hk_on(f->t.reg, HK_ON_TRAIN_BATCH_END, save_badly, &c, NULL, &h), HK_OK);
  train(f, 3);
  assert_int_equal(c.calls, 1);
  assert_int_equal(c.got, TR_ERR_IO);
  assert_int_equal(f->t.global_step, 3);
  hk_off(f->t.reg, h);
  /* tr_load inside a fit is refused, and the fit goes on */
  memset(&c, 0, sizeof c);
  c.path = path;
  assert_int_equal(hk_on(f->t.reg, HK_ON_TRAIN_BATCH_END, load_inside, &c, NULL, &h), HK_OK);
  f->t.global_step = 0;
  train(f, 3);
  assert_int_equal(c.calls, 1);
  assert_int_equal(c.got, TR_ERR_INVALID);
  assert_int_equal(f->t.global_step, 3);
  fixture_free(f);
}


int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_save_ignores_planted_symlinks),
    cmocka_unit_test(test_save_write_error),
    cmocka_unit_test(test_stale_temporary_files),
    cmocka_unit_test(test_load_rolls_back_on_hook_failure),
    cmocka_unit_test(test_load_rejects_out_of_range_fields),
    cmocka_unit_test(test_checksum_formats),
    cmocka_unit_test(test_load_file_kinds_and_limit),
    cmocka_unit_test(test_load_many_hook_sections),
    cmocka_unit_test(test_missing_hook_state_policy),
    cmocka_unit_test(test_state_check_and_order),
    cmocka_unit_test(test_calls_from_hooks),
  };
  return run_tests_in_dir(tests, "test_ckpt", g_dir); /* one test: TEST_ONLY=test_stale_temporary_files */
}
