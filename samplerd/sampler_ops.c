/*
 * sampler_ops.c - the individual samplers over a candidate array, and the selection
 * primitives that let them avoid sorting a whole vocabulary: a k-heap scan for top-k
 * and a quickselect-based sorted prefix that grows only as far as a sampler looks.
 * Semantics follow llama.cpp's samplers of the same names (see sampler.h).
 * Owner: sampler (issue 5).
 */
#include "sampler.h"

#include "cpu.h"

/* No fused multiply-adds: the same bits on every CPU and compiler (GCC's ISO mode
 * already does not contract; clang needs telling). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SMP_AVX2 1
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

/* ---- exp ----
 * Cephes' expf: exp(x) = 2^n e^r with |r| <= ln2 / 2 and a degree-5 polynomial for e^r;
 * within 2 ulp of expf (tests check). Below -87.3 it gives 0. The SSE2 version does the
 * same operations in the same order, so both give identical bits. */
#define EXP_HI 88.3762626647949f
#define EXP_LO -88.3762626647949f
#define EXP_LOG2E 1.44269504088896341f
#define EXP_C1 0.693359375f
#define EXP_C2 -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

float smp_expf(float x)
{
    x = x >= EXP_LO ? x : EXP_LO;   /* NaN too, like maxps below */
    x = x > EXP_HI ? EXP_HI : x;
    float fx = x * EXP_LOG2E + 0.5f;
    float t = (float)(int)fx;
    fx = t > fx ? t - 1.0f : t;
    x = x - fx * EXP_C1;
    x = x - fx * EXP_C2;
    float z = x * x;
    float y = EXP_P0;
    y = y * x + EXP_P1;
    y = y * x + EXP_P2;
    y = y * x + EXP_P3;
    y = y * x + EXP_P4;
    y = y * x + EXP_P5;
    y = y * z + x + 1.0f;
    union { uint32_t u; float f; } pow2 = { .u = (uint32_t)((int)fx + 127) << 23 };
    return y * pow2.f;
}

#ifdef __SSE2__
static inline __m128 exp4(__m128 x)
{
    x = _mm_max_ps(x, _mm_set1_ps(EXP_LO));   /* maxps(NaN, lo) is lo */
    x = _mm_min_ps(x, _mm_set1_ps(EXP_HI));
    __m128 fx = _mm_add_ps(_mm_mul_ps(x, _mm_set1_ps(EXP_LOG2E)), _mm_set1_ps(0.5f));
    __m128 t = _mm_cvtepi32_ps(_mm_cvttps_epi32(fx));
    __m128 gt = _mm_cmpgt_ps(t, fx);
    fx = _mm_sub_ps(t, _mm_and_ps(gt, _mm_set1_ps(1.0f)));
    x = _mm_sub_ps(x, _mm_mul_ps(fx, _mm_set1_ps(EXP_C1)));
    x = _mm_sub_ps(x, _mm_mul_ps(fx, _mm_set1_ps(EXP_C2)));
    __m128 z = _mm_mul_ps(x, x);
    __m128 y = _mm_set1_ps(EXP_P0);
    y = _mm_add_ps(_mm_mul_ps(y, x), _mm_set1_ps(EXP_P1));
    y = _mm_add_ps(_mm_mul_ps(y, x), _mm_set1_ps(EXP_P2));
    y = _mm_add_ps(_mm_mul_ps(y, x), _mm_set1_ps(EXP_P3));
    y = _mm_add_ps(_mm_mul_ps(y, x), _mm_set1_ps(EXP_P4));
    y = _mm_add_ps(_mm_mul_ps(y, x), _mm_set1_ps(EXP_P5));
    y = _mm_add_ps(_mm_add_ps(_mm_mul_ps(y, z), x), _mm_set1_ps(1.0f));
    __m128i n = _mm_add_epi32(_mm_cvttps_epi32(fx), _mm_set1_epi32(127));
    return _mm_mul_ps(y, _mm_castsi128_ps(_mm_slli_epi32(n, 23)));
}
#endif

#ifdef SMP_AVX2
/* exp4 eight wide: the same operations in the same order (no FMA), so the same bits. */
__attribute__((target("avx2")))
static inline __m256 exp8(__m256 x)
{
    x = _mm256_max_ps(x, _mm256_set1_ps(EXP_LO));
    x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
    __m256 fx = _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)), _mm256_set1_ps(0.5f));
    __m256 t = _mm256_cvtepi32_ps(_mm256_cvttps_epi32(fx));
    __m256 gt = _mm256_cmp_ps(t, fx, _CMP_GT_OQ);
    fx = _mm256_sub_ps(t, _mm256_and_ps(gt, _mm256_set1_ps(1.0f)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(EXP_C1)));
    x = _mm256_sub_ps(x, _mm256_mul_ps(fx, _mm256_set1_ps(EXP_C2)));
    __m256 z = _mm256_mul_ps(x, x);
    __m256 y = _mm256_set1_ps(EXP_P0);
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(EXP_P1));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(EXP_P2));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(EXP_P3));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(EXP_P4));
    y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(EXP_P5));
    y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(y, z), x), _mm256_set1_ps(1.0f));
    __m256i n = _mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127));
    return _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(n, 23)));
}

__attribute__((target("avx2")))
static int expf_n_avx2(const float *x, float *out, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, exp8(_mm256_loadu_ps(x + i)));
    return i;
}

/* Adds exp(x[i] - shift) to acc[i % 4] in index order (the canonical sum, see
 * smp_sum_exp); returns how many entries it did. */
__attribute__((target("avx2")))
static int sum_exp_avx2(const float *x, int n, float shift, double acc[4])
{
    __m256d a = _mm256_loadu_pd(acc);
    __m256 sh = _mm256_set1_ps(shift);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
        a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    _mm256_storeu_pd(acc, a);
    return i;
}

#endif

/* The widest SIMD the exp-based loops may use (smp_simd_limit); the CPU's support is
 * looked up once, it does not change under a running process. */
static int simd_max = 2;

int smp_simd_limit(int level)
{
    int old = simd_max;
    simd_max = level < 0 ? 0 : level > 2 ? 2 : level;
    return old;
}

static inline int use_sse2(void)
{
#ifdef __SSE2__
    return simd_max >= 1;
#else
    return 0;
#endif
}

__attribute__((unused)) static int have_avx2(void)
{
#ifdef SMP_AVX2
    static int v = -1;   /* every thread computes the same value: relaxed is enough */
    int c = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (c < 0) {
        c = (cpu_features() & CPU_AVX2) ? 1 : 0; /* common/cpu.h: also checks the OS saves YMM */
        __atomic_store_n(&v, c, __ATOMIC_RELAXED);
    }
    return c && simd_max >= 2;
#else
    return 0;
#endif
}

void smp_expf_n(const float *x, float *out, int n)
{
    int i = 0;
#ifdef SMP_AVX2
    if (have_avx2())
        i = expf_n_avx2(x, out, n);
#endif
#ifdef __SSE2__
    for (; use_sse2() && i + 4 <= n; i += 4)
        _mm_storeu_ps(out + i, exp4(_mm_loadu_ps(x + i)));
#endif
    for (; i < n; i++)
        out[i] = smp_expf(x[i]);
}

/* The canonical order of every long sum here: entry i goes to accumulator i % 4 (in
 * index order) up to the last multiple of 4, the four are added pairwise, and the tail
 * follows one by one. Every SIMD level adds in exactly this order, so sums, and the
 * tokens drawn from them, are the same bits on every x86-64 CPU. */
static double acc_total(const double acc[4])
{
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

double smp_sum_exp(const float *x, int n, float shift)
{
    int i = 0, n4 = n & ~3;
    double acc[4] = { 0, 0, 0, 0 };
#ifdef SMP_AVX2
    if (have_avx2())
        i = sum_exp_avx2(x, n4, shift, acc);
#endif
#ifdef __SSE2__
    __m128d a = _mm_loadu_pd(acc), b = _mm_loadu_pd(acc + 2);
    __m128 sh = _mm_set1_ps(shift);
    for (; use_sse2() && i < n4; i += 4) {
        __m128 e = exp4(_mm_sub_ps(_mm_loadu_ps(x + i), sh));
        a = _mm_add_pd(a, _mm_cvtps_pd(e));
        b = _mm_add_pd(b, _mm_cvtps_pd(_mm_movehl_ps(e, e)));
    }
    _mm_storeu_pd(acc, a);
    _mm_storeu_pd(acc + 2, b);
#endif
    for (; i < n4; i++)
        acc[i & 3] += smp_expf(x[i] - shift);
    double sum = acc_total(acc);
    for (; i < n; i++)
        sum += smp_expf(x[i] - shift);
    return sum;
}

void smp_softmax(smp_cands *c)
{
    if (c->n <= 0)
        return;
    smp_tok *d = c->data;
    float mx = -INFINITY;
    for (int i = 0; i < c->n; i++)
        mx = d[i].logit > mx ? d[i].logit : mx;
    if (mx == -INFINITY || mx == INFINITY) {
        /* no finite scale: share evenly among the entries equal to the max */
        int k = 0;
        for (int i = 0; i < c->n; i++)
            k += d[i].logit == mx;
        for (int i = 0; i < c->n; i++)
            d[i].p = d[i].logit == mx ? 1.0f / (float)k : 0.0f;
        return;
    }
    int i = 0, n4 = c->n & ~3;
    double acc[4] = { 0, 0, 0, 0 };   /* the canonical sum order, see smp_sum_exp */
#ifdef __SSE2__
    __m128d a = _mm_setzero_pd(), b = _mm_setzero_pd();
    __m128 mv = _mm_set1_ps(mx);
    for (; use_sse2() && i < n4; i += 4) {
        __m128 e = exp4(_mm_sub_ps(_mm_setr_ps(d[i].logit, d[i + 1].logit, d[i + 2].logit,
                                               d[i + 3].logit), mv));
        float t[4];
        _mm_storeu_ps(t, e);
        d[i].p = t[0];
        d[i + 1].p = t[1];
        d[i + 2].p = t[2];
        d[i + 3].p = t[3];
        a = _mm_add_pd(a, _mm_cvtps_pd(e));
        b = _mm_add_pd(b, _mm_cvtps_pd(_mm_movehl_ps(e, e)));
    }
    _mm_storeu_pd(acc, a);
    _mm_storeu_pd(acc + 2, b);
#endif
    for (; i < n4; i++) {
        d[i].p = smp_expf(d[i].logit - mx);
        acc[i & 3] += d[i].p;
    }
    double sum = acc_total(acc);
    for (; i < c->n; i++) {
        d[i].p = smp_expf(d[i].logit - mx);
        sum += d[i].p;
    }
    float inv = (float)(1.0 / sum);
    for (i = 0; i < c->n; i++)
        d[i].p *= inv;
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

/* top-p over a big unsorted set without sorting it: bin the tokens by logit below the
 * max (bins are monotone in logit), add whole bins until the one where the cumulative
 * probability crosses p, and sort only that bin. Keeps exactly the prefix of the sorted
 * order that the sorting version keeps (up to float summation order). */
enum { TOPP_BINS = 2048 };
#define TOPP_RANGE 32.0f

static void top_p_binned(smp_cands *c, float p, int min_keep)
{
    smp_tok *d = c->data;
    float mx = -INFINITY;
    for (int i = 0; i < c->n; i++)
        mx = d[i].logit > mx ? d[i].logit : mx;
    const float scale = TOPP_BINS / TOPP_RANGE;
    float mass[TOPP_BINS] = {0};
#define BIN(l) ((mx - (l)) * scale < (float)(TOPP_BINS - 1) ? (int)((mx - (l)) * scale) : TOPP_BINS - 1)
    for (int i = 0; i < c->n; i++)
        mass[BIN(d[i].logit)] += d[i].p;
    float cum = 0.0f;
    int bstar = TOPP_BINS - 1;
    for (int b = 0; b < TOPP_BINS; b++) {
        if (cum + mass[b] >= p) {
            bstar = b;
            break;
        }
        cum += mass[b];
    }
    /* [0, a): bins before bstar; [a, a + nb): bin bstar */
    int a = 0;
    for (int i = 0; i < c->n; i++)
        if (BIN(d[i].logit) < bstar)
            swap_tok(&d[a++], &d[i]);
    int nb = 0;
    for (int i = a; i < c->n; i++)
        if (BIN(d[i].logit) == bstar)
            swap_tok(&d[a + nb++], &d[i]);
#undef BIN
    qsort(d + a, (size_t)nb, sizeof(smp_tok), cmp_tok);
    int keep = a + nb > 0 ? a + nb : c->n;   /* if rounding leaves p unreached */
    for (int j = 0; j < nb; j++) {
        cum += d[a + j].p;
        if (cum >= p) {
            keep = a + j + 1;
            break;
        }
    }
    if (keep < min_keep) {
        /* the cumulative sum only grows: the first min_keep tokens satisfy both */
        c->n_sorted = 0;
        smp_top_k(c, min_keep, 0);
        return;
    }
    c->n_sorted = a == 0 ? (nb < keep ? nb : keep) : 0;
    c->n = keep;
}

#ifdef SMP_AVX2
/* The binning pass of smp_top_p_dense, eight wide; returns how many entries it did. */
__attribute__((target("avx2")))
static int bin_pass_avx2(const float *x, int n, float mx, float scale, float lane[4][TOPP_BINS])
{
    const __m256 mv = _mm256_set1_ps(mx), sv = _mm256_set1_ps(scale);
    const __m256 top = _mm256_set1_ps((float)(TOPP_BINS - 1));
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        float e[8];
        int32_t b[8];
        _mm256_storeu_ps(e, exp8(_mm256_sub_ps(v, mv)));
        __m256 d = _mm256_min_ps(_mm256_mul_ps(_mm256_sub_ps(mv, v), sv), top);
        _mm256_storeu_si256((__m256i *)b, _mm256_cvttps_epi32(d));
        for (int j = 0; j < 8; j++)
            lane[j & 3][b[j]] += e[j];
    }
    return i;
}
#endif

int smp_top_p_dense(const float *x, int n, float p, smp_tok *out)
{
    int am = smp_argmax(x, n);
    if (am < 0)
        return 0;
    const float mx = x[am], scale = TOPP_BINS / TOPP_RANGE;
    /* one histogram per lane, so neighbours landing in one bin do not wait on each other */
    static _Thread_local float lane[4][TOPP_BINS];
    memset(lane, 0, sizeof lane);
#define BIN(l) ((mx - (l)) * scale < (float)(TOPP_BINS - 1) ? (int)((mx - (l)) * scale) : TOPP_BINS - 1)
    /* one pass: unnormalised probabilities, binned by logit below the max */
    int i = 0;
#ifdef SMP_AVX2
    if (have_avx2())
        i = bin_pass_avx2(x, n, mx, scale, lane);
#endif
#ifdef __SSE2__
    __m128 mv = _mm_set1_ps(mx);
    for (; use_sse2() && i + 4 <= n; i += 4) {
        float e[4];
        _mm_storeu_ps(e, exp4(_mm_sub_ps(_mm_loadu_ps(x + i), mv)));
        for (int j = 0; j < 4; j++)
            lane[j][BIN(x[i + j])] += e[j];
    }
#endif
    for (; i < n; i++)   /* lane i % 4 at every SIMD level: the same sums */
        lane[i & 3][BIN(x[i])] += smp_expf(x[i] - mx);
    double total = 0;
    for (int b = 0; b < TOPP_BINS; b++) {
        lane[0][b] += lane[1][b] + lane[2][b] + lane[3][b];
        total += lane[0][b];
    }
    const float inv = (float)(1.0 / total);
    float cum = 0.0f;
    int bstar = TOPP_BINS - 1;
    for (int b = 0; b < TOPP_BINS; b++) {
        if (cum + lane[0][b] * inv >= p) {
            bstar = b;
            break;
        }
        cum += lane[0][b] * inv;
    }
    /* bins before bstar from the front, bin bstar from the back, then joined */
    int a = 0, nb = 0;
    for (i = 0; i < n; i++) {
        /* branch-free for the common case: write, then keep it or not. a + nb <= i, so
         * out[a] is never a slot of the back group already written. */
        int b = BIN(x[i]);
        int live = x[i] > -INFINITY;
        out[a] = (smp_tok){ i, x[i], 0.0f };
        a += live & (b < bstar);
        if (live && b == bstar)
            out[n - 1 - nb++] = (smp_tok){ i, x[i], 0.0f };
    }
#undef BIN
    for (int j = 0; j < nb; j++)
        out[a + j] = out[n - 1 - j];
    qsort(out + a, (size_t)nb, sizeof(smp_tok), cmp_tok);
    for (int j = 0; j < nb; j++) {
        out[a + j].p = smp_expf(out[a + j].logit - mx) * inv;
        cum += out[a + j].p;
        if (cum >= p)
            return a + j + 1;
    }
    return a + nb;
}

void smp_top_p(smp_cands *c, float p, int min_keep)
{
    if (p >= 1.0f || c->n <= 0)
        return;
    smp_softmax(c);
    if (c->n > 1024 && c->n_sorted < 64) {
        top_p_binned(c, p, min_keep);
        return;
    }
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

/* typical-p over a big set without sorting it: as top_p_binned, with the bins on the
 * key |surprise - entropy| and the cut where the cumulative probability first exceeds
 * p; only the boundary bin is sorted. Surprise is (max - logit) + ln S, so no log per
 * token. Needs c->data[*].p from smp_softmax. */
enum { TYP_BINS = 4096 };
#define TYP_RANGE 64.0f

static void typical_binned(smp_cands *c, float p)
{
    smp_tok *d = c->data;
    float mx = -INFINITY, inv = 0.0f;
    for (int i = 0; i < c->n; i++)
        if (d[i].logit > mx) {
            mx = d[i].logit;
            inv = d[i].p;   /* p of the max is exp(0) / S */
        }
    const float ln_s = -logf(inv);
    double hd = 0;
    for (int i = 0; i < c->n; i++)
        if (d[i].p > 0)
            hd += d[i].p * ((mx - d[i].logit) + ln_s);
    const float h = (float)hd, scale = TYP_BINS / TYP_RANGE;
    static _Thread_local float mass[TYP_BINS];
    memset(mass, 0, sizeof mass);
#define KEY(t) ((t).p > 0 ? fabsf((mx - (t).logit) + ln_s - h) : INFINITY)
#define BIN(k) ((k) * scale < (float)(TYP_BINS - 1) ? (int)((k) * scale) : TYP_BINS - 1)
    for (int i = 0; i < c->n; i++)
        mass[BIN(KEY(d[i]))] += d[i].p;
    float cum = 0.0f;
    int bstar = TYP_BINS - 1;
    for (int b = 0; b < TYP_BINS; b++) {
        if (cum + mass[b] > p) {
            bstar = b;
            break;
        }
        cum += mass[b];
    }
    int a = 0, nb = 0;
    for (int i = 0; i < c->n; i++)
        if (BIN(KEY(d[i])) < bstar)
            swap_tok(&d[a++], &d[i]);
    for (int i = a; i < c->n; i++)
        if (BIN(KEY(d[i])) == bstar)
            swap_tok(&d[a + nb++], &d[i]);
    /* sort the boundary bin by key (held in p for the sort), then restore p */
    for (int j = a; j < a + nb; j++)
        d[j].p = KEY(d[j]);
#undef BIN
#undef KEY
    qsort(d + a, (size_t)nb, sizeof(smp_tok), cmp_key_asc);
    c->n_sorted = 0;
    int keep = a + nb;
    for (int j = a; j < a + nb; j++) {
        d[j].p = smp_expf(d[j].logit - mx) * inv;
        cum += d[j].p;
        if (cum > p) {
            keep = j + 1;
            break;
        }
    }
    c->n = keep > 0 ? keep : 1;
}

void smp_typical(smp_cands *c, float p, int min_keep)
{
    if (p >= 1.0f || c->n <= 0)
        return;
    smp_softmax(c);
    if (c->n > 1024 && min_keep <= 1) {
        typical_binned(c, p);
        return;
    }
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
    /* Positive scaling keeps the order: n_sorted stays true (ties may appear at the
     * clamp, which keeps them in id order as the sort does). */
    for (int i = 0; i < c->n; i++) {
        float l = c->data[i].logit / t;
        c->data[i].logit = l > FLT_MAX ? FLT_MAX : l;
    }
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
        float bi = c->data[i].logit - c->data[i + 1].logit;   /* = ln(p_i / p_i+1) */
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
