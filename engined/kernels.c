/*
 * kernels.c - the scalar reference kernels and the dispatch between instruction sets.
 *
 * Every SIMD variant (kernels_avx2.c, kernels_avx512.c, kernels_neon.c) must agree with
 * the functions here: bit-exact for quantization, within float summation order for
 * the products (tests/check_kernels.c). Keep these plain: they are the definition.
 */
#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "f16.h"
#include "log.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

/* float -> int8 as the SIMD code does it: cvtps_epi32 gives INT32_MIN for NaN and
 * out-of-range values, and the saturating packs then clamp to [-128, 127]. */
static int8_t sat_i8(float v)
{
    if (!(v >= -2147483648.0f && v < 2147483648.0f)) return -128;
    float r = nearbyintf(v); /* round half to even in the default rounding mode */
    if (r > 127.0f) return 127;
    if (r < -128.0f) return -128;
    return (int8_t)r;
}

void kern_q8_quantize_w(const float *src, int64_t cols, void *dst)
{
    kern_q8_block *b = dst;
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK;
    for (int64_t i = 0; i < nb; i++) {
        float v[KERN_QK] = {0};
        int64_t n = cols - i * KERN_QK < KERN_QK ? cols - i * KERN_QK : KERN_QK;
        memcpy(v, src + i * KERN_QK, (size_t)n * sizeof(float));
        float amax = 0.0f;
        for (int j = 0; j < KERN_QK; j++) amax = fmaxf(amax, fabsf(v[j]));
        /* ggml's quantize_row_q8_0_ref: d = amax/127, q = roundf(x / d) */
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].d = f32_to_f16(d);
        for (int j = 0; j < KERN_QK; j++) {
            float x = v[j] * id;
            b[i].qs[j] = isfinite(x) ? (int8_t)fmaxf(-128.0f, fminf(127.0f, roundf(x))) : 0;
        }
    }
}

void kern_q8_dequantize(const void *src, int64_t cols, float *dst)
{
    const kern_q8_block *b = src;
    for (int64_t i = 0; i < cols; i++)
        dst[i] = f16_to_f32(b[i / KERN_QK].d) * (float)b[i / KERN_QK].qs[i % KERN_QK];
}

/* llama.cpp's AVX2 quantize_row_q8_0 rounding: id = 127/amax, q = rint(x * id). */
static void scalar_q8_quantize_x(const float *x, int64_t n_rows, int64_t cols, void *dst)
{
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *src = x + r * cols;
        kern_q8_block *b = (kern_q8_block *)((char *)dst + (size_t)r * kern_q8_row_bytes(cols));
        for (int64_t i = 0; i < nb; i++) {
            float v[KERN_QK] = {0};
            int64_t n = cols - i * KERN_QK < KERN_QK ? cols - i * KERN_QK : KERN_QK;
            memcpy(v, src + i * KERN_QK, (size_t)n * sizeof(float));
            float amax = 0.0f;
            for (int j = 0; j < KERN_QK; j++) amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
            float id = amax != 0.0f ? 127.0f / amax : 0.0f;
            b[i].d = f32_to_f16(amax / 127.0f);
            for (int j = 0; j < KERN_QK; j++) b[i].qs[j] = sat_i8(v[j] * id);
        }
    }
}

static float q8_dot_row(const kern_q8_block *w, const kern_q8_block *x, int64_t nb)
{
    float sum = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int32_t s = 0;
        for (int j = 0; j < KERN_QK; j++) s += (int32_t)w[i].qs[j] * (int32_t)x[i].qs[j];
        sum += (float)s * (f16_to_f32(w[i].d) * f16_to_f32(x[i].d));
    }
    return sum;
}

static void scalar_q8_matmul(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                             float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK;
    const kern_q8_block *W = w, *X = xq;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++)
            y[t * ldy + r] = q8_dot_row(W + r * nb, X + t * nb, nb);
}

static float scalar_f32_dot(const float *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void scalar_f32_axpy(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static float scalar_f16_dot(const uint16_t *a, const float *b, int64_t n)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += f16_to_f32(a[i]) * b[i];
    return s;
}

static void scalar_f16_axpy(float *y, float a, const uint16_t *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += a * f16_to_f32(x[i]);
}

static void scalar_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = f32_to_f16(x[i]);
}

static void scalar_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = f16_to_f32(x[i]);
}

static void scalar_f32_matmul(const float *w, int64_t cols, const float *x, int64_t n_tok,
                              float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++)
            y[t * ldy + r] = scalar_f32_dot(w + r * cols, x + t * cols, cols);
}

static void scalar_f16_matmul(const uint16_t *w, int64_t cols, const float *x, int64_t n_tok,
                              float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = r0; r < r1; r++)
            y[t * ldy + r] = scalar_f16_dot(w + r * cols, x + t * cols, cols);
}

const kern_ops kern_ops_scalar = {
    .name = "scalar",
    .q8_quantize_x = scalar_q8_quantize_x,
    .q8_matmul = scalar_q8_matmul,
    .f32_matmul = scalar_f32_matmul,
    .f16_matmul = scalar_f16_matmul,
    .f32_dot = scalar_f32_dot,
    .f32_axpy = scalar_f32_axpy,
    .f16_dot = scalar_f16_dot,
    .f16_axpy = scalar_f16_axpy,
    .f32_to_f16 = scalar_f32_to_f16,
    .f16_to_f32 = scalar_f16_to_f32,
};

const kern_ops *kern_active = &kern_ops_scalar;

/* Variants in order of preference, each with the CPU test that allows it. */
static int cpu_has(const char *name)
{
    if (!strcmp(name, "scalar")) return 1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    unsigned a, b, c, d; /* F16C: clang 14's __builtin_cpu_supports does not know it */
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    if (!strcmp(name, "avx2")) return avx2;
    if (!strcmp(name, "avx512vnni") || !strcmp(name, "avx512vnni-fast"))
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
#if defined(__aarch64__)
    if (!strcmp(name, "neon")) return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; /* sdot */
#endif
    return 0;
}

static const kern_ops *const all_ops[] = {
#if defined(__x86_64__)
    &kern_ops_avx512vnni, &kern_ops_avx2, &kern_ops_avx512vnni_fast,
#endif
#if defined(__aarch64__)
    &kern_ops_neon,
#endif
    &kern_ops_scalar,
};

const kern_ops *kern_get(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof all_ops / sizeof all_ops[0]; i++)
        if (!strcmp(all_ops[i]->name, name)) return cpu_has(name) ? all_ops[i] : NULL;
    return NULL;
}

int kern_select(const char *name)
{
    const kern_ops *ops = kern_get(name);
    if (!ops) return -1;
    kern_active = ops;
    return 0;
}

void kern_init(void)
{
    for (size_t i = 0; i < sizeof all_ops / sizeof all_ops[0]; i++)
        if (cpu_has(all_ops[i]->name) && !strstr(all_ops[i]->name, "-fast")) {
            kern_active = all_ops[i];
            break;
        }
    const char *env = getenv("LLM_KERNELS");
    if (env && *env && kern_select(env) != 0)
        log_warn("LLM_KERNELS=%s: unknown or not supported on this CPU; using %s", env,
                 kern_active->name);
}

const char *kern_name(void) { return kern_active->name; }
