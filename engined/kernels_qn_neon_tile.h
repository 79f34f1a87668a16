/*
 * kernels_qn_neon_tile.h - the per-kind tile product of kernels_qn_neon.c,
 * written once and included once per instruction set: sdot by element (dotprod) and
 * smmla for token pairs (i8mm). Not a header of its own: only kernels_qn_neon.c
 * includes it, after defining
 *
 *   QN(name)   the set's prefix on a name (nd_##name, nm_##name)
 *   QN_ATTR    the set's target attribute (NEON_DOT, NEON_I8MM)
 *   QN_MM      1 where token pairs go through n_dots_mm (smmla), else 0
 *
 * and gets QN(tables)[KERN_W_COUNT]: per weight kind, the products for 1..QN_TMAX
 * tokens. Each instantiation is QN(tile) with constant kind, bits, offset and token
 * count, so every branch on them folds away.
 */

/* One tile times nt <= QN_TMAX tokens over nb blocks, for one layout (kind, bits, off);
 * rows [lo, hi) of the tile are stored. Super-block by super-block: each quarter with rows
 * to store (4 rows, 16 bytes of each 64-byte group) takes the super-block's blocks in
 * turn, so the first quarter brings the super-block's lines into L1 and the other three
 * find them there, and the tile is read from memory once. A quarter's sums are its own
 * (its rows): the order of each row's chain is the scalar twin's. */
static inline __attribute__((always_inline)) QN_ATTR void QN(tile)(int kind, int bits, int off, int nt,
    const uint8_t *w, size_t hdr, size_t sbb, int64_t nb, const uint8_t *xq, size_t xs, kern_xq_offs o, float *y,
    int64_t ldy, int lo, int hi)
{
    float32x4_t accq[4][QN_TMAX], accmq[4][QN_TMAX]; /* per quarter; K, K2: the scaled mins apart */
    for (int q = 0; q < 4; q++)
        for (int t = 0; t < QN_TMAX; t++) accq[q][t] = accmq[q][t] = vdupq_n_f32(0.0f);
    for (int64_t k0 = 0; k0 < nb; k0 += KERN_QN_BLOCKS) {
        const uint8_t *sb = w + (size_t)(k0 / KERN_QN_BLOCKS) * sbb;
        const int64_t k1 = nb - k0 < KERN_QN_BLOCKS ? nb : k0 + KERN_QN_BLOCKS;
        for (int q = 0; q < 4; q++) {
            if (hi <= 4 * q || lo >= 4 * q + 4) continue;
            float32x4_t acc[QN_TMAX], accm[QN_TMAX];
            int32x4_t is[QN_TMAX], ms[QN_TMAX];
            for (int t = 0; t < QN_TMAX; t++)
                acc[t] = accq[q][t], accm[t] = accmq[q][t], is[t] = ms[t] = vdupq_n_s32(0);
            for (int64_t k = k0; k < k1; k++) {
                const int b = (int)(k - k0);
                int8x16_t wv[8];
                int32x4_t sm[4] = { vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0) };
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++) wv[g] = n_group(sb, hdr, bits, b, g, q);
                float32x4_t f0 = vdupq_n_f32(0.0f), f1 = f0;
                n_factors(kind, sb, b, 4 * q, &f0, &f1, sm);
                int t = 0;
#if QN_MM
                if (nt >= 2) {
                    int8x16_t wz[8]; /* groups 2p, 2p + 1 zipped: values 8p..8p+7 of rows 0-1, then of rows 2-3 */
#pragma GCC unroll 4
                    for (int p = 0; p < 4; p++) {
                        const int32x4_t g0 = vreinterpretq_s32_s8(wv[2 * p]), g1 = vreinterpretq_s32_s8(wv[2 * p + 1]);
                        wz[2 * p] = vreinterpretq_s8_s32(vzip1q_s32(g0, g1));
                        wz[2 * p + 1] = vreinterpretq_s8_s32(vzip2q_s32(g0, g1));
                    }
#pragma GCC unroll 2
                    for (; t + 2 <= QN_TMAX; t += 2) {
                        if (t + 2 > nt) break;
                        const uint8_t *xa = xq + (size_t)t * xs, *xb = xa + xs;
                        int32x4_t da[2], db[2];
                        n_dots_mm(wz, (const int8_t *)xa + k * KERN_QK, (const int8_t *)xb + k * KERN_QK, da, db);
                        if (kind == KERN_QN_B0 || kind == KERN_QN_B1) {
                            acc[t] = n_token(kind, off, da, f0, f1, xa, o, k, acc[t]);
                            acc[t + 1] = n_token(kind, off, db, f0, f1, xb, o, k, acc[t + 1]);
                        } else {
                            n_ktoken(kind, da, sm, xa, o, k, &is[t], &ms[t]);
                            n_ktoken(kind, db, sm, xb, o, k, &is[t + 1], &ms[t + 1]);
                        }
                    }
                }
#endif
#pragma GCC unroll 4
                for (; t < QN_TMAX; t++) {
                    if (t >= nt) break;
                    const uint8_t *xr = xq + (size_t)t * xs;
                    int32x4_t d[2];
                    n_dots(wv, (const int8_t *)xr + k * KERN_QK, d);
                    if (kind == KERN_QN_B0 || kind == KERN_QN_B1) acc[t] = n_token(kind, off, d, f0, f1, xr, o, k, acc[t]);
                    else n_ktoken(kind, d, sm, xr, o, k, &is[t], &ms[t]);
                }
            }
            if (kind != KERN_QN_B0 && kind != KERN_QN_B1)
                for (int u = 0; u < nt; u++) /* the end of a K kind's super-block: its float step */
                    n_kend(kind, sb, 4 * q, is[u], ms[u], xq + (size_t)u * xs, o, k0, &acc[u], &accm[u]);
            for (int t = 0; t < QN_TMAX; t++) accq[q][t] = acc[t], accmq[q][t] = accm[t];
        }
    }
    for (int q = 0; q < 4; q++) {
        if (hi <= 4 * q || lo >= 4 * q + 4) continue;
        const int a = lo > 4 * q ? lo - 4 * q : 0, z = hi < 4 * q + 4 ? hi - 4 * q : 4;
        for (int t = 0; t < nt; t++) {
            float out[4];
            vst1q_f32(out, vsubq_f32(accq[q][t], accmq[q][t]));
            for (int i = a; i < z; i++) y[t * ldy + 4 * q + i] = out[i];
        }
    }
}

/* The instantiations: NAME_T for T tokens, and the kind's table NAME[T]. */
#define QN_ONE(NAME, KIND, BITS, OFF, T)                                                                      \
    static QN_ATTR void QN(NAME##_##T)(const uint8_t *w, size_t hdr, size_t sbb, int64_t nb, const uint8_t *xq,  \
                                       size_t xs, kern_xq_offs o, float *y, int64_t ldy, int lo, int hi)        \
    {                                                                                                         \
        QN(tile)(KIND, BITS, OFF, T, w, hdr, sbb, nb, xq, xs, o, y, ldy, lo, hi);                             \
    }
#define QN_KIND(NAME, KIND, BITS, OFF)                                                                        \
    QN_ONE(NAME, KIND, BITS, OFF, 1) QN_ONE(NAME, KIND, BITS, OFF, 2) QN_ONE(NAME, KIND, BITS, OFF, 3)       \
    QN_ONE(NAME, KIND, BITS, OFF, 4)                                                                          \
    static const nqn_fn QN(NAME)[QN_TMAX + 1] = { NULL, QN(NAME##_1), QN(NAME##_2), QN(NAME##_3), QN(NAME##_4) };

QN_KIND(q4_0, KERN_QN_B0, 4, 8)
QN_KIND(q4_1, KERN_QN_B1, 4, 0)
QN_KIND(q5_0, KERN_QN_B0, 5, 16)
QN_KIND(q5_1, KERN_QN_B1, 5, 0)
QN_KIND(q4_k, KERN_QN_K, 4, 0)
QN_KIND(q5_k, KERN_QN_K, 5, 0)
QN_KIND(q6_k, KERN_QN_K6, 6, 32)
QN_KIND(q2_k, KERN_QN_K2, 2, 0)

static const nqn_fn *const QN(tables)[KERN_W_COUNT] = {
    [KERN_W_Q4_0] = QN(q4_0), [KERN_W_Q4_1] = QN(q4_1), [KERN_W_Q5_0] = QN(q5_0), [KERN_W_Q5_1] = QN(q5_1),
    [KERN_W_Q4_K] = QN(q4_k), [KERN_W_Q5_K] = QN(q5_k), [KERN_W_Q6_K] = QN(q6_k), [KERN_W_Q2_K] = QN(q2_k),
};

#undef QN_ONE
#undef QN_KIND
