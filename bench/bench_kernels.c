/*
 * bench_kernels - throughput of the q8t matrix kernels, per kernel table, 1 and 2 threads:
 *   decode: a 5632 x 2048 q8t matrix (TinyLlama's FFN shape), cycling over enough
 *     copies (~200 MB) that the weights come from memory, not L3: GB/s of weights read,
 *     for 1, 2, 4, 8 and 16 tokens at once (sessions decoded together).
 *   GEMM (prefill): the same matrix times 512 tokens: G int8 ops/s (2 per multiply-add).
 *   And the round trip of an empty pool_run with 2 threads.
 *
 *   build/bench/bench_kernels [table ...]   (default: every SIMD table this CPU runs)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "pool.h"

#define ROWS   5632
#define COLS   2048
#define TOKENS 512
#ifndef COPIES
#define COPIES 16
#endif

typedef struct {
    const kern_ops *ops;
    const unsigned char *w;
    const unsigned char *x;
    int64_t n_tok;
    float  *y;
} mm_job;

static void mm_part(void *arg, int ith, int nth)
{
    mm_job *j = arg;
    int64_t r0, r1;
    pool_range(ROWS, 16, ith, nth, &r0, &r1);
    kern_q8t_matmul(j->w, COLS, j->x, j->n_tok, j->y, ROWS, r0, r1);
}

static void empty_part(void *arg, int ith, int nth) { (void)arg; (void)ith; (void)nth; }

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench_table(const kern_ops *ops, unsigned char *w, size_t wbytes, unsigned char *x, float *y)
{
    kern_active = ops;
    for (int nt = 1; nt <= 2; nt++) {
        pool_t *pool = pool_new(nt);
        if (!pool) exit(1);
        mm_job j = { .ops = ops, .x = x, .y = y, .n_tok = 1 };
        /* 1..16 tokens at once (sessions decoded together): three sweeps over all
         * copies, the first as warm-up */
        static const int batch[] = { 1, 2, 4, 8, 16 };
        for (int b = 0; b < 5; b++) {
            j.n_tok = batch[b];
            double best = 1e30;
            for (int sweep = 0; sweep < 3; sweep++) {
                double t0 = now();
                for (int c = 0; c < COPIES; c++) {
                    j.w = w + (size_t)c * wbytes;
                    pool_run(pool, mm_part, &j);
                }
                double dt = (now() - t0) / COPIES;
                if (sweep > 0 && dt < best) best = dt;
            }
            printf("%-10s %2d token%s %dx%d q8t, %d thread%s: %6.1f GB/s  (%.3f ms per matrix)\n", ops->name,
                   batch[b], batch[b] > 1 ? "s" : " ", ROWS, COLS, nt, nt > 1 ? "s" : " ", wbytes / best * 1e-9,
                   best * 1e3);
        }
        /* GEMM: 512 tokens on one copy */
        j.w = w;
        j.n_tok = TOKENS;
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
            pool_run(pool, mm_part, &j);
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        printf("%-10s GEMM %dx%d q8t x %d tokens, %d thread%s: %6.1f G int8 ops/s  (%.1f ms)\n", ops->name,
               ROWS, COLS, TOKENS, nt, nt > 1 ? "s" : " ", 2.0 * ROWS * COLS * TOKENS / best * 1e-9, best * 1e3);
        pool_destroy(&pool);
    }
}

int main(int argc, char **argv)
{
    kern_init();
    size_t wbytes = kern_q8t_bytes(ROWS, COLS), rb = kern_q8_row_bytes(COLS), xs = kern_xq_row_bytes(COLS);
    unsigned char *w = aligned_alloc(64, wbytes * COPIES), *x = aligned_alloc(64, TOKENS * xs);
    unsigned char *q8 = malloc(KERN_TILE * rb);
    float *row = malloc(COLS * sizeof *row), *y = malloc((size_t)TOKENS * ROWS * sizeof *y);
    if (!w || !x || !row || !y || !q8) {
        fprintf(stderr, "bench_kernels: out of memory\n");
        return 1;
    }
    unsigned s = 12345;
    for (int64_t r = 0; r < ROWS; r++) {
        for (int i = 0; i < COLS; i++) row[i] = (float)((s = s * 1103515245u + 12345u) >> 9) / 8388608.0f - 1.0f;
        kern_q8_quantize_w(row, COLS, q8 + (r % KERN_TILE) * rb);
        if (r % KERN_TILE == KERN_TILE - 1 || r == ROWS - 1)
            kern_q8t_pack(q8, (int)(r % KERN_TILE) + 1, COLS, w + r / KERN_TILE * kern_q8t_tile_bytes(COLS));
    }
    for (int c = 1; c < COPIES; c++) memcpy(w + c * wbytes, w, wbytes);
    for (int t = 0; t < TOKENS; t++) {
        for (int i = 0; i < COLS; i++) row[i] = (float)((s = s * 1103515245u + 12345u) >> 9) / 8388608.0f - 1.0f;
        kern_xq_quantize(row, 1, COLS, x + t * xs);
    }
    printf("kernels: default table on this CPU is %s\n", kern_name());
    {
        /* what one pool_run costs when the work is nothing: the per-kernel overhead of
         * decode, which calls the pool about ten times per layer per token */
        pool_t *pool = pool_new(2);
        if (!pool) return 1;
        enum { CALLS = 20000 };
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
            for (int i = 0; i < CALLS; i++) pool_run(pool, empty_part, NULL);
            double dt = (now() - t0) / CALLS;
            if (dt < best) best = dt;
        }
        printf("pool_run round trip, 2 threads, empty job: %.2f us\n", best * 1e6);
        pool_destroy(&pool);
    }
    const kern_ops *dflt = kern_active;
    if (argc > 1) {
        for (int i = 1; i < argc; i++) {
            const kern_ops *ops = kern_get(argv[i]);
            if (!ops) fprintf(stderr, "bench_kernels: table %s not available here\n", argv[i]);
            else bench_table(ops, w, wbytes, x, y);
        }
    } else {
        const char *names[] = { "avx512vnni", "avxvnni", "avx2", "neon" };
        for (int i = 0; i < 4; i++)
            if (kern_get(names[i])) bench_table(kern_get(names[i]), w, wbytes, x, y);
    }
    kern_active = dflt;
    free(w); free(x); free(row); free(y); free(q8);
    return 0;
}
