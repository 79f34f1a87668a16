/*
 * csum.h - a fast 64-bit checksum of a byte range, for noticing corrupted weight
 * segments (a flipped bit, a torn or misplaced write). It is not a MAC: anyone who can
 * write the data can recompute it, so it protects against accidents, not against a
 * writer; who may write a segment is settled by its owner and mode (segment.c).
 *
 *   uint64_t h = csum64(buf, len, 0);          // one range
 *   h = csum64(more, more_len, h);             // chained: the previous sum as seed
 *
 * Definition (the reference is csum64_scalar; every variant gives the same bits). The
 * input is read as 64-byte stripes of eight little-endian u64 words x[0..7]; the last,
 * partial stripe is zero-padded. With s the stripe index and k[l] = K[l] + s * C:
 *   d = x[l] ^ k[l];  acc[l] += lo32(d) * hi32(d);  acc[l ^ 1] += x[l]
 * (all mod 2^64). The raw add makes every single-bit flip change an accumulator; the
 * products make the sum depend on where each word sits. Then the eight accumulators, the length and
 * the seed are folded through 64x64->128-bit multiplies. The values are part of the
 * segment layout: changing them needs a new SEG_LAYOUT_VERSION.
 *
 * Speed: the AVX2 variant does a stripe in two 256-bit multiply-adds and runs at
 * memory speed on one core; the scalar one at roughly half of that. The variant is
 * picked once, on the first call, from cpu_features() (common/cpu.h's dispatch
 * convention: LLM_CSUM=scalar or =avx2 overrides the choice).
 * Reentrant; allocates nothing.
 */
#ifndef LLM_CSUM_H
#define LLM_CSUM_H

#include <stddef.h>
#include <stdint.h>

/* A variant: name and function. */
typedef struct {
    const char *name; /* "scalar", "avx2" */
    uint64_t  (*fn)(const void *p, size_t n, uint64_t seed);
} csum_impl;

/* Checksum of n bytes at p (any alignment, n may be 0), chained from seed. */
uint64_t csum64(const void *p, size_t n, uint64_t seed);

/* The reference implementation. */
uint64_t csum64_scalar(const void *p, size_t n, uint64_t seed);

/* The named variant if it is compiled in and this CPU runs it, else NULL (tests). */
const csum_impl *csum_get(const char *name);

/* Name of the variant csum64 uses. */
const char *csum_name(void);

/* Picks the variant again, reading LLM_CSUM anew (csum64 picks on its first call
 * anyway). Not thread-safe: for tests, before concurrent use. */
void csum_init(void);

#endif
