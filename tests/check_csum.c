/*
 * Suite "csum": the segment checksum. Every variant gives the scalar reference's bits
 * (tolerance: none) for every length and alignment; every single-bit flip and a swap
 * of two stripes change the sum; chaining and a pinned value (the sums are stored in
 * segments: changing them needs a new SEG_LAYOUT_VERSION).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "csum.h"

static void fill_random(unsigned char *b, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (unsigned char)(seed >> 56);
    }
}

START_TEST(test_variants_match_scalar)
{
    const char *names[] = { "avx2" };
    enum { N = 1 << 20 };
    unsigned char *buf = malloc(N + 64);
    fill_random(buf, N + 64, 1);
    int tested = 0;
    for (size_t v = 0; v < sizeof names / sizeof *names; v++) {
        const csum_impl *c = csum_get(names[v]);
        if (!c) {
            fprintf(stderr, "csum: %s not available here, not compared\n", names[v]);
            continue;
        }
        tested++;
        for (size_t off = 0; off < 8; off++)
            for (size_t n = 0; n <= 1100; n++)
                ck_assert_msg(c->fn(buf + off, n, n * 7) == csum64_scalar(buf + off, n, n * 7),
                              "%s differs from scalar at offset %zu, length %zu", names[v], off, n);
        ck_assert_uint_eq(c->fn(buf + 3, N, 0), csum64_scalar(buf + 3, N, 0));
    }
    fprintf(stderr, "csum: %d variant(s) compared with scalar; csum64 uses %s\n", tested, csum_name());
    free(buf);
}
END_TEST

START_TEST(test_detects_flips_and_swaps)
{
    enum { N = 4096 + 37 };
    unsigned char *b = malloc(N);
    fill_random(b, N, 2);
    const csum_impl *impls[] = { csum_get("scalar"), csum_get("avx2") };
    for (size_t v = 0; v < 2; v++) {
        const csum_impl *c = impls[v];
        if (!c) continue;
        uint64_t ref = c->fn(b, N, 0);
        for (size_t bit = 0; bit < (size_t)N * 8; bit++) {
            b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            ck_assert_msg(c->fn(b, N, 0) != ref, "%s: flip of bit %zu not seen", c->name, bit);
            b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        }
        unsigned char t[64]; /* two stripes swapped */
        memcpy(t, b + 64, 64);
        memcpy(b + 64, b + 640, 64);
        memcpy(b + 640, t, 64);
        ck_assert_uint_ne(c->fn(b, N, 0), ref);
        memcpy(b + 640, b + 64, 64);
        memcpy(b + 64, t, 64);
        ck_assert_uint_eq(c->fn(b, N, 0), ref);
        /* trailing zeros are not the same input: the length counts */
        unsigned char z[128] = { 0 };
        ck_assert_uint_ne(c->fn(z, 100, 0), c->fn(z, 101, 0));
        ck_assert_uint_ne(c->fn(z, 64, 0), c->fn(z, 128, 0));
        ck_assert_uint_ne(c->fn(b, N, 0), c->fn(b, N, 1)); /* the seed counts */
    }
    free(b);
}
END_TEST

START_TEST(test_pinned_values)
{
    unsigned char b[1000];
    for (int i = 0; i < 1000; i++)
        b[i] = (unsigned char)i;
    uint64_t h0 = csum64(b, 0, 0), h1 = csum64(b, 1000, 0), h2 = csum64(b, 1000, h1);
    fprintf(stderr, "csum: pinned %016llx %016llx %016llx\n", (unsigned long long)h0,
            (unsigned long long)h1, (unsigned long long)h2);
    ck_assert_uint_eq(h0, 0x59f831ecdaf11b17ull);
    ck_assert_uint_eq(h1, 0x0e18bb902ef48d78ull);
    ck_assert_uint_eq(h2, 0x2117cfb76bd36b0dull);
}
END_TEST

/* The variant is chosen once from cpu_features(); LLM_CSUM names another (common/cpu.h's
 * convention) and an unknown name keeps the automatic choice. */
START_TEST(test_dispatch_override)
{
    unsetenv("LLM_CSUM");
    csum_init();
    const char *best = csum_name();
    ck_assert_ptr_nonnull(csum_get(best));
    ck_assert_ptr_nonnull(csum_get("scalar"));
    ck_assert_ptr_null(csum_get("no-such-variant"));
    ck_assert_ptr_null(csum_get(NULL));
#if defined(__x86_64__)
    ck_assert_str_eq(best, cpu_features() & CPU_AVX2 ? "avx2" : "scalar");
#endif
    setenv("LLM_CSUM", "scalar", 1);
    csum_init();
    ck_assert_str_eq(csum_name(), "scalar");
    ck_assert_uint_eq(csum64("abc", 3, 0), csum64_scalar("abc", 3, 0));
    setenv("LLM_CSUM", "no-such-variant", 1);
    csum_init();
    ck_assert_str_eq(csum_name(), best);
    unsetenv("LLM_CSUM");
    csum_init();
}
END_TEST

Suite *csum_suite(void)
{
    Suite *s = suite_create("csum");
    TCase *tc = tcase_create("csum");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_variants_match_scalar);
    tcase_add_test(tc, test_detects_flips_and_swaps);
    tcase_add_test(tc, test_pinned_values);
    tcase_add_test(tc, test_dispatch_override);
    suite_add_tcase(s, tc);
    return s;
}
