/* tests/doc_sections.h - generated sections of markdown pages: check them, or rewrite them in place.

   A section is the text between two marker comments, e.g.
       <!-- params:early_stopping -->  ...  <!-- /params -->
   A tool fills one ds_section per marker with the text it wants there (ds_put into .want), then calls
   ds_check (exit 1 with a line diff when a page drifted) or ds_rewrite over a list of pages. A section
   must be in exactly one of the pages; ds_rewrite appends a missing one to the first page and says so.
   A family ("<!-- params:") makes a marker of that family that no section claims an error too, so a
   section left behind by a removed battery is caught. Used by tests/check_readme_table.c,
   tests/docs_tables.c and tests/readme_messages.c; static, for one translation unit each. */
#ifndef DOC_SECTIONS_H
#define DOC_SECTIONS_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#  define DS__PRINTF(f, a) __attribute__((format(printf, f, a)))
#  define DS__UNUSED __attribute__((unused))
#else
#  define DS__PRINTF(f, a)
#  define DS__UNUSED
#endif

/* ---- a growable string ----------------------------------------------------------------------------- */
typedef struct ds_buf { char *p; size_t n, cap; } ds_buf;
static void ds_put(ds_buf *b, const char *fmt, ...) DS__PRINTF(2, 3);
static void ds_put(ds_buf *b, const char *fmt, ...) {
  va_list ap;
  int need;
  va_start(ap, fmt);
  need = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (need < 0) { fprintf(stderr, "doc_sections: formatting failed\n"); exit(2); }
  if (b->n + (size_t)need + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->n + (size_t)need + 1) cap *= 2;
    b->p = (char *)realloc(b->p, cap);
    if (!b->p) { fprintf(stderr, "doc_sections: out of memory\n"); exit(2); }
    b->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
  va_end(ap);
  b->n += (size_t)need;
}

/* Plain text in a markdown table cell, shown as written: '|' would end the cell (also inside `code`, in
   GitHub's tables), '<' could open an HTML tag ("lr-<Optimizer>" would lose its name), '*' emphasis. */
static DS__UNUSED void ds_put_cell(ds_buf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '|' || *s == '*' || *s == '\\') ds_put(b, "\\%c", *s);
    else if (*s == '<') ds_put(b, "&lt;");
    else ds_put(b, "%c", *s);
  }
}

static char *ds_read(const char *path) {
  FILE *f = fopen(path, "rb");
  ds_buf b = { NULL, 0, 0 };
  char chunk[4096];
  size_t n;
  if (!f) return NULL;
  ds_put(&b, "%s", "");
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) ds_put(&b, "%.*s", (int)n, chunk);
  fclose(f);
  return b.p;
}

/* Replaces path through a temporary and a rename, so a failed write leaves the old page. */
static int ds_write_file(const char *path, const char *text) {
  char tmp[4096];
  FILE *f;
  size_t n = strlen(text);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  f = fopen(tmp, "wb");
  if (!f || fwrite(text, 1, n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "doc_sections: cannot write %s\n", tmp);
    return 1;
  }
  if (rename(tmp, path) != 0) {
    fprintf(stderr, "doc_sections: cannot replace %s\n", path);
    return 1;
  }
  return 0;
}

/* ---- a small line diff (LCS), for readable drift reports -------------------------------------------- */
typedef struct ds__lines { const char **p; int *len; int n; } ds__lines;
static ds__lines ds__split(const char *s, size_t n) {
  ds__lines l;
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
static int ds__line_eq(const ds__lines *a, int i, const ds__lines *b, int j) {
  return a->len[i] == b->len[j] && !memcmp(a->p[i], b->p[j], (size_t)a->len[i]);
}
static void ds__diff(const char *path, const char *label, const char *source, const char *have, size_t nhave,
                     const char *want, size_t nwant) {
  ds__lines a = ds__split(have, nhave), b = ds__split(want, nwant);
  int i, j, *t = (int *)calloc((size_t)(a.n + 1) * (size_t)(b.n + 1), sizeof *t);
#define T(i, j) t[(size_t)(i) * (size_t)(b.n + 1) + (size_t)(j)]
  for (i = a.n - 1; i >= 0; i--)
    for (j = b.n - 1; j >= 0; j--)
      T(i, j) = ds__line_eq(&a, i, &b, j) ? T(i + 1, j + 1) + 1 : (T(i + 1, j) > T(i, j + 1) ? T(i + 1, j) : T(i, j + 1));
  fprintf(stderr, "--- %s (%s)\n+++ generated from %s\n", path, label, source);
  for (i = 0, j = 0; i < a.n || j < b.n;) {
    if (i < a.n && j < b.n && ds__line_eq(&a, i, &b, j)) { i++; j++; }
    else if (i < a.n && (j == b.n || T(i + 1, j) >= T(i, j + 1))) { fprintf(stderr, "-%.*s\n", a.len[i], a.p[i]); i++; }
    else { fprintf(stderr, "+%.*s\n", b.len[j], b.p[j]); j++; }
  }
#undef T
  free(t);
  free((void *)a.p); free(a.len);
  free((void *)b.p); free(b.len);
}

/* ---- sections ---------------------------------------------------------------------------------------- */
typedef struct ds_section {
  char begin[128];  /* the opening marker, e.g. "<!-- params:ema -->" */
  const char *end;  /* the closing marker, e.g. "<!-- /params -->" */
  ds_buf want;      /* what belongs between them */
} ds_section;

typedef struct ds_pages {
  const char *tool;    /* for messages: "docs_tables" */
  const char *source;  /* what the text comes from: "train.h" */
  const char *family;  /* every marker starting so must be a section's; NULL: no such check */
  const char *fix;     /* the command that rewrites: "make docs-tables" */
  char **paths;
  int n_pages;
  char **text;         /* the pages' text, read by ds__load */
} ds_pages;

/* The section's text in one page: 1 found (from..to), 0 no begin marker, -1 begin without its end (or
   another marker of the family before the end). */
static int ds__find(const ds_pages *pg, const char *text, const ds_section *s, const char **from, const char **to) {
  const char *b = strstr(text, s->begin), *e, *other;
  if (!b) return 0;
  b += strlen(s->begin);
  if (*b == '\r') b++;
  if (*b == '\n') b++;
  e = strstr(b, s->end);
  if (!e) return -1;
  other = pg->family ? strstr(b, pg->family) : NULL;
  if (other && other < e) return -1;
  *from = b;
  *to = e;
  return 1;
}

static int ds__load(ds_pages *pg) {
  int i;
  pg->text = (char **)calloc((size_t)pg->n_pages, sizeof *pg->text);
  for (i = 0; i < pg->n_pages; i++)
    if (!(pg->text[i] = ds_read(pg->paths[i]))) {
      fprintf(stderr, "%s: cannot read %s\n", pg->tool, pg->paths[i]);
      return 1;
    }
  return 0;
}

/* Which page holds s (-1 none); 1 in *bad (and a message) when it is in two or has no end marker. */
static int ds__page_of(const ds_pages *pg, const ds_section *s, int *bad) {
  int i, at = -1;
  for (i = 0; i < pg->n_pages; i++) {
    const char *from, *to;
    int found = ds__find(pg, pg->text[i], s, &from, &to);
    if (found < 0) {
      fprintf(stderr, "%s: %s has %s but no %s before the next marker; fix the markers by hand\n", pg->tool,
              pg->paths[i], s->begin, s->end);
      *bad = 1;
    } else if (found && at >= 0) {
      fprintf(stderr, "%s: %s is in %s and in %s; keep one\n", pg->tool, s->begin, pg->paths[at], pg->paths[i]);
      *bad = 1;
    } else if (found) at = i;
  }
  return at;
}

/* Markers of the family that no section claims (a section left behind). */
static int ds__strays(const ds_pages *pg, const ds_section *s, int n) {
  int i, k, bad = 0;
  if (!pg->family) return 0;
  for (i = 0; i < pg->n_pages; i++) {
    const char *p = pg->text[i];
    while ((p = strstr(p, pg->family)) != NULL) {
      for (k = 0; k < n && strncmp(p, s[k].begin, strlen(s[k].begin)) != 0; k++) {}
      if (k == n) {
        const char *close = strstr(p, "-->");
        int len = close ? (int)(close + 3 - p) : (int)strlen(pg->family);
        fprintf(stderr, "%s: %s has %.*s, which %s no longer generates; remove that section\n", pg->tool, pg->paths[i],
                len, p, pg->tool);
        bad = 1;
      }
      p += strlen(pg->family);
    }
  }
  return bad;
}

/* 0 when every section is in one page with the text it should have; else 1, with what differs. */
static DS__UNUSED int ds_check(ds_pages *pg, ds_section *s, int n) {
  int k, bad = 0;
  if (ds__load(pg)) return 1;
  for (k = 0; k < n; k++) {
    const char *from, *to;
    int broken = 0, at = ds__page_of(pg, &s[k], &broken);
    bad |= broken;
    if (at < 0) {
      if (!broken) fprintf(stderr, "%s: no page has %s; run `%s` (it appends it to %s)\n", pg->tool, s[k].begin, pg->fix,
                        pg->paths[0]);
      bad = 1;
      continue;
    }
    ds__find(pg, pg->text[at], &s[k], &from, &to);
    if ((size_t)(to - from) != s[k].want.n || memcmp(from, s[k].want.p, s[k].want.n) != 0) {
      fprintf(stderr, "%s: %s in %s is out of date (edited by hand, or %s changed); run `%s`:\n", pg->tool, s[k].begin,
              pg->paths[at], pg->source, pg->fix);
      ds__diff(pg->paths[at], s[k].begin, pg->source, from, (size_t)(to - from), s[k].want.p, s[k].want.n);
      bad = 1;
    }
  }
  return ds__strays(pg, s, n) || bad;
}

/* Puts every section's text in place; a section in no page goes at the end of the first. Writes only
   the pages that change. */
static DS__UNUSED int ds_rewrite(ds_pages *pg, ds_section *s, int n) {
  int i, k, bad = 0, changed = 0;
  if (ds__load(pg)) return 1;
  for (k = 0; k < n; k++) {
    ds_buf out = { NULL, 0, 0 };
    const char *from, *to;
    int at = ds__page_of(pg, &s[k], &bad);
    if (bad) return 1;
    ds_put(&out, "%s", "");
    if (at < 0) {
      const char *t = pg->text[0];
      size_t len = strlen(t);
      ds_put(&out, "%s%s\n%s\n%.*s%s\n", t, len && t[len - 1] != '\n' ? "\n" : "", s[k].begin, (int)s[k].want.n,
             s[k].want.p, s[k].end);
      fprintf(stderr, "%s: appended %s at the end of %s; move it where it belongs\n", pg->tool, s[k].begin, pg->paths[0]);
      at = 0;
    } else {
      ds__find(pg, pg->text[at], &s[k], &from, &to);
      ds_put(&out, "%.*s%.*s%s", (int)(from - pg->text[at]), pg->text[at], (int)s[k].want.n, s[k].want.p, to);
    }
    free(pg->text[at]);
    pg->text[at] = out.p;
  }
  if (ds__strays(pg, s, n)) return 1;
  for (i = 0; i < pg->n_pages; i++) {
    char *old = ds_read(pg->paths[i]);
    if (!old || strcmp(old, pg->text[i]) != 0) {
      if (ds_write_file(pg->paths[i], pg->text[i])) bad = 1;
      else {
        printf("%s: rewrote %s\n", pg->tool, pg->paths[i]);
        changed++;
      }
    }
    free(old);
  }
  if (!bad && !changed) printf("%s: every section is up to date\n", pg->tool);
  return bad;
}

/* A tool's main once its n sections are made: `--check PAGE...` (exit 1 with a diff when a page drifted; else the
   line "TOOL: WHAT in PAGE... OK") or `--write PAGE...`; 2 and the usage for anything else. pg names the tool (tool,
   source, family, fix); the pages are argv's. */
static DS__UNUSED int ds_main(int argc, char **argv, ds_pages *pg, ds_section *s, int n, const char *what, const char *ok) {
  int i;
  if (argc < 3 || (strcmp(argv[1], "--check") && strcmp(argv[1], "--write"))) {
    fprintf(stderr, "usage: %s [--check | --write] PAGE.md...\n", argv[0]);
    return 2;
  }
  pg->paths = argv + 2;
  pg->n_pages = argc - 2;
  if (!strcmp(argv[1], "--write")) return ds_rewrite(pg, s, n);
  if (ds_check(pg, s, n)) return 1;
  printf("%s: %s in", pg->tool, what);
  for (i = 0; i < pg->n_pages; i++) printf(" %s", pg->paths[i]);
  printf(" %s\n", ok);
  return 0;
}
#endif /* DOC_SECTIONS_H */
