/*
 * quant_k.c - the "K" quantization types: 256-value super-blocks split into
 * sub-blocks whose scales (and mins) are themselves quantized (Q2_K..Q6_K, Q8_K).
 *
 *   quant_quant_q4_K(x, blocks, n);    // n a multiple of QK_K
 *   quant_dequant_q4_K(blocks, y, n);
 *
 * Dequantizers reproduce ggml's dequantize_row_q*_K bit for bit: the sub-block
 * scale is formed first as a float product (d * sc), then multiplied by the quant,
 * then the min product is subtracted, never fused. Quantizers follow the semantics
 * of ggml's reference (non-imatrix) quantize_row_q*_K_ref: a weighted least-squares
 * search per sub-block, then 6-bit (or 4/8-bit) quantization of the scales, then the
 * quants re-derived from the rounded scales. AVX2 twins of the scale searches (8
 * sub-blocks per vector) give the same bits. The dequantizers are in quant_k_dequant.c;
 * both sets sit in the tables of quant_ops.h, which quant.c chooses from once.
 * Owner: quant helper. No allocation.
 */
#include "quant.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "f16.h"
#include "log.h"
#include "quant_ops.h"

#define GROUP_MAX_EPS 1e-15f

/* ---- quantize: sub-block searches ------------------------------------------------ */

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Weighted error of x ~ scale * L + min: absolute (mad) or squared. */
static float fit_error(int n, const float *x, const float *w, const uint8_t *L,
                       float scale, float min, bool mad)
{
    float err = 0;
    for (int i = 0; i < n; i++) {
        float diff = scale * (float)L[i] + min - x[i];
        diff = mad ? fabsf(diff) : diff * diff;
        err += w[i] * diff;
    }
    return err;
}

/* Asymmetric quantization x ~ scale * L - the_min, L in [0, nmax], as ggml's
 * make_qkx2_quants: start from the min/max grid, then try nstep+1 grid widths
 * (nmax + rmin + rdelta*k) and refit scale and min by weighted least squares on
 * each, keeping the fit of smallest weighted error. Returns scale, *the_min >= 0. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L,
                           float *the_min, uint8_t *Laux, float rmin, float rdelta,
                           int nstep, bool mad)
{
    float min = x[0], max = x[0], sum_w = w[0], sum_x = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)clampi(quant_nearest_int(iscale * (x[i] - min)), 0, nmax);
    float best = fit_error(n, x, w, L, scale, min, mad);
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(quant_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        const float err = fit_error(n, x, w, Laux, this_scale, this_min, mad);
        if (err < best) {
            memcpy(L, Laux, (size_t)n);
            best = err;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

/* The value of largest magnitude, sign kept (first one on ties); 0 if all tiny. */
static float signed_absmax(int n, const float *x, float *amax_out)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    *amax_out = amax;
    return max;
}

/* Symmetric quantization x ~ scale * (L - nmax), L - nmax in [-nmax, nmax-1], with
 * weights x^2, as ggml's make_qx_quants(rmse_type 1): try 19 grid widths around
 * nmax and keep the one whose least-squares scale explains the most of x. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L)
{
    float amax;
    const float max = signed_absmax(n, x, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        const float w = x[i] * x[i];
        L[i] = (int8_t)(l + nmax);
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric 3-bit-style fit as ggml's make_q3_quants(do_rmse): round on the max
 * grid, then up to 5 passes of coordinate descent on each quant that raise the
 * explained energy sumlx^2/suml2 (weights x^2). L gets l + nmax. Returns scale. */
static float fit_scale_q3(int n, int nmax, const float *x, int8_t *L)
{
    float amax;
    const float max = signed_absmax(n, x, &amax);
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        const float w = x[i] * x[i];
        L[i] = (int8_t)l;
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            const int nl = clampi(quant_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (nl == L[i]) continue;
            slx += w * x[i] * (float)nl;
            sl2 += w * (float)nl * (float)nl;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)nl;
                sumlx = slx;
                suml2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ---- quantize: the same searches on 8 sub-blocks at once (AVX2) -------------------- */

#if defined(__x86_64__)
/* The searches above cost ~40 float operations per value per candidate grid. The
 * AVX2 versions below run 8 sub-blocks side by side, one per vector lane: lane b
 * performs exactly the operations of the reference function on sub-block b, in the
 * same order (IEEE multiplies, adds and divides round identically in a lane; no
 * fused multiply-add; comparisons keep C's NaN semantics), so the results are
 * bit-identical to the reference (tests compare both, and golden hashes pin them).
 * Inputs are transposed so that element i of all 8 sub-blocks is one vector. */
#define AVX2_FN __attribute__((target("avx2")))
#define LANES 8
#define MAXN 32 /* longest sub-block */

/* ggml's nearest_int on 8 lanes. */
AVX2_FN static inline __m256i v_nearest(__m256 x)
{
    const __m256i bits = _mm256_castps_si256(_mm256_add_ps(x, _mm256_set1_ps(12582912.0f)));
    return _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                            _mm256_set1_epi32(0x00400000));
}

AVX2_FN static inline __m256i v_clamp(__m256i v, int lo, int hi)
{
    return _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(lo)), _mm256_set1_epi32(hi));
}

/* Transposes nsub=8 sub-blocks of n values: out[i] = (x[i], x[n+i], ..., x[7n+i]). */
AVX2_FN static void v_transpose(int n, const float *x, __m256 *out)
{
    for (int i = 0; i < n; i++)
        out[i] = _mm256_setr_ps(x[i], x[n + i], x[2 * n + i], x[3 * n + i], x[4 * n + i],
                                x[5 * n + i], x[6 * n + i], x[7 * n + i]);
}

/* Weighted error of each lane's fit x ~ scale * L + min (see fit_error). */
AVX2_FN static inline __m256 v_fit_error(int n, const __m256 *xt, const __m256 *wt,
                                         const __m256i *Lq, __m256 scale, __m256 min, bool mad)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 err = _mm256_setzero_ps();
    for (int i = 0; i < n; i++) {
        __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(Lq[i])), min), xt[i]);
        diff = mad ? _mm256_andnot_ps(sign, diff) : _mm256_mul_ps(diff, diff);
        err = _mm256_add_ps(err, _mm256_mul_ps(wt[i], diff));
    }
    return err;
}

/* fit_scale_min on 8 sub-blocks of n values: sub-block b at x + n*b, its weights
 * at w + n*b, its quants to L + n*b, its scale and min to scale_out[b], min_out[b]. */
AVX2_FN static void fit_scale_min_x8(int n, int nmax, const float *x, const float *w, uint8_t *L,
                                     float *scale_out, float *min_out, float rmin, float rdelta,
                                     int nstep, bool mad)
{
    __m256 xt[MAXN], wt[MAXN];
    __m256i Lt[MAXN], La[MAXN];
    const __m256 zero = _mm256_setzero_ps();
    v_transpose(n, x, xt);
    v_transpose(n, w, wt);
    __m256 mn = xt[0], mx = xt[0], sw = wt[0], sx = _mm256_mul_ps(wt[0], xt[0]);
    for (int i = 1; i < n; i++) {
        mn = _mm256_blendv_ps(mn, xt[i], _mm256_cmp_ps(xt[i], mn, _CMP_LT_OQ));
        mx = _mm256_blendv_ps(mx, xt[i], _mm256_cmp_ps(xt[i], mx, _CMP_GT_OQ));
        sw = _mm256_add_ps(sw, wt[i]);
        sx = _mm256_add_ps(sx, _mm256_mul_ps(wt[i], xt[i]));
    }
    mn = _mm256_blendv_ps(mn, zero, _mm256_cmp_ps(mn, zero, _CMP_GT_OQ));
    /* a lane with max == min is finished (all quants 0); its arithmetic below runs
     * on infinities and is replaced at the end */
    const __m256 flat = _mm256_cmp_ps(mx, mn, _CMP_EQ_OQ);
    __m256 is = _mm256_div_ps(_mm256_set1_ps((float)nmax), _mm256_sub_ps(mx, mn));
    __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.0f), is), min = mn;
    for (int i = 0; i < n; i++)
        Lt[i] = v_clamp(v_nearest(_mm256_mul_ps(is, _mm256_sub_ps(xt[i], min))), 0, nmax);
    __m256 best = v_fit_error(n, xt, wt, Lt, scale, min, mad);
    for (int st = 0; st <= nstep; st++) {
        is = _mm256_div_ps(_mm256_set1_ps(rmin + rdelta * (float)st + (float)nmax), _mm256_sub_ps(mx, min));
        __m256 sl = zero, sl2 = zero, sxl = zero;
        for (int i = 0; i < n; i++) {
            La[i] = v_clamp(v_nearest(_mm256_mul_ps(is, _mm256_sub_ps(xt[i], min))), 0, nmax);
            const __m256 wl = _mm256_mul_ps(wt[i], _mm256_cvtepi32_ps(La[i]));
            sl = _mm256_add_ps(sl, wl);
            sl2 = _mm256_add_ps(sl2, _mm256_mul_ps(wl, _mm256_cvtepi32_ps(La[i])));
            sxl = _mm256_add_ps(sxl, _mm256_mul_ps(wl, xt[i]));
        }
        const __m256 D = _mm256_sub_ps(_mm256_mul_ps(sw, sl2), _mm256_mul_ps(sl, sl));
        __m256 ts = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sw, sxl), _mm256_mul_ps(sx, sl)), D);
        __m256 tm = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sl2, sx), _mm256_mul_ps(sl, sxl)), D);
        const __m256 pos = _mm256_cmp_ps(tm, zero, _CMP_GT_OQ);
        tm = _mm256_blendv_ps(tm, zero, pos);
        ts = _mm256_blendv_ps(ts, _mm256_div_ps(sxl, sl2), pos);
        const __m256 err = v_fit_error(n, xt, wt, La, ts, tm, mad);
        const __m256 take = _mm256_and_ps(_mm256_cmp_ps(D, zero, _CMP_GT_OQ), _mm256_cmp_ps(err, best, _CMP_LT_OQ));
        if (_mm256_movemask_ps(take) == 0) continue;
        const __m256i takei = _mm256_castps_si256(take);
        for (int i = 0; i < n; i++) Lt[i] = _mm256_blendv_epi8(Lt[i], La[i], takei);
        best = _mm256_blendv_ps(best, err, take);
        scale = _mm256_blendv_ps(scale, ts, take);
        min = _mm256_blendv_ps(min, tm, take);
    }
    const __m256i flati = _mm256_castps_si256(flat);
    _mm256_storeu_ps(scale_out, _mm256_blendv_ps(scale, zero, flat));
    _mm256_storeu_ps(min_out, _mm256_xor_ps(_mm256_blendv_ps(min, mn, flat), _mm256_set1_ps(-0.0f)));
    for (int i = 0; i < n; i++) {
        int32_t q[LANES];
        _mm256_storeu_si256((__m256i *)q, _mm256_andnot_si256(flati, Lt[i]));
        for (int b = 0; b < LANES; b++) L[n * b + i] = (uint8_t)q[b];
    }
}

/* fit_scale_sym on 8 sub-blocks of n values (layout as fit_scale_min_x8). */
AVX2_FN static void fit_scale_sym_x8(int n, int nmax, const float *x, int8_t *L, float *scale_out)
{
    __m256 xt[MAXN];
    __m256i Lt[MAXN], La[MAXN];
    const __m256 zero = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
    v_transpose(n, x, xt);
    __m256 amax = zero, max = zero;
    for (int i = 0; i < n; i++) {
        const __m256 ax = _mm256_andnot_ps(sign, xt[i]);
        const __m256 gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
        amax = _mm256_blendv_ps(amax, ax, gt);
        max = _mm256_blendv_ps(max, xt[i], gt);
    }
    __m256 is = _mm256_div_ps(_mm256_set1_ps((float)-nmax), max);
    __m256 sumlx = zero, suml2 = zero;
    for (int i = 0; i < n; i++) {
        const __m256i l = v_clamp(v_nearest(_mm256_mul_ps(is, xt[i])), -nmax, nmax - 1);
        const __m256 lf = _mm256_cvtepi32_ps(l), wv = _mm256_mul_ps(xt[i], xt[i]);
        Lt[i] = l;
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(wv, xt[i]), lf));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(wv, lf), lf));
    }
    __m256 scale = _mm256_blendv_ps(zero, _mm256_div_ps(sumlx, suml2), _mm256_cmp_ps(suml2, zero, _CMP_NEQ_UQ));
    __m256 best = _mm256_mul_ps(scale, sumlx);
    for (int st = -9; st <= 9; st++) {
        if (st == 0) continue;
        is = _mm256_div_ps(_mm256_set1_ps(-((float)nmax + 0.1f * (float)st)), max);
        sumlx = suml2 = zero;
        for (int i = 0; i < n; i++) {
            La[i] = v_clamp(v_nearest(_mm256_mul_ps(is, xt[i])), -nmax, nmax - 1);
            const __m256 lf = _mm256_cvtepi32_ps(La[i]), wv = _mm256_mul_ps(xt[i], xt[i]);
            sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(wv, xt[i]), lf));
            suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(wv, lf), lf));
        }
        const __m256 take = _mm256_and_ps(_mm256_cmp_ps(suml2, zero, _CMP_GT_OQ),
                                          _mm256_cmp_ps(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2), _CMP_GT_OQ));
        if (_mm256_movemask_ps(take) == 0) continue;
        const __m256i takei = _mm256_castps_si256(take);
        for (int i = 0; i < n; i++) Lt[i] = _mm256_blendv_epi8(Lt[i], La[i], takei);
        const __m256 ns = _mm256_div_ps(sumlx, suml2);
        scale = _mm256_blendv_ps(scale, ns, take);
        best = _mm256_blendv_ps(best, _mm256_mul_ps(ns, sumlx), take);
    }
    const __m256 tiny = _mm256_cmp_ps(amax, _mm256_set1_ps(GROUP_MAX_EPS), _CMP_LT_OQ);
    _mm256_storeu_ps(scale_out, _mm256_blendv_ps(scale, zero, tiny));
    const __m256i keep = _mm256_xor_si256(_mm256_castps_si256(tiny), _mm256_set1_epi32(-1));
    for (int i = 0; i < n; i++) {
        int32_t q[LANES];
        /* stored as l + nmax; a near-zero lane gets all zeros, as in the reference */
        _mm256_storeu_si256((__m256i *)q, _mm256_and_si256(keep, _mm256_add_epi32(Lt[i], _mm256_set1_epi32(nmax))));
        for (int b = 0; b < LANES; b++) L[n * b + i] = (int8_t)q[b];
    }
}

#endif

/* The quantizers that search scales are written once, with simd a constant: each is
 * instantiated as a scalar and an AVX2 entry of the tables at the end, so the choice is
 * the table's, and every search is a direct call with constant shapes. */
#define K_TEMPLATE static inline __attribute__((always_inline))

/* fit_scale_min over nsub (a multiple of 8) consecutive sub-blocks. */
K_TEMPLATE void fit_scale_min_group(bool simd, int nsub, int n, int nmax, const float *x, const float *w,
                                    uint8_t *L, float *scales, float *mins, float rmin, float rdelta, int nstep,
                                    bool mad)
{
#if defined(__x86_64__)
    if (simd) {
        for (int g = 0; g < nsub; g += LANES)
            fit_scale_min_x8(n, nmax, x + n * g, w + n * g, L + n * g, scales + g, mins + g, rmin, rdelta,
                             nstep, mad);
        return;
    }
#endif
    uint8_t Laux[32];
    for (int j = 0; j < nsub; j++)
        scales[j] = fit_scale_min(n, nmax, x + n * j, w + n * j, L + n * j, &mins[j], Laux,
                                  rmin, rdelta, nstep, mad);
}

/* fit_scale_sym over nsub (a multiple of 8) consecutive sub-blocks. */
K_TEMPLATE void fit_scale_sym_group(bool simd, int nsub, int n, int nmax, const float *x, int8_t *L,
                                    float *scales)
{
#if defined(__x86_64__)
    if (simd) {
        for (int g = 0; g < nsub; g += LANES)
            fit_scale_sym_x8(n, nmax, x + n * g, L + n * g, scales + g);
        return;
    }
#endif
    for (int j = 0; j < nsub; j++) scales[j] = fit_scale_sym(n, nmax, x + n * j, L + n * j);
}

/* Packs four 2-bit quants 32 apart into each byte, 128 values per 32 bytes. */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 |
                                      L[j + l + 96] << 6);
}

/* ---- quantize: Q2_K, Q3_K -------------------------------------------------------- */

K_TEMPLATE void quant_q2_K_with(bool simd, const float *x, void *dst, int64_t n)
{
    block_q2_K *y = dst;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, y++, x += QK_K) {
        uint8_t L[QK_K];
        float w[QK_K], mins[16], scales[16], max_scale = 0, max_min = 0;
        for (int l = 0; l < QK_K; l++) w[l] = fabsf(x[l]);
        fit_scale_min_group(simd, 16, 16, 3, x, w, L, scales, mins, -0.5f, 0.1f, 15, true);
        for (int j = 0; j < 16; j++) {
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        /* scales and mins as 4-bit multiples of max/15 */
        memset(y->scales, 0, sizeof y->scales);
        y->d = f32_to_f16(0.f);
        y->dmin = f32_to_f16(0.f);
        if (max_scale > 0) {
            const float is = 15.f / max_scale;
            for (int j = 0; j < 16; j++) y->scales[j] = (uint8_t)quant_nearest_int(is * scales[j]);
            y->d = f32_to_f16(max_scale / 15.f);
        }
        if (max_min > 0) {
            const float im = 15.f / max_min;
            for (int j = 0; j < 16; j++)
                y->scales[j] |= (uint8_t)((unsigned)quant_nearest_int(im * mins[j]) << 4);
            y->dmin = f32_to_f16(max_min / 15.f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = f16_to_f32(y->d) * (float)(y->scales[j] & 0x0f);
            if (d == 0) continue;
            const float dm = f16_to_f32(y->dmin) * (float)(y->scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (uint8_t)clampi(quant_nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, y->qs);
    }
}

/* Packs 16 6-bit values (0..63) the way quant_q3_K_scales() unpacks them. */
static void q3_pack_scales(const int *ls, uint8_t *p)
{
    memset(p, 0, 12);
    for (int j = 0; j < 16; j++) {
        if (j < 8) p[j] = (uint8_t)(ls[j] & 0x0f);
        else p[j - 8] |= (uint8_t)((ls[j] & 0x0f) << 4);
        p[8 + j % 4] |= (uint8_t)((ls[j] >> 4) << (2 * (j / 4)));
    }
}

void quant_quant_q3_K(const float *x, void *dst, int64_t n)
{
    block_q3_K *y = dst;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, y++, x += QK_K) {
        int8_t L[QK_K];
        float scales[16], max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_scale_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        int ls[16] = {0};
        if (max_scale != 0) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++)
                ls[j] = clampi(quant_nearest_int(iscale * scales[j]), -32, 31) + 32;
            y->d = f32_to_f16(1 / iscale);
        } else {
            y->d = f32_to_f16(0.f);
        }
        q3_pack_scales(ls, y->scales);
        int sc[16];
        quant_q3_K_scales(y->scales, sc);
        for (int j = 0; j < 16; j++) {
            const float d = f16_to_f32(y->d) * (float)sc[j];
            if (d == 0) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(quant_nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        /* the high bit of value j goes to hmask[j % 32], bit j / 32 */
        uint8_t low[QK_K];
        memset(y->hmask, 0, sizeof y->hmask);
        for (int j = 0; j < QK_K; j++) {
            if (L[j] > 3) y->hmask[j % 32] |= (uint8_t)(1u << (j / 32));
            low[j] = (uint8_t)(L[j] > 3 ? L[j] - 4 : L[j]);
        }
        pack_2bit(low, y->qs);
    }
}

/* ---- quantize: Q4_K, Q5_K -------------------------------------------------------- */

/* Inverse of scale_min_k4 for all 8 pairs. */
static void pack_scale_min_k4(const uint8_t *ls, const uint8_t *lm, uint8_t *q)
{
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (uint8_t)((ls[j] & 0x0f) | (lm[j] & 0x0f) << 4);
            q[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            q[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per 32-value sub-block an
 * asymmetric fit, then scales and mins as 6-bit multiples of their maxima, then
 * the quants L (0..nmax) re-derived from the rounded scales. */
K_TEMPLATE void quant_k_scale_min(bool simd, const float *x, int nmax, float rmin, int nstep,
                                  uint16_t *d_out, uint16_t *dmin_out, uint8_t *scales, uint8_t *L)
{
    uint8_t ls[8], lm[8];
    float w[QK_K], mins[8], sc[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[32 * j + l] = av_x + fabsf(x[32 * j + l]);
    }
    fit_scale_min_group(simd, 8, 32, nmax, x, w, L, sc, mins, rmin, 0.1f, nstep, false);
    for (int j = 0; j < 8; j++) {
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        /* ggml stores the rounded value in a uint8_t before clamping */
        const uint8_t s = (uint8_t)quant_nearest_int(inv_scale * sc[j]);
        const uint8_t m = (uint8_t)quant_nearest_int(inv_min * mins[j]);
        ls[j] = s < 63 ? s : 63;
        lm[j] = m < 63 ? m : 63;
    }
    memset(scales, 0, K_SCALE_SIZE);
    pack_scale_min_k4(ls, lm, scales);
    *d_out = f32_to_f16(max_scale / 63.f);
    *dmin_out = f32_to_f16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t s, m;
        quant_k_get_scale_min(j, scales, &s, &m);
        const float d = f16_to_f32(*d_out) * (float)s;
        if (d == 0) continue;
        const float dm = f16_to_f32(*dmin_out) * (float)m;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)clampi(quant_nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

K_TEMPLATE void quant_q4_K_with(bool simd, const float *x, void *dst, int64_t n)
{
    block_q4_K *y = dst;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, y++, x += QK_K) {
        uint8_t L[QK_K];
        quant_k_scale_min(simd, x, 15, -1.f, 20, &y->d, &y->dmin, y->scales, L);
        /* byte l of each 32-byte group: value l (low nibble) and l + 32 (high) */
        for (int j = 0; j < QK_K; j += 64)
            for (int l = 0; l < 32; l++)
                y->qs[j / 2 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

K_TEMPLATE void quant_q5_K_with(bool simd, const float *x, void *dst, int64_t n)
{
    block_q5_K *y = dst;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, y++, x += QK_K) {
        uint8_t L[QK_K];
        quant_k_scale_min(simd, x, 31, -0.5f, 15, &y->d, &y->dmin, y->scales, L);
        memset(y->qh, 0, sizeof y->qh);
        /* as Q4_K for the low nibbles; the 5th bit of values j+64k and j+64k+32
         * go to qh[j] bits 2k and 2k+1 */
        for (int k = 0; k < 4; k++) {
            for (int j = 0; j < 32; j++) {
                const int l1 = L[64 * k + j], l2 = L[64 * k + j + 32];
                y->qh[j] |= (uint8_t)((l1 >> 4) << (2 * k) | (l2 >> 4) << (2 * k + 1));
                y->qs[32 * k + j] = (uint8_t)((l1 & 0x0f) | (l2 & 0x0f) << 4);
            }
        }
    }
}

/* ---- quantize: Q6_K, Q8_K -------------------------------------------------------- */

K_TEMPLATE void quant_q6_K_with(bool simd, const float *x, void *dst, int64_t n)
{
    block_q6_K *y = dst;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, y++, x += QK_K) {
        int8_t L[QK_K];
        float scales[16], max_scale = 0, max_abs = 0;
        fit_scale_sym_group(simd, 16, 16, 32, x, L, scales);
        for (int j = 0; j < 16; j++) {
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs < GROUP_MAX_EPS) {
            memset(y, 0, sizeof *y);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y->d = f32_to_f16(1 / iscale);
        for (int j = 0; j < 16; j++) {
            const int s = quant_nearest_int(iscale * scales[j]);
            y->scales[j] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; j++) {
            const float d = f16_to_f32(y->d) * (float)y->scales[j];
            if (d == 0) continue;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(clampi(quant_nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }
        /* per 128 values: ql holds low nibbles of (l, l+64) and (l+32, l+96),
         * qh the top 2 bits of l, l+32, l+64, l+96 */
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = y->ql + 64 * h, *qh = y->qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0x0f) | (Lh[l + 64] & 0x0f) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0x0f) | (Lh[l + 96] & 0x0f) << 4);
                qh[l] = (uint8_t)(Lh[l] >> 4 | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 |
                                  (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

void quant_quant_q8_K(const float *x, void *dst, int64_t n)
{
    block_q8_K *y = dst;
    LLM_ASSERT(n % QK_K == 0);
    for (int64_t i = 0; i < n / QK_K; i++, y++, x += QK_K) {
        float amax;
        const float max = signed_absmax(QK_K, x, &amax);
        memset(y, 0, sizeof *y);
        if (amax == 0) continue;
        /* -127 rather than -128 so that every quant negates within int8 */
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = quant_nearest_int(iscale * x[j]);
            y->qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += y->qs[16 * j + l];
            y->bsums[j] = (int16_t)sum;
        }
        y->d = 1 / iscale;
    }
}

/* ---- the twins' tables (quant_ops.h; quant.c chooses) ----------------------------- */

#define K_INSTANTIATE(name, simd, suffix)                                                \
    static void name##_##suffix(const float *x, void *dst, int64_t n) { name##_with(simd, x, dst, n); }
K_INSTANTIATE(quant_q2_K, false, scalar)
K_INSTANTIATE(quant_q4_K, false, scalar)
K_INSTANTIATE(quant_q5_K, false, scalar)
K_INSTANTIATE(quant_q6_K, false, scalar)

const quant_k_ops quant_k_ops_scalar = {
    .dequant_q2_K = quant_k_dequant_q2_K_scalar,
    .dequant_q3_K = quant_k_dequant_q3_K_scalar,
    .dequant_q4_K = quant_k_dequant_q4_K_scalar,
    .dequant_q5_K = quant_k_dequant_q5_K_scalar,
    .dequant_q6_K = quant_k_dequant_q6_K_scalar,
    .quant_q2_K = quant_q2_K_scalar,
    .quant_q4_K = quant_q4_K_scalar,
    .quant_q5_K = quant_q5_K_scalar,
    .quant_q6_K = quant_q6_K_scalar,
};

#if defined(__x86_64__)
K_INSTANTIATE(quant_q2_K, true, avx2)
K_INSTANTIATE(quant_q4_K, true, avx2)
K_INSTANTIATE(quant_q5_K, true, avx2)
K_INSTANTIATE(quant_q6_K, true, avx2)

const quant_k_ops quant_k_ops_avx2 = {
    .dequant_q2_K = quant_k_dequant_q2_K_avx2,
    .dequant_q3_K = quant_k_dequant_q3_K_avx2,
    .dequant_q4_K = quant_k_dequant_q4_K_avx2,
    .dequant_q5_K = quant_k_dequant_q5_K_avx2,
    .dequant_q6_K = quant_k_dequant_q6_K_avx2,
    .quant_q2_K = quant_q2_K_avx2,
    .quant_q4_K = quant_q4_K_avx2,
    .quant_q5_K = quant_q5_K_avx2,
    .quant_q6_K = quant_q6_K_avx2,
};
#endif

/* The kernels of quant.h with twins: through the table in use. */
void quant_dequant_q2_K(const void *src, float *dst, int64_t n) { quant_ops_active()->k->dequant_q2_K(src, dst, n); }
void quant_dequant_q3_K(const void *src, float *dst, int64_t n) { quant_ops_active()->k->dequant_q3_K(src, dst, n); }
void quant_dequant_q4_K(const void *src, float *dst, int64_t n) { quant_ops_active()->k->dequant_q4_K(src, dst, n); }
void quant_dequant_q5_K(const void *src, float *dst, int64_t n) { quant_ops_active()->k->dequant_q5_K(src, dst, n); }
void quant_dequant_q6_K(const void *src, float *dst, int64_t n) { quant_ops_active()->k->dequant_q6_K(src, dst, n); }
void quant_quant_q2_K(const float *src, void *dst, int64_t n) { quant_ops_active()->k->quant_q2_K(src, dst, n); }
void quant_quant_q4_K(const float *src, void *dst, int64_t n) { quant_ops_active()->k->quant_q4_K(src, dst, n); }
void quant_quant_q5_K(const float *src, void *dst, int64_t n) { quant_ops_active()->k->quant_q5_K(src, dst, n); }
void quant_quant_q6_K(const float *src, void *dst, int64_t n) { quant_ops_active()->k->quant_q6_K(src, dst, n); }
