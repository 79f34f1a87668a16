/*
 * bench_csum - the segment checksum (common/csum.h) against a plain streaming read of
 * the same buffer, measured back to back: GB/s of each csum variant and of the read,
 * and their ratio (1.0 = the checksum runs at memory speed). Best of a few passes over
 * a buffer far larger than the caches; one thread, as the segment build uses.
 *
 *   build/bench/bench_csum [MiB] [passes]      (defaults: 1024 MiB, 5 passes)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "csum.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t plain_read(const unsigned char *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;
    for (size_t i = 0; i + 64 <= n; i += 64) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
    }
    __m256i a = _mm256_add_epi64(a0, a1);
    return (uint64_t)_mm256_extract_epi64(a, 0) + (uint64_t)_mm256_extract_epi64(a, 3);
}
#else
static uint64_t plain_read(const unsigned char *p, size_t n)
{
    uint64_t s = 0, x;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        memcpy(&x, p + i, 8);
        s += x;
    }
    return s;
}
#endif

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    int passes = argc > 2 ? atoi(argv[2]) : 5;
    if (mib < 64 || passes < 1) {
        fprintf(stderr, "usage: bench_csum [MiB >= 64] [passes >= 1]\n");
        return 2;
    }
    size_t n = mib << 20;
    unsigned char *buf = malloc(n);
    if (!buf) {
        fprintf(stderr, "error: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        buf[i] = (unsigned char)((i * 2654435761u) >> 13);
    const char *names[] = { "scalar", "avx2" };
    const csum_impl *impls[2] = { csum_get(names[0]), csum_get(names[1]) };
    double best[3] = { 1e30, 1e30, 1e30 }; /* scalar, avx2, plain read */
    volatile uint64_t sink = 0;
    for (int p = 0; p < passes; p++) {
        for (int k = 0; k < 3; k++) {
            if (k < 2 && !impls[k])
                continue;
            double t = now_s();
            sink += k < 2 ? impls[k]->fn(buf, n, 0) : plain_read(buf, n);
            t = now_s() - t;
            if (t < best[k])
                best[k] = t;
        }
    }
    printf("buffer %zu MiB, best of %d, one thread; csum64 uses %s\n", mib, passes, csum_name());
    printf("plain read        %6.1f GB/s\n", n / best[2] / 1e9);
    for (int k = 0; k < 2; k++)
        if (impls[k])
            printf("csum64 %-10s %6.1f GB/s  (%.2f of the plain read)\n", names[k], n / best[k] / 1e9,
                   best[2] / best[k]);
    (void)sink;
    free(buf);
    return 0;
}
