/* tests/fuzz_ckpt.c - libFuzzer target for train.h's checkpoint loader (tr_load_mem).

   The loader must never crash, never read out of bounds, and never change the trainer unless the
   whole input is valid. Checksums would stop the fuzzer at the first section, so for inputs of
   even length the harness first recomputes every section checksum it can find (the odd-length
   inputs exercise the checksum check itself); the structure behind the checksums gets fuzzed too.

   Seeds: with FUZZ_CKPT_SEED_DIR set, LLVMFuzzerInitialize writes valid checkpoints of the trainer
   below into that directory (one with, one without an accumulation window in progress).
   Each input is also given to tr_run_continue as a run block (train/run.h's parser of TR_RUN_KEY).
   Run:  FUZZ_CKPT_SEED_DIR=corpus ./fuzz_ckpt corpus -runs=100000 */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float P[9], G[9];
static const tr_tensor T[3] = { { "w", 0, 4 }, { "b", 4, 1 }, { "head", 5, 4 } };
static tr_trainer t;
static hk_registry *reg;
static unsigned char state_blob[64];
static size_t state_len;

static int fwd(void *u, void *b, int training, double *loss) { (void)u; (void)b; (void)training; *loss = P[0]; return 0; }
static int bwd(void *u, void *b) { (void)u; (void)b; G[0] += 1; return 0; }

/* A stateful hook that checks what it loads: a length byte, then that many bytes (at most 64). */
static int save_state(void *u, hk_bytes *out) {
  unsigned char n = (unsigned char)state_len;
  (void)u;
  return hk_bytes_put(out, &n, 1) || hk_bytes_put(out, state_blob, state_len);
}
static int load_state(void *u, hk_reader *in) {
  unsigned char n;
  (void)u;
  if (hk_read(in, &n, 1) || n > sizeof state_blob || hk_read(in, state_blob, n) || in->pos != in->len) return 1;
  state_len = n;
  return 0;
}
static void quiet(const char *m, void *u) { (void)m; (void)u; }

static uint64_t get(const unsigned char *p, int n) {
  uint64_t v = 0;
  while (n--) v = v << 8 | p[n];
  return v;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  tr_desc d;
  hk_desc hd;
  hk_callback cb;
  const char *dir = getenv("FUZZ_CKPT_SEED_DIR");
  (void)argc;
  (void)argv;
  memset(&hd, 0, sizeof hd);
  hd.log = quiet;
  reg = hk_create(&hd);
  memset(&cb, 0, sizeof cb);
  cb.name = "state";
  cb.save_state = save_state;
  cb.load_state = load_state;
  hk_add_callback(reg, &cb, NULL, NULL);
  memset(&d, 0, sizeof d);
  d.model.params = P;
  d.model.grads = G;
  d.model.n_params = 9;
  d.model.tensors = T;
  d.model.n_tensors = 3;
  d.model.forward = fwd;
  d.model.backward = bwd;
  d.reg = reg;
  d.log = fopen("/dev/null", "w");
  if (tr_init(&t, &d) != TR_OK) abort();
  if (dir) {
    char path[1024];
    int i;
    for (i = 0; i < 9; i++) P[i] = (float)i * 0.5f;
    state_len = 3;
    memcpy(state_blob, "abc", 3);
    snprintf(path, sizeof path, "%s/seed-plain.ckpt", dir);
    if (tr_save(&t, path) != TR_OK) fprintf(stderr, "fuzz_ckpt: %s\n", tr_error(&t));
    t.tr__accum_pos = 1; /* a checkpoint with a GRAD section (private field, set for the seed only) */
    t.tr__accum_n = 1;
    snprintf(path, sizeof path, "%s/seed-window.ckpt", dir);
    if (tr_save(&t, path) != TR_OK) fprintf(stderr, "fuzz_ckpt: %s\n", tr_error(&t));
    t.tr__accum_pos = t.tr__accum_n = 0;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char *buf = (unsigned char *)malloc(size ? size : 1);
  float before[9];
  int64_t step_before = t.global_step;
  tr_err e;
  if (!buf) return 0;
  memcpy(buf, data, size);
  if (size % 2 == 0) { /* recompute the checksums of every section that fits */
    size_t pos = 16;
    uint32_t version = size >= 12 ? (uint32_t)get(buf + 8, 4) : 0; /* (the file's own format's checksums) */
    while (size >= 20 && pos <= size - 20) {
      uint64_t n = get(buf + pos + 4, 8), h;
      if (n > size - pos - 20) break;
      h = tr__section_sum(version, buf + pos, buf + pos + 12, (size_t)n);
      tr__le(buf + pos + 12 + n, h, 8);
      pos += 20 + (size_t)n;
    }
  }
  /* the run's block (read before setup, not by the loader): any bytes are a block or TR_ERR_FORMAT */
  e = tr_run_continue(reg, buf, size);
  if (e != TR_OK && e != TR_ERR_FORMAT) abort();
  (void)tr_run_continue(reg, NULL, 0);
  memcpy(before, P, sizeof before);
  e = tr_load_mem(&t, buf, size);
  if (e != TR_OK) {
    /* an error leaves the trainer as it was, and says why */
    if (memcmp(before, P, sizeof before) != 0 || t.global_step != step_before || !tr_error(&t)[0]) abort();
  } else if (t.epoch < 0 || t.global_step < 0 || t.epoch_batch < 0) abort();
  free(buf);
  return 0;
}
