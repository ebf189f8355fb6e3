/* tests/check_readme_table.c - the event and signal tables of docs/reference.md, generated from the X-macros.

     check_readme_table                            print both tables (markdown) to stdout
     check_readme_table --check docs/reference.md  exit 1, with a diff, when the page's tables drifted
     check_readme_table --write docs/reference.md  rewrite the tables in place (make readme-table)

   The tables live between marker comments in docs/reference.md:
     <!-- events:begin -->  ...  <!-- events:end -->
     <!-- signals:begin --> ...  <!-- signals:end -->
   --write appends a missing section at the end of the file (move it where it belongs); --check
   fails when a marker is missing. Everything in a table comes from HK_EVENTS / HK_SIGNALS through
   hk_event_name, hk_event_doc, hk_event_flags, hk_event_honours, hk_signal_name and hk_signal_doc;
   the program also fails when those functions disagree with the X-macros. */
#define HOOKS_IMPLEMENTATION
#include "hooks.h"
#include "doc_sections.h"

/* Markdown cell text: '|' would end the cell (the page's tables keep their other characters as written). */
static void put_cell(ds_buf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '|') ds_put(b, "\\|");
    else ds_put(b, "%c", *s);
  }
}

static int g_mismatch; /* the X-macros and the accessors (or this program) disagree: exit 1 */

/* "-", or the flags in words: "closes, monitors last", "model first", ... */
static const char *pairing_text(int flags) {
  static char out[96];
  static const struct { int bit; const char *word; } words[] = {
    { HK_OPENS, "opens" }, { HK_CLOSES, "closes" }, { HK_MONITOR_LAST, "monitors last" }, { HK_MODEL_FIRST, "model first" },
    { HK_REVERSED, "always reversed" } };
  size_t i;
  int known = 0;
  out[0] = 0;
  for (i = 0; i < sizeof words / sizeof words[0]; i++) {
    known |= words[i].bit;
    if (flags & words[i].bit) snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", out[0] ? ", " : "", words[i].word);
  }
  if (flags & ~known) { /* a new pairing bit without a word here yet: show it rather than drop it */
    fprintf(stderr, "check_readme_table: pairing bit(s) 0x%x have no word in pairing_text\n", (unsigned)(flags & ~known));
    g_mismatch = 1;
  }
  return out[0] ? out : "-";
}

static void agree(int ok, const char *what, const char *event) {
  if (!ok) {
    fprintf(stderr, "check_readme_table: %s of '%s' disagrees between HK_EVENTS/HK_SIGNALS and the accessor\n", what, event);
    g_mismatch = 1;
  }
}

/* The honoured set without `continue` (always honoured), e.g. "skip_step, skip_batch, stop_epoch, stop, fail". */
static void put_signals(ds_buf *b, unsigned set) {
  int k, n = 0;
  for (k = HK_SKIP_STEP; k < HK_SIGNAL_COUNT; k++)
    if (set & HK_SIGNAL_BIT(k)) ds_put(b, "%s`%s`", n++ ? ", " : "", hk_signal_name((hk_signal)k));
  if (!n) ds_put(b, "none (failures are reported)");
}

/* ---- the two tables ------------------------------------------------------------------------------------- */
static void events_table(ds_buf *b) {
  ds_put(b, "| event | pairing | signals honoured | what it means |\n");
  ds_put(b, "|---|---|---|---|\n");
#define X(NAME, name, pairing, signals, doc)                                                    \
  {                                                                                             \
    int e = HK_##NAME;                                                                          \
    agree(hk_event_name(NULL, e) && !strcmp(hk_event_name(NULL, e), #name), "name", #name);     \
    agree(hk_event_doc(e) && !strcmp(hk_event_doc(e), doc), "doc", #name);                      \
    agree(hk_event_flags(NULL, e) == (pairing), "pairing", #name);                              \
    agree(hk_event_signals(NULL, e) == (signals), "honoured signals", #name);                   \
    ds_put(b, "| `%s` | %s | ", hk_event_name(NULL, e), pairing_text(hk_event_flags(NULL, e))); \
    put_signals(b, hk_event_signals(NULL, e));                                                  \
    ds_put(b, " | ");                                                                           \
    put_cell(b, hk_event_doc(e));                                                               \
    ds_put(b, " |\n");                                                                          \
  }
  HK_EVENTS(X)
#undef X
}

static void signals_table(ds_buf *b) {
  ds_put(b, "| strength | signal | name | what the trainer does |\n");
  ds_put(b, "|---|---|---|---|\n");
#define X(sym, name, doc)                                                    \
  agree(!strcmp(hk_signal_name(sym), #name), "signal name", #name);          \
  agree(!strcmp(hk_signal_doc(sym), doc), "signal doc", #name);              \
  ds_put(b, "| %d | `%s` | `%s` | ", (int)(sym), #sym, hk_signal_name(sym)); \
  put_cell(b, hk_signal_doc(sym));                                           \
  ds_put(b, " |\n");
  HK_SIGNALS(X)
#undef X
}

/* ---- README sections ------------------------------------------------------------------------------------ */
static const struct { const char *begin, *end; void (*gen)(ds_buf *); } g_tables[] = {
  { "<!-- events:begin -->", "<!-- events:end -->", events_table },
  { "<!-- signals:begin -->", "<!-- signals:end -->", signals_table },
};
#define N_TABLES ((int)(sizeof g_tables / sizeof g_tables[0]))

int main(int argc, char **argv) {
  ds_section s[N_TABLES];
  ds_pages pg;
  int k, rc;
  if (argc == 1) {
    ds_buf b = { NULL, 0, 0 };
    events_table(&b);
    ds_put(&b, "\n");
    signals_table(&b);
    fputs(b.p, stdout);
    free(b.p);
    return g_mismatch;
  }
  if (argc != 3 || (strcmp(argv[1], "--check") && strcmp(argv[1], "--write"))) {
    fprintf(stderr, "usage: %s [--check README.md | --write README.md]\n", argv[0]);
    return 2;
  }
  memset(s, 0, sizeof s);
  for (k = 0; k < N_TABLES; k++) {
    snprintf(s[k].begin, sizeof s[k].begin, "%s", g_tables[k].begin);
    s[k].end = g_tables[k].end;
    g_tables[k].gen(&s[k].want);
  }
  memset(&pg, 0, sizeof pg);
  pg.tool = "check_readme_table";
  pg.source = "hooks.h";
  pg.fix = "make readme-table";
  pg.paths = argv + 2;
  pg.n_pages = 1;
  if (!strcmp(argv[1], "--write")) rc = ds_rewrite(&pg, s, N_TABLES);
  else if (!(rc = ds_check(&pg, s, N_TABLES)))
    printf("check_readme_table: %s tables match hooks.h (%d events, %d signals)\n", argv[2], HK_EVENT_COUNT, HK_SIGNAL_COUNT);
  return rc || g_mismatch;
}
