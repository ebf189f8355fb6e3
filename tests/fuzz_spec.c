/* tests/fuzz_spec.c - libFuzzer target for the spec parser (hk_spec_check / hk_spec_apply).

   Build:  clang -g -O1 -fsanitize=fuzzer,address,undefined -I. tests/fuzz_spec.c -lm
   Run:    ./fuzz_spec -max_total_time=20 corpus_dir tests/fuzz_corpus       (make test-fuzz-spec)

   Each input (bytes, NUL-terminated copy) is checked and applied on a fresh registry that has a
   few factories declaring every parameter type. Besides memory errors (ASan/UBSan), the target
   aborts when an invariant breaks:
     - check and apply agree: a spec that fails hk_spec_check fails hk_spec_apply with the same code,
       and then no factory is called;
     - apply is all or nothing: after a failure, exactly the registrations from before are live;
     - every callback a factory created is destroyed exactly once (on rollback or at hk_destroy);
     - a failure leaves a readable message in hk_last_error, with a line:column for spec errors;
     - factories only ever see declared keys, with values of the declared type. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOOKS_IMPLEMENTATION
#include "hooks.h"

static int g_calls, g_created, g_destroyed;

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz_spec: invariant failed: %s (line %d)\n", #c, __LINE__); abort(); } } while (0)

static void quiet(const char *msg, void *user) { (void)msg; (void)user; }
static void cb_destroy(void *user) { (void)user; g_destroyed++; }
static hk_signal noop(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_CONTINUE; }

static const hk_param all_params[] = {
  { "i", HK_PARAM_INT, "0", NULL, "an integer" },
  { "d", HK_PARAM_DOUBLE, "1.5", NULL, "a double" },
  { "b", HK_PARAM_BOOL, "false", NULL, "a bool" },
  { "s", HK_PARAM_STRING, NULL, NULL, "a required string: the callback's name" },
  { "c", HK_PARAM_CHOICE, "ok", "ok|fail|dup", "what the factory does" },
};
static const hk_param few_params[] = {
  { "every", HK_PARAM_INT, "1", NULL, "filter: every N calls (negative is rejected by hk_on)" },
  { "name", HK_PARAM_STRING, "few", NULL, "hook name" },
};

static void check_args(const hk_args *a, const hk_param *params, int n) {
  int k;
  CHECK(a->n == n);
  for (k = 0; k < n; k++) {
    const char *s;
    CHECK(a->v[k].key && !strcmp(a->v[k].key, params[k].key));
    CHECK(a->v[k].type == params[k].type);
    CHECK(a->v[k].given || params[k].def); /* required keys are always given */
    s = hk_arg_str(a, params[k].key);
    CHECK(s != NULL);
    (void)strlen(s);
    if (params[k].type == HK_PARAM_BOOL) CHECK(hk_arg_bool(a, params[k].key) == 0 || hk_arg_bool(a, params[k].key) == 1);
  }
  CHECK(hk_arg_str(a, "undeclared") == NULL);
  CHECK(hk_arg_given(a, "undeclared") == 0);
}

static hk_err make_all(hk_registry *reg, const hk_args *a, void *user) {
  hk_callback cb;
  const char *c = hk_arg_str(a, "c");
  hk_err e;
  (void)user;
  g_calls++;
  check_args(a, all_params, 5);
  CHECK(!strcmp(c, "ok") || !strcmp(c, "fail") || !strcmp(c, "dup"));
  (void)hk_arg_int(a, "i");
  (void)hk_arg_double(a, "d");
  memset(&cb, 0, sizeof cb);
  cb.name = !strcmp(c, "dup") ? "pre" : hk_arg_str(a, "s");
  cb.on_train_batch_end = noop;
  cb.destroy = cb_destroy;
  e = hk_add_callback(reg, &cb, NULL, NULL);
  if (e == HK_OK) g_created++;
  if (e == HK_OK && !strcmp(c, "fail")) return HK_ERR_STATE;
  return e;
}

static hk_err make_few(hk_registry *reg, const hk_args *a, void *user) {
  hk_opts o;
  (void)user;
  g_calls++;
  check_args(a, few_params, 2);
  memset(&o, 0, sizeof o);
  o.name = hk_arg_str(a, "name");
  o.filter.every = hk_arg_int(a, "every");
  return hk_on(reg, HK_ON_TRAIN_BATCH_END, noop, NULL, &o, NULL);
}

static hk_err make_none(hk_registry *reg, const hk_args *a, void *user) {
  (void)user;
  g_calls++;
  CHECK(a->n == 0);
  return hk_on(reg, HK_ON_VALIDATION_END, noop, NULL, NULL, NULL);
}

static int live(hk_registry *reg) {
  int e, n = 0;
  for (e = 0; e < HK_EVENT_COUNT; e++) n += hk_count(reg, e);
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hk_desc d;
  hk_registry *reg;
  hk_callback pre;
  char *spec = (char *)malloc(size + 1);
  int before, calls_before;
  hk_err e1, e2;
  if (!spec) return 0;
  memcpy(spec, data, size);
  spec[size] = 0;

  memset(&d, 0, sizeof d);
  d.log = quiet;
  d.max_hooks = 16; /* specs with many items also reach HK_ERR_FULL */
  reg = hk_create(&d);
  CHECK(reg != NULL);
  CHECK(hk_factory_add(reg, "all", all_params, 5, make_all, NULL, "every parameter type") == HK_OK);
  CHECK(hk_factory_add(reg, "few", few_params, 2, make_few, NULL, "two parameters with defaults") == HK_OK);
  CHECK(hk_factory_add(reg, "none", NULL, 0, make_none, NULL, "no parameters") == HK_OK);
  g_calls = g_created = g_destroyed = 0;
  memset(&pre, 0, sizeof pre);
  pre.name = "pre";
  pre.on_train_batch_end = noop;
  pre.destroy = cb_destroy;
  CHECK(hk_add_callback(reg, &pre, NULL, NULL) == HK_OK);
  g_created++;

  before = live(reg);
  e1 = hk_spec_check(reg, spec);
  CHECK(g_calls == 0);
  CHECK(e1 == HK_OK || e1 == HK_ERR_SPEC);
  if (e1 != HK_OK) {
    const char *m = hk_last_error(reg);
    CHECK(m && *m);
    CHECK(strstr(m, "1:") || strchr(spec, '\n')); /* line:column */
  }
  calls_before = g_calls;
  e2 = hk_spec_apply(reg, spec);
  if (e1 != HK_OK) {
    CHECK(e2 == e1);
    CHECK(g_calls == calls_before);
  }
  if (e2 != HK_OK) {
    const char *m = hk_last_error(reg);
    CHECK(m && *m);
    CHECK(live(reg) == before);           /* all or nothing */
    CHECK(hk_find(reg, "pre") > 0);       /* what was there before is untouched */
    CHECK(g_created - g_destroyed == 1);  /* only "pre" is alive */
  } else {
    CHECK(live(reg) >= before + (g_calls > 0));
  }
  hk_destroy(reg);
  CHECK(g_destroyed == g_created);        /* each callback destroyed exactly once */
  free(spec);
  return 0;
}
