/* train/loggers/mlflow.h - mlflow: records to an MLflow tracking server. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_MLFLOW_H /* part */
#define TRAIN_MLFLOW_H /* part */
#include "../battery.h" /* part */

TR__C_BEGIN /* part */
/* mlflow: the run's records in an MLflow tracking server (its REST API through libcurl). Needs
   #define TRAIN_MLFLOW and -lcurl; without them "mlflow" is refused with a message saying so. It makes the
   experiment and run, sends the hyperparameters once, every record's metrics, the latest checkpoint as a
   tag and the run's end status (FINISHED, FAILED, KILLED). Nothing waits on the step: values go into a
   queue allocated once, one background thread sends them in batches within MLflow's limits, retrying a
   server that is down or slow; what a run's end cannot send is kept in the run directory and sent by the
   next start. The run never fails because of the tracker. A resume continues the MLflow run (its id is
   the state). Rank 0 only. Authentication as MLflow's clients (MLFLOW_TRACKING_TOKEN, _USERNAME /
   _PASSWORD, _INSECURE_TLS). docs/logging.md ("MLflow"). */
#define TR_MLFLOW_PARAMS(X) /* kind, C type, name, default, choices, doc (see TR__FIELD) */ \
  X(STRING,   const char *, tracking_uri,  "",       NULL, "the tracking server: http://host:port or https://host[:port][/path] " \
    "(empty: the environment's MLFLOW_TRACKING_URI)") \
  X(STRING,   const char *, experiment,    "",       NULL, "the experiment's name, made when missing (empty: MLFLOW_EXPERIMENT_NAME, " \
    "else the run's name: lightning_logs by default)") \
  X(STRING,   const char *, run_name,      "",       NULL, "the MLflow run's name (empty: the server picks one)") \
  X(STRING,   const char *, tags,          "",       NULL, "tags of the MLflow run: \"key=value,key=value\"") \
  X(INT_ZERO, int,          timeout_ms,    "5000",   NULL, "the limit of one request in ms, connecting and answering (a server " \
    "that takes the connection and never answers is given up after it)") \
  X(INT_ZERO, int,          max_queue,     "100000", NULL, "metric values kept while the server does not take them (32 bytes " \
    "each, allocated at the start); newer ones are dropped beyond it, and counted") \
  X(DOUBLE_ZERO, double,    flush_timeout, "10",     NULL, "seconds a run's end waits at most for the queue to be sent")
typedef struct tr_mlflow_desc { TR_MLFLOW_PARAMS(TR__FIELD) } tr_mlflow_desc;

/* What the logger knows now (a copy: the sender thread changes it). */
typedef struct tr_mlflow_state {
  char run_id[64];          /* the MLflow run ("" until the server created it) */
  char experiment_id[64];
  int64_t queued;           /* values waiting in the queue */
  int64_t sent;             /* values the server took */
  int64_t dropped;          /* values dropped: the queue was full, or the server refused them */
  int up;                   /* the last request got an answer */
  char error[256];          /* the last thing that went wrong ("" when none) */
} tr_mlflow_state;

TRAIN_API tr_err tr_mlflow_logger(hk_registry *reg, const tr_mlflow_desc *d, hk_handle *out);
/* The state of the mlflow logger h into out: TR_OK, or TR_ERR_INVALID when h is not one (or TRAIN_MLFLOW
   is not defined). */
TRAIN_API tr_err tr_mlflow_get(const hk_registry *reg, hk_handle h, tr_mlflow_state *out);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
#ifdef TRAIN_MLFLOW
#  ifndef TR__THREADS
#    error "train.h: TRAIN_MLFLOW sends from a background thread: it needs POSIX threads (remove TRAIN_NO_THREADS)"
#  endif
#  include <curl/curl.h>
#endif
TR__C_BEGIN /* part */
#define TR__MLF_NO_CURL "mlflow: this program was built without the MLflow logger: compile train.h's implementation with " \
  "-DTRAIN_MLFLOW and link with -lcurl (libcurl; Debian/Ubuntu: apt-get install libcurl4-openssl-dev)"
#ifndef TRAIN_MLFLOW
static tr_err tr__mlf_make(hk_registry *reg, const tr_mlflow_desc *d, hk_handle *out, tr__why *w) {
  (void)reg; (void)d; (void)out;
  return tr__bad(w, TR__MLF_NO_CURL);
}
TRAIN_API tr_err tr_mlflow_get(const hk_registry *reg, hk_handle h, tr_mlflow_state *out) { (void)reg; (void)h; (void)out; return TR_ERR_INVALID; }
#else
/* MLflow's limits per log-batch request, and this logger's own */
enum { TR__MLF_BATCH = 1000, TR__MLF_PARAMS = 100, TR__MLF_BODY = 1000000, TR__MLF_KEY = 250, TR__MLF_VALUE = 6000,
       TR__MLF_BLOCK = 1024, TR__MLF_BLOCKS = 64 /* metric names: 65536 at most, in blocks that never move */ };
#define TR__MLF_BACKOFF_MAX 4.0 /* seconds between tries at most while the server does not answer */
#define TR__MLF_GATHER 0.1      /* seconds values gather before a request that is not full */
/* what the sender has to say to the loop's thread (said there, once each) */
enum { TR__MLF_SAY_DOWN = 1, TR__MLF_SAY_BACK = 2, TR__MLF_SAY_REFUSED = 4, TR__MLF_SAY_STARTED = 8, TR__MLF_SAY_GAVE_UP = 16,
       TR__MLF_SAY_PARAMS = 32, TR__MLF_SAY_STUCK = 64, TR__MLF_SAY_SPOOL = 128 };
#define TR__MLF_SLOWEST 6 /* a request waits at most timeout_ms << 6 for its answer */
typedef struct tr__mlf_item { int64_t step, ms; double value; int32_t key; } tr__mlf_item;

typedef struct tr__mlf {
  tr_run *run;
  /* settings (read-only once made) */
  char *uri, *experiment, *run_name, *token, *userpwd;
  char **tags;                 /* key, value, key, value ... */
  int n_tags, insecure;
  long timeout_ms;
  double flush_timeout;
  /* shared with the sender: under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;           /* the sender waits for work; a run's end waits for the sender */
  pthread_t th;
  int started, quit;
  tr__mlf_item *ring;          /* the queue: count items from tail */
  int cap, tail, count;
  char **names[TR__MLF_BLOCKS]; /* metric names by key (block, index): each written before n_names publishes it */
  int n_names;
  char run_id[64], experiment_id[64];
  int want;                    /* a run is going: the MLflow run is to be created (or set RUNNING) */
  int ready;                   /* the MLflow run is there and RUNNING */
  int gave_up;                 /* it could not be created: nothing more is sent */
  hk_bytes params;             /* key\0value\0 ... to send (n_params, from param_at) */
  int n_params, param_at;
  char *checkpoint;            /* the latest checkpoint path not sent yet (NULL: none) */
  const char *end;             /* the status to send at the run's end (NULL: none) */
  int ended;                   /* it was sent (or could not be) */
  double next_try;             /* after a failed request: not before this (tr__wall) */
  double next_send;            /* values that do not fill a request wait until then */
  int idle;                    /* the sender waits: 1 for work, 2 gathering values, 3 pausing after a failure */
  int64_t sent, dropped, refused, unsent;
  int slow, timeouts_slowest, stuck; /* a request waits timeout_ms << slow; tries at the longest; nothing more is sent */
  int limit, plimit;           /* values, params a request at most now: halved when refused (one bad entry is found and
                                  dropped alone) or not answered in time, doubled back after a success */
  unsigned gen;                /* bumped when a run's end takes what is unsent (tr__mlf_spool): a request in flight then
                                  changes nothing */
  char run_key[24];            /* the tag train_h_run_key of the MLflow run being made: a runs/create that got no answer
                                  is looked for (runs/search) before it is made again */
  int create_unknown;          /* a runs/create got no answer: the server may have made the run */
  char **sp_line;              /* lines of spool files (mlflow_unsent.txt) to send first: sp_at .. sp_n */
  int *sp_file, sp_n, sp_at, sp_files;
  char **sp_path;              /* the spool files read (removed, or written again with what is left, at the end) */
  tr__file_id *sp_id;
  char sp_rid[64];             /* the MLflow run of the spool lines being sent */
  int64_t sp_sent, sp_refused;
  int up, was_down;            /* the last request got an answer; one did not, once */
  int said, news;              /* TR__MLF_SAY_*: said already, to say */
  char error[256];
  /* the loop's side only */
  int in_run, rank0, failed_status, warned_names;
  char *resume_id;             /* a checkpoint's MLflow run, to continue */
  /* the sender's side only */
  CURL *curl;
  struct curl_slist *headers;
  hk_bytes body, reply;
  tr__mlf_item *batch;
} tr__mlf;

/* The name a key is sent as */
static const char *tr__mlf_sent_name(const tr__mlf *s, int key) {
  const char *n = s->names[key / TR__MLF_BLOCK][key % TR__MLF_BLOCK], *fixed = n + strlen(n) + 1;
  return fixed[0] ? fixed : n;
}
static double tr__mlf_backoff(int tries) { double d = 0.25; while (tries-- > 1 && d < TR__MLF_BACKOFF_MAX) d *= 2; return d < TR__MLF_BACKOFF_MAX ? d : TR__MLF_BACKOFF_MAX; }

/* ---- the sender's side: HTTP through libcurl -------------------------------------------------------- */
/* libcurl's progress callback: a request in flight ends at once when the logger is destroyed */
static int tr__mlf_progress(void *user, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
  tr__mlf *s = (tr__mlf *)user;
  int quit;
  (void)a; (void)b; (void)c; (void)d;
  pthread_mutex_lock(&s->mu);
  quit = s->quit;
  pthread_mutex_unlock(&s->mu);
  return quit;
}
static size_t tr__mlf_take(char *p, size_t size, size_t n, void *user) {
  hk_bytes *b = (hk_bytes *)user;
  if (b->len < 65536) hk_bytes_put(b, p, size * n < 65536 - b->len ? size * n : 65536 - b->len); /* an answer's head is enough */
  return size * n;
}
/* One request: body NULL a GET. 0 and *status, or -1 with s->error set (no answer: refused, timed out). */
static int tr__mlf_http(tr__mlf *s, const char *path, const hk_bytes *body, long *status) {
  char url[1200], err[CURL_ERROR_SIZE];
  CURLcode c;
  snprintf(url, sizeof url, "%s/api/2.0/mlflow/%s", s->uri, path);
  s->reply.len = 0;
  err[0] = 0;
  curl_easy_setopt(s->curl, CURLOPT_URL, url);
  curl_easy_setopt(s->curl, CURLOPT_TIMEOUT_MS, s->timeout_ms << s->slow); /* a slow server's answer is waited for longer */
  curl_easy_setopt(s->curl, CURLOPT_ERRORBUFFER, err);
  if (body) {
    curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, (const char *)body->data);
    curl_easy_setopt(s->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
  } else curl_easy_setopt(s->curl, CURLOPT_HTTPGET, 1L);
  c = curl_easy_perform(s->curl);
  hk_bytes_put(&s->reply, "", 1);
  s->reply.len--;
  if (c != CURLE_OK) {
    pthread_mutex_lock(&s->mu);
    snprintf(s->error, sizeof s->error, "%s", err[0] ? err : curl_easy_strerror(c));
    /* no answer in time: the server may have stored the request. The next try waits twice as long (up to 64
       times timeout_ms) with half the values: a slow server is given the time it needs, never the same
       request forever; at the longest wait, 3 more tries, then nothing more is sent by this process (the
       values are kept in the run directory at the end, tr__mlf_spool) */
    if (c == CURLE_OPERATION_TIMEDOUT) {
      if (s->slow < TR__MLF_SLOWEST) s->slow++;
      else if (++s->timeouts_slowest >= 3) { s->stuck = 1; s->news |= TR__MLF_SAY_STUCK; }
      if (s->limit > 1) s->limit /= 2;
    }
    pthread_mutex_unlock(&s->mu);
    return -1;
  }
  s->timeouts_slowest = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, status);
  return 0;
}
/* A JSON string's text (p after its opening quote), escapes undone (\u as UTF-8), cut to cap - 1 bytes:
   the character after its closing quote, or NULL when it has none. */
static const char *tr__mlf_jstr(const char *p, char *out, size_t cap) {
  size_t n = 0;
  while (*p && *p != '"') {
    char c = *p++;
    unsigned u = 0;
    int k;
    if (c == '\\') {
      c = *p++;
      if (c == 'n') c = '\n'; else if (c == 't') c = '\t'; else if (c == 'r') c = '\r'; else if (c == 'b') c = '\b'; else if (c == 'f') c = '\f';
      else if (c == 'u') {
        for (k = 0; k < 4 && *p; k++, p++) u = u * 16 + (unsigned)(*p <= '9' ? *p - '0' : (*p | 32) - 'a' + 10);
        if (u >= 0x80) { /* as UTF-8 (a surrogate half stays as it is: a message, not data) */
          char b[3];
          int m = u >= 0x800 ? 3 : 2;
          if (m == 3) { b[0] = (char)(0xE0 | (u >> 12)); b[1] = (char)(0x80 | ((u >> 6) & 0x3F)); b[2] = (char)(0x80 | (u & 0x3F)); }
          else { b[0] = (char)(0xC0 | (u >> 6)); b[1] = (char)(0x80 | (u & 0x3F)); }
          for (k = 0; k < m; k++) if (n + 1 < cap) out[n++] = b[k];
          continue;
        }
        c = (char)u;
      } else if (!c) break;
    }
    if (n + 1 < cap) out[n++] = c;
  }
  if (cap) out[n] = 0;
  return *p == '"' ? p + 1 : NULL;
}
/* A string field of a JSON answer ("run_id": "..."), the first one: 1 found, 0 not. */
static int tr__mlf_field(const char *json, const char *key, char *out, size_t cap) {
  char pat[64];
  const char *p = json;
  snprintf(pat, sizeof pat, "\"%s\"", key);
  while ((p = strstr(p, pat)) != NULL) {
    p += strlen(pat);
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    if (*p++ != ':') continue;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    if (*p++ != '"') continue;
    return tr__mlf_jstr(p, out, cap) != NULL;
  }
  return 0;
}
/* The outcome of a request: 1 taken; 0 refused for good (4xx: the request is wrong, sending it again does
   not help; s->error says why); -1 try again later (no answer, 5xx, 408, 429). */
static int tr__mlf_outcome(tr__mlf *s, int r, long status, const char *what) {
  char msg[200] = "";
  if (r == 0 && status >= 200 && status < 300) return 1;
  if (r == 0) {
    if (!tr__mlf_field((const char *)s->reply.data, "message", msg, sizeof msg))
      snprintf(msg, sizeof msg, "%.100s", (const char *)s->reply.data);
    pthread_mutex_lock(&s->mu);
    snprintf(s->error, sizeof s->error, "%s: HTTP %ld%s%s", what, status, msg[0] ? ": " : "", msg);
    pthread_mutex_unlock(&s->mu);
  }
  if (r != 0 || status < 200 || status >= 500 || status == 408 || status == 429) return -1;
  return 0;
}

/* The request bodies (MLflow's REST API 2.0, JSON) */
static void tr__mlf_kv(hk_bytes *b, const char *k, const char *v) {
  tr__json_str(b, "key"); tr__put_s(b, ":"); tr__json_str(b, k); tr__put_s(b, ",");
  tr__json_str(b, "value"); tr__put_s(b, ":"); tr__json_str(b, v);
}
static int64_t tr__mlf_ms(void) { return (int64_t)(tr__wall() * 1000.0); }

/* runs/create's body: the run's name, tags and key (train_h_run_key: it is found by it) */
static void tr__mlf_create_body(const tr__mlf *s, hk_bytes *b, const char *eid) {
  int i;
  tr__put_s(b, "{\"experiment_id\":"); tr__json_str(b, eid);
  if (s->run_name) { tr__put_s(b, ",\"run_name\":"); tr__json_str(b, s->run_name); }
  tr__putf(b, ",\"start_time\":%lld,\"tags\":[{", (long long)tr__mlf_ms());
  tr__mlf_kv(b, "mlflow.source.type", "LOCAL");
  tr__put_s(b, "}");
  if (s->run_name) { tr__put_s(b, ",{"); tr__mlf_kv(b, "mlflow.runName", s->run_name); tr__put_s(b, "}"); }
  for (i = 0; i < s->n_tags; i++) { tr__put_s(b, ",{"); tr__mlf_kv(b, s->tags[2 * i], s->tags[2 * i + 1]); tr__put_s(b, "}"); }
  tr__put_s(b, ",{"); tr__mlf_kv(b, "train_h_run_key", s->run_key); tr__put_s(b, "}");
  tr__put_s(b, "]}");
}
/* Make the MLflow run: the experiment by name (made when missing), then runs/create; or, for a run whose
   id is known (a resume, a later run of the same logger), runs/update to RUNNING. 1, 0 or -1 as above. */
static int tr__mlf_start(tr__mlf *s, const char *known) {
  char eid[64] = "", rid[64] = "", life[32] = "";
  long status = 0;
  int r;
  hk_bytes *b = &s->body;
  b->len = 0;
  if (known[0]) {
    tr__put_s(b, "{\"run_id\":"); tr__json_str(b, known); tr__put_s(b, ",\"status\":\"RUNNING\"}");
    r = tr__mlf_http(s, "runs/update", b, &status);
    if (r == 0 && status == 404) known = ""; /* not on this server (deleted, another server): a new run */
    else {
      if ((r = tr__mlf_outcome(s, r, status, "runs/update")) == 1) {
        pthread_mutex_lock(&s->mu);
        snprintf(s->run_id, sizeof s->run_id, "%s", known);
        s->ready = 1;
        s->news |= TR__MLF_SAY_STARTED;
        pthread_mutex_unlock(&s->mu);
      }
      return r;
    }
  }
  {
    char *q = curl_easy_escape(s->curl, s->experiment, 0), path[700];
    if (!q) return -1;
    snprintf(path, sizeof path, "experiments/get-by-name?experiment_name=%s", q);
    curl_free(q);
    r = tr__mlf_http(s, path, NULL, &status);
  }
  if (r == 0 && status == 404) { /* missing: made (another process may make it at the same moment: asked again) */
    b->len = 0;
    tr__put_s(b, "{\"name\":"); tr__json_str(b, s->experiment); tr__put_s(b, "}");
    r = tr__mlf_http(s, "experiments/create", b, &status);
    if (r == 0 && status == 400 && strstr((const char *)s->reply.data, "RESOURCE_ALREADY_EXISTS")) return -1;
  }
  if ((r = tr__mlf_outcome(s, r, status, "the experiment")) != 1) return r;
  if (!tr__mlf_field((const char *)s->reply.data, "experiment_id", eid, sizeof eid)) return -1;
  if (tr__mlf_field((const char *)s->reply.data, "lifecycle_stage", life, sizeof life) && !strcmp(life, "deleted")) {
    pthread_mutex_lock(&s->mu);
    snprintf(s->error, sizeof s->error, "the experiment '%.80s' is deleted: restore it (mlflow experiments restore) or name "
             "another", s->experiment);
    pthread_mutex_unlock(&s->mu);
    return 0;
  }
  b->len = 0;
  tr__mlf_create_body(s, b, eid);
  if (b->failed) return -1;
  if (s->create_unknown) { /* the last runs/create got no answer: made anyway? (runs/create is not idempotent) */
    hk_bytes q;
    int found = 0;
    memset(&q, 0, sizeof q);
    tr__put_s(&q, "{\"experiment_ids\":["); tr__json_str(&q, eid);
    tr__putf(&q, "],\"filter\":\"tags.train_h_run_key = '%s'\",\"max_results\":1}", s->run_key);
    r = q.failed ? -1 : tr__mlf_http(s, "runs/search", &q, &status);
    hk_bytes_free(&q);
    if ((r = tr__mlf_outcome(s, r, status, "runs/search")) != 1) return r;
    found = tr__mlf_field((const char *)s->reply.data, "run_id", rid, sizeof rid);
    if (found) goto made;
  }
  r = tr__mlf_http(s, "runs/create", b, &status);
  s->create_unknown = r != 0;
  r = tr__mlf_outcome(s, r, status, "runs/create");
  if (r != 1) return r;
  if (!tr__mlf_field((const char *)s->reply.data, "run_id", rid, sizeof rid)) return -1;
made:
  pthread_mutex_lock(&s->mu);
  snprintf(s->run_id, sizeof s->run_id, "%s", rid);
  snprintf(s->experiment_id, sizeof s->experiment_id, "%s", eid);
  s->ready = 1;
  s->news |= TR__MLF_SAY_STARTED;
  pthread_mutex_unlock(&s->mu);
  return 1;
}

/* The next params (up to 100 a request): 1 sent, 0 refused (a param of the run has another value: MLflow
   never changes one; the rest are left), -1 try again. */
static int tr__mlf_send_params(tr__mlf *s, const char *rid) {
  hk_bytes *b = &s->body;
  const char *p = (const char *)s->params.data;
  int i, n = 0, r;
  unsigned gen;
  long status = 0;
  pthread_mutex_lock(&s->mu);
  gen = s->gen;
  pthread_mutex_unlock(&s->mu);
  for (i = 0; i < s->param_at; i++) { p += strlen(p) + 1; p += strlen(p) + 1; }
  b->len = 0;
  tr__put_s(b, "{\"run_id\":"); tr__json_str(b, rid); tr__put_s(b, ",\"params\":[");
  for (i = s->param_at; i < s->n_params && n < s->plimit; i++, n++) {
    const char *k = p, *v = p + strlen(p) + 1;
    p = v + strlen(v) + 1;
    tr__put_s(b, n ? ",{" : "{");
    tr__mlf_kv(b, k, v);
    tr__put_s(b, "}");
  }
  tr__put_s(b, "]}");
  if (b->failed) return -1;
  r = tr__mlf_http(s, "runs/log-batch", b, &status);
  r = tr__mlf_outcome(s, r, status, "params");
  pthread_mutex_lock(&s->mu);
  if (gen != s->gen) r = r < 0 ? r : 1; /* the run's end took them meanwhile */
  else if (r == 1) { s->param_at += n; if (s->plimit < TR__MLF_PARAMS) s->plimit *= 2; }
  else if (r == 0 && n > 1 && status == 400) { s->plimit = n / 2; r = 1; } /* one of them is refused: halves until it is alone */
  else if (r == 0 && status == 400) { s->param_at++; s->news |= TR__MLF_SAY_PARAMS; r = 1; }
  else if (r == 0) { s->param_at = s->n_params; s->news |= TR__MLF_SAY_PARAMS; } /* it alone (a param of the run has another value: MLflow never changes one) */
  pthread_mutex_unlock(&s->mu);
  return r;
}

/* The next batch of metric values from the queue: at most 1000 and 1 MB. 1 sent (or refused for good:
   counted as dropped), -1 try again. */
static int tr__mlf_send_metrics(tr__mlf *s, const char *rid) {
  hk_bytes *b = &s->body;
  int i, n, r;
  unsigned gen;
  long status = 0;
  pthread_mutex_lock(&s->mu);
  gen = s->gen;
  n = s->count < s->limit ? s->count : s->limit;
  for (i = 0; i < n; i++) s->batch[i] = s->ring[(s->tail + i) % s->cap];
  pthread_mutex_unlock(&s->mu);
  b->len = 0;
  tr__put_s(b, "{\"run_id\":"); tr__json_str(b, rid); tr__put_s(b, ",\"metrics\":[");
  for (i = 0; i < n; i++) {
    const tr__mlf_item *it = &s->batch[i];
    if (b->len > TR__MLF_BODY - 2 * TR__MLF_KEY - 200) break; /* the next one might not fit: in the next batch */
    tr__put_s(b, i ? ",{\"key\":" : "{\"key\":");
    tr__json_str(b, tr__mlf_sent_name(s, it->key));
    tr__put_s(b, ",\"value\":");
    tr__json_num(b, it->value); /* NaN, Infinity, -Infinity as strings: MLflow's JSON */
    tr__putf(b, ",\"timestamp\":%lld,\"step\":%lld}", (long long)it->ms, (long long)it->step);
  }
  n = i;
  tr__put_s(b, "]}");
  if (b->failed) return -1;
  r = tr__mlf_http(s, "runs/log-batch", b, &status);
  r = tr__mlf_outcome(s, r, status, "metrics");
  if (r < 0) return -1;
  pthread_mutex_lock(&s->mu);
  if (gen != s->gen) { pthread_mutex_unlock(&s->mu); return 1; } /* the run's end took the queue meanwhile */
  if (r == 0 && n > 1 && status == 400) s->limit = n / 2; /* one bad value never takes the others down: halves until it is alone */
  else {
    s->tail = (s->tail + n) % s->cap;
    s->count -= n;
    if (r == 1) { s->sent += n; if (s->limit < TR__MLF_BATCH) s->limit = s->limit * 2 < TR__MLF_BATCH ? s->limit * 2 : TR__MLF_BATCH; }
    else { s->refused += n; s->news |= TR__MLF_SAY_REFUSED; }
  }
  pthread_mutex_unlock(&s->mu);
  return 1;
}

/* A tag (the latest checkpoint) or the run's end: one small request. */
static int tr__mlf_send_small(tr__mlf *s, const char *rid, const char *path, const char *key, const char *value, const char *status_text) {
  hk_bytes *b = &s->body;
  long status = 0;
  int r;
  b->len = 0;
  tr__put_s(b, "{\"run_id\":"); tr__json_str(b, rid);
  if (status_text) tr__putf(b, ",\"status\":\"%s\",\"end_time\":%lld}", status_text, (long long)tr__mlf_ms());
  else { tr__put_s(b, ","); tr__mlf_kv(b, key, value); tr__put_s(b, "}"); }
  if (b->failed) return -1;
  r = tr__mlf_http(s, path, b, &status); /* (then the outcome: status is set by the call) */
  return tr__mlf_outcome(s, r, status, path);
}


/* ---- values kept in the run directory (mlflow_unsent.txt): what a run's end could not send ----------
   Lines: "train.h mlflow unsent 1" first; then "run\t<run id>" or "create\t<run key>\t<experiment, a JSON
   string>\t<runs/create's body, @EXP@ for the experiment's id>" (an MLflow run that was never made), each
   followed by "post\t<path>\t<body, @RUN@ for the run's id>" requests: params, the checkpoint tag, metrics
   (their own timestamps: sent twice, MLflow's SQL store keeps one), the run's end status last. Sent by the
   next start or resume of an mlflow logger in that run directory or beside it (another version_N of the
   same name), before anything else; the file goes when all of it is sent. */
#define TR__MLF_SPOOL "mlflow_unsent.txt"
#define TR__MLF_SPOOL_HEAD "train.h mlflow unsent 1"
static void tr__mlf_subst(hk_bytes *out, const char *body, const char *pat, const char *val) {
  const char *p;
  size_t n = strlen(pat);
  out->len = 0;
  while ((p = strstr(body, pat)) != NULL) { hk_bytes_put(out, body, (size_t)(p - body)); tr__put_s(out, val); body = p + n; }
  tr__put_s(out, body);
  hk_bytes_put(out, "", 1);
  out->len--;
}
/* The experiment's id by name, made when missing: 1, 0 refused (deleted), -1 try again */
static int tr__mlf_experiment(tr__mlf *s, const char *name, char *eid, size_t cap) {
  char *q = curl_easy_escape(s->curl, name, 0), path[700], life[32] = "";
  long status = 0;
  int r;
  if (!q) return -1;
  snprintf(path, sizeof path, "experiments/get-by-name?experiment_name=%s", q);
  curl_free(q);
  r = tr__mlf_http(s, path, NULL, &status);
  if (r == 0 && status == 404) {
    s->body.len = 0;
    tr__put_s(&s->body, "{\"name\":"); tr__json_str(&s->body, name); tr__put_s(&s->body, "}");
    r = tr__mlf_http(s, "experiments/create", &s->body, &status);
    if (r == 0 && status == 400 && strstr((const char *)s->reply.data, "RESOURCE_ALREADY_EXISTS")) return -1;
  }
  if ((r = tr__mlf_outcome(s, r, status, "the experiment")) != 1) return r;
  if (!tr__mlf_field((const char *)s->reply.data, "experiment_id", eid, cap)) return -1;
  if (tr__mlf_field((const char *)s->reply.data, "lifecycle_stage", life, sizeof life) && !strcmp(life, "deleted")) return 0;
  return 1;
}
/* The next spooled line: 1 done (sent, or refused for good: counted), -1 try again later. */
static int tr__mlf_send_spooled(tr__mlf *s) {
  char *line, *tab, *body;
  unsigned gen;
  int r = 1;
  long status = 0;
  hk_bytes sub;
  pthread_mutex_lock(&s->mu);
  gen = s->gen;
  line = tr__strdup(s->sp_line[s->sp_at]);
  pthread_mutex_unlock(&s->mu);
  if (!line) return -1;
  memset(&sub, 0, sizeof sub);
  if (!strncmp(line, "run\t", 4)) snprintf(s->sp_rid, sizeof s->sp_rid, "%s", line + 4);
  else if (!strncmp(line, "create\t", 7) && (tab = strchr(line + 7, '\t')) != NULL && tab[1] == '"') {
    char exp[600], eid[64], *key = line + 7;
    const char *after;
    *tab = 0;
    s->sp_rid[0] = 0;
    if (!(after = tr__mlf_jstr(tab + 2, exp, sizeof exp)) || *after != '\t') r = 0;
    else if ((r = tr__mlf_experiment(s, exp, eid, sizeof eid)) == 1) {
      hk_bytes q; /* made already (a create that got no answer, a spool sent twice)? */
      memset(&q, 0, sizeof q);
      tr__put_s(&q, "{\"experiment_ids\":["); tr__json_str(&q, eid);
      tr__putf(&q, "],\"filter\":\"tags.train_h_run_key = '%s'\",\"max_results\":1}", key);
      r = q.failed ? -1 : tr__mlf_http(s, "runs/search", &q, &status);
      hk_bytes_free(&q);
      if ((r = tr__mlf_outcome(s, r, status, "runs/search")) == 1 && !tr__mlf_field((const char *)s->reply.data, "run_id", s->sp_rid, sizeof s->sp_rid)) {
        tr__mlf_subst(&sub, after + 1, "@EXP@", eid);
        r = sub.failed ? -1 : tr__mlf_http(s, "runs/create", &sub, &status);
        if ((r = tr__mlf_outcome(s, r, status, "runs/create")) == 1 && !tr__mlf_field((const char *)s->reply.data, "run_id", s->sp_rid, sizeof s->sp_rid)) r = -1;
      }
    }
  } else if (!strncmp(line, "post\t", 5) && (body = strchr(line + 5, '\t')) != NULL) {
    *body++ = 0;
    if (!s->sp_rid[0]) r = 0; /* its run could not be made */
    else {
      tr__mlf_subst(&sub, body, "@RUN@", s->sp_rid);
      r = sub.failed ? -1 : tr__mlf_http(s, line + 5, &sub, &status);
      r = tr__mlf_outcome(s, r, status, line + 5);
    }
  }
  hk_bytes_free(&sub);
  free(line);
  pthread_mutex_lock(&s->mu);
  if (r >= 0 && gen == s->gen) {
    s->sp_at++;
    if (r == 1) s->sp_sent++; else s->sp_refused++;
  }
  pthread_mutex_unlock(&s->mu);
  return r < 0 ? -1 : 1;
}
/* Work the sender can do now (under mu) */
static int tr__mlf_work(const tr__mlf *s) {
  if (s->stuck) return 0;
  if (s->sp_at < s->sp_n) return 1;
  if (s->gave_up) return s->count > 0 || (s->end && !s->ended) || s->checkpoint != NULL;
  if (!s->ready) return s->want;
  return s->param_at < s->n_params || s->checkpoint || s->count > 0 || (s->end && !s->ended);
}
/* One request of what is to be done, in this order: the run, its params, the checkpoint tag, the values,
   the end. 1 progress, -1 try again later. */
static int tr__mlf_step(tr__mlf *s) {
  char rid[64], known[64], *ckpt;
  const char *end;
  int ready, gave_up, r = 1;
  pthread_mutex_lock(&s->mu);
  ready = s->ready, gave_up = s->gave_up;
  snprintf(rid, sizeof rid, "%s", s->run_id);
  snprintf(known, sizeof known, "%s", s->run_id);
  ckpt = s->checkpoint;
  end = s->end;
  r = s->sp_at < s->sp_n;
  pthread_mutex_unlock(&s->mu);
  if (r) return tr__mlf_send_spooled(s); /* what earlier runs could not send, first */
  r = 1;
  if (gave_up) { /* nothing can be sent: what waits is dropped (counted) */
    pthread_mutex_lock(&s->mu);
    s->refused += s->count;
    s->count = 0;
    free(s->checkpoint);
    s->checkpoint = NULL;
    s->ended = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 1;
  }
  if (!ready) {
    r = tr__mlf_start(s, known);
    if (r == 0) {
      pthread_mutex_lock(&s->mu);
      s->gave_up = 1;
      s->news |= TR__MLF_SAY_GAVE_UP;
      pthread_mutex_unlock(&s->mu);
      return 1;
    }
    return r;
  }
  if (s->param_at < s->n_params) return tr__mlf_send_params(s, rid);
  if (ckpt) {
    if ((r = tr__mlf_send_small(s, rid, "runs/set-tag", "checkpoint", ckpt, NULL)) < 0) return r;
    pthread_mutex_lock(&s->mu);
    if (s->checkpoint == ckpt) s->checkpoint = NULL; else ckpt = NULL; /* a newer one came meanwhile: it goes next */
    pthread_mutex_unlock(&s->mu);
    free(ckpt);
    return 1;
  }
  pthread_mutex_lock(&s->mu);
  r = s->count;
  pthread_mutex_unlock(&s->mu);
  if (r > 0) return tr__mlf_send_metrics(s, rid);
  if (end && (r = tr__mlf_send_small(s, rid, "runs/update", NULL, NULL, end)) < 0) return r;
  pthread_mutex_lock(&s->mu);
  if (s->end == end) s->ended = 1, s->ready = s->want = 0; /* the next run of this logger sets it RUNNING again */
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return 1;
}

/* Wait under mu until `until` (a tr__wall time), or a signal. */
static void tr__mlf_wait_until(tr__mlf *s, double until) {
  struct timespec ts;
  ts.tv_sec = (time_t)until;
  ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
  pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}
/* Only metric values wait, fewer than a full request: they gather for TR__MLF_GATHER seconds first (one
   request, not one per record). Under mu. */
static int tr__mlf_gathering(const tr__mlf *s) {
  return s->ready && !s->gave_up && s->sp_at >= s->sp_n && s->param_at >= s->n_params && !s->checkpoint && !(s->end && !s->ended) &&
         s->count < TR__MLF_BATCH && tr__wall() < s->next_send;
}
/* The loop's side wakes the sender only when that does something: it waits for work, or gathers and a request
   is full (urgent: something else than values came). A pause after a failure is never cut short but by the end. */
static void tr__mlf_wake(tr__mlf *s, int urgent) {
  if (s->idle == 1 || (s->idle == 2 && (urgent || s->count >= TR__MLF_BATCH))) pthread_cond_signal(&s->cv);
}
static void *tr__mlf_main(void *p) {
  tr__mlf *s = (tr__mlf *)p;
  int tries = 0, r;
  pthread_mutex_lock(&s->mu);
  while (!s->quit) {
    if (!tr__mlf_work(s)) { s->idle = 1; pthread_cond_wait(&s->cv, &s->mu); s->idle = 0; continue; }
    if (tr__wall() < s->next_try) { s->idle = 3; tr__mlf_wait_until(s, s->next_try); s->idle = 0; continue; }
    if (tr__mlf_gathering(s)) { s->idle = 2; tr__mlf_wait_until(s, s->next_send); s->idle = 0; continue; }
    pthread_mutex_unlock(&s->mu);
    r = tr__mlf_step(s);
    pthread_mutex_lock(&s->mu);
    if (r < 0) {
      s->next_try = tr__wall() + tr__mlf_backoff(++tries);
      s->news |= TR__MLF_SAY_DOWN;
      s->up = 0;
      s->was_down = 1;
    } else {
      if (!s->up && s->was_down) s->news |= TR__MLF_SAY_BACK;
      s->up = 1;
      tries = 0;
      s->next_try = 0;
      if (s->count < TR__MLF_BATCH) s->next_send = tr__wall() + TR__MLF_GATHER;
    }
    pthread_cond_broadcast(&s->cv); /* a run's end, a checkpoint's save may wait for this */
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* ---- the loop's side ---------------------------------------------------------------------------- */
/* What the sender has to say, said here (the loop's thread: above the progress bar); all but the run's
   start once per logger. */
static void tr__mlf_say(tr__mlf *s, const hk_ctx *ctx) {
  int news;
  char err[256], rid[64];
  pthread_mutex_lock(&s->mu);
  news = s->news & ~(s->said & ~TR__MLF_SAY_STARTED);
  s->said |= news;
  s->news = 0;
  memcpy(err, s->error, sizeof err);
  memcpy(rid, s->run_id, sizeof rid);
  pthread_mutex_unlock(&s->mu);
  if (news & TR__MLF_SAY_STARTED) tr__run_say(s->run, ctx, "mlflow", "run %s in experiment '%s' at %s", rid, s->experiment, s->uri);
  if (news & TR__MLF_SAY_DOWN)
    tr__run_say(s->run, ctx, "mlflow", "%s does not answer (%s): the values wait (up to max_queue=%d) and are sent when it does; "
                "training goes on", s->uri, err, s->cap);
  if (news & TR__MLF_SAY_BACK)
    tr__run_say(s->run, ctx, "mlflow", "%s answers again: the values that waited are being sent", s->uri);
  if (news & TR__MLF_SAY_REFUSED)
    tr__run_say(s->run, ctx, "mlflow", "%s refused metric values (%s): they are dropped (counted); training goes on", s->uri, err);
  if (news & TR__MLF_SAY_PARAMS)
    tr__run_say(s->run, ctx, "mlflow", "%s kept the run's params as they were (%s): MLflow never changes a param's value", s->uri, err);
  if (news & TR__MLF_SAY_STUCK)
    tr__run_say(s->run, ctx, "mlflow", "%s took longer than %ld ms to answer 3 times (%s): this process sends it nothing more; what "
                "is unsent is kept in the run directory at the run's end", s->uri, s->timeout_ms << TR__MLF_SLOWEST, err);
  if (news & TR__MLF_SAY_GAVE_UP)
    tr__run_say(s->run, ctx, "mlflow", "cannot create the run at %s (%s): nothing is sent to MLflow; training goes on", s->uri, err);
}

/* The sender thread, made with every signal blocked (as the background writer: Ctrl-C reaches the loop). */
static int tr__mlf_thread(tr__mlf *s) {
  int ok;
#ifdef TR__SIGMASK
  tr__sigset all, old;
  int masked = sigfillset(&all) == 0 && pthread_sigmask(TR__SIG_SETMASK, &all, &old) == 0;
  ok = pthread_create(&s->th, NULL, tr__mlf_main, s) == 0;
  if (masked) (void)pthread_sigmask(TR__SIG_SETMASK, &old, NULL);
#else
  ok = pthread_create(&s->th, NULL, tr__mlf_main, s) == 0;
#endif
  return ok;
}

/* A key as MLflow takes it (validate_param_and_metric_name, path_not_unique): [A-Za-z0-9_-. :/] only, a
   path that normalises to itself, at most 250 bytes. Mended: another character (non-ASCII too) becomes
   '_', empty and "." parts go, ".." becomes "__". 0 as it was; 1 mended into out; -1 not sendable. */
static int tr__mlf_fix_name(const char *in, char *out, size_t cap) {
  size_t n = 0, i = 0;
  while (in[i]) {
    size_t j = i, k;
    while (in[j] && in[j] != '/') j++;
    if (j - i == 0 || (j - i == 1 && in[i] == '.')) { i = in[j] ? j + 1 : j; continue; } /* "", "." */
    if (n && n + 1 < cap) out[n++] = '/';
    for (k = i; k < j; k++) {
      unsigned char c = (unsigned char)in[k];
      int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("_-. :", c));
      if (c >= 0x80 && (c & 0xC0) == 0x80) continue; /* a UTF-8 character's tail: its one '_' is out */
      if (n + 1 < cap) out[n++] = ok ? (char)c : '_';
    }
    i = in[j] ? j + 1 : j;
  }
  out[n < cap ? n : cap - 1] = 0;
  for (i = 0; out[i]; i++) /* ".." as a part, or first: "__" */
    if (out[i] == '.' && out[i + 1] == '.' && (i == 0 || out[i - 1] == '/') && (i == 0 || out[i + 2] == '/' || !out[i + 2]))
      out[i] = out[i + 1] = '_';
  if (!out[0] || n > TR__MLF_KEY || n + 1 >= cap) return -1;
  return strcmp(in, out) != 0;
}
/* Spool files of earlier runs (tr__mlf_spool) for this server: in the run directory and beside it (the other
   version_N of its name); their lines go to the sender, first. Once until the next run's end. */
static void tr__mlf_spool_read(tr__mlf *s, hk_ctx *ctx) {
  const char *dir = s->run->tr__p->dir;
  char *parent, *slash, **names = NULL, head[1100];
  int n, i, lines = 0, files = 0;
  if (!dir || s->sp_files || !(parent = tr__strdup(dir))) return;
  pthread_mutex_lock(&s->mu); /* the sender reads the lines under it */
  slash = strrchr(parent, '/');
  if (!slash) strcpy(parent, ".");
  else slash[slash == parent] = 0;
  snprintf(head, sizeof head, "%s\t%s\n", TR__MLF_SPOOL_HEAD, s->uri);
  n = tr__dir_names(parent, "", &names);
  for (i = 0; i < n; i++) {
    hk_bytes b;
    tr__file_id id;
    char *path = NULL, *p, *end;
    memset(&b, 0, sizeof b);
    memset(&id, 0, sizeof id);
    if (strcmp(names[i], ".") && strcmp(names[i], "..") && (p = tr__join(parent, names[i])) != NULL) {
      path = tr__join(p, TR__MLF_SPOOL);
      free(p);
    }
    if (path && tr__read_mine(path, &b, &id) == 0 && hk_bytes_put(&b, "", 1) == 0 && !b.failed &&
        !strncmp((const char *)b.data, head, strlen(head))) {
      char **pl = (char **)realloc(s->sp_path, (size_t)(s->sp_files + 1) * sizeof *pl);
      tr__file_id *pi = pl ? (tr__file_id *)realloc(s->sp_id, (size_t)(s->sp_files + 1) * sizeof *pi) : NULL;
      if (pl) s->sp_path = pl;
      if (pi) s->sp_id = pi;
      if (pl && pi) {
        pl[s->sp_files] = path;
        pi[s->sp_files] = id;
        path = NULL;
        for (p = (char *)b.data + strlen(head); *p; p = end + 1) {
          char **gl;
          int *gf;
          if (!(end = strchr(p, '\n'))) break;
          *end = 0;
          gl = (char **)realloc(s->sp_line, (size_t)(s->sp_n + 1) * sizeof *gl);
          if (gl) s->sp_line = gl;
          gf = gl ? (int *)realloc(s->sp_file, (size_t)(s->sp_n + 1) * sizeof *gf) : NULL;
          if (gf) s->sp_file = gf;
          if (!gl || !gf || !(gl[s->sp_n] = tr__strdup(p))) break;
          gf[s->sp_n++] = s->sp_files;
          lines++;
        }
        s->sp_files++;
        files++;
      }
    }
    free(path);
    hk_bytes_free(&b);
    free(names[i]);
  }
  free(names);
  free(parent);
  pthread_mutex_unlock(&s->mu);
  if (lines) tr__run_say(s->run, ctx, "mlflow", "sending first what %d earlier run%s could not (%d requests kept in %s beside the "
                         "run directory)", files, files == 1 ? "" : "s", lines, TR__MLF_SPOOL);
}
/* A run's end: everything unsent (spool lines, params, the tag, queued values, the status) written to
   mlflow_unsent.txt; spools read are removed once sent or rewritten. The values kept, or -1 when nothing
   could be written (no run directory, or the write failed, said). */
static int64_t tr__mlf_spool(tr__mlf *s, const hk_ctx *ctx) {
  const char *dir = s->run->tr__p->dir;
  hk_bytes out, body;
  int i, k, n, more, file, wrote = 0;
  int64_t values = 0;
  char *path = dir ? tr__join(dir, TR__MLF_SPOOL) : NULL, why[600];
  tr__file_id id;
  memset(&out, 0, sizeof out);
  memset(&body, 0, sizeof body);
  memset(&id, 0, sizeof id);
  pthread_mutex_lock(&s->mu);
  more = s->sp_at < s->sp_n || s->count > 0 || s->param_at < s->n_params || s->checkpoint || (s->end && !s->ended);
  if (!path || !more) { /* nothing left, or nowhere to keep it: as it is (the sender goes on while the program runs) */
    int all_sent = !more;
    pthread_mutex_unlock(&s->mu);
    for (i = 0; all_sent && i < s->sp_files; i++) (void)tr__remove_mine(s->sp_path[i], &s->sp_id[i]);
    goto clear;
  }
  s->gen++; /* a request in flight changes nothing now */
  tr__putf(&out, "%s\t%s\n", TR__MLF_SPOOL_HEAD, s->uri);
  if (s->sp_at < s->sp_n && !strncmp(s->sp_line[s->sp_at], "post\t", 5) && s->sp_rid[0]) tr__putf(&out, "run\t%s\n", s->sp_rid);
  for (i = s->sp_at; i < s->sp_n; i++) { tr__put_s(&out, s->sp_line[i]); tr__put_s(&out, "\n"); }
  if (s->count > 0 || s->param_at < s->n_params || s->checkpoint || (s->end && !s->ended)) {
    const char *p = (const char *)s->params.data;
    if (s->run_id[0]) tr__putf(&out, "run\t%s\n", s->run_id);
    else {
      tr__putf(&out, "create\t%s\t", s->run_key);
      tr__json_str(&out, s->experiment);
      tr__put_s(&out, "\t");
      tr__mlf_create_body(s, &out, "@EXP@");
      tr__put_s(&out, "\n");
    }
    for (i = 0; i < s->param_at; i++) { p += strlen(p) + 1; p += strlen(p) + 1; }
    for (n = 0; i < s->n_params; i++, n++) {
      const char *key = p, *v = p + strlen(p) + 1;
      p = v + strlen(v) + 1;
      tr__put_s(&out, n % TR__MLF_PARAMS ? ",{" : "post\truns/log-batch\t{\"run_id\":\"@RUN@\",\"params\":[{");
      tr__mlf_kv(&out, key, v);
      tr__put_s(&out, i + 1 == s->n_params || n % TR__MLF_PARAMS == TR__MLF_PARAMS - 1 ? "}]}\n" : "}");
    }
    if (s->checkpoint) {
      tr__put_s(&out, "post\truns/set-tag\t{\"run_id\":\"@RUN@\",");
      tr__mlf_kv(&out, "checkpoint", s->checkpoint);
      tr__put_s(&out, "}\n");
    }
    for (k = 0; k < s->count; k++) {
      const tr__mlf_item *it = &s->ring[(s->tail + k) % s->cap];
      tr__put_s(&out, k % TR__MLF_BATCH ? ",{\"key\":" : "post\truns/log-batch\t{\"run_id\":\"@RUN@\",\"metrics\":[{\"key\":");
      tr__json_str(&out, tr__mlf_sent_name(s, it->key));
      tr__put_s(&out, ",\"value\":");
      tr__json_num(&out, it->value);
      tr__putf(&out, ",\"timestamp\":%lld,\"step\":%lld}", (long long)it->ms, (long long)it->step);
      if (k + 1 == s->count || k % TR__MLF_BATCH == TR__MLF_BATCH - 1) tr__put_s(&out, "]}\n");
    }
    if (s->end && !s->ended) tr__putf(&out, "post\truns/update\t{\"run_id\":\"@RUN@\",\"status\":\"%s\",\"end_time\":%lld}\n", s->end,
                                      (long long)tr__mlf_ms());
    values = s->count;
  }
  /* taken: the sender does not send them (the next start does) */
  s->count = 0;
  s->param_at = s->n_params;
  free(s->checkpoint);
  s->checkpoint = NULL;
  s->ended = 1;
  s->ready = s->want = 0;
  s->sp_at = s->sp_n;
  pthread_mutex_unlock(&s->mu);
  for (file = 0; file < s->sp_files && strcmp(s->sp_path[file], path); file++) {}
  if (file < s->sp_files) id = s->sp_id[file]; /* the file there is the one read: replaced; anything else is not */
  if (out.failed) snprintf(why, sizeof why, "out of memory");
  else wrote = tr__write_mine(path, out.data, out.len, &id, NULL, why, sizeof why) == 0;
  if (!wrote) tr__run_say(s->run, ctx, "mlflow", "cannot keep the unsent values in %s: %s", path, why);
  else tr__run_say(s->run, ctx, "mlflow", "%lld metric values and the run's end are not in MLflow yet (%s): kept in %s; the next start "
                   "or resume of a run there (or in another version directory beside it) sends them", (long long)values,
                   s->error[0] ? s->error : "no answer", path);
  for (i = 0; wrote && i < s->sp_files; i++) if (i != file) (void)tr__remove_mine(s->sp_path[i], &s->sp_id[i]);
clear:
  for (i = 0; i < s->sp_n; i++) free(s->sp_line[i]);
  for (i = 0; i < s->sp_files; i++) free(s->sp_path[i]);
  free(s->sp_line); free(s->sp_file); free(s->sp_path); free(s->sp_id);
  pthread_mutex_lock(&s->mu);
  s->sp_line = NULL; s->sp_file = NULL; s->sp_path = NULL; s->sp_id = NULL;
  s->sp_n = s->sp_at = s->sp_files = 0;
  pthread_mutex_unlock(&s->mu);
  hk_bytes_free(&out);
  hk_bytes_free(&body);
  free(path);
  return wrote ? values : -1;
}
/* A run begins for MLflow (its first on_fit_start, record or checkpoint; after a resume's load): the sender
   creates the MLflow run, or sets the checkpoint's RUNNING again; the params go with it. */
static void tr__mlf_begin(tr__mlf *s, hk_ctx *ctx) {
  tr__hparam *h;
  hk_bytes specs;
  const char *spec;
  char mended[4][140];
  int i, n, n_mended = 0, n_unsent_params = 0;
  if (s->in_run || !s->rank0) return;
  s->in_run = 1;
  s->failed_status = 0;
  if (!s->experiment) s->experiment = tr__strdup(tr__run_str(s->run, TR__RUN_NAME, "lightning_logs"));
  if (!s->started && !(s->started = tr__mlf_thread(s))) {
    tr__run_say(s->run, ctx, "mlflow", "cannot start its sender thread: nothing is sent to MLflow; training goes on");
    return;
  }
  memset(&specs, 0, sizeof specs);
  for (i = 0; (spec = hk_spec_applied(ctx->reg, i)) != NULL; i++) { if (i) tr__put_s(&specs, "; "); tr__put_s(&specs, spec); }
  hk_bytes_put(&specs, "", 1);
  n = tr__run_hparams(s->run, &h);
  pthread_mutex_lock(&s->mu);
  if (s->resume_id) { snprintf(s->run_id, sizeof s->run_id, "%s", s->resume_id); s->ready = 0; }
  if (!s->run_id[0]) { /* a new MLflow run: its key */
    static unsigned made;
    snprintf(s->run_key, sizeof s->run_key, "%08x%08x", (unsigned)(tr__wall() * 1e6) ^ (unsigned)(size_t)s, ++made * 2654435761u ^
             (unsigned)(tr__wall() * 1e3));
    s->create_unknown = 0;
  }
  free(s->resume_id);
  s->resume_id = NULL;
  s->want = 1;
  s->end = NULL;
  s->ended = 0;
  if (!s->params.len && n >= 0) { /* once per logger: a param never changes in MLflow */
    s->n_params = 0;
    for (i = 0; i < n; i++) {
      char key[TR__MLF_KEY + 8];
      int fix = tr__mlf_fix_name(h[i].key, key, sizeof key);
      if (fix < 0) { n_unsent_params++; continue; } /* MLflow would refuse the request */
      if (fix && n_mended < 4) snprintf(mended[n_mended++], sizeof mended[0], "'%.60s' as '%.60s'", h[i].key, key);
      hk_bytes_put(&s->params, fix ? key : h[i].key, strlen(fix ? key : h[i].key) + 1);
      hk_bytes_put(&s->params, h[i].val, strlen(h[i].val) + 1);
      s->n_params++;
    }
    if (specs.len > 1 && !specs.failed) {
      if (specs.len > TR__MLF_VALUE) specs.data[TR__MLF_VALUE - 1] = 0, specs.len = TR__MLF_VALUE;
      hk_bytes_put(&s->params, "specs", 6);
      hk_bytes_put(&s->params, specs.data, strlen((const char *)specs.data) + 1);
      s->n_params++;
    }
    if (s->params.failed) s->n_params = 0;
    s->param_at = 0;
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  free(h);
  hk_bytes_free(&specs);
  tr__mlf_spool_read(s, ctx);
  pthread_mutex_lock(&s->mu);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  for (i = 0; i < n_mended; i++)
    tr__run_say(s->run, ctx, "mlflow", "param %s (MLflow's name rules: letters, digits, '_', '-', '.', ' ', ':' and '/', no empty, "
                "'.' or '..' part)", mended[i]);
  if (n_unsent_params)
    tr__run_say(s->run, ctx, "mlflow", "%d params are not sent: nothing is left of their names under MLflow's rules, or they are "
                "longer than %d bytes", n_unsent_params, TR__MLF_KEY);
}


/* The key of a metric name (made at its first record: later records allocate nothing); -1 when it cannot be
   sent (a name MLflow refuses; more than 65536 names). Under mu. */
static int tr__mlf_key(tr__mlf *s, const char *name, int *mended) {
  int k = s->n_names, b = k / TR__MLF_BLOCK, fix;
  char ***blk = &s->names[b], sent[TR__MLF_KEY + 8], *both;
  size_t n = strlen(name);
  for (k = 0; k < s->n_names; k++) if (!strcmp(s->names[k / TR__MLF_BLOCK][k % TR__MLF_BLOCK], name)) return k;
  if (b == TR__MLF_BLOCKS || (fix = tr__mlf_fix_name(name, sent, sizeof sent)) < 0) return -1;
  if (!fix) sent[0] = 0; /* sent as it is */
  if (!*blk && !(*blk = (char **)calloc(TR__MLF_BLOCK, sizeof **blk))) return -1;
  if (!(both = (char *)malloc(n + strlen(sent) + 2))) return -1;
  memcpy(both, name, n + 1);
  memcpy(both + n + 1, sent, strlen(sent) + 1);
  (*blk)[k % TR__MLF_BLOCK] = both;
  *mended = fix;
  return s->n_names++;
}
static hk_signal tr__mlf_on_log(hk_ctx *ctx, void *u) {
  tr__mlf *s = (tr__mlf *)u;
  const tr_log_record *r = tr_log_current(ctx);
  int64_t ms;
  int i, k, bad = 0, mended[4], n_mended = 0;
  if (!r || !s->rank0) return HK_CONTINUE;
  tr__mlf_begin(s, ctx);
  if (!s->started) return HK_CONTINUE;
  ms = tr__mlf_ms();
  pthread_mutex_lock(&s->mu);
  for (i = -1; i < r->n_metrics; i++) { /* -1: the record's epoch, as Lightning's logger sends it */
    const char *name = i < 0 ? "epoch" : r->metrics[i].name;
    if (i >= 0 && (!strcmp(name, "epoch") || !strcmp(name, "step"))) continue; /* the record's own, as csv */
    int fix = 0;
    if ((k = tr__mlf_key(s, name, &fix)) < 0) { bad++; continue; }
    if (fix && n_mended < 4) mended[n_mended++] = k;
    if (s->count == s->cap) { s->dropped++; continue; }
    {
      tr__mlf_item *it = &s->ring[(s->tail + s->count) % s->cap];
      it->key = k;
      it->step = r->step;
      it->ms = ms;
      it->value = i < 0 ? (double)r->epoch : r->metrics[i].value;
      s->count++;
    }
  }
  s->dropped += bad;
  tr__mlf_wake(s, 0);
  i = s->news;
  pthread_mutex_unlock(&s->mu);
  for (k = 0; k < n_mended; k++) /* once a name: its key is made once */
    tr__run_say(s->run, ctx, "mlflow", "metric '%s' is sent as '%s' (MLflow's name rules: letters, digits, '_', '-', '.', ' ', ':' "
                "and '/', no empty, '.' or '..' part)", s->names[mended[k] / TR__MLF_BLOCK][mended[k] % TR__MLF_BLOCK],
                tr__mlf_sent_name(s, mended[k]));
  if (bad && !s->warned_names) {
    s->warned_names = 1;
    tr__run_say(s->run, ctx, "mlflow", "a metric name MLflow cannot take even mended (longer than %d bytes, or nothing left of it), "
                "or more than %d names: it is not sent (counted as dropped)", TR__MLF_KEY, TR__MLF_BLOCK * TR__MLF_BLOCKS);
  }
  if (i) tr__mlf_say(s, ctx);
  return HK_CONTINUE;
}
static hk_signal tr__mlf_fit_start(hk_ctx *ctx, void *u) { tr__mlf_begin((tr__mlf *)u, ctx); return HK_CONTINUE; }
static hk_signal tr__mlf_saved(hk_ctx *ctx, void *u) {
  tr__mlf *s = (tr__mlf *)u;
  char *path;
  if (!s->rank0 || !ctx->path) return HK_CONTINUE;
  tr__mlf_begin(s, ctx);
  if (!s->started || !(path = tr__strdup(ctx->path))) return HK_CONTINUE;
  pthread_mutex_lock(&s->mu);
  free(s->checkpoint);
  s->checkpoint = path;
  tr__mlf_wake(s, 1);
  pthread_mutex_unlock(&s->mu);
  return HK_CONTINUE;
}
static hk_signal tr__mlf_exception(hk_ctx *ctx, void *u) {
  tr__mlf *s = (tr__mlf *)u;
  if (!s->rank0) return HK_CONTINUE;
  tr__mlf_begin(s, ctx);
  s->failed_status = s->run->failed && s->run->tr__p->err == TR_ERR_INTERRUPTED ? 2 : 1;
  return HK_CONTINUE;
}

/* The run's end: its status, then the queue sent, waiting at most flush_timeout; then one line when values
   were dropped or are not sent yet. */
static void tr__mlf_end(tr__mlf *s, const hk_ctx *ctx, const char *status) {
  double until = tr__wall() + s->flush_timeout;
  int64_t dropped, left;
  char err[256];
  if (!s->in_run) return;
  s->in_run = 0;
  if (!s->started) return;
  pthread_mutex_lock(&s->mu);
  s->end = status;
  s->ended = 0;
  s->next_try = s->next_send = 0; /* one try at once, whatever the pause */
  pthread_cond_broadcast(&s->cv);
  while (!s->ended && !s->stuck && tr__wall() < until) {
    struct timespec ts;
    ts.tv_sec = (time_t)until;
    ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  dropped = s->dropped + s->refused;
  left = s->count;
  memcpy(err, s->error, sizeof err);
  pthread_mutex_unlock(&s->mu);
  tr__mlf_say(s, ctx);
  if (tr__mlf_spool(s, ctx) >= 0) left = 0; /* kept in the run directory, said */
  if (dropped || left) {
    char d[200] = "", l[600] = "";
    if (dropped) snprintf(d, sizeof d, "%lld dropped (the queue, max_queue=%d, was full while the server did not take them, or it "
                          "refused them)%s", (long long)dropped, s->cap, left ? "; " : "");
    if (left) snprintf(l, sizeof l, "%lld not sent within flush_timeout=%gs (%s): they are sent if the server answers while the "
                       "program runs on, else lost at its exit (a file logger's run directory keeps them: csv, jsonl)", (long long)left,
                       s->flush_timeout, err[0] ? err : "no answer");
    tr__run_say(s->run, ctx, "mlflow", "%lld metric values are not in MLflow: %s%s", (long long)(dropped + left), d, l);
  }
}
static hk_signal tr__mlf_teardown(hk_ctx *ctx, void *u) {
  tr__mlf *s = (tr__mlf *)u;
  int st = s->failed_status;
  if (!s->rank0) return HK_CONTINUE;
  if (s->run->failed) st = s->run->tr__p->err == TR_ERR_INTERRUPTED ? 2 : 1; /* the trainer says why after on_exception */
  tr__mlf_end(s, ctx, st == 2 ? "KILLED" : st == 1 ? "FAILED" : "FINISHED");
  return HK_CONTINUE;
}
static hk_signal tr__mlf_setup(hk_ctx *ctx, void *u) {
  tr__mlf *s = (tr__mlf *)u;
  s->rank0 = ctx->rank == 0;
  return HK_CONTINUE;
}

/* The MLflow run's id in checkpoints: a resume continues it. A checkpoint saved while the sender is making
   the run (the first steps) waits for its id, at most timeout_ms, unless the server is not answering (then
   the checkpoint holds none, and its resume makes a new MLflow run). */
static int tr__mlf_save(void *u, hk_bytes *out) {
  tr__mlf *s = (tr__mlf *)u;
  char rid[64];
  double until = tr__wall() + 1e-3 * (double)s->timeout_ms;
  pthread_mutex_lock(&s->mu);
  while (s->started && s->want && !s->ready && !s->gave_up && s->next_try == 0 && !s->run_id[0] && tr__wall() < until) {
    struct timespec ts;
    ts.tv_sec = (time_t)until;
    ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  memcpy(rid, s->run_id, sizeof rid);
  pthread_mutex_unlock(&s->mu);
  tr__put_u64(out, 1);
  tr__put_str(out, rid);
  return 0;
}
static int tr__mlf_load(void *u, hk_reader *in) {
  tr__mlf *s = (tr__mlf *)u;
  char *rid = NULL;
  size_t i;
  if (tr__get_version(in, 1) || tr__get_text(in, "run_id", &rid)) return -1;
  for (i = 0; rid[i]; i++)
    if (!((rid[i] >= '0' && rid[i] <= '9') || (rid[i] >= 'a' && rid[i] <= 'z') || (rid[i] >= 'A' && rid[i] <= 'Z') || rid[i] == '-' || rid[i] == '_')) break;
  if (rid[i] || i >= 64) { free(rid); return hk_reject(in, "run_id is not an MLflow run id (letters, digits, - and _, at most 63)"); }
  if (tr__get_end(in)) { free(rid); return -1; }
  free(s->resume_id);
  s->resume_id = i ? rid : NULL; /* "": the checkpoint's run was never created: a new one */
  if (!i) free(rid);
  return 0;
}

static void tr__mlf_destroy(void *u) {
  tr__mlf *s = (tr__mlf *)u;
  int i;
  if (!s) return;
  if (s->in_run) tr__mlf_end(s, NULL, "FINISHED"); /* a loop that never fired teardown */
  if (s->started) {
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL); /* a request in flight ends within timeout_ms */
  }
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  if (s->curl) curl_easy_cleanup(s->curl);
  curl_slist_free_all(s->headers);
  for (i = 0; i < s->n_names; i++) free(s->names[i / TR__MLF_BLOCK][i % TR__MLF_BLOCK]);
  for (i = 0; i < TR__MLF_BLOCKS; i++) free(s->names[i]);
  for (i = 0; i < 2 * s->n_tags; i++) free(s->tags[i]);
  free(s->tags);
  free(s->uri); free(s->experiment); free(s->run_name); free(s->token); free(s->userpwd);
  free(s->ring); free(s->batch); free(s->checkpoint); free(s->resume_id);
  hk_bytes_free(&s->params); hk_bytes_free(&s->body); hk_bytes_free(&s->reply);
  free(s);
}

/* http://host[:port][/path] or https://...: the URI without a trailing '/', or NULL with why said. */
static char *tr__mlf_uri(const char *uri, tr__why *w) {
  const char *host, *p;
  size_t n;
  char *out;
  if (!uri || !uri[0]) return tr__bad(w, "mlflow: no tracking_uri given and MLFLOW_TRACKING_URI is not set: give the tracking "
                                      "server's address, e.g. tracking_uri=http://127.0.0.1:5000"), (char *)NULL;
  host = !strncmp(uri, "http://", 7) ? uri + 7 : !strncmp(uri, "https://", 8) ? uri + 8 : NULL;
  if (!host) return tr__bad(w, "mlflow: tracking_uri '%.200s' is not http://host:port or https://host[:port][/path] (file stores, "
                            "databricks and other schemes are not spoken here: run an MLflow tracking server, mlflow server)", uri),
                    (char *)NULL;
  for (p = host; *p && *p != '/' && *p != ':'; p++) {}
  if (p == host || (host[0] == '[' && !strchr(host, ']')))
    return tr__bad(w, "mlflow: tracking_uri '%.200s' has no host (http://host:port)", uri), (char *)NULL;
  if (host[0] == '[') p = strchr(host, ']') + 1; /* [::1]:5000 */
  if (*p == ':') {
    long port = 0;
    for (p++, n = 0; *p >= '0' && *p <= '9' && n < 6; p++, n++) port = port * 10 + (*p - '0');
    if (!n || port < 1 || port > 65535 || (*p && *p != '/'))
      return tr__bad(w, "mlflow: tracking_uri '%.200s': the port is not a number in 1..65535 (http://host:port)", uri), (char *)NULL;
  }
  for (n = 0; uri[n]; n++)
    if ((unsigned char)uri[n] <= ' ' || uri[n] == '?' || uri[n] == '#' || uri[n] == '"' || uri[n] == '\\' || (unsigned char)uri[n] >= 0x7f)
      return tr__bad(w, "mlflow: tracking_uri '%.200s' holds a space, a control character, '?', '#', a quote or a non-ASCII byte "
                     "(http://host:port[/path])", uri), (char *)NULL;
  if (n > 900) return tr__bad(w, "mlflow: tracking_uri is longer than 900 bytes"), (char *)NULL;
  while (n > 0 && uri[n - 1] == '/') n--;
  if (!(out = (char *)malloc(n + 1))) return tr__bad(w, "mlflow: out of memory"), (char *)NULL;
  memcpy(out, uri, n);
  out[n] = 0;
  return out;
}
/* "key=value,key=value" into s->tags */
static tr_err tr__mlf_tags(tr__mlf *s, const char *text, tr__why *w) {
  const char *p = text;
  while (p && *p) {
    const char *end = strchr(p, ','), *eq;
    size_t len = end ? (size_t)(end - p) : strlen(p), kl;
    char **t;
    eq = (const char *)memchr(p, '=', len);
    kl = eq ? (size_t)(eq - p) : 0;
    if (!eq || kl == 0 || kl > TR__MLF_KEY || len - kl - 1 > 5000)
      return tr__bad(w, "mlflow: tags '%.200s': each tag is key=value (a key of 1..250 bytes, a value of at most 5000), "
                     "separated by commas: tags=\"team=vision,owner=ada\"", text);
    if (!(t = (char **)realloc(s->tags, (size_t)(2 * s->n_tags + 2) * sizeof *t))) return tr__bad(w, "mlflow: out of memory"), TR_ERR_NOMEM;
    s->tags = t;
    t[2 * s->n_tags] = (char *)malloc(kl + 1);
    t[2 * s->n_tags + 1] = (char *)malloc(len - kl);
    if (!t[2 * s->n_tags] || !t[2 * s->n_tags + 1]) {
      free(t[2 * s->n_tags]); free(t[2 * s->n_tags + 1]);
      return tr__bad(w, "mlflow: out of memory"), TR_ERR_NOMEM;
    }
    memcpy(t[2 * s->n_tags], p, kl); t[2 * s->n_tags][kl] = 0;
    memcpy(t[2 * s->n_tags + 1], eq + 1, len - kl - 1); t[2 * s->n_tags + 1][len - kl - 1] = 0;
    s->n_tags++;
    p = end ? end + 1 : NULL;
  }
  return TR_OK;
}
static char *tr__mlf_env(const char *name) { const char *v = getenv(name); return v && v[0] ? tr__strdup(v) : NULL; }

static tr_err tr__mlf_make(hk_registry *reg, const tr_mlflow_desc *d, hk_handle *out, tr__why *w) {
  static int curl_ready;
  tr__mlf *s;
  hk_callback cb;
  tr_err e;
  int timeout, cap;
  const char *exp;
  if (!d) return tr__bad(w, "mlflow: desc is NULL");
  timeout = tr__zero_int(d->timeout_ms, 5000);
  cap = tr__zero_int(d->max_queue, 100000);
  if (timeout < 1) return tr__bad(w, "mlflow: timeout_ms must be > 0 (one request's limit in ms), got %d", timeout);
  if (cap < 1 || cap > 100000000) return tr__bad(w, "mlflow: max_queue must be in 1..1e8 (metric values kept), got %d", cap);
  if (!(tr__zero_double(d->flush_timeout, 10) >= 0) || !hk_is_finite(d->flush_timeout))
    return tr__bad(w, "mlflow: flush_timeout must be a finite number of seconds >= 0, got %g", d->flush_timeout);
  if (!(s = (tr__mlf *)calloc(1, sizeof *s))) return tr__bad(w, "mlflow: out of memory"), TR_ERR_NOMEM;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->run = tr_run_get(reg);
  s->timeout_ms = timeout;
  s->cap = cap;
  s->limit = TR__MLF_BATCH;
  s->plimit = TR__MLF_PARAMS;
  s->flush_timeout = tr__zero_double(d->flush_timeout, 10);
  s->rank0 = 1;
  if (!(s->uri = tr__mlf_uri(d->tracking_uri && d->tracking_uri[0] ? d->tracking_uri : getenv("MLFLOW_TRACKING_URI"), w))) {
    tr__mlf_destroy(s);
    return TR_ERR_INVALID;
  }
  if ((e = tr__mlf_tags(s, d->tags, w)) != TR_OK) { tr__mlf_destroy(s); return e; }
  exp = d->experiment && d->experiment[0] ? d->experiment : getenv("MLFLOW_EXPERIMENT_NAME");
  if (exp && exp[0] && strlen(exp) > 500) { tr__mlf_destroy(s); return tr__bad(w, "mlflow: experiment name is longer than 500 bytes"); }
  s->experiment = exp && exp[0] ? tr__strdup(exp) : NULL; /* NULL: the run's name, at the start */
  s->run_name = d->run_name && d->run_name[0] ? tr__strdup(d->run_name) : NULL;
  s->token = tr__mlf_env("MLFLOW_TRACKING_TOKEN");
  if (getenv("MLFLOW_TRACKING_USERNAME") && (s->userpwd = (char *)malloc(strlen(getenv("MLFLOW_TRACKING_USERNAME")) + 2 +
                                                                        strlen(getenv("MLFLOW_TRACKING_PASSWORD") ? getenv("MLFLOW_TRACKING_PASSWORD") : ""))) != NULL)
    sprintf(s->userpwd, "%s:%s", getenv("MLFLOW_TRACKING_USERNAME"), getenv("MLFLOW_TRACKING_PASSWORD") ? getenv("MLFLOW_TRACKING_PASSWORD") : "");
  s->insecure = getenv("MLFLOW_TRACKING_INSECURE_TLS") && !strcmp(getenv("MLFLOW_TRACKING_INSECURE_TLS"), "true");
  if (!curl_ready) curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; /* once, from the loop's thread */
  s->ring = (tr__mlf_item *)malloc((size_t)cap * sizeof *s->ring);
  s->batch = (tr__mlf_item *)malloc(TR__MLF_BATCH * sizeof *s->batch);
  s->curl = curl_ready ? curl_easy_init() : NULL;
  s->headers = curl_slist_append(NULL, "Content-Type: application/json");
  if (s->headers) { /* no "Expect: 100-continue" (libcurl's for a body over 1 KiB): one round trip less, no 1 s wait on a server that ignores it */
    struct curl_slist *h = curl_slist_append(s->headers, "Expect:");
    if (h) s->headers = h; else { curl_slist_free_all(s->headers); s->headers = NULL; }
  }
  if (s->headers && s->token) {
    char *auth = (char *)malloc(strlen(s->token) + 32);
    struct curl_slist *h = NULL;
    if (auth) { sprintf(auth, "Authorization: Bearer %s", s->token); h = curl_slist_append(s->headers, auth); free(auth); }
    if (h) s->headers = h; else { curl_slist_free_all(s->headers); s->headers = NULL; }
  }
  if (!s->ring || !s->batch || !s->curl || !s->headers || (d->run_name && d->run_name[0] && !s->run_name) || (exp && exp[0] && !s->experiment)) {
    tr__mlf_destroy(s);
    return tr__bad(w, "mlflow: out of memory (or libcurl could not start)"), TR_ERR_NOMEM;
  }
  curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(s->curl, CURLOPT_TIMEOUT_MS, s->timeout_ms); /* the whole request: a frozen server too */
  curl_easy_setopt(s->curl, CURLOPT_CONNECTTIMEOUT_MS, s->timeout_ms);
  curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, s->headers);
  curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, tr__mlf_take);
  curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, &s->reply);
  curl_easy_setopt(s->curl, CURLOPT_XFERINFOFUNCTION, tr__mlf_progress);
  curl_easy_setopt(s->curl, CURLOPT_XFERINFODATA, s);
  curl_easy_setopt(s->curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(s->curl, CURLOPT_USERAGENT, "train.h-mlflow");
  if (s->userpwd) { curl_easy_setopt(s->curl, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC); curl_easy_setopt(s->curl, CURLOPT_USERPWD, s->userpwd); }
  if (s->insecure) { curl_easy_setopt(s->curl, CURLOPT_SSL_VERIFYPEER, 0L); curl_easy_setopt(s->curl, CURLOPT_SSL_VERIFYHOST, 0L); }
  memset(&cb, 0, sizeof cb);
  cb.name = "mlflow"; /* the state key: a second mlflow logger on a registry is refused (its name is taken) */
  cb.user = s;
  cb.setup = tr__mlf_setup;
  cb.on_fit_start = tr__mlf_fit_start;
  cb.on_log = tr__mlf_on_log;
  cb.on_checkpoint_saved = tr__mlf_saved;
  cb.on_exception = tr__mlf_exception;
  cb.teardown = tr__mlf_teardown;
  cb.save_state = tr__mlf_save;
  cb.load_state = tr__mlf_load;
  cb.destroy = tr__mlf_destroy;
  return tr__cb_register(reg, &cb, 1000, out, w); /* last at on_log, as the other loggers: the record as hooks left it */
}

TRAIN_API tr_err tr_mlflow_get(const hk_registry *reg, hk_handle h, tr_mlflow_state *out) {
  const hk_callback *cb = hk_callback_get(reg, h);
  tr__mlf *s = cb && cb->destroy == tr__mlf_destroy ? (tr__mlf *)cb->user : NULL;
  if (!s || !out) return TR_ERR_INVALID;
  pthread_mutex_lock(&s->mu);
  memcpy(out->run_id, s->run_id, sizeof out->run_id);
  memcpy(out->experiment_id, s->experiment_id, sizeof out->experiment_id);
  out->queued = s->count;
  out->sent = s->sent;
  out->dropped = s->dropped + s->refused;
  out->up = s->up;
  memcpy(out->error, s->error, sizeof out->error);
  pthread_mutex_unlock(&s->mu);
  return TR_OK;
}
#endif /* TRAIN_MLFLOW */

TRAIN_API tr_err tr_mlflow_logger(hk_registry *reg, const tr_mlflow_desc *d, hk_handle *out) {
  tr__why w;
  if (!reg) return TR_ERR_INVALID;
  return tr__cb_result(reg, tr__mlf_make(reg, d, out, &w), &w);
}
TR__FACTORY_OF(mlf, tr_mlflow_desc, TR_MLFLOW_PARAMS)
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
