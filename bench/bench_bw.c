/*
 * bench_bw - memory read bandwidth: an AVX2 streaming read over a 1 GiB buffer with
 * 1, 2, 4, ... threads up to a maximum (each thread reads its share), best of a few
 * passes, in GB/s (1 GB = 1e9 bytes). The decode benchmark's GB/s is compared with this
 * figure. Make the buffer several times the last-level cache (on a 16-core Xeon with
 * 300 MiB of L3, 4096 MiB), or part of it is read from the cache.
 *
 *   build/bench/bench_bw [MiB] [passes] [max threads]   (defaults: 1024 MiB, 3 passes, 2)
 *   BENCH_HUGE=1 build/bench/bench_bw    # the buffer in 2 MB pages where the kernel gives
 *                                        # them (transparent huge pages: madvise), as a
 *                                        # segment gets them from a huge=within_size
 *                                        # /dev/shm (README: huge pages)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "pool.h"

typedef struct {
    const unsigned char *buf;
    size_t               bytes;
    int                  n_threads; /* threads that read; the others idle */
    unsigned long long   sink[POOL_MAX_THREADS];
} bw_job;

#if defined(__x86_64__)
__attribute__((target("avx2")))
static unsigned long long read_avx2(const unsigned char *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (unsigned long long)_mm256_extract_epi64(a, 0) ^ (unsigned long long)_mm256_extract_epi64(a, 3);
}
#endif

static unsigned long long read_plain(const unsigned char *p, size_t n)
{
    const unsigned long long *q = (const unsigned long long *)p;
    unsigned long long s = 0;
    for (size_t i = 0; i < n / 8; i++) s ^= q[i];
    return s;
}

static void bw_part(void *arg, int ith, int nth)
{
    bw_job *j = arg;
    if (ith >= j->n_threads) return;
    size_t per = j->bytes / (size_t)j->n_threads / 128 * 128;
    const unsigned char *p = j->buf + per * (size_t)ith;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) { j->sink[ith] = read_avx2(p, per); return; }
#endif
    j->sink[ith] = read_plain(p, per);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    int passes = argc > 2 ? atoi(argv[2]) : 3;
    int max_threads = argc > 3 ? atoi(argv[3]) : 2;
    if (mib < 1 || passes < 1 || max_threads < 1 || max_threads > POOL_MAX_THREADS) {
        fprintf(stderr, "usage: bench_bw [MiB >= 1] [passes >= 1] [max threads 1..%d]\n", POOL_MAX_THREADS);
        return 2;
    }
    size_t bytes = mib << 20;
    unsigned char *buf = aligned_alloc(2 << 20, bytes); /* 2 MB aligned: whole huge pages */
    if (!buf) {
        fprintf(stderr, "bench_bw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    const char *env = getenv("BENCH_HUGE");
    const int huge = env && *env && strcmp(env, "0") != 0;
    if (huge && madvise(buf, bytes, MADV_HUGEPAGE) != 0)
        fprintf(stderr, "bench_bw: madvise(MADV_HUGEPAGE): %s (4 KB pages)\n", strerror(errno));
    memset(buf, 0x5a, bytes); /* fault every page in before timing */
    if (huge) {
        char line[256];
        long kb = -1;
        FILE *f = fopen("/proc/self/smaps_rollup", "r");
        while (f && fgets(line, sizeof line, f) && sscanf(line, "AnonHugePages: %ld kB", &kb) != 1) {}
        if (f) fclose(f);
        printf("buffer in 2 MB pages: %ld of %zu MiB\n", kb < 0 ? 0 : kb / 1024, mib);
    }
    pool_t *pool = pool_new(max_threads);
    if (!pool) return 1;
    bw_job job = { .buf = buf, .bytes = bytes };
    unsigned long long sink = 0;
    for (int nt = 1; nt <= max_threads; nt = nt * 2 > max_threads && nt < max_threads ? max_threads : nt * 2) {
        job.n_threads = nt;
        double best = 1e30;
        for (int p = 0; p < passes; p++) {
            double t0 = now();
            pool_run(pool, bw_part, &job);
            double dt = now() - t0;
            if (dt < best) best = dt;
            for (int i = 0; i < nt; i++) sink ^= job.sink[i];
        }
        size_t read = bytes / (size_t)nt / 128 * 128 * (size_t)nt;
        printf("read bandwidth, %d thread%s: %.1f GB/s (%zu MiB, best of %d)\n", nt, nt > 1 ? "s" : "",
               read / best * 1e-9, mib, passes);
    }
    pool_destroy(&pool);
    free(buf);
    return sink == 42 ? 3 : 0; /* keeps the reads alive */
}
