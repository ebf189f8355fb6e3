/* train/loggers/progress_bar.h - progress_bar. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_PROGRESS_BAR_H /* part */
#define TRAIN_PROGRESS_BAR_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* progress_bar: tqdm's line, as Lightning's TQDMProgressBar draws it,
     Epoch 3:  45%|████▌     | 27/60 [00:01<00:01, 25.30it/s, loss=0.231, val/loss=0.187]
   the rate averaged over the epoch (after a resume: over the batches run since, as tqdm's initial),
   the postfix the latest training batch's loss (ctx->loss, read at each redraw of the training bar, as
   Lightning's bar shows it: not the last record's, which is log_every_n_steps old; on a device, the
   metric train/loss: one copy per redraw) and the last validation record's metrics. The totals: the
   training bar's tr_run.train_batches (a step loop's: max_steps), an evaluation bar's tr_run.eval_batches
   when it starts (the trainer sets both; a loop of its own sets eval_batches before
   on_validation_start, else that bar counts without a total). A validation bar ("Validation", "Sanity Checking", "Testing") runs on the line below
   during evaluation. A step loop's bar ("Training", steps) starts with the run, before a validation at
   step 0; its "epoch" is the steps between validations. One bar per registry: a second is refused.
   On a terminal: redrawn in place (carriage return, the line, erase to its end) at most every
   refresh_seconds, the end of an epoch included (Lightning redraws at every epoch's end; with a fast
   model that is hundreds of redraws a second), and once more when training ends with its final
   state; one due at an epoch's start shows the ended epoch's last state if no redraw did, and a new
   epoch shows from its first batch on (a fast epoch's 0% would stay on screen while it runs). The line fits the
   terminal's width less one (tqdm), measured at every redraw (TIOCGWINSZ on the stream, else $COLUMNS,
   else 80): what does not fit beside a bar of 10 cells goes whole, the postfix's fields (the last
   first), then the rate, then the times, so no number is cut (only a line still too wide, under about
   25 columns, is cut); it never wraps, and a resized terminal gets lines of its new width; when the
   terminal was narrowed below the last line, the rows a rewrapping terminal (tmux, most desktop ones)
   made of it are erased too (those still on the screen: tmux may push one into its scrollback). The validation
   line is cleared when it ends, so the screen shows one live bar. Elsewhere (a pipe, a file, CI):
   complete lines, never a carriage return or an escape code: the sanity check's, one at the end of
   every training epoch carrying its validation's metrics (a validation inside an epoch has no line
   of its own), one per step loop's validation (the training line at that step, with its metrics), one
   per evaluation run (tr_validate, tr_test), one at most
   every line_seconds within a long epoch or evaluation, and the final state at the end of training
   when no line showed it (a loop without epochs).
   mode=auto tells a terminal by isatty, except under a launcher (mpirun, mpiexec, srun; Open MPI
   gives every rank a pseudo-terminal even when mpirun writes to a file): then by where the launcher's
   own output goes (Linux: its /proc/PID/fd), as a user expects; its terminal's width is measured too.
   Only rank 0 (ctx->rank) draws. mode=tty / lines force either.
   A CLOSED STREAM: a pipe whose reader exited (prog | head -1) would kill the process with SIGPIPE at the
   bar's next write, before on_exception (so before on_exception_checkpoint). The bar writes to a pipe,
   FIFO or socket with SIGPIPE ignored (the process's disposition is put back after each redraw: with
   sigaction where <signal.h> gives it, else through signal(), which gives a handler back without its
   sigaction flags), so the write fails with EPIPE; the bar then draws nothing more and, where SIGPIPE
   kills the process (its default), fails the run through the usual path: after this hook the run stops,
   on_exception runs (on_exception_checkpoint saves), and tr_fit / tr_run_finish return the error
   ("callback 'progress_bar' failed in on_train_batch_end: stdout was closed (Broken pipe: its reader
   exited ..."). It does not let training go on there: nobody can read the stream any more, and the
   program's next write to it (a printf, the exit's flush) would be killed by SIGPIPE anyway, where no
   hook runs. A process that ignores SIGPIPE or handles it itself, and any other write error (a full
   disk under a redirected stdout), lose the bar alone, said once on stderr; training goes on.
   PRINTING WHILE THE BAR IS LIVE: tr_print(reg, fmt, ...) (tqdm.write) clears the bar's lines, prints
   the line, draws the bar again below it; a hook's plain printf lands in the middle of the bar's line.
   Callbacks' lines (the run's log: warnings, verbose, early_stopping's stop, a resume) go the same way
   when that stream is a terminal. Events it uses: on_train_epoch_start/end, on_train_batch_end,
   on_validation_start/batch_end/end, on_test_*, on_train_end, on_log, teardown. */
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
/* tqdm's line for n of total (total <= 0: unknown) after elapsed seconds, into buf; width <= 0 gives a
   10-cell bar; a width: what does not fit beside 10 cells goes whole (postfix fields, ", " between them,
   the last first; the rate; the times). Returns the line's length in bytes (clipped to cap - 1). */
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
/* The length of the first np bytes of a postfix less its last field (fields are separated by ", ") */
static int tr__bar_less(const char *postfix, int np) {
  while (np > 0 && !(np >= 2 && postfix[np - 2] == ',' && postfix[np - 1] == ' ')) np--;
  return np >= 2 ? np - 2 : 0;
}
/* initial: the count the bar started from (a resumed run), left out of the rate, as tqdm's initial.
   With a width, what does not fit with a bar of TR__BAR_CELLS goes whole, in this order: the postfix's
   fields (separated by ", "), the last first; the rate; the times. Only then does the bar shrink (to one
   cell): a number is never cut (tr__bar_draw cuts the line at the width only when even that is wider). */
static size_t tr__bar_format(char *buf, size_t cap, const char *desc, int64_t n, int64_t initial, int64_t total,
                             double elapsed, const char *postfix, int width, int ascii) {
  static const char *const blocks[9] = { " ", "\xe2\x96\x8f", "\xe2\x96\x8e", "\xe2\x96\x8d", "\xe2\x96\x8c",
                                         "\xe2\x96\x8b", "\xe2\x96\x8a", "\xe2\x96\x89", "\xe2\x96\x88" };
  char el[24], rem[24], rate[32], left[96], right[512];
  double r = elapsed > 0 ? (double)(n - initial) / elapsed : 0;
  int nl, nr, np, cells, full, k, units, times = 1, rated = 1;
  size_t len = 0;
  if (!buf || cap == 0) return 0;
  buf[0] = 0;
  if (!desc) desc = "";
  if (!postfix) postfix = "";
  for (np = (int)strlen(postfix); np > 400;) np = tr__bar_less(postfix, np); /* whole fields, as below */
  tr__clock_fmt(el, sizeof el, elapsed);
  if (r <= 0) snprintf(rate, sizeof rate, "?it/s");
  else if (r < 1) snprintf(rate, sizeof rate, "%.2fs/it", 1 / r); /* tqdm flips below one per second */
  else snprintf(rate, sizeof rate, "%.2fit/s", r);
  if (total > 0 && r > 0) tr__clock_fmt(rem, sizeof rem, (double)(total - n) / r);
  else snprintf(rem, sizeof rem, "?");
  if (total > 0) nl = snprintf(left, sizeof left, "%s: %3.0f%%|", desc, 100.0 * (double)n / (double)total);
  else nl = snprintf(left, sizeof left, "%s: %lldit", desc, (long long)n); /* unknown total: "desc: 12it [00:01, 9.50it/s]" */
  if (nl < 0) return 0;
  if (nl >= (int)sizeof left) nl = (int)sizeof left - 1;
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
  if (total <= 0) { snprintf(buf, cap, "%s%s", left, right); return strlen(buf); }
  if (cells < 1) cells = 1; /* tqdm: the bar takes what the text leaves */
  if (cells > 400) cells = 400;
  units = ascii ? 10 : 8; /* tqdm: tenths in ASCII (" 123456789#"), eighths in blocks */
  full = (int)((double)cells * units * (double)(n < total ? n : total) / (double)total);
#define TR__ADD(s, l) do { size_t l_ = (l); if (len + l_ < cap) { memcpy(buf + len, (s), l_); len += l_; } } while (0)
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
/* Under a launcher (mpirun, mpiexec, srun) a rank's output may be a pseudo-terminal whatever the
   launcher's own output is (Open MPI gives every rank one): the user's terminal or file is where the
   launcher writes. Walks up the parent processes (Linux /proc) to the launcher and reads where its fd
   goes: 1, a terminal (its path in term, to measure); 0, a file or a pipe; -1, no launcher found or
   not Linux (then isatty decides). */
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
/* The columns the line may take: the terminal's less one (tqdm), measured at every redraw (at most
   every refresh_seconds), so a resized terminal gets lines of its new width. */
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
/* Cut s to at most cols characters (UTF-8: the bar's blocks take one column each): the whole line, not
   only the bar's cells, so a narrow terminal never wraps it (a wrapped line leaves a row behind at
   every carriage return). */
static void tr__utf8_cut(char *s, int cols) {
  int n = 0;
  for (; *s; s++)
    if (((unsigned char)*s & 0xC0) != 0x80 && n++ == cols) { *s = 0; return; }
}

/* The bar's writes: between tr__bar_io_begin and tr__bar_io_end (nested: the outermost pair counts). A
   pipe's are made with SIGPIPE ignored; the begin writes what the stream holds already (the program's own
   output: the lines that follow never make stdio write it in the middle of one), each line is flushed
   (tr__bar_flush: its errno kept), the end puts the process's SIGPIPE disposition back and notes the
   first failure in b->broken (then nothing more is drawn). EAGAIN and EINTR (a non-blocking stream)
   lose a line, nothing more. */
static void tr__bar_flush(tr__bar *b) {
  errno = 0;
  if (fflush(b->out) != 0 && !b->io_err) b->io_err = errno ? errno : EIO;
}
/* A write to the bar's stream, its errno kept at once: an unbuffered stream (stderr) fails in the write,
   not in the flush after it, and later calls would overwrite errno (ferror alone says EIO for EPIPE). */
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
/* After the bar's writes in a hook: a stream that failed is said once. A closed pipe (EPIPE) in a process
   that SIGPIPE kills fails the run (can_fail: a hook whose failure counts; else, teardown's, it is only
   said); any other error, or a closed pipe in a process that ignores or handles SIGPIPE itself, stops the
   bar alone, said on stderr, training goes on. */
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

/* Terminal: back to the start of the line the cursor is on, erased. When the terminal was narrowed below
   that line's width, a terminal that rewraps lines (tmux, most desktop ones) made it several rows, the
   cursor on the last: go up to the first, erasing each (row by row: erasing to the screen's end from
   the top row makes tmux push the screen into its history). */
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
/* The latest training batch's loss into the postfix: at a redraw of the training bar, and where ctx->loss
   is the training batch's (on_train_epoch_end, on_train_end, a validation's start inside fit). On a
   device ctx->loss is NaN (the loss stays there): the metric train/loss copies it (as nan_guard). */
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
  /* The ended epoch's last state, never drawn: in lines, a loop without on_train_epoch_end; on a terminal,
     when a redraw is due (the time went to what followed that epoch's end: checkpoints). The new epoch
     is drawn at its first batch's end, at 0% only when no line of ours is on screen (the first epoch):
     a fast epoch's 0% would stay on screen while it runs, most of the time in a fast run. */
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
  /* terminal: at most one redraw per refresh interval, the last batch's too (the final state is drawn at
     the end of training; a redraw at every epoch's end cost ~1% of a small model's step time). Lines:
     one every line_seconds within a long epoch or evaluation; the final one comes at its end. */
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
/* Evaluation: on a terminal its bar runs on the line below the training bar and is erased at its end,
   the training bar redrawn with its metrics. In lines, its one line at its end for a standalone run and
   the sanity check; a validation inside an epoch has none, the epoch's line that follows carries its
   metrics; a step loop's validation ends its "epoch" (the steps since the last one): the training line
   with its metrics. A step loop's validation before any step (llm.c validates at step 0) starts the
   training bar, so that it has one to go below and to leave its metrics on. */
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
    int k = snprintf(b->val + len, sizeof b->val - len, "%s%s=%.4g", i ? ", " : "", r->metrics[i].name, r->metrics[i].value);
    if (k < 0 || len + (size_t)k >= sizeof b->val) { b->val[len] = 0; break; }
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

/* Text above the bar (tr_print, callbacks' lines): on a terminal, while a bar is on screen, its lines
   are cleared, the text written, the bar redrawn below it (tqdm.write). Text for another stream (a
   callback's stderr) is handled so only when that stream is a terminal too. */
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
