/* train/safetensors.h - the model's tensors in and out as a .safetensors file (Hugging Face's format). A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_SAFETENSORS_H /* part */
#define TRAIN_SAFETENSORS_H /* part */
#include "run.h" /* part */

TR__C_BEGIN /* part */
/* ---- safetensors: the model's tensors for everyone else's tools ---------------------------------------
   tr_safetensors_save writes views (name, data, count: ctx->params in any loop, a trainer's t.ctx.params) as a
   .safetensors file that the Python package's safe_open / load_file, PyTorch, JAX and Rust read; tr_safetensors_load
   fills views from one by name (a pretrained start, a model exported elsewhere). model_checkpoint(save_safetensors
   =true) writes one beside every .ckpt it keeps (docs/safetensors.md).

   The format (its published rules, followed exactly): 8 bytes, N as a little-endian u64; N bytes of a UTF-8 JSON
   object starting with '{' (trailing spaces allowed), {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets":
   [begin, end]}, ..., "__metadata__": {"key": "value"}} (metadata values are strings); then the data, offsets
   relative to its start, little-endian, row-major. The reader refuses, naming the tensor or the byte: a file
   shorter than 8 bytes, N over the format's limit (100,000,000) or past the end of the file, a header that is
   not UTF-8 JSON of that shape (a duplicate name, a missing or unknown-typed field, a number that is not a
   non-negative integer, nesting deeper than 64), a dtype other than F32 (the only one this library holds), a
   shape whose size disagrees with its byte range, and byte ranges that do not tile the data exactly: sorted by
   begin they must start at 0, follow each other without gap or overlap, and end at the file's end (the format
   forbids holes). The order of the header's entries is free (Python's writer sorts by dtype and name).

   save: views' data are host floats (a view with on_device set is refused: copy it to the host first); names are
   unique, not empty, not "__metadata__". shapes (NULL: each tensor 1-D, [count]) gives each view its dimensions
   (their product must be its count; ndim 0 is a scalar, count 1). metadata: NULL, or key, value, key, value, ...,
   NULL (unique keys). The header is padded with spaces to a multiple of 8 bytes (the data 8-aligned, as the
   reference writer does); the tensors are written in view order, straight from the views (no copy on a
   little-endian host), through the library's atomic writer (a new temporary, fsync, rename over path: a crash
   leaves the old file or the new one; what is at path is replaced only when it is a regular file).
   load: every view gets the tensor of its name; nothing is written into the views unless every one matches:
   names missing from the file, names in the file that no view has, and shape mismatches (shapes given: the
   same dimensions; NULL: the same number of elements) are all listed in why ("3 mismatches: ..."),
   TR_ERR_MISMATCH. A bad file is TR_ERR_FORMAT, a file that cannot be opened TR_ERR_NOT_FOUND / TR_ERR_IO.
   meta (may be NULL) gets the file's metadata: free it with tr_safetensors_meta_free (also after a failure).
   tr_safetensors_check checks a whole file held in memory as the loader does (tools, the fuzzer). */
#define TR_SAFETENSORS_MAX_DIMS 16
#define TR_SAFETENSORS_MAX_HEADER 100000000u
typedef struct tr_safetensors_shape { int ndim; int64_t dims[TR_SAFETENSORS_MAX_DIMS]; } tr_safetensors_shape;
typedef struct tr_safetensors_meta { int n; char **keys, **values; } tr_safetensors_meta;

TRAIN_API tr_err tr_safetensors_save(const char *path, const hk_tensor *views, int n, const tr_safetensors_shape *shapes,
                                     const char *const *metadata, char *why, size_t why_len);
TRAIN_API tr_err tr_safetensors_load(const char *path, const hk_tensor *views, int n, const tr_safetensors_shape *shapes,
                                     tr_safetensors_meta *meta, char *why, size_t why_len);
TRAIN_API tr_err tr_safetensors_check(const void *data, size_t len, char *why, size_t why_len);
TRAIN_API const char *tr_safetensors_meta_get(const tr_safetensors_meta *m, const char *key); /* NULL: not there */
TRAIN_API void tr_safetensors_meta_free(tr_safetensors_meta *m);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- safetensors ---------------------------------------------------------------------------------- */
typedef struct tr__st_entry {
  char *name;
  int ndim;
  int64_t dims[TR_SAFETENSORS_MAX_DIMS];
  uint64_t count, begin, end; /* elements; the byte range in the data */
} tr__st_entry;
typedef struct tr__st_file { tr__st_entry *e; int n, cap; tr_safetensors_meta meta; } tr__st_file;

static void tr__st_file_free(tr__st_file *f) {
  int i;
  for (i = 0; i < f->n; i++) free(f->e[i].name);
  free(f->e);
  tr_safetensors_meta_free(&f->meta);
  memset(f, 0, sizeof *f);
}
TRAIN_API void tr_safetensors_meta_free(tr_safetensors_meta *m) {
  int i;
  if (!m) return;
  for (i = 0; i < m->n; i++) { free(m->keys[i]); free(m->values[i]); }
  free(m->keys);
  free(m->values);
  memset(m, 0, sizeof *m);
}
TRAIN_API const char *tr_safetensors_meta_get(const tr_safetensors_meta *m, const char *key) {
  int i;
  for (i = 0; m && key && i < m->n; i++) if (!strcmp(m->keys[i], key)) return m->values[i];
  return NULL;
}
static int tr__st_little(void) { const uint16_t one = 1; return *(const unsigned char *)&one == 1; }

/* -- the header's JSON: a strict reader of the subset the format uses, every failure a sentence -- */
typedef struct tr__stj { const unsigned char *p, *end, *start; char *why; size_t cap; int failed; } tr__stj;
static int tr__stj_bad(tr__stj *j, const char *what) {
  if (!j->failed) tr__msg(j->why, j->cap, "the header is not valid: %s at byte %lu of the header", what, (unsigned long)(j->p - j->start));
  j->failed = 1;
  return -1;
}
static void tr__stj_ws(tr__stj *j) { while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++; }
static int tr__stj_lit(tr__stj *j, char c) {
  tr__stj_ws(j);
  if (j->p < j->end && *j->p == (unsigned char)c) { j->p++; return 0; }
  return -1;
}
static void tr__st_utf8_put(unsigned long c, char *out, size_t *n) {
  if (c < 0x80) out[(*n)++] = (char)c;
  else if (c < 0x800) { out[(*n)++] = (char)(0xc0 | c >> 6); out[(*n)++] = (char)(0x80 | (c & 0x3f)); }
  else if (c < 0x10000) { out[(*n)++] = (char)(0xe0 | c >> 12); out[(*n)++] = (char)(0x80 | (c >> 6 & 0x3f)); out[(*n)++] = (char)(0x80 | (c & 0x3f)); }
  else { out[(*n)++] = (char)(0xf0 | c >> 18); out[(*n)++] = (char)(0x80 | (c >> 12 & 0x3f)); out[(*n)++] = (char)(0x80 | (c >> 6 & 0x3f)); out[(*n)++] = (char)(0x80 | (c & 0x3f)); }
}
/* One UTF-8 character of the raw text (shortest form, no surrogates, at most U+10FFFF): its length, 0 if bad. */
static int tr__st_utf8_len(const unsigned char *p, const unsigned char *end) {
  int n, k;
  unsigned long c;
  if (p[0] < 0x80) return 1;
  if ((p[0] & 0xe0) == 0xc0) { n = 2; c = p[0] & 0x1f; }
  else if ((p[0] & 0xf0) == 0xe0) { n = 3; c = p[0] & 0x0f; }
  else if ((p[0] & 0xf8) == 0xf0) { n = 4; c = p[0] & 0x07; }
  else return 0;
  if (end - p < n) return 0;
  for (k = 1; k < n; k++) { if ((p[k] & 0xc0) != 0x80) return 0; c = c << 6 | (p[k] & 0x3f); }
  if ((n == 2 && c < 0x80) || (n == 3 && c < 0x800) || (n == 4 && c < 0x10000) || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  return n;
}
static int tr__st_hex4(const unsigned char *p, unsigned long *v) {
  int k;
  *v = 0;
  for (k = 0; k < 4; k++) {
    int c = p[k], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    *v = *v << 4 | (unsigned long)d;
  }
  return 0;
}
/* A string, decoded into a new NUL-terminated copy (*out, may be NULL to skip it). A \u0000 inside is refused:
   no C name could match it. */
static int tr__stj_str(tr__stj *j, char **out) {
  const unsigned char *q;
  char *s;
  size_t n = 0;
  if (out) *out = NULL;
  if (tr__stj_lit(j, '"')) return tr__stj_bad(j, "a string was expected");
  for (q = j->p; q < j->end && *q != '"'; q++) if (*q == '\\') q++; /* an upper bound of the decoded length */
  if (q >= j->end) return tr__stj_bad(j, "a string without its closing quote");
  if (!(s = (char *)malloc((size_t)(q - j->p) + 1))) return tr__stj_bad(j, "out of memory");
  while (*j->p != '"') {
    unsigned char c = *j->p;
    if (c < 0x20) { free(s); return tr__stj_bad(j, "a control character inside a string"); }
    if (c == '\\') {
      unsigned long u, lo;
      const char *esc = "\"\\/bfnrt", *rep = "\"\\/\b\f\n\r\t", *at;
      c = *++j->p;
      if (c == 'u') {
        if (j->end - j->p < 5 || tr__st_hex4(j->p + 1, &u)) { free(s); return tr__stj_bad(j, "a bad \\u escape"); }
        j->p += 5;
        if (u >= 0xd800 && u < 0xdc00) { /* a surrogate pair */
          if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || tr__st_hex4(j->p + 2, &lo) || lo < 0xdc00 || lo > 0xdfff) {
            free(s);
            return tr__stj_bad(j, "a lone surrogate in a \\u escape");
          }
          j->p += 6;
          u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        } else if (u >= 0xdc00 && u <= 0xdfff) { free(s); return tr__stj_bad(j, "a lone surrogate in a \\u escape"); }
        if (u == 0) { free(s); return tr__stj_bad(j, "a NUL character (\\u0000) in a string"); }
        tr__st_utf8_put(u, s, &n); /* 6 or 12 bytes of text make at most 3 or 4 */
        continue;
      }
      if (!c || !(at = strchr(esc, c))) { free(s); return tr__stj_bad(j, "an unknown escape in a string"); }
      s[n++] = rep[at - esc];
      j->p++;
    } else {
      int k = tr__st_utf8_len(j->p, j->end);
      if (!k) { free(s); return tr__stj_bad(j, "bytes that are not UTF-8 in a string"); }
      memcpy(s + n, j->p, (size_t)k);
      n += (size_t)k;
      j->p += k;
    }
  }
  j->p++;
  s[n] = 0;
  if (out) *out = s;
  else free(s);
  return 0;
}
/* A non-negative integer below 2^63 (JSON's form: no sign, no leading zero, no fraction or exponent). */
static int tr__stj_uint(tr__stj *j, uint64_t *v) {
  const unsigned char *q;
  tr__stj_ws(j);
  q = j->p;
  *v = 0;
  if (q >= j->end || *q < '0' || *q > '9') return tr__stj_bad(j, "a non-negative integer was expected");
  if (*q == '0' && q + 1 < j->end && q[1] >= '0' && q[1] <= '9') return tr__stj_bad(j, "a number with a leading zero");
  while (q < j->end && *q >= '0' && *q <= '9') {
    if (*v > (UINT64_C(0x7fffffffffffffff) - (uint64_t)(*q - '0')) / 10) return tr__stj_bad(j, "a number over 2^63");
    *v = *v * 10 + (uint64_t)(*q++ - '0');
  }
  if (q < j->end && (*q == '.' || *q == 'e' || *q == 'E')) return tr__stj_bad(j, "a number that is not an integer");
  j->p = q;
  return 0;
}
/* [a, b, ...] of such integers: at most max of them into v, their number in *n. */
static int tr__stj_uints(tr__stj *j, uint64_t *v, int max, int *n, const char *what) {
  *n = 0;
  if (tr__stj_lit(j, '[')) return tr__stj_bad(j, what);
  if (!tr__stj_lit(j, ']')) return 0;
  for (;;) {
    if (*n == max) return tr__stj_bad(j, max == 2 ? what : "a shape of more than 16 dimensions (this reader's limit)");
    if (tr__stj_uint(j, &v[(*n)++])) return -1;
    if (!tr__stj_lit(j, ']')) return 0;
    if (tr__stj_lit(j, ',')) return tr__stj_bad(j, "',' or ']' was expected in a list");
  }
}
/* Any value, skipped (an unknown field of a tensor's entry: the format's reader ignores those). */
static int tr__stj_skip(tr__stj *j, int depth) {
  tr__stj_ws(j);
  if (depth > 64) return tr__stj_bad(j, "nesting deeper than 64");
  if (j->p >= j->end) return tr__stj_bad(j, "a value was expected");
  if (*j->p == '"') return tr__stj_str(j, NULL);
  if (*j->p == '{' || *j->p == '[') {
    char close = *j->p == '{' ? '}' : ']';
    j->p++;
    if (!tr__stj_lit(j, close)) return 0;
    for (;;) {
      if (close == '}' && (tr__stj_str(j, NULL) || (tr__stj_lit(j, ':') ? tr__stj_bad(j, "':' was expected") : 0))) return -1;
      if (tr__stj_skip(j, depth + 1)) return -1;
      if (!tr__stj_lit(j, close)) return 0;
      if (tr__stj_lit(j, ',')) return tr__stj_bad(j, "',' was expected");
    }
  }
  if (*j->p == '-') j->p++;
  if (j->p < j->end && *j->p >= '0' && *j->p <= '9') { /* any number: digits, fraction, exponent */
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    if (j->p < j->end && *j->p == '.') {
      j->p++;
      if (j->p >= j->end || *j->p < '0' || *j->p > '9') return tr__stj_bad(j, "a bad number");
      while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
      j->p++;
      if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
      if (j->p >= j->end || *j->p < '0' || *j->p > '9') return tr__stj_bad(j, "a bad number");
      while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
    }
    return 0;
  }
  {
    static const char *const words[] = { "true", "false", "null" };
    int k;
    for (k = 0; k < 3; k++) {
      size_t n = strlen(words[k]);
      if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, words[k], n)) { j->p += n; return 0; }
    }
  }
  return tr__stj_bad(j, "a value was expected");
}
static int tr__stj_null(tr__stj *j) {
  tr__stj_ws(j);
  if (j->end - j->p >= 4 && !memcmp(j->p, "null", 4)) { j->p += 4; return 1; }
  return 0;
}

static int tr__st_meta_add(tr_safetensors_meta *m, char *k, char *v) {
  char **a = (char **)realloc(m->keys, (size_t)(m->n + 1) * sizeof *a), **b;
  if (a) m->keys = a;
  b = a ? (char **)realloc(m->values, (size_t)(m->n + 1) * sizeof *b) : NULL;
  if (b) m->values = b;
  if (!a || !b) { free(k); free(v); return -1; }
  m->keys[m->n] = k;
  m->values[m->n++] = v;
  return 0;
}
static int tr__st_meta_parse(tr__stj *j, tr_safetensors_meta *m) {
  if (tr__stj_null(j)) return 0; /* the reference's writer never makes it, its reader takes it */
  if (tr__stj_lit(j, '{')) return tr__stj_bad(j, "__metadata__ is not an object of strings");
  if (!tr__stj_lit(j, '}')) return 0;
  for (;;) {
    char *k, *v;
    if (tr__stj_str(j, &k)) return -1;
    if (tr__stj_lit(j, ':')) { free(k); return tr__stj_bad(j, "':' was expected"); }
    tr__stj_ws(j);
    if (j->p >= j->end || *j->p != '"') { free(k); return tr__stj_bad(j, "a __metadata__ value that is not a string (the format allows strings only)"); }
    if (tr__stj_str(j, &v)) { free(k); return -1; }
    if (tr_safetensors_meta_get(m, k)) {
      char msg[160];
      snprintf(msg, sizeof msg, "__metadata__ has the key \"%.80s\" twice", k);
      free(k); free(v);
      return tr__stj_bad(j, msg);
    }
    if (tr__st_meta_add(m, k, v)) return tr__stj_bad(j, "out of memory");
    if (!tr__stj_lit(j, '}')) return 0;
    if (tr__stj_lit(j, ',')) return tr__stj_bad(j, "',' or '}' was expected in __metadata__");
  }
}
/* One tensor's entry: {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, fields in any order. */
static int tr__st_entry_parse(tr__stj *j, tr__st_entry *e) {
  int seen[3] = { 0, 0, 0 }, n;
  uint64_t v[TR_SAFETENSORS_MAX_DIMS];
  if (tr__stj_lit(j, '{')) return tr__stj_bad(j, "a tensor's entry is not an object");
  if (!tr__stj_lit(j, '}')) return tr__stj_bad(j, "a tensor's entry is empty (dtype, shape and data_offsets are needed)");
  for (;;) {
    char *k;
    int f;
    if (tr__stj_str(j, &k)) return -1;
    f = !strcmp(k, "dtype") ? 0 : !strcmp(k, "shape") ? 1 : !strcmp(k, "data_offsets") ? 2 : -1;
    free(k);
    if (tr__stj_lit(j, ':')) return tr__stj_bad(j, "':' was expected");
    if (f >= 0 && seen[f]++) return tr__stj_bad(j, "a field given twice in a tensor's entry");
    if (f == 0) {
      char *dt;
      if (tr__stj_str(j, &dt)) return -1;
      if (strcmp(dt, "F32")) {
        char msg[200];
        snprintf(msg, sizeof msg, "tensor \"%.80s\" has dtype %.20s: this reader loads F32 only", e->name, dt);
        free(dt);
        return tr__stj_bad(j, msg);
      }
      free(dt);
    } else if (f == 1) {
      int k2;
      if (tr__stj_uints(j, v, TR_SAFETENSORS_MAX_DIMS, &n, "shape is not a list of integers")) return -1;
      e->ndim = n;
      e->count = 1;
      for (k2 = 0; k2 < n; k2++) {
        e->dims[k2] = (int64_t)v[k2];
        if (v[k2] && e->count > UINT64_C(0x0fffffffffffffff) / v[k2]) return tr__stj_bad(j, "a shape whose size overflows");
        e->count *= v[k2];
      }
    } else if (f == 2) {
      if (tr__stj_uints(j, v, 2, &n, "data_offsets is not a list of two integers")) return -1;
      if (n != 2) return tr__stj_bad(j, "data_offsets is not a list of two integers");
      e->begin = v[0];
      e->end = v[1];
    } else if (tr__stj_skip(j, 2)) return -1;
    if (!tr__stj_lit(j, '}')) break;
    if (tr__stj_lit(j, ',')) return tr__stj_bad(j, "',' or '}' was expected in a tensor's entry");
  }
  if (!seen[0] || !seen[1] || !seen[2]) {
    char msg[200];
    snprintf(msg, sizeof msg, "tensor \"%.80s\" has no %s", e->name, !seen[0] ? "dtype" : !seen[1] ? "shape" : "data_offsets");
    return tr__stj_bad(j, msg);
  }
  return 0;
}
static int tr__st_cmp_begin(const void *a, const void *b) {
  const tr__st_entry *x = *(const tr__st_entry *const *)a, *y = *(const tr__st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}
/* The header (hdr, n bytes) of a file whose data are data_len bytes: every rule checked, f filled. */
static tr_err tr__st_parse(const unsigned char *hdr, size_t n, uint64_t data_len, tr__st_file *f, char *why, size_t cap) {
  tr__stj j;
  const tr__st_entry **by;
  uint64_t at = 0;
  int i, have_meta = 0;
  memset(f, 0, sizeof *f);
  j.p = j.start = hdr; j.end = hdr + n; j.why = why; j.cap = cap; j.failed = 0;
  if (n == 0 || hdr[0] != '{') { tr__msg(why, cap, "the header does not start with '{' (not a safetensors file)"); return TR_ERR_FORMAT; }
  j.p++;
  if (tr__stj_lit(&j, '}')) for (;;) {
    char *name;
    if (tr__stj_str(&j, &name)) goto bad;
    if (tr__stj_lit(&j, ':')) { free(name); tr__stj_bad(&j, "':' was expected"); goto bad; }
    if (!strcmp(name, "__metadata__")) {
      free(name);
      if (have_meta++) { tr__stj_bad(&j, "__metadata__ is given twice"); goto bad; }
      if (tr__st_meta_parse(&j, &f->meta)) goto bad;
    } else {
      tr__st_entry *e;
      for (i = 0; i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) {
          char msg[160];
          snprintf(msg, sizeof msg, "the tensor name \"%.80s\" is given twice", name);
          free(name);
          tr__stj_bad(&j, msg);
          goto bad;
        }
      if (f->n == f->cap) {
        int c = f->cap ? 2 * f->cap : 16;
        tr__st_entry *g = (tr__st_entry *)realloc(f->e, (size_t)c * sizeof *g);
        if (!g) { free(name); tr__stj_bad(&j, "out of memory"); goto bad; }
        f->e = g;
        f->cap = c;
      }
      e = &f->e[f->n++];
      memset(e, 0, sizeof *e);
      e->name = name;
      if (tr__st_entry_parse(&j, e)) goto bad;
    }
    if (!tr__stj_lit(&j, '}')) break;
    if (tr__stj_lit(&j, ',')) { tr__stj_bad(&j, "',' or '}' was expected"); goto bad; }
  }
  tr__stj_ws(&j);
  if (j.p != j.end) { tr__stj_bad(&j, "more after the header's object (only spaces may pad it)"); goto bad; }
  /* the byte ranges: each its tensor's size, and together the whole data, in order, no gap, no overlap */
  for (i = 0; i < f->n; i++) {
    const tr__st_entry *e = &f->e[i];
    if (e->end < e->begin || e->end - e->begin != e->count * 4) {
      tr__msg(why, cap, "tensor \"%s\": data_offsets [%llu, %llu] %s", e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
              e->end < e->begin ? "end before begin" : "do not hold its shape's elements (4 bytes each, F32)");
      goto out;
    }
  }
  by = (const tr__st_entry **)malloc((f->n > 0 ? (size_t)f->n : 1u) * sizeof *by);
  if (!by) { tr__msg(why, cap, "out of memory"); tr__st_file_free(f); return TR_ERR_NOMEM; }
  for (i = 0; i < f->n; i++) by[i] = &f->e[i];
  qsort(by, (size_t)f->n, sizeof *by, tr__st_cmp_begin);
  for (i = 0; i < f->n; i++) {
    if (by[i]->begin != at) {
      tr__msg(why, cap, "tensor \"%s\" begins at byte %llu of the data, where %s", by[i]->name, (unsigned long long)by[i]->begin,
              by[i]->begin < at ? "the tensor before it has not ended (overlapping data)" : "nothing ends (a gap: the format forbids holes)");
      if (by[i]->begin > at && at == 0 && i == 0) tr__msg(why, cap, "tensor \"%s\" begins at byte %llu of the data, not 0 (a gap: the "
                                                         "format forbids holes)", by[i]->name, (unsigned long long)by[i]->begin);
      free(by);
      goto out;
    }
    at = by[i]->end;
    if (at > data_len) {
      tr__msg(why, cap, "tensor \"%s\": data_offsets end at byte %llu, past the %llu bytes of data the file holds", by[i]->name,
              (unsigned long long)at, (unsigned long long)data_len);
      free(by);
      goto out;
    }
  }
  free(by);
  if (at != data_len) {
    tr__msg(why, cap, "the tensors' data end at byte %llu, but the file holds %llu bytes of data (the format forbids "
            "bytes no tensor covers)", (unsigned long long)at, (unsigned long long)data_len);
    goto out;
  }
  return TR_OK;
bad:
  if (!j.failed) tr__msg(why, cap, "the header is not valid JSON");
out:
  tr__st_file_free(f);
  return TR_ERR_FORMAT;
}

/* The first 8 bytes: N, checked against the limit and what follows. */
static tr_err tr__st_len(const unsigned char *b, size_t have, uint64_t total, uint64_t *n, char *why, size_t cap) {
  int k;
  if (have < 8) { tr__msg(why, cap, "truncated: %llu bytes, fewer than the 8 of the header's length", (unsigned long long)have); return TR_ERR_FORMAT; }
  for (*n = 0, k = 7; k >= 0; k--) *n = *n << 8 | b[k];
  if (*n > TR_SAFETENSORS_MAX_HEADER) {
    tr__msg(why, cap, "the header's length is %llu bytes, over the format's limit of %u", (unsigned long long)*n, TR_SAFETENSORS_MAX_HEADER);
    return TR_ERR_FORMAT;
  }
  if (*n > total - 8) {
    tr__msg(why, cap, "the header's length (%llu bytes) goes past the end of the file (%llu bytes after the length)", (unsigned long long)*n,
            (unsigned long long)(total - 8));
    return TR_ERR_FORMAT;
  }
  return TR_OK;
}

TRAIN_API tr_err tr_safetensors_check(const void *data, size_t len, char *why, size_t why_len) {
  const unsigned char *b = (const unsigned char *)data;
  tr__st_file f;
  uint64_t n;
  tr_err e;
  char dummy[8];
  if (!why) { why = dummy; why_len = sizeof dummy; }
  if (!b && len) { tr__msg(why, why_len, "tr_safetensors_check: data is NULL"); return TR_ERR_INVALID; }
  if ((e = tr__st_len(b, len, len, &n, why, why_len)) != TR_OK) return e;
  if ((e = tr__st_parse(b + 8, (size_t)n, len - 8 - n, &f, why, why_len)) != TR_OK) return e;
  tr__st_file_free(&f);
  return TR_OK;
}

/* Views the file needs: host data, names known. */
static tr_err tr__st_views_ok(const char *fn, const hk_tensor *views, int n, const tr_safetensors_shape *shapes, char *why, size_t cap) {
  int i, k;
  if (n < 0 || (n > 0 && !views)) { tr__msg(why, cap, "%s: %d views at %p", fn, n, (const void *)views); return TR_ERR_INVALID; }
  for (i = 0; i < n; i++) {
    const hk_tensor *v = &views[i];
    if (!v->name || !v->name[0] || !strcmp(v->name, "__metadata__")) {
      tr__msg(why, cap, "%s: view %d has %s name", fn, i, !v->name ? "no" : v->name[0] ? "the reserved" : "an empty");
      return TR_ERR_INVALID;
    }
    if (v->on_device) {
      tr__msg(why, cap, "%s: view '%s' is device memory: copy the tensors to the host first", fn, v->name);
      return TR_ERR_INVALID;
    }
    if (v->count && !v->data) { tr__msg(why, cap, "%s: view '%s' has %zu elements and no data", fn, v->name, v->count); return TR_ERR_INVALID; }
    if (v->count > (size_t)(UINT64_C(0x0fffffffffffffff) / 4)) { tr__msg(why, cap, "%s: view '%s' is too large", fn, v->name); return TR_ERR_INVALID; }
    for (k = 0; k < i; k++)
      if (!strcmp(views[k].name, v->name)) { tr__msg(why, cap, "%s: two views are named '%s'", fn, v->name); return TR_ERR_INVALID; }
    if (shapes) {
      uint64_t c = 1;
      if (shapes[i].ndim < 0 || shapes[i].ndim > TR_SAFETENSORS_MAX_DIMS) {
        tr__msg(why, cap, "%s: view '%s' has %d dimensions (0..%d)", fn, v->name, shapes[i].ndim, TR_SAFETENSORS_MAX_DIMS);
        return TR_ERR_INVALID;
      }
      for (k = 0; k < shapes[i].ndim; k++) {
        if (shapes[i].dims[k] < 0) { tr__msg(why, cap, "%s: view '%s' has a negative dimension", fn, v->name); return TR_ERR_INVALID; }
        c = shapes[i].dims[k] && c > UINT64_C(0x0fffffffffffffff) / (uint64_t)shapes[i].dims[k] ? UINT64_MAX : c * (uint64_t)shapes[i].dims[k];
      }
      if (c != (uint64_t)v->count) {
        tr__msg(why, cap, "%s: view '%s' has %zu elements, its shape %llu", fn, v->name, v->count, (unsigned long long)c);
        return TR_ERR_INVALID;
      }
    }
  }
  return TR_OK;
}

static void tr__st_put_str(hk_bytes *b, const char *s) { /* a JSON string; bytes >= 0x80 as they are (UTF-8) */
  hk_bytes_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; hk_bytes_put(b, esc, 2); }
    else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); hk_bytes_put(b, esc, 6); }
    else hk_bytes_put(b, s, 1);
  }
  hk_bytes_put(b, "\"", 1);
}

/* tr_safetensors_save; mine (not NULL): put the file only where nothing is or over the file of mine (tr__write_mine's
   rule: prediction_writer's files), EEXIST's why naming the file that is there. */
TR__SHARED tr_err tr__st_save_as(const char *path, const hk_tensor *views, int n, const tr_safetensors_shape *shapes,
                                 const char *const *metadata, tr__file_id *mine, char *why, size_t why_len) {
  hk_bytes h;
  tr__afile a;
  uint64_t at = 0, len;
  unsigned char prefix[8];
  char dummy[8], num[64];
  int i, k, e;
  tr_err err;
  if (!why) { why = dummy; why_len = sizeof dummy; }
  if (!path || !path[0]) { tr__msg(why, why_len, "tr_safetensors_save: no path"); return TR_ERR_INVALID; }
  if ((err = tr__st_views_ok("tr_safetensors_save", views, n, shapes, why, why_len)) != TR_OK) return err;
  for (i = 0; metadata && metadata[i]; i += 2) {
    if (!metadata[i + 1]) { tr__msg(why, why_len, "tr_safetensors_save: metadata key '%s' has no value (key, value, ..., NULL)", metadata[i]); return TR_ERR_INVALID; }
    for (k = 0; k < i; k += 2)
      if (!strcmp(metadata[k], metadata[i])) { tr__msg(why, why_len, "tr_safetensors_save: metadata key '%s' is given twice", metadata[i]); return TR_ERR_INVALID; }
  }
  memset(&h, 0, sizeof h);
  hk_bytes_put(&h, "{", 1);
  if (metadata && metadata[0]) {
    hk_bytes_put(&h, "\"__metadata__\":{", 16);
    for (i = 0; metadata[i]; i += 2) {
      if (i) hk_bytes_put(&h, ",", 1);
      tr__st_put_str(&h, metadata[i]);
      hk_bytes_put(&h, ":", 1);
      tr__st_put_str(&h, metadata[i + 1]);
    }
    hk_bytes_put(&h, "}", 1);
  }
  for (i = 0; i < n; i++) {
    uint64_t bytes = (uint64_t)views[i].count * 4;
    if (i || (metadata && metadata[0])) hk_bytes_put(&h, ",", 1);
    tr__st_put_str(&h, views[i].name);
    hk_bytes_put(&h, ":{\"dtype\":\"F32\",\"shape\":[", 25);
    if (!shapes) { snprintf(num, sizeof num, "%llu", (unsigned long long)views[i].count); hk_bytes_put(&h, num, strlen(num)); }
    else for (k = 0; k < shapes[i].ndim; k++) {
      snprintf(num, sizeof num, "%s%lld", k ? "," : "", (long long)shapes[i].dims[k]);
      hk_bytes_put(&h, num, strlen(num));
    }
    snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)(at + bytes));
    hk_bytes_put(&h, num, strlen(num));
    at += bytes;
  }
  hk_bytes_put(&h, "}", 1);
  while (h.len % 8) hk_bytes_put(&h, " ", 1); /* the data 8-aligned, as the reference writer pads */
  if (h.failed) { free(h.data); tr__msg(why, why_len, "tr_safetensors_save: out of memory"); return TR_ERR_NOMEM; }
  len = h.len;
  for (k = 0; k < 8; k++) prefix[k] = (unsigned char)(len >> (8 * k));
  e = tr__afile_start(&a, path, 0, mine);
  if (!e) e = tr__afile_write(&a, prefix, 8);
  if (!e) e = tr__afile_write(&a, h.data, h.len);
  free(h.data);
  for (i = 0; i < n && !e; i++) {
    if (tr__st_little()) e = tr__afile_write(&a, views[i].data, views[i].count * 4);
    else { /* a big-endian host: little-endian bytes, a block at a time */
      unsigned char block[4096];
      size_t done = 0;
      while (!e && done < views[i].count) {
        size_t m = views[i].count - done < sizeof block / 4 ? views[i].count - done : sizeof block / 4, q;
        for (q = 0; q < m; q++) {
          uint32_t u;
          memcpy(&u, &views[i].data[done + q], 4);
          for (k = 0; k < 4; k++) block[4 * q + (size_t)k] = (unsigned char)(u >> (8 * k));
        }
        e = tr__afile_write(&a, block, 4 * m);
        done += m;
      }
    }
  }
  if (!e) e = tr__afile_commit(&a, NULL);
  if (e) {
    if (a.tmp) tr__afile_why(&a, why, why_len);
    else tr__msg(why, why_len, "out of memory");
  }
  tr__afile_free(&a);
  if (e) return e == ENOMEM ? TR_ERR_NOMEM : TR_ERR_IO;
  return TR_OK;
}
TRAIN_API tr_err tr_safetensors_save(const char *path, const hk_tensor *views, int n, const tr_safetensors_shape *shapes,
                                     const char *const *metadata, char *why, size_t why_len) {
  return tr__st_save_as(path, views, n, shapes, metadata, NULL, why, why_len);
}

/* Open path and read its header: f parsed, *data_at the file offset of the data. */
static tr_err tr__st_open(const char *path, FILE **fp, tr__st_file *f, uint64_t *data_at, char *why, size_t cap) {
  unsigned char b[8], *hdr;
  uint64_t n;
  long size;
  size_t got;
  tr_err e;
  FILE *in = fopen(path, "rb");
  *fp = NULL;
  memset(f, 0, sizeof *f);
  if (!in) {
    tr__msg(why, cap, "cannot open '%s': %s", path, strerror(errno));
    return errno == ENOENT ? TR_ERR_NOT_FOUND : TR_ERR_IO;
  }
  if (fseek(in, 0, SEEK_END) != 0 || (size = ftell(in)) < 0 || fseek(in, 0, SEEK_SET) != 0) {
    tr__msg(why, cap, "cannot read '%s': not a regular file, or %s", path, strerror(errno));
    fclose(in);
    return TR_ERR_IO;
  }
  got = fread(b, 1, 8, in);
  if ((e = tr__st_len(b, got, (uint64_t)size, &n, why, cap)) != TR_OK) { fclose(in); return e; }
  if (!(hdr = (unsigned char *)malloc((size_t)n + 1))) { fclose(in); tr__msg(why, cap, "out of memory"); return TR_ERR_NOMEM; }
  if (fread(hdr, 1, (size_t)n, in) != (size_t)n) {
    tr__msg(why, cap, "cannot read the header of '%s': %s", path, ferror(in) ? strerror(errno) : "the file got shorter");
    free(hdr);
    fclose(in);
    return TR_ERR_IO;
  }
  e = tr__st_parse(hdr, (size_t)n, (uint64_t)size - 8 - n, f, why, cap);
  free(hdr);
  if (e) { fclose(in); return e; }
  *fp = in;
  *data_at = 8 + n;
  return TR_OK;
}

/* A mismatch, appended to the list in why (cut to fit; the count says how many there are). */
static void tr__st_say(char *list, size_t cap, size_t *len, int *count, const char *fmt, ...) TR__PRINTF(5, 6);
static void tr__st_say(char *list, size_t cap, size_t *len, int *count, const char *fmt, ...) {
  va_list ap;
  int w;
  (*count)++;
  if (*len + 1 >= cap) return;
  if (*count > 1) { list[(*len)++] = ';'; list[(*len)++] = ' '; list[*len] = 0; if (*len + 1 >= cap) return; }
  va_start(ap, fmt);
  w = vsnprintf(list + *len, cap - *len, fmt, ap);
  va_end(ap);
  *len = w < 0 ? *len : *len + (size_t)w >= cap ? cap - 1 : *len + (size_t)w;
}
static void tr__st_dims(char *out, size_t cap, int nd, const int64_t *d) {
  size_t len = 0;
  int k;
  len = tr__msg_at(out, cap, len, "[");
  for (k = 0; k < nd && len < cap; k++) len = tr__msg_at(out, cap, len, "%s%lld", k ? ", " : "", (long long)d[k]);
  (void)tr__msg_at(out, cap, len, "]");
}

TRAIN_API tr_err tr_safetensors_load(const char *path, const hk_tensor *views, int n, const tr_safetensors_shape *shapes,
                                     tr_safetensors_meta *meta, char *why, size_t why_len) {
  tr__st_file f;
  FILE *in;
  uint64_t data_at;
  int i, k, bad = 0, *used = NULL;
  size_t len = 0;
  char dummy[8], *list;
  tr_err e;
  if (meta) memset(meta, 0, sizeof *meta);
  if (!why) { why = dummy; why_len = sizeof dummy; }
  if (!path || !path[0]) { tr__msg(why, why_len, "tr_safetensors_load: no path"); return TR_ERR_INVALID; }
  if ((e = tr__st_views_ok("tr_safetensors_load", views, n, shapes, why, why_len)) != TR_OK) return e;
  if ((e = tr__st_open(path, &in, &f, &data_at, why, why_len)) != TR_OK) {
    char tmp[1024];
    tr__msg(tmp, sizeof tmp, "%s", why);
    tr__msg(why, why_len, "'%s': %s", path, tmp);
    return e;
  }
  list = (char *)malloc(why_len + 1);
  used = (int *)calloc(f.n > 0 ? (size_t)f.n : 1u, sizeof *used);
  if (!list || !used) { free(list); free(used); fclose(in); tr__st_file_free(&f); tr__msg(why, why_len, "out of memory"); return TR_ERR_NOMEM; }
  list[0] = 0;
  for (i = 0; i < n; i++) { /* every mismatch, in view order, then the file's tensors no view took */
    const tr__st_entry *t = NULL;
    for (k = 0; k < f.n && !t; k++) if (!used[k] && !strcmp(f.e[k].name, views[i].name)) { used[k] = 1; t = &f.e[k]; }
    if (!t) tr__st_say(list, why_len, &len, &bad, "'%s' is not in the file", views[i].name);
    else if (shapes ? shapes[i].ndim != t->ndim || memcmp(shapes[i].dims, t->dims, (size_t)t->ndim * sizeof *t->dims) : t->count != views[i].count) {
      char a[128], b[128];
      tr__st_dims(a, sizeof a, t->ndim, t->dims);
      if (shapes) tr__st_dims(b, sizeof b, shapes[i].ndim, shapes[i].dims);
      else snprintf(b, sizeof b, "%zu elements", views[i].count);
      tr__st_say(list, why_len, &len, &bad, "'%s' is %s in the file, %s in the model", views[i].name, a, b);
    }
  }
  for (k = 0; k < f.n; k++) if (!used[k]) tr__st_say(list, why_len, &len, &bad, "'%s' is in the file, not in the model", f.e[k].name);
  if (bad) {
    tr__msg(why, why_len, "'%s' does not match the model, %d mismatch%s: %s", path, bad, bad > 1 ? "es" : "", list);
    e = TR_ERR_MISMATCH;
  }
  for (i = 0; i < n && !e; i++) { /* everything matches: now, and only now, the views change */
    const tr__st_entry *t = NULL;
    for (k = 0; k < f.n && !t; k++) if (!strcmp(f.e[k].name, views[i].name)) t = &f.e[k];
    if (!t || !views[i].count) continue;
    if (fseek(in, (long)(data_at + t->begin), SEEK_SET) != 0 || fread(views[i].data, 4, views[i].count, in) != views[i].count) {
      tr__msg(why, why_len, "'%s': cannot read tensor '%s': %s", path, views[i].name, ferror(in) ? strerror(errno) : "the file got shorter");
      e = TR_ERR_IO;
      break;
    }
    if (!tr__st_little()) {
      size_t q;
      for (q = 0; q < views[i].count; q++) {
        unsigned char *p = (unsigned char *)&views[i].data[q];
        uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        memcpy(p, &u, 4);
      }
    }
  }
  fclose(in);
  free(list);
  free(used);
  if (meta) { *meta = f.meta; memset(&f.meta, 0, sizeof f.meta); }
  tr__st_file_free(&f);
  return e;
}

/* The metadata of a file, for a caller that asks whose it is (model_checkpoint's sidecars): 0, or -1 when it
   is not a safetensors file this reader takes. */
TR__SHARED int tr__st_read_meta(const char *path, tr_safetensors_meta *meta) {
  tr__st_file f;
  FILE *in;
  uint64_t at;
  char why[256];
  if (tr__st_open(path, &in, &f, &at, why, sizeof why) != TR_OK) return -1;
  fclose(in);
  *meta = f.meta;
  memset(&f.meta, 0, sizeof f.meta);
  tr__st_file_free(&f);
  return 0;
}
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
