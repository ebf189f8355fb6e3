/* tests/fuzz_cbstate.c - libFuzzer target for the standard callbacks' load_state (issue 18).

   Every stateful standard callback (early_stopping, model_checkpoint, timer, nan_guard, ema,
   lr_finder) is registered on a fresh trainer; the input's first byte picks one, the rest is the
   state handed to it through hk_state_load. Then:
     - refused: the callback's state is exactly what it was (its saved bytes are unchanged), and the
       registry's message says why;
     - accepted: a save round trip is stable (save, load, save gives the same bytes) and a short fit
       runs from the loaded state (2 epochs of 4 batches, a validation each) without a crash, an
       overflow or a leak (the build has ASan and UBSan, float-cast-overflow included); it may fail
       cleanly (a refused combination is an error value, not a crash).
   The fit runs in a private directory made at start (model_checkpoint writes and removes files in
   "fz/" there), and only when every path the loaded model_checkpoint state lists lies in "fz/": which
   files a loaded state may remove is a separate matter (issue 18, item 1), not this target's.

   Seeds: with FUZZ_CBSTATE_SEED_DIR set, LLVMFuzzerInitialize writes every callback's state after a
   fit into that directory (one file per callback: its selector byte, then its state).
   Run:  FUZZ_CBSTATE_SEED_DIR=corpus ./fuzz_cbstate corpus -runs=100000 */
#define _POSIX_C_SOURCE 200809L
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_CB 6
static float P[2], G[2];
static double clk;                      /* the timer's clock: +1 s per training forward */
static FILE *devnull;
static tr_trainer t;
static hk_handle h[N_CB];
static char key[N_CB][300];

static int fwd(void *u, void *b, int training, double *loss) {
  (void)u; (void)b;
  if (training) clk += 1;
  *loss = 1.0 + (double)P[0] * P[0] + (training ? 0 : 0.01 * clk);
  return 0;
}
static int bwd(void *u, void *b) { (void)u; (void)b; G[0] += 2 * P[0]; G[1] += 0.5f; return 0; }
static int64_t count4(void *u) { (void)u; return 4; }
static int get(void *u, int64_t i, void **b) { (void)u; (void)i; *b = NULL; return 0; }
static double now(void *u) { (void)u; return clk; }

/* A trainer with every stateful standard callback; h[i] and key[i] name them. */
static void make(void) {
  tr_desc d = { .model = { .params = P, .grads = G, .n_params = 2, .forward = fwd, .backward = bwd },
                .optim = { .kind = TR_OPTIM_SGD, .lr = 0.1 }, .log = devnull };
  int i;
  P[0] = 0.5f; P[1] = -0.25f;
  G[0] = G[1] = 0;
  clk = 0;
  if (tr_init(&t, &d) != TR_OK ||
      tr_early_stopping(t.reg, &(tr_early_stopping_desc){ .monitor = "val/loss", .patience = 2, .verbose = 1 }, &h[0]) ||
      tr_model_checkpoint(t.reg, &(tr_model_checkpoint_desc){ .dirpath = "fz", .monitor = "val/loss", .save_top_k = 2,
                          .save_last = TR_SAVE_LAST_LINK, .verbose = 1 }, &h[1]) ||
      tr_timer(t.reg, &(tr_timer_desc){ .duration = "00:00:00:06", .clock = now, .verbose = 1 }, &h[2]) ||
      tr_nan_guard(t.reg, &(tr_nan_guard_desc){ .action = TR_NAN_SKIP_STEP }, &h[3]) ||
      tr_ema(t.reg, &(tr_ema_desc){ .decay = 0.5 }, &h[4]) ||
      tr_lr_finder(t.reg, &(tr_lr_finder_desc){ .num_training_steps = 14, .verbose = 1 }, &h[5])) {
    fprintf(stderr, "fuzz_cbstate: setup: %s\n", tr_error(&t));
    abort();
  }
  for (i = 0; i < N_CB; i++) snprintf(key[i], sizeof key[i], "%s", hk_callback_get(t.reg, h[i])->name);
}

static tr_err fit(void) {
  tr_data d = { .count = count4, .get = get };
  /* an error is fine; a crash, an overflow or a leak is not */
  tr_err e = tr_fit(&t, &(tr_config){ .train = &d, .val = &d, .max_epochs = 2, .no_sigint = 1 });
  if (getenv("FUZZ_CBSTATE_VERBOSE")) fprintf(stderr, "fit: %s after %lld steps%s%s\n", tr_err_name(e), (long long)t.global_step,
                                              e ? ": " : "", e ? tr_error(&t) : "");
  return e;
}

/* The saved bytes of callback `which` (a fresh hk_bytes; empty when it could not save). */
typedef struct grab { const char *key; hk_bytes b; } grab;
static hk_err grab_sink(const char *k, const void *data, size_t len, void *user) {
  grab *g = (grab *)user;
  if (!strcmp(k, g->key) && hk_bytes_put(&g->b, data, len)) return HK_ERR_NOMEM;
  return HK_OK;
}
static hk_bytes saved(int which) {
  grab g;
  memset(&g, 0, sizeof g);
  g.key = key[which];
  if (hk_state_save(t.reg, grab_sink, &g) != HK_OK) { hk_bytes_free(&g.b); g.b.failed = 1; }
  return g.b;
}
static int same(const hk_bytes *a, const hk_bytes *b) {
  return !a->failed && !b->failed && a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

static int inside(const char *p) { return !p[0] || (!strncmp(p, "fz/", 3) && !strstr(p, "..")); }
static int paths_inside(void) {
  const tr_model_checkpoint_state *s = tr_model_checkpoint_get(t.reg, h[1]);
  int i;
  if (!inside(s->best_model_path) || !inside(s->kth_best_model_path) || !inside(s->last_model_path)) return 0;
  for (i = 0; i < s->n_best_k; i++) if (!inside(s->best_k_paths[i])) return 0;
  return 1;
}
static void clean(void) {
  DIR *d = opendir("fz");
  struct dirent *e;
  char p[600];
  if (!d) return;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' && snprintf(p, sizeof p, "fz/%s", e->d_name) < (int)sizeof p) (void)unlink(p);
  closedir(d);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  const char *seeds = getenv("FUZZ_CBSTATE_SEED_DIR");
  char dir[] = "/tmp/fuzz_cbstate.XXXXXX", seed_dir[1024] = "";
  int i;
  (void)argc;
  (void)argv;
  if (seeds && seeds[0] != '/') { /* relative to where we started */
    if (!getcwd(seed_dir, sizeof seed_dir - 300)) abort();
    strcat(seed_dir, "/");
  }
  if (seeds) strncat(seed_dir, seeds, 299);
  devnull = fopen("/dev/null", "w");
  if (!devnull || !mkdtemp(dir) || chdir(dir) != 0) { perror("fuzz_cbstate: private directory"); abort(); }
  if (seeds) { /* every callback's state after a fit of 2 epochs (early stopping and the timer stop it) */
    make();
    if (fit() != TR_OK || t.global_step == 0) { fprintf(stderr, "fuzz_cbstate: the seed fit failed: %s\n", tr_error(&t)); abort(); }
    for (i = 0; i < N_CB; i++) {
      char path[1400];
      hk_bytes b = saved(i);
      unsigned char sel = (unsigned char)i;
      FILE *f;
      snprintf(path, sizeof path, "%s/seed-%d", seed_dir, i);
      f = fopen(path, "wb");
      if (!f || fwrite(&sel, 1, 1, f) != 1 || (b.len && fwrite(b.data, 1, b.len, f) != b.len) || fclose(f) != 0)
        fprintf(stderr, "fuzz_cbstate: cannot write %s\n", path);
      hk_bytes_free(&b);
    }
    tr_free(&t);
    clean();
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int which;
  hk_bytes before, after, again;
  hk_err e;
  if (size < 1) return 0;
  which = data[0] % N_CB;
  make();
  before = saved(which);
  e = hk_state_load(t.reg, key[which], data + 1, size - 1);
  after = saved(which);
  if (e != HK_OK) {
    /* refused: nothing changed, and the message says which callback refused */
    if (e != HK_ERR_STATE || !same(&before, &after) || !strstr(hk_last_error(t.reg), "rejected its saved state")) {
      fprintf(stderr, "fuzz_cbstate: %s: refused (%s) but changed: %s\n", key[which], hk_err_name(e), hk_last_error(t.reg));
      abort();
    }
  } else {
    /* accepted: what it saves now loads back and saves the same again */
    if (after.failed || hk_state_load(t.reg, key[which], after.data, after.len) != HK_OK) {
      fprintf(stderr, "fuzz_cbstate: %s: its own saved state was refused: %s\n", key[which], hk_last_error(t.reg));
      abort();
    }
    again = saved(which);
    if (!same(&after, &again)) { fprintf(stderr, "fuzz_cbstate: %s: save, load, save differs\n", key[which]); abort(); }
    hk_bytes_free(&again);
    if (paths_inside()) (void)fit();
    clean();
  }
  hk_bytes_free(&before);
  hk_bytes_free(&after);
  tr_free(&t);
  return 0;
}
