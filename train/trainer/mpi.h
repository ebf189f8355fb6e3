/* train/trainer/mpi.h - the MPI strategy of the trainer (TRAIN_MPI). A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_TRAINER_MPI_H /* part */
#define TRAIN_TRAINER_MPI_H /* part */
#include "cuda.h" /* part */

TR__C_BEGIN /* part */
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* =================================================================================================
   MPI STRATEGY (TRAIN_MPI)
   Data parallelism across processes, Lightning's DDP on MPI: every rank holds the whole model, trains
   on its own shard of each epoch's batches, and the gradients are summed in rank order once per
   optimizer step (the gradient point), so the parameters stay bit-identical on every rank. Collectives
   run only at the trainer's fixed points (the gradient point and the agreement points: one small
   all-reduce of TR__VOTE below), on every rank in the same order, never inside a hook. Mismatched ranks,
   a save or lr change on some ranks only, a rank that never arrives (tr_desc.mpi_timeout): every rank
   fails with one message, never a hang. tr_desc.zero shards the optimizer state (ZeRO-1); checkpoints
   stay whole. Without TRAIN_MPI, and in one process, nothing here runs. The rules, each agreement
   point, what hooks see, the limits and the costs: docs/scaling.md in the hooks.h repository. */
/* Each agreement point is told apart by its line (site = 2 * line): ranks at different points are out of step. */
#define tr__dist_agree(t) tr__dist_agree_at((t), 2 * __LINE__)
/* How a checkpoint file is written (trainer/checkpoint.h hands it over to tr__dist_save_file). */
typedef tr_err (*tr__write_fn)(tr_trainer *t, const char *path);
#ifdef TRAIN_MPI
#ifdef TR__POSIX
#  include <poll.h> /* poll(NULL, 0, ms): a sleep that strict C99 headers still declare */
#endif

#define TR__DIST_PATH 1024        /* a checkpoint path sent from rank 0: at most this many bytes */
#define TR__DIST_DIR 4096         /* the run's directory sent from rank 0: Linux's PATH_MAX, a path open() takes */
#define TR__DIST_CHUNK (1 << 20)  /* floats per collective call (counts are ints; bounds the gather buffer) */
#define TR__FACTS 24              /* int64 per rank in a start agreement: where, this rank's error, facts */
#define TR__ZERO_BLOCK 16         /* zero: shards are whole blocks of floats (64 bytes), the exchange's unit */
#define TR__ZERO_TAG 29           /* zero: the tag of the shards sent to rank 0 while it writes a checkpoint */

/* The vote of an agreement point: X(field, how two ranks' values combine into one). */
#define TR__VOTE(X) \
  X(FAILED,   a + b)              /* ranks that have failed */ \
  X(FIRST,    a < b ? a : b)      /* the lowest failed rank (W when none) */ \
  X(SIGNALS,  a | b)              /* hk_flow signal bits */ \
  X(REQUESTS, a | b)              /* HK_REQUEST_* bits */ \
  X(SIGINT,   a > b ? a : b)      /* Ctrl-C / SIGTERM count */ \
  X(SIGTERM,  a | b)              /* TR_STOP_SIGTERM: a rank's stop signal was SIGTERM (every rank's message names it) */ \
  X(PREEMPT,  a > b ? a : b)      /* the preemption signal came (train/cluster.h) */ \
  X(SUM,      a + b)              /* micro-batches that ran backward; evaluation batches counted */ \
  X(LEAST,    a < b ? a : b)      /* batch counts: the smallest and the largest */ \
  X(MOST,     a > b ? a : b) \
  X(SITE_LO,  a < b ? a : b)      /* which agreement point (its line): ranks that differ are out of step */ \
  X(SITE_HI,  a > b ? a : b) \
  X(LR_MOVED, a + b)              /* ranks whose learning rate changed since the last vote (tr__dist_lr) */ \
  X(LR_FROM,  a < b ? a : b)      /* the lowest of them (W when none): every rank takes its learning rate */ \
  X(LR_LO,    a < b ? a : b)      /* their learning rates' fingerprints: the smallest and the largest */ \
  X(LR_HI,    a > b ? a : b)
enum {
#define TR__X(name, op) TR__V_##name,
  TR__VOTE(TR__X)
#undef TR__X
  TR__V_COUNT
};

typedef struct tr__dist {
  MPI_Comm comm;            /* the trainer's own duplicate of MPI_COMM_WORLD */
  MPI_Datatype vote_type;   /* one vote: TR__V_COUNT int64 */
  MPI_Op vote_op;           /* tr__dist_combine */
  int rank, world;
  int broken;               /* the ranks were out of step: no collective until the next run's start */
  int dead;                 /* a start agreement timed out: no collective ever again (a rank is gone) */
  int64_t most;             /* the largest rank-local batch count of the last tr__dist_shard */
  double lr[2];             /* the learning rate as last agreed: optim.lr and tr_lr_scale's scale */
  float *gather;            /* world * min(n_params, TR__DIST_CHUNK) floats (three or more ranks) */
  double *sums;             /* world evaluation loss sums */
  int64_t *facts;           /* world * TR__FACTS: every rank's facts of the last start agreement */
  /* zero (tr_desc.zero): */
  size_t per;               /* floats per shard (a multiple of TR__ZERO_BLOCK) */
  MPI_Datatype block;       /* TR__ZERO_BLOCK floats: the exchange's unit, so displacements fit an int */
  int *counts, *displs;     /* world each: one exchange round's blocks per rank, and where they go */
  float *piece;             /* rank 0: a chunk of another rank's shard, received while writing a checkpoint */
  int opt_done;             /* rank 0: this save received every shard */
#ifdef TRAIN_CUDA
  ncclComm_t nccl;          /* an on_device model's gradients go through NCCL (NULL: none) */
#endif
  char paths[HK_MAX_CHECKPOINT_PATHS][TR__DIST_PATH];
} tr__dist;

static int tr__dist_we_initialised;
static void tr__dist_finalize(void) {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

static void tr__dist_combine(void *in, void *inout, int *len, MPI_Datatype *type) {
  const int64_t *x = (const int64_t *)in;
  int64_t *y = (int64_t *)inout;
  int i;
  (void)type;
  for (i = 0; i < *len; i++, x += TR__V_COUNT, y += TR__V_COUNT) {
#define TR__X(name, op) { int64_t a = x[TR__V_##name], b = y[TR__V_##name]; y[TR__V_##name] = (op); }
    TR__VOTE(TR__X)
#undef TR__X
  }
}

static tr_err tr__dist_fail(tr_trainer *t, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return tr__fail(t, TR_ERR_COMM, "%s failed: %s", what, msg);
}

/* Wait for a nonblocking collective of a start agreement, at most `limit` seconds (< 0: forever).
   1 when it completed (rc its result), 0 when the time ran out (it stays pending: MPI cannot cancel a
   collective, so the memory it writes to is never freed). The first millisecond polls, then 1 ms naps. */
static int tr__dist_wait(MPI_Request *rq, double limit, int *rc) {
  double start = MPI_Wtime(), now;
  int done = 0;
  for (;;) {
    *rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
    if (*rc != MPI_SUCCESS || done) return 1;
    now = MPI_Wtime();
    if (limit >= 0 && now - start > limit) return 0;
#ifdef TR__POSIX
    if (now - start > 1e-3) (void)poll(NULL, 0, 1);
#endif
  }
}

static const char *tr__dist_timeout_hint =
  "a rank that returned or failed before this call (e.g. on an error of its own before tr_fit) leaves the "
  "others waiting: every rank must call tr_init, tr_fit, tr_validate, tr_test and tr_predict alike; "
  "tr_desc.mpi_timeout sets the limit. This trainer cannot communicate any more: end the job "
  "(MPI_Abort(MPI_COMM_WORLD, 1))";

/* "rank 0: 3, rank 1: 1" (a value per rank; beyond 8 ranks, each distinct value with its first ranks). */
static void tr__dist_values(char *out, size_t cap, const int64_t *all, int world, int at, char kind) {
  size_t len = 0;
  int r, k, shown = 0;
#define TR__PUT(...) (len = tr__msg_at(out, cap, len, __VA_ARGS__)) /* "..." where it is cut */
#define TR__VAL(v) do { if (kind == 'b') TR__PUT("%s", (v) ? "set" : "not set"); \
    else if (kind == 'd') { double d_; memcpy(&d_, &(v), sizeof d_); TR__PUT("%g", d_); } \
    else if (kind == 'x') TR__PUT("%016llx", (unsigned long long)(v)); else TR__PUT("%lld", (long long)(v)); } while (0)
  out[0] = 0;
  if (world <= 8) {
    for (r = 0; r < world; r++) { TR__PUT("%srank %d: ", r ? ", " : "", r); TR__VAL(all[(size_t)r * TR__FACTS + at]); }
    return;
  }
  for (r = 0; r < world && shown < 4; r++) { /* a value not seen on an earlier rank */
    int64_t v = all[(size_t)r * TR__FACTS + at], count = 0, listed = 0;
    for (k = 0; k < r && all[(size_t)k * TR__FACTS + at] != v; k++) {}
    if (k < r) continue;
    TR__PUT("%s", shown++ ? "; " : "");
    TR__VAL(v);
    TR__PUT(" on rank");
    for (k = r; k < world; k++)
      if (all[(size_t)k * TR__FACTS + at] == v && count++ < 3) TR__PUT("%s %d", listed++ ? "," : "", k);
    if (count > 3) TR__PUT(" and %lld more", (long long)(count - 3));
  }
  if (shown == 4) TR__PUT("; ...");
#undef TR__VAL
#undef TR__PUT
}

/* One start agreement: every rank's facts (where it is, its own error, then n named facts) gathered,
   with tr_desc.mpi_timeout. Then every rank knows the same: a rank's error is sent to every other
   rank ("rank 1: ..."), and facts that differ between ranks are one error naming each with its values
   per rank. Returns this rank's outcome (its own error first). */
typedef struct tr__fact { const char *name; char kind; int64_t v; } tr__fact; /* kind: i int, b set, d double, x hash */
static const char *const tr__dist_where[] = { "", "tr_init", "tr_fit", "tr_validate", "tr_test", "tr_predict", "tr_fit (after resuming)" };
enum { TR__AT_INIT = 1, TR__AT_FIT, TR__AT_VALIDATE, TR__AT_TEST, TR__AT_PREDICT, TR__AT_RESUMED };

static tr_err tr__dist_gather(tr_trainer *t, tr__dist *d, int where, tr_err failed, const tr__fact *f, int n, const char *what) {
  int64_t mine[TR__FACTS];
  const int64_t *all = d->facts;
  int r, i, rc, first = -1, differ = 0;
  MPI_Request rq;
  char vals[320];
  size_t len;
  if (d->dead)
    return failed ? failed : tr__fail(t, TR_ERR_COMM, "%s: an earlier agreement between the ranks timed out, so this "
                                      "trainer cannot communicate any more (end the job and start it again)", tr__dist_where[where]);
  d->broken = 0; /* a new run: the ranks meet here again */
  memset(mine, 0, sizeof mine);
  mine[0] = where;
  mine[1] = failed;
  for (i = 0; i < n && !failed; i++) mine[2 + i] = f[i].v;
  rc = MPI_Iallgather(mine, TR__FACTS, MPI_INT64_T, d->facts, TR__FACTS, MPI_INT64_T, d->comm, &rq);
  if (rc == MPI_SUCCESS && !tr__dist_wait(&rq, t->tr__mpi_timeout, &rc)) {
    d->dead = 1;
    if (failed) return failed;
    return tr__fail(t, TR_ERR_COMM, "%s: not every rank arrived within %g s (%d ranks); %s", tr__dist_where[where],
                    t->tr__mpi_timeout, d->world, tr__dist_timeout_hint);
  }
  if (rc != MPI_SUCCESS) { d->dead = 1; return failed ? failed : tr__dist_fail(t, rc, "MPI_Iallgather (start agreement)"); }
  for (r = 0; r < d->world; r++) if (all[(size_t)r * TR__FACTS] != where) break;
  if (r < d->world) { /* every rank can tell: nobody sends anything more */
    if (failed) return failed;
    len = tr__msg_at(t->error, sizeof t->error, 0, "%s: the ranks called different functions:", tr__dist_where[where]);
    for (r = 0; r < d->world && len < sizeof t->error; r++) {
      int64_t w = all[(size_t)r * TR__FACTS];
      len = tr__msg_at(t->error, sizeof t->error, len, "%s rank %d in %s", r ? "," : "", r,
                       w >= 1 && w <= TR__AT_RESUMED ? tr__dist_where[w] : "?");
    }
    t->tr__err = TR_ERR_INVALID;
    return TR_ERR_INVALID;
  }
  for (r = 0; r < d->world && first < 0; r++) if (all[(size_t)r * TR__FACTS + 1]) first = r;
  if (first >= 0) { /* the first failed rank tells every other rank why */
    struct { char msg[sizeof t->error]; } why;
    int64_t code = all[(size_t)first * TR__FACTS + 1];
    memset(&why, 0, sizeof why);
    if (d->rank == first) memcpy(why.msg, t->error, sizeof why.msg);
    rc = MPI_Bcast(&why, (int)sizeof why, MPI_BYTE, first, d->comm);
    if (failed) return failed;
    if (rc != MPI_SUCCESS) return tr__dist_fail(t, rc, "MPI_Bcast (error message)");
    why.msg[sizeof why.msg - 1] = 0;
    return tr__fail(t, code > TR_OK && code < TR_ERR_COUNT ? (tr_err)code : TR_ERR_COMM, "rank %d: %s", first, why.msg);
  }
  len = tr__msg_at(t->error, sizeof t->error, 0, "%s: the ranks differ in %s:", tr__dist_where[where], what);
  for (i = 0; i < n; i++) {
    for (r = 1; r < d->world && all[(size_t)r * TR__FACTS + 2 + i] == all[2 + i]; r++) {}
    if (r == d->world) continue;
    tr__dist_values(vals, sizeof vals, all, d->world, 2 + i, f[i].kind);
    if (len < sizeof t->error) len = tr__msg_at(t->error, sizeof t->error, len, "%s %s (%s)", differ ? ";" : "", f[i].name, vals);
    differ++;
  }
  if (!differ) { t->error[0] = 0; return TR_OK; }
  t->tr__err = TR_ERR_INVALID;
  return TR_ERR_INVALID;
}

static uint64_t tr__dist_hash(uint64_t h, const void *p, size_t n) { return tr__fnv(h, (const unsigned char *)p, n); }

/* THE LEARNING RATE: every vote also agrees on it. A rank whose base lr (optim.lr: lr_finder's
   suggestion) or tr_lr_scale's scale changed since the last vote (a hook on some ranks only, a
   rank-zero-only hook) has "moved"; when some ranks moved, every rank takes the lowest moved rank's
   values (one broadcast, only then); ranks that moved to different values (a scale computed from a
   rank's own loss) fail every rank, naming each rank's values. */
static void tr__dist_lr_now(const tr_trainer *t, double lr[2]) {
  lr[0] = t->optim.lr;
  lr[1] = t->run && t->run->lr_state.scale > 0 ? t->run->lr_state.scale : 1.0;
}
static int64_t tr__dist_lr_mark(const tr_trainer *t, const tr__dist *d, int64_t *fingerprint) {
  double now[2];
  tr__dist_lr_now(t, now);
  *fingerprint = (int64_t)(tr__dist_hash(TR__FNV_START, now, sizeof now) >> 1); /* >= 0: the sentinels stay outside */
  return memcmp(now, d->lr, sizeof now) != 0;
}
static void tr__dist_lr(tr_trainer *t, tr__dist *d, const int64_t *v) {
  double lr[2];
  int r, rc;
  tr__dist_lr_now(t, lr);
  if (v[TR__V_LR_MOVED] > 0 && v[TR__V_LR_LO] != v[TR__V_LR_HI]) { /* moved differently: no rank's is the one */
    char msg[sizeof t->error];
    size_t len;
    rc = MPI_Allgather(lr, 2, MPI_DOUBLE, d->facts, 2, MPI_DOUBLE, d->comm); /* (d->facts: room for 24 int64 per rank) */
    len = tr__msg_at(msg, sizeof msg, 0, "the ranks changed the learning rate differently (tr_lr_scale / tr_lr_set or lr_finder "
                     "giving each rank its own value, e.g. from its own train/loss); change it alike on every rank (from "
                     "values that are the same everywhere, such as val/loss) or on one rank only (hk_opts.rank_zero_only: "
                     "every rank then takes it): base lr x scale per rank:");
    for (r = 0; r < d->world && rc == MPI_SUCCESS && len < sizeof msg; r++) {
      double x[2];
      memcpy(x, (const double *)d->facts + 2 * r, sizeof x);
      len = tr__msg_at(msg, sizeof msg, len, "%s rank %d: %g x %g", r ? "," : "", r, x[0], x[1]);
    }
    if (rc != MPI_SUCCESS) tr__dist_fail(t, rc, "MPI_Allgather (learning rates)");
    else if (!t->tr__err) tr__fail(t, TR_ERR_INVALID, "%s", msg);
  } else if (v[TR__V_LR_MOVED] > 0 && v[TR__V_LR_MOVED] < d->world) { /* some moved, alike: every rank takes theirs */
    rc = MPI_Bcast(lr, 2, MPI_DOUBLE, (int)v[TR__V_LR_FROM], d->comm);
    if (rc != MPI_SUCCESS) tr__dist_fail(t, rc, "MPI_Bcast (learning rate)");
    else if (memcmp(lr, d->lr, sizeof lr) != 0 || d->rank == (int)v[TR__V_LR_FROM]) {
      t->optim.lr = lr[0];
      if (t->run) t->run->lr_state.scale = lr[1];
      t->lr = tr__current_lr(t);
    }
  }
  memcpy(d->lr, lr, sizeof lr);
}

/* More ranks on a host than it has cores: Open MPI's waiting ranks busy-poll and take the cores the
   computing ones need (4 ranks on 2 cores: 16-64 ms a step instead of 0.3-0.5 ms). Ranks on one host
   are the ones that share memory (MPI_Comm_split_type), not the ones with one host name: two hosts
   may report the same name. Each rank compares its host's rank count with the cores it sees
   (sysconf); rank 0 says it, once per process, with the fix (not when the run has it already). */
static void tr__dist_host_check(tr_trainer *t, tr__dist *d) {
  static int said;
  MPI_Comm host;
  long n = 1;
  int local = 1;
  int64_t mine, worst = 0;
#if defined(TR__POSIX) && defined(_SC_NPROCESSORS_ONLN)
  n = sysconf(_SC_NPROCESSORS_ONLN);
#endif
  if (n < 1 || n > (1L << 20)) n = 1;
  { const char *y = getenv("OMPI_MCA_mpi_yield_when_idle"); /* mpirun --mca mpi_yield_when_idle 1 sets it */
    if (y && atoi(y) > 0) n = 1L << 20; }
  if (MPI_Comm_split_type(d->comm, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &host) == MPI_SUCCESS) {
    MPI_Comm_size(host, &local);
    MPI_Comm_free(&host);
  }
  /* the host with the most ranks beyond its cores: excess, ranks and cores packed into one MAX */
  mine = local > n ? ((int64_t)(local - n) << 42) | ((int64_t)local << 21) | (int64_t)n : 0;
  if (MPI_Reduce(&mine, &worst, 1, MPI_INT64_T, MPI_MAX, 0, d->comm) != MPI_SUCCESS || d->rank != 0 || !worst || said) return;
  said = 1;
  fprintf(t->tr__log ? t->tr__log : stderr, "train.h: %lld ranks share a host that has %lld cores: Open MPI's waiting ranks "
          "busy-poll and slow every step (many times over); run with mpirun --mca mpi_yield_when_idle 1, or fewer ranks per host\n",
          (long long)((worst >> 21) & ((1 << 21) - 1)), (long long)(worst & ((1 << 21) - 1)));
  fflush(t->tr__log ? t->tr__log : stderr);
}

/* zero: floats per shard (whole blocks; the last shard may be shorter or empty), and rank r's shard. */
static size_t tr__zero_per(size_t n, int world) {
  size_t blocks = (n + TR__ZERO_BLOCK - 1) / TR__ZERO_BLOCK;
  return (blocks + (size_t)world - 1) / (size_t)world * TR__ZERO_BLOCK;
}
static void tr__zero_shard(size_t n, int world, int r, size_t *lo, size_t *len) {
  size_t per = tr__zero_per(n, world), at = (size_t)r * per;
  *lo = at < n ? at : n;
  *len = n - *lo < per ? n - *lo : per;
}

static void tr__dist_free(tr_trainer *t) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int done = 0;
  if (!d) return;
  t->tr__dist = NULL;
  if (d->dead) return; /* a collective is still pending on it: MPI may write into it later */
  MPI_Finalized(&done);
#ifdef TRAIN_CUDA
  if (d->nccl) ncclCommDestroy(d->nccl);
#endif
  if (!done) {
    MPI_Op_free(&d->vote_op);
    MPI_Type_free(&d->vote_type);
    MPI_Type_free(&d->block);
    MPI_Comm_free(&d->comm);
  }
  free(d->counts);
  free(d->piece);
  free(d->sums);
  free(d->facts);
  free(d->gather);
  free(d);
}

static tr_err tr__dist_init(tr_trainer *t, tr_err failed) {
  tr__dist *d;
  int init = 0, done = 0, world = 1, rank = 0, rc, i;
  uint64_t layout = TR__FNV_START, optim = TR__FNV_START;
  MPI_Request rq;
  tr_err e;
  MPI_Initialized(&init);
  if (!init) {
    MPI_Finalized(&done);
    if (done) return failed ? failed : tr__fail(t, TR_ERR_COMM, "tr_init: MPI was finalized already; create trainers before MPI_Finalize");
    if ((rc = MPI_Init(NULL, NULL)) != MPI_SUCCESS) return failed ? failed : tr__dist_fail(t, rc, "tr_init: MPI_Init");
    if (!tr__dist_we_initialised) atexit(tr__dist_finalize);
    tr__dist_we_initialised = 1;
  }
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  t->ctx.rank = rank;
  t->ctx.world_size = world;
  if (t->tr__zero && !failed) { /* this rank's shard of the optimizer state (all of it in one process) */
    size_t n = t->model.n_params, lo, len;
    tr__zero_shard(n, world, rank, &lo, &len);
    if (n / TR__ZERO_BLOCK > INT_MAX)
      failed = tr__fail(t, TR_ERR_INVALID, "tr_init: zero = 1 exchanges blocks of %d floats counted by an int: at most %llu "
                        "parameters, the model has %zu", TR__ZERO_BLOCK, (unsigned long long)INT_MAX * TR__ZERO_BLOCK, n);
    else failed = tr__alloc_state(t, lo, len);
  }
  if (world == 1) return failed; /* one process: the plain trainer */
  d = (tr__dist *)calloc(1, sizeof *d);
  if (d) {
    d->rank = rank;
    d->world = world;
    d->sums = (double *)malloc((size_t)world * sizeof(double));
    d->facts = (int64_t *)malloc((size_t)world * TR__FACTS * sizeof(int64_t));
    if (world >= 3 && !failed) {
      size_t chunk = t->model.n_params < TR__DIST_CHUNK ? t->model.n_params : TR__DIST_CHUNK;
      d->gather = (float *)malloc((size_t)world * (chunk ? chunk : 1) * sizeof(float));
    }
    if (t->tr__zero && !failed) {
      size_t chunk;
      d->per = tr__zero_per(t->model.n_params, world);
      chunk = d->per < TR__DIST_CHUNK ? d->per : TR__DIST_CHUNK;
      d->counts = (int *)malloc(2 * (size_t)world * sizeof(int));
      d->displs = d->counts ? d->counts + world : NULL;
      if (rank == 0) d->piece = (float *)malloc((chunk ? chunk : 1) * sizeof(float));
    }
  }
  if (!d || !d->sums || !d->facts || (world >= 3 && !failed && !d->gather) ||
      (t->tr__zero && !failed && (!d->counts || (rank == 0 && !d->piece)))) { /* cannot take part: the others time out */
    if (d) { free(d->sums); free(d->facts); free(d->gather); free(d->counts); free(d->piece); free(d); }
    return failed ? failed : tr__fail(t, TR_ERR_NOMEM, "tr_init: out of memory for the MPI strategy");
  }
  /* the trainer's own communicator, made without waiting forever for a rank that never comes */
  rc = MPI_Comm_idup(MPI_COMM_WORLD, &d->comm, &rq);
  if (rc == MPI_SUCCESS && !tr__dist_wait(&rq, t->tr__mpi_timeout, &rc)) /* d stays allocated: MPI may still write it */
    return failed ? failed : tr__fail(t, TR_ERR_COMM, "tr_init: not every rank arrived within %g s (%d ranks); %s",
                                      t->tr__mpi_timeout, world, tr__dist_timeout_hint);
  if (rc != MPI_SUCCESS) {
    free(d->sums); free(d->facts); free(d->gather); free(d->counts); free(d->piece); free(d);
    return failed ? failed : tr__dist_fail(t, rc, "tr_init: MPI_Comm_idup");
  }
  MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN); /* errors are values */
  MPI_Type_contiguous(TR__V_COUNT, MPI_INT64_T, &d->vote_type);
  MPI_Type_commit(&d->vote_type);
  MPI_Type_contiguous(TR__ZERO_BLOCK, MPI_FLOAT, &d->block);
  MPI_Type_commit(&d->block);
  MPI_Op_create(tr__dist_combine, 1, &d->vote_op);
  t->tr__dist = d;
  /* Every rank must hold the same model: the gradient sum runs over n_params floats per rank, and the
     tensors' names, offsets and counts say what each float is (DDP checks the parameters' shapes). */
  if (!failed) {
    for (i = 0; i < t->model.n_tensors; i++) {
      const tr_tensor *x = &t->model.tensors[i];
      uint64_t at = x->offset, count = x->count;
      layout = tr__dist_hash(layout, x->name, strlen(x->name) + 1);
      layout = tr__dist_hash(layout, &at, sizeof at);
      layout = tr__dist_hash(layout, &count, sizeof count);
    }
#define TR__H(field) optim = tr__dist_hash(optim, &(field), sizeof(field))
    TR__H(t->optim.kind); TR__H(t->optim.lr); TR__H(t->optim.weight_decay); TR__H(t->optim.momentum);
    TR__H(t->optim.dampening); TR__H(t->optim.nesterov); TR__H(t->optim.beta1); TR__H(t->optim.beta2); TR__H(t->optim.eps);
    TR__H(t->sched.kind); TR__H(t->sched.warmup); TR__H(t->sched.step_size); TR__H(t->sched.total);
    TR__H(t->sched.gamma); TR__H(t->sched.min_factor); TR__H(t->sched.per_epoch);
    TR__H(t->sched.monitor); TR__H(t->sched.mode); TR__H(t->sched.factor); TR__H(t->sched.patience);
    TR__H(t->sched.threshold); TR__H(t->sched.threshold_mode); TR__H(t->sched.cooldown); TR__H(t->sched.min_lr);
    TR__H(t->sched.eps); TR__H(t->sched.max_lr); TR__H(t->sched.pct_start); TR__H(t->sched.anneal);
    TR__H(t->sched.div_factor); TR__H(t->sched.final_div_factor); TR__H(t->sched.three_phase); TR__H(t->sched.decay);
#undef TR__H
  }
  {
    tr__fact f[7];
    f[0].name = "the parameter count (model.n_params)"; f[0].kind = 'i'; f[0].v = (int64_t)t->model.n_params;
    f[1].name = "the tensor count (model.n_tensors)"; f[1].kind = 'i'; f[1].v = t->model.n_tensors;
    f[2].name = "the tensors' names, offsets and counts (fingerprint)"; f[2].kind = 'x'; f[2].v = (int64_t)layout;
    f[3].name = "model.on_device"; f[3].kind = 'i'; f[3].v = t->model.on_device != 0;
    f[4].name = "the seed (shuffles must match to shard the data)"; f[4].kind = 'i'; f[4].v = (int64_t)t->seed;
    f[5].name = "the optimizer and schedule settings (fingerprint)"; f[5].kind = 'x'; f[5].v = (int64_t)optim;
    f[6].name = "zero (tr_desc.zero: the optimizer state sharded)"; f[6].kind = 'i'; f[6].v = t->tr__zero;
    e = tr__dist_gather(t, d, TR__AT_INIT, failed, f, 7, "the model or its training settings (every rank needs the same)");
  }
  if (e) {
    if (!d->dead) tr__dist_free(t);
    else t->tr__dist = NULL; /* left to MPI (see tr__dist_wait) */
    return e;
  }
  tr__dist_host_check(t, d);
  tr__dist_lr_now(t, d->lr); /* agreed above (the optimizer's settings): what a change is measured from */
#ifdef TRAIN_CUDA
  if (TR__ON_DEVICE(t)) { /* llm.c's way: rank 0 makes the id, MPI carries it, every rank joins */
    struct { ncclUniqueId id; int32_t ok; } x; /* ok: rank 0 made it (else no rank waits in ncclCommInitRank) */
    ncclResult_t nr = ncclSuccess;
    memset(&x, 0, sizeof x);
    if (rank == 0) x.ok = (nr = ncclGetUniqueId(&x.id)) == ncclSuccess;
    if ((rc = MPI_Bcast(&x, (int)sizeof x, MPI_BYTE, 0, d->comm)) != MPI_SUCCESS) return tr__dist_fail(t, rc, "tr_init: MPI_Bcast (NCCL id)");
    if (!x.ok && rank != 0)
      return tr__fail(t, TR_ERR_DEVICE, "tr_init: rank 0: NCCL could not make the ranks' id (ncclGetUniqueId failed there)");
    if (nr == ncclSuccess) nr = ncclCommInitRank(&d->nccl, world, x.id, rank);
    if (nr != ncclSuccess) {
      d->nccl = NULL;
      return tr__fail(t, TR_ERR_DEVICE, "tr_init: NCCL could not join the %d ranks: %s (one GPU per rank: select it with "
                      "cudaSetDevice before allocating the model)", world, ncclGetErrorString(nr));
    }
  }
#endif
  return TR_OK;
}

/* What decides a fit's length and its collectives, the same on every rank (as resolved by tr__resolve),
   and its updates: the parameter groups and finetuning's schedule (registered before the run, resolved at
   its start), which ranks that differ would train apart with, silently. A rank whose start was refused
   (failed: its config, its run layer, its resume) tells the others here (tr__stage_start). */
static tr_err tr__dist_start_fit(tr_trainer *t, const tr_config *c, tr_err failed) {
  tr__fact f[17];
  double clip = 0;
  int n = 0;
  if (!t->tr__dist) return failed;
  if (!failed) clip = c->gradient_clip_val;
#define TR__F(nm, k, val) do { f[n].name = (nm); f[n].kind = (k); f[n].v = failed ? 0 : (int64_t)(val); n++; } while (0)
  TR__F("max_epochs", 'i', c->max_epochs);
  TR__F("max_steps", 'i', c->max_steps);
  TR__F("min_epochs", 'i', c->min_epochs);
  TR__F("min_steps", 'i', c->min_steps);
  TR__F("limit_train_batches", 'i', c->limit_train_batches);
  TR__F("limit_val_batches", 'i', c->limit_val_batches);
  TR__F("num_sanity_val_steps", 'i', c->num_sanity_val_steps);
  TR__F("val_every_n_steps", 'i', c->val_every_n_steps);
  TR__F("val_every_n_epochs", 'i', c->val_every_n_epochs);
  TR__F("accumulate_grad_batches", 'i', c->accumulate_grad_batches);
  TR__F("val", 'b', !failed && c->val != NULL);
  TR__F("train.next (an iterator)", 'b', !failed && c->train && c->train->next != NULL);
  TR__F("val.next (an iterator)", 'b', !failed && c->val && c->val->next != NULL);
  TR__F("gradient_clip_algorithm", 'i', c->gradient_clip_algorithm);
  f[n].name = "gradient_clip_val"; f[n].kind = 'd';
  memcpy(&f[n].v, &clip, sizeof clip);
  n++;
  TR__F("save_to", 'b', !failed && c->save_to != NULL);
  TR__F("the parameter groups (param_group: each tensor's lr_mult, weight_decay and frozen; finetuning: the tensors it takes, "
        "unfreeze_at_epoch, lr_factor, initial_ratio, initial_lr, align; fingerprint, 0: none)",
        'x', tr_run_groups_hash(t->reg, t->ctx.params, t->ctx.n_tensors));
#undef TR__F
  return tr__dist_gather(t, (tr__dist *)t->tr__dist, TR__AT_FIT, failed, f, n,
                         "what decides the run's length and its updates (tr_config, parameter groups)");
}

static tr_err tr__dist_start_eval(tr_trainer *t, hk_stage stage, const tr_data *data, int64_t limit, tr_err failed) {
  tr__fact f[2];
  int where = stage == HK_STAGE_TEST ? TR__AT_TEST : stage == HK_STAGE_PREDICT ? TR__AT_PREDICT : TR__AT_VALIDATE;
  if (!t->tr__dist) return failed;
  f[0].name = "limit_batches"; f[0].kind = 'i'; f[0].v = limit;
  f[1].name = "data.next (an iterator)"; f[1].kind = 'b'; f[1].v = data && data->next != NULL;
  return tr__dist_gather(t, (tr__dist *)t->tr__dist, where, failed, f, 2, "the run's arguments");
}

/* After resume_from (or an earlier tr_load on some ranks only): the counters the loop goes on from. A
   rank that failed (its load, say) is told to the others by the agreement that follows. */
static void tr__dist_check_resumed(tr_trainer *t) {
  tr__fact f[8];
  tr_err e;
  if (!t->tr__dist) return;
  f[0].name = "epoch"; f[0].kind = 'i'; f[0].v = t->epoch;
  f[1].name = "global_step"; f[1].kind = 'i'; f[1].v = t->global_step;
  f[2].name = "epoch_batch"; f[2].kind = 'i'; f[2].v = t->epoch_batch;
  f[3].name = "the accumulation window's position"; f[3].kind = 'i'; f[3].v = t->tr__accum_pos;
  f[4].name = "the step of the last validation in this epoch"; f[4].kind = 'i'; f[4].v = t->tr__val_at;
  f[5].name = "the epoch ended (a checkpoint from on_train_epoch_end)"; f[5].kind = 'i'; f[5].v = t->tr__epoch_ended;
  f[6].name = "restarting mid-epoch"; f[6].kind = 'i'; f[6].v = t->tr__restarting;
  /* equal counters from two files (ranks resuming each its own) would train apart, or mix two files' shards */
  f[7].name = "the checkpoint loaded (a hash of its parameters, optimizer state and counters; 0: none)"; f[7].kind = 'x';
  f[7].v = (int64_t)t->tr__loaded;
  e = tr__dist_gather(t, (tr__dist *)t->tr__dist, TR__AT_RESUMED, t->tr__err, f, 8,
                      "the state they start from (every rank must resume from the same checkpoint, or none)");
  if (e && !t->tr__err) t->tr__err = e; /* the failed ranks keep their own error; the vote that follows tells the rest */
}

/* The ranks reached different agreement points (different paths through the loop): each learns where
   the others are, then none communicates until the next run's start (they cannot meet again). A tr_save
   on some ranks only (a hook or an on_exception handler registered on some ranks) is named as such. A
   rank whose run has failed already keeps its own error and says this as a warning (its save failed). */
static void tr__dist_out_of_step(tr_trainer *t, tr__dist *d, int site) {
  int64_t mine[2];
  int r, rc, saving = 0;
  size_t len = 0;
  char msg[sizeof t->error];
  d->broken = 1;
  mine[0] = site;
  mine[1] = t->tr__saving;
  rc = MPI_Allgather(mine, 2, MPI_INT64_T, d->facts, 2, MPI_INT64_T, d->comm);
  for (r = 0; r < d->world && rc == MPI_SUCCESS; r++) saving += d->facts[2 * r + 1] != 0;
  if (saving > 0 && saving < d->world) {
    int k = 0;
    len = tr__msg_at(msg, sizeof msg, 0, "tr_save on rank%s", saving > 1 ? "s" : "");
    for (r = 0; r < d->world && len < sizeof msg; r++)
      if (d->facts[2 * r + 1]) len = tr__msg_at(msg, sizeof msg, len, "%s %d", k++ ? "," : "", r);
    if (len < sizeof msg)
      len = tr__msg_at(msg, sizeof msg, len, " only, nothing saved: every rank calls tr_save alike (rank 0 writes); "
                       "a hook on some ranks asks with hk_request(ctx, HK_REQUEST_CHECKPOINT) instead, and "
                       "on_exception_checkpoint goes on every rank. The ranks stopped talking:");
  } else
    len = tr__msg_at(msg, sizeof msg, 0, "the ranks are out of step (a setting or a hook that differs between ranks, "
                     "e.g. tr_set_accumulation or a tr_save on one rank only, sent them different ways); they stopped "
                     "talking where they were:");
  for (r = 0; r < d->world && rc == MPI_SUCCESS && len < sizeof msg; r++)
    len = tr__msg_at(msg, sizeof msg, len, "%s rank %d at train.h:%lld%s", r ? "," : "", r, (long long)(d->facts[2 * r] / 2),
                     d->facts[2 * r + 1] ? " (in tr_save)" : "");
  if (t->tr__err) { tr__warn(t, "%s", msg); return; } /* (its own error stays) */
  tr__fail(t, TR_ERR_COMM, "%s", msg);
}

/* A tr_save (or anything else) met the other ranks elsewhere: the run cannot go on together. */
static int tr__dist_broken(const tr_trainer *t) { return t->tr__dist && ((const tr__dist *)t->tr__dist)->broken; }

/* One vote: every rank's failure, signals, requests and interrupt count, plus `sum` and `count`
   combined as the list says; the agreed values act on this rank at once. v gets the result. `site`
   names the agreement point: ranks at different points are out of step, found here before any other
   collective can pair with the wrong one. */
static void tr__dist_vote(tr_trainer *t, int64_t sum, int64_t count, int64_t *v, int site) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int64_t mine[TR__V_COUNT], sigterm;
  int rc, own, preempted;
  mine[TR__V_FAILED] = t->tr__err != TR_OK;
  mine[TR__V_FIRST] = t->tr__err ? d->rank : d->world;
  mine[TR__V_SIGNALS] = t->tr__flow.signals;
  mine[TR__V_REQUESTS] = t->ctx.requests;
  own = tr_run_stops(t->reg, &sigterm, &preempted); /* this rank's stop signals, as the run counts them */
  mine[TR__V_SIGINT] = own > t->tr__sigint_count ? own : t->tr__sigint_count;
  mine[TR__V_SIGTERM] = t->tr__sigterm | sigterm;
  mine[TR__V_PREEMPT] = preempted > t->tr__preempt_count ? preempted : t->tr__preempt_count;
  mine[TR__V_SUM] = sum;
  mine[TR__V_LEAST] = mine[TR__V_MOST] = count;
  mine[TR__V_SITE_LO] = mine[TR__V_SITE_HI] = site;
  mine[TR__V_LR_MOVED] = tr__dist_lr_mark(t, d, &mine[TR__V_LR_LO]);
  mine[TR__V_LR_FROM] = mine[TR__V_LR_MOVED] ? d->rank : d->world;
  if (!mine[TR__V_LR_MOVED]) { mine[TR__V_LR_LO] = INT64_MAX; mine[TR__V_LR_HI] = -1; }
  else mine[TR__V_LR_HI] = mine[TR__V_LR_LO];
  if (d->broken || d->dead) { memcpy(v, mine, sizeof mine); return; }
  tr_run_waiting("MPI_Allreduce (the ranks' agreement)"); /* the watchdog's report says so */
  rc = MPI_Allreduce(mine, v, 1, d->vote_type, d->vote_op, d->comm);
  tr_run_waiting(NULL);
  if (rc != MPI_SUCCESS) { memcpy(v, mine, sizeof mine); tr__dist_fail(t, rc, "MPI_Allreduce (agreement)"); return; }
  if (v[TR__V_SITE_LO] != v[TR__V_SITE_HI]) { tr__dist_out_of_step(t, d, site); memcpy(v, mine, sizeof mine); return; }
  t->tr__flow.signals |= (unsigned)v[TR__V_SIGNALS];
  t->ctx.requests |= (unsigned)v[TR__V_REQUESTS];
  if (v[TR__V_SIGINT] > t->tr__sigint_count) t->tr__sigint_count = (int)v[TR__V_SIGINT];
  t->tr__sigterm |= v[TR__V_SIGTERM];
  if (v[TR__V_PREEMPT] > t->tr__preempt_count) t->tr__preempt_count = (int)v[TR__V_PREEMPT];
  if (v[TR__V_FAILED] > 0 && v[TR__V_FAILED] < d->world) { /* some ranks failed, some not: tell the others why */
    struct { int32_t code; char msg[sizeof t->error]; } why;
    int root = (int)v[TR__V_FIRST];
    memset(&why, 0, sizeof why);
    if (d->rank == root) { why.code = (int32_t)t->tr__err; memcpy(why.msg, t->error, sizeof why.msg); }
    rc = MPI_Bcast(&why, (int)sizeof why, MPI_BYTE, root, d->comm);
    if (rc != MPI_SUCCESS) tr__dist_fail(t, rc, "MPI_Bcast (error message)");
    else if (!t->tr__err) {
      why.msg[sizeof why.msg - 1] = 0;
      tr__fail(t, why.code > TR_OK && why.code < TR_ERR_COUNT ? (tr_err)why.code : TR_ERR_COMM, "rank %d: %s", root, why.msg);
    }
  }
  if (v[TR__V_LR_MOVED] > 0) tr__dist_lr(t, d, v);
}

static void tr__dist_agree_at(tr_trainer *t, int site) {
  int64_t v[TR__V_COUNT];
  if (t->tr__dist) tr__dist_vote(t, 0, 0, v, site);
}

static int64_t tr__dist_shard(tr_trainer *t, const tr_data *data, int64_t n, int equal, const char *what) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int64_t v[TR__V_COUNT], mine = n;
  if (!d) return n;
  if (data->get) mine = equal ? n / d->world : (n > d->rank ? (n - d->rank + d->world - 1) / d->world : 0);
  tr__dist_vote(t, 0, mine, v, 2 * __LINE__ + (equal ? 1 : 0)); /* training's count or an evaluation's */
  d->most = v[TR__V_MOST];
  if (equal && !t->tr__err && v[TR__V_LEAST] != v[TR__V_MOST])
    tr__fail(t, TR_ERR_MODEL, "%s data: the ranks have %lld to %lld batches per epoch; with several processes every "
             "rank needs the same number (same data, or iterator shards of equal length)", what,
             (long long)v[TR__V_LEAST], (long long)v[TR__V_MOST]);
  return t->tr__err ? 0 : mine;
}

static int64_t tr__dist_index(const tr_trainer *t, int64_t b) {
  const tr__dist *d = (const tr__dist *)t->tr__dist;
  return d ? b * d->world + d->rank : b;
}

static int tr__dist_empty(const tr_trainer *t, int64_t n) {
  const tr__dist *d = (const tr__dist *)t->tr__dist;
  return d ? d->most == 0 : n == 0;
}

/* g = g0 + g1 + ... + g(W-1) in rank order, the same bits on every rank. */
static int tr__dist_sum(tr__dist *d, float *g, size_t n) {
  size_t at, i;
  int r, rc = MPI_SUCCESS;
  for (at = 0; at < n && rc == MPI_SUCCESS; at += TR__DIST_CHUNK) {
    int k = (int)(n - at < TR__DIST_CHUNK ? n - at : TR__DIST_CHUNK);
    if (d->world == 2) { rc = MPI_Allreduce(MPI_IN_PLACE, g + at, k, MPI_FLOAT, MPI_SUM, d->comm); continue; }
    rc = MPI_Allgather(g + at, k, MPI_FLOAT, d->gather, k, MPI_FLOAT, d->comm);
    for (i = 0; i < (size_t)k && rc == MPI_SUCCESS; i++) {
      float s = d->gather[i];
      for (r = 1; r < d->world; r++) s += d->gather[(size_t)r * k + i];
      g[at + i] = s;
    }
  }
  return rc;
}

static void tr__dist_grads(tr_trainer *t) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int64_t v[TR__V_COUNT];
  int rc;
  if (!d) return;
  tr__dist_vote(t, t->tr__accum_n, 0, v, 2 * __LINE__);
  if (d->broken || d->dead) return; /* (failed: the sum below is skipped on every rank alike) */
  t->tr__accum_n = v[TR__V_SUM]; /* the averaging divides the sum by every rank's count */
  if (tr__skips(t, HK_FLOW_SKIP_STEP) || t->tr__accum_n == 0) return; /* agreed: no rank steps */
#ifdef TRAIN_CUDA
  if (d->nccl) { /* on tr_model.stream, as every kernel of the step: no host wait */
    ncclResult_t nr;
    if (!t->tr__grads_zeroed) tr__dev_zero_grad(t); /* this rank adds nothing */
    nr = ncclAllReduce(t->model.grads, t->model.grads, t->model.n_params, ncclFloat, ncclSum, d->nccl,
                       (cudaStream_t)t->model.stream);
    if (nr != ncclSuccess) tr__fail(t, TR_ERR_DEVICE, "the gradient all-reduce (NCCL) failed: %s", ncclGetErrorString(nr));
    hk_grads_changed(&t->ctx);
    return;
  }
#endif
  if (!t->tr__grads_zeroed) tr_zero(t->model.grads, t->model.n_params, t->tr__threads); /* this rank adds nothing */
  tr_run_waiting("the gradient all-reduce (MPI)");
  rc = tr__dist_sum(d, t->model.grads, t->model.n_params);
  tr_run_waiting(NULL);
  if (rc != MPI_SUCCESS) tr__dist_fail(t, rc, "the gradient all-reduce");
  hk_grads_changed(&t->ctx);
}

/* zero: after the update of this rank's shard, every rank's shard to every rank. Whole blocks by
   MPI_Allgatherv in place (rounds of at most TR__DIST_CHUNK floats per rank), then the last partial
   block, if any, from its owner. Every rank calls it at every step taken (also one whose own update
   failed), so the collectives pair. */
static void tr__dist_params(tr_trainer *t) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  size_t n = t->model.n_params, whole = n / TR__ZERO_BLOCK * TR__ZERO_BLOCK, at, most, step = TR__DIST_CHUNK / TR__ZERO_BLOCK;
  int r, rc = MPI_SUCCESS;
  if (!d || !t->tr__zero || d->broken || d->dead) return;
  most = d->per / TR__ZERO_BLOCK; /* blocks of the largest shard */
  for (at = 0; at < most && rc == MPI_SUCCESS; at += step) {
    for (r = 0; r < d->world; r++) {
      size_t lo = (size_t)r * d->per < whole ? (size_t)r * d->per : whole;
      size_t blocks = (whole - lo < d->per ? whole - lo : d->per) / TR__ZERO_BLOCK;
      d->counts[r] = blocks > at ? (int)(blocks - at < step ? blocks - at : step) : 0;
      d->displs[r] = (int)(lo / TR__ZERO_BLOCK + (blocks > at ? at : 0));
    }
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, t->model.params, d->counts, d->displs, d->block, d->comm);
  }
  if (rc == MPI_SUCCESS && whole < n) rc = MPI_Bcast(t->model.params + whole, (int)(n - whole), MPI_FLOAT, (int)(whole / d->per), d->comm);
  if (rc != MPI_SUCCESS) tr__dist_fail(t, rc, "the parameter exchange (zero)");
}

/* zero, rank 0 writing a checkpoint: the whole optimizer state in file order (m of every shard, then
   v), its own shard as it is, the others' received in chunks (tr__dist_send_state's); put NULL: only
   receive (the write failed before it got here, and the others are sending). A failed receive fails
   the save (nothing is committed) and hands zeros on, so that the writer's sizes still hold. */
static void tr__dist_opt_each(void *trainer, void (*put)(void *u, const float *x, size_t n), void *u) {
  tr_trainer *t = (tr_trainer *)trainer;
  tr__dist *d = (tr__dist *)t->tr__dist;
  size_t lo, len, at, k;
  int b, r, rc = MPI_SUCCESS;
  d->opt_done = 1;
  for (b = 0; b < t->tr__n_buf; b++)
    for (r = 0; r < d->world; r++) {
      tr__zero_shard(t->model.n_params, d->world, r, &lo, &len);
      if (r == d->rank) { if (put && len) put(u, b ? t->tr__v : t->tr__m, len); continue; }
      for (at = 0; at < len; at += k) {
        k = len - at < TR__DIST_CHUNK ? len - at : TR__DIST_CHUNK;
        if (rc == MPI_SUCCESS && (rc = MPI_Recv(d->piece, (int)k, MPI_FLOAT, r, TR__ZERO_TAG, d->comm, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
          tr__dist_fail(t, rc, "tr_save: receiving a shard of the optimizer state (zero)");
        if (rc != MPI_SUCCESS) memset(d->piece, 0, k * sizeof(float));
        if (put) put(u, d->piece, k);
      }
    }
}

/* zero, the other ranks: their shard to rank 0, in tr__dist_opt_each's order and chunks. */
static void tr__dist_send_state(tr_trainer *t, tr__dist *d) {
  size_t at, k, len = t->tr__opt_n;
  int b, rc = MPI_SUCCESS;
  for (b = 0; b < t->tr__n_buf && rc == MPI_SUCCESS; b++)
    for (at = 0; at < len && rc == MPI_SUCCESS; at += k) {
      k = len - at < TR__DIST_CHUNK ? len - at : TR__DIST_CHUNK;
      rc = MPI_Send((b ? t->tr__v : t->tr__m) + at, (int)k, MPI_FLOAT, 0, TR__ZERO_TAG, d->comm);
    }
  if (rc != MPI_SUCCESS) tr__dist_fail(t, rc, "tr_save: sending this rank's shard of the optimizer state (zero)");
}

static void tr__dist_mean(tr_trainer *t, double *sum, int64_t *counted) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int64_t v[TR__V_COUNT];
  double s = 0;
  int r, rc;
  if (!d) return;
  tr__dist_vote(t, *counted, 0, v, 2 * __LINE__);
  if (d->broken || d->dead) return;
  *counted = v[TR__V_SUM];
  rc = MPI_Allgather(sum, 1, MPI_DOUBLE, d->sums, 1, MPI_DOUBLE, d->comm);
  if (rc != MPI_SUCCESS) { tr__dist_fail(t, rc, "MPI_Allgather (evaluation loss)"); return; }
  for (r = 0; r < d->world; r++) s += d->sums[r]; /* in rank order: the same bits on every rank */
  *sum = s;
}

static void tr__dist_paths(tr_trainer *t) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  int32_t head[2] = { 0, 0 }; /* rank 0's count of paths (-1: one is too long) and default flag */
  int i, rc;
  if (!d || d->broken || d->dead) return; /* (broken: the run has failed; nothing is saved) */
  if (d->rank == 0) {
    head[0] = t->ctx.n_checkpoint_paths < 0 || t->ctx.n_checkpoint_paths > HK_MAX_CHECKPOINT_PATHS ? 0 : t->ctx.n_checkpoint_paths;
    head[1] = t->ctx.checkpoint_default;
    for (i = 0; i < head[0]; i++) {
      const char *p = t->ctx.checkpoint_paths[i] ? t->ctx.checkpoint_paths[i] : "";
      if (strlen(p) >= TR__DIST_PATH) head[0] = -1;
      else strcpy(d->paths[i], p);
    }
  }
  rc = MPI_Bcast(head, 2, MPI_INT32_T, 0, d->comm);
  if (rc == MPI_SUCCESS && head[0] > 0) rc = MPI_Bcast(d->paths, head[0] * TR__DIST_PATH, MPI_CHAR, 0, d->comm);
  if (rc != MPI_SUCCESS) { tr__dist_fail(t, rc, "MPI_Bcast (checkpoint paths)"); head[0] = 0; }
  if (head[0] < 0) {
    tr__fail(t, TR_ERR_INVALID, "a requested checkpoint path is %d bytes or longer; with several processes it must be shorter", TR__DIST_PATH);
    head[0] = 0;
  }
  for (i = 0; i < head[0]; i++) t->ctx.checkpoint_paths[i] = d->paths[i];
  t->ctx.n_checkpoint_paths = head[0];
  t->ctx.checkpoint_default = head[1];
}

/* The run's directory and id are rank 0's: its loggers open the directory (at setup) and write its run_id,
   and the other ranks' batteries that default to a path under it (model_checkpoint's and
   on_exception_checkpoint's checkpoints/, prediction_writer's predictions/ with {rank} in its filename, and
   the record by which a later process takes its files back) must name the same one. Sent at each run's
   start, after setup and configure_model, before the agreement there; a rank that has one keeps it. */
static void tr__dist_run_dir(tr_trainer *t) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  struct { char dir[TR__DIST_DIR], id[40]; int32_t too_long; } x; /* too_long: rank 0's, sent none */
  int rc;
  if (!d || d->broken || d->dead) return; /* (every rank alike: the run's start agreed) */
  memset(&x, 0, sizeof x);
  if (d->rank == 0) {
    const char *id, *dir = tr_run_dir_id(t->reg, &id);
    if (dir && strlen(dir) < sizeof x.dir) memcpy(x.dir, dir, strlen(dir));
    else x.too_long = dir != NULL;
    if (strlen(id) < sizeof x.id) memcpy(x.id, id, strlen(id));
  }
  if ((rc = MPI_Bcast(&x, (int)sizeof x, MPI_BYTE, 0, d->comm)) != MPI_SUCCESS) { tr__dist_fail(t, rc, "MPI_Bcast (the run directory)"); return; }
  if (x.too_long) { /* every rank alike, so the vote after fails every rank with this */
    if (!t->tr__err) tr__fail(t, TR_ERR_INVALID, "the run's directory on rank 0 is %d bytes or longer, too long a path to open; "
                              "give a shorter save_dir or name", TR__DIST_DIR);
    return;
  }
  if (d->rank == 0 || t->tr__err) return;
  x.dir[sizeof x.dir - 1] = x.id[sizeof x.id - 1] = 0;
  if (tr_run_dir_adopt(t->reg, x.dir, x.id) != TR_OK) tr__fail(t, TR_ERR_NOMEM, "%s", tr_run_error(t->reg)); /* (the vote after tells all) */
}

static void tr__dist_save_file(tr_trainer *t, const char *path, tr__write_fn write) {
  tr__dist *d = (tr__dist *)t->tr__dist;
  if (d && t->tr__zero) { /* the state is sharded: rank 0 writes what every rank sends it */
    if (d->broken || d->dead) {
      if (!t->tr__err) tr__fail(t, TR_ERR_COMM, "tr_save: the ranks no longer communicate, so the optimizer state sharded over "
                                "them (tr_desc.zero) cannot be gathered: nothing was written");
      return;
    }
    tr__dist_agree(t); /* every rank ready (or every rank failed): rank 0 will take every shard sent */
    if (!t->tr__err && d->rank == 0) {
      d->opt_done = 0;
      write(t, path);
      if (!d->opt_done) tr__dist_opt_each(t, NULL, NULL); /* its write failed early: the shards are taken all the same */
    } else if (!t->tr__err) tr__dist_send_state(t, d);
  } else if (!t->tr__err && (!d || d->rank == 0)) write(t, path);
  tr__dist_agree(t); /* the barrier: no rank goes on before the file is complete (or failed everywhere) */
}

#elif !defined(TRAIN_NO_TRAINER) /* one process: nothing to do */
static tr_err  tr__dist_init(tr_trainer *t, tr_err failed) { (void)t; return failed; }
static tr_err  tr__dist_start_fit(tr_trainer *t, const tr_config *c, tr_err failed) { (void)t; (void)c; return failed; }
static tr_err  tr__dist_start_eval(tr_trainer *t, hk_stage stage, const tr_data *data, int64_t limit, tr_err failed) {
  (void)t; (void)stage; (void)data; (void)limit; return failed;
}
static void    tr__dist_check_resumed(tr_trainer *t) { (void)t; }
static void    tr__dist_free(tr_trainer *t) { (void)t; }
static void    tr__dist_agree_at(tr_trainer *t, int site) { (void)t; (void)site; }
static int64_t tr__dist_shard(tr_trainer *t, const tr_data *d, int64_t n, int equal, const char *what) { (void)t; (void)d; (void)equal; (void)what; return n; }
static int64_t tr__dist_index(const tr_trainer *t, int64_t b) { (void)t; return b; }
static int     tr__dist_empty(const tr_trainer *t, int64_t n) { (void)t; return n == 0; }
static void    tr__dist_grads(tr_trainer *t) { (void)t; }
static void    tr__dist_mean(tr_trainer *t, double *sum, int64_t *counted) { (void)t; (void)sum; (void)counted; }
static void    tr__dist_paths(tr_trainer *t) { (void)t; }
static void    tr__dist_run_dir(tr_trainer *t) { (void)t; }
static void    tr__dist_save_file(tr_trainer *t, const char *path, tr__write_fn write) { if (!t->tr__err) write(t, path); }
static void    tr__dist_params(tr_trainer *t) { (void)t; }
static void    tr__dist_opt_each(void *trainer, void (*put)(void *u, const float *x, size_t n), void *u) { (void)trainer; (void)put; (void)u; }
static int     tr__dist_broken(const tr_trainer *t) { (void)t; return 0; }
#endif /* TRAIN_MPI */
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
