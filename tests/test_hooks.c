/* tests/test_hooks.c - cmocka unit tests for hooks.h (registry, dispatch, order, signals, filters,
   errors, trace, metrics, state, custom events, factories and spec strings).

   Every test asserts exact sequences and values: a call log (g_log) records which hooks ran, in which
   order; a log sink (g_msgs) captures what the registry reports through hk_desc.log.

   Built by tests/hooks.mk: plain (run directly and under valgrind) and with $(SAN). */
#define TEST_HOOKS_ONLY
#include "test.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static char g_log[8192];    /* space-separated tags of the hooks that ran */
static char g_msgs[16384];  /* everything reported through hk_desc.log, one message per line */
static int g_nmsgs;

static void log_reset(void) { g_log[0] = 0; g_msgs[0] = 0; g_nmsgs = 0; }
static void log_add(const char *s) {
  size_t n = strlen(g_log);
  snprintf(g_log + n, sizeof g_log - n, "%s%s", n ? " " : "", s);
}
static void cap_log(const char *message, void *user) {
  size_t n = strlen(g_msgs);
  (void)user;
  snprintf(g_msgs + n, sizeof g_msgs - n, "%s\n", message ? message : "(null)");
  g_nmsgs++;
}

/* A recording hook: appends its tag, counts its calls, returns a configured signal. */
typedef struct rec_t { const char *tag; hk_signal ret; int calls; } rec_t;
static hk_signal rec(hk_ctx *ctx, void *user) {
  rec_t *r = (rec_t *)user;
  (void)ctx;
  r->calls++;
  log_add(r->tag);
  return r->ret;
}

/* Registries made by a test; a failing assertion leaves the test early, and the teardown frees what
   it left behind, so the sanitizer and valgrind runs report only real leaks. */
static hk_registry *g_regs[16];
static int g_nregs;

static hk_registry *mkreg_desc(hk_desc d) {
  hk_registry *reg;
  if (!d.log) d.log = cap_log;
  reg = hk_create(&d);
  assert_non_null(reg);
  if (g_nregs < (int)(sizeof g_regs / sizeof g_regs[0])) g_regs[g_nregs++] = reg;
  log_reset();
  return reg;
}
static void destroy_reg(hk_registry *reg) {
  int i;
  for (i = 0; i < g_nregs; i++)
    if (g_regs[i] == reg) { g_regs[i] = g_regs[--g_nregs]; break; }
  hk_destroy(reg);
}
static int cleanup(void **state) {
  (void)state;
  while (g_nregs > 0) hk_destroy(g_regs[--g_nregs]);
  return 0;
}
static hk_registry *mkreg(void) { hk_desc d; memset(&d, 0, sizeof d); return mkreg_desc(d); }

static hk_opts opts_named(const char *name) { hk_opts o; memset(&o, 0, sizeof o); o.name = name; return o; }

static hk_handle on_named(hk_registry *reg, int ev, hk_fn fn, void *user, const char *name) {
  hk_opts o = opts_named(name);
  hk_handle h = 0;
  assert_int_equal(hk_on(reg, ev, fn, user, &o, &h), HK_OK);
  assert_true(h > 0);
  return h;
}
static hk_handle on_opts(hk_registry *reg, int ev, rec_t *r, hk_opts o) {
  hk_handle h = 0;
  if (!o.name) o.name = r->tag;
  assert_int_equal(hk_on(reg, ev, rec, r, &o, &h), HK_OK);
  assert_true(h > 0);
  return h;
}
static hk_handle on_rec(hk_registry *reg, int ev, rec_t *r) { return on_named(reg, ev, rec, r, r->tag); }

static hk_ctx ctx0(void) { hk_ctx c; memset(&c, 0, sizeof c); return c; }

/* A fatal failure is reported through ctx->hook_failure only (the loop reports it): fire() keeps it. */
static char g_failure[600];
static hk_signal fire(hk_registry *reg, int ev) {
  hk_ctx c = ctx0();
  hk_signal s = HK_FIRE(reg, ev, &c);
  snprintf(g_failure, sizeof g_failure, "%s", c.hook_failure ? c.hook_failure : "");
  hk_ctx_free(&c);
  return s;
}

/* Reads everything written to a tmpfile() so far. */
static void slurp_into(FILE *f, char *buf, size_t cap) {
  size_t n;
  fflush(f);
  rewind(f);
  n = fread(buf, 1, cap - 1, f);
  buf[n] = 0;
}

static int count_lines(const char *s) { int n = 0; for (; *s; s++) n += *s == '\n'; return n; }
static int leading_spaces(const char *line) {
  int n = 0;
  while (line[n] == ' ' || line[n] == '\t' || line[n] == '|' || line[n] == '-' || line[n] == '`' ||
         (unsigned char)line[n] >= 0x80)
    n++;
  return n;
}
/* The line of `text` containing `needle`, copied into buf (without the newline). */
static const char *line_with(const char *text, const char *needle, char *buf, size_t cap) {
  const char *p = strstr(text, needle), *b, *e;
  size_t n;
  if (!p) return NULL;
  for (b = p; b > text && b[-1] != '\n'; b--) {}
  for (e = p; *e && *e != '\n'; e++) {}
  n = (size_t)(e - b) < cap - 1 ? (size_t)(e - b) : cap - 1;
  memcpy(buf, b, n);
  buf[n] = 0;
  return buf;
}

#define assert_contains(hay, needle)                                                     \
  do {                                                                                   \
    const char *hay_ = (hay), *needle_ = (needle);                                       \
    if (!hay_ || !strstr(hay_, needle_))                                                 \
      fail_msg("expected \"%s\" in \"%s\"", needle_, hay_ ? hay_ : "(null)");            \
  } while (0)
#define assert_not_contains(hay, needle)                                                 \
  do {                                                                                   \
    const char *hay_ = (hay), *needle_ = (needle);                                       \
    if (hay_ && strstr(hay_, needle_))                                                   \
      fail_msg("did not expect \"%s\" in \"%s\"", needle_, hay_);                        \
  } while (0)

/* ---- names and the event table ----------------------------------------------------------------- */

static void test_event_table_accessors(void **state) {
  (void)state;
#define X(NAME, name, pairing, signals, doc)                                  \
  assert_string_equal(hk_event_name(NULL, HK_##NAME), #name);                        \
  assert_string_equal(hk_event_doc(HK_##NAME), doc);                                 \
  assert_int_equal(hk_event_flags(NULL, HK_##NAME), (pairing));                      \
  assert_int_equal(hk_event_signals(NULL, HK_##NAME), (signals));
  HK_EVENTS(X)
#undef X
#define X(sym, name, doc)                                                            \
  assert_string_equal(hk_signal_name(sym), #name);                                   \
  assert_string_equal(hk_signal_doc(sym), doc);
  HK_SIGNALS(X)
#undef X
  {
    hk_registry *reg = mkreg();
    assert_int_equal(hk_event_find(reg, "on_fit_start"), HK_ON_FIT_START);
    assert_int_equal(hk_event_find(reg, "teardown"), HK_TEARDOWN);
    assert_int_equal(hk_event_find(reg, "on_fit_star"), -1);
    assert_int_equal(hk_event_find(reg, ""), -1);
    assert_string_equal(hk_event_name(reg, HK_ON_TRAIN_BATCH_END), "on_train_batch_end");
    destroy_reg(reg);
  }
  /* names of the small enums exist and are distinct */
  assert_non_null(hk_tier_name(HK_TIER_CALLBACK));
  assert_non_null(hk_tier_name(HK_TIER_MODEL));
  assert_non_null(hk_tier_name(HK_TIER_STRATEGY));
  assert_string_not_equal(hk_tier_name(HK_TIER_CALLBACK), hk_tier_name(HK_TIER_MODEL));
  assert_string_not_equal(hk_tier_name(HK_TIER_MODEL), hk_tier_name(HK_TIER_STRATEGY));
  assert_non_null(hk_stage_name(HK_STAGE_FIT));
  assert_string_not_equal(hk_stage_name(HK_STAGE_FIT), hk_stage_name(HK_STAGE_TEST));
  {
    int e, f;
    for (e = 0; e < HK_ERR_COUNT; e++) {
      assert_non_null(hk_err_name((hk_err)e));
      for (f = 0; f < e; f++) assert_string_not_equal(hk_err_name((hk_err)e), hk_err_name((hk_err)f));
    }
  }
  /* out of range must not crash (value unspecified) */
  (void)hk_event_name(NULL, -1);
  (void)hk_event_name(NULL, HK_MAX_EVENTS + 5);
  (void)hk_event_doc(-1);
  (void)hk_signal_name((hk_signal)99);
  (void)hk_err_name((hk_err)99);
}

/* ---- HK_FIRE / HK_ACTIVE ----------------------------------------------------------------------- */

typedef struct seen_ctx_t { hk_registry *reg; int event; hk_handle self; int calls; } seen_ctx_t;
static hk_signal see_ctx(hk_ctx *ctx, void *user) {
  seen_ctx_t *s = (seen_ctx_t *)user;
  s->reg = ctx->reg;
  s->event = ctx->event;
  s->self = ctx->self;
  s->calls++;
  return HK_SKIP_STEP;
}

static void test_fire_is_expression_and_active(void **state) {
  hk_registry *reg = mkreg();
  seen_ctx_t a;
  hk_ctx c = ctx0();
  hk_signal s;
  hk_handle h;
  (void)state;
  memset(&a, 0, sizeof a);

  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_BATCH_END));
  s = HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c);
  assert_int_equal(s, HK_CONTINUE);
  assert_int_equal(c.hk__seq, 0); /* nothing registered: the out-of-line dispatch was not entered
                                     (white-box: every dispatch bumps the private hk__seq) */

  h = on_named(reg, HK_ON_TRAIN_BATCH_END, see_ctx, &a, "see");
  assert_true(HK_ACTIVE(reg, HK_ON_TRAIN_BATCH_END));
  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_BATCH_START));
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_END), 1);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_START), 0);

  /* usable directly in expressions; the hook sees reg, event and its own handle */
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c), HK_SKIP_STEP);
  assert_int_equal(a.event, HK_ON_TRAIN_BATCH_END);
  assert_ptr_equal(a.reg, reg);
  assert_int_equal(a.self, h);
  assert_int_equal(c.hk__seq, 1);
  assert_true(HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c) == HK_SKIP_STEP ? 1 : 0);
  assert_int_equal(a.calls, 2);

  assert_int_equal(hk_disable(reg, h), HK_OK);
  assert_false(hk_is_enabled(reg, h));
  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_BATCH_END));
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_END), 0);
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c), HK_CONTINUE);
  assert_int_equal(a.calls, 2);

  assert_int_equal(hk_enable(reg, h), HK_OK);
  assert_true(hk_is_enabled(reg, h));
  assert_true(HK_ACTIVE(reg, HK_ON_TRAIN_BATCH_END));
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c), HK_SKIP_STEP);
  assert_int_equal(a.calls, 3);

  assert_int_equal(hk_off(reg, h), HK_OK);
  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_BATCH_END));
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c), HK_CONTINUE);
  assert_int_equal(a.calls, 3);
  assert_int_equal(g_nmsgs, 0);
  hk_ctx_free(&c);
  destroy_reg(reg);
}

/* A hook may fire another event on the same ctx: the inner hook sees the inner event, the outer
   hook its own event and handle again afterwards. */
typedef struct nest_t { int inner_event, outer_event_after; hk_handle outer_self_after, self; } nest_t;
static nest_t g_nest;
static hk_signal inner_hook(hk_ctx *ctx, void *user) { (void)user; g_nest.inner_event = ctx->event; return HK_SKIP_STEP; }
static hk_signal outer_hook(hk_ctx *ctx, void *user) {
  hk_signal s;
  (void)user;
  g_nest.self = ctx->self;
  s = HK_FIRE(ctx->reg, HK_ON_GRADIENT_CLIP, ctx);
  g_nest.outer_event_after = ctx->event;
  g_nest.outer_self_after = ctx->self;
  return s == HK_SKIP_STEP ? HK_STOP_EPOCH : HK_CONTINUE;
}
static void test_fire_nested(void **state) {
  hk_registry *reg = mkreg();
  (void)state;
  memset(&g_nest, 0, sizeof g_nest);
  on_named(reg, HK_ON_BEFORE_OPTIMIZER_STEP, outer_hook, NULL, "outer");
  on_named(reg, HK_ON_GRADIENT_CLIP, inner_hook, NULL, "inner");
  assert_int_equal(fire(reg, HK_ON_BEFORE_OPTIMIZER_STEP), HK_STOP_EPOCH);
  assert_int_equal(g_nest.inner_event, HK_ON_GRADIENT_CLIP);
  assert_int_equal(g_nest.outer_event_after, HK_ON_BEFORE_OPTIMIZER_STEP);
  assert_int_equal(g_nest.outer_self_after, g_nest.self);
  assert_int_equal(g_nest.self, hk_find(reg, "outer"));
  destroy_reg(reg);
}

static void test_registered_disabled(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_CONTINUE, 0 };
  hk_opts o = opts_named("a");
  hk_handle h;
  (void)state;
  o.disabled = 1;
  h = on_opts(reg, HK_ON_TRAIN_START, &a, o);
  assert_false(hk_is_enabled(reg, h));
  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_START));
  fire(reg, HK_ON_TRAIN_START);
  assert_int_equal(a.calls, 0);
  assert_int_equal(hk_enable(reg, h), HK_OK);
  fire(reg, HK_ON_TRAIN_START);
  assert_int_equal(a.calls, 1);
  destroy_reg(reg);
}

/* ---- ordering ------------------------------------------------------------------------------------ */

typedef struct order_fixture { rec_t r[6]; } order_fixture;

/* Registers s1 m2 c3 m4 c5 c6 (tier, order) in a scrambled way on `ev`. */
static void register_scrambled(hk_registry *reg, int ev, order_fixture *f) {
  static const struct { const char *tag; hk_tier tier; int order; } spec[6] = {
    { "s1", HK_TIER_STRATEGY, 0 }, { "m2", HK_TIER_MODEL, 5 },    { "c3", HK_TIER_CALLBACK, 10 },
    { "m4", HK_TIER_MODEL, -1 },   { "c5", HK_TIER_CALLBACK, 10 }, { "c6", HK_TIER_CALLBACK, -3 },
  };
  char name[32];
  int i;
  for (i = 0; i < 6; i++) {
    hk_opts o;
    memset(&o, 0, sizeof o);
    f->r[i].tag = spec[i].tag;
    f->r[i].ret = HK_CONTINUE;
    f->r[i].calls = 0;
    snprintf(name, sizeof name, "%s@%d", spec[i].tag, ev);
    o.name = name; /* a stack buffer: the registry must copy it */
    o.tier = spec[i].tier;
    o.order = spec[i].order;
    on_opts(reg, ev, &f->r[i], o);
  }
}

static void test_order_tier_order_registration(void **state) {
  hk_registry *reg = mkreg();
  order_fixture f, g;
  (void)state;
  register_scrambled(reg, HK_ON_TRAIN_BATCH_START, &f);
  register_scrambled(reg, HK_ON_TRAIN_BATCH_END, &g);
  fire(reg, HK_ON_TRAIN_BATCH_START);
  assert_string_equal(g_log, "c6 c3 c5 m4 m2 s1");
  log_reset();
  /* without reverse_end_events a closing event runs in the same order */
  fire(reg, HK_ON_TRAIN_BATCH_END);
  assert_string_equal(g_log, "c6 c3 c5 m4 m2 s1");
  log_reset();
  fire(reg, HK_ON_TRAIN_BATCH_START); /* stable across dispatches */
  assert_string_equal(g_log, "c6 c3 c5 m4 m2 s1");
  /* names were copied from a reused stack buffer */
  {
    char n[32];
    snprintf(n, sizeof n, "c5@%d", HK_ON_TRAIN_BATCH_END);
    assert_true(hk_find(reg, n) > 0);
  }
  destroy_reg(reg);
}

static void test_order_reverse_end_events(void **state) {
  hk_desc d;
  hk_registry *reg;
  order_fixture f, g, h;
  int ev_close = -1, ev_plain = -1;
  (void)state;
  memset(&d, 0, sizeof d);
  d.reverse_end_events = 1;
  reg = mkreg_desc(d);
  assert_int_equal(hk_event_define(reg, "my_close", HK_CLOSES, &ev_close), HK_OK);
  assert_int_equal(hk_event_define(reg, "my_plain", 0, &ev_plain), HK_OK);
  register_scrambled(reg, HK_ON_TRAIN_BATCH_START, &f);
  register_scrambled(reg, HK_ON_TRAIN_BATCH_END, &g);
  register_scrambled(reg, ev_close, &h);
  fire(reg, HK_ON_TRAIN_BATCH_START);
  assert_string_equal(g_log, "c6 c3 c5 m4 m2 s1");
  log_reset();
  fire(reg, HK_ON_TRAIN_BATCH_END);
  assert_string_equal(g_log, "s1 m2 m4 c5 c3 c6");
  log_reset();
  fire(reg, ev_close); /* user-defined closing events are reversed too */
  assert_string_equal(g_log, "s1 m2 m4 c5 c3 c6");
  destroy_reg(reg);
}

static void test_order_teardown_nests_setup(void **state) {
  hk_desc d;
  hk_registry *reg;
  hk_callback a, b;
  rec_t ra = { "a", HK_CONTINUE, 0 }, rb = { "b", HK_CONTINUE, 0 };
  (void)state;
  memset(&d, 0, sizeof d);
  d.reverse_end_events = 1;
  reg = mkreg_desc(d);
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  a.name = "a"; a.user = &ra; a.setup = rec; a.teardown = rec;
  b.name = "b"; b.user = &rb; b.setup = rec; b.teardown = rec;
  assert_int_equal(hk_add_callback(reg, &a, NULL, NULL), HK_OK);
  assert_int_equal(hk_add_callback(reg, &b, NULL, NULL), HK_OK);
  fire(reg, HK_SETUP);
  fire(reg, HK_TEARDOWN);
  assert_string_equal(g_log, "a b b a");
  destroy_reg(reg);
}

/* Hydra's lifecycle: start events in registration order, end events reversed, with no registry option;
   tiers and order reverse as a whole; a user event can ask for the same (HK_REVERSED). */
static void test_order_hydra_lifecycle(void **state) {
  hk_registry *reg = mkreg();
  hk_callback a, b;
  rec_t ra = { "a", HK_CONTINUE, 0 }, rb = { "b", HK_CONTINUE, 0 };
  order_fixture f;
  hk_opts o;
  int ev = -1;
  static const char *const names[] = { "on_run_start", "on_run_end", "on_multirun_start", "on_multirun_end",
                                       "on_job_start", "on_job_end" };
  int i;
  (void)state;
  assert_int_equal(hk_event_find(reg, "on_multirun_start"), HK_ON_MULTIRUN_START);
  assert_int_equal(hk_event_find(reg, "on_job_end"), HK_ON_JOB_END);
  for (i = 0; i < 6; i++) {
    int e = HK_ON_RUN_START + i, fl = hk_event_flags(reg, e);
    assert_string_equal(hk_event_name(reg, e), names[i]);
    assert_int_equal(fl & HK_REVERSED, i % 2 ? HK_REVERSED : 0);
    assert_int_equal(fl & (HK_OPENS | HK_CLOSES), i % 2 ? HK_CLOSES : HK_OPENS);
  }
  assert_int_equal(hk_honoured(reg, HK_ON_JOB_END, HK_STOP), HK_STOP);
  assert_int_equal(hk_honoured(reg, HK_ON_JOB_START, HK_STOP), HK_CONTINUE);
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  a.name = "a"; a.user = &ra; a.on_multirun_start = rec; a.on_job_start = rec; a.on_job_end = rec; a.on_multirun_end = rec;
  b.name = "b"; b.user = &rb; b.on_multirun_start = rec; b.on_job_start = rec; b.on_job_end = rec; b.on_multirun_end = rec;
  assert_int_equal(hk_add_callback(reg, &a, NULL, NULL), HK_OK);
  assert_int_equal(hk_add_callback(reg, &b, NULL, NULL), HK_OK);
  fire(reg, HK_ON_MULTIRUN_START);
  for (i = 0; i < 2; i++) { fire(reg, HK_ON_JOB_START); fire(reg, HK_ON_JOB_END); }
  fire(reg, HK_ON_MULTIRUN_END);
  assert_string_equal(g_log, "a b a b b a a b b a b a");
  log_reset();
  register_scrambled(reg, HK_ON_RUN_END, &f);
  fire(reg, HK_ON_RUN_END);
  assert_string_equal(g_log, "s1 m2 m4 c5 c3 c6");
  log_reset();
  assert_int_equal(hk_event_define(reg, "my_end", HK_CLOSES | HK_REVERSED, &ev), HK_OK);
  memset(&o, 0, sizeof o);
  o.name = "x1";
  on_opts(reg, ev, &ra, o);
  o.name = "x2";
  on_opts(reg, ev, &rb, o);
  fire(reg, ev);
  assert_string_equal(g_log, "b a");
  destroy_reg(reg);
}

static hk_signal tag_fn(hk_ctx *ctx, void *user) { (void)ctx; log_add((const char *)user); return HK_CONTINUE; }

/* Lightning: on_train_epoch_end runs non-monitoring callbacks, then the model, then monitoring ones. */
static void test_order_monitor_last(void **state) {
  hk_registry *reg = mkreg();
  hk_callback mon, plain;
  hk_opts o;
  hk_handle hm = 0;
  (void)state;
  memset(&mon, 0, sizeof mon);
  memset(&plain, 0, sizeof plain);
  mon.name = "mon";
  mon.user = (void *)"mon";
  mon.on_train_epoch_end = tag_fn;
  mon.on_validation_epoch_end = tag_fn;
  mon.on_train_epoch_start = tag_fn;
  plain.name = "plain";
  plain.user = (void *)"plain";
  plain.on_train_epoch_end = tag_fn;
  plain.on_validation_epoch_end = tag_fn;
  plain.on_train_epoch_start = tag_fn;

  memset(&o, 0, sizeof o);
  o.monitor = 1;
  assert_int_equal(hk_add_callback(reg, &mon, &o, &hm), HK_OK); /* registered first on purpose */
  assert_true(hm > 0);
  assert_int_equal(hk_add_callback(reg, &plain, NULL, NULL), HK_OK);
  memset(&o, 0, sizeof o);
  o.tier = HK_TIER_MODEL;
  o.name = "model_ee";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, tag_fn, (void *)"model", &o, NULL), HK_OK);
  o.name = "model_ve";
  assert_int_equal(hk_on(reg, HK_ON_VALIDATION_EPOCH_END, tag_fn, (void *)"model", &o, NULL), HK_OK);
  o.name = "model_es";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_START, tag_fn, (void *)"model", &o, NULL), HK_OK);

  fire(reg, HK_ON_TRAIN_EPOCH_END);
  assert_string_equal(g_log, "plain model mon");
  log_reset();
  /* only events flagged HK_MONITOR_LAST move monitors */
  fire(reg, HK_ON_VALIDATION_EPOCH_END);
  assert_string_equal(g_log, "mon plain model");
  log_reset();
  fire(reg, HK_ON_TRAIN_EPOCH_START);
  assert_string_equal(g_log, "mon plain model");
  destroy_reg(reg);
}

/* reverse_end_events must not undo the monitor rule: on_train_epoch_end is a closing event AND a
   monitor-last event. Monitoring callbacks (early stopping, checkpointing) read the metrics the
   model logs in its own on_train_epoch_end, so they must still run after the model tier. */
static void test_order_monitor_last_with_reverse(void **state) {
  hk_desc d;
  hk_registry *reg;
  hk_opts o;
  const char *pm, *pmon;
  (void)state;
  memset(&d, 0, sizeof d);
  d.reverse_end_events = 1;
  reg = mkreg_desc(d);
  memset(&o, 0, sizeof o);
  o.monitor = 1; o.name = "m";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, tag_fn, (void *)"mon", &o, NULL), HK_OK);
  memset(&o, 0, sizeof o);
  o.name = "p";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, tag_fn, (void *)"plain", &o, NULL), HK_OK);
  memset(&o, 0, sizeof o);
  o.tier = HK_TIER_MODEL; o.name = "model";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, tag_fn, (void *)"model", &o, NULL), HK_OK);
  fire(reg, HK_ON_TRAIN_EPOCH_END);
  pm = strstr(g_log, "model");
  pmon = strstr(g_log, "mon");
  assert_non_null(pm);
  assert_non_null(pmon);
  if (!(pmon > pm)) fail_msg("monitor ran before the model with reverse_end_events: \"%s\"", g_log);
  destroy_reg(reg);
}

/* Callbacks without .monitor keep the plain order on on_train_epoch_end; monitors keep their own
   registration order among themselves. */
static void test_order_monitor_last_many(void **state) {
  hk_registry *reg = mkreg();
  hk_opts o;
  (void)state;
  memset(&o, 0, sizeof o);
  o.monitor = 1; o.name = "m1";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, tag_fn, (void *)"mon1", &o, NULL), HK_OK);
  memset(&o, 0, sizeof o);
  o.tier = HK_TIER_MODEL; o.name = "model";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, tag_fn, (void *)"model", &o, NULL), HK_OK);
  memset(&o, 0, sizeof o);
  o.name = "c1";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, tag_fn, (void *)"cb1", &o, NULL), HK_OK);
  memset(&o, 0, sizeof o);
  o.monitor = 1; o.name = "m2";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, tag_fn, (void *)"mon2", &o, NULL), HK_OK);
  memset(&o, 0, sizeof o);
  o.name = "c2";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_EPOCH_END, tag_fn, (void *)"cb2", &o, NULL), HK_OK);
  fire(reg, HK_ON_TRAIN_EPOCH_END);
  assert_string_equal(g_log, "cb1 cb2 model mon1 mon2");
  destroy_reg(reg);
}

/* ---- signals --------------------------------------------------------------------------------------- */

/* hk_honoured: a signal an event does not honour degrades to the strongest weaker one it does. */
static void test_signals_honoured_degrade(void **state) {
  hk_registry *reg = mkreg();
  int user = -1;
  (void)state;
  assert_int_equal(hk_honoured(reg, HK_ON_AFTER_BACKWARD, HK_SKIP_STEP), HK_SKIP_STEP);
  assert_int_equal(hk_honoured(reg, HK_ON_TRAIN_BATCH_END, HK_SKIP_STEP), HK_CONTINUE);
  assert_int_equal(hk_honoured(reg, HK_ON_TRAIN_BATCH_END, HK_SKIP_BATCH), HK_CONTINUE);
  assert_int_equal(hk_honoured(reg, HK_ON_TRAIN_BATCH_END, HK_STOP_EPOCH), HK_STOP_EPOCH);
  assert_int_equal(hk_honoured(reg, HK_ON_TRAIN_BATCH_END, HK_STOP), HK_STOP);
  assert_int_equal(hk_honoured(reg, HK_ON_VALIDATION_BATCH_START, HK_SKIP_STEP), HK_CONTINUE);
  assert_int_equal(hk_honoured(reg, HK_ON_VALIDATION_BATCH_START, HK_SKIP_BATCH), HK_SKIP_BATCH);
  assert_int_equal(hk_honoured(reg, HK_ON_FIT_START, HK_STOP_EPOCH), HK_CONTINUE);
  assert_int_equal(hk_honoured(reg, HK_ON_TRAIN_EPOCH_END, HK_FAIL), HK_FAIL);
  assert_int_equal(hk_honoured(reg, HK_ON_SAVE_CHECKPOINT, HK_STOP), HK_CONTINUE);
  assert_int_equal(hk_honoured(reg, HK_ON_SAVE_CHECKPOINT, HK_FAIL), HK_FAIL);
  assert_int_equal(hk_honoured(reg, HK_ON_EXCEPTION, HK_FAIL), HK_CONTINUE);
  assert_int_equal(hk_honoured(reg, HK_TEARDOWN, HK_STOP), HK_CONTINUE);
  assert_int_equal(hk_honoured(reg, HK_ON_TRAIN_START, (hk_signal)42), HK_FAIL);
  assert_int_equal(hk_event_define(reg, "on_user", 0, &user), HK_OK);
  assert_int_equal(hk_honoured(reg, user, HK_SKIP_BATCH), HK_SKIP_BATCH);
  assert_int_equal(hk_event_signals(reg, HK_ON_EXCEPTION), HK_SIGNAL_BIT(HK_CONTINUE));
  destroy_reg(reg);
}

static void test_signals_strongest_wins_all_run(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_CONTINUE, 0 }, b = { "b", HK_SKIP_BATCH, 0 }, c = { "c", HK_SKIP_STEP, 0 };
  rec_t d = { "d", HK_STOP, 0 }, e = { "e", HK_CONTINUE, 0 }, f = { "f", HK_STOP_EPOCH, 0 };
  (void)state;
  on_rec(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &a);
  on_rec(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &b);
  on_rec(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &c);
  assert_int_equal(fire(reg, HK_ON_BEFORE_OPTIMIZER_STEP), HK_SKIP_BATCH);
  assert_string_equal(g_log, "a b c");

  log_reset();
  on_rec(reg, HK_ON_TRAIN_EPOCH_END, &d); /* strongest first: the rest still run */
  on_rec(reg, HK_ON_TRAIN_EPOCH_END, &e);
  on_rec(reg, HK_ON_TRAIN_EPOCH_END, &f);
  assert_int_equal(fire(reg, HK_ON_TRAIN_EPOCH_END), HK_STOP);
  assert_string_equal(g_log, "d e f");

  /* each signal value comes back unchanged when it is the only one */
  {
    int s;
    for (s = HK_CONTINUE; s < HK_FAIL; s++) {
      a.ret = (hk_signal)s;
      assert_int_equal(fire(reg, HK_ON_BEFORE_OPTIMIZER_STEP) , s > HK_SKIP_BATCH ? s : HK_SKIP_BATCH);
    }
  }
  assert_int_equal(g_nmsgs, 0);
  destroy_reg(reg);
}

/* HK_FAIL is the strongest signal; with the default (fatal) policy the dispatch returns HK_FAIL, and
   the other hooks of the event still run (every on_exception handler runs even if one fails). */
static void test_signals_fail_all_run(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_FAIL, 0 }, b = { "b", HK_STOP, 0 }, c = { "c", HK_CONTINUE, 0 };
  (void)state;
  on_rec(reg, HK_ON_EXCEPTION, &a);
  on_rec(reg, HK_ON_EXCEPTION, &b);
  on_rec(reg, HK_ON_EXCEPTION, &c);
  assert_int_equal(fire(reg, HK_ON_EXCEPTION), HK_FAIL);
  assert_string_equal(g_log, "a b c");
  assert_int_equal(g_nmsgs, 0); /* reported once, through ctx->hook_failure */
  assert_contains(g_failure, "failed in on_exception");
  destroy_reg(reg);
}

/* ---- filters --------------------------------------------------------------------------------------- */

typedef struct seen_t { int n; int64_t v[64]; } seen_t;
static hk_signal seen_step(hk_ctx *ctx, void *user) { seen_t *s = (seen_t *)user; s->v[s->n++] = ctx->global_step; return HK_CONTINUE; }

/* Fires `n` times with global_step = steps[i] (or i+1 when steps is NULL), epoch and batch_idx equal
   to the same value, and returns the steps at which the hook ran. */
static void run_filter(hk_filter flt, const int64_t *steps, int n, seen_t *out) {
  hk_registry *reg = mkreg();
  hk_opts o = opts_named("f");
  int i;
  memset(out, 0, sizeof *out);
  o.filter = flt;
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, seen_step, out, &o, NULL), HK_OK);
  for (i = 0; i < n; i++) {
    hk_ctx c = ctx0();
    c.global_step = c.epoch = c.batch_idx = steps ? steps[i] : i + 1;
    c.loss = (double)i;
    (void)HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c);
    hk_ctx_free(&c);
  }
  destroy_reg(reg);
}
static void assert_seen(const seen_t *s, int n, const int64_t *expect) {
  int i;
  if (s->n != n) {
    char buf[512] = "";
    for (i = 0; i < s->n; i++) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%lld ", (long long)s->v[i]);
    fail_msg("ran %d times (%s), expected %d", s->n, buf, n);
  }
  for (i = 0; i < n; i++) assert_int_equal(s->v[i], expect[i]);
}

static void test_filter_calls(void **state) {
  hk_filter f;
  seen_t s;
  (void)state;
  /* HK_COUNT_CALLS is the default counter: the n-th time the event reaches the hook (1-based) */
  memset(&f, 0, sizeof f);
  f.every = 3;
  run_filter(f, NULL, 10, &s);
  { const int64_t e[] = { 3, 6, 9 }; assert_seen(&s, 3, e); }

  memset(&f, 0, sizeof f);
  f.once_at = 4;
  run_filter(f, NULL, 10, &s);
  { const int64_t e[] = { 4 }; assert_seen(&s, 1, e); }

  memset(&f, 0, sizeof f);
  f.from = 3; f.until = 6;
  run_filter(f, NULL, 10, &s);
  { const int64_t e[] = { 3, 4, 5 }; assert_seen(&s, 3, e); }

  memset(&f, 0, sizeof f);
  f.from = 8;
  run_filter(f, NULL, 10, &s);
  { const int64_t e[] = { 8, 9, 10 }; assert_seen(&s, 3, e); }

  memset(&f, 0, sizeof f);
  f.until = 3;
  run_filter(f, NULL, 10, &s);
  { const int64_t e[] = { 1, 2 }; assert_seen(&s, 2, e); }

  /* calls are counted even when ctx counters do not move */
  {
    static const int64_t same[6] = { 5, 5, 5, 5, 5, 5 };
    memset(&f, 0, sizeof f);
    f.counter = HK_COUNT_CALLS; f.every = 2;
    run_filter(f, same, 6, &s);
    assert_int_equal(s.n, 3);
  }
  /* combined: every and a window */
  memset(&f, 0, sizeof f);
  f.every = 2; f.from = 4; f.until = 9;
  run_filter(f, NULL, 12, &s);
  { const int64_t e[] = { 4, 6, 8 }; assert_seen(&s, 3, e); }
}

static void test_filter_step(void **state) {
  static const int64_t steps[] = { 0, 1, 2, 3, 4, 5, 6, 7 };
  static const int64_t rep[] = { 0, 1, 2, 2, 3, 2, 4 };
  hk_filter f;
  seen_t s;
  (void)state;
  /* the step counter is steps taken: every = 2 runs after the 2nd, 4th, 6th step, never at step 0 */
  memset(&f, 0, sizeof f);
  f.counter = HK_COUNT_STEP; f.every = 2;
  run_filter(f, steps, 8, &s);
  { const int64_t e[] = { 2, 4, 6 }; assert_seen(&s, 3, e); }

  memset(&f, 0, sizeof f);
  f.counter = HK_COUNT_STEP; f.once_at = 2;
  run_filter(f, rep, 7, &s); /* step 2 comes three times: only the first runs */
  { const int64_t e[] = { 2 }; assert_seen(&s, 1, e); }

  memset(&f, 0, sizeof f);
  f.counter = HK_COUNT_STEP; f.from = 2; f.until = 4;
  run_filter(f, rep, 7, &s);
  { const int64_t e[] = { 2, 2, 3, 2 }; assert_seen(&s, 4, e); }
}

/* Epochs and batches are indexes from 0; the filter counts the n-th epoch/batch, n = index + 1. */
static void test_filter_epoch(void **state) {
  static const int64_t ep[] = { 0, 0, 1, 1, 2, 2, 3, 3 };
  hk_filter f;
  seen_t s;
  (void)state;
  memset(&f, 0, sizeof f);
  f.counter = HK_COUNT_EPOCH; f.once_at = 2; /* the 2nd epoch is epoch 1 */
  run_filter(f, ep, 8, &s);
  { const int64_t e[] = { 1 }; assert_seen(&s, 1, e); }

  memset(&f, 0, sizeof f);
  f.counter = HK_COUNT_EPOCH; f.from = 1; f.until = 3; /* the 1st and 2nd epochs */
  run_filter(f, ep, 8, &s);
  { const int64_t e[] = { 0, 0, 1, 1 }; assert_seen(&s, 4, e); }

  memset(&f, 0, sizeof f);
  f.counter = HK_COUNT_EPOCH; f.every = 3; /* the 3rd epoch (index 2), as check_val_every_n_epoch = 3 */
  run_filter(f, ep, 8, &s);
  { const int64_t e[] = { 2, 2 }; assert_seen(&s, 2, e); }
}

static void test_filter_batch(void **state) {
  static const int64_t b[] = { 0, 1, 2, 3, 4, 0, 1, 2, 3, 4 };
  hk_filter f;
  seen_t s;
  (void)state;
  memset(&f, 0, sizeof f);
  f.counter = HK_COUNT_BATCH; f.from = 1; f.until = 3; /* the 1st and 2nd batch of each epoch */
  run_filter(f, b, 10, &s);
  { const int64_t e[] = { 0, 1, 0, 1 }; assert_seen(&s, 4, e); }

  memset(&f, 0, sizeof f);
  f.counter = HK_COUNT_BATCH; f.every = 4; /* the 4th batch (index 3), as log_every_n_steps = 4 */
  run_filter(f, b, 10, &s);
  { const int64_t e[] = { 3, 3 }; assert_seen(&s, 2, e); }

  memset(&f, 0, sizeof f);
  f.counter = HK_COUNT_BATCH; f.once_at = 3; /* fires once, never again in the second epoch */
  run_filter(f, b, 10, &s);
  { const int64_t e[] = { 2 }; assert_seen(&s, 1, e); }
}

static int pred_loss_gt(const hk_ctx *ctx, void *user) { return ctx->loss > *(const double *)user; }

static void test_filter_predicate(void **state) {
  static double threshold = 5.5;
  hk_filter f;
  seen_t s;
  (void)state;
  memset(&f, 0, sizeof f);
  f.pred = pred_loss_gt; f.pred_user = &threshold; /* run_filter sets loss = i */
  run_filter(f, NULL, 9, &s);
  { const int64_t e[] = { 7, 8, 9 }; assert_seen(&s, 3, e); }
  /* predicate AND every (step counter) */
  memset(&f, 0, sizeof f);
  threshold = 1.5;
  f.counter = HK_COUNT_STEP; f.every = 2; f.pred = pred_loss_gt; f.pred_user = &threshold;
  run_filter(f, NULL, 9, &s); /* steps 1..9, loss 0..8: loss > 1.5 from step 3, even steps */
  { const int64_t e[] = { 4, 6, 8 }; assert_seen(&s, 3, e); }
}

/* A filtered-out hook does not count as a call of the hook and does not affect the signal. */
static void test_filter_signal(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_STOP, 0 }, b = { "b", HK_CONTINUE, 0 };
  hk_opts o = opts_named("a");
  (void)state;
  o.filter.every = 2;
  on_opts(reg, HK_ON_TRAIN_BATCH_END, &a, o);
  on_rec(reg, HK_ON_TRAIN_BATCH_END, &b);
  assert_int_equal(fire(reg, HK_ON_TRAIN_BATCH_END), HK_CONTINUE);
  assert_int_equal(fire(reg, HK_ON_TRAIN_BATCH_END), HK_STOP);
  assert_int_equal(fire(reg, HK_ON_TRAIN_BATCH_END), HK_CONTINUE);
  assert_string_equal(g_log, "b a b b");
  destroy_reg(reg);
}

/* rank_zero_only: runs where ctx->rank == 0 only; elsewhere it is not called, not counted, no signal. */
static void test_filter_rank_zero_only(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_STOP, 0 }, b = { "b", HK_CONTINUE, 0 };
  hk_opts o = opts_named("a");
  hk_ctx c;
  (void)state;
  o.rank_zero_only = 1;
  o.filter.every = 2; /* counts only the calls it gets: the 2nd call on rank 0 */
  on_opts(reg, HK_ON_TRAIN_BATCH_END, &a, o);
  on_rec(reg, HK_ON_TRAIN_BATCH_END, &b);
  c = ctx0();
  c.rank = 1; c.world_size = 2;
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c), HK_CONTINUE);
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c), HK_CONTINUE);
  c.rank = 0;
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c), HK_CONTINUE);
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c), HK_STOP);
  assert_string_equal(g_log, "b b b a b");
  hk_ctx_free(&c);
  destroy_reg(reg);
}

/* ---- changes during dispatch ---------------------------------------------------------------------- */

typedef struct action_t {
  const char *tag;
  int calls;
  int kind;          /* what to do on the first call */
  hk_handle target;  /* for off/disable; the event for ACT_REGISTER_OTHER */
  rec_t *newrec;     /* for register */
  int err;           /* result of the action */
} action_t;
enum { ACT_OFF_SELF = 1, ACT_OFF_TARGET, ACT_DISABLE_TARGET, ACT_REGISTER, ACT_REGISTER_OTHER, ACT_REGISTER_MANY, ACT_OFF_ALL };

static hk_handle g_all[16];
static int g_nall;

static hk_signal actor(hk_ctx *ctx, void *user) {
  action_t *a = (action_t *)user;
  log_add(a->tag);
  if (a->calls++ == 0) {
    switch (a->kind) {
    case ACT_OFF_SELF: a->err = hk_off(ctx->reg, ctx->self); break;
    case ACT_OFF_TARGET: a->err = hk_off(ctx->reg, a->target); break;
    case ACT_DISABLE_TARGET: a->err = hk_disable(ctx->reg, a->target); break;
    case ACT_REGISTER: a->err = hk_on(ctx->reg, ctx->event, rec, a->newrec, NULL, NULL); break;
    case ACT_REGISTER_OTHER: a->err = hk_on(ctx->reg, a->target, rec, a->newrec, NULL, NULL); break;
    case ACT_REGISTER_MANY: {
      int i;
      hk_opts o;
      char name[32];
      memset(&o, 0, sizeof o);
      o.name = name;
      for (i = 0; i < 64 && a->err == 0; i++) {
        snprintf(name, sizeof name, "many%d", i);
        o.order = i % 2 ? -1 : 1; /* some would sort before the running hook */
        a->err = hk_on(ctx->reg, ctx->event, rec, a->newrec, &o, NULL);
      }
      break;
    }
    case ACT_OFF_ALL: {
      int i;
      for (i = 0; i < g_nall; i++) {
        hk_err e = hk_off(ctx->reg, g_all[i]);
        if (e) a->err = e;
      }
      break;
    }
    default: break;
    }
  }
  return HK_CONTINUE;
}

static hk_handle on_actor(hk_registry *reg, int ev, action_t *a) { return on_named(reg, ev, actor, a, a->tag); }

static void test_dispatch_remove_self(void **state) {
  hk_registry *reg = mkreg();
  action_t once = { "once", 0, ACT_OFF_SELF, 0, NULL, -1 };
  rec_t b = { "b", HK_CONTINUE, 0 };
  hk_handle h;
  (void)state;
  h = on_actor(reg, HK_ON_TRAIN_BATCH_END, &once);
  on_rec(reg, HK_ON_TRAIN_BATCH_END, &b);
  fire(reg, HK_ON_TRAIN_BATCH_END);
  fire(reg, HK_ON_TRAIN_BATCH_END);
  fire(reg, HK_ON_TRAIN_BATCH_END);
  assert_int_equal(once.err, HK_OK);
  assert_string_equal(g_log, "once b b b");
  assert_int_equal(hk_find(reg, "once"), 0);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_END), 1);
  assert_int_equal(hk_off(reg, h), HK_ERR_NOT_FOUND);
  destroy_reg(reg);
}

static void test_dispatch_remove_only_hook(void **state) {
  hk_registry *reg = mkreg();
  action_t once = { "once", 0, ACT_OFF_SELF, 0, NULL, -1 };
  (void)state;
  on_actor(reg, HK_ON_TRAIN_START, &once);
  assert_true(HK_ACTIVE(reg, HK_ON_TRAIN_START));
  fire(reg, HK_ON_TRAIN_START);
  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_START));
  fire(reg, HK_ON_TRAIN_START);
  assert_string_equal(g_log, "once");
  destroy_reg(reg);
}

static void test_dispatch_remove_later(void **state) {
  hk_registry *reg = mkreg();
  action_t a = { "a", 0, ACT_OFF_TARGET, 0, NULL, -1 };
  rec_t b = { "b", HK_CONTINUE, 0 }, c = { "c", HK_STOP, 0 };
  hk_signal s;
  (void)state;
  on_actor(reg, HK_ON_TRAIN_BATCH_END, &a);
  on_rec(reg, HK_ON_TRAIN_BATCH_END, &b);
  a.target = on_rec(reg, HK_ON_TRAIN_BATCH_END, &c);
  s = fire(reg, HK_ON_TRAIN_BATCH_END);
  assert_int_equal(a.err, HK_OK);
  assert_int_equal(s, HK_CONTINUE); /* c did not run, so its HK_STOP does not count */
  assert_int_equal(c.calls, 0);
  fire(reg, HK_ON_TRAIN_BATCH_END);
  assert_string_equal(g_log, "a b a b");
  destroy_reg(reg);
}

/* Removing an earlier hook must not make the loop skip the hook after the running one. */
static void test_dispatch_remove_earlier(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_CONTINUE, 0 }, c = { "c", HK_CONTINUE, 0 }, d = { "d", HK_CONTINUE, 0 };
  action_t b = { "b", 0, ACT_OFF_TARGET, 0, NULL, -1 };
  (void)state;
  b.target = on_rec(reg, HK_ON_VALIDATION_BATCH_END, &a);
  on_actor(reg, HK_ON_VALIDATION_BATCH_END, &b);
  on_rec(reg, HK_ON_VALIDATION_BATCH_END, &c);
  on_rec(reg, HK_ON_VALIDATION_BATCH_END, &d);
  fire(reg, HK_ON_VALIDATION_BATCH_END);
  assert_string_equal(g_log, "a b c d");
  log_reset();
  fire(reg, HK_ON_VALIDATION_BATCH_END);
  assert_string_equal(g_log, "b c d");
  assert_int_equal(b.err, HK_OK);
  destroy_reg(reg);
}

static void test_dispatch_disable_later(void **state) {
  hk_registry *reg = mkreg();
  action_t a = { "a", 0, ACT_DISABLE_TARGET, 0, NULL, -1 };
  rec_t b = { "b", HK_CONTINUE, 0 }, c = { "c", HK_CONTINUE, 0 };
  (void)state;
  on_actor(reg, HK_ON_TEST_BATCH_END, &a);
  on_rec(reg, HK_ON_TEST_BATCH_END, &b);
  a.target = on_rec(reg, HK_ON_TEST_BATCH_END, &c);
  fire(reg, HK_ON_TEST_BATCH_END);
  assert_string_equal(g_log, "a b");
  assert_int_equal(a.err, HK_OK);
  assert_false(hk_is_enabled(reg, a.target));
  assert_int_equal(hk_enable(reg, a.target), HK_OK);
  log_reset();
  fire(reg, HK_ON_TEST_BATCH_END);
  assert_string_equal(g_log, "a b c");
  destroy_reg(reg);
}

static void test_dispatch_register_new(void **state) {
  hk_registry *reg = mkreg();
  rec_t n = { "n", HK_STOP, 0 }, b = { "b", HK_CONTINUE, 0 };
  action_t a = { "a", 0, ACT_REGISTER, 0, NULL, -1 };
  (void)state;
  a.newrec = &n;
  on_actor(reg, HK_ON_PREDICT_BATCH_END, &a);
  on_rec(reg, HK_ON_PREDICT_BATCH_END, &b);
  assert_int_equal(fire(reg, HK_ON_PREDICT_BATCH_END), HK_CONTINUE); /* n is not run yet */
  assert_int_equal(a.err, HK_OK);
  assert_string_equal(g_log, "a b");
  assert_int_equal(hk_count(reg, HK_ON_PREDICT_BATCH_END), 3);
  log_reset();
  assert_int_equal(fire(reg, HK_ON_PREDICT_BATCH_END), HK_STOP);
  assert_string_equal(g_log, "a b n");
  destroy_reg(reg);
}

/* A hook arming an event that had nothing registered (the armed[] guard must be updated). */
static void test_dispatch_register_other_event(void **state) {
  hk_registry *reg = mkreg();
  rec_t n = { "n", HK_CONTINUE, 0 };
  action_t a = { "a", 0, ACT_REGISTER_OTHER, HK_ON_FIT_END, NULL, -1 };
  (void)state;
  a.newrec = &n;
  on_actor(reg, HK_ON_FIT_START, &a);
  assert_false(HK_ACTIVE(reg, HK_ON_FIT_END));
  fire(reg, HK_ON_FIT_START);
  assert_int_equal(a.err, HK_OK);
  assert_true(HK_ACTIVE(reg, HK_ON_FIT_END));
  fire(reg, HK_ON_FIT_END);
  assert_int_equal(n.calls, 1);
  assert_string_equal(g_log, "a n");
  destroy_reg(reg);
}

/* Registering many hooks mid-dispatch (the table grows) while the dispatch is iterating. */
static void test_dispatch_register_many(void **state) {
  hk_registry *reg = mkreg();
  rec_t n = { "n", HK_CONTINUE, 0 }, b = { "b", HK_CONTINUE, 0 };
  action_t a = { "a", 0, ACT_REGISTER_MANY, 0, NULL, 0 };
  (void)state;
  a.newrec = &n;
  on_actor(reg, HK_ON_AFTER_BACKWARD, &a);
  on_rec(reg, HK_ON_AFTER_BACKWARD, &b);
  fire(reg, HK_ON_AFTER_BACKWARD);
  assert_int_equal(a.err, HK_OK);
  assert_int_equal(n.calls, 0);
  assert_int_equal(b.calls, 1);
  assert_int_equal(hk_count(reg, HK_ON_AFTER_BACKWARD), 66);
  fire(reg, HK_ON_AFTER_BACKWARD);
  assert_int_equal(n.calls, 64);
  assert_int_equal(b.calls, 2);
  assert_int_equal(a.calls, 2);
  destroy_reg(reg);
}

/* The first hook removes every hook of the event (itself included): nothing else runs. */
static void test_dispatch_remove_all(void **state) {
  hk_registry *reg = mkreg();
  action_t a = { "a", 0, ACT_OFF_ALL, 0, NULL, 0 };
  rec_t b = { "b", HK_CONTINUE, 0 }, c = { "c", HK_CONTINUE, 0 };
  (void)state;
  g_nall = 0;
  g_all[g_nall++] = on_actor(reg, HK_ON_BEFORE_BACKWARD, &a);
  g_all[g_nall++] = on_rec(reg, HK_ON_BEFORE_BACKWARD, &b);
  g_all[g_nall++] = on_rec(reg, HK_ON_BEFORE_BACKWARD, &c);
  fire(reg, HK_ON_BEFORE_BACKWARD);
  assert_int_equal(a.err, HK_OK);
  assert_string_equal(g_log, "a");
  assert_false(HK_ACTIVE(reg, HK_ON_BEFORE_BACKWARD));
  assert_int_equal(hk_count(reg, HK_ON_BEFORE_BACKWARD), 0);
  fire(reg, HK_ON_BEFORE_BACKWARD);
  assert_string_equal(g_log, "a");
  destroy_reg(reg);
}

/* A callback that removes itself from inside one of its functions: destroy runs exactly once. */
static int g_destroyed;
static void count_destroy(void *user) { (void)user; g_destroyed++; }
static hk_signal cb_off_self(hk_ctx *ctx, void *user) {
  (void)user;
  log_add("cb");
  assert_int_equal(hk_off(ctx->reg, ctx->self), HK_OK);
  return HK_CONTINUE;
}

static void test_dispatch_callback_off_self(void **state) {
  hk_registry *reg = mkreg();
  hk_callback cb;
  hk_handle h = 0;
  (void)state;
  g_destroyed = 0;
  memset(&cb, 0, sizeof cb);
  cb.name = "selfish";
  cb.on_train_batch_end = cb_off_self;
  cb.on_train_end = cb_off_self;
  cb.destroy = count_destroy;
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &h), HK_OK);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_END), 1);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_END), 1);
  fire(reg, HK_ON_TRAIN_BATCH_END);
  fire(reg, HK_ON_TRAIN_BATCH_END);
  fire(reg, HK_ON_TRAIN_END);     /* every function of the callback is gone */
  assert_string_equal(g_log, "cb");
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_END), 0);
  assert_int_equal(g_destroyed, 1);
  destroy_reg(reg);
  assert_int_equal(g_destroyed, 1);
}

/* The fast loop (white-box: reg->hk__fast[event] is the run array it walks, NULL when the event
   takes the general loop). Every event takes it while the trace is off, hooks with filters and
   rank_zero_only included (their entries check the filter first). A hook disabled by an earlier one
   does not run; a signal other than HK_CONTINUE hands the rest of the list to the general loop,
   which still skips the disabled hook, checks filters and applies the error policy. */
static hk_signal see_event(hk_ctx *ctx, void *user) { *(int *)user = ctx->event; return HK_CONTINUE; }
static void test_dispatch_fast_loop(void **state) {
  hk_registry *reg = mkreg();
  const int ev = HK_ON_TRAIN_BATCH_END;
  action_t x = { "x", 0, ACT_DISABLE_TARGET, 0, NULL, -1 }, y = { "y", 0, ACT_DISABLE_TARGET, 0, NULL, -1 };
  rec_t b = { "b", HK_FAIL, 0 }, c = { "c", HK_STOP, 0 }, d = { "d", HK_CONTINUE, 0 }, e = { "e", HK_SKIP_STEP, 0 };
  rec_t g = { "g", HK_CONTINUE, 0 }, z = { "z", HK_CONTINUE, 0 }, r0 = { "r0", HK_CONTINUE, 0 };
  rec_t f1 = { "f1", HK_STOP_EPOCH, 0 }, f2 = { "f2", HK_CONTINUE, 0 }, p = { "p", HK_CONTINUE, 0 };
  hk_opts o;
  hk_handle hg, hf2;
  hk_ctx cx = ctx0();
  int seen = -1, i;
  FILE *f = tmpfile();
  (void)state;
  assert_non_null(f);
  assert_null(reg->hk__fast[ev]);
  on_actor(reg, ev, &x);
  assert_non_null(reg->hk__fast[ev]);
  o = opts_named("b");
  o.on_error = HK_ON_ERROR_WARN;
  on_opts(reg, ev, &b, o);
  on_rec(reg, ev, &c);
  x.target = on_rec(reg, ev, &d);
  on_rec(reg, ev, &e);

  /* b's failure hands over to the general loop after x disabled d: d does not run, e does */
  assert_int_equal(fire(reg, ev), HK_STOP);
  assert_string_equal(g_log, "x b c e");
  assert_int_equal(x.err, HK_OK);
  assert_int_equal(g_nmsgs, 1);
  assert_contains(g_msgs, "warning: hook 'b' failed in on_train_batch_end");
  assert_int_equal(d.calls, 0);
  assert_int_equal(hk_enable(reg, x.target), HK_OK);
  log_reset();
  assert_int_equal(fire(reg, ev), HK_STOP);
  assert_string_equal(g_log, "x b c d e");

  /* inside the fast loop (every hook continues): y disables z, which is skipped */
  on_actor(reg, HK_ON_VALIDATION_END, &y);
  y.target = on_rec(reg, HK_ON_VALIDATION_END, &z);
  log_reset();
  assert_int_equal(fire(reg, HK_ON_VALIDATION_END), HK_CONTINUE);
  assert_string_equal(g_log, "y");
  assert_int_equal(z.calls, 0);

  /* filters and rank_zero_only stay on the fast loop, before and after a signal hands over */
  o = opts_named("g");
  o.filter.every = 2;
  hg = on_opts(reg, ev, &g, o);
  o = opts_named("r0");
  o.rank_zero_only = 1;
  on_opts(reg, ev, &r0, o);
  assert_non_null(reg->hk__fast[ev]);
  log_reset();
  fire(reg, ev);
  fire(reg, ev);
  assert_string_equal(g_log, "x b c d e r0 x b c d e g r0");
  assert_int_equal(hk_off(reg, hg), HK_OK);
  o = opts_named("f1"); /* a filtered hook that returns a signal, then one that is filtered out */
  o.filter.from = 2;
  on_opts(reg, HK_ON_TEST_END, &f1, o);
  o = opts_named("f2");
  o.filter.once_at = 1;
  hf2 = on_opts(reg, HK_ON_TEST_END, &f2, o);
  on_rec(reg, HK_ON_TEST_END, &p);
  log_reset();
  for (i = 0; i < 3; i++) {
    hk_ctx c1 = ctx0();
    c1.rank = i == 2; /* not rank 0: r0 would not run, the others do */
    assert_int_equal(HK_FIRE(reg, HK_ON_TEST_END, &c1), i == 0 ? HK_CONTINUE : HK_STOP_EPOCH);
    hk_ctx_free(&c1);
  }
  assert_string_equal(g_log, "f2 p f1 p f1 p");
  assert_int_equal(hk_off(reg, hf2), HK_OK);
  {
    hk_ctx c1 = ctx0();
    c1.rank = 1;
    log_reset();
    (void)HK_FIRE(reg, ev, &c1);
    assert_string_equal(g_log, "x b c d e"); /* r0 is rank 0's only */
    hk_ctx_free(&c1);
  }

  /* the trace takes every event to the general loop, and gives them back */
  hk_trace(reg, HK_TRACE_LINES, f);
  assert_null(reg->hk__fast[ev]);
  log_reset();
  assert_int_equal(fire(reg, ev), HK_STOP);
  assert_string_equal(g_log, "x b c d e r0");
  hk_trace(reg, HK_TRACE_OFF, NULL);
  assert_non_null(reg->hk__fast[ev]);

  /* every fast dispatch counts (lazy metrics); a NULL context takes the general loop */
  on_named(reg, HK_ON_FIT_START, see_event, &seen, "see_event");
  assert_int_equal(HK_FIRE(reg, HK_ON_FIT_START, &cx), HK_CONTINUE);
  assert_int_equal(HK_FIRE(reg, HK_ON_FIT_START, &cx), HK_CONTINUE);
  assert_int_equal(cx.hk__seq, 2);
  assert_int_equal(seen, HK_ON_FIT_START);
  seen = -1;
  assert_int_equal(HK_FIRE(reg, HK_ON_FIT_START, NULL), HK_CONTINUE);
  assert_int_equal(seen, HK_ON_FIT_START);
  hk_ctx_free(&cx);
  fclose(f);
  destroy_reg(reg);
}

/* ---- registration errors ---------------------------------------------------------------------- */

static hk_signal noop(hk_ctx *ctx, void *user) { (void)ctx; (void)user; return HK_CONTINUE; }

static void test_register_errors(void **state) {
  hk_registry *reg = mkreg();
  hk_opts o;
  hk_handle h = 0, h1, h2;
  hk_callback cb;
  (void)state;

  assert_int_equal(hk_on(NULL, HK_SETUP, noop, NULL, NULL, &h), HK_ERR_INVALID);
  assert_int_equal(hk_on(reg, HK_SETUP, NULL, NULL, NULL, &h), HK_ERR_INVALID);
  assert_true(strlen(hk_last_error(reg)) > 0);
  assert_int_equal(hk_on(reg, -1, noop, NULL, NULL, &h), HK_ERR_UNKNOWN_EVENT);
  assert_int_equal(hk_on(reg, HK_EVENT_COUNT, noop, NULL, NULL, &h), HK_ERR_UNKNOWN_EVENT); /* not defined */
  assert_int_equal(hk_on(reg, HK_MAX_EVENTS, noop, NULL, NULL, &h), HK_ERR_UNKNOWN_EVENT);
  assert_int_equal(hk_on(reg, 1000000, noop, NULL, NULL, &h), HK_ERR_UNKNOWN_EVENT);
  assert_contains(hk_last_error(reg), "1000000");

  memset(&o, 0, sizeof o);
  o.tier = HK_TIER_COUNT;
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, &o, &h), HK_ERR_INVALID);
  memset(&o, 0, sizeof o);
  o.tier = (hk_tier)-1;
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, &o, &h), HK_ERR_INVALID);
  assert_int_equal(hk_count(reg, HK_SETUP), 0);

  /* duplicate names, between functions and callbacks */
  o = opts_named("dup");
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, &o, &h1), HK_OK);
  assert_int_equal(hk_on(reg, HK_TEARDOWN, noop, NULL, &o, &h2), HK_ERR_DUPLICATE);
  assert_contains(hk_last_error(reg), "dup");
  memset(&cb, 0, sizeof cb);
  cb.name = "dup";
  cb.on_fit_start = noop;
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &h2), HK_ERR_DUPLICATE);
  assert_int_equal(hk_count(reg, HK_ON_FIT_START), 0);
  cb.name = "cbname";
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &h2), HK_OK);
  o = opts_named("cbname");
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, &o, &h), HK_ERR_DUPLICATE);
  assert_int_equal(hk_find(reg, "dup"), h1);
  assert_int_equal(hk_find(reg, "cbname"), h2);
  assert_int_equal(hk_find(reg, "nope"), 0);
  assert_true(h1 != h2);

  /* callback errors */
  assert_int_equal(hk_add_callback(reg, NULL, NULL, &h), HK_ERR_INVALID);
  assert_int_equal(hk_add_callback(NULL, &cb, NULL, &h), HK_ERR_INVALID);
  cb.name = NULL;
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &h), HK_ERR_INVALID);

  /* bad handles */
  assert_int_equal(hk_off(reg, 0), hk_off(reg, 0)); /* defined, repeatable */
  assert_true(hk_off(reg, 0) != HK_OK);
  assert_true(hk_off(reg, -3) != HK_OK);
  assert_int_equal(hk_off(reg, 12345), HK_ERR_NOT_FOUND);
  assert_int_equal(hk_enable(reg, 12345), HK_ERR_NOT_FOUND);
  assert_int_equal(hk_disable(reg, 12345), HK_ERR_NOT_FOUND);
  assert_int_equal(hk_is_enabled(reg, 12345), 0);
  assert_true(hk_off(NULL, h1) != HK_OK);
  assert_int_equal(hk_off(reg, h1), HK_OK);
  assert_int_equal(hk_off(reg, h1), HK_ERR_NOT_FOUND);
  assert_int_equal(hk_enable(reg, h1), HK_ERR_NOT_FOUND);
  assert_int_equal(hk_find(reg, "dup"), 0);
  /* the name is free again; handles are not reused */
  o = opts_named("dup");
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, &o, &h), HK_OK);
  assert_true(h != h1);
  assert_int_equal(hk_off(reg, h1), HK_ERR_NOT_FOUND);
  destroy_reg(reg);
}

static void test_register_default_names(void **state) {
  hk_registry *reg = mkreg();
  hk_handle h = 0;
  char name[32];
  (void)state;
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, NULL, &h), HK_OK);
  snprintf(name, sizeof name, "hook#%d", h);
  assert_int_equal(hk_find(reg, name), h);
  /* two unnamed registrations do not collide */
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, NULL, &h), HK_OK);
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, NULL, NULL), HK_OK); /* out may be NULL */
  assert_int_equal(hk_count(reg, HK_SETUP), 3);
  destroy_reg(reg);
}

/* An unnamed registration gets "hook#<handle>"; a user who happened to pick such a name for an
   earlier hook must not make a later unnamed registration fail with HK_ERR_DUPLICATE. */
static void test_register_default_name_collision(void **state) {
  hk_registry *reg = mkreg();
  hk_opts o = opts_named("hook#2"); /* the first handle is 1: the next unnamed one would be hook#2 */
  hk_handle h1 = 0, h2 = 0;
  hk_err e;
  (void)state;
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, &o, &h1), HK_OK);
  assert_int_equal(h1, 1);
  e = hk_on(reg, HK_SETUP, noop, NULL, NULL, &h2);
  if (e != HK_OK) fail_msg("an unnamed registration failed with %s: %s", hk_err_name(e), hk_last_error(reg));
  assert_true(h2 > 0);
  assert_int_equal(hk_find(reg, "hook#2"), h1); /* the user's name keeps its hook */
  assert_int_equal(hk_count(reg, HK_SETUP), 2);
  destroy_reg(reg);
}

static void test_register_full(void **state) {
  hk_desc d;
  hk_registry *reg;
  hk_handle h[3], x = 0;
  hk_callback cb;
  hk_opts o;
  (void)state;
  memset(&d, 0, sizeof d);
  d.max_hooks = 3;
  reg = mkreg_desc(d);
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, NULL, &h[0]), HK_OK);
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, NULL, &h[1]), HK_OK);
  memset(&cb, 0, sizeof cb);
  cb.name = "cb";
  cb.setup = noop; cb.teardown = noop; cb.on_fit_start = noop; /* one registration, three events */
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &h[2]), HK_OK);
  o = opts_named("fourth");
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, &o, &x), HK_ERR_FULL);
  assert_contains(hk_last_error(reg), "3");
  assert_int_equal(hk_find(reg, "fourth"), 0);
  cb.name = "cb2";
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &x), HK_ERR_FULL);
  assert_int_equal(hk_count(reg, HK_SETUP), 3);
  assert_int_equal(hk_off(reg, h[0]), HK_OK);
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, &o, &x), HK_OK);
  assert_int_equal(hk_on(reg, HK_SETUP, noop, NULL, NULL, &x), HK_ERR_FULL);
  /* the message names what the user registered, not the automatic name it would have got */
  assert_string_equal(hk_last_error(reg), "cannot register an unnamed hook on setup: the registry is full (3 registrations; "
                      "raise hk_desc.max_hooks)");
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &x), HK_ERR_FULL);
  assert_string_equal(hk_last_error(reg), "cannot register 'cb2': the registry is full (3 registrations; raise hk_desc.max_hooks)");
  destroy_reg(reg);
}

/* Default capacity is 256 registrations. */
static void test_register_default_capacity(void **state) {
  hk_registry *reg = mkreg();
  int i;
  (void)state;
  for (i = 0; i < 256; i++) assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, noop, NULL, NULL, NULL), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, noop, NULL, NULL, NULL), HK_ERR_FULL);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_END), 256);
  assert_int_equal(fire(reg, HK_ON_TRAIN_BATCH_END), HK_CONTINUE);
  destroy_reg(reg);
}

/* ---- error policies ----------------------------------------------------------------------------- */

static hk_signal failer(hk_ctx *ctx, void *user) {
  rec_t *r = (rec_t *)user;
  r->calls++;
  log_add(r->tag);
  return hk_fail(ctx, "boom %d in %s", 42, r->tag);
}
static hk_signal bad_signal(hk_ctx *ctx, void *user) {
  rec_t *r = (rec_t *)user;
  (void)ctx;
  r->calls++;
  log_add(r->tag);
  return r->ret;
}

static void test_error_fatal(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "alpha", HK_CONTINUE, 0 }, b = { "beta", HK_SKIP_STEP, 0 };
  hk_ctx c = ctx0();
  hk_signal s;
  (void)state;
  on_named(reg, HK_ON_TRAIN_BATCH_END, failer, &a, "alpha_hook");
  on_rec(reg, HK_ON_TRAIN_BATCH_END, &b);
  s = HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c);
  assert_int_equal(s, HK_FAIL);
  assert_string_equal(g_log, "alpha beta");
  /* the trainer learns why through ctx->hook_failure; ctx->abort_reason (the trainer's abort reason) is untouched */
  assert_non_null(c.hook_failure);
  assert_contains(c.hook_failure, "alpha_hook");
  assert_contains(c.hook_failure, "on_train_batch_end");
  assert_contains(c.hook_failure, "boom 42 in alpha");
  assert_null(c.abort_reason);
  /* one report per failure: the log stays silent, the loop reports ctx->hook_failure; a plain
     function is a "hook", and the default tier is not mentioned */
  assert_int_equal(g_nmsgs, 0);
  assert_string_equal(c.hook_failure, "hook 'alpha_hook' failed in on_train_batch_end: boom 42 in alpha");
  /* fatal does not disable: it fails again next time */
  log_reset();
  s = HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c);
  assert_int_equal(s, HK_FAIL);
  assert_int_equal(a.calls, 2);
  assert_int_equal(g_nmsgs, 0);
  hk_ctx_free(&c);
  destroy_reg(reg);
}

static void test_error_warn(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_CONTINUE, 0 }, b = { "b", HK_SKIP_STEP, 0 };
  hk_opts o = opts_named("warner");
  (void)state;
  o.on_error = HK_ON_ERROR_WARN;
  assert_int_equal(hk_on(reg, HK_ON_AFTER_BACKWARD, failer, &a, &o, NULL), HK_OK);
  on_rec(reg, HK_ON_AFTER_BACKWARD, &b);
  assert_int_equal(fire(reg, HK_ON_AFTER_BACKWARD), HK_SKIP_STEP);
  assert_int_equal(fire(reg, HK_ON_AFTER_BACKWARD), HK_SKIP_STEP);
  assert_string_equal(g_log, "a b a b");
  assert_int_equal(g_nmsgs, 2);
  assert_contains(g_msgs, "warner");
  assert_contains(g_msgs, "on_after_backward");
  assert_contains(g_msgs, "boom 42 in a");
  assert_true(hk_is_enabled(reg, hk_find(reg, "warner")));
  b.ret = HK_CONTINUE;
  assert_int_equal(fire(reg, HK_ON_AFTER_BACKWARD), HK_CONTINUE);
  destroy_reg(reg);
}

static void test_error_disable_after_n(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_CONTINUE, 0 }, b = { "b", HK_CONTINUE, 0 }, c = { "c", HK_CONTINUE, 0 };
  hk_opts o = opts_named("flaky");
  hk_handle h = 0, h1 = 0;
  int i;
  (void)state;
  o.on_error = HK_ON_ERROR_DISABLE;
  o.max_failures = 3;
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_START, failer, &a, &o, &h), HK_OK);
  on_rec(reg, HK_ON_TRAIN_BATCH_START, &b);
  for (i = 0; i < 5; i++) assert_int_equal(fire(reg, HK_ON_TRAIN_BATCH_START), HK_CONTINUE);
  assert_int_equal(a.calls, 3);
  assert_int_equal(b.calls, 5);
  assert_false(hk_is_enabled(reg, h));
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_START), 1);
  assert_true(g_nmsgs >= 3);
  assert_contains(g_msgs, "flaky");
  assert_contains(g_msgs, "on_train_batch_start");
  /* re-enabled by hand, it runs again */
  assert_int_equal(hk_enable(reg, h), HK_OK);
  fire(reg, HK_ON_TRAIN_BATCH_START);
  assert_int_equal(a.calls, 4);

  /* max_failures = 0 means 1 */
  o = opts_named("flaky1");
  o.on_error = HK_ON_ERROR_DISABLE;
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_END, failer, &c, &o, &h1), HK_OK);
  assert_int_equal(fire(reg, HK_ON_TRAIN_END), HK_CONTINUE);
  assert_int_equal(fire(reg, HK_ON_TRAIN_END), HK_CONTINUE);
  assert_int_equal(c.calls, 1);
  assert_false(hk_is_enabled(reg, h1));
  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_END));
  destroy_reg(reg);
}

/* Successes in between do not reset the failure count. */
static int g_flip;
static hk_signal flipper(hk_ctx *ctx, void *user) {
  (void)user;
  g_flip++;
  return g_flip % 2 ? hk_fail(ctx, "odd call %d", g_flip) : HK_CONTINUE;
}
static void test_error_disable_counts_total(void **state) {
  hk_registry *reg = mkreg();
  hk_opts o = opts_named("flipper");
  hk_handle h = 0;
  int i;
  (void)state;
  g_flip = 0;
  o.on_error = HK_ON_ERROR_DISABLE;
  o.max_failures = 2;
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, flipper, NULL, &o, &h), HK_OK);
  for (i = 0; i < 6; i++) fire(reg, HK_ON_TRAIN_BATCH_END);
  assert_int_equal(g_flip, 3); /* fail, ok, fail -> disabled */
  assert_false(hk_is_enabled(reg, h));
  destroy_reg(reg);
}

static void test_error_invalid_signal(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", (hk_signal)77, 0 }, b = { "b", (hk_signal)-1, 0 }, c = { "c", HK_CONTINUE, 0 };
  hk_opts o;
  (void)state;
  on_named(reg, HK_ON_VALIDATION_END, bad_signal, &a, "seventy_seven");
  assert_int_equal(fire(reg, HK_ON_VALIDATION_END), HK_FAIL);
  assert_int_equal(g_nmsgs, 0);
  assert_contains(g_failure, "seventy_seven");
  assert_contains(g_failure, "on_validation_end");
  assert_contains(g_failure, "77");

  log_reset();
  on_named(reg, HK_ON_TEST_END, bad_signal, &b, "minus_one");
  assert_int_equal(fire(reg, HK_ON_TEST_END), HK_FAIL);
  assert_contains(g_failure, "minus_one");
  assert_contains(g_failure, "on_test_end");

  /* HK_SIGNAL_COUNT itself is not a signal */
  log_reset();
  b.ret = HK_SIGNAL_COUNT;
  assert_int_equal(fire(reg, HK_ON_TEST_END), HK_FAIL);
  assert_contains(g_failure, "not a hk_signal");
  assert_int_equal(g_nmsgs, 0);

  /* with warn, an invalid signal is reported and ignored */
  log_reset();
  o = opts_named("warned");
  o.on_error = HK_ON_ERROR_WARN;
  a.ret = (hk_signal)1000;
  assert_int_equal(hk_on(reg, HK_ON_PREDICT_END, bad_signal, &a, &o, NULL), HK_OK);
  on_rec(reg, HK_ON_PREDICT_END, &c);
  assert_int_equal(fire(reg, HK_ON_PREDICT_END), HK_CONTINUE);
  assert_int_equal(g_nmsgs, 1);
  assert_contains(g_msgs, "warned");
  assert_contains(g_msgs, "on_predict_end");
  assert_string_equal(g_log, "a c");
  destroy_reg(reg);
}

static void test_error_custom_event_name_in_log(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_CONTINUE, 0 };
  int ev = -1;
  (void)state;
  assert_int_equal(hk_event_define(reg, "on_my_custom_event", 0, &ev), HK_OK);
  on_named(reg, ev, failer, &a, "custom_failer");
  assert_int_equal(fire(reg, ev), HK_FAIL);
  assert_contains(g_failure, "custom_failer");
  assert_contains(g_failure, "on_my_custom_event");
  destroy_reg(reg);
}

static hk_signal long_fail(hk_ctx *ctx, void *user) {
  char big[600];
  (void)user;
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  return hk_fail(ctx, "%s", big);
}
static void test_error_long_message(void **state) {
  hk_registry *reg = mkreg();
  hk_ctx c = ctx0();
  char x252[256], x253[257];
  (void)state;
  on_named(reg, HK_ON_EXCEPTION, long_fail, NULL, "long");
  assert_int_equal(HK_FIRE(reg, HK_ON_EXCEPTION, &c), HK_FAIL);
  assert_int_equal(g_nmsgs, 0);
  /* hk_fail cuts to its 255-character buffer, safely, and the cut shows: 252 characters and "..." */
  memset(x252, 'x', 252); memcpy(x252 + 252, "...", 4);
  memset(x253, 'x', 253); x253[253] = 0;
  assert_contains(c.hook_failure, x252);
  assert_not_contains(c.hook_failure, x253);
  /* a second fatal failure in the same dispatch has no ctx->hook_failure left: the log reports it,
     naming a callback as "callback" and a non-default tier */
  {
    hk_callback cb;
    hk_opts o;
    memset(&cb, 0, sizeof cb);
    memset(&o, 0, sizeof o);
    cb.name = "second";
    cb.on_exception = long_fail;
    o.tier = HK_TIER_MODEL;
    assert_int_equal(hk_add_callback(reg, &cb, &o, NULL), HK_OK);
    log_reset();
    assert_int_equal(HK_FIRE(reg, HK_ON_EXCEPTION, &c), HK_FAIL);
    assert_int_equal(g_nmsgs, 1);
    assert_contains(g_msgs, "error: callback 'second' (model tier) failed in on_exception: xxx");
    assert_contains(g_msgs, "(after another failure in this dispatch)");
    assert_contains(c.hook_failure, "hook 'long' failed in on_exception");
  }
  hk_ctx_free(&c);
  destroy_reg(reg);
}

/* ---- inside hooks: requests, tensors ---------------------------------------------------------- */

static hk_signal requester(hk_ctx *ctx, void *user) { hk_request(ctx, *(unsigned *)user); return HK_CONTINUE; }

static void test_requests_and_tensors(void **state) {
  hk_registry *reg = mkreg();
  unsigned r1 = HK_REQUEST_CHECKPOINT, r2 = HK_REQUEST_LOG;
  hk_ctx c = ctx0();
  float w[3] = { 1, 2, 3 }, b[2] = { 4, 5 };
  hk_tensor t[2];
  (void)state;
  on_named(reg, HK_ON_TRAIN_BATCH_END, requester, &r1, "r1");
  on_named(reg, HK_ON_TRAIN_BATCH_END, requester, &r2, "r2");
  (void)HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &c);
  assert_int_equal(c.requests, HK_REQUEST_CHECKPOINT | HK_REQUEST_LOG);
  hk_ctx_free(&c);
  destroy_reg(reg);

  t[0].name = "w"; t[0].data = w; t[0].count = 3; t[0].on_device = 0;
  t[1].name = "b"; t[1].data = b; t[1].count = 2; t[1].on_device = 0;
  assert_ptr_equal(hk_tensor_find(t, 2, "b"), &t[1]);
  assert_ptr_equal(hk_tensor_find(t, 2, "w"), &t[0]);
  assert_null(hk_tensor_find(t, 2, "x"));
  assert_null(hk_tensor_find(t, 0, "w"));
  assert_null(hk_tensor_find(NULL, 0, "w"));
}

/* ---- metrics ----------------------------------------------------------------------------------- */

static void test_metrics_basic(void **state) {
  hk_ctx c = ctx0();
  double v = -1;
  (void)state;
  assert_int_equal(hk_metric_count(&c), 0);
  assert_int_equal(hk_metric_get(&c, "loss", &v), 0);
  assert_int_equal(hk_metric_set(&c, "val/loss", 1.5), HK_OK);
  assert_int_equal(hk_metric_set(&c, "val/acc", 0.25), HK_OK);
  assert_int_equal(hk_metric_set(&c, "lr", 3e-4), HK_OK);
  assert_int_equal(hk_metric_count(&c), 3);
  assert_int_equal(hk_metric_get(&c, "val/loss", &v), 1);
  assert_true(v == 1.5);
  assert_int_equal(hk_metric_get(&c, "val/acc", NULL), 1); /* value pointer may be NULL */
  /* overwrite keeps position and count */
  assert_int_equal(hk_metric_set(&c, "val/loss", 0.75), HK_OK);
  assert_int_equal(hk_metric_count(&c), 3);
  assert_string_equal(hk_metric_at(&c, 0, &v), "val/loss");
  assert_true(v == 0.75);
  assert_string_equal(hk_metric_at(&c, 1, &v), "val/acc");
  assert_true(v == 0.25);
  assert_string_equal(hk_metric_at(&c, 2, &v), "lr");
  assert_true(v == 3e-4);
  assert_null(hk_metric_at(&c, 3, &v));
  assert_null(hk_metric_at(&c, -1, &v));
  {
    /* the map keeps its own copy of the name */
    char name[16];
    strcpy(name, "tmp");
    assert_int_equal(hk_metric_set(&c, name, 9), HK_OK);
    strcpy(name, "zzz");
    assert_int_equal(hk_metric_get(&c, "tmp", &v), 1);
    assert_true(v == 9);
  }
  assert_int_equal(hk_metric_set(&c, NULL, 1), HK_ERR_INVALID);
  assert_int_equal(hk_metric_set(NULL, "x", 1), HK_ERR_INVALID);
  hk_metric_clear(&c);
  assert_int_equal(hk_metric_count(&c), 0);
  assert_int_equal(hk_metric_get(&c, "val/loss", &v), 0);
  assert_int_equal(hk_metric_set(&c, "again", 2), HK_OK);
  assert_int_equal(hk_metric_count(&c), 1);
  {
    /* forget what one phase set (a sanity check): values before and after it stay */
    uint64_t before = hk_metric_stamp(&c, NULL), during;
    assert_int_equal(hk_metric_set(&c, "val/loss", 1), HK_OK);
    assert_int_equal(hk_metric_set(&c, "again", 3), HK_OK);
    during = hk_metric_stamp(&c, NULL);
    assert_int_equal(hk_metric_set(&c, "time/sanity_check", 4), HK_OK);
    hk_metric_forget_between(&c, before, during);
    assert_int_equal(hk_metric_get(&c, "val/loss", &v), 0);
    assert_int_equal(hk_metric_get(&c, "again", &v), 0); /* set again inside the phase: gone too */
    assert_int_equal(hk_metric_get(&c, "time/sanity_check", &v), 1);
    assert_true(v == 4);
    assert_int_equal(hk_metric_count(&c), 1);
    assert_int_equal(hk_metric_set(&c, "again", 2), HK_OK);
    hk_metric_forget_between(NULL, 0, 1); /* harmless */
  }
  hk_ctx_free(&c);
  assert_null(c.hk__metrics);
  hk_ctx_free(&c); /* twice is harmless */
  {
    int i;
    char name[32];
    for (i = 0; i < 500; i++) {
      snprintf(name, sizeof name, "m%d", i);
      assert_int_equal(hk_metric_set(&c, name, i), HK_OK);
    }
    assert_int_equal(hk_metric_count(&c), 500);
    assert_int_equal(hk_metric_get(&c, "m321", &v), 1);
    assert_true(v == 321);
    assert_string_equal(hk_metric_at(&c, 499, &v), "m499");
  }
  hk_ctx_free(&c);
}

/* Hooks talk through metrics: one sets, a later one reads in the same dispatch. */
static hk_signal metric_writer(hk_ctx *ctx, void *user) { (void)user; hk_metric_set(ctx, "val/loss", ctx->loss * 2); return HK_CONTINUE; }
static hk_signal metric_reader(hk_ctx *ctx, void *user) {
  double v = 0;
  if (!hk_metric_get(ctx, "val/loss", &v)) return hk_fail(ctx, "no val/loss");
  *(double *)user = v;
  return HK_CONTINUE;
}
static void test_metrics_between_hooks(void **state) {
  hk_registry *reg = mkreg();
  hk_ctx c = ctx0();
  double got = 0, v = 0;
  (void)state;
  on_named(reg, HK_ON_VALIDATION_EPOCH_END, metric_writer, NULL, "w");
  on_named(reg, HK_ON_VALIDATION_EPOCH_END, metric_reader, &got, "r");
  c.loss = 1.25;
  assert_int_equal(HK_FIRE(reg, HK_ON_VALIDATION_EPOCH_END, &c), HK_CONTINUE);
  assert_true(got == 2.5);
  assert_int_equal(hk_metric_get(&c, "val/loss", &v), 1); /* visible to the loop afterwards */
  assert_true(v == 2.5);
  hk_ctx_free(&c);
  destroy_reg(reg);
}

typedef struct lazy_t { int computed; double value; } lazy_t;
static double lazy_fn(const hk_ctx *ctx, void *user) {
  lazy_t *l = (lazy_t *)user;
  l->computed++;
  return l->value + (double)ctx->global_step;
}
typedef struct asker_t { const char *tag; int ask; double got[8]; int n; } asker_t;
static hk_signal asker(hk_ctx *ctx, void *user) {
  asker_t *a = (asker_t *)user;
  double v = -1;
  if (a->ask) {
    assert_int_equal(hk_metric_get(ctx, "grad_norm", &v), 1);
    a->got[a->n++] = v;
    if (a->ask > 1) { assert_int_equal(hk_metric_get(ctx, "grad_norm", &v), 1); }
  }
  return HK_CONTINUE;
}

static void test_metrics_lazy(void **state) {
  hk_registry *reg = mkreg();
  hk_ctx c = ctx0();
  lazy_t l = { 0, 10.0 };
  asker_t a1 = { "a1", 2, { 0 }, 0 }, a2 = { "a2", 1, { 0 }, 0 };
  (void)state;
  on_named(reg, HK_ON_BEFORE_OPTIMIZER_STEP, asker, &a1, "a1");
  on_named(reg, HK_ON_BEFORE_OPTIMIZER_STEP, asker, &a2, "a2");
  assert_int_equal(hk_metric_lazy(&c, "grad_norm", lazy_fn, &l), HK_OK);
  assert_int_equal(l.computed, 0); /* not computed on registration */

  c.global_step = 1;
  (void)HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &c);
  assert_int_equal(l.computed, 1); /* three requests, one computation */
  assert_true(a1.got[0] == 11.0);
  assert_true(a2.got[0] == 11.0);

  c.global_step = 2; /* the next dispatch recomputes */
  (void)HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &c);
  assert_int_equal(l.computed, 2);
  assert_true(a1.got[1] == 12.0);
  assert_true(a2.got[1] == 12.0);

  /* nobody asks: nothing is computed */
  a1.ask = 0; a2.ask = 0;
  c.global_step = 3;
  (void)HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &c);
  (void)HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &c);
  assert_int_equal(l.computed, 2);

  /* nothing registered at all: nothing is computed */
  (void)HK_FIRE(reg, HK_ON_AFTER_BACKWARD, &c);
  assert_int_equal(l.computed, 2);

  /* only the second hook asks */
  a2.ask = 1;
  c.global_step = 4;
  (void)HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &c);
  assert_int_equal(l.computed, 3);
  assert_true(a2.got[2] == 14.0);

  /* clearing values keeps the lazy source */
  hk_metric_clear(&c);
  c.global_step = 5;
  (void)HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &c);
  assert_int_equal(l.computed, 4);
  assert_true(a2.got[3] == 15.0);

  /* a lazy metric of a ctx used by two different events computes once per event dispatch */
  on_named(reg, HK_ON_GRADIENT_CLIP, asker, &a2, "a2clip");
  c.global_step = 6;
  (void)HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &c);
  (void)HK_FIRE(reg, HK_ON_GRADIENT_CLIP, &c);
  assert_int_equal(l.computed, 6);
  assert_int_equal(g_nmsgs, 0);
  hk_ctx_free(&c);
  destroy_reg(reg);
}

/* A lazy metric read outside a dispatch (the loop's own code, a record built between events, a plateau
   check at an epoch's end) is computed then and there: the value cached by the last dispatch may be stale,
   the loop having changed what fn reads since. Inside a dispatch its hooks still share one computation. */
static void test_metrics_lazy_outside_dispatch(void **state) {
  hk_registry *reg = mkreg();
  hk_ctx c = ctx0();
  lazy_t l = { 0, 10.0 };
  asker_t a = { "a", 2, { 0 }, 0 };
  double v = 0;
  (void)state;
  on_named(reg, HK_ON_TRAIN_EPOCH_START, asker, &a, "a");
  assert_int_equal(hk_metric_lazy(&c, "grad_norm", lazy_fn, &l), HK_OK);
  c.global_step = 1;
  (void)HK_FIRE(reg, HK_ON_TRAIN_EPOCH_START, &c); /* two reads in the dispatch, one computation */
  assert_int_equal(l.computed, 1);
  assert_true(a.got[0] == 11.0);
  c.global_step = 5;                                /* steps with no hook: no dispatch */
  assert_int_equal(hk_metric_get(&c, "grad_norm", &v), 1);
  assert_true(v == 15.0);                           /* now, not the epoch start's 11 */
  assert_int_equal(l.computed, 2);
  c.global_step = 9;
  assert_int_equal(hk_metric_get(&c, "grad_norm", &v), 1);
  assert_true(v == 19.0);                           /* and again, still no dispatch in between */
  assert_true(hk_metric_at(&c, 0, &v) != NULL && v == 19.0);
  assert_int_equal(l.computed, 4);
  c.global_step = 10;
  (void)HK_FIRE(reg, HK_ON_TRAIN_EPOCH_START, &c);
  assert_int_equal(l.computed, 5);
  assert_true(a.got[1] == 20.0);
  hk_ctx_free(&c);
  destroy_reg(reg);
}

/* ---- trace ------------------------------------------------------------------------------------- */

static void setup_trace_reg(hk_registry *reg) {
  hk_opts o;
  memset(&o, 0, sizeof o);
  o.name = "printer";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_START, noop, NULL, &o, NULL), HK_OK);
  o.name = "model_bs"; o.tier = HK_TIER_MODEL;
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_START, noop, NULL, &o, NULL), HK_OK);
  o.name = "ddp"; o.tier = HK_TIER_STRATEGY;
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_START, noop, NULL, &o, NULL), HK_OK);
  o.name = "logger"; o.tier = HK_TIER_CALLBACK;
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, noop, NULL, &o, NULL), HK_OK);
  o.name = "endmark";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_END, noop, NULL, &o, NULL), HK_OK);
}
static void fire_trace_sequence(hk_registry *reg) {
  fire(reg, HK_ON_TRAIN_START);
  fire(reg, HK_ON_TRAIN_BATCH_START);
  fire(reg, HK_ON_TRAIN_BATCH_END);
  fire(reg, HK_ON_TRAIN_END);
}
static void expected_lines(char *buf, size_t cap) {
  snprintf(buf, cap, "on_train_start %s printer\non_train_batch_start %s model_bs\non_train_batch_start %s ddp\n"
                     "on_train_batch_end %s logger\non_train_end %s endmark\n",
           hk_tier_name(HK_TIER_CALLBACK), hk_tier_name(HK_TIER_MODEL), hk_tier_name(HK_TIER_STRATEGY),
           hk_tier_name(HK_TIER_CALLBACK), hk_tier_name(HK_TIER_CALLBACK));
}

static void test_trace_lines(void **state) {
  hk_registry *reg = mkreg();
  FILE *f = tmpfile();
  char out[4096], want[1024];
  (void)state;
  assert_non_null(f);
  setup_trace_reg(reg);
  hk_trace(reg, HK_TRACE_LINES, f);
  fire_trace_sequence(reg);
  slurp_into(f, out, sizeof out);
  expected_lines(want, sizeof want);
  assert_string_equal(out, want);
  assert_int_equal(count_lines(out), 5); /* one line per hook call, nothing for the events themselves */
  /* off: nothing more is written */
  hk_trace(reg, HK_TRACE_OFF, NULL);
  fire_trace_sequence(reg);
  slurp_into(f, out, sizeof out);
  assert_string_equal(out, want);
  /* turning trace off restores the guards: an empty event is inactive again */
  assert_false(HK_ACTIVE(reg, HK_ON_VALIDATION_START));
  fclose(f);
  destroy_reg(reg);
}

/* A filtered-out or disabled hook is not traced as called. */
static void test_trace_lines_only_called(void **state) {
  hk_registry *reg = mkreg();
  FILE *f = tmpfile();
  char out[4096], want[256];
  hk_opts o = opts_named("odd");
  hk_handle h;
  (void)state;
  assert_non_null(f);
  o.filter.every = 2;
  assert_int_equal(hk_on(reg, HK_ON_BEFORE_BACKWARD, noop, NULL, &o, NULL), HK_OK);
  o = opts_named("off");
  assert_int_equal(hk_on(reg, HK_ON_BEFORE_BACKWARD, noop, NULL, &o, &h), HK_OK);
  assert_int_equal(hk_disable(reg, h), HK_OK);
  hk_trace(reg, HK_TRACE_LINES, f);
  fire(reg, HK_ON_BEFORE_BACKWARD);
  fire(reg, HK_ON_BEFORE_BACKWARD);
  slurp_into(f, out, sizeof out);
  snprintf(want, sizeof want, "on_before_backward %s odd\n", hk_tier_name(HK_TIER_CALLBACK));
  assert_string_equal(out, want);
  fclose(f);
  destroy_reg(reg);
}

static void test_trace_tree(void **state) {
  hk_registry *reg = mkreg();
  FILE *f = tmpfile();
  char out[8192], l1[256], l2[256], l3[256], l4[256];
  (void)state;
  assert_non_null(f);
  setup_trace_reg(reg);
  hk_trace(reg, HK_TRACE_TREE, f);
  fire(reg, HK_SETUP);             /* no hooks: still traced as an event */
  fire_trace_sequence(reg);
  fire(reg, HK_TEARDOWN);
  slurp_into(f, out, sizeof out);
  assert_non_null(line_with(out, "setup", l1, sizeof l1));
  assert_non_null(line_with(out, "on_train_start", l2, sizeof l2));
  assert_non_null(line_with(out, "on_train_batch_start", l3, sizeof l3));
  assert_non_null(line_with(out, "teardown", l4, sizeof l4));
  assert_contains(out, "printer");
  assert_contains(out, "model_bs");
  assert_contains(out, "ddp");
  assert_contains(out, "logger");
  /* nesting: setup < on_train_start < on_train_batch_start; teardown back at setup's depth */
  assert_true(leading_spaces(l2) > leading_spaces(l1));
  assert_true(leading_spaces(l3) > leading_spaces(l2));
  assert_int_equal(leading_spaces(l4), leading_spaces(l1));
  assert_non_null(line_with(out, "on_train_batch_end", l4, sizeof l4));
  assert_int_equal(leading_spaces(l4), leading_spaces(l3)); /* the closing event at its opener's depth */
  assert_non_null(line_with(out, "on_train_end", l4, sizeof l4));
  assert_int_equal(leading_spaces(l4), leading_spaces(l2));
  /* hooks are printed under their event, deeper than it */
  assert_non_null(line_with(out, "ddp", l4, sizeof l4));
  assert_true(leading_spaces(l4) > leading_spaces(l3));
  fclose(f);
  destroy_reg(reg);
}

static void test_trace_env(void **state) {
  hk_desc d;
  hk_registry *reg;
  FILE *f = tmpfile();
  char out[4096], want[1024];
  (void)state;
  assert_non_null(f);
  memset(&d, 0, sizeof d);
  d.trace_out = f;
  assert_int_equal(setenv("HOOKS_TRACE", "lines", 1), 0);
  reg = mkreg_desc(d);
  assert_int_equal(unsetenv("HOOKS_TRACE"), 0);
  setup_trace_reg(reg);
  fire_trace_sequence(reg);
  slurp_into(f, out, sizeof out);
  expected_lines(want, sizeof want);
  assert_string_equal(out, want);
  destroy_reg(reg);
  fclose(f);

  /* tree from the environment */
  f = tmpfile();
  assert_non_null(f);
  d.trace_out = f;
  assert_int_equal(setenv("HOOKS_TRACE", "tree", 1), 0);
  reg = mkreg_desc(d);
  assert_int_equal(unsetenv("HOOKS_TRACE"), 0);
  setup_trace_reg(reg);
  fire_trace_sequence(reg);
  slurp_into(f, out, sizeof out);
  assert_contains(out, "on_train_batch_start");
  assert_contains(out, "ddp");
  assert_true(strcmp(out, want) != 0);
  destroy_reg(reg);
  fclose(f);

  /* no variable: no trace */
  f = tmpfile();
  assert_non_null(f);
  d.trace_out = f;
  reg = mkreg_desc(d);
  setup_trace_reg(reg);
  fire_trace_sequence(reg);
  slurp_into(f, out, sizeof out);
  assert_string_equal(out, "");
  assert_false(HK_ACTIVE(reg, HK_ON_VALIDATION_START));
  destroy_reg(reg);
  fclose(f);
}

/* ---- custom events --------------------------------------------------------------------------------- */

static void test_custom_events(void **state) {
  hk_registry *reg = mkreg(), *other = mkreg();
  int ev = -1, ev2 = -1, x = -1, i;
  rec_t a = { "a", HK_STOP, 0 };
  char name[32];
  (void)state;
  assert_int_equal(hk_event_define(reg, "on_ema_update", 0, &ev), HK_OK);
  assert_int_equal(ev, HK_EVENT_COUNT);
  assert_int_equal(hk_event_define(reg, "on_my_end", HK_CLOSES, &ev2), HK_OK);
  assert_int_equal(ev2, HK_EVENT_COUNT + 1);
  assert_int_equal(hk_event_find(reg, "on_ema_update"), ev);
  assert_int_equal(hk_event_find(other, "on_ema_update"), -1); /* per registry */
  assert_string_equal(hk_event_name(reg, ev), "on_ema_update");
  assert_int_equal(hk_event_flags(reg, ev2), HK_CLOSES);
  assert_int_equal(hk_event_flags(reg, ev), 0);

  on_rec(reg, ev, &a);
  assert_true(HK_ACTIVE(reg, ev));
  assert_int_equal(fire(reg, ev), HK_STOP);
  assert_int_equal(a.calls, 1);
  assert_int_equal(hk_on(other, ev, noop, NULL, NULL, NULL), HK_ERR_UNKNOWN_EVENT);

  /* errors */
  assert_int_equal(hk_event_define(reg, "on_ema_update", 0, &x), HK_ERR_DUPLICATE);
  assert_contains(hk_last_error(reg), "on_ema_update");
  assert_int_equal(hk_event_define(reg, "on_fit_start", 0, &x), HK_ERR_DUPLICATE); /* a built-in */
  assert_int_equal(hk_event_define(reg, NULL, 0, &x), HK_ERR_INVALID);
  assert_int_equal(hk_event_define(reg, "", 0, &x), HK_ERR_INVALID);
  assert_int_equal(hk_event_define(reg, "has space", 0, &x), HK_ERR_INVALID);
  assert_int_equal(hk_event_define(reg, "ok_name", 99, &x), HK_ERR_INVALID);
  assert_int_equal(hk_event_define(reg, "ok_name", HK_OPENS | HK_CLOSES, &x), HK_ERR_INVALID);
  assert_int_equal(hk_event_define(NULL, "ok_name", 0, &x), HK_ERR_INVALID);
  assert_int_equal(hk_event_find(reg, "ok_name"), -1);

  /* capacity: ids up to HK_MAX_EVENTS-1 */
  for (i = HK_EVENT_COUNT + 2; i < HK_MAX_EVENTS; i++) {
    snprintf(name, sizeof name, "user_event_%d", i);
    assert_int_equal(hk_event_define(reg, name, i % 2 ? HK_OPENS : 0, &x), HK_OK);
    assert_int_equal(x, i);
  }
  assert_int_equal(hk_event_define(reg, "one_too_many", 0, &x), HK_ERR_FULL);
  assert_int_equal(hk_event_find(reg, "one_too_many"), -1);
  snprintf(name, sizeof name, "user_event_%d", HK_MAX_EVENTS - 1);
  assert_int_equal(hk_event_find(reg, name), HK_MAX_EVENTS - 1);
  assert_int_equal(hk_on(reg, HK_MAX_EVENTS - 1, rec, &a, NULL, NULL), HK_OK);
  assert_int_equal(fire(reg, HK_MAX_EVENTS - 1), HK_STOP);
  assert_int_equal(a.calls, 2);
  destroy_reg(other);
  destroy_reg(reg);
}

/* ---- callback state ------------------------------------------------------------------------------ */

typedef struct counter_cb { int32_t n; int fail_save, fail_load; int destroyed; } counter_cb;
static int counter_save(void *user, hk_bytes *out) {
  counter_cb *c = (counter_cb *)user;
  if (c->fail_save) return -1;
  return hk_bytes_put(out, &c->n, sizeof c->n);
}
static int counter_load(void *user, hk_reader *in) {
  counter_cb *c = (counter_cb *)user;
  int32_t n;
  if (c->fail_load) return -1;
  if (hk_read(in, &n, sizeof n) != 0) return -1;
  if (in->pos != in->len) return -1; /* trailing bytes */
  c->n = n;
  return 0;
}
static void counter_destroy(void *user) { ((counter_cb *)user)->destroyed++; }
static hk_signal counter_step(hk_ctx *ctx, void *user) { (void)ctx; ((counter_cb *)user)->n++; return HK_CONTINUE; }

static hk_callback counter_callback(const char *name, counter_cb *c, int stateful) {
  hk_callback cb;
  memset(&cb, 0, sizeof cb);
  cb.name = name;
  cb.user = c;
  cb.on_train_batch_end = counter_step;
  if (stateful) { cb.save_state = counter_save; cb.load_state = counter_load; }
  cb.destroy = counter_destroy;
  return cb;
}

typedef struct saved_t { int n; char key[8][32]; unsigned char data[8][16]; size_t len[8]; hk_err ret; } saved_t;
static hk_err sink(const char *key, const void *data, size_t len, void *user) {
  saved_t *s = (saved_t *)user;
  assert_true(s->n < 8);
  assert_true(len <= 16);
  snprintf(s->key[s->n], sizeof s->key[0], "%s", key);
  memcpy(s->data[s->n], data, len);
  s->len[s->n] = len;
  s->n++;
  return s->ret;
}

static void test_state_save_load(void **state) {
  hk_registry *reg = mkreg(), *reg2;
  /* static: the teardown of a failed test still runs destroy on them */
  static counter_cb a, b, c, a2, c2;
  hk_callback cba, cbb, cbc;
  saved_t s;
  int i;
  (void)state;
  memset(&a, 0, sizeof a); memset(&b, 0, sizeof b); memset(&c, 0, sizeof c);
  memset(&a2, 0, sizeof a2); memset(&c2, 0, sizeof c2);
  cba = counter_callback("early_stop", &a, 1);
  cbb = counter_callback("stateless", &b, 0);
  cbc = counter_callback("topk", &c, 1);
  assert_int_equal(hk_add_callback(reg, &cba, NULL, NULL), HK_OK);
  assert_int_equal(hk_add_callback(reg, &cbb, NULL, NULL), HK_OK);
  assert_int_equal(hk_add_callback(reg, &cbc, NULL, NULL), HK_OK);
  for (i = 0; i < 5; i++) fire(reg, HK_ON_TRAIN_BATCH_END);
  c.n += 100;
  memset(&s, 0, sizeof s);
  assert_int_equal(hk_state_save(reg, sink, &s), HK_OK);
  assert_int_equal(s.n, 2); /* registration order; callbacks without save_state are skipped */
  assert_string_equal(s.key[0], "early_stop");
  assert_string_equal(s.key[1], "topk");
  assert_int_equal(s.len[0], 4);
  assert_int_equal(s.len[1], 4);

  /* a fresh registry with the same callbacks restores exactly */
  reg2 = mkreg();
  cba = counter_callback("early_stop", &a2, 1);
  cbc = counter_callback("topk", &c2, 1);
  assert_int_equal(hk_add_callback(reg2, &cbc, NULL, NULL), HK_OK); /* order does not matter for load */
  assert_int_equal(hk_add_callback(reg2, &cba, NULL, NULL), HK_OK);
  for (i = 0; i < s.n; i++) assert_int_equal(hk_state_load(reg2, s.key[i], s.data[i], s.len[i]), HK_OK);
  assert_int_equal(a2.n, 5);
  assert_int_equal(c2.n, 105);

  /* errors */
  assert_int_equal(hk_state_load(reg2, "no_such_callback", s.data[0], s.len[0]), HK_ERR_NOT_FOUND);
  assert_contains(hk_last_error(reg2), "no_such_callback");
  assert_int_equal(hk_state_load(reg2, "early_stop", s.data[0], 3), HK_ERR_STATE); /* short */
  assert_contains(hk_last_error(reg2), "early_stop");
  assert_int_equal(a2.n, 5);
  {
    unsigned char longer[5] = { 1, 0, 0, 0, 9 };
    assert_int_equal(hk_state_load(reg2, "topk", longer, 5), HK_ERR_STATE); /* trailing byte */
  }
  a2.fail_load = 1;
  assert_int_equal(hk_state_load(reg2, "early_stop", s.data[0], s.len[0]), HK_ERR_STATE);
  assert_contains(hk_last_error(reg2), "early_stop");
  a2.fail_load = 0;

  /* a stateless callback has no state to load */
  assert_int_equal(hk_add_callback(reg2, &cbb, NULL, NULL), HK_OK);
  assert_true(hk_state_load(reg2, "stateless", s.data[0], s.len[0]) != HK_OK);

  /* save failures */
  c.fail_save = 1;
  memset(&s, 0, sizeof s);
  assert_int_equal(hk_state_save(reg, sink, &s), HK_ERR_STATE);
  assert_contains(hk_last_error(reg), "topk");
  c.fail_save = 0;
  memset(&s, 0, sizeof s);
  s.ret = HK_ERR_NOMEM; /* the sink's error comes back */
  assert_int_equal(hk_state_save(reg, sink, &s), HK_ERR_NOMEM);
  assert_int_equal(s.n, 1);

  assert_int_equal(hk_state_save(NULL, sink, &s), HK_ERR_INVALID);
  assert_int_equal(hk_state_save(reg, NULL, &s), HK_ERR_INVALID);
  assert_true(hk_state_load(reg, NULL, s.data[0], 4) != HK_OK);
  destroy_reg(reg2);
  destroy_reg(reg);
}

/* hk_state_load_all: all or nothing, unknown keys marked, a failing snapshot loads nothing. */
static void test_state_load_all(void **state) {
  hk_registry *reg = mkreg();
  static counter_cb a, b, c;
  hk_callback cba, cbb, cbc;
  hk_state_blob blobs[4];
  int32_t va = 7, vb = 8, vc = 9, bad = 1;
  (void)state;
  memset(&a, 0, sizeof a); memset(&b, 0, sizeof b); memset(&c, 0, sizeof c);
  a.n = 1; b.n = 2; c.n = 3;
  cba = counter_callback("a", &a, 1);
  cbb = counter_callback("b", &b, 1);
  cbc = counter_callback("c", &c, 1);
  assert_int_equal(hk_add_callback(reg, &cba, NULL, NULL), HK_OK);
  assert_int_equal(hk_add_callback(reg, &cbb, NULL, NULL), HK_OK);
  assert_int_equal(hk_add_callback(reg, &cbc, NULL, NULL), HK_OK);
  memset(blobs, 0, sizeof blobs);
  blobs[0].key = "a"; blobs[0].data = &va; blobs[0].len = 4;
  blobs[1].key = "ghost"; blobs[1].data = &vb; blobs[1].len = 4;
  blobs[2].key = "b"; blobs[2].data = &vb; blobs[2].len = 4;
  blobs[3].key = "c"; blobs[3].data = &vc; blobs[3].len = 4;
  assert_int_equal(hk_state_load_all(reg, blobs, 4), HK_OK);
  assert_int_equal(a.n, 7);
  assert_int_equal(b.n, 8);
  assert_int_equal(c.n, 9);
  assert_int_equal(blobs[0].result, HK_OK);
  assert_int_equal(blobs[1].result, HK_ERR_NOT_FOUND);  /* unknown: skipped, for the caller to warn */

  /* c rejects a 3-byte blob: a and b get their previous values back */
  a.n = 1; b.n = 2; c.n = 3;
  blobs[3].data = &bad; blobs[3].len = 3;
  assert_int_equal(hk_state_load_all(reg, blobs, 4), HK_ERR_STATE);
  assert_int_equal(blobs[3].result, HK_ERR_STATE);
  assert_contains(hk_last_error(reg), "'c' rejected");
  assert_int_equal(a.n, 1);
  assert_int_equal(b.n, 2);
  assert_int_equal(c.n, 3);

  /* a callback that cannot save its current state: nothing is loaded at all */
  blobs[3].data = &vc; blobs[3].len = 4;
  b.fail_save = 1;
  assert_int_equal(hk_state_load_all(reg, blobs, 4), HK_ERR_STATE);
  assert_contains(hk_last_error(reg), "'b' could not save");
  assert_int_equal(a.n, 1);
  assert_int_equal(c.n, 3);
  b.fail_save = 0;

  assert_int_equal(hk_state_load_all(reg, NULL, 0), HK_OK);
  assert_int_equal(hk_state_load_all(reg, NULL, 2), HK_ERR_INVALID);
  assert_int_equal(hk_state_load_all(NULL, blobs, 1), HK_ERR_INVALID);
  destroy_reg(reg);
}

static void test_state_bytes_reader(void **state) {
  hk_bytes b;
  hk_reader r;
  uint32_t i, v;
  unsigned char tail[3];
  (void)state;
  memset(&b, 0, sizeof b);
  for (i = 0; i < 1000; i++) assert_int_equal(hk_bytes_put(&b, &i, sizeof i), 0);
  assert_int_equal(b.len, 4000);
  assert_true(b.cap >= b.len);
  assert_false(b.failed);
  assert_int_equal(hk_bytes_put(&b, "", 0), 0);
  assert_int_equal(b.len, 4000);
  r.data = b.data; r.len = b.len; r.pos = 0;
  for (i = 0; i < 1000; i++) {
    assert_int_equal(hk_read(&r, &v, sizeof v), 0);
    assert_int_equal(v, i);
  }
  assert_int_equal(r.pos, 4000);
  assert_int_equal(hk_read(&r, &v, 1), -1);
  r.pos = 3998;
  assert_int_equal(hk_read(&r, tail, 3), -1); /* fewer than n left */
  assert_int_equal(hk_read(&r, tail, 2), 0);
  assert_int_equal(hk_read(&r, tail, 0), 0);
  hk_bytes_free(&b);
  assert_null(b.data);
  assert_int_equal(b.len, 0);
  hk_bytes_free(&b);
}

/* ---- destroy --------------------------------------------------------------------------------------- */

static void test_destroy_called(void **state) {
  hk_registry *reg = mkreg();
  static counter_cb a, b, c; /* static: see test_state_save_load */
  hk_callback cba, cbb, cbc;
  hk_handle ha = 0, hc = 0;
  hk_opts o;
  (void)state;
  memset(&a, 0, sizeof a); memset(&b, 0, sizeof b); memset(&c, 0, sizeof c);
  cba = counter_callback("a", &a, 0);
  cbb = counter_callback("b", &b, 0);
  cbc = counter_callback("c", &c, 1);
  assert_int_equal(hk_add_callback(reg, &cba, NULL, &ha), HK_OK);
  assert_int_equal(hk_add_callback(reg, &cbb, NULL, NULL), HK_OK);
  memset(&o, 0, sizeof o);
  o.disabled = 1;
  assert_int_equal(hk_add_callback(reg, &cbc, &o, &hc), HK_OK);
  assert_int_equal(hk_off(reg, ha), HK_OK);
  assert_int_equal(a.destroyed, 1);
  assert_int_equal(b.destroyed, 0);
  assert_int_equal(hk_disable(reg, ha), HK_ERR_NOT_FOUND);
  assert_int_equal(a.destroyed, 1);
  assert_int_equal(hk_disable(reg, hc), HK_OK);
  assert_int_equal(c.destroyed, 0); /* disabling is not destroying */
  fire(reg, HK_ON_TRAIN_BATCH_END);
  assert_int_equal(b.n, 1);
  assert_int_equal(c.n, 0);
  destroy_reg(reg);
  assert_int_equal(a.destroyed, 1);
  assert_int_equal(b.destroyed, 1);
  assert_int_equal(c.destroyed, 1); /* disabled ones too */
  hk_destroy(NULL);                 /* harmless */
}

/* The callback struct is copied at registration: the caller's copy may go away. */
static void test_callback_copied(void **state) {
  hk_registry *reg = mkreg();
  static counter_cb a; /* static: see test_state_save_load */
  hk_callback *heap = (hk_callback *)malloc(sizeof *heap);
  char *name = (char *)malloc(16);
  (void)state;
  memset(&a, 0, sizeof a);
  assert_non_null(heap);
  assert_non_null(name);
  strcpy(name, "heapcb");
  *heap = counter_callback(name, &a, 1);
  assert_int_equal(hk_add_callback(reg, heap, NULL, NULL), HK_OK);
  memset(heap, 0, sizeof *heap);
  free(heap);
  memset(name, 'z', 15);
  free(name);
  fire(reg, HK_ON_TRAIN_BATCH_END);
  assert_int_equal(a.n, 1);
  assert_true(hk_find(reg, "heapcb") > 0);
  {
    saved_t s;
    memset(&s, 0, sizeof s);
    assert_int_equal(hk_state_save(reg, sink, &s), HK_OK);
    assert_int_equal(s.n, 1);
    assert_string_equal(s.key[0], "heapcb");
  }
  destroy_reg(reg);
  assert_int_equal(a.destroyed, 1);
}

static void test_callback_ctx_self_and_user(void **state);
typedef struct selfcheck_t { hk_handle expect; int ok, calls; } selfcheck_t;
static hk_signal selfcheck(hk_ctx *ctx, void *user) {
  selfcheck_t *s = (selfcheck_t *)user;
  s->calls++;
  s->ok += ctx->self == s->expect;
  return HK_CONTINUE;
}
static void test_callback_ctx_self_and_user(void **state) {
  hk_registry *reg = mkreg();
  selfcheck_t s = { 0, 0, 0 };
  hk_callback cb;
  hk_handle h = 0;
  (void)state;
  cb = (hk_callback){ .name = "sc", .user = &s, .on_fit_start = selfcheck, .on_fit_end = selfcheck,
                      .on_save_checkpoint = selfcheck };
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &h), HK_OK);
  s.expect = h;
  assert_int_equal(hk_count(reg, HK_ON_FIT_START), 1);
  assert_int_equal(hk_count(reg, HK_ON_FIT_END), 1);
  assert_int_equal(hk_count(reg, HK_ON_SAVE_CHECKPOINT), 1);
  assert_int_equal(hk_count(reg, HK_ON_LOAD_CHECKPOINT), 0);
  assert_false(HK_ACTIVE(reg, HK_ON_LOAD_CHECKPOINT));
  fire(reg, HK_ON_FIT_START);
  fire(reg, HK_ON_FIT_END);
  fire(reg, HK_ON_SAVE_CHECKPOINT);
  fire(reg, HK_ON_LOAD_CHECKPOINT);
  assert_int_equal(s.calls, 3);
  assert_int_equal(s.ok, 3);
  /* disabling the callback disables every one of its functions */
  assert_int_equal(hk_disable(reg, h), HK_OK);
  assert_false(HK_ACTIVE(reg, HK_ON_FIT_START));
  assert_false(HK_ACTIVE(reg, HK_ON_SAVE_CHECKPOINT));
  destroy_reg(reg);
}

/* ---- factories and spec strings ---------------------------------------------------------------- */

static const hk_param es_params[] = {
  { "monitor", HK_PARAM_STRING, NULL, NULL, "metric to watch" },
  { "patience", HK_PARAM_INT, "3", NULL, "epochs without improvement" },
  { "min_delta", HK_PARAM_DOUBLE, "0.0", NULL, "smallest change that counts" },
  { "mode", HK_PARAM_CHOICE, "min", "min|max", "whether lower or higher is better" },
  { "verbose", HK_PARAM_BOOL, "false", NULL, "print when stopping" },
};
static const hk_param pr_params[] = {
  { "every", HK_PARAM_INT, "1", NULL, "print every N steps" },
  { "prefix", HK_PARAM_STRING, "> ", NULL, "line prefix" },
};
static const hk_param fl_params[] = {
  { "fail", HK_PARAM_BOOL, "true", NULL, "return an error" },
};

typedef struct captured_t {
  int calls;
  char monitor[64]; int64_t patience; double min_delta; char mode[8]; int verbose;
  int given_monitor, given_patience;
  char name[64];
} captured_t;
static captured_t g_es[4];
static int g_factory_calls, g_es_calls, g_pr_calls, g_spec_destroyed;
static void spec_destroy(void *user) { (void)user; g_spec_destroyed++; }

static hk_err es_make(hk_registry *reg, const hk_args *a, void *user) {
  captured_t *c = &g_es[g_es_calls++ % 4];
  hk_callback cb;
  assert_ptr_equal(user, (void *)&g_es);
  assert_string_equal(a->factory, "early_stopping");
  g_factory_calls++;
  c->calls++;
  snprintf(c->monitor, sizeof c->monitor, "%s", hk_arg_str(a, "monitor"));
  c->patience = hk_arg_int(a, "patience");
  c->min_delta = hk_arg_double(a, "min_delta");
  snprintf(c->mode, sizeof c->mode, "%s", hk_arg_str(a, "mode"));
  c->verbose = hk_arg_bool(a, "verbose");
  c->given_monitor = hk_arg_given(a, "monitor");
  c->given_patience = hk_arg_given(a, "patience");
  /* one callback named after the monitor: two with the same monitor collide (HK_ERR_DUPLICATE) */
  snprintf(c->name, sizeof c->name, "es:%s", hk_arg_str(a, "monitor"));
  memset(&cb, 0, sizeof cb);
  cb.name = c->name;
  cb.on_validation_end = noop;
  cb.destroy = spec_destroy;
  return hk_add_callback(reg, &cb, NULL, NULL);
}
static hk_err pr_make(hk_registry *reg, const hk_args *a, void *user) {
  hk_opts o;
  (void)user;
  g_factory_calls++;
  g_pr_calls++;
  memset(&o, 0, sizeof o);
  o.name = "printer";
  o.filter.counter = HK_COUNT_STEP;
  o.filter.every = hk_arg_int(a, "every");
  return hk_on(reg, HK_ON_TRAIN_BATCH_END, noop, NULL, &o, NULL);
}
static hk_err fl_make(hk_registry *reg, const hk_args *a, void *user) {
  (void)user;
  g_factory_calls++;
  if (hk_arg_bool(a, "fail")) return HK_ERR_INVALID;
  return hk_on(reg, HK_ON_TRAIN_BATCH_END, noop, NULL, NULL, NULL);
}

static hk_registry *spec_reg(void) {
  hk_registry *reg = mkreg();
  assert_int_equal(hk_factory_add(reg, "early_stopping", es_params, 5, es_make, &g_es, "stop when a metric stops improving"), HK_OK);
  assert_int_equal(hk_factory_add(reg, "printer", pr_params, 2, pr_make, NULL, "print the loss"), HK_OK);
  assert_int_equal(hk_factory_add(reg, "flaky", fl_params, 1, fl_make, NULL, "fails when asked"), HK_OK);
  assert_int_equal(hk_factory_add(reg, "noparams", NULL, 0, fl_make, NULL, NULL), HK_OK);
  memset(g_es, 0, sizeof g_es);
  g_factory_calls = g_es_calls = g_pr_calls = g_spec_destroyed = 0;
  return reg;
}

static void test_spec_good(void **state) {
  hk_registry *reg = spec_reg();
  (void)state;
  assert_int_equal(hk_spec_check(reg, "early_stopping(monitor=val/loss)"), HK_OK);
  assert_int_equal(g_factory_calls, 0); /* check calls nothing */
  assert_int_equal(hk_spec_apply(reg, "early_stopping(monitor=val/loss)"), HK_OK);
  assert_int_equal(g_factory_calls, 1);
  assert_string_equal(g_es[0].monitor, "val/loss");
  assert_int_equal(g_es[0].patience, 3);       /* defaults */
  assert_true(g_es[0].min_delta == 0.0);
  assert_string_equal(g_es[0].mode, "min");
  assert_int_equal(g_es[0].verbose, 0);
  assert_int_equal(g_es[0].given_monitor, 1);
  assert_int_equal(g_es[0].given_patience, 0);
  assert_true(hk_find(reg, "es:val/loss") > 0);
  assert_int_equal(hk_count(reg, HK_ON_VALIDATION_END), 1);
  destroy_reg(reg);

  reg = spec_reg();
  assert_int_equal(hk_spec_apply(reg, "  early_stopping(monitor=val/acc, patience=-7, min_delta=1e-3, mode=max, verbose=true) ;"
                                      " printer(every=10); printer_is_not_twice_here_so_skip=0"), HK_ERR_SPEC);
  assert_int_equal(g_factory_calls, 0);
  assert_int_equal(hk_spec_apply(reg, "  early_stopping(monitor=val/acc, patience=-7, min_delta=1e-3, mode=max, verbose=true) ;"
                                      " printer(every=10) "), HK_OK);
  assert_int_equal(g_factory_calls, 2);
  assert_string_equal(g_es[0].monitor, "val/acc");
  assert_int_equal(g_es[0].patience, -7);
  assert_true(g_es[0].min_delta == 1e-3);
  assert_string_equal(g_es[0].mode, "max");
  assert_int_equal(g_es[0].verbose, 1);
  assert_int_equal(g_es[0].given_patience, 1);
  assert_int_equal(g_pr_calls, 1);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_END), 1);
  destroy_reg(reg);

  /* bare factory name, empty parentheses, quoted strings with escapes, bool spellings */
  reg = spec_reg();
  assert_int_equal(hk_spec_apply(reg, "noparams; early_stopping(monitor=\"val loss, \\\"x\\\" \\\\ y;)\", verbose=false)"), HK_OK);
  assert_string_equal(g_es[0].monitor, "val loss, \"x\" \\ y;)");
  assert_int_equal(g_es[0].verbose, 0);
  assert_int_equal(hk_spec_apply(reg, "early_stopping(monitor=m2, verbose=1)"), HK_OK);
  assert_int_equal(g_es[1].verbose, 1);
  assert_int_equal(hk_spec_apply(reg, "early_stopping(monitor=m3, verbose=0)"), HK_OK);
  assert_int_equal(g_es[2].verbose, 0);
  assert_int_equal(hk_spec_apply(reg, "printer()"), HK_OK);
  assert_int_equal(g_pr_calls, 1);
  assert_int_equal(hk_spec_apply(reg, "flaky(fail=false)"), HK_OK);
  destroy_reg(reg);
}

static const char *spec_error(hk_registry *reg, const char *spec) {
  hk_err e1, e2;
  int before = g_factory_calls;
  e1 = hk_spec_check(reg, spec);
  e2 = hk_spec_apply(reg, spec);
  if (e1 != HK_ERR_SPEC || e2 != HK_ERR_SPEC)
    fail_msg("spec \"%s\": check %s, apply %s, expected HK_ERR_SPEC", spec, hk_err_name(e1), hk_err_name(e2));
  assert_int_equal(g_factory_calls, before); /* nothing is created on a bad spec */
  return hk_last_error(reg);
}

/* Asserts that message m gives the position of `needle` (its first occurrence in spec, or the
   occurrence after `after` characters) as line:column, 1-based, the way hk_last_error reports it. */
static void assert_pos_line(const char *m, const char *spec, size_t after, const char *needle, int line) {
  const char *p = strstr(spec + after, needle);
  char want[32];
  if (!p) fail_msg("line %d: \"%s\" is not in the spec \"%s\"", line, needle, spec);
  snprintf(want, sizeof want, "1:%d", (int)(p - spec) + 1);
  if (!strstr(m, want)) fail_msg("line %d: expected position %s in \"%s\"", line, want, m);
}
#define assert_pos_at(m, spec, after, needle) assert_pos_line((m), (spec), (after), (needle), __LINE__)
#define assert_pos(m, spec, needle) assert_pos_line((m), (spec), 0, (needle), __LINE__)

/* Every error names the bad part, its position and the valid alternatives. */
static void test_spec_bad(void **state) {
  hk_registry *reg = spec_reg();
  const char *m, *sp;
  (void)state;

  m = spec_error(reg, sp = "printer; early_stoping(monitor=x)");
  assert_contains(m, "early_stoping");
  assert_pos(m, sp, "early_stoping");
  assert_contains(m, "early_stopping");   /* alternatives: every factory */
  assert_contains(m, "printer");
  assert_contains(m, "flaky");
  assert_contains(m, "noparams");

  m = spec_error(reg, sp = "printer; early_stopping(monitor=x, patiense=3)");
  assert_contains(m, "'patiense'");
  assert_pos(m, sp, "patiense");
  assert_contains(m, "monitor");          /* alternatives: every key */
  assert_contains(m, "patience");
  assert_contains(m, "min_delta");
  assert_contains(m, "mode");
  assert_contains(m, "verbose");

  m = spec_error(reg, sp = "printer;\nearly_stopping(\n  monitor=x,\n  patiense=3)");
  assert_contains(m, "patiense");
  assert_contains(m, "4:3");              /* line 4, column 3 */

  m = spec_error(reg, sp = "printer(every=2); early_stopping(patience=3)");
  assert_contains(m, "monitor");          /* the missing key */
  assert_contains(m, "early_stopping");
  assert_pos(m, sp, "early_stopping");

  m = spec_error(reg, sp = "early_stopping(monitor=x, min_delta=)");
  assert_contains(m, "value for 'min_delta'");   /* a missing value names its key */
  assert_contains(m, "found ')'");
  assert_pos(m, sp, ")");

  m = spec_error(reg, sp = "early_stopping(monitor=x, patience=abc)");
  assert_contains(m, "'abc'");
  assert_contains(m, "patience");
  assert_contains(m, "integer");
  assert_pos(m, sp, "abc");
  m = spec_error(reg, sp = "early_stopping(monitor=x, patience=3x)");
  assert_contains(m, "'3x'");
  assert_pos(m, sp, "3x");
  m = spec_error(reg, "early_stopping(monitor=x, patience=99999999999999999999999)");
  assert_contains(m, "99999999999999999999999");
  m = spec_error(reg, "early_stopping(monitor=x, patience=1.5)");
  assert_contains(m, "'1.5'");
  m = spec_error(reg, "early_stopping(monitor=x, patience=\"\")");
  assert_contains(m, "patience");

  m = spec_error(reg, sp = "early_stopping(monitor=x, min_delta=1.2.3)");
  assert_contains(m, "'1.2.3'");
  assert_contains(m, "min_delta");
  assert_pos(m, sp, "1.2.3");
  m = spec_error(reg, sp = "early_stopping(monitor=x, min_delta=)");
  assert_pos(m, sp, ")");
  assert_contains(m, "')'");

  m = spec_error(reg, sp = "early_stopping(monitor=x, verbose=maybe)");
  assert_contains(m, "'maybe'");
  assert_contains(m, "verbose");
  assert_contains(m, "true");
  assert_contains(m, "false");
  assert_pos(m, sp, "maybe");

  m = spec_error(reg, sp = "early_stopping(monitor=x, mode=avg)");
  assert_contains(m, "'avg'");
  assert_contains(m, "mode");
  assert_contains(m, "min|max");
  assert_pos(m, sp, "avg");
  m = spec_error(reg, "early_stopping(monitor=x, mode=mi)"); /* a prefix of a choice is not a choice */
  assert_contains(m, "'mi'");
  m = spec_error(reg, "early_stopping(monitor=x, mode=MIN)"); /* choices are case-sensitive */
  assert_contains(m, "'MIN'");

  m = spec_error(reg, sp = "early_stopping(monitor=x, patience=1, patience=2)");
  assert_contains(m, "patience");
  assert_contains(m, "twice");
  assert_pos_at(m, sp, 30, "patience");   /* the second one */

  m = spec_error(reg, sp = "early_stopping(monitor=x");
  assert_contains(m, "unclosed");
  assert_contains(m, "'('");
  assert_pos(m, sp, "(");
  m = spec_error(reg, sp = "early_stopping(monitor=x, patience=3");
  assert_contains(m, "unclosed");
  assert_pos(m, sp, "(");
  m = spec_error(reg, sp = "early_stopping(monitor=\"x)");
  assert_contains(m, "unterminated");
  assert_pos(m, sp, "\"");
  m = spec_error(reg, sp = "early_stopping(monitor=\"x\\q\")");
  assert_contains(m, "\\q");
  m = spec_error(reg, sp = "early_stopping(monitor=x) junk");
  assert_contains(m, "'junk'");
  assert_contains(m, "';'");
  assert_pos(m, sp, "junk");
  m = spec_error(reg, sp = "early_stopping(monitor=x))");
  assert_pos_at(m, sp, 25, ")");          /* the second ')' */
  m = spec_error(reg, sp = "early_stopping(monitor)");
  assert_contains(m, "'='");
  assert_pos(m, sp, ")");
  m = spec_error(reg, sp = "early_stopping(=x)");
  assert_pos(m, sp, "=");
  m = spec_error(reg, sp = "early_stopping(monitor=x,)");
  assert_pos(m, sp, ")");
  m = spec_error(reg, sp = "early_stopping(monitor=x,,patience=1)");
  assert_pos(m, sp, ",patience");       /* the second comma */
  m = spec_error(reg, sp = "(monitor=x)");
  assert_pos(m, sp, "(");
  m = spec_error(reg, sp = "printer;;printer");
  assert_pos(m, sp, ";printer");
  m = spec_error(reg, sp = "printer(every=1) printer");
  assert_pos_at(m, sp, 1, "printer");    /* the second name */
  m = spec_error(reg, "early stopping");
  m = spec_error(reg, ";");
  m = spec_error(reg, "printer(every=1, prefix=a b)");
  m = spec_error(reg, "early_stopping(monitor=x, patience=3) ; noparams(x=1)");
  assert_contains(m, "'x'");
  assert_contains(m, "noparams");

  assert_int_equal(hk_spec_check(reg, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_spec_apply(reg, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_spec_check(NULL, "printer"), HK_ERR_INVALID);
  assert_int_equal(hk_spec_apply(NULL, "printer"), HK_ERR_INVALID);
  assert_int_equal(g_factory_calls, 0);
  destroy_reg(reg);
}

/* An empty spec (or only whitespace) means "no callbacks" (a configuration's callbacks: ""): HK_OK,
   nothing called, nothing registered or recorded. An empty item between ';' is still an error. */
static void test_spec_empty(void **state) {
  hk_registry *reg = spec_reg();
  (void)state;
  assert_int_equal(hk_spec_apply(reg, ""), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "   \n\t "), HK_OK);
  assert_int_equal(hk_spec_check(reg, " "), HK_OK);
  assert_int_equal(g_factory_calls, 0);
  assert_null(hk_spec_applied(reg, 0));
  assert_int_equal(hk_spec_find(reg, NULL, 0), 0);
  assert_int_equal(hk_spec_apply(reg, " ; "), HK_ERR_SPEC);
  destroy_reg(reg);
}

/* All or nothing: when a later factory fails, earlier registrations are removed again. */
static void test_spec_all_or_nothing(void **state) {
  hk_registry *reg = spec_reg();
  hk_err e;
  (void)state;
  e = hk_spec_apply(reg, "early_stopping(monitor=a); printer(every=2); flaky");
  assert_int_equal(e, HK_ERR_INVALID); /* the factory's own error comes back */
  assert_int_equal(g_factory_calls, 3);
  assert_int_equal(hk_find(reg, "es:a"), 0);
  assert_int_equal(hk_find(reg, "printer"), 0);
  assert_int_equal(hk_count(reg, HK_ON_VALIDATION_END), 0);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_END), 0);
  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_BATCH_END));
  assert_int_equal(g_spec_destroyed, 1); /* the undone callback was destroyed */
  assert_contains(hk_last_error(reg), "flaky");

  /* a duplicate created by the second instance: the first is undone */
  g_factory_calls = 0;
  e = hk_spec_apply(reg, "early_stopping(monitor=b); early_stopping(monitor=b)");
  assert_int_equal(e, HK_ERR_DUPLICATE);
  assert_int_equal(g_factory_calls, 2);
  assert_int_equal(hk_find(reg, "es:b"), 0);
  assert_int_equal(hk_count(reg, HK_ON_VALIDATION_END), 0);

  /* registrations from before the spec are untouched */
  assert_int_equal(hk_spec_apply(reg, "early_stopping(monitor=keep)"), HK_OK);
  g_factory_calls = 0;
  e = hk_spec_apply(reg, "printer; early_stopping(monitor=keep)");
  assert_int_equal(e, HK_ERR_DUPLICATE);
  assert_true(hk_find(reg, "es:keep") > 0);
  assert_int_equal(hk_find(reg, "printer"), 0);
  assert_int_equal(hk_count(reg, HK_ON_VALIDATION_END), 1);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_BATCH_END), 0);
  /* hk_spec_applied remembers only the specs that were applied, in order */
  assert_string_equal(hk_spec_applied(reg, 0), "early_stopping(monitor=keep)");
  assert_null(hk_spec_applied(reg, 1));
  assert_null(hk_spec_applied(reg, -1));
  assert_null(hk_spec_applied(NULL, 0));
  destroy_reg(reg);
}

/* A factory that fails without a message of its own: the spec error must not quote an older,
   unrelated error left in hk_last_error. */
static void test_spec_factory_error_message_fresh(void **state) {
  hk_registry *reg = spec_reg();
  const char *m;
  (void)state;
  assert_int_equal(hk_on(reg, HK_SETUP, NULL, NULL, NULL, NULL), HK_ERR_INVALID); /* leaves a message */
  assert_contains(hk_last_error(reg), "NULL");
  assert_int_equal(hk_spec_apply(reg, "flaky"), HK_ERR_INVALID);
  m = hk_last_error(reg);
  assert_contains(m, "flaky");
  assert_contains(m, "1:1");
  assert_not_contains(m, "NULL");
  destroy_reg(reg);
}

static void test_factory_errors(void **state) {
  hk_registry *reg = spec_reg();
  hk_param many[HK_SPEC_MAX_ARGS + 1];
  hk_param bad_default[1] = { { "n", HK_PARAM_INT, "notanint", NULL, NULL } };
  hk_param bad_choice[1] = { { "m", HK_PARAM_CHOICE, "min", NULL, NULL } };
  hk_param dup_keys[2] = { { "k", HK_PARAM_INT, "1", NULL, NULL }, { "k", HK_PARAM_INT, "2", NULL, NULL } };
  int i;
  (void)state;
  assert_int_equal(hk_factory_add(reg, "printer", pr_params, 2, pr_make, NULL, NULL), HK_ERR_DUPLICATE);
  assert_int_equal(hk_factory_add(reg, "x", pr_params, 2, NULL, NULL, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_factory_add(reg, NULL, pr_params, 2, pr_make, NULL, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_factory_add(NULL, "x", pr_params, 2, pr_make, NULL, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_factory_add(reg, "x", NULL, 2, pr_make, NULL, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_factory_add(reg, "x", pr_params, -1, pr_make, NULL, NULL), HK_ERR_INVALID);
  for (i = 0; i <= HK_SPEC_MAX_ARGS; i++) {
    many[i].key = "k"; many[i].type = HK_PARAM_INT; many[i].def = "0"; many[i].choices = NULL; many[i].doc = NULL;
  }
  assert_int_equal(hk_factory_add(reg, "x", many, HK_SPEC_MAX_ARGS + 1, pr_make, NULL, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_factory_add(reg, "x", bad_default, 1, pr_make, NULL, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_factory_add(reg, "x", bad_choice, 1, pr_make, NULL, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_factory_add(reg, "x", dup_keys, 2, pr_make, NULL, NULL), HK_ERR_DUPLICATE);
  assert_int_equal(hk_factory_add(reg, "bad name(", pr_params, 2, pr_make, NULL, NULL), HK_ERR_INVALID);
  assert_int_equal(hk_spec_check(reg, "x"), HK_ERR_SPEC);
  destroy_reg(reg);
}

/* A factory without make is a name known but not available here: naming it fails with its doc, at parse
   time (nothing of the spec is applied); registering one needs a doc that says why. */
static void test_factory_unavailable(void **state) {
  hk_registry *reg = spec_reg();
  (void)state;
  assert_int_equal(hk_factory_add(reg, "gone", NULL, 0, NULL, NULL, ""), HK_ERR_INVALID);
  assert_non_null(strstr(hk_last_error(reg), "no doc says why"));
  assert_int_equal(hk_factory_add(reg, "gone", NULL, 0, NULL, NULL, "left out by -DNO_GONE"), HK_OK);
  assert_int_equal(hk_spec_check(reg, "gone"), HK_ERR_SPEC);
  assert_non_null(strstr(hk_last_error(reg), "'gone' is not available: left out by -DNO_GONE"));
  assert_int_equal(hk_spec_apply(reg, "printer(every=2); gone(k=1)"), HK_ERR_SPEC); /* refused before its keys */
  assert_non_null(strstr(hk_last_error(reg), "1:19: 'gone' is not available"));
  assert_int_equal(hk_spec_find(reg, "printer", 0), 0);                            /* all or nothing */
  destroy_reg(reg);
}

/* hk_arg_* on keys that were not declared */
static hk_err args_probe(hk_registry *reg, const hk_args *a, void *user) {
  (void)reg;
  (void)user;
  assert_int_equal(a->n, 2);
  assert_int_equal(hk_arg_given(a, "nope"), 0);
  assert_int_equal(hk_arg_int(a, "nope"), 0);
  assert_true(hk_arg_double(a, "nope") == 0.0);
  assert_int_equal(hk_arg_bool(a, "nope"), 0);
  assert_null(hk_arg_str(a, "nope"));
  assert_int_equal(hk_arg_int(a, "every"), 5);
  assert_string_equal(hk_arg_str(a, "prefix"), "> ");
  g_factory_calls++;
  return HK_OK;
}
static void test_spec_args_accessors(void **state) {
  hk_registry *reg = spec_reg();
  (void)state;
  assert_int_equal(hk_factory_add(reg, "probe", pr_params, 2, args_probe, NULL, NULL), HK_OK);
  assert_int_equal(hk_spec_apply(reg, "probe(every=5)"), HK_OK);
  assert_int_equal(g_factory_calls, 1);
  destroy_reg(reg);
}

/* ---- several registries are independent ------------------------------------------------------- */

static void test_registries_independent(void **state) {
  hk_registry *r1 = mkreg(), *r2 = mkreg();
  rec_t a = { "a", HK_CONTINUE, 0 }, b = { "b", HK_STOP, 0 };
  (void)state;
  on_rec(r1, HK_ON_TRAIN_START, &a);
  on_rec(r2, HK_ON_TRAIN_START, &b); /* same name "b" in another registry is fine */
  assert_int_equal(hk_on(r2, HK_ON_TRAIN_START, noop, NULL, NULL, NULL), HK_OK);
  assert_int_equal(fire(r1, HK_ON_TRAIN_START), HK_CONTINUE);
  assert_int_equal(fire(r2, HK_ON_TRAIN_START), HK_STOP);
  assert_int_equal(a.calls, 1);
  assert_int_equal(b.calls, 1);
  assert_int_equal(hk_count(r1, HK_ON_TRAIN_START), 1);
  assert_int_equal(hk_count(r2, HK_ON_TRAIN_START), 2);
  destroy_reg(r1);
  destroy_reg(r2);
}


/* A hook that fires the event it runs in recurses; HK_MAX_DEPTH stops it with a clear failure
   instead of a stack overflow, and the failure travels back up to the outermost dispatch. */
static int g_depth_calls;
static hk_signal recurse(hk_ctx *ctx, void *user) {
  (void)user;
  g_depth_calls++;
  return HK_FIRE(ctx->reg, ctx->event, ctx);
}
static void test_nesting_limit(void **state) {
  hk_registry *reg = mkreg();
  hk_ctx c = ctx0();
  int ev = -1;
  (void)state;
  assert_int_equal(hk_event_define(reg, "on_again", 0, &ev), HK_OK);
  assert_int_equal(hk_on(reg, ev, recurse, NULL, NULL, NULL), HK_OK);
  g_depth_calls = 0;
  assert_int_equal(HK_FIRE(reg, ev, &c), HK_FAIL);
  assert_int_equal(g_depth_calls, HK_MAX_DEPTH);
  assert_non_null(c.hook_failure);
  assert_string_equal(c.hook_failure, "on_again fired 65 dispatches deep, past HK_MAX_DEPTH (64): does a hook fire the "
                      "event it is running in, or save a checkpoint from on_save_checkpoint?");
  assert_int_equal(g_nmsgs, 0); /* each level passes the root cause on: one report in all */
  /* the registry is intact afterwards */
  hk_off(reg, hk_find(reg, "hook#1"));
  assert_int_equal(HK_FIRE(reg, ev, &c), HK_CONTINUE);
  hk_ctx_free(&c);
  destroy_reg(reg);
}


/* ---- one hook ------------------------------------------------------------------------------------
   HK_FIRE runs a plain dispatch inline at the site (hooks.h's hk__fire), and an event with one hook
   is the common case. Everything a dispatch does happens there too: a change a hook makes waits for
   the end of the dispatch and is applied then; signals, HK_FIRE_FLOW and the error policies; a new
   hk__seq per dispatch (lazy metrics); nesting through the general loop with ctx->event and ctx->self
   put back; a NULL ctx; the trace and the profile switching the event to the general loop and back;
   filters and rank_zero_only. */
static hk_signal disable_self(hk_ctx *ctx, void *user) {
  rec_t *r = (rec_t *)user;
  r->calls++;
  log_add(r->tag);
  assert_int_equal(hk_disable(ctx->reg, ctx->self), HK_OK);
  return r->ret;
}
typedef struct again_t { int calls, event_after; hk_handle self, self_after; uint64_t seq_inner; } again_t;
static hk_signal fire_again(hk_ctx *ctx, void *user) { /* fires its own event once, from inside */
  again_t *a = (again_t *)user;
  if (a->calls++ == 0) {
    uint64_t seq = ctx->hk__seq;
    a->self = ctx->self;
    assert_int_equal(HK_FIRE(ctx->reg, ctx->event, ctx), HK_SKIP_BATCH);
    a->seq_inner = ctx->hk__seq - seq;
    a->event_after = ctx->event;
    a->self_after = ctx->self;
    return HK_CONTINUE;
  }
  return HK_SKIP_BATCH;
}
static void test_dispatch_one_hook(void **state) {
  hk_registry *reg = mkreg();
  rec_t ds = { "ds", HK_CONTINUE, 0 }, b = { "b", HK_CONTINUE, 0 }, d = { "d", HK_CONTINUE, 0 };
  rec_t stop = { "stop", HK_STOP, 0 }, ff = { "ff", HK_CONTINUE, 0 }, w = { "w", HK_CONTINUE, 0 };
  rec_t skip = { "skip", HK_SKIP_STEP, 0 }, t = { "t", HK_CONTINUE, 0 }, pr = { "pr", HK_CONTINUE, 0 };
  rec_t ev2 = { "ev2", HK_STOP, 0 }, r0 = { "r0", HK_SKIP_BATCH, 0 };
  action_t off = { "off", 0, ACT_OFF_TARGET, 0, NULL, -1 }, dis = { "dis", 0, ACT_DISABLE_TARGET, 0, NULL, -1 };
  again_t again;
  lazy_t l = { 0, 10.0 };
  asker_t ask = { "ask", 2, { 0 }, 0 };
  hk_opts o;
  hk_handle h;
  hk_flow flow = { 0 };
  hk_ctx c = ctx0();
  hk_prof p;
  FILE *f = tmpfile();
  char out[1024];
  int seen = -1, i;
  (void)state;
  assert_non_null(f);
  memset(&again, 0, sizeof again);

  /* a hook disables itself; applied when its dispatch ends (nothing else fires in between), with or
     without a signal */
  h = on_named(reg, HK_ON_TRAIN_START, disable_self, &ds, "ds");
  assert_int_equal(fire(reg, HK_ON_TRAIN_START), HK_CONTINUE);
  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_START));
  assert_false(hk_is_enabled(reg, h));
  assert_int_equal(fire(reg, HK_ON_TRAIN_START), HK_CONTINUE);
  assert_int_equal(ds.calls, 1);
  assert_int_equal(hk_enable(reg, h), HK_OK);
  ds.ret = HK_SKIP_STEP;
  assert_int_equal(fire(reg, HK_ON_TRAIN_START), HK_SKIP_STEP);
  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_START));
  assert_int_equal(ds.calls, 2);

  /* a hook removes, another disables, the one hook of another event: applied when the dispatch ends */
  off.target = on_rec(reg, HK_ON_FIT_END, &b);
  dis.target = on_rec(reg, HK_ON_TEST_END, &d);
  on_actor(reg, HK_ON_FIT_START, &off);
  on_actor(reg, HK_ON_TEST_START, &dis);
  log_reset();
  assert_int_equal(fire(reg, HK_ON_FIT_START), HK_CONTINUE);
  assert_int_equal(off.err, HK_OK);
  assert_false(HK_ACTIVE(reg, HK_ON_FIT_END));
  assert_int_equal(hk_count(reg, HK_ON_FIT_END), 0);
  assert_int_equal(fire(reg, HK_ON_TEST_START), HK_CONTINUE);
  assert_int_equal(dis.err, HK_OK);
  assert_false(HK_ACTIVE(reg, HK_ON_TEST_END));
  assert_int_equal(hk_find(reg, "b"), 0);
  assert_false(hk_is_enabled(reg, dis.target));
  fire(reg, HK_ON_FIT_END);
  fire(reg, HK_ON_TEST_END);
  assert_string_equal(g_log, "off dis");

  /* signals: HK_STOP as it is; HK_FIRE_FLOW degrades what the event does not honour into the flow */
  on_rec(reg, HK_ON_TRAIN_EPOCH_END, &stop);
  assert_int_equal(fire(reg, HK_ON_TRAIN_EPOCH_END), HK_STOP);
  on_rec(reg, HK_ON_VALIDATION_END, &skip);
  assert_int_not_equal(hk_honoured(reg, HK_ON_VALIDATION_END, HK_SKIP_STEP), HK_SKIP_STEP);
  assert_int_equal(HK_FIRE(reg, HK_ON_VALIDATION_END, &c), HK_SKIP_STEP);
  assert_int_equal(HK_FIRE_FLOW(reg, HK_ON_VALIDATION_END, &c, &flow), hk_honoured(reg, HK_ON_VALIDATION_END, HK_SKIP_STEP));
  assert_int_equal(flow.signals, 0u);
  assert_int_equal(HK_FIRE_FLOW(reg, HK_ON_TRAIN_EPOCH_END, &c, &flow), HK_STOP);
  assert_int_equal(flow.signals, HK_SIGNAL_BIT(HK_STOP));

  /* error policies: fatal (the failure in ctx->hook_failure, HK_FAIL into the flow), warn */
  on_named(reg, HK_ON_SANITY_CHECK_START, failer, &ff, "ff");
  assert_int_equal(HK_FIRE_FLOW(reg, HK_ON_SANITY_CHECK_START, &c, &flow), HK_FAIL);
  assert_string_equal(c.hook_failure, "hook 'ff' failed in on_sanity_check_start: boom 42 in ff");
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_FAIL));
  c.hook_failure = NULL;
  o = opts_named("w");
  o.on_error = HK_ON_ERROR_WARN;
  assert_int_equal(hk_on(reg, HK_ON_SANITY_CHECK_END, failer, &w, &o, NULL), HK_OK);
  log_reset();
  assert_int_equal(HK_FIRE(reg, HK_ON_SANITY_CHECK_END, &c), HK_CONTINUE);
  assert_null(c.hook_failure);
  assert_int_equal(g_nmsgs, 1);
  assert_contains(g_msgs, "warning: hook 'w' failed in on_sanity_check_end: boom 42 in w");

  /* the hook fires its own event: the nested dispatch runs (the general loop), then ctx->event and
     ctx->self are the outer hook's again; each dispatch counts */
  h = on_named(reg, HK_ON_PREDICT_START, fire_again, &again, "again");
  assert_int_equal(HK_FIRE(reg, HK_ON_PREDICT_START, &c), HK_CONTINUE);
  assert_int_equal(again.calls, 2);
  assert_int_equal(again.self, h);
  assert_int_equal(again.self_after, h);
  assert_int_equal(again.event_after, HK_ON_PREDICT_START);
  assert_int_equal(again.seq_inner, 1);
  assert_int_equal(HK_FIRE(reg, HK_ON_PREDICT_START, &c), HK_SKIP_BATCH); /* and the registry is not left busy */
  assert_int_equal(hk_off(reg, h), HK_OK);
  assert_false(HK_ACTIVE(reg, HK_ON_PREDICT_START));

  /* a lazy metric is computed once per dispatch that asks, again at the next */
  on_named(reg, HK_ON_BEFORE_OPTIMIZER_STEP, asker, &ask, "ask");
  assert_int_equal(hk_metric_lazy(&c, "grad_norm", lazy_fn, &l), HK_OK);
  for (i = 1; i <= 3; i++) {
    c.global_step = i;
    (void)HK_FIRE(reg, HK_ON_BEFORE_OPTIMIZER_STEP, &c);
    assert_int_equal(l.computed, i);
    assert_true(ask.got[i - 1] == 10.0 + i);
  }

  /* a NULL ctx: the hook sees a scratch context with the event set */
  on_named(reg, HK_ON_PREDICT_END, see_event, &seen, "see_event");
  assert_int_equal(HK_FIRE(reg, HK_ON_PREDICT_END, NULL), HK_CONTINUE);
  assert_int_equal(seen, HK_ON_PREDICT_END);

  /* the trace: on, off, on again */
  on_rec(reg, HK_ON_VALIDATION_START, &t);
  hk_trace(reg, HK_TRACE_LINES, f);
  fire(reg, HK_ON_VALIDATION_START);
  hk_trace(reg, HK_TRACE_OFF, NULL);
  fire(reg, HK_ON_VALIDATION_START);
  hk_trace(reg, HK_TRACE_LINES, f);
  fire(reg, HK_ON_VALIDATION_START);
  hk_trace(reg, HK_TRACE_OFF, NULL);
  slurp_into(f, out, sizeof out);
  assert_int_equal(count_lines(out), 2);
  assert_contains(out, "on_validation_start callback t\n");
  assert_int_equal(t.calls, 3);

  /* the profile: dispatches are timed while it is on, not after */
  on_rec(reg, HK_ON_VALIDATION_EPOCH_START, &pr);
  hk_profile(reg, 1);
  fire(reg, HK_ON_VALIDATION_EPOCH_START);
  fire(reg, HK_ON_VALIDATION_EPOCH_START);
  hk_profile(reg, 0);
  fire(reg, HK_ON_VALIDATION_EPOCH_START);
  assert_int_equal(hk_profile_event(reg, HK_ON_VALIDATION_EPOCH_START, &p), 0);
  assert_int_equal(p.calls, 2);
  assert_int_equal(hk_profile_hook(reg, HK_ON_VALIDATION_EPOCH_START, 0, &p), 0);
  assert_int_equal(p.calls, 2);
  assert_int_equal(pr.calls, 3);

  /* a filter (every 2nd call) and rank_zero_only, each the only hook of its event */
  o = opts_named("ev2");
  o.filter.every = 2;
  on_opts(reg, HK_ON_VALIDATION_EPOCH_END, &ev2, o);
  for (i = 0; i < 4; i++) assert_int_equal(fire(reg, HK_ON_VALIDATION_EPOCH_END), i % 2 ? HK_STOP : HK_CONTINUE);
  assert_int_equal(ev2.calls, 2);
  o = opts_named("r0");
  o.rank_zero_only = 1;
  on_opts(reg, HK_ON_TEST_EPOCH_END, &r0, o);
  c.rank = 1;
  assert_int_equal(HK_FIRE(reg, HK_ON_TEST_EPOCH_END, &c), HK_CONTINUE);
  assert_int_equal(r0.calls, 0);
  c.rank = 0;
  assert_int_equal(HK_FIRE(reg, HK_ON_TEST_EPOCH_END, &c), HK_SKIP_BATCH);
  assert_int_equal(r0.calls, 1);
  fclose(f);
  hk_ctx_free(&c);
  destroy_reg(reg);
}

/* ---- registry hardening ----------------------------------------------------------------------- */

/* Thousands of hooks registered in descending and scrambled orders, across tiers, with removals,
   disables and mid-dispatch changes: the run order is exactly (tier, order, registration), reversed
   on closing events when reverse_end_events is set. (Registration used to rebuild every list with an
   insertion sort each time: O(n^3) for descending orders.) */
enum { MANY = 3000 };
typedef struct many_t { int ran[MANY + 8]; int n; } many_t;
static hk_signal many_hook(hk_ctx *ctx, void *user) {
  many_t *m = (many_t *)user;
  m->ran[m->n++] = ctx->self;
  return HK_CONTINUE;
}
static int g_many_tier[MANY + 8], g_many_order[MANY + 8], g_many_rev;
static int many_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b, c;
  if (g_many_tier[x] != g_many_tier[y]) c = g_many_tier[x] < g_many_tier[y] ? -1 : 1;
  else if (g_many_order[x] != g_many_order[y]) c = g_many_order[x] < g_many_order[y] ? -1 : 1;
  else c = x < y ? -1 : 1; /* handles grow with registration */
  return g_many_rev ? -c : c;
}
static void check_many(hk_registry *reg, int ev, const int *live, int n_live, many_t *m) {
  int want[MANY + 8], i;
  memcpy(want, live, sizeof *want * (size_t)n_live);
  qsort(want, (size_t)n_live, sizeof *want, many_cmp);
  m->n = 0;
  (void)fire(reg, ev);
  assert_int_equal(m->n, n_live);
  for (i = 0; i < n_live; i++) if (m->ran[i] != want[i]) fail_msg("position %d: ran %d, expected %d", i, m->ran[i], want[i]);
}
static void test_many_hooks_order(void **state) {
  int rev;
  (void)state;
  for (rev = 0; rev <= 1; rev++) {
    hk_desc d;
    hk_registry *reg;
    many_t m;
    int live[MANY + 8], n_live = 0, i, ev = rev ? HK_ON_TRAIN_BATCH_END : HK_ON_TRAIN_BATCH_START;
    uint32_t seed = 99;
    memset(&d, 0, sizeof d);
    d.max_hooks = MANY + 8;
    d.reverse_end_events = rev;
    reg = mkreg_desc(d);
    g_many_rev = rev; /* on_train_batch_end closes a span: reversed */
    for (i = 0; i < MANY; i++) {
      hk_opts o;
      hk_handle h;
      memset(&o, 0, sizeof o);
      seed = seed * 1664525u + 1013904223u;
      o.order = i < MANY / 2 ? MANY - i : (int)(seed >> 20) % 50; /* descending, then scrambled with ties */
      o.tier = (hk_tier)((seed >> 8) % 3);
      assert_int_equal(hk_on(reg, ev, many_hook, &m, &o, &h), HK_OK);
      g_many_tier[h] = (int)o.tier;
      g_many_order[h] = o.order;
      live[n_live++] = h;
    }
    check_many(reg, ev, live, n_live, &m);
    hk_trace(reg, HK_TRACE_OFF, NULL); /* a full rebuild (one sort per event) gives the same order */
    check_many(reg, ev, live, n_live, &m);
    /* remove every third, disable every fifth (and enable half of those again) */
    for (i = 0; i < n_live; i++) if (i % 3 == 0) assert_int_equal(hk_off(reg, live[i]), HK_OK);
    for (i = 0; i < n_live; i++) if (i % 3 != 0 && i % 5 == 1) assert_int_equal(hk_disable(reg, live[i]), HK_OK);
    for (i = 0; i < n_live; i++) if (i % 3 != 0 && i % 10 == 1) assert_int_equal(hk_enable(reg, live[i]), HK_OK);
    {
      int k = 0;
      for (i = 0; i < n_live; i++) if (i % 3 != 0 && (i % 5 != 1 || i % 10 == 1)) live[k++] = live[i];
      n_live = k;
    }
    check_many(reg, ev, live, n_live, &m);
    assert_int_equal(hk_count(reg, ev), n_live);
    destroy_reg(reg);
  }
}

/* A callback whose destroy removes another registration: when it is hk_off'ed, and during hk_destroy.
   Registering from a destroy during hk_destroy is refused. Run under ASan and valgrind. */
typedef struct killer_t { hk_registry *reg; hk_handle victim; int destroyed; hk_err off, on; } killer_t;
static int g_victim_destroyed;
static void victim_destroy(void *user) { (void)user; g_victim_destroyed++; }
static void killer_destroy(void *user) {
  killer_t *k = (killer_t *)user;
  k->destroyed++;
  k->off = hk_off(k->reg, k->victim);
  k->on = hk_on(k->reg, HK_SETUP, noop, NULL, NULL, NULL);
}
static hk_handle add_cb(hk_registry *reg, const char *name, void (*destroy)(void *), void *user) {
  hk_callback cb;
  hk_handle h = 0;
  memset(&cb, 0, sizeof cb);
  cb.name = name;
  cb.user = user;
  cb.on_train_start = noop;
  cb.destroy = destroy;
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &h), HK_OK);
  return h;
}
static void test_destroy_reentrancy(void **state) {
  hk_registry *reg = mkreg();
  killer_t k;
  hk_handle hk;
  (void)state;
  memset(&k, 0, sizeof k);
  k.reg = reg;
  g_victim_destroyed = 0;
  k.victim = add_cb(reg, "victim", victim_destroy, NULL);
  hk = add_cb(reg, "killer", killer_destroy, &k);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_START), 2);
  assert_int_equal(hk_off(reg, hk), HK_OK);       /* the killer's destroy removes the victim */
  assert_int_equal(k.destroyed, 1);
  assert_int_equal(k.off, HK_OK);
  assert_int_equal(g_victim_destroyed, 1);
  assert_int_equal(k.on, HK_OK);                  /* outside hk_destroy, a destroy may register */
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_START), 0);
  assert_int_equal(hk_count(reg, HK_SETUP), 1);
  assert_int_equal(fire(reg, HK_ON_TRAIN_START), HK_CONTINUE);

  /* during hk_destroy: the victim (registered after the killer) is destroyed once, registering fails */
  memset(&k, 0, sizeof k);
  k.reg = reg;
  g_victim_destroyed = 0;
  (void)add_cb(reg, "killer2", killer_destroy, &k);
  k.victim = add_cb(reg, "victim2", victim_destroy, NULL);
  destroy_reg(reg);
  assert_int_equal(k.destroyed, 1);
  assert_int_equal(k.off, HK_OK);
  assert_int_equal(k.on, HK_ERR_INVALID);
  assert_int_equal(g_victim_destroyed, 1);

  /* and the other way round: the victim was destroyed already, so hk_off says it is gone */
  reg = mkreg();
  memset(&k, 0, sizeof k);
  k.reg = reg;
  g_victim_destroyed = 0;
  k.victim = add_cb(reg, "victim3", victim_destroy, NULL);
  (void)add_cb(reg, "killer3", killer_destroy, &k);
  destroy_reg(reg);
  assert_int_equal(k.off, HK_ERR_NOT_FOUND);
  assert_int_equal(g_victim_destroyed, 1);
}

/* Mid-dispatch changes to a long list: hooks registered (descending and scrambled orders, all tiers),
   removed, disabled and re-enabled from inside another event's dispatch wait for the full rebuild,
   which then gives exactly the (tier, order, registration) order. */
typedef struct many_driver_t { many_t *m; int *live, *n_live, ev; uint32_t seed; hk_err err; } many_driver_t;
static hk_signal many_driver(hk_ctx *ctx, void *user) {
  many_driver_t *d = (many_driver_t *)user;
  int i, k = 0, n = *d->n_live;
  for (i = 0; i < MANY / 2 && !d->err; i++) {
    hk_opts o;
    hk_handle h = 0;
    memset(&o, 0, sizeof o);
    d->seed = d->seed * 1664525u + 1013904223u;
    o.order = i % 2 ? -i : (int)(d->seed >> 20) % 40;
    o.tier = (hk_tier)((d->seed >> 8) % 3);
    d->err = hk_on(ctx->reg, d->ev, many_hook, d->m, &o, &h);
    g_many_tier[h] = (int)o.tier;
    g_many_order[h] = o.order;
    d->live[n++] = h;
  }
  for (i = 0; i < n && !d->err; i++) {
    if (i % 4 == 0) d->err = hk_off(ctx->reg, d->live[i]);
    else if (i % 7 == 3) {
      d->err = hk_disable(ctx->reg, d->live[i]);
      if (!d->err && i % 14 == 3) d->err = hk_enable(ctx->reg, d->live[i]); /* back on: stays */
      if (i % 14 == 3) d->live[k++] = d->live[i];
    } else d->live[k++] = d->live[i];
  }
  *d->n_live = k;
  return HK_CONTINUE;
}
static void test_many_hooks_mid_dispatch(void **state) {
  int rev;
  (void)state;
  for (rev = 0; rev <= 1; rev++) {
    hk_desc d;
    hk_registry *reg;
    many_t m;
    many_driver_t drv;
    int live[MANY + 8], n_live = 0, i, ev = rev ? HK_ON_VALIDATION_BATCH_END : HK_ON_VALIDATION_BATCH_START;
    memset(&d, 0, sizeof d);
    d.max_hooks = MANY + 8;
    d.reverse_end_events = rev;
    reg = mkreg_desc(d);
    g_many_rev = rev;
    for (i = 0; i < MANY / 2; i++) {
      hk_opts o;
      hk_handle h = 0;
      memset(&o, 0, sizeof o);
      o.order = MANY - i;
      o.tier = (hk_tier)(i % 3);
      assert_int_equal(hk_on(reg, ev, many_hook, &m, &o, &h), HK_OK);
      g_many_tier[h] = (int)o.tier;
      g_many_order[h] = o.order;
      live[n_live++] = h;
    }
    memset(&drv, 0, sizeof drv);
    drv.m = &m; drv.live = live; drv.n_live = &n_live; drv.ev = ev; drv.seed = 7;
    assert_int_equal(hk_on(reg, HK_ON_FIT_START, many_driver, &drv, NULL, NULL), HK_OK);
    assert_int_equal(fire(reg, HK_ON_FIT_START), HK_CONTINUE);
    assert_int_equal(drv.err, HK_OK);
    assert_int_equal(hk_count(reg, ev), n_live);
    check_many(reg, ev, live, n_live, &m);
    destroy_reg(reg);
  }
}

/* More destroy re-entrancy: the victim registered after the killer; a destroy that removes two
   registrations, one of which fires an event from its own destroy (the other one's hook is still in
   that event's list, flagged off, and must not be freed yet); a destroy that fires an event or adds
   a callback, or looks registrations up by name, during hk_destroy. */
typedef struct killer2_t {
  hk_registry *reg;
  hk_handle a, b, found;
  int fire_event, add;
  const char *find;
  hk_err off_a, off_b, add_err;
  char msg[600];
} killer2_t;
static int g_k2_destroyed;
static void k2_destroy(void *user) {
  killer2_t *k = (killer2_t *)user;
  g_k2_destroyed++;
  if (k->find) k->found = hk_find(k->reg, k->find);
  if (k->a) k->off_a = hk_off(k->reg, k->a);
  if (k->b) k->off_b = hk_off(k->reg, k->b);
  if (k->fire_event) (void)fire(k->reg, HK_ON_TRAIN_START);
  if (k->add) {
    hk_callback cb;
    memset(&cb, 0, sizeof cb);
    cb.name = "late";
    cb.on_train_start = noop;
    k->add_err = hk_add_callback(k->reg, &cb, NULL, NULL);
    snprintf(k->msg, sizeof k->msg, "%s", hk_last_error(k->reg));
  }
}
static void test_destroy_reentrancy_more(void **state) {
  hk_registry *reg = mkreg();
  killer2_t k, firer, adder;
  rec_t v = { "victim", HK_CONTINUE, 0 };
  hk_callback cb;
  hk_handle hk;
  (void)state;
  /* the killer (first) removes a victim and a firer registered after it; the firer's destroy fires
     on_train_start, whose list still holds the victim (removed, not yet freed): it does not run */
  memset(&k, 0, sizeof k);
  memset(&firer, 0, sizeof firer);
  g_k2_destroyed = g_victim_destroyed = 0;
  k.reg = firer.reg = reg;
  hk = add_cb(reg, "killer", k2_destroy, &k);
  memset(&cb, 0, sizeof cb);
  cb.name = "victim";
  cb.user = &v;
  cb.on_train_start = rec;
  cb.destroy = victim_destroy;
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &k.a), HK_OK);
  firer.fire_event = 1;
  k.b = add_cb(reg, "firer", k2_destroy, &firer);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_START), 3);
  assert_int_equal(hk_off(reg, hk), HK_OK);
  assert_int_equal(k.off_a, HK_OK);
  assert_int_equal(k.off_b, HK_OK);
  assert_int_equal(g_k2_destroyed, 2); /* each destroy ran exactly once */
  assert_int_equal(g_victim_destroyed, 1);
  assert_int_equal(v.calls, 0);
  assert_int_equal(hk_count(reg, HK_ON_TRAIN_START), 0);
  assert_false(HK_ACTIVE(reg, HK_ON_TRAIN_START));
  destroy_reg(reg);

  /* during hk_destroy: a destroy that fires an event runs no hook (the others are being freed), one
     that adds a callback is refused with a message that says why, and hk_find no longer finds the
     registrations destroyed before (it still finds the ones to come) */
  reg = mkreg();
  memset(&firer, 0, sizeof firer);
  memset(&adder, 0, sizeof adder);
  firer.reg = adder.reg = reg;
  firer.fire_event = 1;
  firer.find = "adder";
  adder.add = 1;
  adder.find = "listener";
  adder.found = -1;
  v.calls = 0;
  memset(&cb, 0, sizeof cb);
  cb.name = "listener";
  cb.user = &v;
  cb.on_train_start = rec;
  assert_int_equal(hk_add_callback(reg, &cb, NULL, NULL), HK_OK);
  (void)add_cb(reg, "firer", k2_destroy, &firer);
  hk = add_cb(reg, "adder", k2_destroy, &adder);
  destroy_reg(reg);
  assert_int_equal(v.calls, 0);
  assert_int_equal(adder.add_err, HK_ERR_INVALID);
  assert_string_equal(adder.msg, "cannot register 'late': the registry is being destroyed (from a destroy callback?)");
  assert_int_equal(firer.found, hk);
  assert_int_equal(adder.found, 0);
}

/* Failures name registrations by kind: "hook 'x'" (hk_on), "callback 'x'" (hk_add_callback), with the
   tier only when it is not the default; the same labels in ctx->hook_failure and in the log. */
static void test_error_labels(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_CONTINUE, 0 };
  hk_callback cb;
  hk_opts o;
  (void)state;
  /* fatal: ctx->hook_failure, nothing logged */
  o = opts_named("st");
  o.tier = HK_TIER_STRATEGY;
  assert_int_equal(hk_on(reg, HK_ON_FIT_END, failer, &a, &o, NULL), HK_OK);
  assert_int_equal(fire(reg, HK_ON_FIT_END), HK_FAIL);
  assert_string_equal(g_failure, "hook 'st' (strategy tier) failed in on_fit_end: boom 42 in a");
  memset(&cb, 0, sizeof cb);
  cb.name = "cb";
  cb.user = &a;
  cb.on_train_end = failer;
  assert_int_equal(hk_add_callback(reg, &cb, NULL, NULL), HK_OK);
  assert_int_equal(fire(reg, HK_ON_TRAIN_END), HK_FAIL);
  assert_string_equal(g_failure, "callback 'cb' failed in on_train_end: boom 42 in a");
  assert_int_equal(g_nmsgs, 0);
  /* warn and disable: logged (nobody else reports them), ctx->hook_failure untouched */
  memset(&o, 0, sizeof o);
  o.tier = HK_TIER_MODEL;
  o.on_error = HK_ON_ERROR_WARN;
  cb.name = "ema";
  cb.on_train_end = NULL;
  cb.on_validation_end = failer;
  assert_int_equal(hk_add_callback(reg, &cb, &o, NULL), HK_OK);
  o = opts_named("plain");
  o.on_error = HK_ON_ERROR_DISABLE;
  assert_int_equal(hk_on(reg, HK_ON_VALIDATION_END, failer, &a, &o, NULL), HK_OK);
  assert_int_equal(fire(reg, HK_ON_VALIDATION_END), HK_CONTINUE);
  assert_string_equal(g_failure, "");
  assert_string_equal(g_msgs,
                      "warning: hook 'plain' failed in on_validation_end: boom 42 in a (failure 1; continuing)\n"
                      "warning: hook 'plain' disabled after 1 failure(s)\n"
                      "warning: callback 'ema' (model tier) failed in on_validation_end: boom 42 in a (failure 1; continuing)\n");
  destroy_reg(reg);
}

/* A hook that returns HK_FAIL without a message of its own passes on the failure of a nested dispatch
   it fired just before; it never takes over an older ctx->hook_failure (an earlier dispatch's, or
   one a sibling hook's nested dispatch left behind). */
typedef struct nester_t { int inner_event; int pass_on; } nester_t;
static hk_signal nester(hk_ctx *ctx, void *user) {
  nester_t *n = (nester_t *)user;
  hk_signal r = HK_FIRE(ctx->reg, n->inner_event, ctx);
  return n->pass_on ? r : HK_CONTINUE;
}
static void test_error_passed_on_only_from_nested(void **state) {
  hk_registry *reg = mkreg();
  rec_t a = { "a", HK_CONTINUE, 0 }, bare = { "bare", HK_FAIL, 0 };
  nester_t pass = { 0, 1 }, ignore = { 0, 0 };
  hk_ctx c = ctx0();
  hk_opts o;
  int inner = -1;
  (void)state;
  assert_int_equal(hk_event_define(reg, "on_inner", 0, &inner), HK_OK);
  pass.inner_event = ignore.inner_event = inner;
  on_named(reg, inner, failer, &a, "inner");
  /* passed on: the root cause, reported once */
  on_named(reg, HK_ON_TRAIN_START, nester, &pass, "outer");
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_START, &c), HK_FAIL);
  assert_string_equal(c.hook_failure, "hook 'inner' failed in on_inner: boom 42 in a");
  /* an older failure is still in c.hook_failure: a bare HK_FAIL elsewhere is its own failure */
  on_named(reg, HK_ON_TRAIN_END, rec, &bare, "bare");
  assert_int_equal(HK_FIRE(reg, HK_ON_TRAIN_END, &c), HK_FAIL);
  assert_string_equal(c.hook_failure, "hook 'bare' failed in on_train_end: (no message; use hk_fail)");
  /* the same with the warn policy: the log names this hook's failure only */
  o = opts_named("bare_warn");
  o.on_error = HK_ON_ERROR_WARN;
  (void)HK_FIRE(reg, HK_ON_TRAIN_START, &c); /* c.hook_failure: inner's again */
  assert_int_equal(hk_on(reg, HK_ON_FIT_END, rec, &bare, &o, NULL), HK_OK);
  log_reset();
  assert_int_equal(HK_FIRE(reg, HK_ON_FIT_END, &c), HK_CONTINUE);
  assert_string_equal(g_msgs, "warning: hook 'bare_warn' failed in on_fit_end: (no message; use hk_fail) (failure 1; continuing)\n");
  /* a sibling fired the failing dispatch and ignored it: the next hook's bare HK_FAIL is its own */
  on_named(reg, HK_ON_VALIDATION_START, nester, &ignore, "ignorer");
  on_named(reg, HK_ON_VALIDATION_START, rec, &bare, "bare2");
  assert_int_equal(HK_FIRE(reg, HK_ON_VALIDATION_START, &c), HK_FAIL);
  assert_string_equal(c.hook_failure, "hook 'bare2' failed in on_validation_start: (no message; use hk_fail)");
  hk_ctx_free(&c);
  destroy_reg(reg);
}

/* Errors of hk_on itself name the hook as the user gave it: "an unnamed hook", never "(unnamed)". */
static void test_register_errors_name_the_hook(void **state) {
  hk_registry *reg = mkreg();
  hk_opts o = opts_named("x");
  char want[300];
  int ev = -1;
  (void)state;
  assert_int_equal(hk_on(reg, 1000, noop, NULL, NULL, NULL), HK_ERR_UNKNOWN_EVENT);
  snprintf(want, sizeof want, "cannot register an unnamed hook: event id 1000 does not exist (built-in events are 0..%d, "
           "no user events yet; hk_event_define adds more)", HK_EVENT_COUNT - 1);
  assert_string_equal(hk_last_error(reg), want);
  assert_int_equal(hk_event_define(reg, "on_mine", 0, &ev), HK_OK);
  assert_int_equal(hk_on(reg, -2, noop, NULL, &o, NULL), HK_ERR_UNKNOWN_EVENT);
  snprintf(want, sizeof want, "cannot register 'x': event id -2 does not exist (built-in events are 0..%d, "
           "user events %d..%d; hk_event_define adds more)", HK_EVENT_COUNT - 1, ev, ev);
  assert_string_equal(hk_last_error(reg), want);
  assert_int_equal(hk_on(reg, HK_SETUP, NULL, NULL, NULL, NULL), HK_ERR_INVALID);
  assert_string_equal(hk_last_error(reg), "cannot register an unnamed hook on setup: the hook function is NULL");
  assert_int_equal(hk_on(reg, ev, NULL, NULL, &o, NULL), HK_ERR_INVALID);
  assert_string_equal(hk_last_error(reg), "cannot register 'x' on on_mine: the hook function is NULL");
  memset(&o, 0, sizeof o);
  o.on_error = (hk_on_error)9;
  assert_int_equal(hk_on(reg, HK_TEARDOWN, noop, NULL, &o, NULL), HK_ERR_INVALID);
  assert_string_equal(hk_last_error(reg), "cannot register an unnamed hook on teardown: on_error 9 is not valid (HK_ON_ERROR_FATAL, _WARN or _DISABLE)");
  destroy_reg(reg);
}

/* HK_MODEL_FIRST (on_load_checkpoint): the model tier, then callbacks, then the strategy (Lightning
   calls the LightningModule's on_load_checkpoint before the callbacks'). The event does not close a
   span, so reverse_end_events leaves it alone. On a user event that also closes and has
   HK_MONITOR_LAST, a monitor runs right after the model tier in both directions. */
static void reg_tiers(hk_registry *reg, int ev, int monitor) {
  static const struct { const char *tag; hk_tier tier; int order; } t[] = {
    { "s1", HK_TIER_STRATEGY, 1 }, { "c1", HK_TIER_CALLBACK, 1 }, { "m1", HK_TIER_MODEL, 1 },
    { "c0", HK_TIER_CALLBACK, 0 }, { "m0", HK_TIER_MODEL, -1 }, { "s0", HK_TIER_STRATEGY, -5 } };
  hk_opts o;
  size_t i;
  char name[32];
  for (i = 0; i < sizeof t / sizeof t[0]; i++) {
    memset(&o, 0, sizeof o);
    snprintf(name, sizeof name, "%s_%d", t[i].tag, ev);
    o.name = name; o.tier = t[i].tier; o.order = t[i].order;
    assert_int_equal(hk_on(reg, ev, tag_fn, (void *)t[i].tag, &o, NULL), HK_OK);
    if (i == 2 && monitor) {
      memset(&o, 0, sizeof o);
      snprintf(name, sizeof name, "mon_%d", ev);
      o.name = name; o.monitor = 1; o.order = -100;
      assert_int_equal(hk_on(reg, ev, tag_fn, (void *)"mon", &o, NULL), HK_OK);
    }
  }
}
static void test_order_model_first(void **state) {
  int rev;
  (void)state;
  for (rev = 0; rev <= 1; rev++) {
    hk_desc d;
    hk_registry *reg;
    int ev = -1;
    memset(&d, 0, sizeof d);
    d.reverse_end_events = rev;
    reg = mkreg_desc(d);
    assert_true(hk_event_flags(reg, HK_ON_LOAD_CHECKPOINT) & HK_MODEL_FIRST);
    reg_tiers(reg, HK_ON_LOAD_CHECKPOINT, 0);
    reg_tiers(reg, HK_ON_SAVE_CHECKPOINT, 0);
    fire(reg, HK_ON_LOAD_CHECKPOINT);
    assert_string_equal(g_log, "m0 m1 c0 c1 s0 s1");
    log_reset();
    fire(reg, HK_ON_SAVE_CHECKPOINT); /* no flag: callbacks first */
    assert_string_equal(g_log, "c0 c1 m0 m1 s0 s1");
    assert_int_equal(hk_event_define(reg, "on_restored", HK_CLOSES | HK_MONITOR_LAST | HK_MODEL_FIRST, &ev), HK_OK);
    reg_tiers(reg, ev, 1);
    log_reset();
    fire(reg, ev);
    assert_string_equal(g_log, rev ? "s1 s0 c1 c0 m1 m0 mon" : "m0 m1 mon c0 c1 s0 s1");
    /* the full rebuild (one sort per event) agrees with the sorted inserts */
    hk_trace(reg, HK_TRACE_OFF, NULL);
    log_reset();
    fire(reg, ev);
    fire(reg, HK_ON_LOAD_CHECKPOINT);
    assert_string_equal(g_log, rev ? "s1 s0 c1 c0 m1 m0 mon m0 m1 c0 c1 s0 s1" : "m0 m1 mon c0 c1 s0 s1 m0 m1 c0 c1 s0 s1");
    assert_int_equal(hk_event_define(reg, "on_bad", 32, NULL), HK_ERR_INVALID);
    destroy_reg(reg);
  }
}

/* ---- stop signals (hk_stop_signals_install) ---------------------------------------------------------
   In-process: raise() with the helper installed (a program handler stands in before and after, so a
   mistake cannot end the test run). The default action of the second signal: in a child process.
   Built with -std=c99 and only _POSIX_C_SOURCE, glibc's signal() has System V semantics here (the
   handler is reset before each call), so these tests also cover the handler re-arming itself. */
static volatile sig_atomic_t g_prog_int, g_prog_term;
static void prog_handler(int sig) {
  if (sig == SIGINT) g_prog_int++; else g_prog_term++;
  signal(sig, prog_handler); /* -std=c99 without _DEFAULT_SOURCE: glibc's signal() is System V's, reset on use */
}

static void test_stop_signals_count_only(void **state) {
  void (*old_int)(int), (*old_term)(int);
  hk_flow flow = {0};
  (void)state;
  old_int = signal(SIGINT, prog_handler);
  old_term = signal(SIGTERM, prog_handler);
  g_prog_int = g_prog_term = 0;
  assert_int_equal(hk_stop_signals_install(HK_STOP_COUNT_ONLY), 0);
  assert_int_equal(hk_stop_requested(), 0);
  assert_int_equal(hk_stop_signal(), 0);
  assert_int_equal(hk_stop_poll(&flow), 0);
  assert_int_equal(flow.signals, 0);
  raise(SIGINT);
  assert_int_equal(hk_stop_requested(), 1);
  assert_int_equal(hk_stop_signal(), SIGINT);
  assert_int_equal(hk_stop_poll(&flow), 1);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_STOP));        /* leave after this step */
  assert_false(HK_FLOW_HAS(&flow, HK_FLOW_SKIP_BATCH)); /* but finish it */
  raise(SIGTERM);                                       /* SIGTERM counts like SIGINT */
  assert_int_equal(hk_stop_signal(), SIGTERM);          /* the latest, for a message */
  raise(SIGINT);
  assert_int_equal(hk_stop_requested(), 3);             /* counted, the process lives */
  assert_int_equal(hk_stop_poll(NULL), 3);
  assert_int_equal(hk_stop_poll(&flow), 3);
  assert_true(HK_FLOW_HAS(&flow, HK_FLOW_FAIL));        /* the second: leave at once */
  assert_int_equal(g_prog_int + g_prog_term, 0);        /* the program's handlers saw nothing */
  hk_stop_signals_restore();
  assert_int_equal(hk_stop_requested(), 3);             /* still there after the loop */
  assert_true(signal(SIGINT, prog_handler) == prog_handler);   /* the previous handlers are back */
  assert_true(signal(SIGTERM, prog_handler) == prog_handler);
  raise(SIGINT);
  raise(SIGTERM);
  assert_int_equal(g_prog_int, 1);
  assert_int_equal(g_prog_term, 1);
  assert_int_equal(hk_stop_requested(), 3);
  hk_stop_signals_restore(); /* without an install: nothing */
  assert_true(signal(SIGINT, prog_handler) == prog_handler);
  /* a new install starts from 0 */
  assert_int_equal(hk_stop_signals_install(0), 0);
  assert_int_equal(hk_stop_requested(), 0);
  assert_int_equal(hk_stop_signal(), 0);
  hk_stop_signals_restore();
  signal(SIGINT, old_int);
  signal(SIGTERM, old_term);
}

/* A signal the process ignores stays ignored (a background job of a script); the other is handled. */
static void test_stop_signals_ignored(void **state) {
  void (*old_int)(int), (*old_term)(int);
  (void)state;
  old_int = signal(SIGINT, SIG_IGN);
  old_term = signal(SIGTERM, prog_handler);
  assert_int_equal(hk_stop_signals_install(0), 0);
  raise(SIGINT);
  assert_int_equal(hk_stop_requested(), 0);
  raise(SIGTERM);
  assert_int_equal(hk_stop_requested(), 1);
  hk_stop_signals_restore();
  assert_true(signal(SIGINT, old_int) == SIG_IGN);
  assert_true(signal(SIGTERM, old_term) == prog_handler);
}

/* Installs nest: the inner one keeps the handlers and the count, and only its flags change. */
static void test_stop_signals_nested(void **state) {
  void (*old_int)(int);
  (void)state;
  old_int = signal(SIGINT, prog_handler);
  g_prog_int = 0;
  assert_int_equal(hk_stop_signals_install(0), 0);
  raise(SIGINT);
  assert_int_equal(hk_stop_signals_install(HK_STOP_COUNT_ONLY), 0);
  assert_int_equal(hk_stop_requested(), 1);
  raise(SIGINT); /* the second, under the inner install's count-only: counted */
  assert_int_equal(hk_stop_requested(), 2);
  hk_stop_signals_restore();
  assert_true(signal(SIGINT, SIG_DFL) != prog_handler); /* still the helper's ... */
  signal(SIGINT, hk__on_stop_signal);                    /* (put it back) */
  hk_stop_signals_restore();
  assert_true(signal(SIGINT, prog_handler) == prog_handler); /* ... until the outer restore */
  assert_int_equal(g_prog_int, 0);
  signal(SIGINT, old_int);
}

/* Runs body in a child; returns its wait status. */
static int in_child(void (*body)(void)) {
  int status = 0;
  pid_t pid;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    body();
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return status;
}
static void child_twice_int(void) {
  if (hk_stop_signals_install(0) != 0) _exit(2);
  raise(SIGINT);
  if (hk_stop_requested() != 1) _exit(3); /* the first only counts */
  raise(SIGINT);
  _exit(4); /* not reached: the second ends the process */
}
static void child_int_then_term(void) {
  if (hk_stop_signals_install(0) != 0) _exit(2);
  raise(SIGINT);
  raise(SIGTERM);
  _exit(4);
}
static void child_count_only(void) {
  if (hk_stop_signals_install(HK_STOP_COUNT_ONLY) != 0) _exit(2);
  raise(SIGINT);
  raise(SIGTERM);
  raise(SIGINT);
  hk_stop_signals_restore();
  _exit(hk_stop_requested() == 3 ? 0 : 3);
}
static void child_nested_back_to_default(void) { /* the inner restore brings the outer flags back */
  if (hk_stop_signals_install(0) != 0 || hk_stop_signals_install(HK_STOP_COUNT_ONLY) != 0) _exit(2);
  raise(SIGINT);
  raise(SIGINT);
  if (hk_stop_requested() != 2) _exit(3);
  hk_stop_signals_restore();
  raise(SIGTERM);
  _exit(4);
}
static void test_stop_signals_second_default(void **state) {
  int st;
  (void)state;
  st = in_child(child_twice_int);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGINT);
  st = in_child(child_int_then_term);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGTERM);
  st = in_child(child_count_only);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
  st = in_child(child_nested_back_to_default);
  assert_true(WIFSIGNALED(st));
  assert_int_equal(WTERMSIG(st), SIGTERM);
}

/* hk_profile: per event and per hook counts, the gap between top-level dispatches, filters, nesting,
   reset, and the fast loop back (and nothing armed) when it is off */
static hk_signal spin_fn(hk_ctx *ctx, void *user) {
  double t0 = hk_clock();
  (void)ctx;
  while (hk_clock() - t0 < *(double *)user) {}
  return HK_CONTINUE;
}
typedef struct gap_seen { double gap; int prev; } gap_seen;
static hk_signal gap_fn(hk_ctx *ctx, void *user) {
  gap_seen *g = (gap_seen *)user;
  g->gap = hk_profile_gap(ctx->reg, &g->prev);
  return HK_CONTINUE;
}
static hk_signal nest_fn(hk_ctx *ctx, void *user) {
  (void)user;
  return HK_FIRE(ctx->reg, HK_ON_LOG, ctx);
}
static void test_profile(void **state) {
  hk_registry *reg = hk_create(NULL);
  hk_ctx ctx;
  hk_prof p;
  gap_seen g = { 0, 0 };
  double spin = 2e-3, none = 0;
  hk_handle hs, hf;
  int i, prev;
  (void)state;
  memset(&ctx, 0, sizeof ctx);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, spin_fn, &spin, &(hk_opts){ .name = "spin" }, &hs), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_END, spin_fn, &none, &(hk_opts){ .name = "every2", .filter.every = 2 }, &hf), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_BATCH_START, gap_fn, &g, &(hk_opts){ .name = "gap" }, NULL), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_BEFORE_BACKWARD, nest_fn, NULL, &(hk_opts){ .name = "nest" }, NULL), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_LOG, noop, NULL, &(hk_opts){ .name = "log" }, NULL), HK_OK);
  /* off: the fast loop, no clock, no counts */
  assert_false(hk_profiling(reg));
  assert_non_null(reg->hk__fast[HK_ON_TRAIN_BATCH_END]);
  HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx);
  assert_int_equal(hk_profile_event(reg, HK_ON_TRAIN_BATCH_END, &p), 0);
  assert_int_equal(p.calls, 0);
  assert_true(hk_profile_gap(reg, &prev) < 0 && prev == -1);
  hk_profile(reg, 1);
  assert_true(hk_profiling(reg));
  assert_null(reg->hk__fast[HK_ON_TRAIN_BATCH_END]);
  assert_false(reg->armed[HK_ON_VALIDATION_END]); /* an event without hooks stays unarmed */
  for (i = 0; i < 4; i++) {
    HK_FIRE(reg, HK_ON_TRAIN_BATCH_START, &ctx);
    if (i == 3) assert_true(g.gap >= 0 && g.prev == HK_ON_TRAIN_BATCH_END);
    { double t0 = hk_clock(); while (hk_clock() - t0 < 1e-3) {} } /* the loop's own work: 1 ms */
    HK_FIRE(reg, HK_ON_BEFORE_BACKWARD, &ctx);
    HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx);
  }
  assert_true(g.gap >= 0 && g.gap < 1e-3); /* from on_train_batch_end to on_train_batch_start: nothing */
  assert_int_equal(hk_profile_event(reg, HK_ON_TRAIN_BATCH_END, &p), 0);
  assert_string_equal(p.name, "on_train_batch_end");
  assert_int_equal(p.calls, 4);
  assert_true(p.total >= 4 * 2e-3 && p.max >= 2e-3 && p.max <= p.total);
  assert_int_equal(hk_profile_hook(reg, HK_ON_TRAIN_BATCH_END, 0, &p), 0);
  assert_string_equal(p.name, "spin");
  assert_int_equal(p.handle, hs);
  assert_int_equal(p.calls, 4);
  assert_true(p.total >= 4 * 2e-3);
  assert_int_equal(hk_profile_hook(reg, HK_ON_TRAIN_BATCH_END, 1, &p), 0);
  assert_int_equal(p.handle, hf);
  assert_int_equal(p.calls, 2); /* a filtered hook: timed when it runs */
  assert_int_equal(hk_profile_hook(reg, HK_ON_TRAIN_BATCH_END, 2, &p), -1);
  assert_int_equal(hk_profile_event(reg, HK_ON_LOG, &p), 0);
  assert_int_equal(p.calls, 4); /* nested dispatches count too */
  assert_int_equal(hk_profile_hook(reg, HK_ON_BEFORE_BACKWARD, 0, &p), 0);
  assert_int_equal(p.calls, 4);
  assert_int_equal(hk_profile_event(reg, -1, &p), -1);
  assert_int_equal(hk_profile_event(reg, HK_MAX_EVENTS, &p), -1);
  assert_int_equal(hk_profile_hook(NULL, 0, 0, &p), -1);
  /* a gap is seen only inside a dispatch */
  assert_true(hk_profile_gap(reg, &prev) < 0 && prev == -1);
  hk_profile_reset(reg);
  assert_int_equal(hk_profile_event(reg, HK_ON_TRAIN_BATCH_END, &p), 0);
  assert_int_equal(p.calls, 0);
  assert_int_equal(hk_profile_hook(reg, HK_ON_TRAIN_BATCH_END, 0, &p), 0);
  assert_int_equal(p.calls, 0);
  /* off again: counts kept, the fast loop back */
  HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx);
  hk_profile(reg, 0);
  assert_false(hk_profiling(reg));
  assert_non_null(reg->hk__fast[HK_ON_TRAIN_BATCH_END]);
  HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx);
  assert_int_equal(hk_profile_event(reg, HK_ON_TRAIN_BATCH_END, &p), 0);
  assert_int_equal(p.calls, 1);
  assert_true(hk_clock() > 0);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  hk_profile(NULL, 1);
  assert_false(hk_profiling(NULL));
}

/* hk_name: the name a registration goes by, with ctx->self the hook running now (the watchdog's report) */
typedef struct name_seen { hk_registry *reg; const char *name; } name_seen;
static hk_signal see_own_name(hk_ctx *ctx, void *user) {
  name_seen *n = (name_seen *)user;
  n->name = hk_name(ctx->reg, ctx->self);
  return HK_CONTINUE;
}
static void test_hk_name(void **state) {
  hk_registry *reg = mkreg();
  hk_callback cb;
  hk_opts o = { 0 };
  hk_handle a, b, c;
  name_seen seen = { NULL, NULL };
  rec_t r = { "x", HK_CONTINUE, 0 };
  (void)state;
  memset(&cb, 0, sizeof cb);
  cb.name = "my_callback";
  cb.on_train_start = see_own_name;
  cb.user = &seen;
  assert_int_equal(hk_add_callback(reg, &cb, NULL, &a), HK_OK);
  o.name = "my_fn";
  assert_int_equal(hk_on(reg, HK_ON_TRAIN_END, see_own_name, &seen, &o, &b), HK_OK);
  assert_int_equal(hk_on(reg, HK_ON_FIT_END, rec, &r, NULL, &c), HK_OK);
  assert_string_equal(hk_name(reg, a), "my_callback");
  assert_string_equal(hk_name(reg, b), "my_fn");
  assert_true(strncmp(hk_name(reg, c), "hook#", 5) == 0);
  fire(reg, HK_ON_TRAIN_START);
  assert_string_equal(seen.name, "my_callback");
  fire(reg, HK_ON_TRAIN_END);
  assert_string_equal(seen.name, "my_fn");
  assert_int_equal(hk_off(reg, b), HK_OK);
  assert_null(hk_name(reg, b));  /* removed */
  assert_null(hk_name(reg, 999)); /* never registered */
  assert_null(hk_name(NULL, a));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_teardown(test_event_table_accessors, cleanup),
    cmocka_unit_test_teardown(test_profile, cleanup),
    cmocka_unit_test_teardown(test_fire_is_expression_and_active, cleanup),
    cmocka_unit_test_teardown(test_fire_nested, cleanup),
    cmocka_unit_test_teardown(test_registered_disabled, cleanup),
    cmocka_unit_test_teardown(test_order_tier_order_registration, cleanup),
    cmocka_unit_test_teardown(test_order_reverse_end_events, cleanup),
    cmocka_unit_test_teardown(test_order_hydra_lifecycle, cleanup),
    cmocka_unit_test_teardown(test_order_teardown_nests_setup, cleanup),
    cmocka_unit_test_teardown(test_order_monitor_last, cleanup),
    cmocka_unit_test_teardown(test_order_monitor_last_many, cleanup),
    cmocka_unit_test_teardown(test_order_monitor_last_with_reverse, cleanup),
    cmocka_unit_test_teardown(test_signals_honoured_degrade, cleanup),
    cmocka_unit_test_teardown(test_signals_strongest_wins_all_run, cleanup),
    cmocka_unit_test_teardown(test_signals_fail_all_run, cleanup),
    cmocka_unit_test_teardown(test_filter_calls, cleanup),
    cmocka_unit_test_teardown(test_filter_step, cleanup),
    cmocka_unit_test_teardown(test_filter_epoch, cleanup),
    cmocka_unit_test_teardown(test_filter_batch, cleanup),
    cmocka_unit_test_teardown(test_filter_predicate, cleanup),
    cmocka_unit_test_teardown(test_filter_signal, cleanup),
    cmocka_unit_test_teardown(test_filter_rank_zero_only, cleanup),
    cmocka_unit_test_teardown(test_dispatch_remove_self, cleanup),
    cmocka_unit_test_teardown(test_dispatch_remove_only_hook, cleanup),
    cmocka_unit_test_teardown(test_dispatch_remove_later, cleanup),
    cmocka_unit_test_teardown(test_dispatch_remove_earlier, cleanup),
    cmocka_unit_test_teardown(test_dispatch_disable_later, cleanup),
    cmocka_unit_test_teardown(test_dispatch_register_new, cleanup),
    cmocka_unit_test_teardown(test_dispatch_register_other_event, cleanup),
    cmocka_unit_test_teardown(test_dispatch_register_many, cleanup),
    cmocka_unit_test_teardown(test_dispatch_remove_all, cleanup),
    cmocka_unit_test_teardown(test_dispatch_callback_off_self, cleanup),
    cmocka_unit_test_teardown(test_dispatch_fast_loop, cleanup),
    cmocka_unit_test_teardown(test_register_errors, cleanup),
    cmocka_unit_test_teardown(test_register_default_names, cleanup),
    cmocka_unit_test_teardown(test_register_default_name_collision, cleanup),
    cmocka_unit_test_teardown(test_register_full, cleanup),
    cmocka_unit_test_teardown(test_register_default_capacity, cleanup),
    cmocka_unit_test_teardown(test_error_fatal, cleanup),
    cmocka_unit_test_teardown(test_error_warn, cleanup),
    cmocka_unit_test_teardown(test_error_disable_after_n, cleanup),
    cmocka_unit_test_teardown(test_error_disable_counts_total, cleanup),
    cmocka_unit_test_teardown(test_error_invalid_signal, cleanup),
    cmocka_unit_test_teardown(test_error_custom_event_name_in_log, cleanup),
    cmocka_unit_test_teardown(test_error_long_message, cleanup),
    cmocka_unit_test_teardown(test_requests_and_tensors, cleanup),
    cmocka_unit_test_teardown(test_metrics_basic, cleanup),
    cmocka_unit_test_teardown(test_metrics_between_hooks, cleanup),
    cmocka_unit_test_teardown(test_metrics_lazy, cleanup),
    cmocka_unit_test_teardown(test_metrics_lazy_outside_dispatch, cleanup),
    cmocka_unit_test_teardown(test_trace_lines, cleanup),
    cmocka_unit_test_teardown(test_trace_lines_only_called, cleanup),
    cmocka_unit_test_teardown(test_trace_tree, cleanup),
    cmocka_unit_test_teardown(test_trace_env, cleanup),
    cmocka_unit_test_teardown(test_custom_events, cleanup),
    cmocka_unit_test_teardown(test_state_save_load, cleanup),
    cmocka_unit_test_teardown(test_state_load_all, cleanup),
    cmocka_unit_test_teardown(test_state_bytes_reader, cleanup),
    cmocka_unit_test_teardown(test_destroy_called, cleanup),
    cmocka_unit_test_teardown(test_callback_copied, cleanup),
    cmocka_unit_test_teardown(test_callback_ctx_self_and_user, cleanup),
    cmocka_unit_test_teardown(test_spec_good, cleanup),
    cmocka_unit_test_teardown(test_spec_bad, cleanup),
    cmocka_unit_test_teardown(test_spec_empty, cleanup),
    cmocka_unit_test_teardown(test_spec_all_or_nothing, cleanup),
    cmocka_unit_test_teardown(test_spec_factory_error_message_fresh, cleanup),
    cmocka_unit_test_teardown(test_factory_errors, cleanup),
    cmocka_unit_test_teardown(test_factory_unavailable, cleanup),
    cmocka_unit_test_teardown(test_spec_args_accessors, cleanup),
    cmocka_unit_test_teardown(test_registries_independent, cleanup),
    cmocka_unit_test_teardown(test_nesting_limit, cleanup),
    cmocka_unit_test_teardown(test_dispatch_one_hook, cleanup),
    cmocka_unit_test_teardown(test_hk_name, cleanup),
    cmocka_unit_test_teardown(test_many_hooks_order, cleanup),
    cmocka_unit_test_teardown(test_destroy_reentrancy, cleanup),
    cmocka_unit_test_teardown(test_many_hooks_mid_dispatch, cleanup),
    cmocka_unit_test_teardown(test_destroy_reentrancy_more, cleanup),
    cmocka_unit_test_teardown(test_error_labels, cleanup),
    cmocka_unit_test_teardown(test_error_passed_on_only_from_nested, cleanup),
    cmocka_unit_test_teardown(test_register_errors_name_the_hook, cleanup),
    cmocka_unit_test_teardown(test_order_model_first, cleanup),
    cmocka_unit_test(test_stop_signals_count_only),
    cmocka_unit_test(test_stop_signals_ignored),
    cmocka_unit_test(test_stop_signals_nested),
    cmocka_unit_test(test_stop_signals_second_default),
  };
  unsetenv("HOOKS_TRACE"); /* the trace tests set it themselves */
  return cmocka_run_group_tests(tests, NULL, NULL);
}
