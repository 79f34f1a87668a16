/*
 * moe.c - the mixture-of-experts block (moe.h): routing, grouping by expert, the
 * experts' products in a few pool runs, and the per-token weighted sum. Owned by the
 * engine.
 *
 * Gathered rows: the batch's (token, rank) pairs sorted by expert (then token) are
 * rows 0..R-1 (R = n * k), expert e's from first[e]; the shared expert's rows are
 * R..R+n-1 (token order). Hidden rows (gate and up outputs) are F wide for the routed
 * rows, then S wide for the shared ones; quantized activation rows are strided as each
 * matrix's kern_xq_row_bytes(cols) wants them.
 */
#include "moe.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "log.h"

#define MOE_MAX_GROUPS 1025 /* experts (model.c caps them at 1024) + the shared one */

/* One unit of a product: rows [r0, r1) of matrix mat (0 gate, 1 up, 2 down) of group g. */
typedef struct {
    int     g, mat;
    int64_t r0, r1;
} moe_unit;

/* A group of gathered rows that one expert (or the shared expert) computes. */
typedef struct {
    mdl_mat w[3];      /* gate, up, down of this expert */
    int64_t row0, nt;  /* its gathered rows */
    int64_t F;         /* its hidden width */
} moe_grp;

struct moe_scratch {
    int       cap, n_expert, k, E, F, S;
    float    *probs;   /* (cap, n_expert) */
    int      *sel;     /* (cap, k) expert of (token, rank) */
    float    *wts;     /* (cap, k) its weight */
    int      *slot;    /* (cap, k) its gathered row */
    int      *rowtok;  /* (rows) token of a gathered row */
    int      *count;   /* (n_expert) */
    float    *xg;      /* (rows, E) gathered inputs (float path) */
    float    *h, *hu;  /* hidden rows: R x F, then n x S */
    void     *xq;      /* quantized rows: max(rows * xs(E), R * xs(F) + n * xs(S)) bytes */
    void     *tq;      /* (cap) each token's row quantized once for the routed gate and up */
    float    *yo;      /* (rows, E) expert outputs */
    float    *sg;      /* (cap) the shared expert's gate */
    moe_unit *units;
    int       cap_units;
    moe_grp   grp[MOE_MAX_GROUPS];
    int       ngrp;
    uint64_t  n_blocks, n_read; /* moe_counts */
};

/* ---- scratch ---- */

static int grow(void **p, size_t bytes)
{
    void *n = realloc(*p, bytes ? bytes : 1);
    if (!n) return -1;
    *p = n;
    return 0;
}

int moe_reserve(moe_scratch **sp, const mdl_config *c, int n)
{
    if (!*sp && !(*sp = calloc(1, sizeof **sp))) return -1;
    moe_scratch *s = *sp;
    if (n <= s->cap && s->n_expert == c->n_expert && s->k == c->n_expert_used) return 0;
    size_t N = (size_t)n, X = (size_t)c->n_expert, K = (size_t)c->n_expert_used, E = (size_t)c->n_embd;
    size_t F = (size_t)c->n_ff_exp, S = (size_t)c->n_ff_shexp, R = N * K, rows = R + (S ? N : 0);
    size_t xq = rows * kern_xq_row_bytes((int64_t)E), xq2 = R * kern_xq_row_bytes((int64_t)F) +
                                                       (S ? N * kern_xq_row_bytes((int64_t)S) : 0);
    /* units: every expert's three matrices in KERN_TILE-row pieces at most */
    size_t units = (X + 1) * 2 * (((F > S ? F : S) > E ? (F > S ? F : S) : E) / KERN_TILE + 1);
    s->cap = 0;
    if (grow((void **)&s->probs, N * X * 4) || grow((void **)&s->sel, R * 4) || grow((void **)&s->wts, R * 4) ||
        grow((void **)&s->slot, R * 4) || grow((void **)&s->rowtok, rows * 4) || grow((void **)&s->count, X * 4) ||
        grow((void **)&s->xg, rows * E * 4) || grow((void **)&s->h, (R * F + N * S) * 4) ||
        grow((void **)&s->hu, (R * F + N * S) * 4) || grow(&s->xq, xq > xq2 ? xq : xq2) ||
        grow(&s->tq, N * kern_xq_row_bytes((int64_t)E)) ||
        grow((void **)&s->yo, rows * E * 4) || grow((void **)&s->sg, N * 4) ||
        grow((void **)&s->units, units * sizeof *s->units))
        return -1;
    s->cap = n;
    s->n_expert = c->n_expert;
    s->k = c->n_expert_used;
    s->E = c->n_embd;
    s->F = c->n_ff_exp;
    s->S = c->n_ff_shexp;
    s->cap_units = (int)units;
    return 0;
}

void moe_free(moe_scratch **sp)
{
    moe_scratch *s = *sp;
    if (!s) return;
    free(s->probs); free(s->sel); free(s->wts); free(s->slot); free(s->rowtok); free(s->count);
    free(s->xg); free(s->h); free(s->hu); free(s->xq); free(s->tq); free(s->yo); free(s->sg); free(s->units);
    free(s);
    *sp = NULL;
}

/* Expert e of a stack whose experts have `per` rows each. */
static mdl_mat expert_view(const mdl_mat *all, int e, int64_t per)
{
    mdl_mat v = *all;
    uint64_t units = all->q8 ? (uint64_t)per / KERN_TILE : (uint64_t)per;
    v.data = (const char *)all->data + (size_t)e * units * all->row_bytes;
    v.rows = per;
    v.nbytes = units * all->row_bytes;
    return v;
}

uint64_t moe_bytes_per_token(const mdl_config *c, const mdl_layer *L)
{
    uint64_t b = L->router.nbytes;
    b += (L->gate_exps.nbytes + L->up_exps.nbytes + L->down_exps.nbytes) / (uint64_t)c->n_expert *
         (uint64_t)c->n_expert_used;
    if (c->n_ff_shexp) b += L->gate_shexp.nbytes + L->up_shexp.nbytes + L->down_shexp.nbytes;
    return b;
}

/* ---- routing (per token: a function of its own row) ---- */

/* probs (n_expert values, the router's logits) -> softmax as ggml computes it, then the
 * top k in rank order (ties to the lower index) and their weights. */
static void route_token(float *p, int X, int k, int norm, int *sel, float *w)
{
    float mx = p[0];
    for (int e = 1; e < X; e++) mx = p[e] > mx ? p[e] : mx;
    double sum = 0;
    for (int e = 0; e < X; e++) sum += (double)(p[e] = expf(p[e] - mx));
    float inv = (float)(1.0 / sum);
    for (int e = 0; e < X; e++) p[e] *= inv;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < X; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++) taken = sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best;
        w[j] = p[best];
    }
    if (!norm) return;
    double ws = 0;
    for (int j = 0; j < k; j++) ws += w[j];
    for (int j = 0; j < k; j++) w[j] = w[j] / (float)ws;
}

/* ---- the pool's work ---- */

typedef enum { PH_ROUTER, PH_ROUTE, PH_QUANT, PH_GATHER, PH_GATE_UP, PH_SWIGLU, PH_DOWN, PH_SUM } moe_phase;

typedef struct {
    moe_scratch       *s;
    const mdl_config  *c;
    const mdl_layer   *L;
    const float       *x;      /* the block's input rows */
    float             *out;
    int                n, R, rows;
    moe_phase          ph;
    int                nunits;
    atomic_int         next;
} moe_job;

static size_t xs_of(int64_t cols) { return kern_xq_row_bytes(cols); }

/* Hidden row r (gate output; up output at the same offset in hu). */
static size_t hid_off(const moe_job *j, int64_t r)
{
    const moe_scratch *s = j->s;
    return r < j->R ? (size_t)r * s->F : (size_t)j->R * s->F + (size_t)(r - j->R) * s->S;
}

/* Quantized hidden row r (the down products' input). */
static char *hq_row(const moe_job *j, int64_t r)
{
    const moe_scratch *s = j->s;
    size_t o = r < j->R ? (size_t)r * xs_of(s->F) : (size_t)j->R * xs_of(s->F) + (size_t)(r - j->R) * xs_of(s->S);
    return (char *)s->xq + o;
}

/* Quantizes one row of cols values for a matrix like w. */
static void quant_row(const mdl_mat *w, const float *x, int64_t cols, void *q)
{
    if (w->xk == KERN_X_Q8_1) kern_x1_quantize(x, 1, cols, q);
    else if (w->xk == KERN_X_Q8_K) kern_xk_quantize(x, 1, cols, q);
    else {
        kern_xq_quantize(x, 1, cols, q);
        if (w->wt != KERN_W_Q8T) kern_xq_finish(q, 1, cols);
    }
}

/* 1 when quant_row gives the same bytes for matrices a and b. */
static bool same_quant(const mdl_mat *a, const mdl_mat *b)
{
    return a->q8 && b->q8 && a->xk == b->xk && (a->wt == KERN_W_Q8T) == (b->wt == KERN_W_Q8T);
}

/* The group of gathered row r. */
static const moe_grp *grp_of(const moe_scratch *s, int64_t r)
{
    int lo = 0, hi = s->ngrp - 1;
    while (lo < hi) { /* the last group whose row0 <= r */
        int mid = (lo + hi + 1) / 2;
        if (s->grp[mid].row0 <= r) lo = mid;
        else hi = mid - 1;
    }
    return &s->grp[lo];
}

static void rows_part(moe_job *j, int64_t r0, int64_t r1)
{
    moe_scratch *s = j->s;
    int64_t E = s->E;
    for (int64_t r = r0; r < r1; r++) {
        const moe_grp *g = grp_of(s, r);
        if (j->ph == PH_GATHER) { /* a copy of the token's row, quantized once (PH_QUANT) */
            const float *src = j->x + (size_t)s->rowtok[r] * E;
            char *dst = (char *)s->xq + (size_t)r * xs_of(E);
            if (same_quant(&g->w[0], &j->L->gate_exps))
                memcpy(dst, (const char *)s->tq + (size_t)s->rowtok[r] * xs_of(E), xs_of(E));
            else if (g->w[0].q8) quant_row(&g->w[0], src, E, dst);
            else memcpy(s->xg + (size_t)r * E, src, (size_t)E * sizeof(float));
        } else if (j->ph == PH_SWIGLU) {
            float *h = s->h + hid_off(j, r);
            kern_silu_mul(h, s->hu + hid_off(j, r), g->F);
            if (g->w[2].q8) quant_row(&g->w[2], h, g->F, hq_row(j, r));
        }
    }
}

static void unit_run(moe_job *j, const moe_unit *u)
{
    moe_scratch *s = j->s;
    const moe_grp *g = &s->grp[u->g];
    const mdl_mat *w = &g->w[u->mat];
    int64_t E = s->E;
    if (u->mat < 2) { /* gate or up: gathered inputs -> hidden rows */
        float *y = (u->mat ? s->hu : s->h) + hid_off(j, g->row0);
        if (w->q8) kern_wmatmul(w->wt, w->data, E, (const char *)s->xq + (size_t)g->row0 * xs_of(E), g->nt, y, g->F, u->r0, u->r1);
        else kern_f32_matmul(w->data, E, s->xg + (size_t)g->row0 * E, g->nt, y, g->F, u->r0, u->r1);
        return;
    }
    float *y = s->yo + (size_t)g->row0 * E;
    if (w->q8) kern_wmatmul(w->wt, w->data, g->F, hq_row(j, g->row0), g->nt, y, E, u->r0, u->r1);
    else kern_f32_matmul(w->data, g->F, s->h + hid_off(j, g->row0), g->nt, y, E, u->r0, u->r1);
}

/* o = y * w (first) or o + y * w, each product rounded before the sum as ggml's mul
 * then add round it; four lanes at a time (the same bits as one at a time). */
typedef float moe_v4 __attribute__((vector_size(16)));

static void axpy_rounded(float *o, const float *y, float w, int E, bool first)
{
    int i = 0;
    for (; i + 4 <= E; i += 4) {
        moe_v4 a, b;
        memcpy(&b, y + i, sizeof b);
        b = b * w;
        if (!first) {
            memcpy(&a, o + i, sizeof a);
            b = a + b;
        }
        memcpy(o + i, &b, sizeof b);
    }
    for (; i < E; i++) o[i] = first ? y[i] * w : o[i] + y[i] * w;
}

/* out[t] = sum over ranks of weight * expert row, then + gate * shared row. */
static void sum_part(moe_job *j, int64_t t0, int64_t t1)
{
    moe_scratch *s = j->s;
    int E = s->E, k = s->k;
    for (int64_t t = t0; t < t1; t++) {
        float *o = j->out + (size_t)t * E;
        for (int r = 0; r < k; r++)
            axpy_rounded(o, s->yo + (size_t)s->slot[t * k + r] * E, s->wts[t * k + r], E, r == 0);
        if (s->S) axpy_rounded(o, s->yo + (size_t)(j->R + t) * E, j->L->shexp_gate ? s->sg[t] : 1.0f, E, false);
    }
}

static void job_part(void *arg, int ith, int nth)
{
    moe_job *j = arg;
    int64_t a, b;
    switch (j->ph) {
    case PH_ROUTER: /* the router's rows (experts) split across threads */
        pool_range(j->c->n_expert, 1, ith, nth, &a, &b);
        if (a < b) kern_f32_matmul(j->L->router.data, j->s->E, j->x, j->n, j->s->probs, j->c->n_expert, a, b);
        return;
    case PH_ROUTE: /* each token's experts and weights, from its own router row */
        pool_range(j->n, 1, ith, nth, &a, &b);
        for (int64_t t = a; t < b; t++)
            route_token(j->s->probs + t * j->s->n_expert, j->s->n_expert, j->s->k, j->c->moe_norm_w,
                        j->s->sel + t * j->s->k, j->s->wts + t * j->s->k);
        return;
    case PH_QUANT: /* each token's row for the routed experts' gate and up */
        if (!j->L->gate_exps.q8) return; /* float experts read x itself */
        pool_range(j->n, 1, ith, nth, &a, &b);
        for (int64_t t = a; t < b; t++)
            quant_row(&j->L->gate_exps, j->x + t * j->s->E, j->s->E, (char *)j->s->tq + t * xs_of(j->s->E));
        return;
    case PH_GATHER: case PH_SWIGLU:
        pool_range(j->rows, 1, ith, nth, &a, &b);
        rows_part(j, a, b);
        return;
    case PH_SUM:
        pool_range(j->n, 1, ith, nth, &a, &b);
        sum_part(j, a, b);
        return;
    default: /* products: units taken as threads free up */
        for (int u; (u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->nunits;)
            unit_run(j, &j->s->units[u]);
    }
}

/* ---- the block ---- */

/* Work units of the products of phase ph (gate+up, or down) over the active groups. */
static int plan_units(moe_scratch *s, moe_phase ph)
{
    int nu = 0;
    for (int gi = 0; gi < s->ngrp; gi++) {
        const moe_grp *g = &s->grp[gi];
        for (int mat = ph == PH_DOWN ? 2 : 0; mat < (ph == PH_DOWN ? 3 : 2); mat++) {
            const mdl_mat *w = &g->w[mat];
            int64_t unit = w->q8 ? kern_w_panel_rows(w->wt, w->cols, g->nt) : 64;
            for (int64_t r0 = 0; r0 < w->rows; r0 += unit) {
                LLM_ASSERT(nu < s->cap_units);
                s->units[nu++] = (moe_unit){ gi, mat, r0, r0 + unit < w->rows ? r0 + unit : w->rows };
            }
        }
    }
    return nu;
}

static void run(pool_t *pool, moe_job *j, moe_phase ph)
{
    j->ph = ph;
    if (ph == PH_GATE_UP || ph == PH_DOWN) {
        j->nunits = plan_units(j->s, ph);
        atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    }
    pool_run(pool, job_part, j);
}

/* Lays out the groups and gathered rows of the routed tokens (PH_ROUTE). */
static void group(moe_job *j)
{
    moe_scratch *s = j->s;
    const mdl_layer *L = j->L;
    int n = j->n, k = s->k, X = s->n_expert;
    memset(s->count, 0, (size_t)X * sizeof *s->count);
    for (int t = 0; t < n; t++)
        for (int r = 0; r < k; r++) s->count[s->sel[t * k + r]]++;
    s->ngrp = 0;
    int first[MOE_MAX_GROUPS], row = 0;
    for (int e = 0; e < X; e++) {
        first[e] = row;
        if (!s->count[e]) continue;
        moe_grp *g = &s->grp[s->ngrp++];
        g->w[0] = expert_view(&L->gate_exps, e, s->F);
        g->w[1] = expert_view(&L->up_exps, e, s->F);
        g->w[2] = expert_view(&L->down_exps, e, s->E);
        g->row0 = row;
        g->nt = s->count[e];
        g->F = s->F;
        row += s->count[e];
    }
    s->n_blocks++;
    s->n_read += (uint64_t)s->ngrp;
    for (int t = 0; t < n; t++) /* token order within each expert */
        for (int r = 0; r < k; r++) {
            int at = first[s->sel[t * k + r]]++;
            s->slot[t * k + r] = at;
            s->rowtok[at] = t;
        }
    if (s->S) {
        moe_grp *g = &s->grp[s->ngrp++];
        g->w[0] = L->gate_shexp;
        g->w[1] = L->up_shexp;
        g->w[2] = L->down_shexp;
        g->row0 = j->R;
        g->nt = n;
        g->F = s->S;
        for (int t = 0; t < n; t++) s->rowtok[j->R + t] = t;
    }
}

void moe_counts(const moe_scratch *s, uint64_t *blocks, uint64_t *experts)
{
    *blocks = s ? s->n_blocks : 0;
    *experts = s ? s->n_read : 0;
}

void moe_ffn(moe_scratch *s, pool_t *pool, const mdl_config *c, const mdl_layer *L, const float *x, int n,
             float *out)
{
    LLM_ASSERT(s && n <= s->cap && s->n_expert == c->n_expert);
    moe_job j = { .s = s, .c = c, .L = L, .x = x, .out = out, .n = n, .R = n * s->k };
    j.rows = j.R + (s->S ? n : 0);
    run(pool, &j, PH_ROUTER);
    if (s->S && L->shexp_gate) { /* sigmoid of one dot product per token */
        kern_f32_matmul(L->shexp_gate, s->E, x, n, s->sg, 1, 0, 1);
        for (int t = 0; t < n; t++) s->sg[t] = 1.0f / (1.0f + expf(-s->sg[t]));
    }
    run(pool, &j, PH_ROUTE);
    group(&j);
    run(pool, &j, PH_QUANT);
    run(pool, &j, PH_GATHER); /* reads x: out may alias it only after this */
    run(pool, &j, PH_GATE_UP);
    run(pool, &j, PH_SWIGLU);
    run(pool, &j, PH_DOWN);
    run(pool, &j, PH_SUM);
}
