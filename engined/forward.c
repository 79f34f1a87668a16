/*
 * forward.c - the engine handle (built around a mapped segment; open.c decides which),
 * sessions, and the forward pass shared by prefill and batched decode, on both paths
 * (q8t or f32 weights). Owned by the engine.
 *
 * One pass evaluates a batch of n items (session, token, position): prefill is n
 * consecutive positions of one session, decode is one position of each of n distinct
 * sessions. Matrices see the batch as n rows (one blocked product over the weights);
 * attention (attn.c) runs per run of one session's items and kv head on that
 * session's cache, after every item's key and value have been stored. Every row's
 * numbers are independent of the rest of the batch (kernels.h, attn.h).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "engine.h"
#include "handle.h"
#include "kernels.h"
#include "kv.h"
#include "log.h"
#include "model.h"
#include "moe.h"
#include "pool.h"
#include "segment.h"
#include "errcode.h"

#define ENG_DEFAULT_THREADS 2
#define ENG_MAX_CTX_DEFAULT 4096

struct eng_model {
    seg_map       seg;
    mdl_config    cfg;
    mdl_weights   w;
    eng_precision prec;
    pool_t       *pool;
    struct kvp   *kv_pools[ENG_KV_KINDS]; /* eng_set_kv_pools: sessions' block tables, or NULL */
    int           swa_step; /* eng_set_swa_step: sliding-window rings' step, 0: none */
    /* scratch, grown on demand (never per token once warm) */
    int    cap_tok;   /* rows of the buffers below */
    float *x;         /* (cap_tok, n_embd) residual stream */
    float *xn;        /* (cap_tok, n_embd) normed input of a matmul */
    float *q;         /* (cap_tok, n_head*head_dim) */
    float *k, *v;     /* (cap_tok, n_head_kv*head_dim) */
    float *att;       /* (cap_tok, n_head*head_dim) attention output */
    float *gate, *up; /* (cap_tok, n_ff) */
    void  *xq;        /* (cap_tok) xq rows of max(n_embd, q_dim, n_ff) values */
    float *rope;      /* (cap_tok, n_rot) cos/sin pairs */
    float *rope_l;    /* (cap_tok, n_rot) the same for sliding-window layers (gemma3), or unused */
    int    cap_ctx;   /* positions per thread in scores */
    float *scores;    /* (n_threads, att_scratch_floats(cap_ctx - 1)) attention scratch */
    moe_scratch *moe; /* mixture of experts (moe.h), or NULL */
    uint64_t progress; /* layers computed (atomic: read by a worker's I/O thread) */
};

/* ---- handle ---------------------------------------------------------------------- */

eng_model *eng_handle_new(seg_map *sm, char *err, size_t errlen)
{
    eng_model *m = calloc(1, sizeof *m);
    if (!m) {
        errf(err, errlen, "out of memory");
        seg_unmap(sm);
        return NULL;
    }
    m->seg = *sm;
    memset(sm, 0, sizeof *sm);
    const seg_header *h = seg_hdr(&m->seg);
    m->cfg = h->config;
    m->cfg.arch_name[sizeof m->cfg.arch_name - 1] = 0;
    m->prec = h->precision < ENG_PRECISION_COUNT ? (eng_precision)h->precision : ENG_INT8;
    if (m->cfg.arch_id < 0 || m->cfg.arch_id >= MDL_ARCH_COUNT || m->cfg.n_layer <= 0 ||
        m->cfg.n_head <= 0 || m->cfg.n_head_kv <= 0 || m->cfg.n_head % m->cfg.n_head_kv != 0 ||
        m->cfg.head_dim <= 0 || m->cfg.n_rot <= 0 || m->cfg.n_rot > m->cfg.head_dim) {
        errf(err, errlen, "segment %s: model configuration is invalid", m->seg.name);
        eng_close(m);
        return NULL;
    }
    if (mdl_weights_bind(&m->seg, &m->cfg, &m->w, err, errlen) != 0) {
        eng_close(m);
        return NULL;
    }
    kern_init();
    m->swa_step = ENG_SWA_STEP_DEFAULT;
    if (eng_set_threads(m, ENG_DEFAULT_THREADS) != 0) {
        errf(err, errlen, "cannot start the thread pool");
        eng_close(m);
        return NULL;
    }
    return m;
}

void eng_close(eng_model *m)
{
    if (!m) return;
    pool_destroy(&m->pool);
    mdl_weights_free(&m->w);
    seg_unmap(&m->seg);
    free(m->x); free(m->xn); free(m->q); free(m->k); free(m->v); free(m->att);
    free(m->gate); free(m->up); free(m->xq); free(m->rope); free(m->rope_l); free(m->scores);
    moe_free(&m->moe);
    free(m);
}

const mdl_config *eng_config_of(const eng_model *m) { return &m->cfg; }
const seg_map *eng_handle_map(const eng_model *m) { return &m->seg; }
const char *eng_segment_name(const eng_model *m) { return m->seg.name; }
eng_precision eng_precision_of(const eng_model *m) { return m->prec; }

const void *eng_tokenizer_blob(const eng_model *m, size_t *len)
{
    const seg_header *h = seg_hdr(&m->seg);
    *len = h->tok_bytes;
    return (const char *)m->seg.base + h->tok_offset;
}

static uint64_t mat_bytes(const mdl_mat *w) { return w->nbytes; }

void eng_moe_counts(const eng_model *m, uint64_t *blocks, uint64_t *experts)
{
    moe_counts(m->moe, blocks, experts);
}

uint64_t eng_weight_bytes_per_token(const eng_model *m)
{
    uint64_t b = mat_bytes(&m->w.output);
    for (int il = 0; il < m->cfg.n_layer; il++) {
        const mdl_layer *L = &m->w.layers[il];
        b += mat_bytes(&L->wq) + mat_bytes(&L->wk) + mat_bytes(&L->wv) + mat_bytes(&L->wo) +
             mat_bytes(&L->gate) + mat_bytes(&L->up) + mat_bytes(&L->down);
        if (m->cfg.n_expert) b += moe_bytes_per_token(&m->cfg, L);
    }
    return b;
}

int eng_set_threads(eng_model *m, int n_threads)
{
    if (n_threads < 1 || n_threads > POOL_MAX_THREADS) return -1;
    if (m->pool && pool_threads(m->pool) == n_threads) return 0;
    pool_t *p = pool_new(n_threads);
    if (!p) return -1;
    pool_destroy(&m->pool);
    m->pool = p;
    free(m->scores);
    m->scores = NULL;
    m->cap_ctx = 0;
    return 0;
}

/* ---- sessions ---------------------------------------------------------------------- */

int eng_kv_check(const eng_model *m, eng_kv_type t, char *err, size_t errlen)
{
    if (!eng_kv_name(t)) return errf(err, errlen, "KV type %d: unknown (f16, f32 or q8_0)", (int)t);
    if (t == ENG_KV_Q8_0 && m->cfg.head_dim % 32)
        return errf(err, errlen, "KV type q8_0 needs a head_dim that is a multiple of 32 (this model's is %d): use f16",
                    (int)m->cfg.head_dim);
    return 0;
}

int eng_ctx(const eng_model *m, int n_ctx)
{
    if (n_ctx > 0) return n_ctx;
    return m->cfg.n_ctx_train < ENG_MAX_CTX_DEFAULT ? m->cfg.n_ctx_train : ENG_MAX_CTX_DEFAULT;
}

/* The pool sessions' blocks come from first (either kind's: they hold the same type). */
static struct kvp *any_pool(const eng_model *m)
{
    return m->kv_pools[ENG_KV_WHOLE] ? m->kv_pools[ENG_KV_WHOLE] : m->kv_pools[ENG_KV_RING];
}

eng_session *eng_session_new(eng_model *m, int n_ctx, eng_kv_type kv, char *err, size_t errlen)
{
    struct kvp *pool = any_pool(m);
    if (eng_kv_check(m, pool ? kv_pool_type(pool) : kv, err, errlen) != 0) return NULL;
    n_ctx = eng_ctx(m, n_ctx);
    if (n_ctx > (1 << 20)) {
        errf(err, errlen, "n_ctx %d is too large", n_ctx);
        return NULL;
    }
    eng_session *s = calloc(1, sizeof *s);
    if (!s) {
        errf(err, errlen, "out of memory");
        return NULL;
    }
    s->model = m;
    int64_t kv_dim = (int64_t)m->cfg.n_head_kv * m->cfg.head_dim;
    if (pool && kvp_geometry_of(pool)->id.kv_dim != kv_dim) {
        errf(err, errlen, "KV pool: of another shape than the model's");
        free(s);
        return NULL;
    }
    int *win = malloc((size_t)m->cfg.n_layer * sizeof *win);
    for (int l = 0; win && l < m->cfg.n_layer; l++) win[l] = mdl_layer_window(&m->cfg, l);
    int rc = !win ? errf(err, errlen, "out of memory")
           : pool ? kv_init_pool(&s->kv, m->kv_pools, m->cfg.n_layer, m->cfg.head_dim, win, n_ctx, err, errlen)
                  : kv_init(&s->kv, m->cfg.n_layer, n_ctx, kv_dim, m->cfg.head_dim, kv, win, m->swa_step, err, errlen);
    free(win);
    if (rc != 0) {
        free(s);
        return NULL;
    }
    return s;
}

uint64_t eng_session_kv_bytes(const eng_session *s)
{
    const kv_cache *kv = &s->kv;
    if (!kv->pooled) return kv_cache_bytes(kv->n_layer, kv->n_ctx, kv->kv_dim, kv->type, kv->win, kv->step);
    int held[ENG_KV_KINDS];
    eng_session_kv_held(s, held);
    uint64_t b = 0;
    for (int k = 0; k < ENG_KV_KINDS; k++)
        if (kv->kp[k]) b += (uint64_t)held[k] * kvp_geometry_of(kv->kp[k])->block_bytes;
    return b;
}

void eng_session_free(eng_session *s)
{
    if (!s) return;
    kv_free(&s->kv);
    free(s);
}

void eng_session_reset(eng_session *s)
{
    kv_truncate(&s->kv, 0);
    s->pos = 0;
}

void eng_set_kv_pools(eng_model *m, struct kvp *whole, struct kvp *ring)
{
    m->kv_pools[ENG_KV_WHOLE] = whole;
    m->kv_pools[ENG_KV_RING] = ring;
}

void eng_set_swa_step(eng_model *m, int step) { m->swa_step = step > 0 ? step : 0; }

int eng_session_reuse(eng_session *s, const int32_t *tokens, int n)
{
    s->pos = kv_reuse(&s->kv, s->pos, tokens, n);
    return s->pos;
}

uint64_t eng_session_reused(const eng_session *s) { return s->kv.reused; }

void eng_session_kv_need(const eng_session *s, int n, int step, int need[ENG_KV_KINDS])
{
    if (!s->kv.pooled) need[ENG_KV_WHOLE] = need[ENG_KV_RING] = 0;
    else kv_need(&s->kv, s->pos, n, step, need);
}
void eng_session_kv_held(const eng_session *s, int held[ENG_KV_KINDS])
{
    const kv_cache *kv = &s->kv;
    held[ENG_KV_WHOLE] = kv->kp[ENG_KV_WHOLE] ? kv->n_blk : 0;
    held[ENG_KV_RING] = kv->kp[ENG_KV_RING] ? kv->n_blk - kv->lo : 0;
}

int eng_session_pos(const eng_session *s) { return s->pos; }
int eng_session_n_ctx(const eng_session *s) { return s->kv.n_ctx; }

int eng_session_truncate(eng_session *s, int pos)
{
    if (pos < 0 || pos > s->pos) return -1;
    if (!kv_keeps(&s->kv, pos)) { /* a ring lost the window before pos: start again */
        eng_session_reset(s);
        return -1;
    }
    if (kv_truncate(&s->kv, pos) != 0) {
        s->pos = pos / 16 * 16; /* the copy failed: the partial block was dropped */
        kv_truncate(&s->kv, s->pos);
        return -1;
    }
    s->pos = pos;
    return 0;
}

int eng_argmax(const float *logits, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* ---- scratch ----------------------------------------------------------------------- */

static int grow(void **p, size_t bytes)
{
    void *n = realloc(*p, bytes ? bytes : 1);
    if (!n) return -1;
    *p = n;
    return 0;
}

/* Makes the scratch hold n rows and positions up to max_pos. 0 or -1 (no memory). */
static int reserve(eng_model *m, int n, int max_pos)
{
    const mdl_config *c = &m->cfg;
    if (n > m->cap_tok) {
        size_t E = (size_t)c->n_embd, Q = (size_t)c->n_head * c->head_dim;
        size_t KV = (size_t)c->n_head_kv * c->head_dim, F = (size_t)c->n_ff, N = (size_t)n;
        size_t widest = E > Q ? E : Q;
        widest = widest > F ? widest : F;
        m->cap_tok = 0;
        if (grow((void **)&m->x, N * E * 4) || grow((void **)&m->xn, N * E * 4) ||
            grow((void **)&m->q, N * Q * 4) || grow((void **)&m->k, N * KV * 4) ||
            grow((void **)&m->v, N * KV * 4) || grow((void **)&m->att, N * Q * 4) ||
            grow((void **)&m->gate, N * F * 4) || grow((void **)&m->up, N * F * 4) ||
            grow(&m->xq, N * kern_xq_row_bytes((int64_t)widest)) ||
            grow((void **)&m->rope, N * (size_t)c->n_rot * 4) || grow((void **)&m->rope_l, N * (size_t)c->n_rot * 4) ||
            (c->n_expert && moe_reserve(&m->moe, c, n) != 0))
            return -1;
        m->cap_tok = n;
    }
    if (max_pos + 1 > m->cap_ctx) {
        int nth = pool_threads(m->pool), old = m->cap_ctx;
        m->cap_ctx = max_pos + 1;
        if (grow((void **)&m->scores, (size_t)nth * att_scratch_floats(&m->cfg, max_pos) * 4)) {
            m->cap_ctx = old;
            return -1;
        }
    }
    return 0;
}

/* ---- element-wise pieces --------------------------------------------------------- */

/* out = x / rms(x) * w over n rows of dim values (out += that, when add); squares in
 * float summed in double, as llama.cpp does (the last bit matters: it decides some
 * activation roundings). Four rows at a time: four independent chains, each in its
 * row's order, so the latency of one double add per value is paid once per four. */
static void rms_scale_rows(const float *x, const float *w, float *out, int n, int dim, const float *scale, bool add)
{
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        float *o = out + (size_t)r * dim, sc = scale[r];
        if (add)
            for (int i = 0; i < dim; i++) o[i] += xr[i] * sc * w[i];
        else
            for (int i = 0; i < dim; i++) o[i] = xr[i] * sc * w[i];
    }
}

static void rms_norm_add(const float *x, const float *w, float *out, int n, int dim, float eps, bool add)
{
    int r = 0;
    for (; r + 4 <= n; r += 4) {
        const float *a = x + (size_t)r * dim, *b = a + dim, *c = b + dim, *d = c + dim;
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int i = 0; i < dim; i++) {
            s0 += (double)(a[i] * a[i]);
            s1 += (double)(b[i] * b[i]);
            s2 += (double)(c[i] * c[i]);
            s3 += (double)(d[i] * d[i]);
        }
        float sc[4] = { 1.0f / sqrtf((float)(s0 / dim) + eps), 1.0f / sqrtf((float)(s1 / dim) + eps),
                        1.0f / sqrtf((float)(s2 / dim) + eps), 1.0f / sqrtf((float)(s3 / dim) + eps) };
        rms_scale_rows(a, w, out + (size_t)r * dim, 4, dim, sc, add);
    }
    for (; r < n; r++) {
        const float *xr = x + (size_t)r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)(xr[i] * xr[i]);
        float sc = 1.0f / sqrtf((float)(ss / dim) + eps);
        rms_scale_rows(xr, w, out + (size_t)r * dim, 1, dim, &sc, add);
    }
}

static void rms_norm(const float *x, const float *w, float *out, int n, int dim, float eps)
{
    rms_norm_add(x, w, out, n, dim, eps, false);
}

/* cos/sin of every rotated pair for position pos: tab[2i], tab[2i+1]. The angle is
 * built as llama.cpp builds it (a running product of base^(-2/n_rot) in float). */
/* YaRN: the dimension whose wavelength turns n_rot_turns times over the original context. */
static float yarn_corr_dim(const mdl_config *c, float base, float turns)
{
    return (float)c->n_rot * logf((float)c->n_ctx_orig / (turns * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

/* cos/sin of each rotated pair at one position. Linear scaling multiplies the angle by scale;
 * YaRN (ext_factor > 0) ramps from the unscaled angle (fast dimensions, below corr dim of
 * beta_fast) to the scaled one (slow, above beta_slow's) and scales cos/sin by 1 + 0.1 ln(1/scale). */
static void rope_table(const mdl_config *c, float base, float scale, const float *freqs, int pos, float *tab)
{
    float theta_scale = powf(base, -2.0f / (float)c->n_rot);
    float theta = (float)pos, ms = c->rope_attn_factor > 0 ? c->rope_attn_factor : 1.0f;
    float ext = scale != 1.0f ? c->yarn_ext_factor : 0.0f, lo = 0, hi = 0;
    if (ext != 0) {
        lo = fmaxf(0.0f, floorf(yarn_corr_dim(c, base, c->yarn_beta_fast)));
        hi = fminf((float)c->n_rot - 1, ceilf(yarn_corr_dim(c, base, c->yarn_beta_slow)));
        ms *= 1.0f + 0.1f * logf(1.0f / scale);
    }
    for (int i = 0; i < c->n_rot / 2; i++) {
        float te = theta / (freqs ? freqs[i] : 1.0f), t = scale * te;
        if (ext != 0) {
            float y = ((float)i - lo) / fmaxf(0.001f, hi - lo);
            float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext;
            t = t * (1.0f - mix) + te * mix;
        }
        tab[2 * i] = cosf(t) * ms; /* ms: rope.scaling.attn_factor (phi3), YaRN's mscale, else 1 */
        tab[2 * i + 1] = sinf(t) * ms;
        theta *= theta_scale;
    }
}

/* Rotates n_heads heads of head_dim values in place with the table of one position. */
static void rope_apply(const mdl_config *c, float *v, int n_heads, const float *tab)
{
    int half = c->n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * c->head_dim;
        for (int i = 0; i < half; i++) {
            /* llama: adjacent pairs (2i, 2i+1); NEOX (qwen2): (i, i + n_rot/2) */
            int a = c->rope_neox ? i : 2 * i, b = c->rope_neox ? i + half : 2 * i + 1;
            float x0 = x[a], x1 = x[b], cs = tab[2 * i], sn = tab[2 * i + 1];
            x[a] = x0 * cs - x1 * sn;
            x[b] = x0 * sn + x1 * cs;
        }
    }
}

/* gemma: g = gelu(g) * up, GELU's tanh form (kernels.h). */
static void geglu(float *g, const float *up, size_t n) { kern_gelu_mul(g, up, (int64_t)n); }

static void add_bias(float *y, const float *b, int n, int dim)
{
    if (!b) return;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < dim; i++) y[(size_t)r * dim + i] += b[i];
}

/* ---- row-parallel element-wise work (prefill only: decode rows are too short to pay
 * for a pool wake-up) ---------------------------------------------------------------- */

#define ENG_PAR_MIN_ROWS 8

typedef enum { ROWS_RMS, ROWS_SWIGLU, ROWS_GEGLU, ROWS_ADD, ROWS_QUANT } rows_op;

typedef struct {
    rows_op      op;
    const float *x;     /* input rows */
    const float *w;     /* RMS: norm weight */
    float       *y;     /* RMS: output rows; SWIGLU, GEGLU: gate rows, updated in place; ADD: y += x */
    const float *up;    /* SWIGLU, GEGLU: up rows */
    bool         add;   /* RMS: y += the normed rows (gemma's post-norms into the residual) */
    void        *q;     /* QUANT: xq rows */
    int          xk;    /* QUANT: KERN_X_Q8_0, _Q8_K (kern_xk_quantize), _Q8_1 or _Q8_2 */
    int          native;/* QUANT: a native matrix reads the rows (kern_xq_finish) */
    int          dim;   /* values per row */
    float        eps;
    int64_t      n_rows;
} rows_job;

static void swiglu_rows(float *g, const float *up, size_t n) { kern_silu_mul(g, up, (int64_t)n); }

static void rows_do(const rows_job *j, int64_t r0, int64_t r1)
{
    size_t d = (size_t)j->dim;
    if (r0 >= r1) return;
    if (j->op == ROWS_RMS) rms_norm_add(j->x + r0 * d, j->w, j->y + r0 * d, (int)(r1 - r0), j->dim, j->eps, j->add);
    else if (j->op == ROWS_SWIGLU) swiglu_rows(j->y + r0 * d, j->up + r0 * d, (size_t)(r1 - r0) * d);
    else if (j->op == ROWS_GEGLU) geglu(j->y + r0 * d, j->up + r0 * d, (size_t)(r1 - r0) * d);
    else if (j->op == ROWS_ADD)
        for (size_t i = (size_t)r0 * d; i < (size_t)r1 * d; i++) j->y[i] += j->x[i];
    else {
        const float *x = j->x + r0 * d;
        char *q = (char *)j->q + (size_t)r0 * kern_xq_row_bytes(j->dim);
        if (j->xk == KERN_X_Q8_1) kern_x1_quantize(x, r1 - r0, j->dim, q);
        else if (j->xk == KERN_X_Q8_K) kern_xk_quantize(x, r1 - r0, j->dim, q);
        else {
            if (j->xk == KERN_X_Q8_2) kern_x2_quantize(x, r1 - r0, j->dim, q);
            else kern_xq_quantize(x, r1 - r0, j->dim, q);
            if (j->native) kern_xq_finish(q, r1 - r0, j->dim);
        }
    }
}

/* Whether n rows are worth a pool run (else the caller does them alone). */
static bool on_pool(const eng_model *m, int n) { return n >= ENG_PAR_MIN_ROWS && pool_threads(m->pool) > 1; }

static void rows_part(void *arg, int ith, int nth)
{
    const rows_job *j = arg;
    int64_t r0, r1;
    pool_range(j->n_rows, 1, ith, nth, &r0, &r1);
    rows_do(j, r0, r1);
}

/* Runs the job over n rows, on the pool when there are enough of them. */
static void rows_run(eng_model *m, rows_job *j, int n)
{
    j->n_rows = n;
    if (on_pool(m, n)) pool_run(m->pool, rows_part, j);
    else rows_do(j, 0, n);
}

/* y = rms_norm(x) * w over n rows of dim values (y += that, when add), on the pool. */
static void par_rms(eng_model *m, const float *x, const float *w, float *y, int n, int dim, bool add)
{
    rows_job j = { .op = ROWS_RMS, .x = x, .w = w, .y = y, .add = add, .dim = dim, .eps = m->cfg.rms_eps };
    rows_run(m, &j, n);
}

/* The residual: x += o over n rows of n_embd values, on the pool. */
static void par_add(eng_model *m, float *x, const float *o, int n)
{
    rows_job j = { .op = ROWS_ADD, .x = o, .y = x, .dim = m->cfg.n_embd };
    rows_run(m, &j, n);
}

/* ---- matrix products on the pool ---------------------------------------------------- */

typedef struct {
    const mdl_mat *w[3];
    float         *y[3];
    int64_t        ldy[3];
    int            nw;
    const void    *xq;    /* xq rows of X (q8t weights) */
    const float   *x;     /* f32 rows of X (f32 weights) */
    int64_t        n_tok;
    int64_t        unit;      /* rows per work unit */
    int            first[4];  /* first unit of matrix i; first[nw] = all units */
    atomic_int     next;      /* next unit to take */
} mm_job;

/* Threads take units of rows as they free up (a preempted thread holds up one unit, not
 * half the matrix); which thread computes a row never changes its bits. */
static void mm_part(void *arg, int ith, int nth)
{
    mm_job *j = arg;
    (void)ith; (void)nth;
    for (int u; (u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->first[j->nw];) {
        int i = 0;
        while (u >= j->first[i + 1]) i++;
        const mdl_mat *w = j->w[i];
        int64_t r0 = (u - j->first[i]) * j->unit, r1 = r0 + j->unit < w->rows ? r0 + j->unit : w->rows;
        if (w->q8) kern_wmatmul(w->wt, w->data, w->cols, j->xq, j->n_tok, j->y[i], j->ldy[i], r0, r1);
        else kern_f32_matmul(w->data, w->cols, j->x, j->n_tok, j->y[i], j->ldy[i], r0, r1);
    }
}

/* Decode-sized products (up to ENG_STREAM_TOKENS tokens) read each weight once, so a
 * work unit need not be an L2 panel: about ENG_STREAM_UNITS units per thread balance the
 * threads' shares (a compute-bound native kernel otherwise leaves one thread idle while
 * the other finishes a 480-row panel). */
#define ENG_STREAM_TOKENS 8
#define ENG_STREAM_UNITS 8

/* y[i] (n x rows_i, row stride ldy_i) = x (n x cols) times each of nw matrices that
 * share cols, in one pool run. */
static void matmul(eng_model *m, const float *x, int n, int nw, const mdl_mat *const *w,
                   float *const *y, const int64_t *ldy)
{
    for (int i = 1; i < nw; i++)
        if (w[i]->xk != w[0]->xk) { /* activations rounded two ways: one product each */
            for (int k = 0; k < nw; k++) matmul(m, x, n, 1, &w[k], &y[k], ldy ? &ldy[k] : NULL);
            return;
        }
    mm_job j = { .nw = nw, .x = x, .n_tok = n };
    j.unit = w[0]->q8 ? kern_w_panel_rows(w[0]->wt, w[0]->cols, n) : 64;
    if (n <= ENG_STREAM_TOKENS) { /* no panel to reuse: units small enough that threads finish together */
        int64_t rows = 0;
        for (int i = 0; i < nw; i++) rows += w[i]->rows;
        int64_t u = (rows / (ENG_STREAM_UNITS * pool_threads(m->pool)) + KERN_TILE - 1) / KERN_TILE * KERN_TILE;
        if (u < j.unit) j.unit = u < KERN_TILE ? KERN_TILE : u;
    }
    atomic_init(&j.next, 0);
    for (int i = 0; i < nw; i++) {
        LLM_ASSERT(w[i]->cols == w[0]->cols && w[i]->q8 == w[0]->q8);
        j.w[i] = w[i];
        j.y[i] = y[i];
        j.ldy[i] = ldy ? ldy[i] : w[i]->rows;
        j.first[i + 1] = j.first[i] + (int)((w[i]->rows + j.unit - 1) / j.unit);
    }
    if (w[0]->q8) {
        rows_job q = { .op = ROWS_QUANT, .x = x, .q = m->xq, .xk = w[0]->xk, .dim = (int)w[0]->cols };
        for (int i = 0; i < nw; i++) q.native |= w[i]->wt != KERN_W_Q8T;
        rows_run(m, &q, n);
        j.xq = m->xq;
    }
    pool_run(m->pool, mm_part, &j);
}

/* ---- the pass -------------------------------------------------------------------------- */

/* Rope on each item's query and key rows, then its key and value into its session's
 * cache, items split across the pool (distinct positions: kv_put). */
typedef struct {
    eng_model          *m;
    int                 il;
    eng_session *const *sess;
    const int          *pos;
    const float        *tab; /* the layer's rope tables, one per item */
    int                 n;
} rope_job;

static void rope_rows(const rope_job *j, int64_t i0, int64_t i1)
{
    const mdl_config *c = &j->m->cfg;
    int64_t Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim;
    for (int64_t i = i0; i < i1; i++) {
        const float *tab = j->tab + i * c->n_rot;
        rope_apply(c, j->m->q + i * Q, c->n_head, tab);
        rope_apply(c, j->m->k + i * KV, c->n_head_kv, tab);
        kv_put(&j->sess[i]->kv, j->il, j->pos[i], j->m->k + i * KV, j->m->v + i * KV);
    }
}

static void rope_part(void *arg, int ith, int nth)
{
    const rope_job *j = arg;
    int64_t i0, i1;
    pool_range(j->n, KV_BLOCK_TOKENS, ith, nth, &i0, &i1);
    rope_rows(j, i0, i1);
}

static void layer_forward(eng_model *m, int il, eng_session *const *sess, const int *pos, int n)
{
    const mdl_config *c = &m->cfg;
    const mdl_layer *L = &m->w.layers[il];
    int E = c->n_embd, Q = c->n_head * c->head_dim, KV = c->n_head_kv * c->head_dim, F = c->n_ff;

    par_rms(m, m->x, L->attn_norm, m->xn, n, E, false);
    const mdl_mat *qkv[3] = { &L->wq, &L->wk, &L->wv };
    float *qkv_out[3] = { m->q, m->k, m->v };
    matmul(m, m->xn, n, 3, qkv, qkv_out, NULL);
    add_bias(m->q, L->bq, n, Q);
    add_bias(m->k, L->bk, n, KV);
    add_bias(m->v, L->bv, n, KV);
    if (L->q_norm) { /* qwen3: every head of every row normalized on its own */
        par_rms(m, m->q, L->q_norm, m->q, n * c->n_head, c->head_dim, false);
        par_rms(m, m->k, L->k_norm, m->k, n * c->n_head_kv, c->head_dim, false);
    }
    bool local = c->rope_base_local > 0 && c->swa_pattern > 0 && (il + 1) % c->swa_pattern != 0;
    rope_job rj = { m, il, sess, pos, local ? m->rope_l : m->rope, n };
    if (on_pool(m, n)) pool_run(m->pool, rope_part, &rj);
    else rope_rows(&rj, 0, n);
    for (int i = 0; i < n; i++) kv_mark(&sess[i]->kv, pos[i]);
    att_pass ap = { c, il, sess, pos, n, m->q, m->att };
    att_forward(m->pool, &ap, m->scores, att_scratch_floats(c, m->cap_ctx - 1));

    const mdl_mat *wo = &L->wo;
    float *o = m->xn; /* n x E, free again */
    matmul(m, m->att, n, 1, &wo, &o, NULL);
    if (L->attn_post_norm) par_rms(m, o, L->attn_post_norm, m->x, n, E, true); /* x += norm(o) */
    else par_add(m, m->x, o, n);

    par_rms(m, m->x, L->ffn_norm, m->xn, n, E, false);
    if (c->n_expert) { /* mixture of experts: moe.c, the output over its input */
        moe_ffn(m->moe, m->pool, c, L, m->xn, n, o);
        par_add(m, m->x, o, n);
        return;
    }
    const mdl_mat *gu[2] = { &L->gate, &L->up };
    float *gu_out[2] = { m->gate, m->up };
    matmul(m, m->xn, n, 2, gu, gu_out, NULL);
    rows_job act = { .op = L->ffn_post_norm ? ROWS_GEGLU : ROWS_SWIGLU, .y = m->gate, .up = m->up, .dim = F };
    rows_run(m, &act, n);
    const mdl_mat *dn = &L->down;
    matmul(m, m->gate, n, 1, &dn, &o, NULL);
    if (L->ffn_post_norm) par_rms(m, o, L->ffn_post_norm, m->x, n, E, true); /* x += norm(o) */
    else par_add(m, m->x, o, n);
}

/* 0 when every token is in the vocabulary, else -1 with err naming the first that is not. */
static int check_tokens(const mdl_config *c, const int32_t *tok, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= c->n_vocab)
            return errf(err, errlen, "token %d at batch index %d is outside the vocabulary (0..%d)", tok[i], i,
                        c->n_vocab - 1);
    return 0;
}

/* What a pass over n items needs before it starts: valid tokens, pool blocks for their
 * positions, scratch. Once it returns 0 the passes over these items cannot fail. 0, or
 * -1 with err (nothing computed). */
static int forward_prepare(eng_model *m, eng_session *const *sess, const int *pos, const int32_t *tok, int n,
                           char *err, size_t errlen)
{
    int max_pos = 0;
    if (check_tokens(&m->cfg, tok, n, err, errlen) != 0) return -1;
    for (int i = 0; i < n; i++) {
        if (pos[i] > max_pos) max_pos = pos[i];
        if (sess[i]->kv.pooled && kv_reserve(&sess[i]->kv, pos[i]) != 0)
            return errf(err, errlen, "KV pool full: no free block for position %d (every block is in use)", pos[i]);
        kv_note(&sess[i]->kv, pos[i], tok[i]);
    }
    if (reserve(m, n, max_pos) != 0) {
        return errf(err, errlen, "out of memory for a batch of %d tokens", n);
    }
    return 0;
}

/* Runs n prepared items through the model; the final states of items lrows[0..nl)
 * become logits rows 0..nl (logits may be NULL). A ring session (kv.step) gets at most
 * its step items. */
static void forward_run(eng_model *m, eng_session *const *sess, const int *pos, const int32_t *tok, int n,
                        float *logits, int64_t ldl, const int *lrows, int nl)
{
    const mdl_config *c = &m->cfg;
    int E = c->n_embd;
    const mdl_mat *te = &m->w.tok_embd;
    for (int i = 0; i < n; i++) {
        if (te->q8) kern_w_dequant_row(te->wt, te->data, E, tok[i], m->x + (size_t)i * E);
        else memcpy(m->x + (size_t)i * E, (const char *)te->data + (size_t)tok[i] * te->row_bytes,
                    (size_t)E * sizeof(float));
        const float *ff = mdl_rope_factors(&m->w, c, sess[i]->kv.n_ctx); /* phi3: by the session's context */
        rope_table(c, c->rope_base, c->rope_freq_scale, ff, pos[i], m->rope + (size_t)i * c->n_rot);
        if (c->rope_base_local > 0)
            rope_table(c, c->rope_base_local, 1.0f, m->w.rope_freqs, pos[i], m->rope_l + (size_t)i * c->n_rot);
        if (mdl_arch_get(c->arch_id)->gemma) { /* embeddings scaled by sqrt(n_embd) */
            float sc = sqrtf((float)E);
            for (int e = 0; e < E; e++) m->x[(size_t)i * E + e] *= sc;
        }
    }
    for (int il = 0; il < c->n_layer; il++) {
        layer_forward(m, il, sess, pos, n);
        __atomic_fetch_add(&m->progress, 1, __ATOMIC_RELAXED);
    }
    for (int i = 0; i < n; i++) kv_publish(&sess[i]->kv, pos[i]); /* its block's last position */
    for (int i = 0; i < n; i++) kv_slide(&sess[i]->kv); /* then ring blocks every window is past */
    if (!logits || nl <= 0) return;
    for (int j = 0; j < nl; j++)
        rms_norm(m->x + (size_t)lrows[j] * E, m->w.output_norm, m->xn + (size_t)j * E, 1, E, c->rms_eps);
    const mdl_mat *out = &m->w.output;
    matmul(m, m->xn, nl, 1, &out, &logits, &ldl);
    for (int j = 0; j < nl && c->final_softcap > 0; j++) /* gemma2; the reference's row tail in tanhf */
        kern_softcap(logits + (size_t)j * (size_t)ldl, c->n_vocab, c->final_softcap, c->n_vocab / 16 * 16);
}

/* Checks and runs n items in one pass (at most a ring session's step of its items). */
static int forward(eng_model *m, eng_session *const *sess, const int *pos, const int32_t *tok,
                   int n, float *logits, const int *lrows, int nl, char *err, size_t errlen)
{
    if (forward_prepare(m, sess, pos, tok, n, err, errlen) != 0) return -1;
    forward_run(m, sess, pos, tok, n, logits, m->cfg.n_vocab, lrows, nl);
    return 0;
}

/* Largest prefill pass: longer prompts go through in chunks of this many tokens. */
#define ENG_MAX_BATCH 512

/* Largest prefill pass of session s: ENG_MAX_BATCH, or its rings' step when smaller. */
static int pass_tokens(const eng_session *s)
{
    return s->kv.step && s->kv.step < ENG_MAX_BATCH ? s->kv.step : ENG_MAX_BATCH;
}

int eng_prefill(eng_model *m, eng_session *s, const int32_t *tokens, int n,
                float *logits, bool all_logits, char *err, size_t errlen)
{
    if (!s || s->model != m || n <= 0 || !tokens) {
        return errf(err, errlen, "prefill: invalid session or %d tokens", n);
    }
    if (n > s->kv.n_ctx - s->pos) {
        return errf(err, errlen, "prefill: %d tokens at position %d exceed the context of %d",
                    n, s->pos, s->kv.n_ctx);
    }
    if (check_tokens(&m->cfg, tokens, n, err, errlen) != 0) return -1; /* before any chunk */
    int chunk = n < pass_tokens(s) ? n : pass_tokens(s);
    eng_session **sess = malloc((size_t)chunk * sizeof *sess);
    int *pos = malloc((size_t)chunk * sizeof *pos), *lrows = malloc((size_t)chunk * sizeof *lrows);
    if (!sess || !pos || !lrows) {
        free(sess); free(pos); free(lrows);
        return errf(err, errlen, "out of memory");
    }
    int start = s->pos, rc = 0;
    size_t V = (size_t)m->cfg.n_vocab;
    for (int done = 0; done < n && rc == 0; done += chunk) {
        int k = n - done < chunk ? n - done : chunk;
        for (int i = 0; i < k; i++) {
            sess[i] = s;
            pos[i] = s->pos + i;
            lrows[i] = all_logits ? i : k - 1;
        }
        bool last = done + k == n;
        float *lg = !logits ? NULL : all_logits ? logits + (size_t)done * V : last ? logits : NULL;
        rc = forward(m, sess, pos, tokens + done, k, lg, lrows, all_logits ? k : 1, err, errlen);
        if (rc == 0) s->pos += k;
    }
    if (rc != 0) s->pos = start;
    if (rc != 0 && !kv_keeps(&s->kv, start)) eng_session_reset(s); /* out of memory after chunks past a ring */
    free(sess);
    free(pos);
    free(lrows);
    return rc;
}

int eng_decode(eng_model *m, eng_session *const *sessions, const int32_t *tokens, int n,
               float *logits, char *err, size_t errlen)
{
    if (n <= 0 || n > ENG_MAX_BATCH || !sessions || !tokens) {
        return errf(err, errlen, "decode: invalid batch of %d sessions", n);
    }
    int pos[ENG_MAX_BATCH], lrows[ENG_MAX_BATCH];
    for (int i = 0; i < n; i++) {
        eng_session *s = sessions[i];
        if (!s || s->model != m) {
            return errf(err, errlen, "decode: session %d is invalid or belongs to another model", i);
        }
        if (s->pos >= s->kv.n_ctx) {
            return errf(err, errlen, "decode: session %d is full (%d positions)", i, s->kv.n_ctx);
        }
        for (int k = 0; k < i; k++) {
            if (sessions[k] == s) {
                return errf(err, errlen, "decode: session %d appears twice in one batch", i);
            }
        }
        pos[i] = s->pos;
        lrows[i] = i;
    }
    if (forward(m, sessions, pos, tokens, n, logits, lrows, n, err, errlen) != 0) return -1;
    for (int i = 0; i < n; i++) sessions[i]->pos++;
    return 0;
}

/* Per distinct session of a step: its items so far, and in the current pass. */
typedef struct {
    eng_session *s;
    int          count, pass;
} step_sess;

int eng_step(eng_model *m, const eng_item *items, int n, float *logits, char *err, size_t errlen)
{
    return eng_step_hidden(m, items, n, logits, 0, NULL, err, errlen);
}

/* The final states of the items that want them, through the output norm, into hidden;
 * returns the rows written. */
static int hidden_rows(eng_model *m, const eng_item *items, int n, float *hidden)
{
    const mdl_config *c = &m->cfg;
    int E = c->n_embd, k = 0;
    for (int i = 0; i < n; i++)
        if (items[i].hidden)
            rms_norm(m->x + (size_t)i * E, m->w.output_norm, hidden + (size_t)k++ * E, 1, E, c->rms_eps);
    return k;
}

/* Runs a prepared step's n items as passes in which no ring session gets more than its
 * rings' step of items (one pass unless one brings more; the rows are the same bits
 * however a step is split): logits and hidden rows in item order. */
static void step_passes(eng_model *m, const eng_item *items, eng_session *const *sess, const int *pos,
                        const int32_t *tok, int n, step_sess *ss, int nss, int *lrows, float *logits, int64_t ldl,
                        float *hidden)
{
    size_t E = (size_t)m->cfg.n_embd;
    for (int a = 0, b; a < n; a = b) {
        int nl = 0;
        for (int k = 0; k < nss; k++) ss[k].pass = 0;
        for (b = a; b < n; b++) {
            int k = 0;
            while (ss[k].s != sess[b]) k++;
            if (sess[b]->kv.step && ss[k].pass == sess[b]->kv.step) break;
            ss[k].pass++;
            if (items[b].logits) lrows[nl++] = b - a;
        }
        forward_run(m, sess + a, pos + a, tok + a, b - a, logits, ldl, lrows, nl);
        if (hidden) hidden += (size_t)hidden_rows(m, items + a, b - a, hidden) * E;
        if (logits) logits += (size_t)nl * (size_t)ldl;
    }
}

int eng_step_hidden(eng_model *m, const eng_item *items, int n, float *logits, size_t ldl, float *hidden,
                    char *err, size_t errlen)
{
    if (n <= 0 || n > ENG_MAX_STEP || !items) {
        return errf(err, errlen, "step: invalid batch of %d items (1..%d)", n, ENG_MAX_STEP);
    }
    /* calloc: gcc cannot tell that the loop below fills them before forward reads them */
    eng_session **sess = calloc((size_t)n, sizeof *sess);
    int *pos = calloc((size_t)n, sizeof *pos), *lrows = calloc((size_t)n, sizeof *lrows);
    int32_t *tok = calloc((size_t)n, sizeof *tok);
    step_sess *ss = malloc((size_t)n * sizeof *ss);
    int rc = -1, nss = 0, nl = 0;
    if (!sess || !pos || !lrows || !tok || !ss) {
        errf(err, errlen, "out of memory for a step of %d items", n);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        eng_session *s = items[i].s;
        if (!s || s->model != m) {
            errf(err, errlen, "step: item %d has an invalid session or one of another model", i);
            goto out;
        }
        int k = 0; /* few distinct sessions per step: a linear search is cheapest */
        while (k < nss && ss[k].s != s) k++;
        if (k == nss) ss[nss++] = (step_sess){s, 0, 0};
        pos[i] = s->pos + ss[k].count++;
        if (pos[i] >= s->kv.n_ctx) {
            errf(err, errlen, "step: item %d goes past the context of its session (%d positions)", i,
                 s->kv.n_ctx);
            goto out;
        }
        if (items[i].hidden && !hidden) {
            errf(err, errlen, "step: hidden states are wanted but no buffer was given");
            goto out;
        }
        sess[i] = s;
        tok[i] = items[i].tok;
        nl += items[i].logits;
    }
    if (nl && !logits) {
        errf(err, errlen, "step: logits are wanted but no buffer was given");
        goto out;
    }
    if (ldl == 0) ldl = (size_t)m->cfg.n_vocab;
    if (ldl < (size_t)m->cfg.n_vocab) {
        errf(err, errlen, "step: logits rows %zu floats apart overlap (n_vocab %d)", ldl, m->cfg.n_vocab);
        goto out;
    }
    rc = forward_prepare(m, sess, pos, tok, n, err, errlen); /* every pass's, so that none fails */
    if (rc == 0) step_passes(m, items, sess, pos, tok, n, ss, nss, lrows, logits, (int64_t)ldl, hidden);
    if (rc == 0)
        for (int k = 0; k < nss; k++) ss[k].s->pos += ss[k].count;
out:
    free(sess);
    free(pos);
    free(lrows);
    free(tok);
    free(ss);
    return rc;
}

void eng_pool_add(double *acc, const float *rows, int n, int E, int pooling)
{
    if (n <= 0) return;
    if (pooling == ENG_POOL_LAST) {
        for (int i = 0; i < E; i++) acc[i] = rows[(size_t)(n - 1) * E + i];
        return;
    }
    for (int r = 0; r < n; r++)
        for (int i = 0; i < E; i++) acc[i] += rows[(size_t)r * E + i];
}

void eng_pool_finish(const double *acc, int n_total, int E, int pooling, float *out)
{
    double div = pooling == ENG_POOL_MEAN && n_total > 0 ? n_total : 1, ss = 0;
    for (int i = 0; i < E; i++) ss += (acc[i] / div) * (acc[i] / div);
    double scale = ss > 0 ? 1.0 / sqrt(ss) : 0;
    for (int i = 0; i < E; i++) out[i] = (float)(acc[i] / div * scale);
}

int eng_embed(eng_model *m, eng_session *s, const int32_t *tokens, int n, int pooling, float *out,
              char *err, size_t errlen)
{
    if (!s || s->model != m || n <= 0 || !tokens || !out)
        return errf(err, errlen, "embed: invalid session or %d tokens", n);
    if (pooling != ENG_POOL_MEAN && pooling != ENG_POOL_LAST)
        return errf(err, errlen, "embed: unknown pooling %d (1: mean, 2: last)", pooling);
    if (n > s->kv.n_ctx - s->pos)
        return errf(err, errlen, "embed: %d tokens at position %d exceed the context of %d", n, s->pos, s->kv.n_ctx);
    const mdl_config *c = &m->cfg;
    int E = c->n_embd, chunk = n < pass_tokens(s) ? n : pass_tokens(s), rc = 0;
    eng_session **sess = malloc((size_t)chunk * sizeof *sess);
    int *pos = malloc((size_t)chunk * sizeof *pos);
    double *acc = calloc((size_t)E, sizeof *acc);
    if (!sess || !pos || !acc) rc = errf(err, errlen, "out of memory");
    for (int done = 0; done < n && rc == 0; done += chunk) {
        int k = n - done < chunk ? n - done : chunk;
        for (int i = 0; i < k; i++) {
            sess[i] = s;
            pos[i] = s->pos + i;
        }
        rc = forward(m, sess, pos, tokens + done, k, NULL, NULL, 0, err, errlen);
        if (rc != 0) break;
        s->pos += k;
        /* the final states, through the output norm as the logits see them */
        const float *x = pooling == ENG_POOL_LAST ? m->x + (size_t)(k - 1) * E : m->x;
        int rows = pooling == ENG_POOL_LAST ? 1 : k;
        rms_norm(x, m->w.output_norm, m->xn, rows, E, c->rms_eps);
        eng_pool_add(acc, m->xn, rows, E, pooling);
    }
    if (rc == 0) eng_pool_finish(acc, n, E, pooling, out);
    free(sess);
    free(pos);
    free(acc);
    return rc;
}

uint64_t eng_progress(const eng_model *m) { return __atomic_load_n(&m->progress, __ATOMIC_RELAXED); }
