/* train/loggers/progress_bar.h - progress_bar. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_PROGRESS_BAR_H /* part */
#define TRAIN_PROGRESS_BAR_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* progress_bar: tqdm's line, as Lightning's TQDMProgressBar draws it,
     Epoch 3:  45%|████▌     | 27/60 [00:01<00:01, 25.30it/s, loss=0.231, val/loss=0.187]
   with the latest training batch's loss and the last validation's metrics; a validation bar on the line
   below during evaluation. On a terminal redrawn in place at most every refresh_seconds, fitted to the
   width less one so it never wraps (fields dropped whole, never a number cut); elsewhere (a pipe, CI)
   complete lines, never \r or an escape code. Rank 0 draws; under a launcher, by where the launcher's own
   output goes. A closed pipe fails the run through on_exception where SIGPIPE would kill the process
   (other write errors lose the bar alone). Hooks print above it with tr_print. One bar per registry.
   The whole behaviour: docs/logging.md ("progress_bar", "The bar at 80 columns and in a step loop"). */
typedef enum tr_bar_mode { TR_BAR_AUTO = 0, TR_BAR_TTY, TR_BAR_LINES } tr_bar_mode;
#define TR_PROGRESS_BAR_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(C_ONLY,    FILE *,      out,             NULL,     NULL, "NULL = stdout (a spec: stream)") \
  X(SPEC_ONLY, CHOICE,      stream,          "stdout", "stdout|stderr", "where the bar goes (C: out)") \
  X(CHOICE,    tr_bar_mode, mode,            "auto",   "auto|tty|lines", "auto: in place on a terminal (isatty; under " \
    "mpirun: mpirun's own output), else lines") \
  X(DOUBLE,    double,      refresh_seconds, "0.1",    NULL, "terminal: the least time between redraws") \
  X(DOUBLE,    double,      line_seconds,    "10",     NULL, "lines: the least time between lines within an epoch") \
  X(INT,       int,         width,           "0",      NULL, "the line's width, up to 100000 (0: the terminal's, " \
    "$COLUMNS, else 80; lines: a 10-cell bar)") \
  X(BOOL,      int,         ascii,           "false",  NULL, "draw the bar in \" 123456789#\" instead of Unicode blocks")
typedef struct tr_progress_bar_desc { TR_PROGRESS_BAR_PARAMS(TR__FIELD) } tr_progress_bar_desc;
TRAIN_API tr_err tr_progress_bar(hk_registry *reg, const tr_progress_bar_desc *d, hk_handle *out);
/* tqdm's line for n of total (<= 0: unknown) after elapsed seconds into buf; width <= 0: a 10-cell bar,
   else fields dropped whole to fit; a desc over 64 bytes shows its start and "...". Returns the line's
   length (a part that does not fit in cap - 1 is left out whole). */
TRAIN_API size_t tr_bar_format(char *buf, size_t cap, const char *desc, int64_t n, int64_t total, double elapsed,
                               const char *postfix, int width, int ascii);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
#if defined(TR__POSIX) && !defined(SIGPIPE) /* hooks.h's implementation and the threads have it, mostly */
#  include <signal.h>
#endif
#if defined(TR__POSIX) && defined(SIGPIPE)
#  define TR__BAR_PIPE 1     /* a pipe's reader may go: its writes are made with SIGPIPE ignored */
#  if defined(SA_RESTART)    /* sigaction is declared (not by a strict -std=c99 <signal.h>) */
#    define TR__BAR_SIGACTION 1
#  endif
#endif
TR__C_BEGIN /* part */
/* -- the progress bar -- */
static size_t tr__clock_fmt(char *b, size_t cap, double s) { /* MM:SS, or H:MM:SS from an hour */
  long long t = s > 0 && s < 1e12 ? (long long)s : 0;
  return (size_t)(t >= 3600 ? snprintf(b, cap, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60)
                            : snprintf(b, cap, "%02lld:%02lld", t / 60, t % 60));
}

static size_t tr__utf8_width(const char *s) { size_t n = 0; for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80; return n; }
static int tr__utf8_width_n(const char *s, int len) { int n = 0, i; for (i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80; return n; }
#define TR__BAR_CELLS 10 /* the fewest cells a bar keeps while there is text to give up for them */
#define TR__BAR_DESC 64  /* a longer desc shows its start and "..." (the line keeps its count and times) */
/* The length of the first np bytes of a postfix less its last field (fields are separated by ", ") */
static int tr__bar_less(const char *postfix, int np) {
  while (np > 0 && !(np >= 2 && postfix[np - 2] == ',' && postfix[np - 1] == ' ')) np--;
  return np >= 2 ? np - 2 : 0;
}
/* initial: the count the bar started from (a resume), left out of the rate (tqdm's initial). Beyond the
   width, dropped whole: postfix fields (the last first), the rate, the times; then the bar shrinks. */
static size_t tr__bar_format(char *buf, size_t cap, const char *desc, int64_t n, int64_t initial, int64_t total,
                             double elapsed, const char *postfix, int width, int ascii) {
  static const char *const blocks[9] = { " ", "\xe2\x96\x8f", "\xe2\x96\x8e", "\xe2\x96\x8d", "\xe2\x96\x8c",
                                         "\xe2\x96\x8b", "\xe2\x96\x8a", "\xe2\x96\x89", "\xe2\x96\x88" };
  char el[24], rem[24], rate[32], left[96], right[512];
  double r = elapsed > 0 ? (double)(n - initial) / elapsed : 0;
  int nl, nr, np, cells, full, k, units, times = 1, rated = 1, dl, dcut;
  size_t len = 0;
  if (!buf || cap == 0) return 0;
  buf[0] = 0;
  if (!desc) desc = "";
  if (!postfix) postfix = "";
  for (np = (int)strlen(postfix); np > 400;) np = tr__bar_less(postfix, np); /* whole fields, as below */
  tr__clock_fmt(el, sizeof el, elapsed);
  if (r <= 0) snprintf(rate, sizeof rate, "?it/s");
  else if (r < 1) tr__msg(rate, sizeof rate, "%.2fs/it", 1 / r); /* tqdm flips below one per second */
  else tr__msg(rate, sizeof rate, "%.2fit/s", r); /* (only a rate past 1e25 could be cut: "...") */
  if (total > 0 && r > 0) tr__clock_fmt(rem, sizeof rem, (double)(total - n) / r);
  else snprintf(rem, sizeof rem, "?");
  dl = (int)strlen(desc);
  if ((dcut = dl > TR__BAR_DESC) != 0) dl = (int)tr__utf8_start(desc, TR__BAR_DESC - 3);
  /* left fits (64 + 3 + ": " + 21 digits of an int64 ratio + "%|"): tr__msg_at only for gcc's sake */
  if (total > 0)
    nl = (int)tr__msg_at(left, sizeof left, 0, "%.*s%s: %3.0f%%|", dl, desc, dcut ? "..." : "", 100.0 * (double)n / (double)total);
  else nl = (int)tr__msg_at(left, sizeof left, 0, "%.*s%s: %lldit", dl, desc, dcut ? "..." : "", (long long)n); /* "desc: 12it [00:01, 9.50it/s]" */
  if (nl >= (int)sizeof left) nl = (int)strlen(left);
  for (;;) { /* the right part, less what a narrow line gives up (a loop at each redraw only) */
    if (times) /* "| n/total [elapsed<remaining, rate, postfix]", or " [elapsed, rate, postfix]" without a total */
      nr = total > 0 ? snprintf(right, sizeof right, "| %lld/%lld [%s<%s%s%s%s%.*s]", (long long)n, (long long)total, el, rem,
                                rated ? ", " : "", rated ? rate : "", np ? ", " : "", np, postfix)
                     : snprintf(right, sizeof right, " [%s%s%s%s%.*s]", el, rated ? ", " : "", rated ? rate : "", np ? ", " : "", np, postfix);
    else nr = total > 0 ? snprintf(right, sizeof right, "| %lld/%lld", (long long)n, (long long)total) : (right[0] = 0, 0);
    if (nr < 0) return 0;
    if (nr >= (int)sizeof right) nr = (int)sizeof right - 1;
    cells = width > 0 ? width - tr__utf8_width_n(left, nl) - tr__utf8_width_n(right, nr) : TR__BAR_CELLS;
    if (cells >= (total > 0 ? TR__BAR_CELLS : 0)) break;
    if (np > 0) np = tr__bar_less(postfix, np);
    else if (rated) rated = 0;
    else if (times) times = 0;
    else break;
  }
#define TR__ADD(s, l) do { size_t l_ = (l); if (len + l_ < cap) { memcpy(buf + len, (s), l_); len += l_; } } while (0)
  /* (a buf too small drops a part whole, never cuts a number) */
  if (total <= 0) { TR__ADD(left, (size_t)nl); TR__ADD(right, (size_t)nr); buf[len] = 0; return len; }
  if (cells < 1) cells = 1; /* tqdm: the bar takes what the text leaves */
  if (cells > 400) cells = 400;
  units = ascii ? 10 : 8; /* tqdm: tenths in ASCII (" 123456789#"), eighths in blocks */
  full = (int)((double)cells * units * (double)(n < total ? n : total) / (double)total);
  TR__ADD(left, (size_t)nl);
  for (k = 0; k < cells; k++) {
    int part = full - units * k;
    if (part > units) part = units;
    if (part < 0) part = 0;
    if (ascii) { char c = part == units ? '#' : part == 0 ? ' ' : (char)('0' + part); TR__ADD(&c, 1); }
    else TR__ADD(blocks[part], strlen(blocks[part]));
  }
  TR__ADD(right, (size_t)nr);
#undef TR__ADD
  buf[len] = 0;
  return len;
}

TRAIN_API size_t tr_bar_format(char *buf, size_t cap, const char *desc, int64_t n, int64_t total, double elapsed,
                               const char *postfix, int width, int ascii) {
  return tr__bar_format(buf, cap, desc, n, 0, total, elapsed, postfix, width, ascii);
}

typedef struct tr__bar_line {
  char desc[32];
  int64_t n, total;
  int64_t drawn_n;           /* n when the line was last drawn (-1: not yet) */
  int64_t initial;           /* n when the line started (a resumed run's steps before it): not in the rate */
  int64_t next_look;         /* the batch at which to read the clock again (tqdm's miniters) */
  double start, last;
  int live;
} tr__bar_line;
typedef struct tr__bar {
  tr_run *run;          /* the registry's run: what the loop says (train/run.h) */
  FILE *out;
  int tty, width, ascii;
  int size_fd;               /* terminal: where to measure the width when out itself cannot say (mpirun's rank
                                pseudo-terminal has no size: the launcher's terminal); -1: none */
  double refresh, line_every;
  tr__bar_line main, eval;   /* the training epoch's bar; the evaluation's (the line below on a terminal) */
  int eval_shown;            /* terminal: the evaluation line is on screen (drawn once its first redraw is due) */
  int drawn_w;               /* terminal: the columns of the line the cursor is on (0: none of ours) */
  int above_w;               /* terminal: the training bar's columns while the evaluation line shows below it */
  int epoch_open;            /* lines: the epoch's line is still to come (an evaluation now is part of it) */
  double last_draw;          /* terminal: when anything was last drawn */
  char loss[64], val[256];   /* the postfix: the latest training loss drawn, the last validation's metrics */
  int pipe;                  /* out is a pipe, a FIFO or a socket: written with SIGPIPE ignored */
  int io, io_err, had_err;   /* tr__bar_io_begin's depth; the first failed flush's errno since; ferror before */
  int broken, said;          /* a write failed (its errno): nothing more is drawn; said: reported */
#ifdef TR__BAR_SIGACTION
  struct sigaction pipe_old; /* the process's SIGPIPE disposition while the bar writes */
#elif defined(TR__BAR_PIPE)
  void (*pipe_old)(int);
#endif
  int pipe_set, pipe_dfl;    /* the disposition was saved; it was SIG_DFL (a broken pipe kills the process) */
  int dies;                  /* broken by EPIPE where SIGPIPE kills: the run stops (tr__bar_said) */
} tr__bar;

static void tr__bar_destroy(void *user) {
  tr__bar *b = (tr__bar *)user;
  if (b && b->run && b->run->tr__p->bar == b) { b->run->tr__p->bar = NULL; b->run->tr__p->above = NULL; }
#ifdef TR__POSIX
  if (b && b->size_fd >= 0) close(b->size_fd);
#endif
  free(b);
}

#ifdef TR__POSIX
static int tr__term_cols(int fd) {
#  ifdef TIOCGWINSZ
  struct winsize ws;
  if (fd >= 0 && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
#  endif
  (void)fd;
  return 0;
}
#endif
/* Under a launcher (Open MPI gives every rank a pseudo-terminal) the user's terminal or file is where the
   launcher writes: walk up /proc to it and read its fd. 1 terminal (path in term), 0 file or pipe, -1 not
   found or not Linux (isatty decides). */
#ifdef TR__POSIX
static int tr__launcher_tty(int fd, char *term, size_t cap) {
#ifdef __linux__
  static const char *const launchers[] = { "mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra", "srun", NULL };
  char buf[512], link[64];
  long pid, ppid;
  int depth, i;
  if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_RANK") && !getenv("SLURM_PROCID")) return -1;
  for (pid = (long)getppid(), depth = 0; pid > 1 && depth < 32; pid = ppid, depth++) {
    FILE *f;
    char *name, *end;
    size_t n;
    ssize_t k;
    snprintf(link, sizeof link, "/proc/%ld/stat", pid);
    if (!(f = fopen(link, "r"))) return -1;
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0; /* "pid (name) state ppid ...": the name may hold spaces and parentheses */
    if (!(name = strchr(buf, '(')) || !(end = strrchr(buf, ')')) || sscanf(end + 1, " %*c %ld", &ppid) != 1) return -1;
    *end = 0;
    for (i = 0; launchers[i] && strcmp(name + 1, launchers[i]); i++) {}
    if (!launchers[i]) continue; /* a shell, a daemon or proxy between (orted, hydra_pmi_proxy) */
    snprintf(link, sizeof link, "/proc/%ld/fd/%d", pid, fd == 2 ? 2 : 1);
    if ((k = readlink(link, term, cap - 1)) <= 0) return -1;
    term[k] = 0;
    return !strncmp(term, "/dev/pts/", 9) || !strncmp(term, "/dev/tty", 8) || !strcmp(term, "/dev/console");
  }
#endif
  (void)fd;
  (void)term;
  (void)cap;
  return -1;
}
#endif
/* The terminal's columns less one (tqdm), measured at every redraw: a resize takes effect. */
static int tr__bar_cols(tr__bar *b) {
  const char *c;
  int n = 0;
#ifdef TR__POSIX
  n = tr__term_cols(fileno(b->out));
  if (n <= 0) n = tr__term_cols(b->size_fd);
#endif
  if (n <= 0) n = (c = getenv("COLUMNS")) != NULL ? atoi(c) : 0;
  if (n <= 1 || n > 100000) n = 80;
  return n - 1;
}
/* Cut the whole line to cols UTF-8 characters: a wrapped line leaves a row behind at every \r. */
static void tr__utf8_cut(char *s, int cols) {
  int n = 0;
  for (; *s; s++)
    if (((unsigned char)*s & 0xC0) != 0x80 && n++ == cols) { *s = 0; return; }
}

/* The bar's writes go between tr__bar_io_begin and _end (the outermost pair counts): SIGPIPE ignored for a
   pipe, the stream's pending output written first (never in the middle of our line), the first failure
   kept in b->broken. EAGAIN and EINTR lose a line, nothing more. */
static void tr__bar_flush(tr__bar *b) {
  errno = 0;
  if (fflush(b->out) != 0 && !b->io_err) b->io_err = errno ? errno : EIO;
}
/* errno kept at once: stderr fails in the write, and ferror alone says EIO for EPIPE. */
static void tr__bar_put(tr__bar *b, const char *s) {
  errno = 0;
  if (fputs(s, b->out) == EOF && !b->io_err) b->io_err = errno ? errno : EIO;
}
static void tr__bar_io_begin(tr__bar *b) {
  if (b->io++ > 0) return;
  b->io_err = 0;
  b->had_err = ferror(b->out) != 0; /* the program's own failed write: not the bar's to judge */
  if (b->pipe) {
#ifdef TR__BAR_SIGACTION
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    b->pipe_set = sigaction(SIGPIPE, &ign, &b->pipe_old) == 0;
    b->pipe_dfl = b->pipe_set && !(b->pipe_old.sa_flags & SA_SIGINFO) && b->pipe_old.sa_handler == SIG_DFL;
#elif defined(TR__BAR_PIPE)
    b->pipe_old = signal(SIGPIPE, SIG_IGN);
    b->pipe_set = b->pipe_old != SIG_ERR;
    b->pipe_dfl = b->pipe_set && b->pipe_old == SIG_DFL;
#endif
  }
  tr__bar_flush(b);
}
static void tr__bar_io_end(tr__bar *b) {
  int e;
  if (--b->io > 0) return;
  tr__bar_flush(b);
  e = b->io_err ? b->io_err : ferror(b->out) && !b->had_err ? EIO : 0;
  if (e == EAGAIN || e == EINTR) clearerr(b->out);
  else if (e && !b->broken) {
    b->broken = e;
    b->dies = e == EPIPE && b->pipe_dfl; /* SIGPIPE would kill this process at its next write there */
  }
#ifdef TR__BAR_SIGACTION
  if (b->pipe_set) (void)sigaction(SIGPIPE, &b->pipe_old, NULL);
#elif defined(TR__BAR_PIPE)
  if (b->pipe_set) (void)signal(SIGPIPE, b->pipe_old);
#endif
  b->pipe_set = b->pipe_dfl = 0;
}
static const char *tr__bar_stream(const tr__bar *b) { return b->out == stdout ? "stdout" : b->out == stderr ? "stderr" : "its stream"; }
/* A failed stream is said once. EPIPE where SIGPIPE would kill fails the run (can_fail; teardown only
   says it); any other error stops the bar alone, training goes on. */
static hk_signal tr__bar_said(tr__bar *b, hk_ctx *ctx, int can_fail) {
  char why[300];
  if (!b->broken || b->said) return HK_CONTINUE;
  b->said = 1;
  b->main.live = b->eval.live = b->eval_shown = b->epoch_open = 0;
  if (b->dies)
    snprintf(why, sizeof why, "%s was closed (%s: its reader exited, as in prog | head -1): the bar draws nothing more "
             "and the run stops, through on_exception (the next write to it would be killed by SIGPIPE)", tr__bar_stream(b),
             strerror(EPIPE));
  else if (b->broken == EPIPE)
    snprintf(why, sizeof why, "%s was closed (%s: its reader exited): the bar draws nothing more (training goes on: this "
             "process ignores or handles SIGPIPE)", tr__bar_stream(b), strerror(EPIPE));
  else snprintf(why, sizeof why, "cannot write to %s: %s; the bar draws nothing more (training goes on)", tr__bar_stream(b), strerror(b->broken));
  if (b->dies && can_fail) return hk_fail(ctx, "%s", why); /* "callback 'progress_bar' failed in ...: " */
  if (stderr != b->out) { fprintf(stderr, "progress_bar: %s\n", why); fflush(stderr); }
  return HK_CONTINUE;
}

/* Back to the start of the line, erased; a line a narrowed terminal rewrapped is erased row by row up to
   its first (erasing to the screen's end makes tmux push the screen into its history). */
static void tr__bar_home(tr__bar *b, int width) {
  int up = b->width <= 0 && width > 0 && b->drawn_w > width + 1 ? (b->drawn_w - 1) / (width + 1) : 0;
  tr__bar_put(b, "\r\033[K");
  for (; up > 0; up--) tr__bar_put(b, "\033[A\033[K");
  b->drawn_w = 0;
}
/* The evaluation line goes below the training bar, and back up: the training bar's rows erased too */
static void tr__bar_below(tr__bar *b) {
  tr__bar_put(b, "\n");
  b->above_w = b->drawn_w;
  b->drawn_w = 0;
}
static void tr__bar_up(tr__bar *b) {
  int width = b->width > 0 ? b->width : tr__bar_cols(b);
  tr__bar_home(b, width);
  tr__bar_put(b, "\033[A");
  b->drawn_w = b->above_w;
  tr__bar_home(b, width);
}
/* The latest training batch's loss; on a device ctx->loss is NaN and train/loss copies it. */
static void tr__bar_loss(tr__bar *b, hk_ctx *ctx) {
  double v = ctx->loss;
  if (ctx->params && ctx->n_tensors > 0 && ctx->params[0].on_device) (void)hk_metric_get(ctx, "train/loss", &v);
  snprintf(b->loss, sizeof b->loss, "loss=%.4g", v);
}
/* Draw a line: in place on a terminal (carriage return, the line, erase to its end), else a complete line. */
static void tr__bar_draw(tr__bar *b, tr__bar_line *l, double now) {
  char line[1024], post[400];
  int width = b->width > 0 ? b->width : b->tty ? tr__bar_cols(b) : 0;
  if (!l->live || b->broken) return;
  snprintf(post, sizeof post, "%s%s%s", b->loss, b->loss[0] && b->val[0] ? ", " : "", b->val);
  tr__bar_format(line, sizeof line, l->desc, l->n, l->initial, l->total, now - l->start, post, width, b->ascii);
  if (width > 0) tr__utf8_cut(line, width);
  l->last = b->last_draw = now;
  l->drawn_n = l->n;
  if (!b->tty) { tr__bar_put(b, line); tr__bar_put(b, "\n"); tr__bar_flush(b); return; }
  tr__bar_home(b, width);
  tr__bar_put(b, line);
  b->drawn_w = (int)tr__utf8_width(line);
  tr__bar_flush(b);
}
static void tr__bar_start(tr__bar_line *l, const char *desc, int64_t n, int64_t total) {
  snprintf(l->desc, sizeof l->desc, "%s", desc);
  l->n = l->initial = n;
  l->total = total;
  l->start = l->last = tr__wall();
  l->drawn_n = -1;
  l->next_look = 0;
  l->live = 1;
}
/* A step loop (tr_run_desc.epochs = TR_NO) has one bar over the whole run: steps of max_steps. */
static int tr__bar_steps(const tr__bar *b) { return b->run && b->run->desc.epochs == TR_NO; }

/* A step loop's bar starts with the run, at its step (a resumed run's: not in the rate) */
static hk_signal tr__bar_train_start(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  if (ctx->rank != 0 || b->broken || b->main.live || !tr__bar_steps(b)) return HK_CONTINUE;
  tr__bar_start(&b->main, "Training", ctx->global_step, b->run->desc.max_steps);
  if (b->tty && b->main.start - b->last_draw >= b->refresh) {
    tr__bar_io_begin(b);
    tr__bar_draw(b, &b->main, b->main.start);
    tr__bar_io_end(b);
  }
  return tr__bar_said(b, ctx, 1);
}
static hk_signal tr__bar_epoch_start(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  char desc[32];
  if (ctx->rank != 0 || b->broken) return ctx->rank != 0 ? HK_CONTINUE : tr__bar_said(b, ctx, 1);
  tr__bar_io_begin(b);
  /* The ended epoch's last state, never drawn (lines without on_train_epoch_end; a terminal with a redraw
     due). A new epoch shows from its first batch: a fast epoch's 0% would stay on screen. */
  if (b->main.live && b->main.drawn_n != b->main.n && (b->tty ? tr__wall() - b->last_draw >= b->refresh : b->epoch_open))
    tr__bar_draw(b, &b->main, tr__wall());
  snprintf(desc, sizeof desc, "Epoch %lld", (long long)ctx->epoch);
  tr__bar_start(&b->main, desc, ctx->batch_idx, b->run ? b->run->train_batches : 0); /* a resumed epoch starts mid-way */
  b->epoch_open = 1;
  if (b->tty && b->drawn_w == 0) tr__bar_draw(b, &b->main, b->main.start);
  tr__bar_io_end(b);
  return tr__bar_said(b, ctx, 1);
}
static hk_signal tr__bar_batch_end(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  tr__bar_line *l = ctx->event == HK_ON_TRAIN_BATCH_END ? &b->main : &b->eval;
  double now;
  if (ctx->rank != 0) return HK_CONTINUE;
  if (b->broken) return tr__bar_said(b, ctx, 1); /* the stream failed: nothing more is drawn */
  if (!l->live && l == &b->main) { /* no on_train_start / on_train_epoch_start came, or an epoch resumed mid-way */
    char desc[32];
    if (tr__bar_steps(b)) tr__bar_start(l, "Training", ctx->global_step, b->run->desc.max_steps);
    else {
      snprintf(desc, sizeof desc, "Epoch %lld", (long long)ctx->epoch);
      tr__bar_start(l, desc, ctx->batch_idx, b->run ? b->run->train_batches : 0);
      b->epoch_open = 1;
    }
  }
  if (!l->live) return HK_CONTINUE;
  l->n = l == &b->main && tr__bar_steps(b) ? ctx->global_step : ctx->batch_idx + 1;
  if (l->n < l->next_look && l->n != l->total) return HK_CONTINUE; /* not even the clock: a step is short */
  now = tr__wall();
  /* terminal: one redraw per refresh interval (one per epoch end cost ~1% of a small model's step);
     lines: one per line_seconds, the final one at the end */
  if (b->tty ? now - b->last_draw >= b->refresh : now - l->last >= b->line_every && l->n != l->total) {
    if (l == &b->main) tr__bar_loss(b, ctx);
    tr__bar_io_begin(b);
    if (b->tty && l == &b->eval && !b->eval_shown) { /* the evaluation line appears below the training bar */
      if (b->main.live && b->main.drawn_n < 0) tr__bar_draw(b, &b->main, now); /* (a step loop's, started by it) */
      if (b->main.live) tr__bar_below(b);
      b->eval_shown = 1;
    }
    tr__bar_draw(b, l, now);
    tr__bar_io_end(b);
    if (b->broken) return tr__bar_said(b, ctx, 1);
  }
  { /* look again after about a quarter of the interval, at the rate seen so far (tqdm's dynamic miniters) */
    double rate = now > l->start ? (double)(l->n - l->initial) / (now - l->start) : 0, ahead = rate * (b->tty ? b->refresh : b->line_every) / 4;
    l->next_look = l->n + (ahead >= 1 ? (ahead < 1e9 ? (int64_t)ahead : 1000000000) : 1);
  }
  return HK_CONTINUE;
}
static hk_signal tr__bar_epoch_end(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  double now;
  if (ctx->rank != 0 || !b->main.live) return ctx->rank != 0 ? HK_CONTINUE : tr__bar_said(b, ctx, 1);
  b->epoch_open = 0;
  now = tr__wall(); /* the epoch's final state (with this epoch's validation): its one line in a pipe; on a
                       terminal when a redraw is due, else at the next epoch's start if one is due then (the
                       last epoch's is drawn at the end of training) */
  tr__bar_loss(b, ctx);
  if (!b->tty || now - b->last_draw >= b->refresh) {
    tr__bar_io_begin(b);
    tr__bar_draw(b, &b->main, now);
    tr__bar_io_end(b);
  }
  return tr__bar_said(b, ctx, 1);
}
static hk_signal tr__bar_train_end(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  if (ctx->rank != 0) return HK_CONTINUE;
  if (b->main.live && (b->tty || b->main.drawn_n != b->main.n)) tr__bar_loss(b, ctx);
  tr__bar_io_begin(b);
  if (b->tty && b->main.live && !b->broken) { tr__bar_draw(b, &b->main, tr__wall()); tr__bar_put(b, "\n"); b->drawn_w = 0; }
  else if (b->main.live && b->main.drawn_n != b->main.n) tr__bar_draw(b, &b->main, tr__wall()); /* lines: the final
                                   state (a step loop has no epoch end to print it; an epoch loop printed it there) */
  tr__bar_io_end(b);
  b->main.live = 0;
  b->epoch_open = 0;
  return tr__bar_said(b, ctx, 1);
}
/* Evaluation: on a terminal a bar below the training bar, erased at its end. In lines: one line for a
   standalone run or the sanity check; inside an epoch the epoch's line carries its metrics; in a step
   loop the training line. A validation before any step starts the training bar (to go below). */
static hk_signal tr__bar_eval_start(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  const char *desc = ctx->stage == HK_STAGE_SANITY_CHECK ? "Sanity Checking" : ctx->event == HK_ON_TEST_START ? "Testing" : "Validation";
  if (ctx->rank != 0 || b->broken) return ctx->rank != 0 ? HK_CONTINUE : tr__bar_said(b, ctx, 1);
  if (b->main.live && ctx->stage == HK_STAGE_FIT && b->main.n > b->main.initial) tr__bar_loss(b, ctx); /* redrawn below it */
  if (!b->main.live && ctx->stage == HK_STAGE_FIT && tr__bar_steps(b))
    tr__bar_start(&b->main, "Training", ctx->global_step, b->run->desc.max_steps);
  tr__bar_start(&b->eval, desc, 0, b->run ? b->run->eval_batches : 0);
  b->eval_shown = 0; /* terminal: shown at its first due redraw; a short evaluation never shows (no cost) */
  return HK_CONTINUE;
}
static hk_signal tr__bar_eval_end(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  if (ctx->rank != 0 || !b->eval.live) return ctx->rank != 0 ? HK_CONTINUE : tr__bar_said(b, ctx, 1);
  tr__bar_io_begin(b);
  if (!b->tty) {
    if (b->main.live && ctx->stage == HK_STAGE_FIT && tr__bar_steps(b)) tr__bar_draw(b, &b->main, tr__wall());
    else if (!(b->epoch_open && b->main.live && ctx->stage != HK_STAGE_SANITY_CHECK)) tr__bar_draw(b, &b->eval, tr__wall());
  } else if (!b->main.live && (ctx->event == HK_ON_TEST_END || ctx->stage != HK_STAGE_SANITY_CHECK)) {
    tr__bar_draw(b, &b->eval, tr__wall()); /* a standalone run's bar stays */
    tr__bar_put(b, "\n");
    b->drawn_w = 0;
  } else if (b->eval_shown && b->main.live) { /* erase the line, go back up to the training bar */
    tr__bar_up(b);
    tr__bar_draw(b, &b->main, tr__wall());
  } else if (b->eval_shown) { tr__bar_put(b, "\r\033[K"); b->drawn_w = 0; } /* the sanity check's line goes */
  else if (b->main.live && tr__wall() - b->last_draw >= b->refresh) tr__bar_draw(b, &b->main, tr__wall()); /* its metrics */
  tr__bar_io_end(b);
  b->eval.live = 0;
  b->eval_shown = 0;
  return tr__bar_said(b, ctx, 1);
}
static hk_signal tr__bar_on_log(hk_ctx *ctx, void *u) {
  tr__bar *b = (tr__bar *)u;
  const tr_log_record *r = tr_log_current(ctx);
  int i;
  size_t len = 0;
  if (!r || ctx->rank != 0) return HK_CONTINUE;
  if (r->stage && !strcmp(r->stage, "train")) return HK_CONTINUE; /* the loss: the latest batch's, at each redraw */
  b->val[0] = 0;
  for (i = 0; i < r->n_metrics; i++) { /* whole fields: one that does not fit goes, with those after it */
    char field[sizeof b->val];
    int k = snprintf(field, sizeof field, "%s%s=%.4g", i ? ", " : "", r->metrics[i].name, r->metrics[i].value);
    if (k < 0 || len + (size_t)k >= sizeof b->val) break; /* (k >= sizeof field is caught here too) */
    memcpy(b->val + len, field, (size_t)k + 1);
    len += (size_t)k;
  }
  return HK_CONTINUE;
}
static hk_signal tr__bar_teardown(hk_ctx *ctx, void *u) { /* a failed run: leave the cursor on a fresh line */
  tr__bar *b = (tr__bar *)u;
  if (ctx->rank != 0) return HK_CONTINUE;
  if (b->tty && (b->main.live || b->eval.live) && !b->broken) {
    tr__bar_io_begin(b);
    tr__bar_put(b, "\n");
    b->drawn_w = 0;
    tr__bar_io_end(b);
  }
  b->main.live = b->eval.live = b->epoch_open = 0;
  return tr__bar_said(b, ctx, 0); /* the run ends: said, not failed */
}

/* Text above the bar (tr_print, callbacks' lines): bar cleared, text written, bar redrawn (tqdm.write),
   for another stream only when it is a terminal too. */
static void tr__bar_above(tr__bar *b, FILE *f, const char *text) {
  int live = b->tty && (b->main.live || b->eval.live) && !b->broken;
  if (!f) f = b->out;
  if (f == b->out && b->broken) return; /* the bar's stream failed (a closed pipe): nothing reads it */
#ifdef TR__POSIX
  if (live && f != b->out) live = isatty(fileno(f));
#endif
  tr__bar_io_begin(b);
  if (live) {
    if (b->eval_shown && b->main.live) tr__bar_up(b);
    else tr__bar_home(b, b->width > 0 ? b->width : tr__bar_cols(b));
    tr__bar_flush(b);
  }
  if (f == b->out) tr__bar_put(b, text);
  else fputs(text, f);
  if (f == b->out) tr__bar_flush(b);
  else fflush(f);
  if (live) {
    if (b->main.live) tr__bar_draw(b, &b->main, tr__wall());
    if (b->eval_shown && b->eval.live) {
      if (b->main.live) tr__bar_below(b);
      tr__bar_draw(b, &b->eval, tr__wall());
    }
  }
  tr__bar_io_end(b); /* a failure is said by the bar's next hook */
}

static tr_err tr__bar_make(hk_registry *reg, const tr_progress_bar_desc *d, hk_handle *out, tr__why *w) {
  char unique[64];
  tr_run *run;
  tr__bar *b;
  hk_callback cb;
  hk_opts o;
  hk_err e;
  if (!d) return tr__bad(w, "progress_bar: desc is NULL");
  if (d->mode < TR_BAR_AUTO || d->mode > TR_BAR_LINES) return tr__bad(w, "progress_bar: mode %d is not valid (auto, tty or lines)", (int)d->mode);
  if (!(d->refresh_seconds >= 0) || !(d->line_seconds >= 0) || !hk_is_finite(d->refresh_seconds) || !hk_is_finite(d->line_seconds))
    return tr__bad(w, "progress_bar: refresh_seconds and line_seconds must be finite and >= 0");
  if (d->width < 0 || d->width > 100000) return tr__bad(w, "progress_bar: width must be between 0 and 100000 (0 = the terminal's), got %d", d->width);
  if ((run = tr_run_get(reg)) != NULL && run->tr__p->bar) /* two would draw every line twice */
    return tr__bad(w, "progress_bar: this registry has a progress bar already; one bar shows the run (remove the "
                   "other one, or give each its own registry)");
  if (!(b = (tr__bar *)calloc(1, sizeof *b))) return tr__bad(w, "progress_bar: out of memory"), TR_ERR_NOMEM;
  b->run = run;
  b->out = d->out ? d->out : stdout;
  b->size_fd = -1;
#ifdef TR__POSIX
  { /* a pipe (or FIFO, or socket) may lose its reader: written with SIGPIPE ignored */
    struct stat st;
    int fd = fileno(b->out);
    b->pipe = fd >= 0 && fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
#  ifdef S_ISSOCK
    if (fd >= 0 && !b->pipe && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) b->pipe = 1;
#  endif
  }
  b->tty = d->mode == TR_BAR_TTY;
  if (d->mode == TR_BAR_AUTO && isatty(fileno(b->out))) { /* under mpirun: where the launcher's output goes */
    char term[256];
    int at = tr__launcher_tty(fileno(b->out), term, sizeof term);
    b->tty = at != 0;
    if (at == 1) b->size_fd = open(term, O_RDONLY | O_NOCTTY | O_NONBLOCK);
  }
#else
  b->tty = d->mode == TR_BAR_TTY;
#endif
  b->refresh = d->refresh_seconds > 0 ? d->refresh_seconds : 0.1;
  b->line_every = d->line_seconds > 0 ? d->line_seconds : 10;
  b->width = d->width;
  b->ascii = d->ascii;
  memset(&cb, 0, sizeof cb);
  cb.name = tr__unique_name(reg, "progress_bar", unique, sizeof unique);
  cb.user = b;
  cb.on_train_start = tr__bar_train_start;
  cb.on_train_epoch_start = tr__bar_epoch_start;
  cb.on_train_batch_end = tr__bar_batch_end;
  cb.on_train_epoch_end = tr__bar_epoch_end;
  cb.on_train_end = tr__bar_train_end;
  cb.on_validation_start = tr__bar_eval_start;
  cb.on_validation_batch_end = tr__bar_batch_end;
  cb.on_validation_end = tr__bar_eval_end;
  cb.on_test_start = tr__bar_eval_start;
  cb.on_test_batch_end = tr__bar_batch_end;
  cb.on_test_end = tr__bar_eval_end;
  cb.on_log = tr__bar_on_log;
  cb.teardown = tr__bar_teardown;
  cb.destroy = tr__bar_destroy;
  memset(&o, 0, sizeof o);
  o.monitor = 1;
  o.order = 1000; /* after the hooks that change the record, and after other callbacks' epoch ends */
  e = hk_add_callback(reg, &cb, &o, out);
  if (e) {
    tr__bad(w, "%s", hk_last_error(reg));
    tr__bar_destroy(b);
    return e == HK_ERR_NOMEM ? TR_ERR_NOMEM : TR_ERR_INVALID;
  }
  if (run) { run->tr__p->bar = b; run->tr__p->above = tr__bar_above; } /* tr_print and callbacks' lines: above it */
  return TR_OK;
}
TRAIN_API tr_err tr_progress_bar(hk_registry *reg, const tr_progress_bar_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__bar_make(reg, d, out, &w), &w);
}
/* the stream by name: stdout|stderr */
static tr_err tr__bar_from_spec(const hk_args *a, tr_progress_bar_desc *d, tr__why *w) {
  (void)w;
  d->out = hk_arg_int(a, "stream") == 1 ? stderr : stdout;
  return TR_OK;
}
TR__FACTORY_WITH(bar, tr_progress_bar_desc, TR_PROGRESS_BAR_PARAMS, tr__bar_from_spec)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
