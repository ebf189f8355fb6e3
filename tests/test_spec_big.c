/* tests/test_spec_big.c - spec error positions past 2 GiB (they used to be ints and overflowed).
   A spec of about 2.2 GB: a valid item, a newline, 2^31 + 100 spaces, then a bad value. The error
   must say line 2 and the exact column. Needs about 4.5 GB of memory; prints "skipped" and succeeds
   when it cannot get it. Run once, plain (make test-spec-big), not under valgrind or ASan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define HOOKS_IMPLEMENTATION
#include "hooks.h"

static hk_err make(hk_registry *reg, const hk_args *a, void *user) { (void)reg; (void)a; (void)user; return HK_OK; }
static const hk_param params[] = { { "i", HK_PARAM_INT, "0", NULL, "an integer" } };

int main(void) {
  const size_t spaces = ((size_t)1 << 31) + 100;
  const char *head = "big(i=1);\n", *tail = "big(i=x)";
  size_t n = strlen(head) + spaces + strlen(tail);
  char *spec = (char *)malloc(n + 1), want[160];
  hk_registry *reg = hk_create(NULL);
  int ok;
  if (!spec || !reg) { printf("test_spec_big: skipped: not enough memory for a %zu-byte spec\n", n); free(spec); hk_destroy(reg); return 0; }
  memcpy(spec, head, strlen(head));
  memset(spec + strlen(head), ' ', spaces);
  memcpy(spec + strlen(head) + spaces, tail, strlen(tail) + 1);
  hk_factory_add(reg, "big", params, 1, make, NULL, "one int");
  /* the bad value starts after the spaces and "big(i=": column spaces + 7 of line 2 */
  snprintf(want, sizeof want, "spec error at 2:%llu: bad value 'x' for 'i' of 'big': expected an integer such as 3",
           (unsigned long long)spaces + 7);
  ok = hk_spec_check(reg, spec) == HK_ERR_SPEC && strcmp(hk_last_error(reg), want) == 0;
  printf("test_spec_big: %s\n  got:  %s\n  want: %s\n", ok ? "ok" : "FAILED", hk_last_error(reg), want);
  free(spec);
  hk_destroy(reg);
  return !ok;
}
