/* tests/fuzz_safetensors.c - libFuzzer target for train.h's safetensors reader (tr_safetensors_check: the
   header's length, its JSON, every entry, the byte ranges). It must never crash, read out of bounds or leak,
   whatever the bytes. Seeds: with FUZZ_ST_SEED_DIR set, LLVMFuzzerInitialize writes a valid file there.
   Run:  FUZZ_ST_SEED_DIR=corpus ./fuzz_safetensors corpus -runs=100000 */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  static float w[6] = { 1, 2, 3, 4, 5, 6 }, b[2] = { -1, 0.5f };
  const hk_tensor v[2] = { { "w", w, 6, 0 }, { "b\xc3\xbc\"", b, 2, 0 } };
  const tr_safetensors_shape sh[2] = { { 2, { 2, 3 } }, { 1, { 2 } } };
  static const char *const meta[] = { "step", "7", "epoch", "2", NULL };
  const char *dir = getenv("FUZZ_ST_SEED_DIR");
  char path[4200], why[300];
  (void)argc; (void)argv;
  if (dir) {
    snprintf(path, sizeof path, "%s/seed.safetensors", dir);
    if (tr_safetensors_save(path, v, 2, sh, meta, why, sizeof why)) fprintf(stderr, "seed: %s\n", why);
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char why[300];
  (void)tr_safetensors_check(data, size, why, sizeof why);
  return 0;
}
