/* tests/test_safetensors.c - train/safetensors.h: round trips, the mismatch list, every rule of the format
   refused with its sentence, model_checkpoint's sidecars (written, evicted with their .ckpt, a file of yours
   never touched), a pretrained start into a trainer. Built by tests/safetensors.mk: plain, ASan+UBSan,
   valgrind (about a second each). Two modes for tests/st_check.py (the real safetensors package):
     test_safetensors --write DIR   writes DIR/c.safetensors (the tensors below, metadata step 7, epoch 2)
     test_safetensors --read FILE   loads what Python wrote (same tensors + 1, metadata step 9, epoch 3) */
#define TEST_NO_FSYNC /* what it checks needs no flush to the disk (tests/test.h) */
#include "test.h"

#include <dirent.h>

static char g_root[256];

/* The tensors both sides agree on: w [2, 3], b [2], "emb.\u00fc \"q\"" [4], s [] (a scalar), e [0]. */
static float W[6], B[2], E4[4], S[1];
static hk_tensor V[5] = { { "w", W, 6, 0 }, { "b", B, 2, 0 }, { "emb.\xc3\xbc \"q\"", E4, 4, 0 }, { "s", S, 1, 0 }, { "e", NULL, 0, 0 } };
static const tr_safetensors_shape SH[5] = { { 2, { 2, 3 } }, { 1, { 2 } }, { 1, { 4 } }, { 0, { 0 } }, { 1, { 0 } } };
static void fill(float add) {
  int i;
  for (i = 0; i < 6; i++) W[i] = (float)i * 0.25f - 1 + add;
  for (i = 0; i < 2; i++) B[i] = (float)i * -1.5f + add;
  for (i = 0; i < 4; i++) E4[i] = 1.0f / (float)(i + 3) + add;
  S[0] = 3.5f + add;
}
static int same(float add) {
  float w[6], b[2], e[4], s = S[0];
  int ok;
  memcpy(w, W, sizeof w); memcpy(b, B, sizeof b); memcpy(e, E4, sizeof e);
  fill(add);
  ok = !memcmp(w, W, sizeof w) && !memcmp(b, B, sizeof b) && !memcmp(e, E4, sizeof e) && s == S[0];
  return ok;
}
static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_root, name); }

static void test_round_trip(void **state) {
  char path[400], why[600];
  static const char *const meta[] = { "step", "7", "epoch", "2", "note", "tab\there \"quoted\" \xc3\xa9", NULL };
  tr_safetensors_meta m;
  FILE *f;
  unsigned char head[9];
  uint64_t n = 0;
  int k;
  (void)state;
  path_of(path, sizeof path, "rt.safetensors");
  fill(0);
  assert_int_equal(tr_safetensors_save(path, V, 5, SH, meta, why, sizeof why), TR_OK);
  f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fread(head, 1, 9, f), 9);
  fclose(f);
  for (k = 7; k >= 0; k--) n = n << 8 | head[k];
  assert_true(n % 8 == 0 && head[8] == '{'); /* the data 8-aligned, the header an object */
  memset(W, 0, sizeof W); memset(B, 0, sizeof B); memset(E4, 0, sizeof E4); S[0] = 0;
  assert_int_equal(tr_safetensors_load(path, V, 5, SH, &m, why, sizeof why), TR_OK);
  assert_true(same(0));
  assert_int_equal(m.n, 3);
  assert_string_equal(tr_safetensors_meta_get(&m, "step"), "7");
  assert_string_equal(tr_safetensors_meta_get(&m, "note"), "tab\there \"quoted\" \xc3\xa9");
  assert_null(tr_safetensors_meta_get(&m, "nope"));
  tr_safetensors_meta_free(&m);
  /* without shapes: 1-D, matched by element count */
  assert_int_equal(tr_safetensors_save(path, V, 5, NULL, NULL, why, sizeof why), TR_OK);
  memset(W, 0, sizeof W);
  assert_int_equal(tr_safetensors_load(path, V, 5, NULL, NULL, why, sizeof why), TR_OK);
  assert_true(same(0));
  /* a file not there; a view on the device; two views of one name */
  path_of(path, sizeof path, "missing.safetensors");
  assert_int_equal(tr_safetensors_load(path, V, 5, NULL, NULL, why, sizeof why), TR_ERR_NOT_FOUND);
  assert_non_null(strstr(why, "missing.safetensors"));
  {
    hk_tensor d[2] = { { "a", W, 2, 1 }, { "a", B, 2, 0 } };
    assert_int_equal(tr_safetensors_save(path, d, 1, NULL, NULL, why, sizeof why), TR_ERR_INVALID);
    assert_non_null(strstr(why, "device"));
    d[0].on_device = 0;
    assert_int_equal(tr_safetensors_save(path, d, 2, NULL, NULL, why, sizeof why), TR_ERR_INVALID);
    assert_non_null(strstr(why, "two views are named 'a'"));
    assert_int_equal(access(path, F_OK), -1); /* nothing written */
  }
}

/* Every mismatch listed, and the views untouched. */
static void test_mismatch_list(void **state) {
  char path[400], why[600];
  float w2[6], b3[3], x[1];
  hk_tensor v[3] = { { "w", w2, 6, 0 }, { "b", b3, 3, 0 }, { "x", x, 1, 0 } };
  tr_safetensors_shape sh[3] = { { 2, { 3, 2 } }, { 1, { 3 } }, { 1, { 1 } } };
  (void)state;
  path_of(path, sizeof path, "mm.safetensors");
  fill(0);
  assert_int_equal(tr_safetensors_save(path, V, 4, SH, NULL, why, sizeof why), TR_OK);
  memset(w2, 0x7f, sizeof w2);
  assert_int_equal(tr_safetensors_load(path, v, 3, sh, NULL, why, sizeof why), TR_ERR_MISMATCH);
  assert_non_null(strstr(why, "5 mismatches"));
  assert_non_null(strstr(why, "'w' is [2, 3] in the file, [3, 2] in the model"));
  assert_non_null(strstr(why, "'b' is [2] in the file, [3] in the model"));
  assert_non_null(strstr(why, "'x' is not in the file"));
  assert_non_null(strstr(why, "'emb.\xc3\xbc \"q\"' is in the file, not in the model"));
  assert_non_null(strstr(why, "'s' is in the file, not in the model"));
  assert_true(w2[0] != W[0]); /* nothing loaded */
  assert_int_equal(tr_safetensors_load(path, v, 3, NULL, NULL, why, sizeof why), TR_ERR_MISMATCH);
  assert_non_null(strstr(why, "'b' is [2] in the file, 3 elements in the model"));
}

/* A file from a header and data_len bytes of data (zeros). */
static size_t build(unsigned char *out, const char *hdr, size_t data_len) {
  size_t n = strlen(hdr);
  int k;
  for (k = 0; k < 8; k++) out[k] = (unsigned char)((uint64_t)n >> (8 * k));
  memcpy(out + 8, hdr, n);
  memset(out + 8 + n, 0, data_len);
  return 8 + n + data_len;
}
static void bad(const char *hdr, size_t data_len, const char *says) {
  unsigned char buf[2048];
  char why[600];
  size_t n = build(buf, hdr, data_len);
  why[0] = 0;
  if (tr_safetensors_check(buf, n, why, sizeof why) != TR_ERR_FORMAT || !strstr(why, says)) {
    print_error("header %s: got '%s', wanted '%s'\n", hdr, why, says);
    fail();
  }
}
#define T1(name, shape, b, e) "\"" name "\":{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"
static void test_bad_files(void **state) {
  unsigned char buf[64];
  char why[600], path[400];
  size_t n;
  FILE *f;
  (void)state;
  /* the length: truncated, past the end, over the limit */
  assert_int_equal(tr_safetensors_check("\x02\0\0\0", 4, why, sizeof why), TR_ERR_FORMAT);
  assert_non_null(strstr(why, "truncated: 4 bytes"));
  n = build(buf, "{}", 0);
  buf[0] = 40;
  assert_int_equal(tr_safetensors_check(buf, n, why, sizeof why), TR_ERR_FORMAT);
  assert_non_null(strstr(why, "goes past the end of the file"));
  buf[0] = 0; buf[5] = 1; /* 2^40 */
  assert_int_equal(tr_safetensors_check(buf, n, why, sizeof why), TR_ERR_FORMAT);
  assert_non_null(strstr(why, "over the format's limit of 100000000"));
  /* the byte ranges */
  bad("{" T1("a", "[2]", 0, 8) "}", 4, "past the 4 bytes of data");
  bad("{" T1("a", "[2]", 0, 8) "," T1("b", "[2]", 4, 12) "}", 12, "overlapping");
  bad("{" T1("a", "[2]", 0, 8) "," T1("b", "[2]", 12, 20) "}", 20, "a gap");
  bad("{" T1("a", "[2]", 4, 12) "}", 12, "not 0");
  bad("{" T1("a", "[2]", 8, 0) "}", 8, "end before begin");
  bad("{" T1("a", "[2]", 0, 8) "}", 12, "bytes no tensor covers");
  bad("{" T1("a", "[3]", 0, 8) "}", 8, "do not hold its shape's elements");
  bad("{" T1("a", "[4611686018427387904,4]", 0, 8) "}", 8, "overflows");
  /* the header */
  bad("{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "dtype F16: this reader loads F32 only");
  bad("{" T1("a", "[2]", 0, 8) "," T1("a", "[2]", 8, 16) "}", 16, "\"a\" is given twice");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],}}", 8, "not valid");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "not valid");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "has no data_offsets");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "non-negative integer");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "not an integer");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "leading zero");
  bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, "two integers");
  bad("{\"__metadata__\":{\"step\":7}}", 0, "not a string");
  bad("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "the key \"k\" twice");
  bad("{\"a\xff\":{}}", 0, "not UTF-8");
  bad("{\"a\\u0000\":{}}", 0, "NUL");
  bad("{\"a\\ud800\":{}}", 0, "lone surrogate");
  bad(" {}", 0, "does not start with '{'");
  bad("{} x", 0, "only spaces may pad it");
  bad("{\"a\":{\"x\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}", 0, "deeper than 64");
  /* valid: any order of entries and fields, unknown fields, padding, empty and scalar tensors, escapes */
  n = build(buf, "{}", 0);
  assert_int_equal(tr_safetensors_check(buf, n, why, sizeof why), TR_OK);
  {
    unsigned char big[512];
    const char *ok = "{\"b\\u00fc\":{\"data_offsets\":[8,12],\"dtype\":\"F32\",\"shape\":[],\"x\":{\"y\":[1.5e3,true,null,\"z\"]}},"
                     "\"__metadata__\":null," T1("a", "[1,2]", 0, 8) "," T1("e", "[0,3]", 12, 12) "}      ";
    n = build(big, ok, 12);
    assert_int_equal(tr_safetensors_check(big, n, why, sizeof why), TR_OK);
  }
  /* through a file: the path named */
  path_of(path, sizeof path, "short.safetensors");
  f = fopen(path, "wb");
  assert_non_null(f);
  fwrite("\x10\0\0\0\0\0\0\0{", 1, 9, f);
  fclose(f);
  assert_int_equal(tr_safetensors_load(path, V, 1, NULL, NULL, why, sizeof why), TR_ERR_FORMAT);
  assert_non_null(strstr(why, "short.safetensors"));
  assert_non_null(strstr(why, "past the end"));
}

/* ---- model_checkpoint(save_safetensors=true) and a pretrained start, in tr_fit ----------------------- */
static float P[8], G[8];
static const tr_tensor TT[2] = { { "w", 0, 6 }, { "b", 6, 2 } };
static const double SCRIPT[] = { 5, 3, 4, 1, 2 };
static tr_trainer g_t;
static int fwd(void *u, void *batch, int training, double *loss) {
  (void)u; (void)batch;
  *loss = training ? P[0] * P[0] : SCRIPT[g_t.ctx.epoch];
  return 0;
}
static int bwd(void *u, void *batch) { (void)u; (void)batch; G[0] += 2 * P[0]; G[7] += 1; return 0; }
static int64_t count1(void *u) { (void)u; return 1; }
static int get1(void *u, int64_t i, void **b) { (void)u; (void)i; *b = NULL; return 0; }
static void init_trainer(void) {
  tr_desc d;
  int i;
  for (i = 0; i < 8; i++) P[i] = (float)i + 1;
  memset(&d, 0, sizeof d);
  d.model.params = P; d.model.grads = G; d.model.n_params = 8; d.model.tensors = TT; d.model.n_tensors = 2;
  d.model.forward = fwd; d.model.backward = bwd;
  d.optim.kind = TR_OPTIM_SGD;
  d.optim.lr = 0.1;
  d.log = stderr;
  assert_int_equal(tr_init(&g_t, &d), TR_OK);
}
static int exists(const char *dir, const char *name) {
  char p[600];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", dir, name);
  return lstat(p, &st) == 0;
}
static void test_mc_sidecars(void **state) {
  char dir[400], p[600], why[600], got[16];
  tr_data data;
  tr_config c;
  hk_handle h;
  FILE *f;
  float w[6], b[2];
  hk_tensor v[2] = { { "w", w, 6, 0 }, { "b", b, 2, 0 } };
  tr_safetensors_meta m;
  (void)state;
  path_of(dir, sizeof dir, "mc");
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/epoch=2.safetensors", dir); /* a file of yours where a sidecar would go */
  f = fopen(p, "w");
  assert_non_null(f);
  fputs("mine", f);
  fclose(f);
  init_trainer();
  assert_int_equal(tr_model_checkpoint(g_t.reg, &(tr_model_checkpoint_desc){ .dirpath = dir, .monitor = "val/loss", .save_top_k = 2,
                   .filename = "{epoch}", .save_last = TR_SAVE_LAST_YES, .save_safetensors = 1 }, &h), TR_OK);
  data = test_data(count1, get1, NULL);
  c = test_config(&data, &data, 5);
  assert_int_equal(tr_fit(&g_t, &c), TR_OK);
  /* kept: epochs 3 and 4 (1 and 2) with their sidecars, last with its; evicted 0, 1, 2 with theirs; yours as it was */
  assert_true(exists(dir, "epoch=3.ckpt") && exists(dir, "epoch=3.safetensors"));
  assert_true(exists(dir, "epoch=4.ckpt") && exists(dir, "epoch=4.safetensors"));
  assert_true(exists(dir, "last.ckpt") && exists(dir, "last.safetensors"));
  assert_false(exists(dir, "epoch=0.ckpt") || exists(dir, "epoch=0.safetensors"));
  assert_false(exists(dir, "epoch=1.ckpt") || exists(dir, "epoch=1.safetensors"));
  assert_false(exists(dir, "epoch=2.ckpt"));
  f = fopen(p, "r");
  assert_non_null(f);
  memset(got, 0, sizeof got);
  assert_int_equal(fread(got, 1, sizeof got - 1, f), 4);
  fclose(f);
  assert_string_equal(got, "mine");
  /* last.safetensors holds the final parameters and says when */
  snprintf(p, sizeof p, "%s/last.safetensors", dir);
  assert_int_equal(tr_safetensors_load(p, v, 2, NULL, &m, why, sizeof why), TR_OK);
  assert_memory_equal(w, P, sizeof w);
  assert_memory_equal(b, P + 6, sizeof b);
  assert_string_equal(tr_safetensors_meta_get(&m, "step"), "5");
  assert_string_equal(tr_safetensors_meta_get(&m, "epoch"), "4"); /* the save point's, as in the names */
  assert_string_equal(tr_safetensors_meta_get(&m, "checkpoint"), "last.ckpt");
  tr_safetensors_meta_free(&m);
  tr_free(&g_t);
  /* a pretrained start: a new trainer's views filled from the file by name */
  init_trainer();
  assert_int_equal(tr_safetensors_load(p, g_t.ctx.params, g_t.ctx.n_tensors, NULL, NULL, why, sizeof why), TR_OK);
  assert_memory_equal(P, w, sizeof w);
  assert_memory_equal(P + 6, b, sizeof b);
  tr_free(&g_t);
}

static int for_python(int argc, char **argv) {
  char path[4200], why[600];
  tr_safetensors_meta m;
  static const char *const meta[] = { "step", "7", "epoch", "2", NULL };
  if (!strcmp(argv[1], "--write") && argc == 3) {
    snprintf(path, sizeof path, "%s/c.safetensors", argv[2]);
    fill(0);
    if (tr_safetensors_save(path, V, 5, SH, meta, why, sizeof why)) { fprintf(stderr, "%s\n", why); return 1; }
    return 0;
  }
  if (!strcmp(argv[1], "--read") && argc == 3) {
    memset(W, 0, sizeof W);
    if (tr_safetensors_load(argv[2], V, 5, SH, &m, why, sizeof why)) { fprintf(stderr, "%s\n", why); return 1; }
    if (!same(1) || !tr_safetensors_meta_get(&m, "step") || strcmp(tr_safetensors_meta_get(&m, "step"), "9") ||
        !tr_safetensors_meta_get(&m, "epoch") || strcmp(tr_safetensors_meta_get(&m, "epoch"), "3")) {
      fprintf(stderr, "the values or the metadata Python wrote differ\n");
      tr_safetensors_meta_free(&m);
      return 1;
    }
    tr_safetensors_meta_free(&m);
    printf("test_safetensors: what Python wrote loads equal (5 tensors, metadata step 9, epoch 3)\n");
    return 0;
  }
  fprintf(stderr, "usage: %s [--write DIR | --read FILE]\n", argv[0]);
  return 2;
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_round_trip),
    cmocka_unit_test(test_mismatch_list),
    cmocka_unit_test(test_bad_files),
    cmocka_unit_test(test_mc_sidecars),
  };
  if (argc > 1) return for_python(argc, argv);
  return run_tests_in_dir(tests, "test_safetensors", g_root);
}
