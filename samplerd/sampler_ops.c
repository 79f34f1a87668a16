/*
 * sampler_ops.c - the individual samplers over a candidate array, and the selection
 * primitives that let them avoid sorting a whole vocabulary: a k-heap scan for top-k
 * and a quickselect-based sorted prefix that grows only as far as a sampler looks.
 * Semantics follow llama.cpp's samplers of the same names (see sampler.h).
 * Owner: sampler (issue 5).
 */
#include "sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* The one candidate order: higher logit first, then lower id. Strict and total. */
static inline int better(const smp_tok *a, const smp_tok *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_tok(const void *pa, const void *pb)
{
    const smp_tok *a = pa, *b = pb;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

static inline void swap_tok(smp_tok *a, smp_tok *b)
{
    smp_tok t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges a[0, n) so that a[0, m) holds the m best entries (in any order). */
static void select_top(smp_tok *a, int n, int m)
{
    int lo = 0, hi = n - 1;
    if (m <= 0 || m >= n)
        return;
    while (hi > lo) {
        int mid = lo + (hi - lo) / 2;
        /* median of three as pivot, by value */
        if (better(&a[mid], &a[lo])) swap_tok(&a[mid], &a[lo]);
        if (better(&a[hi], &a[lo])) swap_tok(&a[hi], &a[lo]);
        if (better(&a[hi], &a[mid])) swap_tok(&a[hi], &a[mid]);
        smp_tok piv = a[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (better(&a[i], &piv)) i++;
            while (better(&piv, &a[j])) j--;
            if (i <= j) {
                swap_tok(&a[i], &a[j]);
                i++;
                j--;
            }
        }
        /* now a[lo, j] are no worse than piv and a[i, hi] no better */
        if (m - 1 <= j)
            hi = j;
        else if (m - 1 >= i)
            lo = i;
        else
            break;
    }
}

void smp_sort_prefix(smp_cands *c, int m)
{
    if (m > c->n)
        m = c->n;
    if (c->n_sorted >= m)
        return;
    int start = c->n_sorted;
    int rest = c->n - start;
    if (rest <= 64 || (m - start) * 4 >= rest) {
        qsort(c->data + start, (size_t)rest, sizeof(smp_tok), cmp_tok);
        c->n_sorted = c->n;
        return;
    }
    select_top(c->data + start, rest, m - start);
    qsort(c->data + start, (size_t)(m - start), sizeof(smp_tok), cmp_tok);
    c->n_sorted = m;
}

void smp_softmax(smp_cands *c)
{
    if (c->n <= 0)
        return;
    float mx = -INFINITY;
    for (int i = 0; i < c->n; i++)
        mx = c->data[i].logit > mx ? c->data[i].logit : mx;
    if (mx == -INFINITY) {
        for (int i = 0; i < c->n; i++)
            c->data[i].p = 1.0f / (float)c->n;
        return;
    }
    double sum = 0;
    for (int i = 0; i < c->n; i++) {
        float e = expf(c->data[i].logit - mx);
        c->data[i].p = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < c->n; i++)
        c->data[i].p *= inv;
}

/* ---- dense selection ---- */

/* Min-heap on "better": the root is the worst of the kept entries. */
static void heap_down(smp_tok *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(&h[w], &h[l])) w = l;
        if (r < n && better(&h[w], &h[r])) w = r;
        if (w == i)
            return;
        swap_tok(&h[i], &h[w]);
        i = w;
    }
}

static void heap_up(smp_tok *h, int i)
{
    while (i > 0) {
        int par = (i - 1) / 2;
        if (!better(&h[par], &h[i]))
            return;
        swap_tok(&h[par], &h[i]);
        i = par;
    }
}

/* True when some x[0..16) > t. */
static inline int any_above16(const float *x, float t)
{
#ifdef __SSE2__
    __m128 tv = _mm_set1_ps(t);
    __m128 m = _mm_or_ps(_mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x), tv), _mm_cmpgt_ps(_mm_loadu_ps(x + 4), tv)),
                         _mm_or_ps(_mm_cmpgt_ps(_mm_loadu_ps(x + 8), tv), _mm_cmpgt_ps(_mm_loadu_ps(x + 12), tv)));
    return _mm_movemask_ps(m);
#else
    int any = 0;
    for (int j = 0; j < 16; j++)
        any |= x[j] > t;
    return any;
#endif
}

int smp_top_k_dense(const float *x, int n, int k, smp_tok *out)
{
    if (k <= 0 || n <= 0)
        return 0;
    int hn = 0, i = 0;
    for (; i < n && hn < k; i++) {
        if (x[i] > -INFINITY) {
            out[hn].id = i;
            out[hn].logit = x[i];
            out[hn].p = 0;
            heap_up(out, hn++);
        }
    }
    /* Scanning ids upwards, an entry equal to the root is worse (higher id): skip it. */
    while (i < n) {
        if ((i & 15) == 0 && i + 16 <= n) {
            if (!any_above16(x + i, out[0].logit)) {
                i += 16;
                continue;
            }
        }
        if (x[i] > out[0].logit) {
            out[0].id = i;
            out[0].logit = x[i];
            heap_down(out, hn, 0);
        }
        i++;
    }
    qsort(out, (size_t)hn, sizeof(smp_tok), cmp_tok);
    return hn;
}

int smp_argmax(const float *x, int n)
{
    int best = -1;
    float bv = -INFINITY;
    int i = 0;
    for (; i < n; i++) {
        if ((i & 15) == 0 && i + 16 <= n && !any_above16(x + i, bv)) {
            i += 15;
            continue;
        }
        if (x[i] > bv) {
            bv = x[i];
            best = i;
        }
    }
    return best;
}

/* ---- the samplers ---- */

void smp_top_k(smp_cands *c, int k, int min_keep)
{
    if (k <= 0)
        return;
    if (k < min_keep)
        k = min_keep;
    if (k >= c->n)
        return;
    smp_sort_prefix(c, k);
    c->n = k;
}

void smp_top_p(smp_cands *c, float p, int min_keep)
{
    if (p >= 1.0f || c->n <= 0)
        return;
    smp_softmax(c);
    /* Grow the sorted prefix only as far as the cumulative sum needs. */
    float cum = 0.0f;
    int i = 0, m = 64;
    for (;;) {
        smp_sort_prefix(c, m);
        int lim = c->n_sorted < c->n ? c->n_sorted : c->n;
        for (; i < lim; i++) {
            cum += c->data[i].p;
            if (cum >= p && i + 1 >= min_keep) {
                c->n = i + 1;
                if (c->n_sorted > c->n)
                    c->n_sorted = c->n;
                return;
            }
        }
        if (lim >= c->n)
            return;
        m = m > c->n / 4 ? c->n : m * 4;
    }
}

void smp_min_p(smp_cands *c, float p, int min_keep)
{
    if (p <= 0.0f || c->n <= 0)
        return;
    float mx = -INFINITY;
    for (int i = 0; i < c->n; i++)
        mx = c->data[i].logit > mx ? c->data[i].logit : mx;
    float thr = mx + logf(p);   /* p_i >= p * p_max  <=>  logit_i >= max + ln p */
    int kept = 0;
    for (int i = 0; i < c->n; i++)
        kept += c->data[i].logit >= thr;
    if (kept >= min_keep && kept > 0) {
        int w = 0, ws = 0;
        for (int i = 0; i < c->n; i++) {
            if (c->data[i].logit >= thr) {
                ws += i < c->n_sorted;   /* kept sorted entries form a prefix */
                c->data[w++] = c->data[i];
            }
        }
        c->n = w;
        c->n_sorted = ws;
        return;
    }
    /* Fewer than min_keep pass: keep the best min_keep (llama.cpp's sorted path). */
    smp_top_k(c, min_keep, 0);
}

static int cmp_key_asc(const void *pa, const void *pb)
{
    const smp_tok *a = pa, *b = pb;
    if (a->p != b->p)
        return a->p < b->p ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

void smp_typical(smp_cands *c, float p, int min_keep)
{
    if (p >= 1.0f || c->n <= 0)
        return;
    smp_softmax(c);
    double h = 0;
    for (int i = 0; i < c->n; i++)
        if (c->data[i].p > 0)
            h -= c->data[i].p * logf(c->data[i].p);
    /* Sort by |surprise - entropy| held in p, then recompute p from the logits. */
    for (int i = 0; i < c->n; i++)
        c->data[i].p = c->data[i].p > 0 ? fabsf(-logf(c->data[i].p) - (float)h) : INFINITY;
    qsort(c->data, (size_t)c->n, sizeof(smp_tok), cmp_key_asc);
    c->n_sorted = 0;
    smp_softmax(c);
    float cum = 0.0f;
    for (int i = 0; i < c->n; i++) {
        cum += c->data[i].p;
        if (cum > p && (min_keep == 0 || i >= min_keep - 1)) {
            c->n = i + 1;
            return;
        }
    }
}

void smp_top_n_sigma(smp_cands *c, float nsig)
{
    if (nsig <= 0.0f || c->n <= 1)
        return;
    float mx = -INFINITY;
    double sum = 0;
    int cnt = 0;
    for (int i = 0; i < c->n; i++) {
        float l = c->data[i].logit;
        if (l != -INFINITY) {
            mx = l > mx ? l : mx;
            sum += l;
            cnt++;
        }
    }
    if (!cnt)
        return;
    double mean = sum / cnt, acc = 0;
    for (int i = 0; i < c->n; i++)
        if (c->data[i].logit != -INFINITY)
            acc += (c->data[i].logit - mean) * (c->data[i].logit - mean);
    float thr = mx - nsig * (float)sqrt(acc / cnt);
    int w = 0, ws = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->data[i].logit >= thr) {
            ws += i < c->n_sorted;
            c->data[w++] = c->data[i];
        }
    }
    c->n = w;
    c->n_sorted = ws;
}

void smp_xtc(smp_cands *c, float prob, float threshold, int min_keep, double u)
{
    if (prob <= 0.0f || threshold > 0.5f || c->n < 2 || u > prob)
        return;
    smp_softmax(c);
    int above = 0;
    for (int i = 0; i < c->n; i++)
        above += c->data[i].p >= threshold;
    if (above < 2)
        return;
    smp_sort_prefix(c, above);
    /* Remove every token above the threshold except the least probable of them. */
    int cut = above - 1;
    if (c->n - cut < min_keep)
        return;
    memmove(c->data, c->data + cut, (size_t)(c->n - cut) * sizeof(smp_tok));
    c->n -= cut;
    c->n_sorted -= cut;
}

static void keep_best_only(smp_cands *c)
{
    int b = 0;
    for (int i = 1; i < c->n; i++)
        if (better(&c->data[i], &c->data[b]))
            b = i;
    c->data[0] = c->data[b];
    c->n = 1;
    c->n_sorted = 1;
}

void smp_temperature(smp_cands *c, float t, float range, float exponent)
{
    if (c->n <= 0)
        return;
    if (range > 0.0f) {
        if (c->n <= 1)
            return;
        float tmin = t - range > 0.0f ? t - range : 0.0f, tmax = t + range;
        float max_h = logf((float)c->n);
        smp_softmax(c);
        float h = 0.0f;
        for (int i = 0; i < c->n; i++)
            if (c->data[i].p > 0.0f)
                h -= c->data[i].p * logf(c->data[i].p);
        t = tmin + (tmax - tmin) * powf(h / max_h, exponent);
    }
    if (!(t > 0.0f)) {
        keep_best_only(c);
        return;
    }
    /* Positive scaling keeps the order: n_sorted stays true. */
    for (int i = 0; i < c->n; i++)
        c->data[i].logit /= t;
}

int smp_dist(smp_cands *c, double u)
{
    if (c->n <= 0)
        return -1;
    smp_softmax(c);
    double total = 0;
    for (int i = 0; i < c->n; i++)
        total += c->data[i].p;
    double target = u * total, cum = 0;
    int last = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->data[i].p <= 0.0f)
            continue;
        cum += c->data[i].p;
        last = i;
        if (cum > target)
            return i;
    }
    return last;
}

int smp_mirostat(smp_cands *c, int n_vocab, float tau, float eta, int m, float *mu, double u)
{
    smp_softmax(c);
    smp_sort_prefix(c, m);
    /* Zipf exponent estimate from the m most probable tokens */
    float sum_tb = 0.0f, sum_tt = 0.0f;
    for (int i = 0; i < m - 1 && i < c->n - 1; i++) {
        float ti = logf((float)(i + 2) / (float)(i + 1));
        float bi = logf(c->data[i].p / c->data[i + 1].p);
        if (!isfinite(bi))
            break;
        sum_tb += ti * bi;
        sum_tt += ti * ti;
    }
    if (sum_tt > 0.0f) {
        float s_hat = sum_tb / sum_tt, eps = s_hat - 1.0f;
        float k = powf((eps * powf(2.0f, *mu)) / (1.0f - powf((float)n_vocab, -eps)), 1.0f / s_hat);
        int ki = !(k < (float)c->n) ? c->n : (k < 1.0f ? 1 : (int)k);
        smp_top_k(c, ki, 0);
    }
    int idx = smp_dist(c, u);
    float surprise = -log2f(c->data[idx].p);
    *mu -= eta * (surprise - tau);
    return idx;
}

int smp_mirostat_v2(smp_cands *c, float tau, float eta, float *mu, double u)
{
    smp_softmax(c);
    int keep = 0;
    for (int i = 0; i < c->n; i++)
        keep += !(-log2f(c->data[i].p) > *mu);
    smp_top_k(c, keep > 0 ? keep : 1, 0);
    int idx = smp_dist(c, u);
    float surprise = -log2f(c->data[idx].p);
    *mu -= eta * (surprise - tau);
    return idx;
}
