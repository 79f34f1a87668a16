/*
 * kernels.c - the scalar reference kernels (the definition every SIMD table matches bit
 * for bit), the q8t layout (packing, row dequantization), the blocking of a product into
 * micro-kernel calls (shared by every table), and the dispatch between instruction sets.
 *
 * Keep the scalar functions plain: they are the definition (tests/check_kernels.c).
 */
#include "kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "f16.h"
#include "log.h"

/* ---- weight layout ---------------------------------------------------------------- */

void kern_q8_quantize_w(const float *src, int64_t cols, void *dst)
{
    const qt_traits *q8 = qt_get(QT_Q8_0);
    int64_t whole = cols / KERN_QK * KERN_QK;
    if (whole) q8->quant(src, dst, whole);
    if (whole < cols) {
        float tail[KERN_QK] = {0};
        memcpy(tail, src + whole, (size_t)(cols - whole) * sizeof(float));
        q8->quant(tail, (block_q8_0 *)dst + whole / KERN_QK, KERN_QK);
    }
}

void kern_q8t_pack(const void *q8_rows, int n, int64_t cols, void *tile)
{
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK, nsb = kern_nsb(cols);
    size_t rb = kern_q8_row_bytes(cols);
    kern_q8t_sb *sb = tile;
    memset(tile, 0, kern_q8t_tile_bytes(cols));
    for (int64_t s = 0; s < nsb; s++)
        memset(sb[s].q, 0x80, sizeof sb[s].q); /* value 0 */
    for (int r = 0; r < n; r++) {
        const block_q8_0 *row = (const block_q8_0 *)((const char *)q8_rows + (size_t)r * rb);
        for (int64_t k = 0; k < nb; k++) {
            kern_q8t_sb *s = &sb[k / KERN_SB_BLOCKS];
            int b = (int)(k % KERN_SB_BLOCKS);
            s->d[b][r] = row[k].d;
            for (int g = 0; g < KERN_QK / 4; g++) { /* four values at once: w ^ 0x80 = w + 128 */
                uint32_t v;
                memcpy(&v, row[k].qs + 4 * g, 4);
                v ^= 0x80808080u;
                memcpy(s->q[b][g][r], &v, 4);
            }
        }
    }
}

void kern_q8t_dequant_row(const void *w, int64_t cols, int64_t r, float *dst)
{
    const kern_q8t_sb *sb = (const kern_q8t_sb *)((const char *)w + (size_t)(r / KERN_TILE) * kern_q8t_tile_bytes(cols));
    int lane = (int)(r % KERN_TILE);
    for (int64_t k = 0; k * KERN_QK < cols; k++) {
        const kern_q8t_sb *s = &sb[k / KERN_SB_BLOCKS];
        int b = (int)(k % KERN_SB_BLOCKS), n = cols - k * KERN_QK < KERN_QK ? (int)(cols - k * KERN_QK) : KERN_QK;
        float d = f16_to_f32(s->d[b][lane]);
        for (int j = 0; j < n; j++) dst[k * KERN_QK + j] = d * (float)((int)s->q[b][j / 4][lane][j % 4] - 128);
    }
}

/* ---- activations ------------------------------------------------------------------ */

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

/* Rows to the xq layout. ik: ik_llama.cpp's rounding for Q8_0 weights (its Q8_2_X4
 * activations: scale amax / 127 rounded to bf16, values rint(x / scale) with that rounded
 * scale); else llama.cpp's AVX2 quantize_row_q8_0 rounding (id = 127/amax, q = rint(x *
 * id), the scale stored as the float value of its half). The padding blocks are zero. */
static void xq_rows(const float *x, int64_t n_rows, int64_t cols, void *dst, bool ik)
{
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK, nbp = kern_nsb(cols) * KERN_SB_BLOCKS;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *src = x + r * cols;
        int8_t *q = (int8_t *)dst + (size_t)r * kern_xq_row_bytes(cols);
        float *d = (float *)(q + nbp * KERN_QK);
        int32_t *c = (int32_t *)(d + nbp);
        for (int64_t i = 0; i < nbp; i++) {
            float v[KERN_QK] = {0};
            int64_t n = i >= nb ? 0 : cols - i * KERN_QK < KERN_QK ? cols - i * KERN_QK : KERN_QK;
            memcpy(v, src + i * KERN_QK, (size_t)n * sizeof(float));
            float amax = 0.0f, id;
            for (int j = 0; j < KERN_QK; j++) amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
            if (ik) {
                d[i] = bf16_to_f32(f32_to_bf16(amax / 127.0f));
                id = d[i] > 0.0f ? 1.0f / d[i] : 0.0f;
            } else {
                id = amax != 0.0f ? 127.0f / amax : 0.0f;
                d[i] = f16_to_f32(f32_to_f16(amax / 127.0f));
            }
            int32_t sum = 0;
            for (int j = 0; j < KERN_QK; j++) sum += q[i * KERN_QK + j] = sat_i8(v[j] * id);
            c[i] = -128 * sum;
        }
    }
}

static void scalar_xq_quantize(const float *x, int64_t n_rows, int64_t cols, void *dst)
{
    xq_rows(x, n_rows, cols, dst, false);
}

/* ik_llama.cpp's rounding (a comparison mode, below). */
void kern_x2_quantize(const float *x, int64_t n_rows, int64_t cols, void *dst) { xq_rows(x, n_rows, cols, dst, true); }

/* ggml's vector expf (ggml_v_expf), lane for lane. */
static float ggml_expf(float x)
{
    const float r = 0x1.8p23f;
    float n = fmaf(x, 0x1.715476p+0f, r) - r;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

void kern_softcap(float *s, int64_t n, float cap, int64_t n_vec)
{
    float inv = 1.0f / cap, two_inv = 2.0f * inv;
    for (int64_t i = 0; i < n; i++) {
        if (i < n_vec) {
            float e = ggml_expf(s[i] * two_inv);
            s[i] = (e - 1.0f) / (e + 1.0f) * cap;
        } else {
            s[i] = cap * tanhf(s[i] * inv);
        }
    }
}

/* ---- the product: the definition ---------------------------------------------------- */

static void scalar_q8t_block(const uint8_t *w, size_t tb, int nr, int64_t nsb, const uint8_t *xq,
                             size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    (void)stream;
    int64_t nbp = nsb * KERN_SB_BLOCKS;
    (void)nr;
    for (int i = lo; i < hi; i++) {
        const kern_q8t_sb *sb = (const kern_q8t_sb *)(w + (size_t)(i / KERN_TILE) * tb);
        int lane = i % KERN_TILE;
        for (int t = 0; t < nt; t++) {
            const int8_t *xqs = (const int8_t *)(xq + (size_t)t * xs);
            const float *dx = (const float *)(xqs + nbp * KERN_QK);
            float acc = 0.0f;
            for (int64_t k = 0; k < nbp; k++) {
                const kern_q8t_sb *s = &sb[k / KERN_SB_BLOCKS];
                int b = (int)(k % KERN_SB_BLOCKS);
                int32_t isum = 0;
                for (int j = 0; j < KERN_QK; j++)
                    isum += ((int32_t)s->q[b][j / 4][lane][j % 4] - 128) * xqs[k * KERN_QK + j];
                acc = fmaf((float)isum, f16_to_f32(s->d[b][lane]) * dx[k], acc);
            }
            y[(int64_t)t * ldy + i] = acc;
        }
    }
}

/* ---- blocking, shared by every table ------------------------------------------------- */

/* Weight bytes of a panel of tiles that stays in L2 while every token tile passes. */
#define KERN_PANEL_BYTES (384 * 1024)

/* Tiles per panel: what fits KERN_PANEL_BYTES, in whole micro-kernel calls. */
static int64_t panel_tiles(const kern_ops *ops, size_t tb, int64_t csize)
{
    int64_t nrow = ops->q8t_rows[csize], panel = (int64_t)(KERN_PANEL_BYTES / tb);
    return panel < nrow ? nrow : panel / nrow * nrow;
}

/* Token chunk size: chunks of nearly equal size, none above the table's tmax. */
static int64_t chunk_size(const kern_ops *ops, int64_t n_tok)
{
    int64_t chunks = (n_tok + ops->q8t_tmax - 1) / ops->q8t_tmax;
    return (n_tok + chunks - 1) / chunks;
}

int64_t kern_q8t_panel_rows(int64_t cols, int64_t n_tok)
{
    const kern_ops *ops = kern_active;
    return panel_tiles(ops, kern_q8t_tile_bytes(cols), chunk_size(ops, n_tok < 1 ? 1 : n_tok)) * KERN_TILE;
}

void kern_q8t_matmul(const void *w, int64_t cols, const void *xq, int64_t n_tok,
                     float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    if (n_tok <= 0 || r0 >= r1) return;
    const kern_ops *ops = kern_active;
    int64_t nsb = kern_nsb(cols);
    size_t tb = kern_q8t_tile_bytes(cols), xs = kern_xq_row_bytes(cols);
    int64_t t0 = r0 / KERN_TILE, t1 = (r1 + KERN_TILE - 1) / KERN_TILE;
    int64_t csize = chunk_size(ops, n_tok), chunks = (n_tok + csize - 1) / csize;
    int64_t panel = panel_tiles(ops, tb, csize);
    const uint8_t *W = w, *X = xq;
    for (int64_t p0 = t0; p0 < t1; p0 += panel) {
        int64_t p1 = p0 + panel < t1 ? p0 + panel : t1;
        for (int64_t k0 = 0; k0 < n_tok; k0 += csize) {
            int nt = (int)(n_tok - k0 < csize ? n_tok - k0 : csize);
            int nr = ops->q8t_rows[nt];
            for (int64_t tile = p0; tile < p1; tile += nr) {
                int n = (int)(p1 - tile < nr ? p1 - tile : nr);
                int64_t base = tile * KERN_TILE;
                int lo = (int)(r0 > base ? r0 - base : 0);
                int hi = (int)(r1 - base < n * KERN_TILE ? r1 - base : n * KERN_TILE);
                ops->q8t_block(W + (size_t)tile * tb, tb, n, nsb, X + (size_t)k0 * xs, xs, nt,
                               y + k0 * ldy + base, ldy, lo, hi, chunks == 1);
            }
        }
    }
}

/* ---- attention and element-wise pieces: the definitions ------------------------------- */

/* kern_expf for x in [-87, 88]. */
static float expf_core(float x)
{
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r);
    p = p + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, 4);
    return p * s;
}

float kern_expf(float x)
{
    if (x > 88.0f) return INFINITY;
    if (!(x >= -87.0f)) return x != x ? x : 0.0f;
    return expf_core(x);
}

void kern_kv_q8_row(const float *x, int64_t n, void *row) { qt_get(QT_Q8_0)->quant(x, row, n); }

void kern_kv_q8_key(const float *x, int64_t n, void *tile, int j)
{
    block_q8_0 b;
    for (int64_t g = 0; g < n / KERN_QK; g++) {
        uint8_t *grp = (uint8_t *)tile + (size_t)g * KERN_KVQ_GROUP;
        qt_get(QT_Q8_0)->quant(x + g * KERN_QK, &b, KERN_QK);
        memcpy(grp + 2 * j, &b.d, 2);
        for (int k = 0; k < KERN_QK; k++) grp[KERN_KVQ_AT(k, j)] = (uint8_t)b.qs[k];
    }
}

void kern_att_q8_query(const float *q, int64_t qs, int nq, int d, kern_qq *dst)
{
    for (int r = 0; r < nq; r++)
        for (int b = 0; b < d / KERN_QK; b++) {
            const float *x = q + r * qs + b * KERN_QK;
            kern_qq *o = dst + (size_t)r * (d / KERN_QK) + b;
            float amax = 0.0f;
            for (int k = 0; k < KERN_QK; k++) amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax;
            const float dq = amax / 127.0f, id = dq != 0.0f ? 1.0f / dq : 0.0f;
            int32_t sh = 0, sl = 0;
            for (int k = 0; k < KERN_QK; k++) {
                float y = x[k] * id, h = roundf(y);
                o->h[k] = (int8_t)h;
                o->l[k] = (int8_t)roundf((y - h) * 254.0f);
                sh += o->h[k];
                sl += o->l[k];
            }
            o->u = dq / 254.0f;
            o->bias_h = -128 * sh;
            o->bias_l = -128 * sl;
        }
}

/* Element (dim k, position j) of an f16 or f32 key tile. */
static float key_at(const void *kt, int kvt, int k, int j)
{
    int64_t i = (int64_t)k * KERN_TILE + j;
    return kvt == KERN_KV_F16 ? f16_to_f32(((const uint16_t *)kt)[i]) : ((const float *)kt)[i];
}

/* Element i of value row t (rows vs elements apart). */
static float val_at(const void *v, int kvt, int64_t vs, int64_t t, int i)
{
    if (kvt == KERN_KV_Q8_0) {
        const uint8_t *b = (const uint8_t *)v + kern_kv_bytes(kvt, t * vs) + (size_t)(i / KERN_QK) * 34;
        uint16_t h;
        memcpy(&h, b, 2);
        return f16_to_f32(h) * (float)(int8_t)b[2 + i % KERN_QK];
    }
    return kvt == KERN_KV_F16 ? f16_to_f32(((const uint16_t *)v)[t * vs + i]) : ((const float *)v)[t * vs + i];
}

static void scalar_att_qk(const float *q, int64_t qs, int nq, const void *kt, int64_t kts, int kvt, int d,
                          int64_t ntiles, float scale, float *sc, int64_t lds)
{
    for (int r = 0; r < nq; r++)
        for (int64_t i = 0; i < ntiles; i++) {
            const void *tile = (const char *)kt + kern_kv_bytes(kvt, i * kts);
            for (int j = 0; j < KERN_TILE; j++) {
                float a[2] = { 0.0f, 0.0f };
                for (int k = 0; k < d; k++) a[k % 2] = fmaf(q[r * qs + k], key_at(tile, kvt, k, j), a[k % 2]);
                sc[r * lds + i * KERN_TILE + j] = (a[0] + a[1]) * scale;
            }
        }
}

static void scalar_att_qk8(const kern_qq *qq, int nq, const void *kt, int64_t kts, int d, int64_t ntiles, float scale,
                           float *sc, int64_t lds)
{
    const int nb = d / KERN_QK;
    for (int r = 0; r < nq; r++)
        for (int64_t i = 0; i < ntiles; i++) {
            const uint8_t *tile = (const uint8_t *)kt + kern_kv_bytes(KERN_KV_Q8_0, i * kts);
            for (int j = 0; j < KERN_TILE; j++) {
                float a = 0.0f;
                for (int b = 0; b < nb; b++) {
                    const uint8_t *g = tile + (size_t)b * KERN_KVQ_GROUP;
                    const kern_qq *x = qq + (size_t)r * nb + b;
                    int32_t ih = 0, il = 0;
                    for (int k = 0; k < KERN_QK; k++) {
                        ih += x->h[k] * (int8_t)g[KERN_KVQ_AT(k, j)];
                        il += x->l[k] * (int8_t)g[KERN_KVQ_AT(k, j)];
                    }
                    uint16_t h;
                    memcpy(&h, g + 2 * j, 2);
                    a = fmaf(f16_to_f32(h) * x->u, (float)(254 * ih + il), a);
                }
                sc[r * lds + i * KERN_TILE + j] = a * scale;
            }
        }
}

static void scalar_att_pv(const float *p, int64_t lds, int nq, int64_t a, int64_t b, const void *v,
                          int64_t vs, int kvt, int d, float *out, int64_t os)
{
    for (int r = 0; r < nq; r++)
        for (int i = 0; i < d; i++) {
            float acc = out[r * os + i];
            for (int64_t t = a; t <= b; t++) acc = fmaf(p[r * lds + t], val_at(v, kvt, vs, t, i), acc);
            out[r * os + i] = acc;
        }
}

static void scalar_softmax(float *s, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    double lane[32] = {0};
    for (int64_t i = 0; i < n; i++) {
        s[i] = kern_expf(s[i] - mx);
        lane[i % 32] += (double)s[i];
    }
    for (int w = 16; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) lane[j] += lane[j + w];
    float inv = (float)(1.0 / lane[0]);
    for (int64_t i = 0; i < n; i++) s[i] *= inv;
}

static void scalar_silu_mul(float *g, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + kern_expf(-g[i])) * up[i];
}

static void scalar_gelu_mul(float *g, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float x = g[i];
        float t = 1.0f + 0.044715f * (x * x);
        float u = (0.79788456080286535587989211986876f * x) * t;
        g[i] = x / (1.0f + kern_expf(-(u + u))) * up[i];
    }
}

/* ---- float helpers ------------------------------------------------------------------ */

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

const kern_ops kern_ops_scalar = {
    .name = "scalar",
    .xq_quantize = scalar_xq_quantize,
    .xk_quantize = kern_xk_quantize_ref,
    .q8t_block = scalar_q8t_block,
    .q8t_tmax = KERN_MICRO_T,
    .q8t_rows = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 },
    .qn_block = kern_qn_block_ref,
    .qn_tmax = 16,
    .f32_matmul = scalar_f32_matmul,
    .att_qk = scalar_att_qk,
    .att_qk8 = scalar_att_qk8,
    .att_pv = scalar_att_pv,
    .softmax = scalar_softmax,
    .silu_mul = scalar_silu_mul,
    .gelu_mul = scalar_gelu_mul,
    .f32_dot = scalar_f32_dot,
    .f32_axpy = scalar_f32_axpy,
    .f16_dot = scalar_f16_dot,
    .f16_axpy = scalar_f16_axpy,
    .f32_to_f16 = scalar_f32_to_f16,
    .f16_to_f32 = scalar_f16_to_f32,
};

const kern_ops *kern_active = &kern_ops_scalar;

/* ---- dispatch ------------------------------------------------------------------------- */

/* Every table compiled in, in order of preference, with the CPU features it needs
 * (common/cpu.h's dispatch convention; LLM_KERNELS overrides). */
#define KERN_AVX2_NEEDS (CPU_AVX2 | CPU_FMA | CPU_F16C)
static const cpu_impl all_ops[] = {
#if defined(__x86_64__)
    { "avx512vnni", KERN_AVX2_NEEDS | CPU_AVX512VNNI, &kern_ops_avx512vnni },
    { "avxvnni", KERN_AVX2_NEEDS | CPU_AVXVNNI, &kern_ops_avxvnni },
    { "avx2", KERN_AVX2_NEEDS, &kern_ops_avx2 },
#endif
#if defined(__aarch64__)
    { "neoni8mm", CPU_NEON_DOT | CPU_NEON_I8MM, &kern_ops_neoni8mm },
    { "neon", CPU_NEON_DOT, &kern_ops_neon },
#endif
    { "scalar", 0, &kern_ops_scalar },
};
enum { N_OPS = sizeof all_ops / sizeof all_ops[0] };

const kern_ops *kern_get(const char *name)
{
    const cpu_impl *c = cpu_impl_get(all_ops, N_OPS, name);
    return c ? c->table : NULL;
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
    kern_active = cpu_impl_pick(all_ops, N_OPS, "LLM_KERNELS")->table;
}

const char *kern_name(void) { return kern_active->name; }
