/* tests/loop_svg.c - docs/loop.svg, the README's picture: where each hooks.h event and each call of a loop of
   your own (tr_run_begin, tr_run_next, tr_run_update, tr_run_end) sits, in a step loop and in an epoch loop
   with validation.

     loop_svg OUT.svg SCRATCH_DIR    run both loops, record every event, draw them (SCRATCH_DIR: a checkpoint)

   Nothing in the picture is typed in: both loops run for real through train.h's run layer with a hook on every
   event of HK_EVENTS, and each event is drawn under the call that fired it, in the order it fired. The loop
   fires, as a loop of yours would, the events between on_train_batch_start and on_after_optimizer_step of the
   list; a hook asks for a checkpoint after the first step, to show where it is written. The events neither
   run fires are listed below the loops. make loop-svg writes docs/loop.svg; make test-loop-svg fails when the
   committed picture is not what the event list and the run layer draw now. */
#define HOOKS_IMPLEMENTATION
#define TRAIN_IMPLEMENTATION
#include "train.h"

enum { MAX_BLOCKS = 16, MAX_ROWS = 32, W = 860, COL = 410, ROW = 17, HEAD = 22 };
typedef struct block { const char *call, *note; int loop; int ev[MAX_ROWS]; int n; } block;
static block g_blocks[2][MAX_BLOCKS];
static int g_nb[2], g_col, g_fired[HK_EVENT_COUNT];
static float g_w[2], g_g[2];

static void open_block(const char *call, const char *note, int loop) {
  block *b;
  if (g_nb[g_col] == MAX_BLOCKS) { fprintf(stderr, "loop_svg: more than %d calls: raise MAX_BLOCKS\n", MAX_BLOCKS); exit(2); }
  b = &g_blocks[g_col][g_nb[g_col]++];
  b->call = call, b->note = note, b->loop = loop, b->n = 0;
}
static hk_signal record(hk_ctx *ctx, void *user) {
  block *b = &g_blocks[g_col][g_nb[g_col] - 1];
  int e = (int)(intptr_t)user;
  (void)ctx;
  if (b->n == MAX_ROWS) { fprintf(stderr, "loop_svg: more than %d events in one call: raise MAX_ROWS\n", MAX_ROWS); exit(2); }
  b->ev[b->n++] = e;
  g_fired[e] = 1;
  return HK_CONTINUE;
}
static hk_signal ask_checkpoint(hk_ctx *ctx, void *user) {
  (void)user;
  if (ctx->global_step == 1) hk_request(ctx, HK_REQUEST_CHECKPOINT);
  return HK_CONTINUE;
}
static int save_model(void *u, FILE *f) { return (void)u, fwrite(g_w, sizeof g_w, 1, f) != 1; }
static int load_model(void *u, FILE *f) { return (void)u, fread(g_w, sizeof g_w, 1, f) != 1; }

/* One loop of the README's shape: one training batch, then a validation of one batch (and the epoch's end). */
static void run(int epochs, const char *ckpt) {
  hk_registry *reg = hk_create(NULL);
  hk_tensor pv[] = { { "w", g_w, 2, 0 } }, gv[] = { { "w", g_g, 2, 0 } };
  tr_run_desc d = { .lr = 0.1, .val_batches = 1, .log_every_n_steps = 1, TR_VIEWS(pv, gv), .save_model = save_model,
                    .load_model = load_model, .save_to = ckpt, .no_signals = 1 };
  hk_ctx *ctx;
  tr_err err;
  int e, what;
  if (epochs) d.max_epochs = 1, d.train_batches = 1;
  else d.epochs = TR_NO, d.max_steps = 1, d.val_every_n_steps = 1;
  for (e = 0; e < HK_EVENT_COUNT; e++) hk_on(reg, e, record, (void *)(intptr_t)e, NULL, NULL);
  hk_on(reg, HK_ON_TRAIN_BATCH_END, ask_checkpoint, NULL, NULL, NULL);
  open_block("hk_ctx *ctx = tr_run_begin(reg, &desc, resume)", "the run starts (or resumes)", 0);
  ctx = tr_run_begin(reg, &d, NULL);
  for (;;) {
    open_block("what = tr_run_next(reg)", NULL, 1);
    what = tr_run_next(reg);
    g_blocks[g_col][g_nb[g_col] - 1].note = what == TR_RUN_TRAIN ? "returns TR_RUN_TRAIN" : what == TR_RUN_VAL_BATCH
                                            ? "returns TR_RUN_VAL_BATCH: set ctx->loss" : "returns 0: the loop ends";
    if (!what) break;
    ctx->loss = 1;
    if (what == TR_RUN_VAL_BATCH) continue;
    open_block("HK_FIRE(reg, event, ctx)", "your loop's own sites", 2);
    for (e = HK_ON_TRAIN_BATCH_START + 1; e < HK_ON_AFTER_OPTIMIZER_STEP; e++) HK_FIRE(reg, e, ctx);
    open_block("if (tr_run_update(reg)) step()", "1: the optimizer steps now", 1);
    tr_run_update(reg);
  }
  open_block("tr_err e = tr_run_end(reg)", "the run's outcome", 0);
  err = tr_run_end(reg);
  if (err) { fprintf(stderr, "loop_svg: the %s loop failed: %s\n", epochs ? "epoch" : "step", tr_err_name(err)); exit(1); }
  hk_destroy(reg);
}

static void text(FILE *f, const char *s) { /* XML text */
  for (; *s; s++)
    if (*s == '&') fputs("&amp;", f);
    else if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else fputc(*s, f);
}
static const char *colour(const char *event) { /* by what the event is about, from its name */
  return strstr(event, "validation") ? "#2e7d32" : strstr(event, "checkpoint") ? "#6a1b9a" : !strcmp(event, "on_log") ? "#8d4b00" : "#1b1b1b";
}
static int draw(FILE *f, int c, int x, int y0) {
  int y = y0, i, k, top = 0, bottom = 0;
  for (i = 0; i < g_nb[c]; i++) {
    const block *b = &g_blocks[c][i];
    int h = HEAD + ROW * (b->n + !!b->note) + 6;
    const char *tint = b->loop == 2 ? "#fff0db" : "#e3eefa", *edge = b->loop == 2 ? "#e07b00" : "#2f6db5";
    fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='%s'/>\n", x + 26, y, COL - 26, HEAD, tint);
    fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' rx='4' fill='none' stroke='%s' stroke-width='1.5'/>\n",
            x + 26, y, COL - 26, h, edge);
    fprintf(f, "<text x='%d' y='%d' class='call'>", x + 34, y + 15);
    text(f, b->call);
    fprintf(f, "</text>\n");
    if (b->note) {
      fprintf(f, "<text x='%d' y='%d' class='note'>", x + 48, y + HEAD + 10);
      text(f, b->note);
      fprintf(f, "</text>\n");
    }
    for (k = 0; k < b->n; k++) {
      const char *name = hk_event_name(NULL, b->ev[k]);
      fprintf(f, "<text x='%d' y='%d' class='ev' fill='%s'>%s</text>\n", x + 48, y + HEAD + ROW * (k + !!b->note) + 11,
              colour(name), name);
    }
    if (b->loop && !top) top = y;
    if (b->loop) bottom = y + h;
    y += h + 8;
  }
  /* the loop: from the first tr_run_next to the last call before tr_run_end, back to the top */
  fprintf(f, "<path d='M%d %d H%d V%d H%d' fill='none' stroke='#2f6db5' stroke-width='1.5' marker-end='url(#arrow)'/>\n",
          x + 24, bottom - 10, x + 10, top + 10, x + 22);
  fprintf(f, "<text transform='translate(%d %d) rotate(-90)' class='note' text-anchor='middle'>until tr_run_next returns 0</text>\n",
          x + 7, (top + bottom) / 2);
  return y;
}

int main(int argc, char **argv) {
  static const char *titles[2] = { "a step loop (epochs = TR_NO, val_every_n_steps = 1)",
                                   "an epoch loop with validation at each epoch's end" };
  char ckpt[1024], others[2048] = "", family[64] = "", foot[8][160];
  int c, e, y, h = 0, n = 0, nfoot = 0;
  FILE *f;
  if (argc != 3) { fprintf(stderr, "usage: loop_svg OUT.svg SCRATCH_DIR\n"); return 2; }
  snprintf(ckpt, sizeof ckpt, "%s/loop_svg.ckpt", argv[2]);
  for (c = 0; c < 2; c++) g_col = c, run(c, ckpt);
  for (e = 0; e < HK_EVENT_COUNT; e++) { /* the rest; a family of two or more (on_test_*) in one word */
    const char *name = hk_event_name(NULL, e);
    int k, len = (int)(strchr(name + 3, '_') ? strchr(name + 3, '_') - name : (int)strlen(name)), kin = 0;
    char fam[64];
    if (g_fired[e]) continue;
    snprintf(fam, sizeof fam, "%.*s_*", len, name);
    if (!strcmp(fam, family)) continue;
    for (k = e; k < HK_EVENT_COUNT; k++) kin += !g_fired[k] && !strncmp(hk_event_name(NULL, k), name, (size_t)len + 1);
    snprintf(others + strlen(others), sizeof others - strlen(others), "%s%s", n++ ? ", " : "", kin > 1 ? fam : name);
    snprintf(family, sizeof family, "%s", fam);
  }
  for (c = 0; c < 2; c++) {
    int rows = 0, i;
    for (i = 0; i < g_nb[c]; i++) rows += HEAD + ROW * (g_blocks[c][i].n + !!g_blocks[c][i].note) + 14;
    if (rows > h) h = rows;
  }
  { /* the events neither run fired, on lines of at most 110 characters (names need no XML escape) */
    const char *p = others, *line = "not in these runs: ";
    while (*p && nfoot < 8) {
      const char *end = p, *comma;
      while ((comma = strstr(end, ", ")) && comma - p + (int)strlen(line) < 108) end = comma + 2;
      if (!comma && (int)strlen(p) + (int)strlen(line) < 110) end = p + strlen(p);
      if (end == p) end = comma ? comma + 2 : p + strlen(p);
      snprintf(foot[nfoot++], sizeof foot[0], "%s%.*s", line, (int)(end - p), p);
      line = "", p = end;
    }
  }
  f = fopen(argv[1], "w");
  if (!f) { perror(argv[1]); return 1; }
  fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' viewBox='0 0 %d %d' "
             "font-family='DejaVu Sans Mono, Menlo, Consolas, monospace'>\n", W, h + 88 + 16 * nfoot, W, h + 88 + 16 * nfoot);
  fprintf(f, "<!-- GENERATED by make loop-svg (tests/loop_svg.c) from hooks.h's HK_EVENTS and a real run of train.h's run "
             "layer: do not edit -->\n");
  fprintf(f, "<defs><marker id='arrow' viewBox='0 0 8 8' refX='7' refY='4' markerWidth='7' markerHeight='7' orient='auto'>"
             "<path d='M0 0 L8 4 L0 8 z' fill='#2f6db5'/></marker></defs>\n");
  fprintf(f, "<style>.call{font-size:12px;font-weight:bold;fill:#10305a}.note{font-size:11px;fill:#666;font-style:italic}"
             ".ev{font-size:12px}.title{font-size:13px;font-weight:bold;fill:#1b1b1b}.foot{font-size:11px;fill:#333}</style>\n");
  fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n");
  for (c = 0; c < 2; c++) {
    int x = 10 + c * (COL + 20);
    fprintf(f, "<text x='%d' y='22' class='title'>", x + 26);
    text(f, titles[c]);
    fprintf(f, "</text>\n");
    y = draw(f, c, x, 34);
    (void)y;
  }
  y = h + 44;
  fprintf(f, "<text x='36' y='%d' class='foot'><tspan fill='#2f6db5' font-weight='bold'>blue</tspan>: the run layer's "
             "calls and the events they fire;  <tspan fill='#e07b00' font-weight='bold'>orange</tspan>: the events "
             "your loop fires</text>\n", y);
  fprintf(f, "<text x='36' y='%d' class='foot'>a checkpoint a hook asked for is written in tr_run_next "
             "(<tspan fill='#6a1b9a'>purple</tspan>); records go out at <tspan fill='#8d4b00'>on_log</tspan></text>\n", y + 18);
  for (c = 0; c < nfoot; c++) /* later lines under the first's names */
    fprintf(f, "<text x='%d' y='%d' class='foot'>%s</text>\n", c ? 161 : 36, y + 36 + 16 * c, foot[c]);
  fprintf(f, "</svg>\n");
  if (fclose(f)) { perror(argv[1]); return 1; }
  return 0;
}
