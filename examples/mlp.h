/* examples/mlp.h - a two-layer MLP and a "spirals" dataset, written out by hand for learning.

   The train.h examples, tests and benchmarks share this one small model so that what they show is the
   trainer and its hooks, not the model. Everything here is plain C99 and fits on a few screens:

     spirals      K interleaved spiral arms in the plane, one class per arm, generated from a seed
     mlp          logits = W2 * relu(W1 * x + b1) + b2, trained with softmax cross-entropy
                  forward, backward and predict written out loop by loop (no libraries)

   The model keeps its parameters the way llm.c does: ONE flat float buffer holds every parameter,
   and a small table of named tensors {name, offset, count} says which slice is which. Gradients have
   the same layout in a second flat buffer. A trainer then needs to know nothing about the model: it
   can run an optimizer over `num_params` floats, save them to a checkpoint with one fwrite, or show a
   hook the tensor called "w1".

   USAGE
       #include "examples/mlp.h"

       spirals train, val;
       spirals_make(&train, 300, 3, 0.2f, 1);      // 300 points per class, 3 classes, noise, seed
       spirals_make(&val,   100, 3, 0.2f, 2);      // a second draw for validation
       mlp m;
       mlp_init(&m, 2, 64, 3, 32, 42);             // in=2, hidden=64, classes=3, max batch 32, seed
       spirals_shuffle(&train, epoch_seed);        // optional, once per epoch
       for (int i = 0; i < spirals_num_batches(&train, 32); i++) {
           const mlp_batch *b = spirals_batch(&train, i, 32);
           mlp_zero_grad(&m);
           float loss = mlp_forward(&m, b->x, b->y, b->n); // mean cross-entropy of the batch
           mlp_backward(&m, 1.0f);                 // grads += d(loss)/d(params)
           ... update m.params from m.grads (SGD, AdamW: the trainer's job) ...
       }
       printf("val accuracy %.3f\n", mlp_accuracy(&m, &val, 32));
       mlp_free(&m); spirals_free(&train); spirals_free(&val);

   With train.h included BEFORE this header, the end of this file also defines the glue train.h needs
   (mlp_tr_model, spirals_tr_data): see "Glue for train.h" below.

   Every function is `static inline`, so the header can be included in any number of files and an
   unused function costs nothing and warns about nothing. No function calls exit(): allocation
   failures are reported as -1 (or NULL) for the caller to handle.
*/
#ifndef MLP_H
#define MLP_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* =====================================================================================================
   A tiny random number generator (splitmix64). We do not use rand(): its sequence differs between C
   libraries, and the examples promise the same numbers everywhere for the same seed. (It is the same
   generator as train.h's tr_rng; this header keeps its own copy so that it works without train.h.)
   ===================================================================================================== */
typedef struct mlp_rng { uint64_t state; } mlp_rng;

static inline uint64_t mlp_rng_u64(mlp_rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1): the top 24 bits, which a float holds exactly */
static inline float mlp_rng_uniform(mlp_rng *r) {
    return (float)(mlp_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

/* standard normal, by the Box-Muller transform (one of the pair is thrown away: simple, not fast) */
static inline float mlp_rng_normal(mlp_rng *r) {
    float u1 = mlp_rng_uniform(r), u2 = mlp_rng_uniform(r);
    if (u1 < 1e-7f) u1 = 1e-7f;                       /* log(0) would be -inf */
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

/* =====================================================================================================
   The dataset: spirals.

   Class k is an arm of a spiral: for t from 0 to 1, the point at radius t and angle
   k * 2*pi/K + 4*t (plus Gaussian noise on the angle). The arms wind around each other, so no
   straight line separates them: a linear model gets about 1/K right, a small MLP nearly all of them.
   (This is the CS231n "spiral data" toy problem.)

   The points are stored in class order; `order` is a permutation that spirals_shuffle() reshuffles,
   and batch i is made of the points order[i*B], ..., order[i*B + B - 1] (the last batch may be short).
   ===================================================================================================== */
typedef struct mlp_batch {
    float *x;          /* n rows of 2 floats: the points */
    int *y;            /* n labels in [0, K) */
    int n;             /* rows in this batch */
} mlp_batch;

typedef struct spirals {
    int n, classes;    /* points and classes */
    float *x;          /* n x 2 */
    int *y;            /* n */
    int *order;        /* the visiting order, a permutation of 0..n-1 (identity until shuffled) */
    mlp_batch batch;   /* spirals_batch() copies the current batch here */
    int batch_cap;     /* rows allocated in batch */
    int batch_size;    /* used by the train.h glue at the end of this file (spirals_tr_data) */
} spirals;

static inline void spirals_free(spirals *ds) {
    free(ds->x); free(ds->y); free(ds->order); free(ds->batch.x); free(ds->batch.y);
    memset(ds, 0, sizeof *ds);
}

/* per_class points of each of `classes` arms, angular noise `noise` (0.2 is a good default).
   Returns 0, or -1 when out of memory or given nonsense. */
static inline int spirals_make(spirals *ds, int per_class, int classes, float noise, uint64_t seed) {
    memset(ds, 0, sizeof *ds);
    if (per_class < 1 || classes < 2) return -1;
    int n = per_class * classes;
    ds->x = (float *)malloc((size_t)n * 2 * sizeof(float));
    ds->y = (int *)malloc((size_t)n * sizeof(int));
    ds->order = (int *)malloc((size_t)n * sizeof(int));
    if (!ds->x || !ds->y || !ds->order) { spirals_free(ds); return -1; }
    ds->n = n;
    ds->classes = classes;
    mlp_rng rng = { seed };
    for (int k = 0; k < classes; k++) {
        for (int j = 0; j < per_class; j++) {
            int i = k * per_class + j;
            float t = per_class > 1 ? (float)j / (float)(per_class - 1) : 1.0f;   /* 0 .. 1 */
            float angle = (float)k * 6.2831853f / (float)classes + 4.0f * t + noise * mlp_rng_normal(&rng);
            ds->x[2 * i + 0] = t * sinf(angle);
            ds->x[2 * i + 1] = t * cosf(angle);
            ds->y[i] = k;
            ds->order[i] = i;
        }
    }
    return 0;
}

/* A new random visiting order (Fisher-Yates). The same seed always gives the same order, so a
   trainer that seeds this with (run seed, epoch) gets the same batches after a resume. */
static inline void spirals_shuffle(spirals *ds, uint64_t seed) {
    mlp_rng rng = { seed };
    for (int i = 0; i < ds->n; i++) ds->order[i] = i;     /* start from the identity: order depends on seed only */
    for (int i = ds->n - 1; i > 0; i--) {
        int j = (int)(mlp_rng_u64(&rng) % (uint64_t)(i + 1));
        int t = ds->order[i]; ds->order[i] = ds->order[j]; ds->order[j] = t;
    }
}

static inline int spirals_num_batches(const spirals *ds, int batch_size) {
    return (ds->n + batch_size - 1) / batch_size;
}

/* Batch i of size batch_size (the last one may be shorter). The returned batch lives inside ds and
   is overwritten by the next call. NULL when i is out of range or memory runs out. */
static inline const mlp_batch *spirals_batch(spirals *ds, int i, int batch_size) {
    if (batch_size < 1 || i < 0 || (int64_t)i * batch_size >= ds->n) return NULL;
    if (batch_size > ds->batch_cap) {
        float *x = (float *)realloc(ds->batch.x, (size_t)batch_size * 2 * sizeof(float));
        if (!x) return NULL;
        ds->batch.x = x;
        int *y = (int *)realloc(ds->batch.y, (size_t)batch_size * sizeof(int));
        if (!y) return NULL;
        ds->batch.y = y;
        ds->batch_cap = batch_size;
    }
    int start = i * batch_size;
    int n = ds->n - start < batch_size ? ds->n - start : batch_size;
    for (int r = 0; r < n; r++) {
        int src = ds->order[start + r];
        ds->batch.x[2 * r + 0] = ds->x[2 * src + 0];
        ds->batch.x[2 * r + 1] = ds->x[2 * src + 1];
        ds->batch.y[r] = ds->y[src];
    }
    ds->batch.n = n;
    return &ds->batch;
}

/* =====================================================================================================
   The model.

       pre    = x  W1^T + b1        x: B x IN,    W1: HID x IN,   pre, h: B x HID
       h      = relu(pre)
       logits = h  W2^T + b2        W2: K x HID,  logits, probs: B x K
       probs  = softmax(logits)     row by row
       loss   = mean over the batch of -log probs[b][y[b]]

   Weights are stored [out][in], as PyTorch's nn.Linear does. Parameters live in one flat buffer:

       params: [ w1 (HID*IN) | b1 (HID) | w2 (K*HID) | b2 (K) ]
       grads:  the same layout

   `tensors` names the four slices; `w1`, `b1`, ... are the same slices as typed pointers, for the
   arithmetic below. The activations of the last forward pass are kept for backward (max_batch rows).
   ===================================================================================================== */
enum { MLP_W1, MLP_B1, MLP_W2, MLP_B2, MLP_NUM_TENSORS };

typedef struct mlp_tensor_info {
    const char *name;
    size_t offset;     /* in floats, from the start of params (and of grads) */
    size_t count;      /* floats */
} mlp_tensor_info;

typedef struct mlp {
    int in, hidden, classes, max_batch;
    size_t num_params;
    mlp_tensor_info tensors[MLP_NUM_TENSORS];
    float *params, *grads;                 /* the flat buffers, num_params floats each */
    float *w1, *b1, *w2, *b2;              /* views into params */
    float *dw1, *db1, *dw2, *db2;          /* views into grads */
    /* saved by forward, used by backward */
    const float *x;                        /* the inputs (the caller's memory: keep it alive until backward) */
    const int *y;                          /* the labels */
    int batch;                             /* rows of the last forward */
    float *pre, *h;                        /* max_batch x hidden */
    float *probs;                          /* max_batch x classes (logits, then probabilities in place) */
    float *dh;                             /* max_batch x hidden: scratch for backward */
    int *pred;                             /* max_batch: class predictions (mlp_tr_predict's outputs) */
} mlp;

static inline void mlp_free(mlp *m) {
    free(m->params); free(m->grads); free(m->pre); free(m->h); free(m->probs); free(m->dh); free(m->pred);
    memset(m, 0, sizeof *m);
}

/* Point the typed views at the flat buffers. Call again if you swap params/grads for other buffers
   of the same layout (a trainer that owns the memory can do that). */
static inline void mlp_bind(mlp *m, float *params, float *grads) {
    m->params = params;
    m->grads = grads;
    m->w1 = params + m->tensors[MLP_W1].offset;  m->dw1 = grads + m->tensors[MLP_W1].offset;
    m->b1 = params + m->tensors[MLP_B1].offset;  m->db1 = grads + m->tensors[MLP_B1].offset;
    m->w2 = params + m->tensors[MLP_W2].offset;  m->dw2 = grads + m->tensors[MLP_W2].offset;
    m->b2 = params + m->tensors[MLP_B2].offset;  m->db2 = grads + m->tensors[MLP_B2].offset;
}

/* Fill the parameters as nn.Linear does: uniform in [-1/sqrt(fan_in), 1/sqrt(fan_in)]. */
static inline void mlp_init_params(mlp *m, uint64_t seed) {
    mlp_rng rng = { seed };
    float bound1 = 1.0f / sqrtf((float)m->in), bound2 = 1.0f / sqrtf((float)m->hidden);
    for (size_t i = 0; i < m->tensors[MLP_W1].count; i++) m->w1[i] = bound1 * (2.0f * mlp_rng_uniform(&rng) - 1.0f);
    for (size_t i = 0; i < m->tensors[MLP_B1].count; i++) m->b1[i] = bound1 * (2.0f * mlp_rng_uniform(&rng) - 1.0f);
    for (size_t i = 0; i < m->tensors[MLP_W2].count; i++) m->w2[i] = bound2 * (2.0f * mlp_rng_uniform(&rng) - 1.0f);
    for (size_t i = 0; i < m->tensors[MLP_B2].count; i++) m->b2[i] = bound2 * (2.0f * mlp_rng_uniform(&rng) - 1.0f);
}

/* Allocate and initialise. Returns 0, or -1 when out of memory or given nonsense. */
static inline int mlp_init(mlp *m, int in, int hidden, int classes, int max_batch, uint64_t seed) {
    memset(m, 0, sizeof *m);
    if (in < 1 || hidden < 1 || classes < 2 || max_batch < 1) return -1;
    m->in = in; m->hidden = hidden; m->classes = classes; m->max_batch = max_batch;

    /* lay the tensors out one after another */
    static const char *const names[MLP_NUM_TENSORS] = { "w1", "b1", "w2", "b2" };
    size_t counts[MLP_NUM_TENSORS];
    counts[MLP_W1] = (size_t)hidden * (size_t)in;
    counts[MLP_B1] = (size_t)hidden;
    counts[MLP_W2] = (size_t)classes * (size_t)hidden;
    counts[MLP_B2] = (size_t)classes;
    size_t offset = 0;
    for (int t = 0; t < MLP_NUM_TENSORS; t++) {
        m->tensors[t].name = names[t];
        m->tensors[t].offset = offset;
        m->tensors[t].count = counts[t];
        offset += counts[t];
    }
    m->num_params = offset;

    float *params = (float *)calloc(m->num_params, sizeof(float));
    float *grads = (float *)calloc(m->num_params, sizeof(float));
    m->pre = (float *)malloc((size_t)max_batch * (size_t)hidden * sizeof(float));
    m->h = (float *)malloc((size_t)max_batch * (size_t)hidden * sizeof(float));
    m->probs = (float *)malloc((size_t)max_batch * (size_t)classes * sizeof(float));
    m->dh = (float *)malloc((size_t)max_batch * (size_t)hidden * sizeof(float));
    m->pred = (int *)malloc((size_t)max_batch * sizeof(int));
    m->params = params; m->grads = grads;                /* so mlp_free frees them on failure */
    if (!params || !grads || !m->pre || !m->h || !m->probs || !m->dh || !m->pred) { mlp_free(m); return -1; }
    mlp_bind(m, params, grads);
    mlp_init_params(m, seed);
    return 0;
}

static inline void mlp_zero_grad(mlp *m) {
    memset(m->grads, 0, m->num_params * sizeof(float));
}

/* Forward pass over B rows (B <= max_batch). With labels y, returns the mean cross-entropy and keeps
   what backward needs; with y == NULL, only computes probabilities (see mlp_predict) and returns 0.
   Returns NAN when B is out of range. */
static inline float mlp_forward(mlp *m, const float *x, const int *y, int B) {
    const int IN = m->in, H = m->hidden, K = m->classes;
    if (B < 1 || B > m->max_batch) return NAN;
    m->x = x; m->y = y; m->batch = B;

    /* layer 1: pre = x W1^T + b1, h = relu(pre) */
    for (int b = 0; b < B; b++) {
        const float *xb = x + (size_t)b * IN;
        float *pre = m->pre + (size_t)b * H, *h = m->h + (size_t)b * H;
        for (int j = 0; j < H; j++) {
            const float *wj = m->w1 + (size_t)j * IN;
            float s = m->b1[j];
            for (int i = 0; i < IN; i++) s += wj[i] * xb[i];
            pre[j] = s;
            h[j] = s > 0.0f ? s : 0.0f;
        }
    }

    /* layer 2 and softmax: probs = softmax(h W2^T + b2), computed in place row by row */
    double loss = 0.0;
    for (int b = 0; b < B; b++) {
        const float *h = m->h + (size_t)b * H;
        float *p = m->probs + (size_t)b * K;
        float maxv = -INFINITY;
        for (int k = 0; k < K; k++) {
            const float *wk = m->w2 + (size_t)k * H;
            float s = m->b2[k];
            for (int j = 0; j < H; j++) s += wk[j] * h[j];
            p[k] = s;
            if (s > maxv) maxv = s;
        }
        /* subtract the row maximum before exp: the result is the same, and exp cannot overflow */
        float sum = 0.0f;
        for (int k = 0; k < K; k++) { p[k] = expf(p[k] - maxv); sum += p[k]; }
        for (int k = 0; k < K; k++) p[k] /= sum;
        if (y) loss += -logf(p[y[b]] > 1e-30f ? p[y[b]] : 1e-30f);
    }
    return y ? (float)(loss / B) : 0.0f;
}

/* Backward pass for the last forward (which must have had labels). ADDS to grads, so several
   micro-batches can accumulate before an optimizer step; zero the grads first (mlp_zero_grad).
   dloss is d(objective)/d(mean loss of this batch): 1 normally, 1/N when accumulating N batches. */
static inline void mlp_backward(mlp *m, float dloss) {
    const int IN = m->in, H = m->hidden, K = m->classes, B = m->batch;
    const float scale = dloss / (float)B;          /* the loss is a mean over B rows */

    for (int b = 0; b < B; b++) {
        const float *p = m->probs + (size_t)b * K;
        const float *h = m->h + (size_t)b * H, *pre = m->pre + (size_t)b * H;
        const float *xb = m->x + (size_t)b * IN;
        float *dh = m->dh + (size_t)b * H;

        /* d loss / d logits = probs - onehot(y): the classic softmax + cross-entropy gradient */
        for (int j = 0; j < H; j++) dh[j] = 0.0f;
        for (int k = 0; k < K; k++) {
            float dlogit = (p[k] - (k == m->y[b] ? 1.0f : 0.0f)) * scale;
            float *dwk = m->dw2 + (size_t)k * H;
            const float *wk = m->w2 + (size_t)k * H;
            m->db2[k] += dlogit;
            for (int j = 0; j < H; j++) {
                dwk[j] += dlogit * h[j];           /* d logits / d W2 = h */
                dh[j] += dlogit * wk[j];           /* d logits / d h  = W2 */
            }
        }
        /* through the relu: the gradient passes where pre > 0 and stops elsewhere */
        for (int j = 0; j < H; j++) {
            float dpre = pre[j] > 0.0f ? dh[j] : 0.0f;
            float *dwj = m->dw1 + (size_t)j * IN;
            m->db1[j] += dpre;
            for (int i = 0; i < IN; i++) dwj[i] += dpre * xb[i];
        }
    }
}

/* Class predictions (argmax of the logits) for B rows; writes B ints to out. Returns 0, -1 on bad B. */
static inline int mlp_predict(mlp *m, const float *x, int B, int *out) {
    if (mlp_forward(m, x, NULL, B) != 0.0f) return -1;    /* NAN: B out of range */
    for (int b = 0; b < B; b++) {
        const float *p = m->probs + (size_t)b * m->classes;
        int best = 0;
        for (int k = 1; k < m->classes; k++) if (p[k] > p[best]) best = k;
        out[b] = best;
    }
    return 0;
}

/* Fraction of ds classified correctly, in batches of batch_size (at most max_batch). Every point is
   visited once whatever the current order. It runs forward passes and fills ds's batch buffer, so call
   it between batches (at an epoch or fit event), never between a forward and its backward. */
static inline double mlp_accuracy(mlp *m, spirals *ds, int batch_size) {
    int correct = 0;
    if (batch_size > m->max_batch) batch_size = m->max_batch;
    for (int i = 0; i < spirals_num_batches(ds, batch_size); i++) {
        const mlp_batch *b = spirals_batch(ds, i, batch_size);
        if (!b || mlp_predict(m, b->x, b->n, m->pred) != 0) return -1.0;
        for (int r = 0; r < b->n; r++) correct += m->pred[r] == b->y[r];
    }
    return ds->n ? (double)correct / ds->n : 0.0;
}

#endif /* MLP_H */

/* =====================================================================================================
   Glue for train.h: only compiled when train.h was included BEFORE this header.

   train.h asks for the model as a tr_model (flat buffers, named tensors, forward/backward/predict
   through void pointers) and for data as a tr_data (count, get batch i, shuffle). These few lines
   translate; they are all a trainer needs to know about the model and the data:

       tr_tensor views[MLP_NUM_TENSORS];
       tr_data train_data = spirals_tr_data(&train, 32, 1);    // shuffled every epoch
       tr_desc desc = { .model = mlp_tr_model(&net, views), .optim = { .lr = 1e-2 } };
   ===================================================================================================== */
#if defined(TRAIN_H) && !defined(MLP_TRAIN_GLUE)
#define MLP_TRAIN_GLUE

/* forward + loss. The model has no dropout, so `training` changes nothing here. */
static inline int mlp_tr_forward(void *user, void *batch, int training, double *loss) {
    mlp *m = (mlp *)user;
    const mlp_batch *b = (const mlp_batch *)batch;
    (void)training;
    if (!b || b->n < 1 || b->n > m->max_batch) return 1;       /* an error, not a NaN loss */
    *loss = mlp_forward(m, b->x, b->y, b->n);
    return 0;
}

/* backward: ADD this batch's gradient to grads (train.h zeroes them and averages accumulated batches) */
static inline int mlp_tr_backward(void *user, void *batch) {
    (void)batch;                                               /* forward kept what backward needs */
    mlp_backward((mlp *)user, 1.0f);
    return 0;
}

/* predict: *outputs points at batch->n ints, the predicted classes */
static inline int mlp_tr_predict(void *user, void *batch, void **outputs) {
    mlp *m = (mlp *)user;
    const mlp_batch *b = (const mlp_batch *)batch;
    if (!b || mlp_predict(m, b->x, b->n, m->pred) != 0) return 1;
    *outputs = m->pred;
    return 0;
}

/* The model as train.h sees it. views (MLP_NUM_TENSORS entries, yours) must outlive the trainer. */
static inline tr_model mlp_tr_model(mlp *m, tr_tensor views[MLP_NUM_TENSORS]) {
    tr_model model;
    memset(&model, 0, sizeof model);
    for (int t = 0; t < MLP_NUM_TENSORS; t++) {
        views[t].name = m->tensors[t].name;
        views[t].offset = m->tensors[t].offset;
        views[t].count = m->tensors[t].count;
    }
    model.params = m->params;
    model.grads = m->grads;
    model.n_params = m->num_params;
    model.tensors = views;
    model.n_tensors = MLP_NUM_TENSORS;
    model.user = m;
    model.forward = mlp_tr_forward;
    model.backward = mlp_tr_backward;
    model.predict = mlp_tr_predict;
    return model;
}

static inline int64_t spirals_tr_count(void *user) {
    const spirals *ds = (const spirals *)user;
    return spirals_num_batches(ds, ds->batch_size);
}

static inline int spirals_tr_get(void *user, int64_t index, void **batch) {
    spirals *ds = (spirals *)user;
    const mlp_batch *b = spirals_batch(ds, (int)index, ds->batch_size);
    *batch = (void *)b;
    return b ? 0 : 1;
}

/* One number from the trainer's per-epoch generator seeds our shuffle, so the order depends only on
   that generator: after a resume, the same epoch visits the points in the same order. */
static inline void spirals_tr_shuffle(void *user, tr_rng *rng) {
    spirals_shuffle((spirals *)user, tr_rng_u64(rng));
}

/* The data as train.h sees it: batches of batch_size points; shuffled every epoch when shuffle != 0
   (use 0 for validation and test data). */
static inline tr_data spirals_tr_data(spirals *ds, int batch_size, int shuffle) {
    tr_data d;
    memset(&d, 0, sizeof d);
    ds->batch_size = batch_size;
    d.user = ds;
    d.count = spirals_tr_count;
    d.get = spirals_tr_get;
    d.shuffle = shuffle ? spirals_tr_shuffle : NULL;
    d.batch_size = batch_size;
    return d;
}
#endif /* TRAIN_H && !MLP_TRAIN_GLUE */
