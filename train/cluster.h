/* train/cluster.h - clusters: what Slurm says about the process, preemption (a signal, a checkpoint, a requeue). A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_CLUSTER_H /* part */
#define TRAIN_CLUSTER_H /* part */
#include "records.h" /* part */

TR__C_BEGIN /* part */
/* =================================================================================================
   CLUSTERS: SLURM AND PREEMPTION
   A job is stopped from outside: Slurm warns with a signal when asked (sbatch --signal=B:USR1@120), then
   sends SIGTERM and SIGKILL. A run of the run layer (tr_run_*, tr_fit) handles both, as Lightning's
   SLURMEnvironment(auto_requeue=True): the preemption signal finishes the step, saves to save_to and with
   requeue puts the job back (rank 0: scontrol requeue); SIGTERM and Ctrl-C save without the requeue; the
   requeued job resumes from save_to by itself, only when this job wrote it. With several processes every
   rank stops at the same step through tr_run_desc.agree (the OR of every rank's TR_STOP_* bits). Signals
   are ISO C's signal(); a program's own handler is left in place. docs/scaling.md ("Under Slurm"). */
typedef struct tr_slurm {
  int on;              /* 1: in a Slurm job (SLURM_JOB_ID set) */
  char job_id[24];     /* SLURM_JOB_ID ("" outside Slurm) */
  int restart_count;   /* SLURM_RESTART_COUNT: 0 on the first run, N after N requeues */
  int srun;            /* 1: srun started this process as a task of a job step (SLURM_STEP_ID set, and
                          not a rank of mpirun, whose ranks inherit the batch shell's SLURM_PROCID 0) */
  int rank, world;     /* SLURM_PROCID and SLURM_NTASKS when srun started it; else 0 and 1 */
  char why[200];       /* a variable that is set but malformed, and its value ("" when none is) */
} tr_slurm;
/* Slurm's variables: 1 in a job, 0 outside, -1 when one is malformed (s->why says which). */
TRAIN_API int tr_slurm_read(tr_slurm *s);

/* Preemption settings, in tr_run_desc.preempt and tr_config.preempt (zero: the defaults). */
typedef struct tr_preempt {
  int signal;          /* the signal that asks the run to stop after its step with a checkpoint to save_to;
                          0 = SIGUSR1 (sbatch --signal=B:USR1@N); TR_NO: none. Not SIGINT, SIGTERM,
                          SIGKILL, SIGSTOP, SIGCONT (Slurm sends it to every job it ends) or a fault */
  int requeue;         /* TR_YES: then requeue the Slurm job (rank 0: scontrol requeue $SLURM_JOB_ID);
                          needs save_to, where the requeued job resumes from */
  int resume;          /* TR_NO: a requeued job (SLURM_RESTART_COUNT >= 1) does not resume from save_to by
                          itself; default: it does when no resume_from is given and save_to exists */
} tr_preempt;
/* Check settings; who names the struct in the message ("tr_run_setup: tr_run_desc."). TR_OK, or
   TR_ERR_INVALID with why saying what is wrong and what would be right. */
TRAIN_API tr_err tr_preempt_check(const tr_preempt *p, const char *save_to, const char *who, char *why, size_t cap);
/* The preemption signals counted since the run (or tr_fit) installed its handler (0 without one). */
TRAIN_API int tr_preempt_requested(void);

/* What a rank contributes to tr_run_desc.agree, and what the OR of every rank's means. */
enum { TR_STOP_SIGNAL = 1,   /* SIGINT or SIGTERM */
       TR_STOP_PREEMPT = 2,  /* the preemption signal */
       TR_STOP_FAILED = 4,   /* the run failed on that rank */
       TR_STOP_HOOK = 8,     /* a hook asked to stop (HK_STOP) */
       TR_STOP_SIGTERM = 16 }; /* with TR_STOP_SIGNAL: it was SIGTERM, so that every rank's message names it */
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
#if !defined(HK_NO_SIGNALS) && !defined(__wasi__)
#  include <signal.h>
#  define TR__SIGNALS 1
#endif

/* A decimal number of at most 9 digits (no sign, nothing after it): its value, else -1. */
static long tr__env_num(const char *v) {
  long n = 0;
  int k = 0;
  if (!v) return -1;
  for (; *v; v++, k++) {
    if (*v < '0' || *v > '9' || k == 9) return -1;
    n = n * 10 + (*v - '0');
  }
  return k ? n : -1;
}

TRAIN_API int tr_slurm_read(tr_slurm *s) {
  const char *job = getenv("SLURM_JOB_ID"), *restarts = getenv("SLURM_RESTART_COUNT");
  const char *procid = getenv("SLURM_PROCID"), *ntasks = getenv("SLURM_NTASKS");
  long r, w, n;
  memset(s, 0, sizeof *s);
  s->world = 1;
  if (!job || !job[0]) return 0;
#define TR__BAD(...) do { if (!s->why[0]) snprintf(s->why, sizeof s->why, __VA_ARGS__); } while (0)
  if (tr__env_num(job) < 0 || strlen(job) >= sizeof s->job_id) TR__BAD("SLURM_JOB_ID is '%.40s': not a job id (digits)", job);
  else { s->on = 1; memcpy(s->job_id, job, strlen(job) + 1); }
  if (restarts && (n = tr__env_num(restarts)) < 0) TR__BAD("SLURM_RESTART_COUNT is '%.40s': not a count (0, 1, ...)", restarts);
  else if (restarts) s->restart_count = (int)n;
  if (getenv("SLURM_STEP_ID") && !getenv("OMPI_COMM_WORLD_RANK")) { /* a task of srun, not a rank of mpirun */
    r = tr__env_num(procid);
    w = tr__env_num(ntasks);
    if (r < 0 || w < 1 || r >= w)
      TR__BAD("SLURM_PROCID '%.20s' and SLURM_NTASKS '%.20s' are not a task's rank (0 .. N-1) and the tasks' count N",
              procid ? procid : "(unset)", ntasks ? ntasks : "(unset)");
    else { s->srun = 1; s->rank = (int)r; s->world = (int)w; }
  }
#undef TR__BAD
  return s->why[0] ? -1 : s->on;
}

/* The global rank from the launcher's environment (mpirun, MPICH, PMIx, srun, torchrun); 0 without one. */
TR__SHARED int tr__launcher_rank(void) {
  static const char *const vars[] = { "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK" };
  size_t i;
  for (i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    char *end;
    long r = v ? strtol(v, &end, 10) : -1;
    if (v && end != v && *end == 0 && r >= 0 && r <= INT_MAX) return (int)r;
  }
  return 0;
}

/* The signals a preemption may not use, and why (the names as kill -l gives them). */
static const char *tr__preempt_refused(int sig, const char **name) {
  static const struct { int sig; const char *name, *why; } no[] = {
#ifdef TR__SIGNALS
    { SIGINT, "SIGINT", "it stops the run already" }, { SIGTERM, "SIGTERM", "it stops the run already" },
    { SIGSEGV, "SIGSEGV", "it reports a fault" }, { SIGFPE, "SIGFPE", "it reports a fault" },
    { SIGILL, "SIGILL", "it reports a fault" }, { SIGABRT, "SIGABRT", "it reports a fault" },
#  ifdef SIGKILL
    { SIGKILL, "SIGKILL", "it cannot be caught" }, { SIGSTOP, "SIGSTOP", "it cannot be caught" },
    { SIGCONT, "SIGCONT", "Slurm sends it to every job it ends or requeues" },
    { SIGCHLD, "SIGCHLD", "every child process that ends sends it" }, { SIGBUS, "SIGBUS", "it reports a fault" },
#  endif
#endif
    { 0, "", "" } };
  size_t i;
  for (i = 0; no[i].sig; i++)
    if (no[i].sig == sig) { *name = no[i].name; return no[i].why; }
  return NULL;
}

/* "SIGUSR1" for the common choices, else "signal N". */
static const char *tr__sig_name(int sig, char *buf, size_t cap) {
  const char *name = NULL;
#if defined(TR__SIGNALS) && defined(SIGUSR1)
  if (sig == SIGUSR1) name = "SIGUSR1";
  if (sig == SIGUSR2) name = "SIGUSR2";
  if (sig == SIGHUP) name = "SIGHUP";
  if (sig == SIGQUIT) name = "SIGQUIT";
  if (sig == SIGALRM) name = "SIGALRM";
#endif
  if (!name && !tr__preempt_refused(sig, &name)) name = NULL;
  if (name) snprintf(buf, cap, "%s", name);
  else snprintf(buf, cap, "signal %d", sig);
  return buf;
}

/* The agreed stop signal's name, the same on every rank (scancel, mpirun and pods send SIGTERM, Ctrl-C SIGINT). */
TR__SHARED const char *tr__stop_name(int64_t stops) { return (stops & TR_STOP_SIGTERM) ? "SIGTERM" : "Ctrl-C"; }
/* This process's own stop signal, as TR_STOP_SIGTERM (0: SIGINT, or none). */
TR__SHARED int64_t tr__sigterm_bit(void) {
#ifdef TR__SIGNALS
  if (hk_stop_signal() == SIGTERM) return TR_STOP_SIGTERM;
#endif
  return 0;
}

/* The signal number the settings mean: 0 for none. */
static int tr__preempt_sig(const tr_preempt *p) {
  if (!p || p->signal == TR_NO) return 0;
  if (p->signal) return p->signal;
#if defined(TR__SIGNALS) && defined(SIGUSR1)
  return SIGUSR1;
#else
  return 0; /* no SIGUSR1 on this platform: give a number */
#endif
}

TRAIN_API tr_err tr_preempt_check(const tr_preempt *p, const char *save_to, const char *who, char *why, size_t cap) {
  const char *name = "", *no;
  if (!who) who = "";
  if (!p) return TR_OK;
  if (p->signal != TR_NO && (p->signal < 0 || p->signal > 64)) {
    snprintf(why, cap, "%spreempt.signal is %d: give a signal's number (1 .. 64, e.g. SIGUSR1), 0 for SIGUSR1 or TR_NO for none",
             who, p->signal);
    return TR_ERR_INVALID;
  }
  if (p->signal != TR_NO && (no = tr__preempt_refused(p->signal, &name)) != NULL) {
    snprintf(why, cap, "%spreempt.signal is %d (%s): %s; give another (SIGUSR1 or SIGUSR2, as sbatch --signal=B:USR1@120 "
             "sends it) or TR_NO for none", who, p->signal, name, no);
    return TR_ERR_INVALID;
  }
  if (p->requeue != TR_YES && p->requeue != TR_NO && p->requeue != 0) {
    snprintf(why, cap, "%spreempt.requeue is %d: give TR_YES, TR_NO or 0 (the default: no requeue)", who, p->requeue);
    return TR_ERR_INVALID;
  }
  if (p->resume != TR_YES && p->resume != TR_NO && p->resume != 0) {
    snprintf(why, cap, "%spreempt.resume is %d: give TR_YES, TR_NO or 0 (the default: a requeued job resumes)", who, p->resume);
    return TR_ERR_INVALID;
  }
  if (p->requeue == TR_YES && (!save_to || !save_to[0])) {
    snprintf(why, cap, "%spreempt.requeue is TR_YES but save_to is not set: the requeued job resumes from save_to; give it "
             "(a path on a file system the job's next nodes see)", who);
    return TR_ERR_INVALID;
  }
  if (p->requeue == TR_YES && p->signal == TR_NO) {
    snprintf(why, cap, "%spreempt.requeue is TR_YES but preempt.signal is TR_NO: nothing would ask for the requeue; give a "
             "signal (0: SIGUSR1)", who);
    return TR_ERR_INVALID;
  }
  return TR_OK;
}

/* ---- the preemption signal's handler: it only counts (installs nest; the outermost one counts) ---- */
#ifdef TR__SIGNALS
static volatile sig_atomic_t tr__preempt_n;
static int tr__preempt_signo, tr__preempt_depth;
static void (*tr__preempt_prev)(int);
static void tr__on_preempt(int sig) {
  if (tr__preempt_n < 127) tr__preempt_n = (sig_atomic_t)(tr__preempt_n + 1);
  signal(sig, tr__on_preempt); /* System V-style signal() reset the handler before calling it */
}
#endif
/* 1: p's handler installed; 0: none to install; -1: the program's own handler (or SIG_IGN), left alone. */
TR__SHARED int tr__preempt_on(const tr_preempt *p) {
#ifdef TR__SIGNALS
  int sig = tr__preempt_sig(p);
  void (*prev)(int);
  if (!sig) return 0;
  if (tr__preempt_depth > 0) { /* nested (a tr_fit inside a loop of yours): the outer handler counts */
    if (sig != tr__preempt_signo) return -1;
    tr__preempt_depth++;
    return 1;
  }
  prev = signal(sig, tr__on_preempt);
  if (prev == SIG_ERR) return 0;
  if (prev != SIG_DFL) { signal(sig, prev); return -1; }
  tr__preempt_prev = prev;
  tr__preempt_signo = sig;
  tr__preempt_n = 0;
  tr__preempt_depth = 1;
  return 1;
#else
  (void)p;
  return 0;
#endif
}
/* Undo tr__preempt_on when *on (its answer) says it installed, and clear *on. */
TR__SHARED void tr__preempt_off(int *on) {
  int mine = *on > 0;
  *on = 0;
#ifdef TR__SIGNALS
  if (!mine || tr__preempt_depth <= 0 || --tr__preempt_depth > 0) return;
  signal(tr__preempt_signo, tr__preempt_prev);
#else
  (void)mine;
#endif
}
TRAIN_API int tr_preempt_requested(void) {
#ifdef TR__SIGNALS
  return (int)tr__preempt_n;
#else
  return 0;
#endif
}

/* This rank's TR_STOP_* bits now, agreed with the other ranks when agree is given (every rank calls
   it at the same points, whatever its bits). */
TR__SHARED int64_t tr__stops(int interrupts, int preempted, int failed, int hook_stop, int64_t (*agree)(void *user, int64_t stops),
                             void *user) {
  int64_t s = (interrupts ? TR_STOP_SIGNAL | tr__sigterm_bit() : 0) | (preempted ? TR_STOP_PREEMPT : 0) |
              (failed ? TR_STOP_FAILED : 0) | (hook_stop ? TR_STOP_HOOK : 0);
  return agree ? agree(user, s) : s;
}

/* In a Slurm job a second SIGTERM is no second request (Slurm signals every process, mpirun again): the
   stop signals only count, so the step is saved; the hard stop is Slurm's SIGKILL. */
TR__SHARED int tr__slurm_job(void) { const char *j = getenv("SLURM_JOB_ID"); return j && j[0]; } /* "": no job (as tr_slurm_read) */


/* A requeued job's checkpoint: save_to when this is a Slurm restart, the settings allow it and the file is
   there; NULL otherwise. */
TR__SHARED const char *tr__preempt_resume(const tr_preempt *p, const char *save_to) {
  tr_slurm s;
  FILE *f;
  if (!save_to || !save_to[0] || (p && p->resume == TR_NO) || tr_slurm_read(&s) < 1 || s.restart_count < 1) return NULL;
  if (!(f = fopen(save_to, "rb"))) return NULL;
  fclose(f);
  return save_to;
}

/* The message of a run stopped on a signal, after its save (save_err NULL: saved to saved_to; saved_to
   NULL: nothing saved); with a preemption's requeue, rank 0 requeues now. */
TR__SHARED void tr__preempt_stopped(char *out, size_t cap, int64_t stops, int64_t step, const char *saved_to, const char *save_err,
                                    const tr_preempt *p, int rank) {
  char sig[24], cmd[64];
  size_t n;
  int rc, preempted = (stops & TR_STOP_PREEMPT) != 0;
  tr_slurm s;
  if (preempted) n = tr__msg_at(out, cap, 0, "preempted (%s): stopped after step %lld", tr__sig_name(tr__preempt_sig(p), sig, sizeof sig),
                                (long long)step);
  else n = tr__msg_at(out, cap, 0, "interrupted (%s): stopped after step %lld", tr__stop_name(stops), (long long)step);
  if (n >= cap) return;
  if (save_err) n = tr__msg_at(out, cap, n, "; saving it to %s failed: %s", saved_to, save_err);
  else if (saved_to) n = tr__msg_at(out, cap, n, "; its state saved to %s", saved_to);
  if (n >= cap || !preempted || !p || p->requeue != TR_YES) return;
  if (save_err || !saved_to) { tr__msg_at(out, cap, n, "; the job is not requeued (nothing to resume from)"); return; }
  if (tr_slurm_read(&s) < 1) { tr__msg_at(out, cap, n, "; not requeued: not in a Slurm job (SLURM_JOB_ID)"); return; }
  if (rank != 0) { tr__msg_at(out, cap, n, "; rank 0 requeues job %s", s.job_id); return; }
  snprintf(cmd, sizeof cmd, "scontrol requeue %s", s.job_id); /* digits only: tr_slurm_read checked */
  if (!tr__on_path("scontrol")) {
    tr__msg_at(out, cap, n, "; job %s is not requeued: scontrol is not on PATH (Slurm's client commands are not installed "
               "where this job runs, or PATH lacks them): requeue it yourself (%s)", s.job_id, cmd);
    return;
  }
  fflush(NULL);
  rc = system(cmd);
  if (rc == 0) tr__msg_at(out, cap, n, "; job %s requeued", s.job_id);
  else if (rc == -1) tr__msg_at(out, cap, n, "; requeueing job %s failed: %s could not be run (%s)", s.job_id, cmd, strerror(errno));
  else tr__msg_at(out, cap, n, "; requeueing job %s failed (%s exited with status %d: was the job submitted with --requeue, "
                  "and may this user requeue it?)", s.job_id, cmd, tr__exit_status(rc));
}

/* The start line under Slurm (0 outside it: nothing to say). installed: tr__preempt_on's answer. */
TR__SHARED int tr__slurm_line(char *out, size_t cap, const tr_preempt *p, int installed, const char *save_to, const char *resume) {
  tr_slurm s;
  char sig[24];
  size_t n;
  int on = tr_slurm_read(&s);
  if (on == 0) return 0;
  if (on < 0 && !s.on) { tr__msg(out, cap, "Slurm: %s", s.why); return 1; }
  n = tr__msg_at(out, cap, 0, "Slurm job %s, restart %d", s.job_id, s.restart_count);
  if (s.srun && n < cap) n = tr__msg_at(out, cap, n, ", task %d of %d (srun)", s.rank, s.world);
  if (on < 0 && n < cap) n = tr__msg_at(out, cap, n, " (%s)", s.why);
  if (n >= cap) return 1;
  tr__sig_name(tr__preempt_sig(p), sig, sizeof sig);
  if (installed > 0)
    n = tr__msg_at(out, cap, n, "; %s %s%s%s", sig, save_to ? "saves to " : "stops the run (no save_to: nothing saved)",
                   save_to ? save_to : "", p && p->requeue == TR_YES ? " and requeues the job" : "");
  else if (installed < 0) n = tr__msg_at(out, cap, n, "; %s has a handler of the program's: the run leaves it alone", sig);
  else n = tr__msg_at(out, cap, n, "; no preemption signal");
  if (resume && n < cap) tr__msg_at(out, cap, n, "; resuming from %s (the job was requeued)", resume);
  return 1;
}
/* save_to's directory must exist when the run starts (after setup: a logger may make it), not be found
   missing at Ctrl-C with the state lost. 0, or why (who first). */
TR__SHARED int tr__save_to_check(const char *save_to, const char *who, char *why, size_t cap) {
#ifdef TR__POSIX
  struct stat st;
  char dir[1024];
  const char *slash;
  size_t n;
  if (!save_to || !save_to[0]) return 0;
  slash = strrchr(save_to, '/');
  n = !slash ? 0 : slash == save_to ? 1 : (size_t)(slash - save_to);
  if (n >= sizeof dir) return 0; /* (a path that long: left to the save) */
  memcpy(dir, n ? save_to : ".", n ? n : 1);
  dir[n ? n : 1] = 0;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    tr__msg(why, cap, "%ssave_to '%s': its directory '%s' %s: Ctrl-C, a preemption and requested checkpoints save there; "
             "make the directory first", who, save_to, dir, stat(dir, &st) != 0 ? "does not exist" : "is not a directory");
    return -1;
  }
  if (access(dir, W_OK) != 0) {
    tr__msg(why, cap, "%ssave_to '%s': its directory '%s' cannot be written (%s): Ctrl-C, a preemption and requested "
             "checkpoints save there", who, save_to, dir, strerror(errno));
    return -1;
  }
  if (stat(save_to, &st) == 0 && S_ISDIR(st.st_mode)) {
    tr__msg(why, cap, "%ssave_to '%s' is a directory: give the checkpoint's file name (e.g. '%s/last.ckpt')", who, save_to,
             save_to);
    return -1;
  }
#else
  (void)save_to; (void)who; (void)why; (void)cap;
#endif
  return 0;
}
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
