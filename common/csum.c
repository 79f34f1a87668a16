/* csum.c - the 64-bit checksum of csum.h: scalar reference, AVX2 twin, and the choice
 * between them (common/cpu.h's dispatch: once, LLM_CSUM overrides). */
#include "csum.h"

#include <pthread.h>
#include <string.h>

#include "cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define CSUM_STEP 0x9E3779B97F4A7C15ull /* C: the keys move by this each stripe (odd) */

static const uint64_t key[8] = { /* K */
    0xa0761d6478bd642full, 0xe7037ed1a0b428dbull, 0x8ebc6af09c88c6e3ull, 0x589965cc75374cc3ull,
    0x1d8e4e27c47d124full, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull, 0xd6e8feb86659fd93ull,
};
static const uint64_t fold_key[8] = {
    0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull, 0x27d4eb2f165667c5ull, 0xff51afd7ed558ccdull,
    0xc4ceb9fe1a85ec53ull, 0x85ebca77c2b2ae63ull, 0x9fb21c651e98df25ull, 0xb492b66fbe98f273ull,
};

static inline uint64_t rd64(const unsigned char *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);
#endif
    return x;
}

/* lo ^ hi of the 128-bit product. */
static inline uint64_t fold(uint64_t a, uint64_t b)
{
    unsigned __int128 r = (unsigned __int128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/* One 64-byte stripe with index s: the products into prod, the raw words into raw
 * (csum.h's acc[l] is prod[l] + raw[l ^ 1]; the swap is done once, in finish). */
static inline void stripe(uint64_t prod[8], uint64_t raw[8], const unsigned char *b, uint64_t s)
{
    for (int l = 0; l < 8; l++) {
        uint64_t x = rd64(b + 8 * l), d = x ^ (key[l] + s * CSUM_STEP);
        prod[l] += (d & 0xffffffffu) * (d >> 32);
        raw[l] += x;
    }
}

/* The zero-padded last stripe (rem < 64 bytes, always one, possibly all padding) and
 * the fold of the accumulators with the length and the seed. Shared by every variant. */
static uint64_t finish(uint64_t prod[8], uint64_t raw[8], const unsigned char *tail, size_t rem,
                       uint64_t s, size_t n, uint64_t seed)
{
    unsigned char t[64] = { 0 };
    if (rem)
        memcpy(t, tail, rem);
    stripe(prod, raw, t, s);
    uint64_t h = seed ^ ((uint64_t)n * CSUM_STEP);
    for (int l = 0; l < 8; l++)
        h = fold(h ^ (prod[l] + raw[l ^ 1]), fold_key[l]);
    return h ^ (h >> 29);
}

uint64_t csum64_scalar(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = p;
    uint64_t prod[8] = { 0 }, raw[8] = { 0 }, s = 0;
    for (; n - s * 64 >= 64; s++)
        stripe(prod, raw, b + s * 64, s);
    return finish(prod, raw, b + s * 64, n - s * 64, s, n, seed);
}

#if defined(__x86_64__)
/* Lanes 0-3 and 4-7 of a stripe in two registers; _mm256_mul_epu32 is
 * lo32(d) * lo32(d >> 32). */
__attribute__((target("avx2"))) static uint64_t csum64_avx2(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = p;
    __m256i p0 = _mm256_setzero_si256(), p1 = p0, r0 = p0, r1 = p0;
    __m256i k0 = _mm256_loadu_si256((const __m256i *)key);
    __m256i k1 = _mm256_loadu_si256((const __m256i *)(key + 4));
    const __m256i step = _mm256_set1_epi64x((long long)CSUM_STEP);
    uint64_t s = 0;
    for (; n - s * 64 >= 64; s++) {
        __m256i x0 = _mm256_loadu_si256((const __m256i *)(b + s * 64));
        __m256i x1 = _mm256_loadu_si256((const __m256i *)(b + s * 64 + 32));
        __m256i d0 = _mm256_xor_si256(x0, k0), d1 = _mm256_xor_si256(x1, k1);
        p0 = _mm256_add_epi64(p0, _mm256_mul_epu32(d0, _mm256_srli_epi64(d0, 32)));
        p1 = _mm256_add_epi64(p1, _mm256_mul_epu32(d1, _mm256_srli_epi64(d1, 32)));
        r0 = _mm256_add_epi64(r0, x0);
        r1 = _mm256_add_epi64(r1, x1);
        k0 = _mm256_add_epi64(k0, step);
        k1 = _mm256_add_epi64(k1, step);
    }
    uint64_t prod[8], raw[8];
    _mm256_storeu_si256((__m256i *)prod, p0);
    _mm256_storeu_si256((__m256i *)(prod + 4), p1);
    _mm256_storeu_si256((__m256i *)raw, r0);
    _mm256_storeu_si256((__m256i *)(raw + 4), r1);
    return finish(prod, raw, b + s * 64, n - s * 64, s, n, seed);
}
#endif

/* Variants in order of preference (cpu.h's dispatch convention, LLM_CSUM). */
static const csum_impl impl_scalar = { "scalar", csum64_scalar };
#if defined(__x86_64__)
static const csum_impl impl_avx2 = { "avx2", csum64_avx2 };
#endif

static const cpu_impl impls[] = {
#if defined(__x86_64__)
    { "avx2", CPU_AVX2, &impl_avx2 },
#endif
    { "scalar", 0, &impl_scalar },
};
enum { N_IMPLS = sizeof impls / sizeof impls[0] };

const csum_impl *csum_get(const char *name)
{
    const cpu_impl *c = cpu_impl_get(impls, N_IMPLS, name);
    return c ? c->table : NULL;
}

static const csum_impl *active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void pick(void)
{
    active = cpu_impl_pick(impls, N_IMPLS, "LLM_CSUM")->table;
}

void csum_init(void)
{
    pthread_once(&active_once, pick);
    pick();
}

uint64_t csum64(const void *p, size_t n, uint64_t seed)
{
    pthread_once(&active_once, pick);
    return active->fn(p, n, seed);
}

const char *csum_name(void)
{
    pthread_once(&active_once, pick);
    return active->name;
}
