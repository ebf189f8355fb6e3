/* tests/docs_tables.c - the docs' parameter tables, generated from train.h's parameter lists.

     docs_tables                                       print every table (markdown) to stdout
     docs_tables --check docs/callbacks.md docs/logging.md   exit 1, with a diff, when a table drifted
     docs_tables --write docs/callbacks.md docs/logging.md   rewrite them in place (make docs-tables)

   Each battery of TR__BATTERIES has its parameters in one X-macro list, TR_<NAME>_PARAMS, rows
   X(kind, C type, name, default, choices, doc) (train.h: "parameters, written once"). Its table goes
   between <!-- params:NAME --> and <!-- /params --> in one of the pages; the file loggers' shared list,
   TR_LOGGER_PARAMS, is the section "logger". What a spec user sees (the key, its value type, the
   default, the choices, the doc) is read from the factory's real parameter table, the one
   hk_spec_apply checks against; the C column from the list. The program fails when the two disagree
   (a key the list does not have, or the other way round), so the tables say what the parser takes. */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include "doc_sections.h"

typedef struct row { const char *kind, *ctype, *name, *def, *choices, *doc; } row;
#define ROW(kind, type, name, def, choices, doc) { #kind, #type, #name, def, choices, doc },
#define ROWS_END { NULL, NULL, NULL, NULL, NULL, NULL }

/* csv, jsonl and tensorboard have no list of their own: their spec and their desc (tr_logger_desc) are
   TR_LOGGER_PARAMS, which plot's spec takes too, before TR_PLOT_PARAMS (train/loggers/plot.h's TR__LOGGER_AND_PLOT_PARAMS).
   Here they get an empty list and the desc's type under the name the others follow. */
#define TR_CSV_PARAMS(X)
#define TR_JSONL_PARAMS(X)
#define TR_TENSORBOARD_PARAMS(X)
typedef tr_logger_desc tr_csv_desc;
typedef tr_logger_desc tr_jsonl_desc;
typedef tr_logger_desc tr_tensorboard_desc;
static const row logger_rows[] = { TR_LOGGER_PARAMS(ROW) ROWS_END };
#define LOGGER_TAKERS " csv jsonl tensorboard plot "

#define ROWS_OF(name, NAME, p, doc) static const row name##_rows[] = { TR_##NAME##_PARAMS(ROW) ROWS_END };
TR__BATTERIES(ROWS_OF)
#undef ROWS_OF

typedef struct battery {
  const char *name, *list, *desc, *doc;
  size_t desc_size;      /* only so that a desc named by the convention must exist */
  const row *own;        /* its list's rows (empty for csv, jsonl, tensorboard) */
  const hk_param *spec;  /* its factory's parameter table */
  int n_spec;
} battery;
#define BATTERY(name, NAME, p, doc) \
  { #name, "TR_" #NAME "_PARAMS", "tr_" #name "_desc", doc, sizeof(tr_##name##_desc), name##_rows, tr__##p##_params, \
    TR__NPARAMS(tr__##p##_params) },
static const battery g_batteries[] = { TR__BATTERIES(BATTERY) };
#undef BATTERY
#define N_BATTERIES ((int)(sizeof g_batteries / sizeof g_batteries[0]))

static int takes_logger(const battery *b) {
  char w[80];
  snprintf(w, sizeof w, " %s ", b->name);
  return strstr(LOGGER_TAKERS, w) != NULL;
}
static int n_rows(const row *r) {
  int n = 0;
  while (r[n].kind) n++;
  return n;
}
static int is_c_only(const row *r) { return !strcmp(r->kind, "C_ONLY"); }

/* The factory's entry for key, or NULL. */
static const hk_param *spec_param(const battery *b, const char *key) {
  int i;
  for (i = 0; i < b->n_spec; i++)
    if (!strcmp(b->spec[i].key, key)) return &b->spec[i];
  return NULL;
}

/* The spec keys in the factory's order must be the lists' (the logger's first where it takes them). */
static int agree(const battery *b) {
  const row *lists[2];
  int i, k = 0, n = 0, bad = 0;
  if (takes_logger(b)) lists[n++] = logger_rows;
  lists[n++] = b->own;
  for (i = 0; i < n; i++) {
    const row *r;
    for (r = lists[i]; r->kind; r++) {
      if (is_c_only(r)) continue;
      if (k >= b->n_spec || strcmp(b->spec[k].key, r->name) != 0) {
        fprintf(stderr, "docs_tables: %s: the list has '%s' where the factory's table has '%s'\n", b->name, r->name,
                k < b->n_spec ? b->spec[k].key : "(its end)");
        bad = 1;
      }
      k++;
    }
  }
  if (k < b->n_spec) {
    fprintf(stderr, "docs_tables: %s: the factory takes '%s', which no list here has (a new logger list? see LOGGER_TAKERS)\n",
            b->name, b->spec[k].key);
    bad = 1;
  }
  return bad;
}

/* ---- one table ------------------------------------------------------------------------------------- */
/* The spec's value as its user writes it. */
static void put_spec_value(ds_buf *o, const hk_param *p) {
  switch (p->type) {
  case HK_PARAM_INT: ds_put(o, "integer"); break;
  case HK_PARAM_DOUBLE: ds_put(o, "number"); break;
  case HK_PARAM_BOOL: ds_put(o, "`true` \\| `false`"); break;
  case HK_PARAM_STRING: ds_put(o, "text"); break;
  case HK_PARAM_CHOICE: {
    const char *c = p->choices;
    while (*c) {
      size_t len = strcspn(c, "|");
      ds_put(o, "`%.*s`%s", (int)len, c, c[len] ? " \\| " : "");
      c += len + (c[len] ? 1 : 0);
    }
    break;
  }
  default: ds_put(o, "?");
  }
}

/* The desc field's type, with what its values mean where the kind says (a zero desc is the defaults). */
static void put_c_field(ds_buf *o, const row *r) {
  if (!strcmp(r->kind, "SPEC_ONLY")) { ds_put(o, "none (spec only)"); return; }
  ds_put(o, "`%s`", r->ctype);
  if (!strcmp(r->kind, "INT_ZERO")) ds_put(o, "; `TR_ZERO`: 0");
  else if (!strcmp(r->kind, "DOUBLE_ZERO")) ds_put(o, "; `TR_ZERO_F`: 0");
  else if (!strcmp(r->kind, "TRI")) ds_put(o, ": `TR_YES`, `TR_NO`");
  else if (!strcmp(r->kind, "AUTO")) ds_put(o, ": `TR_YES`, `TR_NO`, 0 auto");
  else if (!strcmp(r->kind, "BOOL")) ds_put(o, ": 1, 0");
  else if (!strcmp(r->kind, "CHOICE")) ds_put(o, ": the choice's index");
}

static void put_rows(ds_buf *o, const battery *b, const row *rows) {
  const row *r;
  for (r = rows; r->kind; r++) {
    const hk_param *p = is_c_only(r) ? NULL : spec_param(b, r->name);
    ds_put(o, "| `%s` | ", r->name);
    if (is_c_only(r)) ds_put(o, "C only | - | ");
    else if (!p) ds_put(o, "? | ? | "); /* agree() has said why */
    else {
      put_spec_value(o, p);
      if (p->def && *p->def) ds_put(o, " | `%s` | ", p->def);
      else ds_put(o, " | %s | ", p->def ? "empty" : "required");
    }
    put_c_field(o, r);
    ds_put(o, " | ");
    ds_put_cell(o, p ? p->doc : r->doc);
    ds_put(o, " |\n");
  }
}

#define TABLE_HEAD "| parameter | spec value | default | C field | what it does |\n|---|---|---|---|---|\n"

static void battery_table(ds_buf *o, const battery *b) {
  ds_put(o, "### `%s`\n\n", b->name);
  ds_put(o, "`%s`: ", b->name);
  ds_put_cell(o, b->doc);
  ds_put(o, ". C: `%s`; ", b->desc);
  if (takes_logger(b)) ds_put(o, "a spec takes [the loggers' parameters](#the-loggers-parameters) too (C: in `.dir`); ");
  ds_put(o, "the list: `%s`.\n\n" TABLE_HEAD, b->list);
  put_rows(o, b, b->own);
}

static void logger_table(ds_buf *o) {
  int i, n = 0;
  const battery *first = NULL;
  ds_put(o, "### The loggers' parameters\n\nTaken by ");
  for (i = 0; i < N_BATTERIES; i++)
    if (takes_logger(&g_batteries[i])) {
      if (!first) first = &g_batteries[i];
      ds_put(o, "%s`%s`", n++ ? ", " : "", g_batteries[i].name);
    }
  ds_put(o, ". C: `tr_logger_desc`; the list: `TR_LOGGER_PARAMS`.\n\n" TABLE_HEAD);
  if (first) put_rows(o, first, logger_rows);
}

/* ---- the sections ---------------------------------------------------------------------------------- */
#define END_MARKER "<!-- /params -->"
static ds_section g_sections[N_BATTERIES + 1];

static int make_sections(void) {
  int i, n = 0, bad = 0;
  for (i = 0; i < N_BATTERIES; i++) {
    const battery *b = &g_batteries[i];
    bad |= agree(b);
    if (!n_rows(b->own)) continue; /* csv, jsonl, tensorboard: the logger's section */
    snprintf(g_sections[n].begin, sizeof g_sections[n].begin, "<!-- params:%s -->", b->name);
    g_sections[n].end = END_MARKER;
    battery_table(&g_sections[n].want, b);
    n++;
  }
  snprintf(g_sections[n].begin, sizeof g_sections[n].begin, "<!-- params:logger -->");
  g_sections[n].end = END_MARKER;
  logger_table(&g_sections[n].want);
  n++;
  return bad ? -1 : n;
}

int main(int argc, char **argv) {
  ds_pages pg = { .tool = "docs_tables", .source = "train.h's TR_<NAME>_PARAMS", .family = "<!-- params:", .fix = "make docs-tables" };
  char what[80];
  int n = make_sections(), i;
  if (n < 0) return 1;
  if (argc == 1) {
    for (i = 0; i < n; i++) printf("%s\n%s%s\n\n", g_sections[i].begin, g_sections[i].want.p, g_sections[i].end);
    return 0;
  }
  snprintf(what, sizeof what, "the parameter tables of %d batteries", N_BATTERIES);
  return ds_main(argc, argv, &pg, g_sections, n, what, "match train.h");
}
