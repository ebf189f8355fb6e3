/* tests/test.h - what the cmocka suites share, once: cmocka (extern "C" in the C++ builds), the implementation
   (train.h's and hooks.h's; hooks.h's alone with TEST_HOOKS_ONLY), the C library they use, and three small
   helpers, and run_tests_in_dir (a suite's main in a temporary directory). A suite defines first what must come
   before the implementation (a feature macro, a wrapped call: test_async.c's fsync, TEST_NO_FSYNC), then includes
   this. */
#ifndef TESTS_TEST_H
#define TESTS_TEST_H
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#include <cmocka.h>
#ifdef __cplusplus
}
#endif

#ifndef TEST_IMPL_ELSEWHERE
#define HOOKS_IMPLEMENTATION
#endif
#ifdef TEST_HOOKS_ONLY
#include "hooks.h"
#elif defined(TEST_IMPL_ELSEWHERE)
/* -DTEST_IMPL_ELSEWHERE (the Makefile's cmocka_suite, 5th argument): the implementation is compiled once, in
   tests/test_impl.c, and linked; the suite compiles only its own code, so it includes the headers it uses
   (the implementation's are not there). That object skips fsync. */
#ifndef TEST_NO_FSYNC
#error "tests/test_impl.c's implementation skips fsync: a suite that links it defines TEST_NO_FSYNC, else it compiles its own"
#endif
#include "train.h"
#else
/* TEST_NO_FSYNC, defined by a suite before this: train.h's fsync calls only check the descriptor, no flush
   to the disk (each waits for the disk: test_continue makes 2,700, 10 to 15 s of waiting for 0.6 s of
   CPU). Only a machine's crash loses what a process wrote without fsync, and no suite makes one: a killed
   process's files are read back the same. The suites on the writer and full disks (test_ckpt, test_log,
   test_async with a wrapper of its own) and the rest keep the real fsync. Tests only: train.h has no such
   switch. */
#ifdef TEST_NO_FSYNC
#include <fcntl.h>
#include <unistd.h>
static inline int test_no_fsync(int fd) { return fcntl(fd, F_GETFD) == -1 ? -1 : 0; }
#define fsync test_no_fsync
#endif
#define TRAIN_IMPLEMENTATION
#include "train.h"
#ifdef TEST_NO_FSYNC
#undef fsync
#endif
/* A trainer checkpoint's section checksums rewritten as format `version` has them (the header's version
   left as it is): an edited field then meets only the load's own checks, or an older format is made. */
static inline void ckpt_checksums_as(unsigned char *buf, size_t len, uint32_t version) {
  size_t pos = 16;
  while (pos + 12 <= len) {
    uint64_t size = tr__get(buf + pos + 4, 8), h = tr__section_sum(version, buf + pos, buf + pos + 12, (size_t)size);
    tr__le(buf + pos + 12 + (size_t)size, h, 8);
    pos += 12 + (size_t)size + 8;
  }
}
#endif

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A file's bytes, NUL-terminated, and their count in *len (len may be NULL); NULL and 0 when it cannot be opened.
   The caller frees it. */
static inline char *slurp_len(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *p;
  long n;
  if (len) *len = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  p = (char *)malloc((size_t)n + 1);
  if (fread(p, 1, (size_t)n, f) != (size_t)n) n = 0;
  p[n] = 0;
  fclose(f);
  if (len) *len = (size_t)n;
  return p;
}
static inline char *slurp(const char *path) { return slurp_len(path, NULL); }
/* What a tmpfile() holds now (it stays open, at its end); the caller frees it. */
static inline char *file_text(FILE *f) {
  long n;
  char *p;
  fflush(f);
  n = ftell(f);
  p = (char *)malloc((size_t)n + 1);
  rewind(f);
  if (fread(p, 1, (size_t)n, f) != (size_t)n) n = 0;
  p[n] = 0;
  fseek(f, 0, SEEK_END);
  return p;
}
/* Runs the suite's tests (an array) in a directory of their own: root (a char array) becomes $TMPDIR/NAME.XXXXXX
   (/tmp without TMPDIR), made before and removed after when every test passed and KEEP is not set in the
   environment. TEST_ONLY=test_name runs that test alone. cmocka's count of failures, or 2 when no directory. */
#define run_tests_in_dir(tests, name, root) \
  test__run_in_dir(#tests, tests, sizeof(tests) / sizeof((tests)[0]), name, root, sizeof root)
static inline int test__run_in_dir(const char *group, const struct CMUnitTest *tests, size_t n, const char *name,
                                   char *root, size_t size) {
  const char *tmp = getenv("TMPDIR");
  char cmd[600];
  int rc;
  snprintf(root, size, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
  if (!mkdtemp(root)) { perror(root); return 2; }
  if (getenv("TEST_ONLY")) cmocka_set_test_filter(getenv("TEST_ONLY"));
  /* Started with SIGINT or SIGTERM ignored (a background job of a script): the stop signals the suites raise
     would be ignored too (the library leaves an ignored signal ignored), and their Ctrl-C tests test nothing */
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  rc = _cmocka_run_group_tests(group, tests, n, NULL, NULL);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (rc == 0 && !getenv("KEEP") && system(cmd) != 0) { fprintf(stderr, "%s: could not remove %s\n", name, root); rc = 1; }
  return rc;
}
#ifndef TEST_HOOKS_ONLY
/* What most fits start from: train (val: validation data, NULL for none) for max_epochs epochs, Ctrl-C left to the
   program (tests raise signals of their own); the caller sets what else it tests. */
static inline tr_config test_config(tr_data *train, tr_data *val, int64_t max_epochs) {
  tr_config c;
  memset(&c, 0, sizeof c);
  c.train = train;
  c.val = val;
  c.max_epochs = max_epochs;
  c.no_sigint = 1;
  return c;
}
/* Random-access data: count and get, handed user. */
static inline tr_data test_data(int64_t (*count)(void *), int (*get)(void *, int64_t, void **), void *user) {
  tr_data d;
  memset(&d, 0, sizeof d);
  d.count = count;
  d.get = get;
  d.user = user;
  return d;
}
/* An HK_ON_LOG hook that counts the records by stage into user, an int[2]: train, val. */
static inline hk_signal count_records(hk_ctx *ctx, void *user) {
  const tr_log_record *r = tr_log_current(ctx);
  int *n = (int *)user;
  if (r && !strcmp(r->stage, "train")) n[0]++;
  if (r && !strcmp(r->stage, "val")) n[1]++;
  return HK_CONTINUE;
}
/* e is TR_ERR_INVALID and t's error says needle (a constructor's refusal). */
static inline void expect_bad(tr_trainer *t, tr_err e, const char *needle) {
  assert_int_equal(e, TR_ERR_INVALID);
  if (!strstr(hk_last_error(t->reg), needle)) fail_msg("error '%s' lacks '%s'", hk_last_error(t->reg), needle);
}
/* spec is refused on t's registry and the error says needle. */
static inline void expect_bad_spec(tr_trainer *t, const char *spec, const char *needle) {
  assert_int_not_equal(hk_spec_apply(t->reg, spec), HK_OK);
  if (!strstr(hk_last_error(t->reg), needle)) fail_msg("spec '%s': error '%s' lacks '%s'", spec, hk_last_error(t->reg), needle);
}
/* spec (every battery known) is refused, and the error says says. */
static inline void expect_spec_refused(const char *spec, const char *says) {
  hk_registry *reg = hk_create(NULL);
  assert_int_equal(tr_add_factories(reg), HK_OK);
  assert_int_not_equal(hk_spec_apply(reg, spec), HK_OK);
  if (!strstr(hk_last_error(reg), says)) fail_msg("%s: '%s' does not say '%s'", spec, hk_last_error(reg), says);
  hk_destroy(reg);
}
#endif
/* What a trainer or a run writes to its log (desc.log = l.f), kept in memory: memlog_open, memlog_text (all of it so
   far), memlog_close. */
typedef struct memlog { FILE *f; char *text; size_t len; } memlog;
static inline FILE *memlog_open(memlog *l) { l->text = NULL; l->len = 0; return l->f = open_memstream(&l->text, &l->len); }
static inline const char *memlog_text(memlog *l) { fflush(l->f); return l->text ? l->text : ""; }
static inline void memlog_close(memlog *l) { fclose(l->f); free(l->text); }
/* How many times needle stands in text, not overlapping. */
static inline int count_of(const char *text, const char *needle) {
  int n = 0;
  const char *p = text;
  while ((p = strstr(p, needle)) != NULL) { n++; p += strlen(needle); }
  return n;
}
/* How many times needle stands in what the tmpfile() f holds now. */
static inline int count_in(FILE *f, const char *needle) {
  char *text = file_text(f);
  int n = count_of(text, needle);
  free(text);
  return n;
}
/* Empties the tmpfile() f (the next run's log starts there). */
static inline void empty_file(FILE *f) {
  rewind(f);
  assert_int_equal(ftruncate(fileno(f), 0), 0);
}
/* A loop of two floats, loss = 1 + p0^2 (test_continue, test_own_run): the members its struct opens with,
   and its model bound to the context (p starts at {1, 0}). */
#define TWO_FLOAT_LOOP hk_registry *reg; hk_ctx ctx; hk_flow flow; float p[2], g[2]; hk_tensor pv, gv
#define two_float_bind(l)                                                                  \
  ((l)->p[0] = 1.0f, (l)->pv = (hk_tensor){ "p", (l)->p, 2, 0 },                          \
   (l)->gv = (hk_tensor){ "p", (l)->g, 2, 0 }, (l)->ctx.params = &(l)->pv,                \
   (l)->ctx.grads = &(l)->gv, (l)->ctx.n_tensors = 1)
#endif
