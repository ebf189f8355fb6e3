/* train/callbacks/param_group.h - param_group. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_PARAM_GROUP_H /* part */
#define TRAIN_PARAM_GROUP_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* ---- param_group (torch's optimizer parameter groups, chosen by tensor name) -----------------------
   The tensors whose names match `match` get their own lr multiplier, weight decay, or are frozen (torch's
   requires_grad = False). Rules apply in registration order, a later one winning for the fields it gives:
       param_group(match=*b|ln*|wte|wpe, weight_decay=0)          (llm.c's names: decay only the matrices)
   A pattern that matches no tensor fails the run's start; with none registered nothing changes (the same
   bits). Register before the run starts. docs/callbacks.md ("Parameter groups and fine-tuning"). */
#define TR_PARAM_GROUP_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING,      const char *, match,        NULL,    NULL, "the tensors: names matching one of '|'-separated whole-name " \
    "patterns ('*' any characters, '?' one); required") \
  X(DOUBLE_ZERO, double,       lr_mult,      "1",     NULL, "their learning rate is the run's times this, >= 0 (when given; " \
    "else an earlier group's, or 1)") \
  X(DOUBLE_ZERO, double,       weight_decay, "0",     NULL, "their weight decay, >= 0 (when given; else an earlier group's, " \
    "or the optimizer's)") \
  X(TRI,         int,          frozen,       "false", NULL, "true: no update at all; false: thaws what an earlier group froze " \
    "(when given)") \
  X(BOOL,        int,          verbose,      "false", NULL, "print the tensors it took at fit start")
typedef struct tr_param_group_desc { TR_PARAM_GROUP_PARAMS(TR__FIELD) } tr_param_group_desc;
typedef struct tr_param_group_state { const char *match; } tr_param_group_state;
TRAIN_API tr_err tr_param_group(hk_registry *reg, const tr_param_group_desc *d, hk_handle *out);
TRAIN_API const tr_param_group_state *tr_param_group_get(const hk_registry *reg, hk_handle h);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- param_group ---------------------------------------------------------------------------------- */
typedef struct tr__pg {
  tr_param_group_state pub;
  tr__pg_rule rule;     /* what the run resolves (train/run.h) */
  tr_run *run;
  char *match, name[48];
  int verbose;
} tr__pg;

static void tr__pg_destroy(void *user) {
  tr__pg *s = (tr__pg *)user;
  if (!s) return;
  if (s->run) tr__run_rule_drop(s->run, &s->rule);
  free(s->match);
  free(s);
}
/* verbose: one line, the tensors it took and what they got (rank 0) */
static hk_signal tr__pg_fit_start(hk_ctx *ctx, void *user) {
  tr__pg *s = (tr__pg *)user;
  char line[512], num[64];
  size_t len = 0;
  int i, n = 0;
  if (!s->verbose || ctx->rank != 0) return HK_CONTINUE;
  line[0] = 0;
  for (i = 0; i < ctx->n_tensors && ctx->params; i++) {
    if (!tr_name_match(s->match, ctx->params[i].name)) continue;
    if (len + 8 < sizeof line) len += (size_t)snprintf(line + len, sizeof line - len, "%s%s", n ? ", " : "", ctx->params[i].name);
    n++;
  }
  if (len >= sizeof line) len = sizeof line - 1;
  num[0] = 0;
  if (tr__given_d(s->rule.weight_decay)) snprintf(num, sizeof num, ", weight_decay %g", s->rule.weight_decay);
  tr_run_say(ctx->reg, ctx, s->name, "%d tensors (%s): lr x %g%s%s", n, line, tr__given_d(s->rule.lr_mult) ? s->rule.lr_mult : 1.0,
             num, s->rule.frozen == TR_YES ? ", frozen" : "");
  return HK_CONTINUE;
}

static tr_err tr__pg_make(hk_registry *reg, const tr_param_group_desc *d, hk_handle *out, tr__why *w) {
  tr__pg *s;
  hk_callback cb;
  tr_run *run;
  if (!d) return tr__bad(w, "param_group: desc is NULL");
  if (!d->match || !d->match[0]) return tr__bad(w, "param_group: match is required: the tensor names it is for, e.g. match=*.bias|*norm*");
  if (!hk_is_finite(d->lr_mult) || d->lr_mult < 0) return tr__bad(w, "param_group: lr_mult is %g: give a finite multiplier >= 0", d->lr_mult);
  if (!hk_is_finite(d->weight_decay) || d->weight_decay < 0)
    return tr__bad(w, "param_group: weight_decay is %g: give a finite decay >= 0", d->weight_decay);
  if (!(run = tr_run_get(reg))) return tr__bad(w, "param_group: out of memory"), TR_ERR_NOMEM;
  if (run->running != HK_STAGE_NONE)
    return tr__bad(w, "param_group: registered while a run goes: the groups are resolved at its start; register it before "
                   "tr_run_start / tr_fit (or in the spec)");
  s = (tr__pg *)calloc(1, sizeof *s);
  if (!s || !(s->match = tr__strdup(d->match))) return free(s), tr__bad(w, "param_group: out of memory"), TR_ERR_NOMEM;
  s->pub.match = s->match;
  s->rule.match = s->match;
  s->rule.who = s->name;
  s->rule.lr_mult = d->lr_mult;
  s->rule.weight_decay = d->weight_decay;
  s->rule.frozen = d->frozen;
  s->verbose = d->verbose;
  memset(&cb, 0, sizeof cb);
  cb.name = tr__unique_name(reg, "param_group", s->name, sizeof s->name);
  if (cb.name != s->name) snprintf(s->name, sizeof s->name, "%s", cb.name);
  cb.name = s->name;
  cb.user = s;
  cb.on_fit_start = tr__pg_fit_start;
  cb.destroy = tr__pg_destroy;
  if (tr__run_rule_add(run, &s->rule) != TR_OK) return tr__pg_destroy(s), tr__bad(w, "param_group: out of memory"), TR_ERR_NOMEM;
  s->run = run;
  return tr__cb_register(reg, &cb, 0, out, w);
}
TR__PUBLIC_OF(tr_param_group, pg)
TR__FACTORY_OF(pg, tr_param_group_desc, TR_PARAM_GROUP_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
