/*
 * sampler.c - smp_sample: one row of logits in, one token out, through llama.cpp's
 * chain. Owns the scratch workspace, the penalties and DRY (they need per-vocabulary
 * tables), and the fast paths that keep a 152k-entry row cheap: the row stays a dense
 * array while samplers only adjust logits, and leaves it through a single selection
 * pass (top-k heap, min-p filter, argmax) instead of a sort.
 * Owner: sampler (issue 5). See sampler.h.
 */
#include "sampler.h"

/* No fused multiply-adds: the same bits on every CPU and compiler (GCC's ISO mode
 * already does not contract; clang needs telling). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "log.h"

struct smp_work {
    int          cap;       /* vocabulary capacity of the arrays below */
    float       *dense;     /* [cap] the row being worked on */
    smp_tok     *tok;       /* [cap] candidates */
    int32_t     *count;     /* [cap] all zero between calls: penalty counts */
    int32_t     *rep;       /* [cap] all zero between calls: DRY max repeat per token */
    int32_t     *touched;   /* [cap] ids whose count/rep is non-zero */
    int32_t     *z;         /* [zcap] DRY's Z array over the window */
    int          zcap;
    smp_piece_fn piece;
    void        *piece_ctx;
    bool         warned_dry;
    char        *text;      /* smp_work_load_pieces' table: all texts back to back */
    uint32_t    *text_off;  /* [text_n + 1] */
    int32_t      text_n;
};

smp_work *smp_work_new(int n_vocab)
{
    smp_work *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    if (n_vocab > 0) {
        w->dense = malloc((size_t)n_vocab * sizeof(float));
        w->tok = malloc((size_t)n_vocab * sizeof(smp_tok));
        w->count = calloc((size_t)n_vocab, sizeof(int32_t));
        w->rep = calloc((size_t)n_vocab, sizeof(int32_t));
        w->touched = malloc((size_t)n_vocab * sizeof(int32_t));
        if (!w->dense || !w->tok || !w->count || !w->rep || !w->touched)
            goto err;
        w->cap = n_vocab;
    }
    return w;
err:
    smp_work_destroy(&w);
    return NULL;
}

void smp_work_destroy(smp_work **pw)
{
    if (!pw || !*pw)
        return;
    smp_work *w = *pw;
    free(w->dense);
    free(w->tok);
    free(w->count);
    free(w->rep);
    free(w->touched);
    free(w->z);
    free(w->text);
    free(w->text_off);
    free(w);
    *pw = NULL;
}

static void drop_text(smp_work *w)
{
    free(w->text);
    free(w->text_off);
    w->text = NULL;
    w->text_off = NULL;
    w->text_n = 0;
}

void smp_work_set_pieces(smp_work *w, smp_piece_fn fn, void *ctx)
{
    if (ctx != w)
        drop_text(w);
    w->piece = fn;
    w->piece_ctx = ctx;
}

static const char *table_piece(void *ctx, int32_t id, size_t *len)
{
    const smp_work *w = ctx;
    if (id < 0 || id >= w->text_n)
        return NULL;
    *len = w->text_off[id + 1] - w->text_off[id];
    return w->text + w->text_off[id];
}

int smp_work_load_pieces(smp_work *w, int n_vocab, smp_piece_write_fn fn, void *ctx)
{
    smp_work_set_pieces(w, NULL, NULL);
    if (n_vocab <= 0 || !fn)
        return n_vocab < 0 ? -1 : 0;
    size_t cap = (size_t)n_vocab * 8 + 64, used = 0;
    char buf[256];
    w->text = malloc(cap);
    w->text_off = malloc(((size_t)n_vocab + 1) * sizeof(uint32_t));
    if (!w->text || !w->text_off)
        goto oom;
    for (int32_t id = 0; id < n_vocab; id++) {
        w->text_off[id] = (uint32_t)used;
        int n = fn(ctx, id, buf, sizeof buf);
        if (n <= 0)
            continue;
        if (used + (size_t)n > UINT32_MAX)
            goto oom;
        if (used + (size_t)n > cap) {
            size_t nc = (used + (size_t)n) * 2;
            char *t = realloc(w->text, nc);
            if (!t)
                goto oom;
            w->text = t;
            cap = nc;
        }
        if ((size_t)n <= sizeof buf)
            memcpy(w->text + used, buf, (size_t)n);
        else if (fn(ctx, id, w->text + used, (size_t)n) != n)
            continue;   /* changed its mind: no text */
        used += (size_t)n;
    }
    w->text_off[n_vocab] = (uint32_t)used;
    w->text_n = n_vocab;
    w->piece = table_piece;
    w->piece_ctx = w;
    return 0;
oom:
    drop_text(w);
    return -1;
}

const char *smp_piece_array(void *ctx, int32_t id, size_t *len)
{
    const smp_piece_table *t = ctx;
    if (!t || id < 0 || id >= t->n || !t->strs[id])
        return NULL;
    *len = strlen(t->strs[id]);
    return t->strs[id];
}

/* Grows every per-vocabulary array to n entries; the zeroed ones stay zeroed. */
static int work_reserve(smp_work *w, int n)
{
    if (n <= w->cap)
        return 0;
    smp_work *nw = smp_work_new(n);
    if (!nw)
        return -1;
    free(w->dense); free(w->tok); free(w->count); free(w->rep); free(w->touched);
    w->dense = nw->dense; w->tok = nw->tok; w->count = nw->count;
    w->rep = nw->rep; w->touched = nw->touched; w->cap = n;
    free(nw);
    return 0;
}

static int z_reserve(smp_work *w, int n)
{
    if (n <= w->zcap)
        return 0;
    int32_t *z = realloc(w->z, (size_t)n * sizeof(int32_t));
    if (!z)
        return -1;
    w->z = z;
    w->zcap = n;
    return 0;
}

/* ---- penalties ---- */

static bool penalties_on(const smp_params *p)
{
    return p->repeat_last_n != 0 && (p->repeat_penalty != 1.0f ||
           p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

/* Counts the ids of the last repeat_last_n history tokens into w->count; returns the
 * number of distinct ids, listed in w->touched. */
static int count_window(smp_work *w, const smp_params *p, const int32_t *hist, int n_hist)
{
    int n = p->repeat_last_n < 0 || p->repeat_last_n > n_hist ? n_hist : p->repeat_last_n;
    int nd = 0;
    for (int i = n_hist - n; i < n_hist; i++) {
        int32_t id = hist[i];
        if (id < 0 || id >= w->cap)
            continue;
        if (w->count[id]++ == 0)
            w->touched[nd++] = id;
    }
    return nd;
}

/* Adjusted logits stay in the row's domain: finite or -inf (never NaN or +inf). */
static inline float fix_logit(float x)
{
    return isnan(x) ? -INFINITY : (x > FLT_MAX ? FLT_MAX : x);
}

static float penalize(float l, int cnt, const smp_params *p)
{
    l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
    return fix_logit(l - (float)cnt * p->frequency_penalty - (cnt > 0 ? p->presence_penalty : 0.0f));
}

static void penalties_dense(float *x, const smp_params *p, const int32_t *hist, int n_hist,
                            smp_work *w)
{
    int nd = count_window(w, p, hist, n_hist);
    for (int i = 0; i < nd; i++) {
        int32_t id = w->touched[i];
        x[id] = penalize(x[id], w->count[id], p);
        w->count[id] = 0;
    }
}

void smp_penalties(smp_cands *c, const smp_params *p, const int32_t *hist, int n_hist,
                   smp_work *w)
{
    if (!penalties_on(p))
        return;
    int nd = count_window(w, p, hist, n_hist);
    for (int i = 0; i < c->n; i++) {
        int32_t id = c->data[i].id;
        if (id >= 0 && id < w->cap && w->count[id])
            c->data[i].logit = penalize(c->data[i].logit, w->count[id], p);
    }
    for (int i = 0; i < nd; i++)
        w->count[w->touched[i]] = 0;
    c->n_sorted = 0;
}

/* ---- DRY ---- */

static const char *piece_of(smp_work *w, int32_t id, size_t *len)
{
    *len = 0;
    const char *s = w->piece(w->piece_ctx, id, len);
    if (!s)
        *len = 0;
    return s;
}

/* If breaker b starts inside ps (the text of t[j]) and its rest lies in the texts of
 * t[j+1 .. N), returns how many of those later tokens it reaches into; else -1. */
static int breaker_span(smp_work *w, const smp_breaker *b, const char *ps, size_t plen,
                        const int32_t *t, int N, int j)
{
    int best = -1;
    for (const char *q = plen ? memchr(ps, b->s[0], plen) : NULL; q;
         q = (size_t)(q + 1 - ps) < plen ? memchr(q + 1, b->s[0], plen - (size_t)(q + 1 - ps)) : NULL) {
        size_t o = (size_t)(q - ps);
        if (plen - o >= b->len) {       /* wholly inside this token */
            if (!memcmp(q, b->s, b->len))
                best = best > 0 ? best : 0;
            continue;
        }
        if (memcmp(q, b->s, plen - o))
            continue;
        /* walk the rest of b over the following tokens' text */
        size_t bi = plen - o;
        int tj = j;
        while (bi < b->len && ++tj < N) {
            size_t cl;
            const char *cur = piece_of(w, t[tj], &cl);
            size_t k = cl < b->len - bi ? cl : b->len - bi;
            if (k && memcmp(cur, b->s + bi, k))
                break;
            bi += k;
        }
        if (bi == b->len && tj - j > best)
            best = tj - j;
    }
    return best;
}

/* How far back (in tokens) a repeat may reach: up to the most recent breaker. */
static int dry_rep_limit(smp_work *w, const smp_params *p, const int32_t *t, int N)
{
    for (int i = 0; i < N; i++) {
        int j = N - 1 - i, span = -1;
        size_t plen;
        const char *ps = piece_of(w, t[j], &plen);
        for (int b = 0; b < p->n_breakers && plen; b++) {
            int s = breaker_span(w, &p->breakers[b], ps, plen, t, N, j);
            span = s > span ? s : span;
        }
        if (span >= 0)
            return i - span;
    }
    return N;
}

/* Fills w->rep[id] with the longest repeat that emitting id would extend; returns the
 * number of ids set (listed in w->touched), 0 if DRY does nothing, -1 if it needs
 * token text it does not have, -2 out of memory. */
static int dry_collect(smp_work *w, const smp_params *p, const int32_t *hist, int n_hist)
{
    if (p->dry_multiplier <= 0.0f || p->dry_base < 1.0f || p->dry_penalty_last_n == 0)
        return 0;
    int N = p->dry_penalty_last_n < 0 || p->dry_penalty_last_n > n_hist ? n_hist : p->dry_penalty_last_n;
    int allowed = p->dry_allowed_length;
    if (N <= allowed || N < 2)
        return 0;
    if (!w->piece)
        return -1;
    const int32_t *t = hist + n_hist - N;
    int limit = dry_rep_limit(w, p, t, N);
    if (limit < allowed)
        return 0;
    if (z_reserve(w, N))
        return -2;
    /* Z algorithm on the reversed window r[i] = t[N-1-i]: z[k] is how many tokens
     * ending at t[N-1-k] match those ending at the last token. */
    int32_t *z = w->z;
#define R(i) t[N - 1 - (i)]
    z[0] = N;
    int l = 0, r = 0;
    for (int k = 1; k < N; k++) {
        int zk = 0;
        if (k < r)
            zk = r - k < z[k - l] ? r - k : z[k - l];
        while (k + zk < N && R(zk) == R(k + zk))
            zk++;
        if (k + zk > r) {
            l = k;
            r = k + zk;
        }
        z[k] = zk;
    }
#undef R
    int nd = 0;
    for (int k = 1; k < N; k++) {
        int len = z[k] < limit ? z[k] : limit;
        int32_t next = t[N - k];
        if (len < allowed || next < 0 || next >= w->cap)
            continue;
        if (w->rep[next] == 0)
            w->touched[nd++] = next;
        /* stored + 1 so that a zero-length repeat (allowed_length 0) is still marked */
        if (len + 1 > w->rep[next])
            w->rep[next] = len + 1;
    }
    return nd;
}

static float dry_penalty(const smp_params *p, int len)
{
    int e = len - p->dry_allowed_length;
    if (p->dry_base > 1.000001f) {
        int max_e = (int)(88.7228391f / logf(p->dry_base));
        if (e > max_e)
            e = max_e;
    }
    return p->dry_multiplier * powf(p->dry_base, (float)e);
}

static const char DRY_WARN[] = "dry: no token text given (smp_work_set_pieces), DRY skipped";

/* Common end of both DRY entry points: applies rep to x (dense) or c, clears rep. */
static int dry_apply(smp_work *w, const smp_params *p, int nd, float *x, smp_cands *c)
{
    if (nd == -1 && !w->warned_dry) {
        log_warn("%s", DRY_WARN);
        w->warned_dry = true;
    }
    if (nd < 0)
        return nd == -1 ? 1 : -1;
    if (x) {
        for (int i = 0; i < nd; i++)
            x[w->touched[i]] = fix_logit(x[w->touched[i]] - dry_penalty(p, w->rep[w->touched[i]] - 1));
    } else if (nd > 0) {
        for (int i = 0; i < c->n; i++) {
            int32_t id = c->data[i].id;
            if (id >= 0 && id < w->cap && w->rep[id])
                c->data[i].logit = fix_logit(c->data[i].logit - dry_penalty(p, w->rep[id] - 1));
        }
        c->n_sorted = 0;
    }
    for (int i = 0; i < nd; i++)
        w->rep[w->touched[i]] = 0;
    return 0;
}

int smp_dry(smp_cands *c, const smp_params *p, const int32_t *hist, int n_hist, smp_work *w)
{
    return dry_apply(w, p, dry_collect(w, p, hist, n_hist), NULL, c);
}

/* ---- the chain ---- */

/* out = logits with NaN -> -inf and +inf -> FLT_MAX (see sampler.h). */
static void sanitize_copy(float *out, const float *x, int n)
{
    int i = 0;
#ifdef __SSE2__
    const __m128 ninf = _mm_set1_ps(-INFINITY), fmax = _mm_set1_ps(FLT_MAX);
    for (; i + 4 <= n; i += 4) {
        __m128 v = _mm_loadu_ps(x + i);
        __m128 nan = _mm_cmpunord_ps(v, v);
        v = _mm_or_ps(_mm_and_ps(nan, ninf), _mm_andnot_ps(nan, v));
        _mm_storeu_ps(out + i, _mm_min_ps(v, fmax));
    }
#endif
    for (; i < n; i++) {
        float v = x[i];
        out[i] = isnan(v) ? -INFINITY : (v > FLT_MAX ? FLT_MAX : v);
    }
}

/* Every finite entry of x as a candidate, in id order. True if it met a +inf. */
static bool materialize(const float *x, int n, smp_cands *c)
{
    int m = 0;
    bool pinf = false;
    for (int i = 0; i < n; i++) {
        if (x[i] > -INFINITY) {
            c->data[m].id = i;
            c->data[m].logit = x[i];
            c->data[m].p = 0;
            pinf |= x[i] == INFINITY;
            m++;
        }
    }
    c->n = m;
    c->n_sorted = 0;
    return pinf;
}

/* min-p straight from the dense row: one pass for the max, one to keep the survivors.
 * Returns true (and does nothing) if the max is +inf. */
static bool min_p_dense(const float *x, int n, float minp, int min_keep, smp_cands *c)
{
    int am = smp_argmax(x, n);
    if (am >= 0 && x[am] == INFINITY)
        return true;
    if (am < 0) {
        c->n = c->n_sorted = 0;
        return false;
    }
    float thr = x[am] + logf(minp);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] >= thr && x[i] > -INFINITY) {
            c->data[m].id = i;
            c->data[m].logit = x[i];
            c->data[m].p = 0;
            m++;
        }
    }
    c->n = m;
    c->n_sorted = 0;
    if (m < min_keep) {
        materialize(x, n, c);
        smp_min_p(c, minp, min_keep);
    }
    return false;
}

static bool letter_active(const smp_params *p, char l)
{
    switch (l) {
    case 'e': return penalties_on(p);
    case 'd': return p->dry_multiplier > 0.0f && p->dry_penalty_last_n != 0;
    case 's': return p->top_n_sigma > 0.0f;
    case 'k': return p->top_k > 0;
    case 'y': return p->typical_p < 1.0f;
    case 'p': return p->top_p < 1.0f;
    case 'm': return p->min_p > 0.0f;
    case 'x': return p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f;
    case 't': return true;
    default:  return false;
    }
}

/* Greedy needs no truncation: top-k/p, min-p and top-n-sigma always keep the best
 * token, so with temperature 0 they may be skipped unless a logit-changing sampler
 * comes after them (it would then see only their survivors). */
static bool skippable_for_greedy(const smp_params *p, const char *order, int i)
{
    if (p->temperature > 0.0f || p->dynatemp_range > 0.0f || !strchr(order, 't') ||
        letter_active(p, 'y') || letter_active(p, 'x'))
        return false;
    const char *t = strchr(order, 't');
    for (const char *q = order + i + 1; *q && q < t; q++)
        if ((*q == 'e' || *q == 'd') && letter_active(p, *q))
            return false;
    return true;
}

typedef struct {
    const smp_params *p;
    const int32_t    *hist;
    int               n_hist;
    int               n_vocab;
    smp_work         *w;
    smp_cands         c;
    bool              dense;   /* the candidates are still the whole row */
    const float      *raw;     /* the caller's row */
    const float      *row;     /* raw, or w->dense once copied */
    bool              copied;  /* row is w->dense: sanitized and ours to modify */
    int               ban;     /* ignore_eos's token, -inf in the copy; until one is made only
                                * the greedy argmax reads the caller's row, around it */
    double            u_xtc;
    int               dry_skipped;
} chain;

/* The row as ours to modify: the sanitized copy, made on first use. Rows that nothing
 * modifies are read in place, which saves a pass; selections over the caller's row
 * redo their work on the copy in the rare case they meet a +inf (it must count as
 * FLT_MAX, see sampler.h), so the result is the same either way. */
static float *row_rw(chain *ch)
{
    if (!ch->copied) {
        sanitize_copy(ch->w->dense, ch->raw, ch->n_vocab);
        if (ch->ban >= 0) ch->w->dense[ch->ban] = -INFINITY;
        ch->row = ch->w->dense;
        ch->copied = true;
    }
    return ch->w->dense;
}

/* The row to read: the caller's, unless a banned token must first become -inf (the
 * copy). */
static const float *row_ro(chain *ch)
{
    return ch->ban >= 0 && !ch->copied ? row_rw(ch) : ch->row;
}

/* smp_argmax of x with entry b counted as -inf, without writing x: the first of the
 * largest values before b or after it. */
static int argmax_without(const float *x, int n, int b)
{
    int l = smp_argmax(x, b), r = smp_argmax(x + b + 1, n - b - 1);
    if (r >= 0) r += b + 1;
    return l < 0 ? r : r < 0 ? l : x[r] > x[l] ? r : l;
}

static bool cands_pinf(const smp_cands *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->data[i].logit == INFINITY)
            return true;
    return false;
}

static void leave_dense(chain *ch)
{
    if (ch->dense) {
        if (materialize(row_ro(ch), ch->n_vocab, &ch->c))
            materialize(row_rw(ch), ch->n_vocab, &ch->c);
        ch->dense = false;
    }
}

/* Leaves the whole row through letter l's one-pass selection (top-k heap, top-p bins,
 * min-p filter, greedy argmax). Returns false if l has none: the caller materializes. */
static bool select_from_row(chain *ch, char l)
{
    const smp_params *p = ch->p;
    smp_cands *c = &ch->c;
    int n = ch->n_vocab;
    switch (l) {
    case 'k': {
        if (p->top_k >= n)
            return false;
        int k = p->top_k > p->min_keep ? p->top_k : p->min_keep;
        c->n = c->n_sorted = smp_top_k_dense(row_ro(ch), n, k, c->data);
        if (!ch->copied && cands_pinf(c))
            c->n = c->n_sorted = smp_top_k_dense(row_rw(ch), n, k, c->data);
        break;
    }
    case 'p':
        c->n = smp_top_p_dense(row_rw(ch), n, p->top_p, c->data);
        c->n_sorted = 0;
        if (c->n < p->min_keep) {   /* the sum only grows: the best min_keep satisfy it */
            materialize(ch->row, n, c);
            smp_top_k(c, p->min_keep, 0);
        }
        break;
    case 'm':
        if (min_p_dense(row_ro(ch), n, p->min_p, p->min_keep, c))
            min_p_dense(row_rw(ch), n, p->min_p, p->min_keep, c);
        break;
    case 't': {
        if (p->temperature > 0.0f || p->dynatemp_range > 0.0f)
            return false;
        int am = ch->ban >= 0 && !ch->copied ? argmax_without(ch->row, n, ch->ban) : smp_argmax(ch->row, n);
        if (am >= 0 && ch->row[am] == INFINITY && !ch->copied)
            am = smp_argmax(row_rw(ch), n);
        c->n = c->n_sorted = am >= 0;
        if (am >= 0)
            c->data[0] = (smp_tok){ am, ch->row[am], 1.0f };
        break;
    }
    default:
        return false;
    }
    ch->dense = false;
    return true;
}

/* Runs one sampler letter; returns 0, or -1 on out-of-memory. */
static int run_letter(chain *ch, char l, int i, const char *order)
{
    const smp_params *p = ch->p;
    smp_work *w = ch->w;
    if (!letter_active(p, l))
        return 0;
    if (l != 'e' && l != 'd' && l != 't' && ch->dense && skippable_for_greedy(p, order, i))
        return 0;
    if (l == 'e') {
        if (ch->dense)
            penalties_dense(row_rw(ch), p, ch->hist, ch->n_hist, w);
        else
            smp_penalties(&ch->c, p, ch->hist, ch->n_hist, w);
        return 0;
    }
    if (l == 'd') {
        int nd = dry_collect(w, p, ch->hist, ch->n_hist);
        int rc = dry_apply(w, p, nd, ch->dense && nd > 0 ? row_rw(ch) : NULL, &ch->c);
        ch->dry_skipped |= rc == 1;
        return rc < 0 ? -1 : 0;
    }
    if (ch->dense && select_from_row(ch, l))
        return 0;
    leave_dense(ch);
    smp_cands *c = &ch->c;
    switch (l) {
    case 's': smp_top_n_sigma(c, p->top_n_sigma); break;
    case 'k': smp_top_k(c, p->top_k, p->min_keep); break;
    case 'y': smp_typical(c, p->typical_p, p->min_keep); break;
    case 'p': smp_top_p(c, p->top_p, p->min_keep); break;
    case 'm': smp_min_p(c, p->min_p, p->min_keep); break;
    case 'x': smp_xtc(c, p->xtc_probability, p->xtc_threshold, p->min_keep, ch->u_xtc); break;
    case 't': smp_temperature(c, p->temperature, p->dynatemp_range, p->dynatemp_exponent); break;
    default: LLM_ASSERT(!"unknown sampler letter");
    }
    return 0;
}

static int fail(smp_result *out, const char *msg)
{
    snprintf(out->err, sizeof out->err, "%s", msg);
    out->token = -1;
    return -1;
}

/* log-probabilities of the raw row (after NaN handling, before any sampler):
 * the n best into out->probs; returns log-sum-exp for the chosen token's entry. */
static double raw_logprobs(const float *x, int n, int n_probs, smp_result *out)
{
    smp_tok top[SMP_MAX_PROBS];
    int k = smp_top_k_dense(x, n, n_probs, top);
    float mx = k > 0 ? top[0].logit : 0.0f;
    double lse = mx + log(smp_sum_exp(x, n, mx));
    for (int i = 0; i < k; i++) {
        out->probs[i].id = top[i].id;
        out->probs[i].logprob = (float)(top[i].logit - lse);
    }
    out->n_probs = k;
    return lse;
}

/* log-probabilities of the final distribution (c->data[*].p valid after smp_dist). */
static void post_logprobs(smp_cands *c, int n_probs, smp_result *out)
{
    smp_sort_prefix(c, n_probs);
    int k = n_probs < c->n ? n_probs : c->n;
    for (int i = 0; i < k; i++) {
        out->probs[i].id = c->data[i].id;
        out->probs[i].logprob = logf(c->data[i].p);
    }
    out->n_probs = k;
}

static int mirostat_draw(smp_cands *c, const smp_params *p, float *mu, double u)
{
    int idx = smp_dist(c, u);
    *mu -= p->mirostat_eta * (-log2f(c->data[idx].p) - p->mirostat_tau);
    return idx;
}

/* Mirostat straight from the row (temperature already folded in), the same maths as
 * smp_mirostat / smp_mirostat_v2 over the whole row: v1 needs only the 100 best
 * logits (their differences are the log-ratios) and then a top-k; v2 keeps the tokens
 * whose surprise is at most mu, which is a logit threshold once the log-sum-exp is known. */
static int mirostat_dense(chain *ch, float *mu, double u)
{
    const smp_params *p = ch->p;
    const float *x = row_ro(ch);
    smp_cands *c = &ch->c;
    ch->dense = false;
    if (p->mirostat == 1) {
        const int m = 100;
        c->n = c->n_sorted = smp_top_k_dense(x, ch->n_vocab, m, c->data);
        if (c->n == 0)
            return -1;
        float sum_tb = 0.0f, sum_tt = 0.0f;
        for (int i = 0; i < m - 1 && i < c->n - 1; i++) {
            float ti = logf((float)(i + 2) / (float)(i + 1));
            sum_tb += ti * (c->data[i].logit - c->data[i + 1].logit);
            sum_tt += ti * ti;
        }
        if (sum_tt > 0.0f) {
            float s_hat = sum_tb / sum_tt, eps = s_hat - 1.0f;
            float k = powf((eps * powf(2.0f, *mu)) / (1.0f - powf((float)ch->n_vocab, -eps)), 1.0f / s_hat);
            int ki = !(k < (float)ch->n_vocab) ? ch->n_vocab : (k < 1.0f ? 1 : (int)k);
            if (ki <= c->n) {
                c->n = c->n_sorted = ki;
            } else if (ki <= 4096) {
                c->n = c->n_sorted = smp_top_k_dense(x, ch->n_vocab, ki, c->data);
            } else {
                materialize(x, ch->n_vocab, c);
                smp_top_k(c, ki, 0);
            }
        }
        return mirostat_draw(c, p, mu, u);
    }
    int am = smp_argmax(x, ch->n_vocab);
    if (am < 0) {
        c->n = 0;
        return -1;
    }
    double lse = x[am] + log(smp_sum_exp(x, ch->n_vocab, x[am]));
    float thr = (float)(lse - (double)*mu * M_LN2);   /* -log2 p <= mu */
    int k = 0;
    for (int i = 0; i < ch->n_vocab; i++)
        if (x[i] >= thr && x[i] > -INFINITY)
            c->data[k++] = (smp_tok){ i, x[i], 0.0f };
    if (k == 0)
        c->data[k++] = (smp_tok){ am, x[am], 0.0f };
    c->n = k;
    c->n_sorted = 0;
    return mirostat_draw(c, p, mu, u);
}

static int run_mirostat(chain *ch, float *mu, double u)
{
    const smp_params *p = ch->p;
    if (run_letter(ch, 'e', 0, "e") || run_letter(ch, 'd', 0, "d"))
        return -1;
    if (ch->dense && p->temperature > 0.0f) {
        if (p->temperature != 1.0f) {
            float *x = row_rw(ch);
            for (int i = 0; i < ch->n_vocab; i++)
                x[i] = fix_logit(x[i] / p->temperature);
        } else if (!ch->copied && ch->ban >= 0) {
            row_rw(ch);
        } else if (!ch->copied) {
            for (int i = 0; i < ch->n_vocab; i++)
                if (ch->row[i] == INFINITY || isnan(ch->row[i])) {
                    row_rw(ch);
                    break;
                }
        }
        return mirostat_dense(ch, mu, u);
    }
    leave_dense(ch);
    if (ch->c.n == 0)
        return -1;
    smp_temperature(&ch->c, p->temperature, 0.0f, 1.0f);
    if (p->mirostat == 1)
        return smp_mirostat(&ch->c, ch->n_vocab, p->mirostat_tau, p->mirostat_eta, 100, mu, u);
    return smp_mirostat_v2(&ch->c, p->mirostat_tau, p->mirostat_eta, mu, u);
}

bool smp_banned(const smp_params *p, int32_t id, int eos_id)
{
    if (p->ignore_eos && eos_id >= 0 && id == eos_id)
        return true;
    for (int i = 0; i < p->n_logit_bias && i < SMP_MAX_LOGIT_BIAS; i++)
        if (p->logit_bias[i].id == id && p->logit_bias[i].bias == -INFINITY)
            return true;
    return false;
}

int smp_sample(const smp_params *p, smp_state *st, const float *logits, int n_vocab,
               const int32_t *history, int n_history, int eos_id, smp_result *out,
               smp_work *w)
{
    if (!out)
        return -1;
    out->token = -1;
    out->n_probs = 0;
    out->n_candidates = 0;
    out->warn = NULL;
    out->err[0] = 0;
    if (!p || !st || !logits || !w)
        return fail(out, "smp_sample: NULL argument");
    if (n_vocab <= 0 || n_history < 0 || (n_history > 0 && !history))
        return fail(out, "smp_sample: bad n_vocab or history");
    /* Cheap (well under a microsecond) and it keeps a hand-filled or corrupted struct
     * from indexing out of bounds. */
    if (smp_params_validate(p, n_vocab, out->err, sizeof out->err))
        return -1;
    if (work_reserve(w, n_vocab))
        return fail(out, "smp_sample: out of memory");
    chain ch = { .p = p, .hist = history, .n_hist = n_history, .n_vocab = n_vocab, .w = w,
                 .c = { w->tok, 0, 0 }, .dense = true, .raw = logits, .row = logits, .ban = -1,
                 .u_xtc = smp_rng_uniform(p->seed, st->session, st->step, 1) };
    int n_probs = p->n_probs < 0 ? 0 : (p->n_probs > SMP_MAX_PROBS ? SMP_MAX_PROBS : p->n_probs);
    double lse = 0;
    if (n_probs > 0 && !p->post_sampling_probs)
        lse = raw_logprobs(row_rw(&ch), n_vocab, n_probs, out);
    for (int i = 0; i < p->n_logit_bias && i < SMP_MAX_LOGIT_BIAS; i++) {
        int32_t id = p->logit_bias[i].id;
        if (id >= 0 && id < n_vocab) {
            float *x = row_rw(&ch);
            x[id] = fix_logit(x[id] + p->logit_bias[i].bias);
        }
    }
    if (p->ignore_eos && eos_id >= 0 && eos_id < n_vocab) { /* in the copy, made when a letter needs one */
        ch.ban = eos_id;
        if (ch.copied) ch.w->dense[eos_id] = -INFINITY;
    }

    /* a NaN/inf mu (a corrupted request) restarts mirostat instead of poisoning it */
    float mu = st->mu_set && isfinite(st->mu) ? st->mu : 2.0f * p->mirostat_tau;
    double u = smp_rng_uniform(p->seed, st->session, st->step, 0);
    int idx;
    if (p->mirostat == 1 || p->mirostat == 2) {
        idx = run_mirostat(&ch, &mu, u);
    } else {
        const char *order = p->order;
        for (int i = 0; i < SMP_MAX_ORDER && order[i]; i++)
            if (run_letter(&ch, order[i], i, order))
                return fail(out, "smp_sample: out of memory");
        leave_dense(&ch);
        idx = smp_dist(&ch.c, u);
    }
    if (ch.dry_skipped)
        out->warn = DRY_WARN;
    if (idx < 0 || ch.c.n == 0)
        return fail(out, "logits: no token left with a finite logit (NaN/-inf row, or banned by logit_bias)");
    int32_t tok = ch.c.data[idx].id;
    out->token = tok;
    out->n_candidates = ch.c.n;
    if (n_probs > 0 && p->post_sampling_probs) {
        out->logprob = logf(ch.c.data[idx].p);
        post_logprobs(&ch.c, n_probs, out);
    } else if (n_probs > 0) {
        float raw = logits[tok];
        raw = isnan(raw) ? -INFINITY : (raw > FLT_MAX ? FLT_MAX : raw);
        out->logprob = (float)(raw - lse);
    } else {
        out->logprob = logf(ch.c.data[idx].p);
    }
    out->step = st->step;
    st->step++;
    if (p->mirostat == 1 || p->mirostat == 2) {
        st->mu = mu;
        st->mu_set = 1;
    }
    out->mu = st->mu;
    return tok;
}

void smp_state_init(smp_state *st, const smp_params *p, uint64_t session)
{
    memset(st, 0, sizeof *st);
    st->session = session;
    st->mu = 2.0f * p->mirostat_tau;
    st->mu_set = 1;
}
