/* tests/test_spec.c - the spec parser's hardening: strict numbers and their ranges, both quote
   styles, unterminated strings, messages that never cut a UTF-8 character and always end with what
   was expected, and factories that change the registry or the factory table while a spec is applied.
   (Positions past 2 GiB: tests/test_spec_big.c.) Built by tests/spec.mk: plain, ASan+UBSan, valgrind. */
#define TEST_HOOKS_ONLY
#include "test.h"

static hk_signal noop(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_CONTINUE; }
static void quiet(const char *msg, void *user) { (void)msg; (void)user; }

static hk_args g_last;   /* the arguments of the last successful make */
static char g_s[256];
static hk_handle g_last_handle;
static hk_err make_all(hk_registry *reg, const hk_args *a, void *user) {
  static int n;
  char name[32];
  (void)user;
  g_last = *a;
  snprintf(g_s, sizeof g_s, "%s", hk_arg_str(a, "s") ? hk_arg_str(a, "s") : "");
  snprintf(name, sizeof name, "all#%d", n++);
  return hk_on(reg, HK_SETUP, noop, NULL, &(hk_opts){ .name = name }, &g_last_handle);
}
static const hk_param all_params[] = {
  { "i", HK_PARAM_INT, "0", NULL, "an integer" },
  { "d", HK_PARAM_DOUBLE, "1.5", NULL, "a double" },
  { "s", HK_PARAM_STRING, "x", NULL, "a string" },
};

static hk_registry *mkreg(void) {
  hk_desc d;
  hk_registry *reg;
  memset(&d, 0, sizeof d);
  d.log = quiet;
  reg = hk_create(&d);
  assert_non_null(reg);
  assert_int_equal(hk_factory_add(reg, "all", all_params, 3, make_all, NULL, "every type"), HK_OK);
  return reg;
}

/* The spec fails with HK_ERR_SPEC (check and apply alike) and the message is exactly `want`. */
static void expect_error(hk_registry *reg, const char *spec, const char *want) {
  assert_int_equal(hk_spec_check(reg, spec), HK_ERR_SPEC);
  if (strcmp(hk_last_error(reg), want) != 0) fail_msg("spec \"%s\"\n  got:  %s\n  want: %s", spec, hk_last_error(reg), want);
  assert_int_equal(hk_spec_apply(reg, spec), HK_ERR_SPEC);
}

static void test_numbers_strict(void **state) {
  hk_registry *reg = mkreg();
  static const char *const bad_d[] = { "nan", "inf", "-inf", "infinity", "0x1p3", "1e", "1.2.3", "--1", "1e+", "." };
  size_t k;
  char spec[64], want[256];
  (void)state;
  for (k = 0; k < sizeof bad_d / sizeof bad_d[0]; k++) {
    snprintf(spec, sizeof spec, "all(d=%s)", bad_d[k]);
    snprintf(want, sizeof want, "spec error at 1:7: bad value '%s' for 'd' of 'all': expected a number such as 0.001 or 1e-3", bad_d[k]);
    expect_error(reg, spec, want);
  }
  expect_error(reg, "all(i=\" 5\")", "spec error at 1:7: bad value ' 5' for 'i' of 'all': expected an integer such as 3");
  expect_error(reg, "all(i=\"5 \")", "spec error at 1:7: bad value '5 ' for 'i' of 'all': expected an integer such as 3");
  expect_error(reg, "all(i=1.0)", "spec error at 1:7: bad value '1.0' for 'i' of 'all': expected an integer such as 3");
  /* what is accepted */
  assert_int_equal(hk_spec_apply(reg, "all(i=+5, d=-.5)"), HK_OK);
  assert_true(g_last.v[0].i == 5 && g_last.v[1].d == -0.5);
  assert_int_equal(hk_spec_apply(reg, "all(i=-9223372036854775808, d=5.)"), HK_OK);
  assert_true(g_last.v[0].i == INT64_MIN && g_last.v[1].d == 5.0);
  assert_int_equal(hk_spec_apply(reg, "all(d=1E+3)"), HK_OK);
  assert_true(g_last.v[1].d == 1000.0);
  assert_int_equal(hk_spec_apply(reg, "all(d=1e-310)"), HK_OK); /* subnormal: kept */
  assert_true(g_last.v[1].d > 0 && g_last.v[1].d < 1e-300);
  hk_destroy(reg);
}

static void test_numbers_out_of_range(void **state) {
  hk_registry *reg = mkreg();
  (void)state;
  expect_error(reg, "all(i=99999999999999999999)", "spec error at 1:7: value '99999999999999999999' for 'i' of 'all' is out of "
               "range: integers are -9223372036854775808..9223372036854775807");
  expect_error(reg, "all(i=-9223372036854775809)", "spec error at 1:7: value '-9223372036854775809' for 'i' of 'all' is out of "
               "range: integers are -9223372036854775808..9223372036854775807");
  expect_error(reg, "all(d=1e400)", "spec error at 1:7: value '1e400' for 'd' of 'all' is out of range: beyond +-1.8e308");
  expect_error(reg, "all(d=-1e400)", "spec error at 1:7: value '-1e400' for 'd' of 'all' is out of range: beyond +-1.8e308");
  expect_error(reg, "all(d=1e-400)", "spec error at 1:7: value '1e-400' for 'd' of 'all' is out of range: too close to 0 (the "
               "smallest magnitude is about 4.9e-324), write 0");
  hk_destroy(reg);
}

static void test_quotes(void **state) {
  hk_registry *reg = mkreg();
  (void)state;
  assert_int_equal(hk_spec_apply(reg, "all(s='val/loss')"), HK_OK);
  assert_string_equal(g_s, "val/loss");
  assert_int_equal(hk_spec_apply(reg, "all(s='it\\'s, \"quoted\"')"), HK_OK);
  assert_string_equal(g_s, "it's, \"quoted\"");
  assert_int_equal(hk_spec_apply(reg, "all(s=\"a'b\\'c\")"), HK_OK);
  assert_string_equal(g_s, "a'b'c");
  assert_int_equal(hk_spec_apply(reg, "all(i='7')"), HK_OK); /* a quoted number is still a number */
  assert_true(g_last.v[0].i == 7);
  expect_error(reg, "all(s=it's)", "spec error at 1:9: expected ',' or ')' after the value of 's', found ''s)'");
  /* unterminated, also when the last character is a backslash that escapes nothing */
  expect_error(reg, "all(s=\"abc\\", "spec error at 1:7: unterminated string: the '\"' here has no closing '\"'");
  expect_error(reg, "all(s='abc", "spec error at 1:7: unterminated string: the \"'\" here has no closing \"'\"");
  expect_error(reg, "all(s='a\\qb')", "spec error at 1:9: unknown escape '\\q' in a string (valid: \\\" \\' \\\\ \\n \\t)");
  expect_error(reg, "all(s='a\\\xc3\xa9')", "spec error at 1:9: unknown escape '\\\xc3\xa9' in a string (valid: \\\" \\' \\\\ \\n \\t)");
  hk_destroy(reg);
}

/* No message ends inside a UTF-8 character. */
static int valid_utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    int n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0, i;
    if (!n) return 0;
    for (i = 1; i < n; i++) if ((p[i] & 0xC0) != 0x80) return 0;
    p += n;
  }
  return 1;
}

static void test_messages_utf8_and_long_values(void **state) {
  hk_registry *reg = mkreg();
  char *spec;
  size_t n = 10000;
  const char *msg, *tail = "expected an integer such as 3";
  (void)state;
  /* 'a' then e-acute (2 bytes) x 8: the 12-byte quote would end inside the 6th e-acute */
  expect_error(reg, "all(s=x) a\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9",
               "spec error at 1:10: expected ';' between callbacks, found 'a\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9'");
  assert_true(valid_utf8(hk_last_error(reg)));
  /* a 10 KB bad value: quoted in short, and the message still ends with what was expected */
  spec = (char *)malloc(n + 16);
  memcpy(spec, "all(i=", 6);
  memset(spec + 6, 'x', n);
  memcpy(spec + 6 + n, ")", 2);
  assert_int_equal(hk_spec_check(reg, spec), HK_ERR_SPEC);
  msg = hk_last_error(reg);
  assert_non_null(strstr(msg, "bad value 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (10000 bytes)' for 'i' of 'all'"));
  assert_string_equal(msg + strlen(msg) - strlen(tail), tail);
  /* the same with a multi-byte character across the 40-byte cut */
  memset(spec + 6, 'x', n);
  memcpy(spec + 6 + 39, "\xc3\xa9", 2);
  assert_int_equal(hk_spec_check(reg, spec), HK_ERR_SPEC);
  assert_true(valid_utf8(hk_last_error(reg)));
  assert_non_null(strstr(hk_last_error(reg), "... (10000 bytes)"));
  free(spec);
  hk_destroy(reg);
}

/* Factories that change things while a spec is applied. */
static int g_added;
static hk_err make_adder(hk_registry *reg, const hk_args *a, void *user) {
  char name[32];
  int k;
  (void)a; (void)user;
  for (k = 0; k < 64; k++) { /* enough to make the factory map grow and move */
    snprintf(name, sizeof name, "added_%d_%d", g_added, k);
    if (hk_factory_add(reg, name, all_params, 3, make_all, NULL, "added by a factory") != HK_OK) return HK_ERR_INVALID;
  }
  g_added++;
  return hk_on(reg, HK_TEARDOWN, noop, NULL, NULL, NULL);
}
static hk_err make_nested(hk_registry *reg, const hk_args *a, void *user) {
  (void)user;
  return hk_spec_apply(reg, hk_arg_str(a, "spec"));
}
static hk_handle g_first;
static hk_err make_remover(hk_registry *reg, const hk_args *a, void *user) {
  (void)a; (void)user;
  return hk_off(reg, g_first);
}
static const hk_param nested_params[] = { { "spec", HK_PARAM_STRING, NULL, NULL, "the inner spec" } };

static void test_factories_that_change_things(void **state) {
  hk_registry *reg = mkreg();
  (void)state;
  g_added = 0;
  assert_int_equal(hk_factory_add(reg, "adder", NULL, 0, make_adder, NULL, "adds factories"), HK_OK);
  assert_int_equal(hk_factory_add(reg, "nested", nested_params, 1, make_nested, NULL, "applies a spec"), HK_OK);
  assert_int_equal(hk_factory_add(reg, "remover", NULL, 0, make_remover, NULL, "removes the first hook"), HK_OK);
  /* a make() that adds factories, then more items after it (the parser kept copies, not pointers) */
  assert_int_equal(hk_spec_apply(reg, "adder; all(i=3); adder; all(i=4)"), HK_OK);
  assert_int_equal(g_added, 2);
  assert_true(g_last.v[0].i == 4);
  assert_int_equal(hk_spec_apply(reg, "added_1_63(i=9)"), HK_OK); /* what it added works */
  assert_true(g_last.v[0].i == 9);
  /* a nested spec: its registrations are undone with the outer ones when a later item fails */
  assert_int_equal(hk_count(reg, HK_SETUP), 3);
  assert_int_equal(hk_spec_apply(reg, "nested(spec='all; all'); nested(spec='nope')"), HK_ERR_SPEC);
  assert_int_equal(hk_count(reg, HK_SETUP), 3);
  assert_int_equal(hk_spec_apply(reg, "nested(spec='all; all')"), HK_OK);
  assert_int_equal(hk_count(reg, HK_SETUP), 5);
  /* a make() that removes an earlier item's registration; the rollback after a failure skips it */
  assert_int_equal(hk_spec_apply(reg, "all"), HK_OK);
  g_first = g_last_handle;
  assert_int_equal(hk_count(reg, HK_SETUP), 6);
  assert_int_equal(hk_spec_apply(reg, "all; remover; nested(spec='nope')"), HK_ERR_SPEC);
  assert_int_equal(hk_count(reg, HK_SETUP), 5); /* the earlier hook was removed for real; the new one undone */
  assert_int_equal(hk_is_enabled(reg, g_first), 0);
  hk_destroy(reg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_numbers_strict),
    cmocka_unit_test(test_numbers_out_of_range),
    cmocka_unit_test(test_quotes),
    cmocka_unit_test(test_messages_utf8_and_long_values),
    cmocka_unit_test(test_factories_that_change_things),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
