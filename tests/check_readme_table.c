/* tests/check_readme_table.c - the README's event and signal tables, generated from the X-macros.

     check_readme_table                   print both tables (markdown) to stdout
     check_readme_table --check README.md  exit 1, with a diff, when README.md's tables drifted
     check_readme_table --write README.md  rewrite the tables in place (make readme-table)

   The tables live between marker comments in README.md:
     <!-- events:begin -->  ...  <!-- events:end -->
     <!-- signals:begin --> ...  <!-- signals:end -->
   --write appends a missing section at the end of the file (move it where it belongs); --check
   fails when a marker is missing. Everything in a table comes from HK_EVENTS / HK_SIGNALS through
   hk_event_name, hk_event_doc, hk_event_flags, hk_event_honours, hk_signal_name and hk_signal_doc;
   the program also fails when those functions disagree with the X-macros. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOOKS_IMPLEMENTATION
#include "hooks.h"

/* ---- a growable string ----------------------------------------------------------------------------- */
typedef struct buf { char *p; size_t n, cap; } buf;
static void put(buf *b, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;
static void put(buf *b, const char *fmt, ...) {
  va_list ap;
  int need;
  va_start(ap, fmt);
  need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0) { fprintf(stderr, "check_readme_table: formatting failed\n"); exit(2); }
  if (b->n + (size_t)need + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + (size_t)need + 1) cap *= 2;
    b->p = (char *)realloc(b->p, cap);
    if (!b->p) { fprintf(stderr, "check_readme_table: out of memory\n"); exit(2); }
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
  va_end(ap);
  b->n += (size_t)need;
}

/* Markdown cell text: '|' would end the cell. */
static void put_cell(buf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '|') put(b, "\\|");
    else put(b, "%c", *s);
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
static void put_signals(buf *b, unsigned set) {
  int k, n = 0;
  for (k = HK_SKIP_STEP; k < HK_SIGNAL_COUNT; k++)
    if (set & HK_SIGNAL_BIT(k)) put(b, "%s`%s`", n++ ? ", " : "", hk_signal_name((hk_signal)k));
  if (!n) put(b, "none (failures are reported)");
}

/* ---- the two tables ------------------------------------------------------------------------------------- */
static void events_table(buf *b) {
  put(b, "| event | pairing | signals honoured | what it means |\n");
  put(b, "|---|---|---|---|\n");
#define X(NAME, name, pairing, signals, doc)                                            \
  {                                                                                           \
    int e = HK_##NAME;                                                                        \
    agree(hk_event_name(NULL, e) && !strcmp(hk_event_name(NULL, e), #name), "name", #name);   \
    agree(hk_event_doc(e) && !strcmp(hk_event_doc(e), doc), "doc", #name);                    \
    agree(hk_event_flags(NULL, e) == (pairing), "pairing", #name);                            \
    agree(hk_event_signals(NULL, e) == (signals), "honoured signals", #name);                 \
    put(b, "| `%s` | %s | ", hk_event_name(NULL, e), pairing_text(hk_event_flags(NULL, e)));   \
    put_signals(b, hk_event_signals(NULL, e));                                                \
    put(b, " | ");                                                                            \
    put_cell(b, hk_event_doc(e));                                                             \
    put(b, " |\n");                                                                           \
  }
  HK_EVENTS(X)
#undef X
}

static void signals_table(buf *b) {
  put(b, "| strength | signal | name | what the trainer does |\n");
  put(b, "|---|---|---|---|\n");
#define X(sym, name, doc)                                                                      \
  agree(!strcmp(hk_signal_name(sym), #name), "signal name", #name);                           \
  agree(!strcmp(hk_signal_doc(sym), doc), "signal doc", #name);                               \
  put(b, "| %d | `%s` | `%s` | ", (int)(sym), #sym, hk_signal_name(sym));                     \
  put_cell(b, hk_signal_doc(sym));                                                            \
  put(b, " |\n");
  HK_SIGNALS(X)
#undef X
}

/* ---- README sections ------------------------------------------------------------------------------------ */
typedef struct section { const char *begin, *end; void (*gen)(buf *); } section;
static const section sections[] = {
  { "<!-- events:begin -->", "<!-- events:end -->", events_table },
  { "<!-- signals:begin -->", "<!-- signals:end -->", signals_table },
};
#define N_SECTIONS ((int)(sizeof sections / sizeof sections[0]))

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  buf b = { NULL, 0, 0 };
  char chunk[4096];
  size_t n;
  if (!f) return NULL;
  put(&b, "%s", "");
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) put(&b, "%.*s", (int)n, chunk);
  fclose(f);
  return b.p;
}

/* The text between the begin marker's line end and the end marker. */
static int find_section(const char *text, const section *s, const char **from, const char **to) {
  const char *b = strstr(text, s->begin), *e;
  if (!b) return 0;
  b += strlen(s->begin);
  if (*b == '\r') b++;
  if (*b == '\n') b++;
  e = strstr(b, s->end);
  if (!e) return -1;
  *from = b;
  *to = e;
  return 1;
}

/* ---- a small line diff (LCS), for readable drift reports -------------------------------------------- */
typedef struct lines { const char **p; int *len; int n; } lines;
static lines split(const char *s, size_t n) {
  lines l;
  size_t i, start = 0;
  int cap = 16;
  l.p = (const char **)malloc(sizeof *l.p * (size_t)cap);
  l.len = (int *)malloc(sizeof *l.len * (size_t)cap);
  l.n = 0;
  for (i = 0; i <= n; i++) {
    if (i == n ? i > start : s[i] == '\n') {
      if (l.n == cap) {
        cap *= 2;
        l.p = (const char **)realloc((void *)l.p, sizeof *l.p * (size_t)cap);
        l.len = (int *)realloc(l.len, sizeof *l.len * (size_t)cap);
      }
      l.p[l.n] = s + start;
      l.len[l.n] = (int)(i - start);
      l.n++;
      start = i + 1;
    }
  }
  return l;
}
static int line_eq(const lines *a, int i, const lines *b, int j) {
  return a->len[i] == b->len[j] && !memcmp(a->p[i], b->p[j], (size_t)a->len[i]);
}
static void print_diff(const char *path, const char *label, const char *have, size_t nhave, const char *want, size_t nwant) {
  lines a = split(have, nhave), b = split(want, nwant);
  int i, j, *t = (int *)calloc((size_t)(a.n + 1) * (size_t)(b.n + 1), sizeof *t);
#define T(i, j) t[(size_t)(i) * (size_t)(b.n + 1) + (size_t)(j)]
  for (i = a.n - 1; i >= 0; i--)
    for (j = b.n - 1; j >= 0; j--)
      T(i, j) = line_eq(&a, i, &b, j) ? T(i + 1, j + 1) + 1 : (T(i + 1, j) > T(i, j + 1) ? T(i + 1, j) : T(i, j + 1));
  fprintf(stderr, "--- %s (%s)\n+++ generated from hooks.h\n", path, label);
  for (i = 0, j = 0; i < a.n || j < b.n;) {
    if (i < a.n && j < b.n && line_eq(&a, i, &b, j)) { i++; j++; }
    else if (i < a.n && (j == b.n || T(i + 1, j) >= T(i, j + 1))) { fprintf(stderr, "-%.*s\n", a.len[i], a.p[i]); i++; }
    else { fprintf(stderr, "+%.*s\n", b.len[j], b.p[j]); j++; }
  }
#undef T
  free(t);
  free((void *)a.p); free(a.len);
  free((void *)b.p); free(b.len);
}

static int check(const char *path) {
  char *text = read_file(path);
  int k, bad = 0;
  if (!text) {
    fprintf(stderr, "check_readme_table: cannot read %s: the README with the event table is missing.\n"
                    "  Create it with the markers below and run `make readme-table`:\n", path);
    for (k = 0; k < N_SECTIONS; k++) fprintf(stderr, "    %s\n    %s\n", sections[k].begin, sections[k].end);
    return 1;
  }
  for (k = 0; k < N_SECTIONS; k++) {
    const char *from, *to;
    buf want = { NULL, 0, 0 };
    int found = find_section(text, &sections[k], &from, &to);
    if (found <= 0) {
      fprintf(stderr, "check_readme_table: %s has no '%s' marker%s; add\n    %s\n    %s\n  and run `make readme-table`\n",
              path, found == 0 ? sections[k].begin : sections[k].end, found == 0 ? "" : " after its begin marker",
              sections[k].begin, sections[k].end);
      bad = 1;
      continue;
    }
    sections[k].gen(&want);
    if ((size_t)(to - from) != want.n || memcmp(from, want.p, want.n) != 0) {
      fprintf(stderr, "check_readme_table: the table between %s and %s in %s is out of date "
                      "(run `make readme-table`):\n", sections[k].begin, sections[k].end, path);
      print_diff(path, sections[k].begin, from, (size_t)(to - from), want.p, want.n);
      bad = 1;
    }
    free(want.p);
  }
  free(text);
  if (!bad) printf("check_readme_table: %s tables match hooks.h (%d events, %d signals)\n", path, HK_EVENT_COUNT, HK_SIGNAL_COUNT);
  return bad;
}

static int write_readme(const char *path) {
  char *text = read_file(path);
  buf out = { NULL, 0, 0 };
  const char *at;
  char tmp[4096];
  FILE *f;
  int k;
  if (!text) {
    fprintf(stderr, "check_readme_table: cannot read %s (create it first; the tables go between markers in it)\n", path);
    return 1;
  }
  /* replace each section in turn (on the text produced so far) */
  for (k = 0; k < N_SECTIONS; k++) {
    const char *from, *to;
    int found = find_section(text, &sections[k], &from, &to);
    out.n = 0;
    put(&out, "%s", "");
    if (found < 0) {
      fprintf(stderr, "check_readme_table: %s has '%s' but no '%s'; fix the markers by hand\n", path, sections[k].begin, sections[k].end);
      return 1;
    }
    if (found == 0) {
      at = text + strlen(text);
      put(&out, "%s%s\n%s\n", text, (at > text && at[-1] != '\n') ? "\n" : "", sections[k].begin);
      sections[k].gen(&out);
      put(&out, "%s\n", sections[k].end);
      fprintf(stderr, "check_readme_table: appended the %s section at the end of %s; move it where it belongs\n", sections[k].begin, path);
    } else {
      put(&out, "%.*s", (int)(from - text), text);
      sections[k].gen(&out);
      put(&out, "%s", to);
    }
    free(text);
    text = out.p;
    out.p = NULL;
    out.cap = 0;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  f = fopen(tmp, "wb");
  if (!f || fwrite(text, 1, strlen(text), f) != strlen(text) || fclose(f) != 0) {
    fprintf(stderr, "check_readme_table: cannot write %s\n", tmp);
    return 1;
  }
  if (rename(tmp, path) != 0) {
    fprintf(stderr, "check_readme_table: cannot replace %s\n", path);
    return 1;
  }
  free(text);
  printf("check_readme_table: wrote the event and signal tables into %s\n", path);
  return 0;
}

int main(int argc, char **argv) {
  int rc;
  if (argc == 1) {
    buf b = { NULL, 0, 0 };
    events_table(&b);
    put(&b, "\n");
    signals_table(&b);
    fputs(b.p, stdout);
    free(b.p);
    return g_mismatch;
  }
  if (argc == 3 && !strcmp(argv[1], "--check")) rc = check(argv[2]);
  else if (argc == 3 && !strcmp(argv[1], "--write")) rc = write_readme(argv[2]);
  else {
    fprintf(stderr, "usage: %s [--check README.md | --write README.md]\n", argv[0]);
    return 2;
  }
  return rc || g_mismatch;
}
