/* train/trainer/checkpoint.h - the trainer's checkpoints: tr_save and tr_load, their format written and read, a resume with nothing left to train. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_TRAINER_CHECKPOINT_H /* part */
#define TRAIN_TRAINER_CHECKPOINT_H /* part */
#include "mpi.h" /* part */

TR__C_BEGIN /* part */
/* tr_save: on_save_checkpoint, the state (the hooks' and the iterator's included) to a temporary file
   renamed over path (the old file or the new, never half of one), on_checkpoint_saved; with async_save a
   background thread writes it. tr_load verifies the whole file before it changes anything, then fires
   on_load_checkpoint; on any failure the trainer and the hooks are as they were. A hook's tr_save never
   changes the run's outcome; its tr_load is refused. In full: docs/trainer.md, "Checkpoints". */
TRAIN_API tr_err tr_save(tr_trainer *t, const char *path);
TRAIN_API tr_err tr_load(tr_trainer *t, const char *path);
TRAIN_API tr_err tr_load_mem(tr_trainer *t, const void *data, size_t len); /* the same, from memory */
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* ---- checkpoints --------------------------------------------------------------------------------------
   FORMAT, version 3 (versions 1 and 2 still load: 1 has no DATA; both checksum with FNV-1a 64). Little-endian;
   floats as binary32 bits.
     header   8 bytes "TRAINCKP" | u32 version | u32 flags (0)
     section  u32 tag (4 ASCII characters) | u64 size | payload | u64 checksum (tr__sum) of tag, size and payload
   The sections, in this order:
     META  u64 n_params | u32 optimizer (0 AdamW, 1 SGD) | u32 state buffers (0, 1 or 2) | u32 n_tensors |
           n_tensors x (u32 name length | name | u64 offset | u64 count)
     LOOP  u64 seed | u64 rng state | i64 epoch | i64 global_step | i64 epoch_batch | i64 samples_seen |
           i64 val_at | i64 accum_pos | i64 accum_n |
           u32 flags (1 grads zeroed, 2 step skipped, 4 stop requested, 8 epoch ended, 16 momentum set)
     PARM  n_params x f32: the parameters
     OPTM  buffers x n_params x f32: AdamW's m then v, or SGD's momentum; whole also when sharded (zero)
     GRAD  n_params x f32, only inside an accumulation window (accum_pos > 0)
     DATA  the training iterator's position (tr_data.save_state's bytes), only when there is one
     LRST  the schedule's state, only when it is not at its start
     HOOK  u32 key length | key | u64 state length | state: one per stateful hook, and the run's block
     END   empty; nothing may follow it
   The lr is not stored: it follows from the counters. Any change to this layout needs a new version. */

#define TR__MAGIC "TRAINCKP"
#define TR__VERSION 3u
#define TR__TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define TR__META TR__TAG('M', 'E', 'T', 'A')
#define TR__LOOP TR__TAG('L', 'O', 'O', 'P')
#define TR__PARM TR__TAG('P', 'A', 'R', 'M')
#define TR__OPTM TR__TAG('O', 'P', 'T', 'M')
#define TR__GRAD TR__TAG('G', 'R', 'A', 'D')
#define TR__DATA TR__TAG('D', 'A', 'T', 'A')
#define TR__HOOK TR__TAG('H', 'O', 'O', 'K')
#define TR__LRST TR__TAG('L', 'R', 'S', 'T') /* the schedule's state */
#define TR__END  TR__TAG('E', 'N', 'D', '!')
#define TR__LOOP_SIZE (9 * 8 + 4)
#define TR__MAX_KEY 4096
enum { TR__F_ZEROED = 1, TR__F_SKIP = 2, TR__F_STOP = 4, TR__F_ENDED = 8, TR__F_MOMENTUM = 16, TR__F_ALL = 31 };

/* max_checkpoint_bytes' default: every section but HOOK and DATA at its largest, plus 256 MiB. */
static uint64_t tr__default_ckpt_limit(const tr_trainer *t) {
  uint64_t meta = 20, sections = 8; /* their headers and checksums */
  int i;
  for (i = 0; i < t->model.n_tensors; i++) meta += 4 + strlen(t->model.tensors[i].name) + 16;
  return 16 + sections * 20 + meta + TR__LOOP_SIZE + 4 * (uint64_t)t->model.n_params * 4 + ((uint64_t)256 << 20);
}


/* -- writing: a buffered writer that checksums what it writes -- */
typedef struct tr__writer {
  unsigned char *buf;
  size_t pos, cap;
  tr__sum sum;       /* running checksum of the current section */
  uint64_t left;     /* payload the section still owes (checks our sizes) */
  tr__afile *af;
  int failed;        /* 0, or the errno of the first failure */
} tr__writer;

/* Emptied even after a failure: waiting for room a failed write never makes spun on a full disk. */
static void tr__w_flush(tr__writer *w) {
  if (!w->failed) w->failed = tr__afile_write(w->af, w->buf, w->pos);
  w->pos = 0;
}

static void tr__w_put(tr__writer *w, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  tr__sum_add(&w->sum, p, n);
  w->left -= n;
  while (n > 0 && !w->failed) {
    size_t k = w->cap - w->pos < n ? w->cap - w->pos : n;
    memcpy(w->buf + w->pos, p, k);
    w->pos += k;
    p += k;
    n -= k;
    if (w->pos == w->cap) tr__w_flush(w);
  }
}
static void tr__w_u32(tr__writer *w, uint32_t v) { unsigned char b[4]; tr__le(b, v, 4); tr__w_put(w, b, 4); }
static void tr__w_u64(tr__writer *w, uint64_t v) { unsigned char b[8]; tr__le(b, v, 8); tr__w_put(w, b, 8); }
static void tr__w_f32s(tr__writer *w, const float *x, size_t n) {
  unsigned char block[4096]; /* one checksum call per 1024 floats */
  size_t i, k;
  for (i = 0; i < n; i += k) {
    const uint32_t one = 1;
    k = n - i < sizeof block / 4 ? n - i : sizeof block / 4;
    if (*(const unsigned char *)&one == 1) memcpy(block, x + i, 4 * k); /* a little-endian host: as is */
    else {
      size_t j;
      for (j = 0; j < k; j++) {
        uint32_t u;
        memcpy(&u, &x[i + j], 4);
        tr__le(block + 4 * j, u, 4);
      }
    }
    tr__w_put(w, block, 4 * k);
  }
}
static void tr__w_begin(tr__writer *w, uint32_t tag, uint64_t size) {
  tr__sum fresh = TR__SUM_START;
  w->sum = fresh;
  w->left = 12;
  tr__w_u32(w, tag);
  tr__w_u64(w, size);
  w->left = size;
}
static void tr__w_end(tr__writer *w) {
  TRAIN_ASSERT(w->left == 0); /* the size written in the header matches the payload */
  w->left = 8;
  tr__w_u64(w, tr__sum_end(&w->sum));
}

/* The iterator's position: the data's during a fit, else the one kept from the last fit or load. */
static const hk_bytes *tr__data_position(tr_trainer *t, hk_bytes *live) {
  const tr_data *d = t->tr__cfg ? t->tr__cfg->train : NULL;
  if (!d || !d->save_state) return &t->tr__data_state;
  if (d->save_state(d->user, live) || live->failed) {
    tr__fail(t, TR_ERR_STATE, "train data: save_state() failed");
    return NULL;
  }
  return live;
}

/* Everything a checkpoint holds, at one moment: the file is written from it alone, so the background
   writer can write it from the staging buffer. */
typedef struct tr__snap {
  uint64_t n;                          /* parameters */
  uint32_t optim, n_buf, flags;
  int n_tensors;
  const tr_tensor *tensors;            /* the model's views (fixed) */
  uint64_t loop[9];                    /* the LOOP section's i64s */
  const float *params, *m, *v, *grads; /* grads: NULL outside an accumulation window */
  void *opt_owner;                     /* zero, rank 0: m, v come from the ranks (tr__dist_opt_each) */
  const unsigned char *data, *hooks;   /* tr__state_sink's layout */
  size_t data_len, hooks_len;
  int has_lrst;
  unsigned char lrst[TR__LR_STATE_SIZE];
} tr__snap;

/* Where the loop is, in the run layer's words (for the run's block). */
static tr_run_at tr__at(const tr_trainer *t) {
  if (t->tr__epoch_ended) return TR_RUN_AT_EPOCH_END;
  if (t->tr__val_at == t->epoch_batch) return TR_RUN_AT_VALIDATION; /* set when the validation begins */
  return t->epoch_batch ? TR_RUN_AT_BATCH : TR_RUN_AT_EPOCH_START;
}

/* The snapshot, pointing into the live trainer; hooks and live get the bytes asked of hooks and data. */
static tr_err tr__snap_take(tr_trainer *t, tr__snap *s, hk_bytes *live, hk_bytes *hooks) {
  const hk_bytes *data = tr__data_position(t, live);
  /* Outside a window no gradient is kept: the resumed run starts a new one. */
  int in_window = t->tr__accum_pos > 0;
  memset(s, 0, sizeof *s);
  s->n = t->model.n_params;
  s->optim = (uint32_t)t->optim.kind;
  s->n_buf = (uint32_t)t->tr__n_buf;
  s->flags = (t->tr__grads_zeroed && in_window ? TR__F_ZEROED : 0) | (HK_FLOW_HAS(&t->tr__flow, HK_SIGNAL_BIT(HK_SKIP_STEP)) && in_window ? TR__F_SKIP : 0) |
             (HK_FLOW_HAS(&t->tr__flow, HK_SIGNAL_BIT(HK_STOP)) ? TR__F_STOP : 0) | (t->tr__epoch_ended ? TR__F_ENDED : 0) |
             (t->tr__has_momentum ? TR__F_MOMENTUM : 0);
  s->n_tensors = t->model.n_tensors;
  s->tensors = t->model.tensors;
  s->loop[0] = t->seed;
  s->loop[1] = t->rng.state;
  s->loop[2] = (uint64_t)t->epoch;
  s->loop[3] = (uint64_t)t->global_step;
  s->loop[4] = (uint64_t)t->epoch_batch;
  s->loop[5] = (uint64_t)t->samples_seen;
  s->loop[6] = (uint64_t)t->tr__val_at;
  s->loop[7] = (uint64_t)t->tr__accum_pos;
  s->loop[8] = (uint64_t)(in_window ? t->tr__accum_n : 0);
  s->params = t->model.params;
  if (t->tr__zero && t->tr__dist) s->opt_owner = t; /* sharded: gathered as it is written */
  else {
    s->m = t->tr__n_buf >= 1 ? t->tr__m : NULL;
    s->v = t->tr__n_buf >= 2 ? t->tr__v : NULL;
  }
  s->grads = in_window ? t->model.grads : NULL; /* the window's partial sum must survive */
  if (data && data->len) { s->data = data->data; s->data_len = data->len; }
  if ((s->has_lrst = tr__lr_state_any(&t->run->lr_state)) != 0) tr__lr_state_put(s->lrst, &t->run->lr_state);
  if (!data) return t->tr__err;
  if (hk_state_save(t->reg, tr__state_sink, hooks) != HK_OK)
    return tr__fail(t, TR_ERR_STATE, "saving hook state failed: %s", hk_last_error(t->reg));
  /* the run's block (tr__peek hands it to tr_run_continue) */
  if (tr_run_block(t->reg, t->global_step, tr__at(t), tr__state_sink, hooks) != HK_OK) hooks->failed = 1;
  if (hooks->failed) return tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory");
  s->hooks = hooks->data;
  s->hooks_len = hooks->len;
  return TR_OK;
}

static void tr__w_piece(void *w, const float *x, size_t n) { tr__w_f32s((tr__writer *)w, x, n); }

static void tr__write_all(tr__writer *w, const tr__snap *s) {
  size_t n = (size_t)s->n, meta = 8 + 4 + 4 + 4, p;
  int i;
  unsigned char header[16];
  memcpy(header, TR__MAGIC, 8);
  tr__le(header + 8, TR__VERSION, 4);
  tr__le(header + 12, 0, 4);
  w->left = 16;
  tr__w_put(w, header, 16);

  for (i = 0; i < s->n_tensors; i++) meta += 4 + strlen(s->tensors[i].name) + 16;
  tr__w_begin(w, TR__META, meta);
  tr__w_u64(w, n);
  tr__w_u32(w, s->optim);
  tr__w_u32(w, s->n_buf);
  tr__w_u32(w, (uint32_t)s->n_tensors);
  for (i = 0; i < s->n_tensors; i++) {
    const tr_tensor *x = &s->tensors[i];
    size_t len = strlen(x->name);
    tr__w_u32(w, (uint32_t)len);
    tr__w_put(w, x->name, len);
    tr__w_u64(w, x->offset);
    tr__w_u64(w, x->count);
  }
  tr__w_end(w);

  tr__w_begin(w, TR__LOOP, TR__LOOP_SIZE);
  for (i = 0; i < 9; i++) tr__w_u64(w, s->loop[i]);
  tr__w_u32(w, s->flags);
  tr__w_end(w);

  tr__w_begin(w, TR__PARM, 4 * (uint64_t)n);
  tr__w_f32s(w, s->params, n);
  tr__w_end(w);

  tr__w_begin(w, TR__OPTM, 4 * (uint64_t)n * (uint64_t)s->n_buf);
  if (s->opt_owner) tr__dist_opt_each(s->opt_owner, tr__w_piece, w);
  else {
    if (s->n_buf >= 1) tr__w_f32s(w, s->m, n);
    if (s->n_buf >= 2) tr__w_f32s(w, s->v, n);
  }
  tr__w_end(w);

  if (s->grads) {
    tr__w_begin(w, TR__GRAD, 4 * (uint64_t)n);
    tr__w_f32s(w, s->grads, n);
    tr__w_end(w);
  }
  if (s->data_len) { /* the training iterator's position */
    tr__w_begin(w, TR__DATA, s->data_len);
    tr__w_put(w, s->data, s->data_len);
    tr__w_end(w);
  }
  if (s->has_lrst) { /* the schedule's state */
    tr__w_begin(w, TR__LRST, sizeof s->lrst);
    tr__w_put(w, s->lrst, sizeof s->lrst);
    tr__w_end(w);
  }
  for (p = 0; p + 4 <= s->hooks_len;) { /* one HOOK section per stateful hook */
    size_t klen = (size_t)tr__get(s->hooks + p, 4), len = (size_t)tr__get(s->hooks + p + 4 + klen, 8);
    tr__w_begin(w, TR__HOOK, 4 + (uint64_t)klen + 8 + len);
    tr__w_put(w, s->hooks + p, 4 + klen + 8 + len); /* u32 key length | key | u64 length | state */
    tr__w_end(w);
    p += 4 + klen + 8 + len;
  }
  tr__w_begin(w, TR__END, 0);
  tr__w_end(w);
  tr__w_flush(w);
}

/* The background writer's job. */
static void tr__save_job(tr__asave *as, tr__afile *a) {
  tr__writer w;
  memset(&w, 0, sizeof w);
  w.cap = 1 << 16;
  if (!(w.buf = (unsigned char *)malloc(w.cap))) { a->err = ENOMEM; a->step = "writing"; return; }
  w.af = a;
  tr__write_all(&w, (const tr__snap *)as->job_user);
  free(w.buf);
}

/* The loop's side: on_checkpoint_saved, or the failed write fails the run. */
static void tr__save_ended(tr__asave *as, hk_ctx *ctx) {
  tr_trainer *t = (tr_trainer *)as->owner;
  const char *path = t->ctx.path;
  (void)ctx;
  if (as->err) { tr__fail(t, as->err == ENOMEM ? TR_ERR_NOMEM : TR_ERR_IO, "tr_save (in the background): %s", as->why); return; }
  t->ctx.path = as->path;
  tr__fire(t, HK_ON_CHECKPOINT_SAVED);
  t->ctx.path = path;
}

/* A sharded optimizer state gathered into the staging buffer. */
typedef struct tr__stage_at { unsigned char *at; } tr__stage_at;
static void tr__stage_piece(void *u, const float *x, size_t n) {
  tr__stage_at *s = (tr__stage_at *)u;
  memcpy(s->at, x, 4 * n);
  s->at += 4 * n;
}

/* An asynchronous save's part in the step: one copy into the staging buffer (reused), then the thread. */
static void tr__stage_file(tr_trainer *t, const char *path, const tr__snap *live) {
  tr__asave *as;
  tr__snap *s;
  size_t n4 = 4 * (size_t)live->n, at = 0;
  size_t total = n4 * (1 + live->n_buf + (live->grads != NULL)) + live->data_len + live->hooks_len;
  if (!t->tr__asave && !(t->tr__asave = tr__asave_new())) { tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory"); return; }
  as = t->tr__asave;
  if (!as->job_user && !(as->job_user = malloc(sizeof(tr__snap)))) { tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory"); return; }
  if (tr__asave_reserve(as, total) || tr__asave_set_path(as, path)) {
    tr__fail(t, TR_ERR_NOMEM, "tr_save: out of memory staging '%s' (%zu bytes)", path, total);
    return;
  }
  s = (tr__snap *)as->job_user;
  *s = *live;
#define TR__STAGE(field, type, bytes) \
  do { if (live->field) { memcpy(as->buf + at, live->field, (bytes)); s->field = (type)(const void *)(as->buf + at); at += (bytes); } } while (0)
  TR__STAGE(params, const float *, n4); /* every array stays aligned */
  if (live->opt_owner) { /* sharded (rank 0): the ranks' pieces, m then v */
    tr__stage_at sa;
    sa.at = as->buf + at;
    tr__dist_opt_each(live->opt_owner, tr__stage_piece, &sa);
    if (live->n_buf >= 1) s->m = (const float *)(const void *)(as->buf + at);
    if (live->n_buf >= 2) s->v = (const float *)(const void *)(as->buf + at + n4);
    s->opt_owner = NULL;
    at += n4 * live->n_buf;
    if (t->tr__err) return; /* a shard did not arrive */
  }
  TR__STAGE(m, const float *, n4);
  TR__STAGE(v, const float *, n4);
  TR__STAGE(grads, const float *, n4);
  TR__STAGE(data, const unsigned char *, live->data_len);
  TR__STAGE(hooks, const unsigned char *, live->hooks_len);
#undef TR__STAGE
  as->len = at;
  as->job = tr__save_job;
  as->done = tr__save_ended;
  as->owner = t;
  tr__asave_submit(as);
  t->tr__staged = 1;
}

/* The file through the one checkpoint writer (tr__write_checkpoint, files.h), or staged (tr__async_now). */
typedef struct tr__ckpt_out { tr_trainer *t; const tr__snap *snap; } tr__ckpt_out;
static int tr__ckpt_fill(tr__afile *a, void *user) {
  tr__ckpt_out *o = (tr__ckpt_out *)user;
  tr__writer w;
  memset(&w, 0, sizeof w);
  w.cap = 1 << 16;
  if (!(w.buf = (unsigned char *)malloc(w.cap))) return ENOMEM;
  w.af = a;
  tr__write_all(&w, o->snap);
  free(w.buf);
  return w.failed ? w.failed : o->t->tr__err ? EIO : 0; /* a shard did not arrive: nothing is committed */
}
static tr_err tr__save_file(tr_trainer *t, const char *path) {
  tr__snap snap;
  hk_bytes live, hooks;
  char why[sizeof t->error - 16];
  memset(&live, 0, sizeof live);
  memset(&hooks, 0, sizeof hooks);
  if (tr__snap_take(t, &snap, &live, &hooks) == TR_OK) {
    if (t->tr__async_now) tr__stage_file(t, path, &snap);
    else {
      tr__ckpt_out o;
      tr_err e;
      o.t = t;
      o.snap = &snap;
      e = tr__write_checkpoint(path, tr__ckpt_fill, &o, why, sizeof why);
      if (e) tr__fail(t, e, "tr_save: %s", why);
    }
  }
  hk_bytes_free(&live);
  hk_bytes_free(&hooks);
  return t->tr__err;
}

/* Collect a background save (wait: until it is on disk). */
static void tr__saves_settle(tr_trainer *t, int wait) {
  tr__asave_settle(t->tr__asave, &t->ctx, wait);
}

/* The run's own error and signals are put back: a save returns its error, never changes the run's. */
TRAIN_API tr_err tr_save(tr_trainer *t, const char *path) {
  tr_err run_err, e;
  char run_msg[sizeof t->error];
  hk_flow run_flow;
  if (!t) return TR_ERR_INVALID;
  if (t->tr__saving)
    return tr__refuse(t, "tr_save called while a save is in progress (from an on_save_checkpoint or on_checkpoint_saved "
                      "hook?); ask for one with hk_request(ctx, HK_REQUEST_CHECKPOINT) instead");
  if (t->running == HK_STAGE_NONE) { t->tr__err = TR_OK; t->error[0] = 0; }
  tr__saves_settle(t, 1); /* one save in flight */
  run_err = t->tr__err;
  run_flow = t->tr__flow;
  if (run_err) memcpy(run_msg, t->error, sizeof run_msg);
  t->tr__err = TR_OK; /* on_exception may save a failing run */
  t->tr__saving = 1;
  t->tr__staged = 0;
  t->tr__async_now = t->running != HK_STAGE_NONE && !t->tr__sync_only && (t->tr__async || (t->run->async_requests && t->tr__in_request));
  tr__dist_agree(t); /* TRAIN_MPI: a save on some ranks only fails them all here */
  if (!t->tr__err && (!path || !path[0])) tr__fail(t, TR_ERR_INVALID, "tr_save: no path");
  else if (!t->tr__err) {
    t->ctx.path = path;
    tr__fire(t, HK_ON_SAVE_CHECKPOINT); /* hooks may update what they save */
    (void)tr__dev_to_host(t);    /* CUDA: host mirrors */
  }
  /* after a failure too: every rank in the same agreements */
  tr__dist_save_file(t, path, tr__save_file); /* rank 0 writes */
  tr__dev_unswap(t);
  if (!t->tr__err && !t->tr__staged) tr__fire(t, HK_ON_CHECKPOINT_SAVED); /* staged: once on disk */
  t->tr__async_now = t->tr__staged = 0;
  tr__dist_agree(t);
  t->ctx.path = NULL;
  e = t->tr__err;
  t->tr__saving = 0;
  if (e) memcpy(t->tr__save_why, t->error, sizeof t->tr__save_why);
  if (t->running != HK_STAGE_NONE) {
    t->tr__err = run_err;
    t->tr__flow = run_flow;
    if (run_err) memcpy(t->error, run_msg, sizeof run_msg);
    else if (tr__dist_broken(t)) t->tr__err = e; /* the ranks went different ways */
  }
  return e;
}

/* -- reading: verify everything first, then change the trainer -- */
typedef struct tr__section { uint32_t tag; const unsigned char *p; size_t n, at; } tr__section;

static const char *tr__tag_name(uint32_t tag, char out[5]) {
  int i;
  for (i = 0; i < 4; i++) {
    char c = (char)(tag >> (8 * i));
    out[i] = (c >= 32 && c < 127) ? c : '?';
  }
  out[4] = 0;
  return out;
}

/* A section's checksum as its file's format version has it; the 12 header bytes, then the payload. */
static uint64_t tr__section_sum(uint32_t version, const unsigned char *head, const unsigned char *p, size_t n) {
  tr__sum s = TR__SUM_START;
  if (version < 3) return tr__fnv(tr__fnv(TR__FNV_START, head, 12), p, n);
  tr__sum_add(&s, head, 12);
  tr__sum_add(&s, p, n);
  return tr__sum_end(&s);
}

/* The section at *pos: header, bounds, checksum. */
static tr_err tr__read_section(tr_trainer *t, const unsigned char *buf, size_t len, size_t *pos, tr__section *s) {
  size_t at = *pos, avail = len - at;
  uint64_t size;
  char name[5];
  if (avail < 12)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint truncated: a section header at byte %zu needs 12 bytes, %zu remain", at, avail);
  s->tag = (uint32_t)tr__get(buf + at, 4);
  size = tr__get(buf + at + 4, 8);
  if (size > (uint64_t)(avail - 12) || avail - 12 - (size_t)size < 8)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint truncated: section '%s' at byte %zu declares %llu bytes, %zu remain",
                    tr__tag_name(s->tag, name), at, (unsigned long long)size, avail - 12);
  if (tr__section_sum((uint32_t)tr__get(buf + 8, 4), buf + at, buf + at + 12, (size_t)size) != tr__get(buf + at + 12 + (size_t)size, 8))
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint corrupted: the checksum of section '%s' at byte %zu does not match",
                    tr__tag_name(s->tag, name), at);
  s->p = buf + at + 12;
  s->n = (size_t)size;
  s->at = at;
  *pos = at + 12 + (size_t)size + 8;
  return TR_OK;
}


static tr_err tr__expect(tr_trainer *t, const unsigned char *buf, size_t len, size_t *pos, uint32_t tag, tr__section *s) {
  char want[5], got[5];
  if (tr__read_section(t, buf, len, pos, s)) return t->tr__err;
  if (s->tag != tag)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: expected section '%s' at byte %zu, found '%s'",
                    tr__tag_name(tag, want), s->at, tr__tag_name(s->tag, got));
  return TR_OK;
}

/* A verified checkpoint: pointers into the file's bytes. */
typedef struct tr__ckpt {
  uint32_t version;
  tr__section meta, loop, parm, optm, grad, data;
  int has_grad, has_data;
  int n_hooks;                /* HOOK sections; their keys' bytes with terminators */
  size_t key_bytes;
  size_t hooks_at, hooks_end; /* the HOOK sections lie in [hooks_at, hooks_end) */
  uint64_t seed, rng;
  int64_t v[7];               /* LOOP's i64s */
  uint32_t flags;
  tr_sched_state lr_state;    /* zero (the start) without LRST */
} tr__ckpt;

static tr_err tr__check_meta(tr_trainer *t, const tr__section *s) {
  const unsigned char *p = s->p;
  size_t pos = 20, n = s->n;
  uint64_t n_params;
  uint32_t kind, nbuf, nt, i;
  static const char *optim_names[2] = { "AdamW", "SGD" };
  if (n < 20) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: META is %zu bytes, at least 20 expected", n);
  n_params = tr__get(p, 8);
  kind = (uint32_t)tr__get(p + 8, 4);
  nbuf = (uint32_t)tr__get(p + 12, 4);
  nt = (uint32_t)tr__get(p + 16, 4);
  if (kind > 1 || nbuf > 2) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: unknown optimizer %u with %u buffers", kind, nbuf);
  if (kind != (uint32_t)t->optim.kind)
    return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: it holds %s state, this trainer uses %s",
                    optim_names[kind], optim_names[t->optim.kind]);
  if (nbuf != (uint32_t)t->tr__n_buf)
    return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: it holds %u optimizer buffers, this trainer has %d "
                    "(SGD momentum on one side only?)", nbuf, t->tr__n_buf);
  if (nt != (uint32_t)t->model.n_tensors)
    return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: it has %u tensors, the model has %d", nt, t->model.n_tensors);
  for (i = 0; i < nt; i++) {
    const tr_tensor *x = &t->model.tensors[i];
    size_t len;
    uint64_t off, cnt;
    if (n - pos < 4) break;
    len = (size_t)tr__get(p + pos, 4);
    if (n - pos - 4 < 16 || len > n - pos - 4 - 16) break;
    off = tr__get(p + pos + 4 + len, 8);
    cnt = tr__get(p + pos + 4 + len + 8, 8);
    if (len != strlen(x->name) || memcmp(p + pos + 4, x->name, len) != 0)
      return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: tensor %u is '%.*s' in the checkpoint, '%s' in the model",
                      i, (int)(len > 64 ? 64 : len), (const char *)(p + pos + 4), x->name);
    if (off != x->offset || cnt != x->count)
      return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: tensor '%s' has %llu elements at offset %llu in the "
                      "checkpoint, %zu at offset %zu in the model", x->name, (unsigned long long)cnt,
                      (unsigned long long)off, x->count, x->offset);
    pos += 4 + len + 16;
  }
  if (i < nt || pos != n) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: the META section's tensor list is inconsistent");
  if (n_params != t->model.n_params)
    return tr__fail(t, TR_ERR_MISMATCH, "checkpoint mismatch: it has %llu parameters, the model has %zu",
                    (unsigned long long)n_params, t->model.n_params);
  return TR_OK;
}

static tr_err tr__parse(tr_trainer *t, const unsigned char *buf, size_t len, tr__ckpt *ck) {
  size_t pos = 16, n4 = t->model.n_params * 4;
  int i;
  tr__section s;
  memset(ck, 0, sizeof *ck);
  if (len < 16) return tr__fail(t, TR_ERR_FORMAT, "not a checkpoint: %zu bytes is too short", len);
  if (memcmp(buf, TR__MAGIC, 8) != 0 && len >= 24 && memcmp(buf + len - 8, "TRRUNEND", 8) == 0)
    return tr__fail(t, TR_ERR_FORMAT, "not a checkpoint of train.h's trainer: it is the checkpoint of a loop of your own "
                    "(tr_run_save wrote it, your model's bytes first); tr_run_load loads it (tr_run_start's resume_from), "
                    "not tr_fit's resume_from or tr_load");
  if (memcmp(buf, TR__MAGIC, 8) != 0) return tr__fail(t, TR_ERR_FORMAT, "not a train.h checkpoint (bad magic)");
  ck->version = (uint32_t)tr__get(buf + 8, 4);
  if (ck->version < 1 || ck->version > TR__VERSION)
    return tr__fail(t, TR_ERR_VERSION, "checkpoint format version %u; this build reads versions 1 to %u",
                    (unsigned)ck->version, TR__VERSION);
  if (tr__get(buf + 12, 4) != 0) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: unknown header flags");

  if (tr__expect(t, buf, len, &pos, TR__META, &ck->meta) || tr__check_meta(t, &ck->meta)) return t->tr__err;
  if (tr__expect(t, buf, len, &pos, TR__LOOP, &ck->loop)) return t->tr__err;
  if (ck->loop.n != TR__LOOP_SIZE)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: LOOP is %zu bytes, %d expected", ck->loop.n, TR__LOOP_SIZE);
  ck->seed = tr__get(ck->loop.p, 8);
  ck->rng = tr__get(ck->loop.p + 8, 8);
  for (i = 0; i < 7; i++) ck->v[i] = (int64_t)tr__get(ck->loop.p + 16 + 8 * i, 8);
  ck->flags = (uint32_t)tr__get(ck->loop.p + 72, 4);
  /* in range, so that nothing overflows when the loop counts on */
  for (i = 0; i < 7; i++) {
    static const char *const names[7] = { "epoch", "global_step", "epoch_batch", "samples_seen", "val_at", "accum_pos", "accum_n" };
    int64_t lo = i == 4 ? -1 : 0;
    if (ck->v[i] < lo || ck->v[i] > TR__MAX_COUNT)
      return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: LOOP's %s is %lld, outside %lld..2^53", names[i],
                      (long long)ck->v[i], (long long)lo);
  }
  if (ck->v[4] > ck->v[2])
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: LOOP's val_at (%lld) is after epoch_batch (%lld)",
                    (long long)ck->v[4], (long long)ck->v[2]);
  if (ck->v[5] > ck->v[2] + 1 || ck->v[6] > ck->v[5])
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: LOOP's accumulation counters (accum_pos %lld, accum_n %lld) do "
                    "not fit epoch_batch %lld (accum_n <= accum_pos <= epoch_batch + 1)", (long long)ck->v[5],
                    (long long)ck->v[6], (long long)ck->v[2]);
  if (ck->flags & ~(uint32_t)TR__F_ALL)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: LOOP's flags 0x%x has unknown bits (known: 0x%x)",
                    (unsigned)ck->flags, (unsigned)TR__F_ALL);

  if (tr__expect(t, buf, len, &pos, TR__PARM, &ck->parm)) return t->tr__err;
  if (ck->parm.n != n4) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: PARM is %zu bytes, %zu expected", ck->parm.n, n4);
  if (tr__expect(t, buf, len, &pos, TR__OPTM, &ck->optm)) return t->tr__err;
  if (ck->optm.n != n4 * (size_t)t->tr__n_buf)
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: OPTM is %zu bytes, %zu expected", ck->optm.n, n4 * (size_t)t->tr__n_buf);
  if (ck->v[5] > 0) {
    if (tr__expect(t, buf, len, &pos, TR__GRAD, &ck->grad)) return t->tr__err;
    if (ck->grad.n != n4) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: GRAD is %zu bytes, %zu expected", ck->grad.n, n4);
    ck->has_grad = 1;
  }
  if (ck->version >= 2 && len - pos >= 4 && tr__get(buf + pos, 4) == TR__DATA) {
    if (tr__expect(t, buf, len, &pos, TR__DATA, &ck->data)) return t->tr__err;
    ck->has_data = 1;
  }
  if (ck->version >= 2 && len - pos >= 4 && tr__get(buf + pos, 4) == TR__LRST) {
    tr__section ls;
    char why[200];
    if (tr__expect(t, buf, len, &pos, TR__LRST, &ls)) return t->tr__err;
    if (tr__lr_state_get(ls.p, ls.n, &ck->lr_state, why, sizeof why)) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: %s", why);
  }

  /* HOOK sections until END (hk_state_check finds duplicate keys, in linear time). */
  ck->hooks_at = pos;
  for (;;) {
    size_t klen, at = pos;
    if (tr__read_section(t, buf, len, &pos, &s)) return t->tr__err;
    if (s.tag == TR__END) break;
    if (s.tag != TR__HOOK) {
      char name[5];
      return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: unexpected section '%s' at byte %zu", tr__tag_name(s.tag, name), at);
    }
    klen = s.n >= 4 ? (size_t)tr__get(s.p, 4) : 0;
    if (s.n < 12 || klen == 0 || klen > TR__MAX_KEY || klen > s.n - 12 || tr__get(s.p + 4 + klen, 8) != s.n - 12 - klen ||
        memchr(s.p + 4, 0, klen) != NULL)
      return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: bad HOOK section at byte %zu", at);
    ck->n_hooks++;
    ck->key_bytes += klen + 1;
  }
  ck->hooks_end = pos - 20; /* where END starts */
  if (s.n != 0) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: the END section is not empty");
  if (pos != len) return tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: %zu unexpected bytes after the END section", len - pos);
  return TR_OK;
}

static void tr__read_f32s(float *dst, const unsigned char *p, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    uint32_t u = (uint32_t)tr__get(p + 4 * i, 4);
    memcpy(&dst[i], &u, 4);
  }
}

/* Every HOOK section to its hook, all or nothing (hk_state_load_all puts back those loaded before). */
static tr_err tr__load_hooks(tr_trainer *t, const unsigned char *buf, const tr__ckpt *ck) {
  char *keys = (char *)malloc(ck->key_bytes + 1), *k = keys;
  hk_state_blob *blobs = (hk_state_blob *)malloc(sizeof *blobs * (size_t)(ck->n_hooks + 1));
  size_t pos;
  int i, n, missing = 0, unknown = 0;
  if (!keys || !blobs) {
    free(keys);
    free(blobs);
    return tr__fail(t, TR_ERR_NOMEM, "out of memory loading the state of %d hooks", ck->n_hooks);
  }
  for (i = n = 0, pos = ck->hooks_at; i < ck->n_hooks; i++, pos += 12 + (size_t)tr__get(buf + pos + 4, 8) + 8) {
    const unsigned char *p = buf + pos + 12;
    size_t klen = (size_t)tr__get(p, 4);
    if (klen == sizeof TR_RUN_KEY - 1 && !memcmp(p + 4, TR_RUN_KEY, klen)) continue; /* the run's: read before setup (tr__peek) */
    memcpy(k, p + 4, klen);
    k[klen] = 0;
    blobs[n].key = k;
    blobs[n].data = p + 4 + klen + 8;
    blobs[n++].len = (size_t)tr__get(p + 4 + klen, 8);
    k += klen + 1;
  }
  if (hk_state_check(t->reg, blobs, n, &missing) != HK_OK)
    tr__fail(t, TR_ERR_FORMAT, "checkpoint malformed: %s", hk_last_error(t->reg));
  for (i = 0; i < n && !t->tr__err; i++)
    if (blobs[i].result == HK_ERR_NOT_FOUND && unknown++ == 0 && t->tr__strict_hook_state)
      tr__fail(t, TR_ERR_STATE, "the checkpoint holds state for '%s', which no registered hook loads (tr_desc.strict_hook_state)", blobs[i].key);
  if (!t->tr__err && missing && t->tr__strict_hook_state)
    tr__fail(t, TR_ERR_STATE, "the checkpoint holds %s (tr_desc.strict_hook_state)", hk_last_error(t->reg));
  if (!t->tr__err && hk_state_load_all(t->reg, blobs, n) != HK_OK)
    tr__fail(t, TR_ERR_STATE, "loading hook state: %s", hk_last_error(t->reg));
  if (!t->tr__err && missing) tr__warn(t, "the checkpoint holds %s: kept as it is now", hk_last_error(t->reg));
  for (i = 0; i < n && !t->tr__err; i++)
    if (blobs[i].result == HK_ERR_NOT_FOUND) tr__warn(t, "the checkpoint has state for an unknown hook '%s'; ignored", blobs[i].key);
  free(keys);
  free(blobs);
  return t->tr__err;
}

/* What a load replaces besides the floats: one struct, so that commit and rollback are one assignment. */
typedef struct tr__loop_state {
  uint64_t seed, rng;
  int64_t epoch, global_step, epoch_batch, samples_seen, val_at, accum_pos, accum_n;
  unsigned signals;
  int grads_zeroed, epoch_ended, has_momentum, restarting;
  tr_sched_state lr_state;
  hk_bytes data;
} tr__loop_state;

static void tr__get_loop(const tr_trainer *t, tr__loop_state *ls) {
  ls->seed = t->seed;                 ls->rng = t->rng.state;
  ls->epoch = t->epoch;               ls->global_step = t->global_step;
  ls->epoch_batch = t->epoch_batch;   ls->samples_seen = t->samples_seen;
  ls->val_at = t->tr__val_at;         ls->accum_pos = t->tr__accum_pos;
  ls->accum_n = t->tr__accum_n;       ls->signals = t->tr__flow.signals;
  ls->grads_zeroed = t->tr__grads_zeroed;
  ls->epoch_ended = t->tr__epoch_ended;
  ls->has_momentum = t->tr__has_momentum;
  ls->restarting = t->tr__restarting;
  ls->lr_state = t->run->lr_state;
  ls->data = t->tr__data_state;
}

static void tr__set_loop(tr_trainer *t, const tr__loop_state *ls) {
  t->seed = ls->seed;                 t->rng.state = ls->rng;
  t->epoch = ls->epoch;               t->global_step = ls->global_step;
  t->epoch_batch = ls->epoch_batch;   t->samples_seen = ls->samples_seen;
  t->tr__val_at = ls->val_at;         t->tr__accum_pos = ls->accum_pos;
  t->tr__accum_n = ls->accum_n;       t->tr__flow.signals = ls->signals;
  t->tr__grads_zeroed = ls->grads_zeroed;
  t->tr__epoch_ended = ls->epoch_ended;
  t->tr__has_momentum = ls->has_momentum;
  t->tr__restarting = ls->restarting;
  t->run->lr_state = ls->lr_state;
  t->tr__data_state = ls->data;
  t->ctx.epoch = t->epoch;
  t->ctx.global_step = t->global_step;
  t->ctx.samples_seen = t->samples_seen;
  t->ctx.batch_idx = t->epoch_batch;
  hk_grads_changed(&t->ctx);
}

/* The run layer saves in the trainer's format (tr_run_desc.save_checkpoint): hooks' requests, and
   on_exception_checkpoint's save during on_exception. */
static tr_err tr__save_for_request(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap) {
  tr_trainer *t = (tr_trainer *)user;
  tr_err e;
  t->tr__save_why[0] = 0;
  e = tr_save(t, path);
  (void)ctx;
  if (e) tr__msg(why, cap, "%s", t->tr__save_why[0] ? t->tr__save_why : t->error); /* the save's own reason */
  return e;
}

/* on_exception_checkpoint: the state after the last completed step. A window that did not step is
   undone (back to its first batch, no gradients), so the resume repeats it; counters restored after. */
static tr_err tr__save_failed(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap) {
  tr_trainer *t = (tr_trainer *)user;
  tr__loop_state kept;
  tr_err e;
  tr__get_loop(t, &kept);
  if (t->tr__win_open) {
    t->epoch_batch = t->tr__win_batch;
    t->samples_seen = t->tr__win_samples;
    t->tr__accum_pos = t->tr__accum_n = 0;
    t->tr__grads_zeroed = 0;
    t->tr__epoch_ended = 0;
    if (t->tr__val_at > t->epoch_batch) t->tr__val_at = -1;
  }
  e = tr__save_for_request(user, ctx, path, why, cap);
  tr__set_loop(t, &kept);
  return e;
}
/* Hook states as records (u32 key length | key | u64 length | bytes), to put back. */
static hk_err tr__snap_sink(const char *key, const void *data, size_t len, void *user) {
  hk_bytes *b = (hk_bytes *)user;
  uint32_t k = (uint32_t)strlen(key);
  uint64_t l = len;
  return hk_bytes_put(b, &k, 4) || hk_bytes_put(b, key, k) || hk_bytes_put(b, &l, 8) || hk_bytes_put(b, data, len) ? HK_ERR_NOMEM : HK_OK;
}
static void tr__snap_restore(tr_trainer *t, const hk_bytes *b) {
  size_t pos = 0;
  int n = 0, i;
  hk_state_blob *blobs;
  char *keys = (char *)malloc(b->len + 1), *k = keys;
  while (pos < b->len) { uint32_t kl; uint64_t l; memcpy(&kl, b->data + pos, 4); memcpy(&l, b->data + pos + 4 + kl, 8); pos += 12 + kl + (size_t)l; n++; }
  blobs = (hk_state_blob *)malloc(sizeof *blobs * (size_t)(n + 1));
  if (!keys || !blobs) {
    tr__warn(t, "out of memory putting the hooks' state back after a failed load");
  } else {
    for (i = 0, pos = 0; i < n; i++) {
      uint32_t kl;
      uint64_t l;
      memcpy(&kl, b->data + pos, 4);
      memcpy(k, b->data + pos + 4, kl);
      k[kl] = 0;
      memcpy(&l, b->data + pos + 4 + kl, 8);
      blobs[i].key = k;
      blobs[i].data = b->data + pos + 12 + kl;
      blobs[i].len = (size_t)l;
      k += kl + 1;
      pos += 12 + kl + (size_t)l;
    }
    if (hk_state_load_all(t->reg, blobs, n) != HK_OK) tr__warn(t, "putting the hooks' state back: %s", hk_last_error(t->reg));
  }
  free(keys);
  free(blobs);
}

/* A file that is not a checkpoint, or a bad one: the message names it. */
static tr_err tr__name_ckpt(tr_trainer *t, const char *path) {
  char old[sizeof t->error];
  if (!path || !strcmp(path, "<memory>") || strstr(t->error, path)) return t->tr__err;
  memcpy(old, t->error, sizeof old);
  if (!strncmp(old, "checkpoint ", 11)) tr__msg(t->error, sizeof t->error, "checkpoint '%s' %s", path, old + 11);
  else if (!strncmp(old, "not a ", 6)) tr__msg(t->error, sizeof t->error, "'%s' is %s", path, old);
  else tr__msg(t->error, sizeof t->error, "%s (checkpoint '%s')", old, path);
  return t->tr__err;
}
static tr_err tr__load_host(tr_trainer *t, const unsigned char *buf, size_t len, const char *path) {
  tr__ckpt ck;
  size_t n = t->model.n_params, lo = t->tr__opt_lo, k = t->tr__opt_n; /* the state of [lo, lo + k) */
  size_t n_floats = n * (size_t)(1 + (t->model.grads != NULL)) + k * (size_t)t->tr__n_buf;
  int listened = HK_ACTIVE(t->reg, HK_ON_LOAD_CHECKPOINT) != 0;
  tr__loop_state before, after;
  hk_bytes hooks_before = { NULL, 0, 0, 0 };
  float *floats_before = NULL;
  memset(&after, 0, sizeof after);
  /* Verify, then commit. The copy that puts everything back when on_load_checkpoint fails is made only
     when a hook listens to it (nothing else can fail after the commit). */
  if (tr__parse(t, buf, len, &ck)) return tr__name_ckpt(t, path);
  if (ck.has_grad && !t->model.grads)
    return tr__fail(t, TR_ERR_INVALID, "the checkpoint was written inside an accumulation window and holds its gradients, "
                    "but model.grads is not set: hand the buffer over with tr_set_buffers before loading");
  if (ck.has_data && hk_bytes_put(&after.data, ck.data.p, ck.data.n))
    return tr__fail(t, TR_ERR_NOMEM, "out of memory for the training data's position (%zu bytes)", ck.data.n);
  if (listened) {
    floats_before = (float *)malloc(sizeof(float) * (n_floats ? n_floats : 1));
    if (!floats_before || hk_state_save(t->reg, tr__snap_sink, &hooks_before) != HK_OK || hooks_before.failed) {
      free(floats_before);
      hk_bytes_free(&hooks_before);
      hk_bytes_free(&after.data);
      return tr__fail(t, TR_ERR_NOMEM, "out of memory keeping the trainer's state while loading (%zu floats)", n_floats);
    }
    memcpy(floats_before, t->model.params, 4 * n);
    if (t->tr__n_buf >= 1) memcpy(floats_before + n, t->tr__m, 4 * k);
    if (t->tr__n_buf >= 2) memcpy(floats_before + n + k, t->tr__v, 4 * k);
    if (t->model.grads) memcpy(floats_before + n + k * (size_t)t->tr__n_buf, t->model.grads, 4 * n);
  }
  if (tr__load_hooks(t, buf, &ck)) {
    free(floats_before);
    hk_bytes_free(&hooks_before);
    hk_bytes_free(&after.data);
    return t->tr__err;
  }

  tr__get_loop(t, &before);
  tr__read_f32s(t->model.params, ck.parm.p, n);
  if (t->tr__n_buf >= 1) tr__read_f32s(t->tr__m, ck.optm.p + 4 * lo, k); /* a shard takes its slice */
  if (t->tr__n_buf >= 2) tr__read_f32s(t->tr__v, ck.optm.p + 4 * (n + lo), k); /* (any world size) */
  if (ck.has_grad) tr__read_f32s(t->model.grads, ck.grad.p, n);
  tr__dev_upload(t); /* CUDA: to the device */
  after.seed = ck.seed;
  after.rng = ck.rng;
  after.epoch = ck.v[0];
  after.global_step = ck.v[1];
  after.epoch_batch = ck.v[2];
  after.samples_seen = ck.v[3];
  after.val_at = ck.v[4];
  after.accum_pos = ck.v[5];
  after.accum_n = ck.v[6];
  after.grads_zeroed = (ck.flags & TR__F_ZEROED) != 0;
  after.signals = ((ck.flags & TR__F_SKIP) ? HK_SIGNAL_BIT(HK_SKIP_STEP) : 0) |
                  ((ck.flags & TR__F_STOP) ? HK_SIGNAL_BIT(HK_STOP) : 0); /* what hooks asked, held */
  after.epoch_ended = (ck.flags & TR__F_ENDED) != 0;
  after.has_momentum = (ck.flags & TR__F_MOMENTUM) != 0;
  after.restarting = after.epoch_batch > 0 && !after.epoch_ended; /* mid-epoch or mid-validation (Lightning) */
  after.lr_state = ck.lr_state;
  tr__set_loop(t, &after); /* no DATA: the iterator starts afresh */
  { /* what the ranks compare: the file's checksums */
    const tr__section *used[5] = { &ck.meta, &ck.loop, &ck.parm, &ck.optm, &ck.grad };
    int u;
    t->tr__loaded = TR__FNV_START;
    for (u = 0; u < 4 + ck.has_grad; u++) t->tr__loaded = tr__fnv(t->tr__loaded, used[u]->p + used[u]->n, 8);
  }

  t->ctx.path = path;
  tr__fire(t, HK_ON_LOAD_CHECKPOINT); /* hook state is already restored */
  t->ctx.path = NULL;
  if (t->tr__err && listened) { /* as if the load never started */
    memcpy(t->model.params, floats_before, 4 * n);
    if (t->tr__n_buf >= 1) memcpy(t->tr__m, floats_before + n, 4 * k);
    if (t->tr__n_buf >= 2) memcpy(t->tr__v, floats_before + n + k, 4 * k);
    if (t->model.grads) memcpy(t->model.grads, floats_before + n + k * (size_t)t->tr__n_buf, 4 * n);
    tr__dev_upload(t);
    tr__set_loop(t, &before);
    tr__snap_restore(t, &hooks_before);
    hk_bytes_free(&after.data);
  } else hk_bytes_free(&before.data);
  free(floats_before);
  hk_bytes_free(&hooks_before);
  return t->tr__err;
}

/* A regular file no larger than tr__max_ckpt, read in one pass (a growing one is refused, not read forever). */
static tr_err tr__read_file(tr_trainer *t, const char *path, unsigned char **out, size_t *out_len) {
  unsigned char *buf;
  uint64_t size;
  size_t len = 0;
#ifdef TR__POSIX
  struct stat st;
#ifdef O_NONBLOCK
  int fd = open(path, O_RDONLY | O_NONBLOCK); /* a FIFO must not block: refused below */
#else
  int fd = open(path, O_RDONLY);
#endif
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return tr__fail(t, TR_ERR_NOT_FOUND, "checkpoint '%s' does not exist", path);
    return tr__fail(t, TR_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(err));
  }
  if (fstat(fd, &st) != 0) { int err = errno; close(fd); return tr__fail(t, TR_ERR_IO, "cannot stat checkpoint '%s': %s", path, strerror(err)); }
  if (S_ISDIR(st.st_mode)) { close(fd); return tr__fail(t, TR_ERR_IO, "'%s' is a directory, not a checkpoint file", path); }
  if (!S_ISREG(st.st_mode)) { close(fd); return tr__fail(t, TR_ERR_IO, "'%s' is not a regular file (a device, pipe or socket?); checkpoints are files", path); }
  size = (uint64_t)st.st_size;
#else
  FILE *f = fopen(path, "rb");
  long end;
  if (!f) {
    int err = errno;
    if (err == ENOENT) return tr__fail(t, TR_ERR_NOT_FOUND, "checkpoint '%s' does not exist", path);
    return tr__fail(t, TR_ERR_IO, "cannot open checkpoint '%s': %s", path, strerror(err));
  }
  if (fseek(f, 0, SEEK_END) != 0 || (end = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return tr__fail(t, TR_ERR_IO, "'%s' is not a regular file; checkpoints are files", path);
  }
  size = (uint64_t)end;
#endif
  if (size > t->tr__max_ckpt || size > (uint64_t)SIZE_MAX - 1) {
#ifdef TR__POSIX
    close(fd);
#else
    fclose(f);
#endif
    return tr__fail(t, TR_ERR_FORMAT, "checkpoint '%s' is %llu bytes, more than the %llu this model's checkpoints can need "
                    "(raise tr_desc.max_checkpoint_bytes if its hooks keep that much state)", path,
                    (unsigned long long)size, (unsigned long long)t->tr__max_ckpt);
  }
  buf = (unsigned char *)malloc((size_t)size + 1);
  if (!buf) {
#ifdef TR__POSIX
    close(fd);
#else
    fclose(f);
#endif
    return tr__fail(t, TR_ERR_NOMEM, "out of memory reading '%s' (%llu bytes)", path, (unsigned long long)size);
  }
  for (;;) { /* one byte more: to see a file that grew */
#ifdef TR__POSIX
    ssize_t k = read(fd, buf + len, (size_t)size + 1 - len);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) { int err = errno; free(buf); close(fd); return tr__fail(t, TR_ERR_IO, "reading checkpoint '%s' failed: %s", path, strerror(err)); }
#else
    size_t k = fread(buf + len, 1, (size_t)size + 1 - len, f);
    if (k == 0 && ferror(f)) { free(buf); fclose(f); return tr__fail(t, TR_ERR_IO, "reading checkpoint '%s' failed", path); }
#endif
    if (k == 0) break;
    len += (size_t)k;
    if (len > size) break;
  }
#ifdef TR__POSIX
  close(fd);
#else
  fclose(f);
#endif
  if (len != size) {
    free(buf);
    return tr__fail(t, TR_ERR_IO, "checkpoint '%s' changed size while it was read (%llu bytes, then %s%zu): is something "
                    "writing it?", path, (unsigned long long)size, len > size ? "more than " : "", len > size ? (size_t)size : len);
  }
  *out = buf;
  *out_len = len;
  return TR_OK;
}

/* TRAIN_CUDA: read into the device buffers' host mirrors. */
static tr_err tr__load_mem(tr_trainer *t, const unsigned char *buf, size_t len, const char *path) {
  if (!tr__dev_to_host(t)) tr__load_host(t, buf, len, path);
  tr__dev_unswap(t);
  return t->tr__err;
}

static tr_err tr__load_file(tr_trainer *t, const char *path) {
  unsigned char *buf = NULL;
  size_t len = 0;
  if (tr__read_file(t, path, &buf, &len)) return t->tr__err;
  tr__load_mem(t, buf, len, path);
  free(buf);
  return t->tr__err;
}

/* resume "auto": a checkpoint of this model that reads whole, and its step. */
static int tr__ckpt_check(void *user, const char *path, int64_t *step, char *why, size_t cap) {
  tr_trainer *t = (tr_trainer *)user;
  unsigned char *buf = NULL;
  size_t len = 0;
  tr__ckpt ck;
  int bad = tr__read_file(t, path, &buf, &len) || tr__parse(t, buf, len, &ck);
  if (bad) tr__msg(why, cap, "%s", t->error);
  else *step = ck.v[1];
  free(buf);
  t->tr__err = TR_OK; /* (before the fit) */
  t->error[0] = 0;
  return bad;
}

/* ---- a resume with nothing left to train ---------------------------------------------------------------
   tr_fit looks at the checkpoint it resumes before anything fires (nothing is made on disk): a run that
   finished (max_epochs / max_steps reached under this fit's limits) or stopped early (a hook's HK_STOP,
   recorded in the checkpoint, that min_epochs / min_steps no longer hold) would train nothing, and its
   hooks would say misleading things (early_stopping: "never checked"). TR_ERR_INVALID then, saying what
   to raise: max_epochs / max_steps, or early_stopping's patience (a larger one given now wins over the
   checkpoint's: the fit then goes on past the recorded stop). A file that cannot be read or parsed here
   is left to the load, which says why. */
typedef struct tr__peeked {
  int64_t epoch, step;
  uint32_t flags;
  char es_key[TR__MAX_KEY + 1]; /* an early_stopping that stopped */
  int64_t es_wait, es_patience, es_reason;
  char es_msg[300];
} tr__peeked;
static int tr__peek_read(FILE *f, unsigned char *buf, size_t n) { return fread(buf, 1, n, f) == n ? 0 : -1; }
static int tr__peek(hk_registry *reg, const char *path, tr__peeked *pk) {
  unsigned char head[16 + 12 + TR__LOOP_SIZE + 8], *hook = NULL;
  FILE *f = fopen(path, "rb");
  int rc = -1, seen_loop = 0;
  uint32_t version;
  memset(pk, 0, sizeof *pk);
  if (!f) return -1;
  if (tr__peek_read(f, head, 16) || memcmp(head, TR__MAGIC, 8) != 0) goto done;
  version = (uint32_t)tr__get(head + 8, 4);
  for (;;) {
    uint32_t tag;
    uint64_t size;
    if (tr__peek_read(f, head, 12)) goto done;
    tag = (uint32_t)tr__get(head, 4);
    size = tr__get(head + 4, 8);
    if (tag == TR__END) { rc = seen_loop ? 0 : -1; goto done; }
    if (tag == TR__LOOP) {
      if (size != TR__LOOP_SIZE || tr__peek_read(f, head + 12, TR__LOOP_SIZE + 8) ||
          tr__section_sum(version, head, head + 12, TR__LOOP_SIZE) != tr__get(head + 12 + TR__LOOP_SIZE, 8))
        goto done;
      pk->epoch = (int64_t)tr__get(head + 12 + 16, 8);
      pk->step = (int64_t)tr__get(head + 12 + 24, 8);
      pk->flags = (uint32_t)tr__get(head + 12 + 72, 4);
      seen_loop = 1;
      continue;
    }
    if (tag == TR__HOOK && size >= 12 && size < ((uint64_t)1 << 20)) { /* the run's block; an early stop */
      size_t klen, n = (size_t)size;
      if (!(hook = (unsigned char *)malloc(n + 8)) || tr__peek_read(f, hook, n + 8)) goto done;
      klen = (size_t)tr__get(hook, 4);
      if (klen <= n - 12 && tr__section_sum(version, head, hook, n) == tr__get(hook + n, 8)) {
        const unsigned char *data = hook + 4 + klen + 8;
        size_t len = n - 12 - klen;
        if (klen == sizeof TR_RUN_KEY - 1 && !memcmp(hook + 4, TR_RUN_KEY, klen)) (void)tr_run_continue(reg, data, len);
#if TR__ON_EARLY_STOPPING
        else if (!pk->es_key[0] && klen <= TR__MAX_KEY && klen >= 15 && !memcmp(hook + 4, "early_stopping{", 15)) {
          hk_reader rd;
          tr__es_saved v;
          memset(&rd, 0, sizeof rd);
          rd.data = data;
          rd.len = len;
          if (tr__es_read(&rd, &v) == 0) {
            if (v.reason != TR_STOP_NOT_STOPPED) {
              memcpy(pk->es_key, hook + 4, klen);
              pk->es_key[klen] = 0;
              pk->es_wait = v.wait;
              pk->es_patience = v.patience;
              pk->es_reason = v.reason;
              snprintf(pk->es_msg, sizeof pk->es_msg, "%s", v.msg ? v.msg : "");
            }
            free(v.msg);
          }
        }
#endif
      }
      free(hook);
      hook = NULL;
      continue;
    }
    if (size > (uint64_t)LONG_MAX - 8 || fseek(f, (long)(size + 8), SEEK_CUR) != 0) goto done;
  }
done:
  free(hook);
  fclose(f);
  return rc;
}
static tr_err tr__resume_check(tr_trainer *t, const tr_config *c) {
  tr__peeked pk;
  int64_t epochs;
  const char *path = c->resume_from;
  char why[sizeof t->error];
  t->tr__lift_stop = 0;
  if (tr__peek(t->reg, path, &pk)) return TR_OK; /* the load says why */
  epochs = pk.epoch + ((pk.flags & TR__F_ENDED) ? 1 : 0); /* saved in on_train_epoch_end: done */
  if (tr__resume_finished(why, sizeof why, "tr_fit", path, epochs, pk.step, c->max_epochs, c->max_steps, "")) /* base.h */
    return tr__fail(t, TR_ERR_INVALID, "%s", why);
  if (!(pk.flags & TR__F_STOP) || epochs < c->min_epochs || pk.step < c->min_steps) return TR_OK;
#if TR__ON_EARLY_STOPPING
  if (pk.es_key[0]) { /* early_stopping's rule */
    tr__es_saved v;
    memset(&v, 0, sizeof v);
    v.wait = pk.es_wait;
    v.patience = pk.es_patience;
    v.reason = pk.es_reason;
    v.msg = pk.es_msg;
    switch (tr__es_resume_verdict(t->reg, "tr_fit", path, epochs, pk.step, pk.es_key, &v, why, sizeof why)) {
    case 2: t->tr__lift_stop = 1; return TR_OK;
    case 1: return tr__fail(t, TR_ERR_INVALID, "%s", why);
    default: break;
    }
  }
#endif
  return tr__fail(t, TR_ERR_INVALID, "tr_fit: the run that wrote '%s' stopped early, at epoch %lld (step %lld): a hook asked it to stop "
                  "(HK_STOP), and the checkpoint keeps that: resuming it trains nothing", path, (long long)epochs, (long long)pk.step);
}

/* A requeued job's save_to: its run block to the run (tr__peek); 1 with why when another job wrote it. */
static int tr__requeue_foreign(tr_trainer *t, const char *path, char *why, size_t cap) {
  tr__peeked pk;
  (void)tr_run_continue(t->reg, NULL, 0);
  (void)tr__peek(t->reg, path, &pk);
  if (!tr_run_other_job(t->reg, path, why, cap)) return 0;
  (void)tr_run_continue(t->reg, NULL, 0);
  return 1;
}

/* A load during a run would pull the counters from under the loop: refused, the run untouched. */
static tr_err tr__load_allowed(tr_trainer *t) {
  if (t->running != HK_STAGE_NONE)
    return tr__refuse(t, "tr_load called during a %s run (from a hook?); to resume inside a fit, use tr_config.resume_from",
                      hk_stage_name(t->running));
  t->tr__err = TR_OK;
  t->error[0] = 0;
  return TR_OK;
}

TRAIN_API tr_err tr_load(tr_trainer *t, const char *path) {
  if (!t) return TR_ERR_INVALID;
  if (tr__load_allowed(t)) return TR_ERR_INVALID;
  if (!path || !path[0]) return tr__fail(t, TR_ERR_INVALID, "tr_load: no path");
  return tr__load_file(t, path);
}

TRAIN_API tr_err tr_load_mem(tr_trainer *t, const void *data, size_t len) {
  if (!t) return TR_ERR_INVALID;
  if (tr__load_allowed(t)) return TR_ERR_INVALID;
  if (!data && len) return tr__fail(t, TR_ERR_INVALID, "tr_load_mem: no data");
  return tr__load_mem(t, (const unsigned char *)(data ? data : ""), len, "<memory>");
}
static tr_err tr__save_checkpoint(void *user, hk_ctx *ctx, const char *path, char *why, size_t cap) {
  tr_trainer *t = (tr_trainer *)user;
  tr_err e;
  if (ctx->abort_reason) return tr__save_failed(user, ctx, path, why, cap);
  t->tr__in_request = 1; /* model_checkpoint(async_save) */
  e = tr__save_for_request(user, ctx, path, why, cap);
  t->tr__in_request = 0;
  if (e) tr__fail(t, e, "%s", why);
  return e;
}
static void tr__wait_saves(void *user, hk_ctx *ctx) { (void)ctx; tr__saves_settle((tr_trainer *)user, 1); }
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
