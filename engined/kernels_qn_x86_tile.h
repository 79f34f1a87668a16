/*
 * kernels_qn_x86_tile.h - the per-kind tile product of kernels_qn_x86.c, written once and
 * included once per vector width: AVX-512 (one zmm holds a 64-byte group: 16 rows) and
 * AVX2 / AVX-VNNI (one ymm holds half a group: the tile as two halves of 8 rows).
 * Not a header of its own: only kernels_qn_x86.c includes it, after defining
 *
 *   QN(name)          the width's prefix on a name (z_##name, y2_##name, yv_##name)
 *   QN_ATTR           the width's target attribute
 *   QN_TMAX           most tokens per call (8 or 4)
 *   QN_FN             the type of one instantiation (a pointer to it)
 *   QN_H              the halves of a tile (1: one register holds a group's 16 rows; 2)
 *   QN_MASK           the store mask's type
 *   VF, VI            the float and integer vector types
 *   V(op)             the width's intrinsic op (_mm512_##op or _mm256_##op)
 *   VI_ZERO(), VI_AND(a, b), VI_OR(a, b)     the integer ones whose names differ
 *   QN_DOT(acc, w, x) acc + the exact int32 dots of 4 unsigned bytes of w with 4 int8 of x
 *   QN_GROUP(sb, hdr, bits, b, g, half)      group g of block b, unsigned values
 *   QN_DOTW(acc, a, b) acc + the exact int32 dots of 2 int16 of a with 2 int16 of b
 *   QN_I16            1 where QN_DOT is maddubs + madd (plain AVX2): the tile products
 *                     then take QN(i16block), groups summed in int16 first; else 0
 *   QN_CHAIN(v)       where QN_I16: keeps v's int16 sums one chain of adds
 *                     (KERN_X86_CHAIN); else nothing
 *   QN_H16(p)                                f16 row factors as floats
 *   QN_U8I(p), QN_I8I(p)                     u8 / i8 row factors as int32
 *   QN_STORE(p, mask, v)                     a masked store of one token's rows
 *
 * and gets QN(tables)[KERN_W_COUNT]: per weight kind, the products for 1..QN_TMAX tokens;
 * with QN_PAIR, QN_R (2) and QN_PAIR_FN (the type of one) defined, also
 * QN(pair_tables): QN_R tiles at once, for 1..4 tokens (AVX-512; with 16 registers
 * AVX2 has no room for a second tile's sums).
 * Each instantiation is QN(tile) with constant kind, bits, offset and token count, so
 * every branch on them folds away and each loop is unrolled as the old per-width macros
 * were (same intrinsics, same order: the same bits).
 */

#define QN_INLINE static inline __attribute__((always_inline)) QN_ATTR

/* An int32 lane's low int16 from a, high from b. */
QN_INLINE VI QN(pair16)(VI a, VI b) { return VI_OR(VI_AND(a, V(set1_epi32)(0xffff)), V(slli_epi32)(b, 16)); }

/* Block b's row factors (kernels.h's chain): B kinds: f0 and f1 (d; B1's min); K kinds:
 * the int32 scales sc[0..1] (K: of the block; K6, K2: of its two halves), K2's mins
 * sc[2..3] and K6's two scales times -32 as int16 pairs in sc[2] (its offset term
 * against the half sums; |32 * scale| <= 4096). r8 is the first row of the half. */
QN_INLINE void QN(factors)(int kind, const uint8_t *sb, int b, int r8, VF *f0, VF *f1, VI sc[4])
{
    if (kind == KERN_QN_B0 || kind == KERN_QN_B1) {
        *f0 = QN_H16(sb + 32 * b + 2 * r8);
        *f1 = kind == KERN_QN_B1 ? QN_H16(sb + 256 + 32 * b + 2 * r8) : *f0;
    } else if (kind == KERN_QN_K2) {
        const VI s0 = QN_U8I(sb + 64 + 32 * b + r8), s1 = QN_U8I(sb + 80 + 32 * b + r8);
        sc[0] = VI_AND(s0, V(set1_epi32)(15)), sc[2] = V(srli_epi32)(s0, 4);
        sc[1] = VI_AND(s1, V(set1_epi32)(15)), sc[3] = V(srli_epi32)(s1, 4);
    } else if (kind == KERN_QN_K) {
        sc[0] = QN_U8I(sb + 64 + 16 * b + r8);
    } else {
        sc[0] = QN_I8I(sb + 64 + 32 * b + r8), sc[1] = QN_I8I(sb + 64 + 32 * b + 16 + r8);
        sc[2] = QN(pair16)(V(sub_epi32)(VI_ZERO(), V(slli_epi32)(sc[0], 5)), V(sub_epi32)(VI_ZERO(), V(slli_epi32)(sc[1], 5)));
    }
}

/* acc plus one token's product with block k of a B kind (unpacked in wv, factors f0 f1);
 * xr is the token's activation row. */
QN_INLINE VF QN(token)(int kind, int off, const VI wv[8], VF f0, VF f1, const uint8_t *xr, kern_xq_offs o,
                       int64_t k, VF acc)
{
    const int8_t *a = (const int8_t *)xr + k * KERN_QK;
    const float D = ((const float *)(xr + o.d))[k];
    const int32_t S = -((const int32_t *)(xr + o.c))[k] / 128;
    VI is = V(set1_epi32)(kind == KERN_QN_B0 ? -off * S : 0);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) is = QN_DOT(is, wv[g], V(set1_epi32)(ld32(a + 4 * g)));
    acc = V(fmadd_ps)(V(cvtepi32_ps)(is), V(mul_ps)(f0, V(set1_ps)(D)), acc);
    if (kind == KERN_QN_B1) acc = V(fmadd_ps)(f1, V(set1_ps)(((const float *)(xr + o.sd))[k]), acc);
    return acc;
}

/* The same for a K kind: the super-block's int32 sums is (scaled dots) and ms (K2's
 * scaled mins; K's come at the end of the super-block) plus block k's terms. */
QN_INLINE void QN(ktoken)(int kind, int scaled, const VI wv[8], const VI sc[4], const uint8_t *xr, kern_xq_offs o,
                          int64_t k, VI *is, VI *ms)
{
    const int8_t *a = (const int8_t *)xr + k * KERN_QK;
    if (kind == KERN_QN_K) {
        VI p = VI_ZERO();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) p = QN_DOT(p, wv[g], V(set1_epi32)(ld32(a + 4 * g)));
        *is = V(add_epi32)(*is, V(mullo_epi32)(p, sc[0]));
        return;
    }
    const VI hp = V(set1_epi32)(((const int32_t *)(xr + o.hp))[k]); /* the half sums (h0, S - h0) */
    if (kind == KERN_QN_K2 && scaled) { /* values already scaled (QN(k2_scale)): straight into the sums */
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) *is = QN_DOT(*is, wv[g], V(set1_epi32)(ld32(a + 4 * g)));
        *ms = QN_DOTW(*ms, sc[2], hp);
        return;
    }
    /* K6's offset -32 times each half's sum, times its scale: one pair dot */
    if (kind == KERN_QN_K6) *is = QN_DOTW(*is, sc[2], hp);
    VI i0 = VI_ZERO(), i1 = VI_ZERO();
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        i0 = QN_DOT(i0, wv[g], V(set1_epi32)(ld32(a + 4 * g)));
        i1 = QN_DOT(i1, wv[g + 4], V(set1_epi32)(ld32(a + 16 + 4 * g)));
    }
    *is = V(add_epi32)(*is, V(add_epi32)(V(mullo_epi32)(i0, sc[0]), V(mullo_epi32)(i1, sc[1])));
    if (kind == KERN_QN_K2) {
        const int32_t S = -((const int32_t *)(xr + o.c))[k] / 128, h0 = ((const int32_t *)(xr + o.hs))[k];
        *ms = V(add_epi32)(*ms, V(add_epi32)(V(mullo_epi32)(sc[2], V(set1_epi32)(h0)),
                                             V(mullo_epi32)(sc[3], V(set1_epi32)(S - h0))));
    }
}

/* K2, once per block for every token: each 2-bit value times its half's 4-bit scale
 * (at most 45, still a byte, so one int16 multiply per group: no carry between the
 * bytes) and the two mins as int16 pairs in sc[2], so that a token's block is 8 dots
 * into the super-block's sum and one pair dot for the mins. The same integers as
 * scaling each half's sum: the same bits. It pays from QN_K2_SCALED tokens a call on
 * (prompt passes 1.2x); for one token (decode: 18% slower) or two it costs what it saves. */
#define QN_K2_SCALED 3
QN_INLINE void QN(k2_scale)(VI wv[8], VI sc[4])
{
    const VI s0 = VI_OR(sc[0], V(slli_epi32)(sc[0], 16)), s1 = VI_OR(sc[1], V(slli_epi32)(sc[1], 16));
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) wv[g] = V(mullo_epi16)(wv[g], g < 4 ? s0 : s1);
    sc[2] = VI_OR(sc[2], V(slli_epi32)(sc[3], 16));
}

/* Plain AVX2 (QN_I16: QN_DOT would be maddubs + madd + add, per group): block k of half h
 * for every token, group by group. maddubs gives int16 pairs of at most 2 * 128 * vmax
 * (vmax: the largest unsigned value), so a run of groups (as many as cannot overflow, at
 * most 4 past one token: the registers) is summed in int16 and widened by one madd with
 * the run's multiplier: 1 (B kinds, scaled K2), or the scale (K: the block's; K6, K2:
 * the half's) in both int16 halves of each lane, which also replaces vpmulld. Each run is
 * unpacked once for all tokens. B kinds add their float step to acc; K kinds their
 * integers to is and ms (K6's offset -32 times each half's sum, times its scale, as one
 * pair madd). The same integers as QN(token) and QN(ktoken): the same bits. */
QN_INLINE void QN(i16block)(int kind, int bits, int off, int nt, const uint8_t *sb, size_t hdr, int b, int h,
                            VF f0, VF f1, VI sc[4], const uint8_t *xq, size_t xs, kern_xq_offs o, int64_t k,
                            VF *acc, VI *is, VI *ms)
{
    const int scaled = kind == KERN_QN_K2 && nt >= QN_K2_SCALED;
    /* split: a scale per half-block (16 values: 4 groups) */
    const int vmax = scaled ? 45 : (1 << bits) - 1, split = kind == KERN_QN_K6 || (kind == KERN_QN_K2 && !scaled);
    int run = 32767 / (256 * vmax);
    run = run > (nt == 1 ? 8 : 4) ? (nt == 1 ? 8 : 4) : run;
    run = split && run > 4 ? 4 : run;
    const VI one = V(set1_epi16)(1);
    /* each scale in both int16 halves of its lanes */
    const VI s0 = QN(pair16)(sc[0], sc[0]), s1 = QN(pair16)(sc[1], sc[1]);
    VI m[2] = { one, one }, sp = VI_ZERO(), p[QN_TMAX], hp[QN_TMAX];
    if (kind == KERN_QN_K) m[0] = m[1] = s0;
    if (split) m[0] = s0, m[1] = s1, sp = QN(pair16)(sc[0], sc[1]);
#pragma GCC unroll 4
    for (int t = 0; t < QN_TMAX; t++) if (t < nt) {
        const uint8_t *xr = xq + (size_t)t * xs;
        hp[t] = V(set1_epi32)(((const int32_t *)(xr + o.hp))[k]);
        p[t] = kind == KERN_QN_B0 ? V(set1_epi32)(off * ((const int32_t *)(xr + o.c))[k] / 128) : VI_ZERO();
        /* (sp and a shift, not sc[2]: making the -32 pairs per block cost 8% of a one-token
         * AVX2 call in cache, bench_qn) */
        if (kind == KERN_QN_K6) p[t] = V(sub_epi32)(p[t], V(slli_epi32)(V(madd_epi16)(sp, hp[t]), 5));
    }
#pragma GCC unroll 8
    for (int g0 = 0; g0 < 8; g0 += run) {
        VI wr[8];
#pragma GCC unroll 8
        for (int j = 0; j < run; j++) {
            wr[j] = QN_GROUP(sb, hdr, bits, b, g0 + j, h);
            if (scaled) wr[j] = V(mullo_epi16)(wr[j], g0 + j < 4 ? s0 : s1); /* QN(k2_scale) */
        }
#pragma GCC unroll 4
        for (int t = 0; t < QN_TMAX; t++) if (t < nt) {
            const int8_t *a = (const int8_t *)(xq + (size_t)t * xs) + k * KERN_QK + 4 * g0;
            VI s16 = V(maddubs_epi16)(wr[0], V(set1_epi32)(ld32(a)));
#pragma GCC unroll 8
            for (int j = 1; j < run; j++) {
                s16 = V(add_epi16)(s16, V(maddubs_epi16)(wr[j], V(set1_epi32)(ld32(a + 4 * j))));
                QN_CHAIN(s16);
            }
            p[t] = V(add_epi32)(p[t], V(madd_epi16)(s16, m[g0 / 4]));
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < QN_TMAX; t++) if (t < nt) {
        const uint8_t *xr = xq + (size_t)t * xs;
        if (kind == KERN_QN_B0 || kind == KERN_QN_B1) {
            acc[t] = V(fmadd_ps)(V(cvtepi32_ps)(p[t]), V(mul_ps)(f0, V(set1_ps)(((const float *)(xr + o.d))[k])), acc[t]);
            if (kind == KERN_QN_B1) acc[t] = V(fmadd_ps)(f1, V(set1_ps)(((const float *)(xr + o.sd))[k]), acc[t]);
            continue;
        }
        is[t] = V(add_epi32)(is[t], p[t]);
        if (kind == KERN_QN_K2) ms[t] = QN_DOTW(ms[t], QN(pair16)(sc[2], sc[3]), hp[t]);
    }
}

/* K's mins of super-block sb (blocks k0..k0+7) times one token's block sums: pairs of
 * blocks at once, the mins as int16 pairs (mp) against the row's pairs of sums (exact:
 * |S| <= 4064; blocks past the row's end sum to 0). The pairs are made once a token
 * (kern_xq_pairs): made here, per tile and super-block, they took a quarter of an
 * 8-token call (bench_qn's 768 x 1024 in cache). */
QN_INLINE VI QN(kmins)(const VI mp[4], const uint8_t *xr, kern_xq_offs o, int64_t k0)
{
    const int32_t *s2 = (const int32_t *)(xr + o.s2) + k0 / 2;
    VI ms = VI_ZERO();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) ms = QN_DOTW(ms, mp[j], V(set1_epi32)(s2[j]));
    return ms;
}

/* A K kind's float step at the end of super-block sb (blocks k0..k0+7) for the half
 * whose first row is r8: each token's integer sums is (and ms: K2's scaled mins; K's are
 * made here from the block sums) times d (dmin) and the token's scale, into acc (accm). */
QN_INLINE void QN(kstep)(int kind, int nt, const uint8_t *sb, int r8, const uint8_t *xq, size_t xs, kern_xq_offs o,
                         int64_t k0, const VI *is, VI *ms, VF *acc, VF *accm)
{
    const VF d = QN_H16(sb + 2 * r8), dmin = QN_H16(sb + 32 + 2 * r8);
    VI mp[4];
    if (kind == KERN_QN_K)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            mp[j] = VI_OR(QN_U8I(sb + 192 + 32 * j + r8), V(slli_epi32)(QN_U8I(sb + 208 + 32 * j + r8), 16));
#pragma GCC unroll 8
    for (int t = 0; t < QN_TMAX; t++) {
        if (t >= nt) continue;
        const uint8_t *xr = xq + (size_t)t * xs;
        const VF vD = V(set1_ps)(((const float *)(xr + o.d))[k0]);
        if (kind == KERN_QN_K) ms[t] = QN(kmins)(mp, xr, o, k0);
        acc[t] = V(fmadd_ps)(V(cvtepi32_ps)(is[t]), V(mul_ps)(d, vD), acc[t]);
        if (kind != KERN_QN_K6) accm[t] = V(fmadd_ps)(V(cvtepi32_ps)(ms[t]), V(mul_ps)(dmin, vD), accm[t]);
    }
}

/* Decode (1-2 tokens a call) reads the weights once and does little with each byte; the
 * hardware prefetcher alone left it at 15-25 GB/s on one Zen 5 thread where bench_bw
 * reads 32 (Q6_K and Q5_0 the slowest: a block of theirs is 6-7 lines). So each block
 * prefetches the lines one block's length KERN_X86_PF_DIST bytes ahead, into L1: the stream
 * of tiles (each tile's bytes follow the last's) is requested ~130 ns before it is
 * used. Bench_qn 5632 x 2048, one token, one thread, AVX-512: Q6_K 17 -> 24-39 GB/s,
 * Q5_0 14 -> 22-26, Q4_K 23-30 -> 25-35, Q4_0 23-25 -> 24-37; the AVX2 and AVX-VNNI
 * tables likewise. Calls of 3-8 tokens prefetch on their first pass when the tiles come
 * from memory (kern_qn_block_fn's stream, pf here: a batched decode step's first token
 * chunk): on AVX-512 in QN(rows), bench_qn 768 x 1024, 4 tokens, one thread, Q4_K
 * 11.5-12.4 -> 14.0-14.1 GB/s, Q6_K 13.0-13.5 -> 17.2-17.4; on AVX-VNNI and AVX2 in
 * QN(tile), 5632 x 2048, 4 tokens, one thread: Q6_K 8.3-9.5 -> 16.4-18.0 (AVX-VNNI),
 * 6.2-6.7 -> 12.9-13.0 (AVX2); Q4_K 5.9-6.2 -> 9.9-10.3 (AVX2). A prompt pass's later
 * chunks find the tiles in L2. */
#define QN_PF_TOKENS 2

/* One tile times nt tokens over nb blocks, for one layout (kind, bits, off). Super-block
 * by super-block, each half of the tile that has rows to store (bit h of halves; AVX-512
 * has one, AVX2 two of 8 rows) takes the super-block's blocks: each block's groups are
 * unpacked and its factors made once, then every token passes; the K kinds take each
 * super-block's float step at its end. The second half finds the super-block in L1, so
 * the tile is read from memory once, in one stream (a whole pass per half read every
 * line for half its bytes: AVX2 decode 1.4-1.6x slower). A whole tile of a K kind on
 * 256 bits (AVX-VNNI: any call; plain AVX2: 1-2 tokens) takes both halves at once
 * instead, group by group, so one broadcast of a token's bytes serves both.
 * The token loops run to the constant QN_TMAX and skip t >= nt: a compiler that unrolls
 * this function before inlining it (clang) then unrolls them completely, as it would with
 * nt known; once nt is a constant the skipped copies vanish. */
QN_INLINE void QN(tile)(int kind, int bits, int off, int nt, const uint8_t *w, size_t hdr, size_t sbb, int64_t nb,
                        const uint8_t *xq, size_t xs, kern_xq_offs o, float *y, int64_t ldy, int halves,
                        const QN_MASK *mask, int pf)
{
    VF acc[QN_H][QN_TMAX], accm[QN_H][QN_TMAX]; /* K, K2: the scaled mins apart, as llama.cpp keeps them */
#pragma GCC unroll 2
    for (int h = 0; h < QN_H; h++)
#pragma GCC unroll 8
        for (int t = 0; t < QN_TMAX; t++) acc[h][t] = accm[h][t] = V(setzero_ps)();
    for (int64_t k0 = 0; k0 < nb; k0 += KERN_QN_BLOCKS) {
        const uint8_t *sb = w + (size_t)(k0 / KERN_QN_BLOCKS) * sbb;
        const int nbs = nb - k0 < KERN_QN_BLOCKS ? (int)(nb - k0) : KERN_QN_BLOCKS;
#if QN_H == 2
        if (kind == KERN_QN_K && halves == 3 && (!QN_I16 || nt <= 2)) {
            /* 256 bits, K kinds (AVX-VNNI: every call; plain AVX2: 1-2 tokens, as its int16
             * sums of 3-4 tokens x 2 halves leave no register and made prompt passes slower):
             * both halves of the tile at once, a group at a time, so that one broadcast of a
             * token's 4 bytes feeds both halves' dots (a half at a time broadcast every
             * token's bytes twice) and the lines are read in one pass. Plain AVX2 sums a
             * half's 8 groups in int16 (at most 8 x 2 x 15 x 128 = 30720) and widens them by
             * one madd with the block's scale, as QN(i16block) does. Integer sums, any
             * order; each half's float step as below: the same bits */
            VI is2[2][QN_TMAX], ms2[2][QN_TMAX];
#pragma GCC unroll 8
            for (int t = 0; t < QN_TMAX; t++) is2[0][t] = is2[1][t] = ms2[0][t] = ms2[1][t] = VI_ZERO();
            for (int64_t k = k0; k < k0 + nbs; k++) {
                const int b = (int)(k % KERN_QN_BLOCKS);
                if (nt <= QN_PF_TOKENS || pf) kern_x86_prefetch_ahead(sb + (size_t)b * (sbb / KERN_QN_BLOCKS), sbb / KERN_QN_BLOCKS);
                VI sc0[4] = { VI_ZERO(), VI_ZERO(), VI_ZERO(), VI_ZERO() }, sc1[4] = { sc0[0], sc0[1], sc0[2], sc0[3] };
                VF f0 = V(setzero_ps)(), f1 = f0;
                QN(factors)(kind, sb, b, 0, &f0, &f1, sc0);
                QN(factors)(kind, sb, b, 8, &f0, &f1, sc1);
                VI p0[QN_TMAX], p1[QN_TMAX];
#pragma GCC unroll 8
                for (int t = 0; t < QN_TMAX; t++) p0[t] = p1[t] = VI_ZERO();
#pragma GCC unroll 8
                for (int i = 0; i < 8; i++) {
                    /* groups j and j + 4 share their bytes (low and high nibbles): one after
                     * the other, so that no unpacked group waits in a register (16 of them:
                     * the compiler unpacked ahead and spilled; 10-20% of a prompt pass) */
                    const int g = (i & 1) * 4 + (i >> 1);
                    const VI w0 = QN_GROUP(sb, hdr, bits, b, g, 0), w1 = QN_GROUP(sb, hdr, bits, b, g, 1);
#pragma GCC unroll 8
                    for (int t = 0; t < QN_TMAX; t++)
                        if (t < nt) {
                            const VI x = V(set1_epi32)(ld32((const int8_t *)(xq + (size_t)t * xs) + k * KERN_QK + 4 * g));
#if QN_I16
                            p0[t] = V(add_epi16)(p0[t], V(maddubs_epi16)(w0, x));
                            p1[t] = V(add_epi16)(p1[t], V(maddubs_epi16)(w1, x));
                            QN_CHAIN(p0[t]);
                            QN_CHAIN(p1[t]);
#else
                            p0[t] = QN_DOT(p0[t], w0, x);
                            p1[t] = QN_DOT(p1[t], w1, x);
#endif
                        }
                }
#pragma GCC unroll 8
                for (int t = 0; t < QN_TMAX; t++)
                    if (t < nt) {
#if QN_I16
                        is2[0][t] = V(add_epi32)(is2[0][t], V(madd_epi16)(p0[t], QN(pair16)(sc0[0], sc0[0])));
                        is2[1][t] = V(add_epi32)(is2[1][t], V(madd_epi16)(p1[t], QN(pair16)(sc1[0], sc1[0])));
#else
                        is2[0][t] = V(add_epi32)(is2[0][t], V(mullo_epi32)(p0[t], sc0[0]));
                        is2[1][t] = V(add_epi32)(is2[1][t], V(mullo_epi32)(p1[t], sc1[0]));
#endif
                    }
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) QN(kstep)(kind, nt, sb, 8 * h, xq, xs, o, k0, is2[h], ms2[h], acc[h], accm[h]);
            continue;
        }
#endif
#pragma GCC unroll 2
        for (int h = 0; h < QN_H; h++) {
            if (!(halves >> h & 1)) continue;
            const int r8 = 8 * h;
            VI is[QN_TMAX], ms[QN_TMAX];
#pragma GCC unroll 8
            for (int t = 0; t < QN_TMAX; t++) is[t] = ms[t] = VI_ZERO();
            for (int64_t k = k0; k < k0 + nbs; k++) { /* (k, not b, counted: GCC's AVX-512 Q6_K was 1.3x slower) */
                const int b = (int)(k % KERN_QN_BLOCKS);
                if (h == 0 && (nt <= QN_PF_TOKENS || pf)) /* one block's bytes */
                    kern_x86_prefetch_ahead(sb + (size_t)b * (sbb / KERN_QN_BLOCKS), sbb / KERN_QN_BLOCKS);
                VI wv[8], sc[4] = { VI_ZERO(), VI_ZERO(), VI_ZERO(), VI_ZERO() };
                VF f0 = V(setzero_ps)(), f1 = f0;
                QN(factors)(kind, sb, b, r8, &f0, &f1, sc);
                if (QN_I16) {
                    QN(i16block)(kind, bits, off, nt, sb, hdr, b, h, f0, f1, sc, xq, xs, o, k, acc[h], is, ms);
                    continue;
                }
                if (QN_H == 2 && kind == KERN_QN_K) {
                    /* 16 registers: a group at a time, every token's dot of it, so the
                     * 8 unpacked groups need not stay live beside the tokens' sums
                     * (they spilled); integer sums, any order: the same bits */
                    VI p[QN_TMAX];
#pragma GCC unroll 8
                    for (int t = 0; t < QN_TMAX; t++) p[t] = VI_ZERO();
#pragma GCC unroll 8
                    for (int g = 0; g < 8; g++) {
                        const VI w1 = QN_GROUP(sb, hdr, bits, b, g, h);
#pragma GCC unroll 8
                        for (int t = 0; t < QN_TMAX; t++)
                            if (t < nt)
                                p[t] = QN_DOT(p[t], w1, V(set1_epi32)(ld32((const int8_t *)(xq + (size_t)t * xs) + k * KERN_QK + 4 * g)));
                    }
#pragma GCC unroll 8
                    for (int t = 0; t < QN_TMAX; t++)
                        if (t < nt) is[t] = V(add_epi32)(is[t], V(mullo_epi32)(p[t], sc[0]));
                    continue;
                }
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++) wv[g] = QN_GROUP(sb, hdr, bits, b, g, h);
                const int scaled = kind == KERN_QN_K2 && nt >= QN_K2_SCALED;
                if (scaled) QN(k2_scale)(wv, sc);
                if (kind == KERN_QN_B0 || kind == KERN_QN_B1) {
#pragma GCC unroll 8
                    for (int t = 0; t < QN_TMAX; t++)
                        if (t < nt) acc[h][t] = QN(token)(kind, off, wv, f0, f1, xq + (size_t)t * xs, o, k, acc[h][t]);
                    continue;
                }
#pragma GCC unroll 8
                for (int t = 0; t < QN_TMAX; t++)
                    if (t < nt) QN(ktoken)(kind, scaled, wv, sc, xq + (size_t)t * xs, o, k, &is[t], &ms[t]);
            }
            if (kind == KERN_QN_B0 || kind == KERN_QN_B1) continue;
            QN(kstep)(kind, nt, sb, r8, xq, xs, o, k0, is, ms, acc[h], accm[h]);
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < QN_H; h++)
        if (halves >> h & 1)
#pragma GCC unroll 8
            for (int t = 0; t < QN_TMAX; t++)
                if (t < nt) QN_STORE(y + t * ldy + 8 * h, mask[h], V(sub_ps)(acc[h][t], accm[h][t]));
}

#ifdef QN_PAIR
#define QN_T 4 /* most tokens of a pass of QN(rows) */

/* QN_R whole tiles (w, w + tb, ...) times nt <= QN_T tokens over nb blocks, for every
 * kind but K2: QN(tile) for calls of 3 or more tokens over tiles in cache (a prompt
 * pass's later token chunks; kernels_qn_x86.c's Z_PAIR_MIN), up to 4 tokens a pass. Block by
 * block: each tile's row factors once; then group by group, each tile's group unpacked
 * as it is used and each token's 4 bytes broadcast once for every tile, so that one
 * broadcast feeds QN_R vpdpbusd and consecutive vpdpbusd go to different sums (QN(tile),
 * one tile and a token's 8 in a row, spends as much on the broadcasts as on the products
 * from 3 tokens on). The integer sums are exact, so their order is free; each row's float
 * chain is QN(tile)'s, op for op: the same bits. The token loops run to the constant QN_T
 * and skip t >= nt, as QN(tile)'s do. */
QN_INLINE void QN(rows)(int kind, int bits, int off, int nt, const uint8_t *w, size_t tb, size_t hdr,
                        size_t sbb, int64_t nb, const uint8_t *xq, size_t xs, kern_xq_offs o, float *y, int64_t ldy,
                        const QN_MASK *mask, int pf)
{
    VF acc[QN_R][QN_T], accm[QN_R][QN_T]; /* K: the scaled mins apart, as QN(tile) keeps them */
    VI is[QN_R][QN_T], ms[QN_R][QN_T];
#pragma GCC unroll 2
    for (int r = 0; r < QN_R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < QN_T; t++) acc[r][t] = accm[r][t] = V(setzero_ps)(), is[r][t] = ms[r][t] = VI_ZERO();
    for (int64_t k = 0; k < nb; k++) {
        const int b = (int)(k % KERN_QN_BLOCKS);
        const uint8_t *sb[QN_R];
        VF f0[QN_R], f1[QN_R];
        VI sc[QN_R][4];
#pragma GCC unroll 2
        for (int r = 0; r < QN_R; r++) {
            sb[r] = w + (size_t)r * tb + (size_t)(k / KERN_QN_BLOCKS) * sbb;
            if (pf) /* the tiles' first pass from memory: as QN(tile)'s decode calls */
                kern_x86_prefetch_ahead(sb[r] + (size_t)b * (sbb / KERN_QN_BLOCKS), sbb / KERN_QN_BLOCKS);
            sc[r][0] = sc[r][1] = sc[r][2] = sc[r][3] = VI_ZERO();
            f0[r] = f1[r] = V(setzero_ps)();
            QN(factors)(kind, sb[r], b, 0, &f0[r], &f1[r], sc[r]);
        }
        const int8_t *a[QN_T];
        int32_t S[QN_T];
#pragma GCC unroll 4
        for (int t = 0; t < QN_T; t++) if (t < nt) {
            const uint8_t *xr = xq + (size_t)t * xs;
            a[t] = (const int8_t *)xr + k * KERN_QK;
            S[t] = -((const int32_t *)(xr + o.c))[k] / 128;
        }
        /* groups [g0, g1) of every tile times every token, into p[r][t] */
#define QN_DOTS(g0, g1, p)                                                                           \
    _Pragma("GCC unroll 8") for (int g = (g0); g < (g1); g++) {                                      \
        VI wv[QN_R];                                                                                 \
        _Pragma("GCC unroll 2") for (int r = 0; r < QN_R; r++)                            \
            wv[r] = QN_GROUP(sb[r], hdr, bits, b, g, 0);                                          \
        _Pragma("GCC unroll 4") for (int t = 0; t < QN_T; t++) if (t < nt) {                         \
            const VI x = V(set1_epi32)(ld32(a[t] + 4 * g));                                          \
            _Pragma("GCC unroll 2") for (int r = 0; r < QN_R; r++)                        \
                p[r][t] = QN_DOT(p[r][t], wv[r], x);                                                 \
        }                                                                                            \
    }
        if (kind == KERN_QN_B0 || kind == KERN_QN_B1) {
            VI p[QN_R][QN_T];
#pragma GCC unroll 4
            for (int t = 0; t < QN_T; t++) if (t < nt) {
                const VI p0 = V(set1_epi32)(kind == KERN_QN_B0 ? -off * S[t] : 0);
#pragma GCC unroll 2
                for (int r = 0; r < QN_R; r++) p[r][t] = p0;
            }
            QN_DOTS(0, 8, p)
#pragma GCC unroll 2
            for (int r = 0; r < QN_R; r++)
#pragma GCC unroll 4
                for (int t = 0; t < QN_T; t++) if (t < nt) {
                    const uint8_t *xr = xq + (size_t)t * xs;
                    const VF vD = V(set1_ps)(((const float *)(xr + o.d))[k]);
                    acc[r][t] = V(fmadd_ps)(V(cvtepi32_ps)(p[r][t]), V(mul_ps)(f0[r], vD), acc[r][t]);
                    if (kind == KERN_QN_B1)
                        acc[r][t] = V(fmadd_ps)(f1[r], V(set1_ps)(((const float *)(xr + o.sd))[k]), acc[r][t]);
                }
            continue;
        }
        /* K: the block's dots times its scale; K6: each half's times its own, its offset
         * term first (one pair dot into the sum, as QN(ktoken) has it) */
        if (kind == KERN_QN_K6)
#pragma GCC unroll 4
            for (int t = 0; t < QN_T; t++) if (t < nt) {
                const VI hp = V(set1_epi32)(((const int32_t *)(xq + (size_t)t * xs + o.hp))[k]);
#pragma GCC unroll 2
                for (int r = 0; r < QN_R; r++) is[r][t] = QN_DOTW(is[r][t], sc[r][2], hp);
            }
#pragma GCC unroll 2
        for (int hb = 0; hb < 2; hb++) {
            if (hb && kind == KERN_QN_K) break;
            VI p[QN_R][QN_T];
#pragma GCC unroll 4
            for (int t = 0; t < QN_T; t++) if (t < nt)
#pragma GCC unroll 2
                for (int r = 0; r < QN_R; r++) p[r][t] = VI_ZERO();
            if (kind == KERN_QN_K) {
                QN_DOTS(0, 8, p)
            } else if (hb == 0) {
                QN_DOTS(0, 4, p)
            } else {
                QN_DOTS(4, 8, p)
            }
#pragma GCC unroll 2
            for (int r = 0; r < QN_R; r++)
#pragma GCC unroll 4
                for (int t = 0; t < QN_T; t++) if (t < nt)
                    is[r][t] = V(add_epi32)(is[r][t], V(mullo_epi32)(p[r][t], sc[r][hb]));
        }
#undef QN_DOTS
        if (b + 1 < KERN_QN_BLOCKS && k + 1 < nb) continue;
        /* the super-block's float step */
        const int64_t k0 = k - b;
#pragma GCC unroll 2
        for (int r = 0; r < QN_R; r++) {
            const VF d = QN_H16(sb[r]), dmin = QN_H16(sb[r] + 32);
            VI mp[4];
            if (kind == KERN_QN_K)
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++)
                    mp[j] = VI_OR(QN_U8I(sb[r] + 192 + 32 * j), V(slli_epi32)(QN_U8I(sb[r] + 208 + 32 * j), 16));
#pragma GCC unroll 4
            for (int t = 0; t < QN_T; t++) if (t < nt) {
                const uint8_t *xr = xq + (size_t)t * xs;
                const VF vD = V(set1_ps)(((const float *)(xr + o.d))[k0]);
                if (kind == KERN_QN_K) ms[r][t] = QN(kmins)(mp, xr, o, k0);
                acc[r][t] = V(fmadd_ps)(V(cvtepi32_ps)(is[r][t]), V(mul_ps)(d, vD), acc[r][t]);
                if (kind != KERN_QN_K6)
                    accm[r][t] = V(fmadd_ps)(V(cvtepi32_ps)(ms[r][t]), V(mul_ps)(dmin, vD), accm[r][t]);
                is[r][t] = ms[r][t] = VI_ZERO();
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < QN_R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < QN_T; t++) if (t < nt)
            QN_STORE(y + t * ldy + r * KERN_TILE, mask[r], V(sub_ps)(acc[r][t], accm[r][t]));
}

#endif

/* The instantiations: NAME_T for T tokens, and the kind's table NAME[T]. */
#define QN_ONE(NAME, KIND, BITS, OFF, T)                                                                 \
    static QN_ATTR void QN(NAME##_##T)(const uint8_t *w, size_t hdr, size_t sbb, int64_t nb, const uint8_t *xq, \
                                       size_t xs, kern_xq_offs o, float *y, int64_t ldy, int halves,      \
                                       const QN_MASK *mask, int pf)                                     \
    {                                                                                                    \
        QN(tile)(KIND, BITS, OFF, T, w, hdr, sbb, nb, xq, xs, o, y, ldy, halves, mask, pf);              \
    }
#ifdef QN_PAIR
#define QN_PAIR_ONE(NAME, KIND, BITS, OFF, T)                                                            \
    static QN_ATTR void QN(NAME##_p##T)(const uint8_t *w, size_t tb, size_t hdr, size_t sbb, int64_t nb,   \
                                        const uint8_t *xq, size_t xs, kern_xq_offs o, float *y, int64_t ldy, \
                                        const QN_MASK *mask, int pf)                                    \
    {                                                                                                    \
        QN(rows)(KIND, BITS, OFF, T, w, tb, hdr, sbb, nb, xq, xs, o, y, ldy, mask, pf);                 \
    }
#define QN_PAIRS(NAME, KIND, BITS, OFF)                                                                  \
    QN_PAIR_ONE(NAME, KIND, BITS, OFF, 1) QN_PAIR_ONE(NAME, KIND, BITS, OFF, 2)                          \
    QN_PAIR_ONE(NAME, KIND, BITS, OFF, 3) QN_PAIR_ONE(NAME, KIND, BITS, OFF, 4)                          \
    static const QN_PAIR_FN QN(NAME##_pairs)[QN_T + 1] = { NULL, QN(NAME##_p1), QN(NAME##_p2), QN(NAME##_p3), \
                                                           QN(NAME##_p4) };
#else
#define QN_PAIRS(NAME, KIND, BITS, OFF)
#endif
#if QN_TMAX == 8
#define QN_KIND(NAME, KIND, BITS, OFF)                                                                   \
    QN_ONE(NAME, KIND, BITS, OFF, 1) QN_ONE(NAME, KIND, BITS, OFF, 2) QN_ONE(NAME, KIND, BITS, OFF, 3)  \
    QN_ONE(NAME, KIND, BITS, OFF, 4) QN_ONE(NAME, KIND, BITS, OFF, 5) QN_ONE(NAME, KIND, BITS, OFF, 6)  \
    QN_ONE(NAME, KIND, BITS, OFF, 7) QN_ONE(NAME, KIND, BITS, OFF, 8)                                   \
    static const QN_FN QN(NAME)[9] = { NULL, QN(NAME##_1), QN(NAME##_2), QN(NAME##_3), QN(NAME##_4),   \
                                       QN(NAME##_5), QN(NAME##_6), QN(NAME##_7), QN(NAME##_8) };
#elif QN_TMAX == 4
#define QN_KIND(NAME, KIND, BITS, OFF)                                                                   \
    QN_ONE(NAME, KIND, BITS, OFF, 1) QN_ONE(NAME, KIND, BITS, OFF, 2) QN_ONE(NAME, KIND, BITS, OFF, 3)  \
    QN_ONE(NAME, KIND, BITS, OFF, 4)                                                                     \
    static const QN_FN QN(NAME)[5] = { NULL, QN(NAME##_1), QN(NAME##_2), QN(NAME##_3), QN(NAME##_4) };
#else
#error "QN_TMAX must be 4 or 8"
#endif

QN_KIND(q4_0, KERN_QN_B0, 4, 8)
QN_KIND(q4_1, KERN_QN_B1, 4, 0)
QN_KIND(q5_0, KERN_QN_B0, 5, 16)
QN_KIND(q5_1, KERN_QN_B1, 5, 0)
QN_KIND(q4_k, KERN_QN_K, 4, 0)
QN_KIND(q5_k, KERN_QN_K, 5, 0)
QN_KIND(q6_k, KERN_QN_K6, 6, 32)
QN_KIND(q2_k, KERN_QN_K2, 2, 0)
QN_PAIRS(q4_0, KERN_QN_B0, 4, 8)
QN_PAIRS(q4_1, KERN_QN_B1, 4, 0)
QN_PAIRS(q5_0, KERN_QN_B0, 5, 16)
QN_PAIRS(q5_1, KERN_QN_B1, 5, 0)
QN_PAIRS(q4_k, KERN_QN_K, 4, 0)
QN_PAIRS(q5_k, KERN_QN_K, 5, 0)
QN_PAIRS(q6_k, KERN_QN_K6, 6, 32)

static const QN_FN *const QN(tables)[KERN_W_COUNT] = {
    [KERN_W_Q4_0] = QN(q4_0), [KERN_W_Q4_1] = QN(q4_1), [KERN_W_Q5_0] = QN(q5_0), [KERN_W_Q5_1] = QN(q5_1),
    [KERN_W_Q4_K] = QN(q4_k), [KERN_W_Q5_K] = QN(q5_k), [KERN_W_Q6_K] = QN(q6_k), [KERN_W_Q2_K] = QN(q2_k),
};
#ifdef QN_PAIR
/* Q2_K has none: its values are scaled once per block for all of a call's tokens
 * (QN(k2_scale)), which 8-token calls of one tile amortize better than 4-token passes. */
static const QN_PAIR_FN *const QN(pair_tables)[KERN_W_COUNT] = {
    [KERN_W_Q4_0] = QN(q4_0_pairs), [KERN_W_Q4_1] = QN(q4_1_pairs), [KERN_W_Q5_0] = QN(q5_0_pairs),
    [KERN_W_Q5_1] = QN(q5_1_pairs), [KERN_W_Q4_K] = QN(q4_k_pairs), [KERN_W_Q5_K] = QN(q5_k_pairs),
    [KERN_W_Q6_K] = QN(q6_k_pairs),
};
#undef QN_T
#endif

#undef QN_INLINE
#undef QN_K2_SCALED
#undef QN_ONE
#undef QN_KIND
#undef QN_PAIR_ONE
#undef QN_PAIRS
