/*
 * kernels_qn.c - the native 2-, 4-, 5- and 6-bit weight layouts ("qn" tiles: Q4_0, Q4_1,
 * Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, Q2_K kept at their own width), their packing from GGUF
 * blocks, row dequantization, the scalar reference product (the definition every SIMD
 * table matches bit for bit) and the blocking of a product into table calls.
 *
 *   int wt = kern_qn_from_qtype(QT_Q4_K);                  // KERN_W_Q4_K, or -1
 *   size_t tb = kern_qn_tile_bytes(wt, cols);
 *   kern_qn_pack(wt, src_rows, src_row_bytes, n, cols, tile);   // 16 GGUF rows -> 1 tile
 *   kern_wmatmul(wt, w, cols, xq, n_tok, y, ldy, r0, r1);
 *
 * The layout and the product's order are stated in kernels.h. Owned by the engine.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

#include "f16.h"
#include "qtype.h"

/* Header bytes, superblock bytes (64-byte multiples), bits and kind of each type. */
static const kern_qn_desc descs[KERN_W_COUNT] = {
    [KERN_W_Q4_0] = { "q4_0", QT_Q4_0, KERN_QN_B0, 4, 8, 256, 2304 },
    [KERN_W_Q4_1] = { "q4_1", QT_Q4_1, KERN_QN_B1, 4, 0, 512, 2560 },
    [KERN_W_Q5_0] = { "q5_0", QT_Q5_0, KERN_QN_B0, 5, 16, 256, 2816 },
    [KERN_W_Q5_1] = { "q5_1", QT_Q5_1, KERN_QN_B1, 5, 0, 512, 3072 },
    [KERN_W_Q4_K] = { "q4_k", QT_Q4_K, KERN_QN_K, 4, 0, 320, 2368 },
    [KERN_W_Q5_K] = { "q5_k", QT_Q5_K, KERN_QN_K, 5, 0, 320, 2880 },
    [KERN_W_Q6_K] = { "q6_k", QT_Q6_K, KERN_QN_K6, 6, 32, 320, 3392 },
    [KERN_W_Q2_K] = { "q2_k", QT_Q2_K, KERN_QN_K2, 2, 0, 320, 1344 },
};

const kern_qn_desc *kern_qn_get(int wt)
{
    return wt > KERN_W_Q8T && wt < KERN_W_COUNT ? &descs[wt] : NULL;
}

int kern_qn_from_qtype(uint32_t src_type)
{
    if (src_type == QT_Q3_K) return KERN_W_Q6_K; /* exactly: q6 = q3 + 28, the same scales */
    for (int wt = KERN_W_Q8T + 1; wt < KERN_W_COUNT; wt++)
        if (descs[wt].qtype == src_type) return wt;
    return -1;
}

size_t kern_qn_tile_bytes(int wt, int64_t cols)
{
    const kern_qn_desc *D = &descs[wt];
    const int64_t sbv = KERN_QN_BLOCKS * KERN_QK; /* values of a super-block */
    size_t full = (size_t)(cols / sbv), rest = (size_t)(cols % sbv / KERN_QK);
    size_t last = rest ? D->hdr + rest * kern_qn_block_bytes(D->bits) : 0;
    return full * D->sb_bytes + (last + 63) / 64 * 64;
}

/* ---- packing ----------------------------------------------------------------------- */

/* One 32-value block of a source row, decoded: unsigned values and the block's scales. */
typedef struct {
    uint8_t  q[KERN_QK];
    uint16_t d, m;     /* f16: B0/B1 block scale and min; K: super-block d and dmin */
    int      sc[2];    /* K: 6-bit scale (sc[0]) and min (sc[1]); K6: the two 16-value scales;
                        * K2: the two halves' Q2_K bytes (scale | min << 4) */
} qn_src;

static uint32_t le32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static void k4_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Block k (32 values) of a Q3_K row, as Q6_K values: q3 - 4 = q6 - 32. */
static void src_block_q3_K(const uint8_t *row, int64_t k, qn_src *o)
{
    const block_q3_K *b = (const block_q3_K *)row + k / 8;
    int c = (int)(k % 8), half = c / 4, quarter = c % 4, sc[16];
    quant_q3_K_scales(b->scales, sc);
    o->d = b->d;
    const uint8_t *q = b->qs + 32 * half;
    for (int l = 0; l < KERN_QK; l++) {
        int q2 = (q[l] >> (2 * quarter)) & 3, h = (b->hmask[l] >> (4 * half + quarter)) & 1;
        o->q[l] = (uint8_t)(q2 + 4 * h + 28);
    }
    o->sc[0] = sc[2 * c];
    o->sc[1] = sc[2 * c + 1];
}

/* Block k of a source row of type src (wt's own type, or Q3_K for Q6_K). */
static void src_block(int wt, uint32_t src, const uint8_t *row, int64_t k, qn_src *o)
{
    memset(o, 0, sizeof *o);
    if (src == QT_Q3_K) {
        src_block_q3_K(row, k, o);
        return;
    }
    if (descs[wt].kind == KERN_QN_B0 || descs[wt].kind == KERN_QN_B1) {
        const uint8_t *b = row + (size_t)k * qt_row_size(descs[wt].qtype, KERN_QK);
        memcpy(&o->d, b, 2);
        int one = descs[wt].kind == KERN_QN_B1;
        if (one) memcpy(&o->m, b + 2, 2);
        const uint8_t *p = b + 2 + 2 * one;
        uint32_t qh = 0;
        if (descs[wt].bits == 5) {
            qh = le32(p);
            p += 4;
        }
        for (int j = 0; j < 16; j++) {
            o->q[j] = (uint8_t)((p[j] & 15) | ((qh >> j) & 1) << 4);
            o->q[j + 16] = (uint8_t)((p[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        }
        return;
    }
    const int64_t s = k / 8;
    const int c = (int)(k % 8); /* 32-value block inside the super-block */
    if (wt == KERN_W_Q2_K) { /* values 128 half + 32 (c % 4) + l: bits 2 (c % 4) of qs[32 half + l] */
        const block_q2_K *b = (const block_q2_K *)row + s;
        o->d = b->d, o->m = b->dmin;
        int half = c / 4, shift = 2 * (c % 4);
        for (int l = 0; l < KERN_QK; l++) o->q[l] = (uint8_t)((b->qs[32 * half + l] >> shift) & 3);
        o->sc[0] = b->scales[2 * c];
        o->sc[1] = b->scales[2 * c + 1];
        return;
    }
    if (wt == KERN_W_Q6_K) {
        const block_q6_K *b = (const block_q6_K *)row + s;
        o->d = b->d;
        int half = c / 4, quarter = c % 4; /* values 128 half + 32 quarter + l */
        const uint8_t *ql = b->ql + 64 * half + (quarter & 1) * 32, *qh = b->qh + 32 * half;
        for (int l = 0; l < KERN_QK; l++)
            o->q[l] = (uint8_t)(((ql[l] >> (4 * (quarter >> 1))) & 15) | ((qh[l] >> (2 * quarter)) & 3) << 4);
        o->sc[0] = b->scales[2 * c];
        o->sc[1] = b->scales[2 * c + 1];
        return;
    }
    const uint8_t *scales, *qs, *qh = NULL;
    if (wt == KERN_W_Q4_K) {
        const block_q4_K *b = (const block_q4_K *)row + s;
        o->d = b->d, o->m = b->dmin, scales = b->scales, qs = b->qs;
    } else {
        const block_q5_K *b = (const block_q5_K *)row + s;
        o->d = b->d, o->m = b->dmin, scales = b->scales, qs = b->qs, qh = b->qh;
    }
    k4_scale_min(scales, c, &o->sc[0], &o->sc[1]);
    for (int l = 0; l < KERN_QK; l++)
        o->q[l] = (uint8_t)(((qs[32 * (c / 2) + l] >> (4 * (c & 1))) & 15) | (qh ? ((qh[l] >> c) & 1) << 4 : 0));
}

/* Stores block b (0..7) of super-block sb for tile row r. */
static void put_block(int wt, uint8_t *sb, int b, int r, const qn_src *s)
{
    const kern_qn_desc *D = &descs[wt];
    uint16_t *h16 = (uint16_t *)sb;
    switch (D->kind) {
    case KERN_QN_B1: h16[KERN_QN_BLOCKS * KERN_TILE + b * KERN_TILE + r] = s->m; /* fall through */
    case KERN_QN_B0: h16[b * KERN_TILE + r] = s->d; break;
    case KERN_QN_K:
        h16[r] = s->d, h16[KERN_TILE + r] = s->m;
        sb[64 + b * KERN_TILE + r] = (uint8_t)s->sc[0];
        sb[192 + b * KERN_TILE + r] = (uint8_t)s->sc[1];
        break;
    case KERN_QN_K6:
        h16[r] = s->d;
        sb[64 + (2 * b) * KERN_TILE + r] = (uint8_t)(int8_t)s->sc[0];
        sb[64 + (2 * b + 1) * KERN_TILE + r] = (uint8_t)(int8_t)s->sc[1];
        break;
    case KERN_QN_K2:
        h16[r] = s->d, h16[KERN_TILE + r] = s->m;
        sb[64 + (2 * b) * KERN_TILE + r] = (uint8_t)s->sc[0];
        sb[64 + (2 * b + 1) * KERN_TILE + r] = (uint8_t)s->sc[1];
        for (int j = 0; j < KERN_QK; j++) {
            int g = j / 4, i = 4 * r + j % 4;
            sb[D->hdr + 128 * b + 64 * (g / 4) + i] |= (uint8_t)(s->q[j] << (2 * (g % 4)));
        }
        return;
    }
    uint8_t *nib = sb + D->hdr + kern_qn_block_bytes(D->bits) * b, *hi = nib + 256;
    for (int j = 0; j < KERN_QK; j++) {
        int g = j / 4, i = 4 * r + j % 4, v = s->q[j];
        nib[64 * (g % 4) + i] |= (uint8_t)((v & 15) << (4 * (g / 4)));
        if (D->bits == 5) hi[i] |= (uint8_t)(((v >> 4) & 1) << g);
        if (D->bits == 6) hi[64 * (g / 4) + i] |= (uint8_t)(((v >> 4) & 3) << (2 * (g % 4)));
    }
}

void kern_qn_pack(int wt, uint32_t src, const void *src_rows, size_t src_row_bytes, int n, int64_t cols, void *tile)
{
    const kern_qn_desc *D = &descs[wt];
    memset(tile, 0, kern_qn_tile_bytes(wt, cols));
    int64_t nb = cols / KERN_QK;
    for (int r = 0; r < n; r++) {
        const uint8_t *row = (const uint8_t *)src_rows + (size_t)r * src_row_bytes;
        for (int64_t k = 0; k < nb; k++) {
            qn_src s;
            src_block(wt, src, row, k, &s);
            put_block(wt, (uint8_t *)tile + (size_t)(k / KERN_QN_BLOCKS) * D->sb_bytes, (int)(k % KERN_QN_BLOCKS), r, &s);
        }
    }
}

/* ---- reading a tile ------------------------------------------------------------------ */

/* Value j (0..31) of block b of row r in super-block sb (unsigned, 0..2^bits-1). */
static int qn_value(const kern_qn_desc *D, const uint8_t *sb, int b, int r, int j)
{
    int g = j / 4, i = 4 * r + j % 4;
    if (D->bits == 2) return (sb[D->hdr + 128 * b + 64 * (g / 4) + i] >> (2 * (g % 4))) & 3;
    const uint8_t *nib = sb + D->hdr + kern_qn_block_bytes(D->bits) * b, *hi = nib + 256;
    int v = (nib[64 * (g % 4) + i] >> (4 * (g / 4))) & 15;
    if (D->bits == 5) v |= ((hi[i] >> g) & 1) << 4;
    if (D->bits == 6) v |= ((hi[64 * (g / 4) + i] >> (2 * (g % 4))) & 3) << 4;
    return v;
}

static float h16(const uint8_t *sb, int i)
{
    uint16_t h;
    memcpy(&h, sb + 2 * i, 2);
    return f16_to_f32(h);
}

/* The float factors of block b, row r: value j = a[h] * q_j - c[h] (h = j / 16). */
static void qn_factors(const kern_qn_desc *D, const uint8_t *sb, int b, int r, float a[2], float c[2])
{
    switch (D->kind) {
    case KERN_QN_B0: a[0] = a[1] = h16(sb, b * KERN_TILE + r), c[0] = c[1] = a[0] * (float)D->offset; break;
    case KERN_QN_B1: a[0] = a[1] = h16(sb, b * KERN_TILE + r), c[0] = c[1] = -h16(sb, (KERN_QN_BLOCKS + b) * KERN_TILE + r); break;
    case KERN_QN_K:
        a[0] = a[1] = h16(sb, r) * (float)sb[64 + b * KERN_TILE + r];
        c[0] = c[1] = h16(sb, KERN_TILE + r) * (float)sb[192 + b * KERN_TILE + r];
        break;
    case KERN_QN_K2:
        for (int h = 0; h < 2; h++) {
            int sm = sb[64 + (2 * b + h) * KERN_TILE + r];
            a[h] = h16(sb, r) * (float)(sm & 15);
            c[h] = h16(sb, KERN_TILE + r) * (float)(sm >> 4);
        }
        break;
    default: /* K6 */
        for (int h = 0; h < 2; h++) a[h] = h16(sb, r) * (float)(int8_t)sb[64 + (2 * b + h) * KERN_TILE + r];
        c[0] = c[1] = NAN; /* per half: a[h] * 32 */
        break;
    }
}

void kern_qn_dequant_row(int wt, const void *w, int64_t cols, int64_t r, float *dst)
{
    const kern_qn_desc *D = &descs[wt];
    const uint8_t *tile = (const uint8_t *)w + (size_t)(r / KERN_TILE) * kern_qn_tile_bytes(wt, cols);
    int lane = (int)(r % KERN_TILE);
    for (int64_t k = 0; k < cols / KERN_QK; k++) {
        const uint8_t *sb = tile + (size_t)(k / KERN_QN_BLOCKS) * D->sb_bytes;
        int b = (int)(k % KERN_QN_BLOCKS);
        float a[2], c[2];
        qn_factors(D, sb, b, lane, a, c);
        for (int j = 0; j < KERN_QK; j++) {
            int q = qn_value(D, sb, b, lane, j);
            dst[k * KERN_QK + j] = D->kind == KERN_QN_K6 ? a[j / 16] * (float)(q - 32) : a[j / 16] * (float)q - c[j / 16];
        }
    }
}

/* ---- the product: the definition ------------------------------------------------------ */

/* y for row i, token t (kernels.h states this order): the B kinds block by block. */
static float qn_dot_b(const kern_qn_desc *D, const uint8_t *tile, int lane, int64_t nb, const uint8_t *xr,
                      kern_xq_offs o)
{
    const int8_t *xq = (const int8_t *)xr;
    const float *dx = (const float *)(xr + o.d), *sd = (const float *)(xr + o.sd);
    const int32_t *cx = (const int32_t *)(xr + o.c);
    float acc = 0.0f;
    for (int64_t k = 0; k < nb; k++) {
        const uint8_t *sb = tile + (size_t)(k / KERN_QN_BLOCKS) * D->sb_bytes;
        int b = (int)(k % KERN_QN_BLOCKS);
        int32_t p = 0;
        for (int j = 0; j < KERN_QK; j++) p += qn_value(D, sb, b, lane, j) * xq[k * KERN_QK + j];
        float d = h16(sb, b * KERN_TILE + lane);
        if (D->kind == KERN_QN_B0) {
            acc = fmaf((float)(p - D->offset * (-cx[k] / 128)), d * dx[k], acc);
        } else {
            acc = fmaf((float)p, d * dx[k], acc);
            acc = fmaf(h16(sb, (KERN_QN_BLOCKS + b) * KERN_TILE + lane), sd[k], acc);
        }
    }
    return acc;
}

/* The K kinds: exact int32 sums over each super-block, then its float step. */
static float qn_dot_k(const kern_qn_desc *D, const uint8_t *tile, int lane, int64_t nb, const uint8_t *xr,
                      kern_xq_offs o)
{
    const int8_t *xq = (const int8_t *)xr;
    const float *dx = (const float *)(xr + o.d);
    const int32_t *cx = (const int32_t *)(xr + o.c), *hs = (const int32_t *)(xr + o.hs);
    float acc = 0.0f, accm = 0.0f;
    for (int64_t k0 = 0; k0 < nb; k0 += KERN_QN_BLOCKS) {
        const uint8_t *sb = tile + (size_t)(k0 / KERN_QN_BLOCKS) * D->sb_bytes;
        int32_t is = 0, ms = 0;
        for (int b = 0; b < KERN_QN_BLOCKS && k0 + b < nb; b++) {
            int64_t k = k0 + b;
            int32_t p[2] = { 0, 0 }, S = -cx[k] / 128, S0 = hs[k];
            for (int j = 0; j < KERN_QK; j++) p[j / 16] += qn_value(D, sb, b, lane, j) * xq[k * KERN_QK + j];
            const uint8_t *sc = sb + 64 + 2 * b * KERN_TILE + lane; /* K6, K2: the two halves' bytes */
            if (D->kind == KERN_QN_K) {
                is += sb[64 + b * KERN_TILE + lane] * (p[0] + p[1]);
                ms += sb[192 + b * KERN_TILE + lane] * S;
            } else if (D->kind == KERN_QN_K6) {
                is += (int8_t)sc[0] * (p[0] - 32 * S0) + (int8_t)sc[KERN_TILE] * (p[1] - 32 * (S - S0));
            } else {
                is += (sc[0] & 15) * p[0] + (sc[KERN_TILE] & 15) * p[1];
                ms += (sc[0] >> 4) * S0 + (sc[KERN_TILE] >> 4) * (S - S0);
            }
        }
        float Dx = dx[k0];
        acc = fmaf((float)is, h16(sb, lane) * Dx, acc);
        if (D->kind != KERN_QN_K6) accm = fmaf((float)ms, h16(sb, KERN_TILE + lane) * Dx, accm);
    }
    return acc - accm;
}

void kern_qn_block_ref(int wt, const uint8_t *w, size_t tb, int nr, int64_t cols, const uint8_t *xq,
                            size_t xs, int nt, float *y, int64_t ldy, int lo, int hi, int stream)
{
    (void)nr, (void)stream;
    const kern_qn_desc *D = &descs[wt];
    kern_xq_offs o = kern_xq_offsets(cols);
    for (int i = lo; i < hi; i++)
        for (int t = 0; t < nt; t++)
            y[(int64_t)t * ldy + i] = (D->kind >= KERN_QN_K ? qn_dot_k : qn_dot_b)(
                D, w + (size_t)(i / KERN_TILE) * tb, i % KERN_TILE, cols / KERN_QK, xq + (size_t)t * xs, o);
}


/* ---- activations: the sums the native products need ------------------------------------ */

void kern_xq_finish(void *xq, int64_t n_rows, int64_t cols)
{
    int64_t nbp = kern_nsb(cols) * KERN_SB_BLOCKS;
    kern_xq_offs o = kern_xq_offsets(cols);
    for (int64_t r = 0; r < n_rows; r++) {
        uint8_t *row = (uint8_t *)xq + (size_t)r * kern_xq_row_bytes(cols);
        const int8_t *q = (const int8_t *)row;
        const float *d = (const float *)(row + o.d);
        const int32_t *c = (const int32_t *)(row + o.c);
        int32_t *hs = (int32_t *)(row + o.hs);
        float *sd = (float *)(row + o.sd);
        for (int64_t k = 0; k < nbp; k++) {
            int32_t s = 0;
            for (int j = 0; j < 16; j++) s += q[k * KERN_QK + j];
            hs[k] = s;
            sd[k] = (float)(-c[k] / 128) * d[k];
        }
        kern_xq_pairs(row, cols);
    }
}

void kern_xq_pairs(void *row, int64_t cols)
{
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK, nbp = kern_nsb(cols) * KERN_SB_BLOCKS;
    kern_xq_offs o = kern_xq_offsets(cols);
    const int32_t *c = (const int32_t *)((uint8_t *)row + o.c), *hs = (const int32_t *)((uint8_t *)row + o.hs);
    uint32_t *s2 = (uint32_t *)((uint8_t *)row + o.s2), *hp = (uint32_t *)((uint8_t *)row + o.hp);
    for (int64_t k = 0; k < nbp; k++) {
        uint32_t S = k < nb ? (uint32_t)(-c[k] / 128) : 0;
        hp[k] = ((uint32_t)hs[k] & 0xffff) | (S - (uint32_t)hs[k]) << 16;
        s2[k / 2] = k % 2 ? s2[k / 2] | S << 16 : (S & 0xffff);
    }
}

/* ggml's Q8_K rounding (quantize_row_q8_K_ref, what llama.cpp gives its K-quant dot
 * products): per 256 values one float scale 1 / (-127 / v) with v the value of largest
 * magnitude (the first), q = nearest(x * -127 / v) capped at 127. Each of the 8 blocks
 * of a super-block gets that scale; a partial last super-block is scaled on its own. */
void kern_xk_quantize_ref(const float *x, int64_t n_rows, int64_t cols, void *xq)
{
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK, nbp = kern_nsb(cols) * KERN_SB_BLOCKS;
    kern_xq_offs o = kern_xq_offsets(cols);
    for (int64_t r = 0; r < n_rows; r++) {
        const float *src = x + r * cols;
        uint8_t *row = (uint8_t *)xq + (size_t)r * kern_xq_row_bytes(cols);
        int8_t *q = (int8_t *)row;
        float *d = (float *)(row + o.d);
        int32_t *c = (int32_t *)(row + o.c);
        memset(q, 0, (size_t)(nbp * KERN_QK));
        for (int64_t s0 = 0; s0 < cols; s0 += 256) {
            int64_t n = cols - s0 < 256 ? cols - s0 : 256;
            float amax = 0.0f, vmax = 0.0f;
            for (int64_t j = 0; j < n; j++)
                if (fabsf(src[s0 + j]) > amax) amax = fabsf(src[s0 + j]), vmax = src[s0 + j];
            float iscale = amax != 0.0f ? -127.0f / vmax : 0.0f, dk = amax != 0.0f ? 1.0f / iscale : 0.0f;
            for (int64_t j = 0; j < n; j++) {
                int v = amax != 0.0f ? quant_nearest_int(iscale * src[s0 + j]) : 0;
                q[s0 + j] = (int8_t)(v > 127 ? 127 : v);
            }
            for (int64_t k = s0 / KERN_QK; k < (s0 + n + KERN_QK - 1) / KERN_QK; k++) d[k] = dk;
        }
        for (int64_t k = 0; k < nbp; k++) {
            int32_t sum = 0;
            for (int j = 0; j < KERN_QK; j++) sum += q[k * KERN_QK + j];
            if (k >= nb) d[k] = 0.0f;
            c[k] = -128 * sum;
        }
    }
    kern_xq_finish(xq, n_rows, cols);
}

/* Q8_0 rounding with llama.cpp's Q8_1 sum (what it gives Q4_1/Q5_1 dot products): the
 * S * D entry becomes half(amax / 127 * S), the unrounded scale times the sum, rounded
 * to f16 as block_q8_1.s is. */
void kern_x1_quantize(const float *x, int64_t n_rows, int64_t cols, void *xq)
{
    kern_xq_quantize(x, n_rows, cols, xq);
    kern_xq_finish(xq, n_rows, cols);
    int64_t nb = (cols + KERN_QK - 1) / KERN_QK;
    kern_xq_offs o = kern_xq_offsets(cols);
    for (int64_t r = 0; r < n_rows; r++) {
        const float *src = x + r * cols;
        uint8_t *row = (uint8_t *)xq + (size_t)r * kern_xq_row_bytes(cols);
        const int32_t *c = (const int32_t *)(row + o.c);
        float *sd = (float *)(row + o.sd);
        for (int64_t k = 0; k < nb; k++) {
            float amax = 0.0f;
            for (int64_t j = k * KERN_QK; j < cols && j < (k + 1) * KERN_QK; j++)
                amax = fabsf(src[j]) > amax ? fabsf(src[j]) : amax;
            sd[k] = f16_to_f32(f32_to_f16(amax / 127.0f * (float)(-c[k] / 128)));
        }
    }
}

/* ---- blocking ---------------------------------------------------------------------------- */

#define QN_PANEL_BYTES (384 * 1024)

int64_t kern_qn_panel_rows(int wt, int64_t cols, int64_t n_tok)
{
    (void)n_tok;
    int64_t panel = (int64_t)(QN_PANEL_BYTES / kern_qn_tile_bytes(wt, cols));
    return (panel < 1 ? 1 : panel) * KERN_TILE;
}

void kern_qn_matmul(int wt, const void *w, int64_t cols, const void *xq, int64_t n_tok,
                    float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    if (n_tok <= 0 || r0 >= r1) return;
    const kern_ops *ops = kern_active;
    size_t tb = kern_qn_tile_bytes(wt, cols), xs = kern_xq_row_bytes(cols);
    int64_t t0 = r0 / KERN_TILE, t1 = (r1 + KERN_TILE - 1) / KERN_TILE;
    int64_t chunks = (n_tok + ops->qn_tmax - 1) / ops->qn_tmax, csize = (n_tok + chunks - 1) / chunks;
    int64_t panel = kern_qn_panel_rows(wt, cols, n_tok) / KERN_TILE;
    const uint8_t *W = w, *X = xq;
    for (int64_t p0 = t0; p0 < t1; p0 += panel) {
        int64_t p1 = p0 + panel < t1 ? p0 + panel : t1;
        for (int64_t k0 = 0; k0 < n_tok; k0 += csize) {
            int nt = (int)(n_tok - k0 < csize ? n_tok - k0 : csize);
            int64_t base = p0 * KERN_TILE;
            int lo = (int)(r0 > base ? r0 - base : 0);
            int hi = (int)(r1 - base < (p1 - p0) * KERN_TILE ? r1 - base : (p1 - p0) * KERN_TILE);
            ops->qn_block(wt, W + (size_t)p0 * tb, tb, (int)(p1 - p0), cols, X + (size_t)k0 * xs, xs, nt,
                          y + k0 * ldy + base, ldy, lo, hi, k0 == 0);
        }
    }
}

/* ---- one entry for every tiled type ---------------------------------------------------- */

size_t kern_w_tile_bytes(int wt, int64_t cols)
{
    return wt == KERN_W_Q8T ? kern_q8t_tile_bytes(cols) : kern_qn_tile_bytes(wt, cols);
}

void kern_wmatmul(int wt, const void *w, int64_t cols, const void *xq, int64_t n_tok,
                  float *y, int64_t ldy, int64_t r0, int64_t r1)
{
    if (wt == KERN_W_Q8T) kern_q8t_matmul(w, cols, xq, n_tok, y, ldy, r0, r1);
    else kern_qn_matmul(wt, w, cols, xq, n_tok, y, ldy, r0, r1);
}

int64_t kern_w_panel_rows(int wt, int64_t cols, int64_t n_tok)
{
    return wt == KERN_W_Q8T ? kern_q8t_panel_rows(cols, n_tok) : kern_qn_panel_rows(wt, cols, n_tok);
}

void kern_w_dequant_row(int wt, const void *w, int64_t cols, int64_t r, float *dst)
{
    if (wt == KERN_W_Q8T) kern_q8t_dequant_row(w, cols, r, dst);
    else kern_qn_dequant_row(wt, w, cols, r, dst);
}
