/*
 * bench_qn - decode throughput of the native weight layouts (kernels_qn.c) by type and
 * matrix shape: GB/s of weights read for one token (and 2, 4 and 8: a batched decode
 * step), 1 and 2 threads, over enough copies (~256 MB) that the weights come from
 * memory, not L3. Shapes are the FFN and attention matrices of TinyLlama-1.1B (rows 2048
 * and 5632 wide) and of gemma3-1b (rows 1152 and 6912 wide: 4.5 and 27 super-blocks)
 * and one expert of the qwen3moe-a0.6b shape, so a kernel that slows on one row width
 * shows it next to the others.
 *
 *   build/bench/bench_qn                 # q5_0 q4_0 q4_k q6_k, every shape
 *   build/bench/bench_qn q5_0 q8t        # those types
 *   BENCH_QN_CACHE=1 build/bench/bench_qn q4_k   # one copy, read again and again from
 *                                                # cache: the kernels' arithmetic rate
 *   BENCH_QN_SHAPE=5632x2048 BENCH_QN_TOK=1 BENCH_QN_THR=1 build/bench/bench_qn q4_0
 *                                                # one shape, one token count (1 to 16),
 *                                                # one thread count: quick enough to
 *                                                # alternate builds
 *
 * Compare the figures with bench_bw's read rate in the same minutes.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "pool.h"
#include "qtype.h"

#define TARGET_BYTES ((size_t)256 << 20)

typedef struct {
    int            wt;
    const uint8_t *w;
    const uint8_t *x;
    int64_t        rows, cols, n_tok;
    float         *y;
} mm_job;

static void mm_part(void *arg, int ith, int nth)
{
    mm_job *j = arg;
    int64_t r0, r1;
    pool_range(j->rows, 16, ith, nth, &r0, &r1);
    kern_wmatmul(j->wt, j->w, j->cols, j->x, j->n_tok, j->y, j->rows, r0, r1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float rnd(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)(*s >> 9) / 8388608.0f - 1.0f;
}

/* One rows x cols matrix of type wt (random values through the GGUF type's quantizer),
 * in tiles; returns its bytes and sets *out. */
static size_t make_matrix(int wt, int64_t rows, int64_t cols, uint8_t **out)
{
    uint32_t qt = wt == KERN_W_Q8T ? QT_Q8_0 : kern_qn_get(wt)->qtype;
    const qt_traits *t = qt_get(qt);
    size_t rb = qt_row_size(qt, cols), tb = kern_w_tile_bytes(wt, cols);
    size_t ntiles = (size_t)(rows + 15) / 16, bytes = ntiles * tb;
    uint8_t *w = aligned_alloc(64, bytes), *src = malloc(16 * rb);
    float *row = malloc((size_t)cols * sizeof *row);
    if (!w || !src || !row || !t || !t->quant) {
        fprintf(stderr, "bench_qn: cannot make a %s matrix\n", t ? t->name : "?");
        exit(1);
    }
    unsigned s = 12345;
    for (size_t tile = 0; tile < ntiles; tile++) {
        int n = (int)(rows - (int64_t)tile * 16 < 16 ? rows - (int64_t)tile * 16 : 16);
        for (int r = 0; r < n; r++) {
            for (int64_t i = 0; i < cols; i++) row[i] = rnd(&s);
            t->quant(row, src + r * rb, cols);
        }
        if (wt == KERN_W_Q8T) kern_q8t_pack(src, n, cols, w + tile * tb);
        else kern_qn_pack(wt, qt, src, rb, n, cols, w + tile * tb);
    }
    free(src);
    free(row);
    *out = w;
    return bytes;
}

/* The token counts a product is timed at (sessions decoded together), and
 * BENCH_QN_TOK and BENCH_QN_THR: the one token count (any of 1..TOK_MAX, not only
 * those of batch[]) and thread count to run (0: every one), set and checked by main. */
static const int batch[] = { 1, 2, 4, 8 };
#define TOK_MAX 16 /* BENCH_QN_TOK's largest */
#define N_BATCH ((int)(sizeof batch / sizeof batch[0]))
static int only_tok, only_thr;

/* A positive int from the environment: 0 when unset or empty, -1 when not one. */
static int env_int(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    long n = strtol(v, &end, 10);
    return *end || n <= 0 || n > INT_MAX ? -1 : (int)n;
}

static void bench_shape(int wt, const char *tname, int64_t rows, int64_t cols, const char *what)
{
    uint8_t *w1;
    size_t bytes = make_matrix(wt, rows, cols, &w1);
    const char *cache = getenv("BENCH_QN_CACHE");
    const int in_cache = cache && *cache && strcmp(cache, "0") != 0;
    int copies = in_cache ? 1 : (int)(TARGET_BYTES / bytes) + 1, passes = in_cache ? (int)(TARGET_BYTES / bytes) + 1 : 1;
    uint8_t *w = aligned_alloc(64, bytes * copies);
    size_t xs = kern_xq_row_bytes(cols);
    uint8_t *x = aligned_alloc(64, TOK_MAX * xs);
    float *y = malloc((size_t)TOK_MAX * rows * sizeof *y), *row = malloc((size_t)cols * sizeof *row);
    if (!w || !x || !y || !row) {
        fprintf(stderr, "bench_qn: out of memory\n");
        exit(1);
    }
    for (int c = 0; c < copies; c++) memcpy(w + (size_t)c * bytes, w1, bytes);
    unsigned s = 777;
    for (int t = 0; t < TOK_MAX; t++) {
        for (int64_t i = 0; i < cols; i++) row[i] = rnd(&s);
        kern_xq_quantize(row, 1, cols, x + t * xs);
        kern_xq_finish(x + t * xs, 1, cols);
    }
    for (int nt = 1; nt <= 2; nt++) {
        if (only_thr && nt != only_thr) continue;
        pool_t *pool = pool_new(nt);
        if (!pool) exit(1);
        for (int b = 0; b < (only_tok ? 1 : N_BATCH); b++) {
            const int n_tok = only_tok ? only_tok : batch[b];
            mm_job j = { .wt = wt, .x = x, .rows = rows, .cols = cols, .n_tok = n_tok, .y = y };
            double best = 1e30;
            for (int sweep = 0; sweep < 4; sweep++) {
                double t0 = now();
                for (int p = 0; p < passes; p++)
                    for (int c = 0; c < copies; c++) {
                        j.w = w + (size_t)c * bytes;
                        pool_run(pool, mm_part, &j);
                    }
                double dt = (now() - t0) / ((double)copies * passes);
                if (sweep > 0 && dt < best) best = dt;
            }
            printf("%-5s %-15s %5lldx%-5lld %d tok %d thr: %6.1f GB/s  %7.1f us/matrix\n", tname, what,
                   (long long)rows, (long long)cols, n_tok, nt, bytes / best * 1e-9, best * 1e6);
        }
        pool_destroy(&pool);
    }
    free(w1);
    free(w);
    free(x);
    free(y);
    free(row);
}

int main(int argc, char **argv)
{
    kern_init();
    static const struct {
        const char *what;
        int64_t     rows, cols;
    } shapes[] = {
        { "tinyllama up", 5632, 2048 }, { "tinyllama down", 2048, 5632 }, { "tinyllama q", 2048, 2048 },
        { "gemma3 up", 6912, 1152 },    { "gemma3 down", 1152, 6912 },    { "gemma3 q", 1024, 1152 },
        { "moe expert up", 768, 1024 }, { "moe expert down", 1024, 768 },
    };
    static const char *const dflt[] = { "q5_0", "q4_0", "q4_k", "q6_k" };
    only_tok = env_int("BENCH_QN_TOK"), only_thr = env_int("BENCH_QN_THR");
    if (only_tok < 0 || only_tok > TOK_MAX || (only_thr && only_thr != 1 && only_thr != 2)) {
        fprintf(stderr, "bench_qn: BENCH_QN_TOK must be 1 to %d and BENCH_QN_THR 1 or 2 (got \"%s\", \"%s\")\n", TOK_MAX,
                getenv("BENCH_QN_TOK") ? getenv("BENCH_QN_TOK") : "", getenv("BENCH_QN_THR") ? getenv("BENCH_QN_THR") : "");
        return 1;
    }
    const char *only = getenv("BENCH_QN_SHAPE"); /* "ROWSxCOLS": that shape alone */
    int ntypes = argc > 1 ? argc - 1 : 4;
    printf("bench_qn: kernel table %s\n", kern_name());
    for (int i = 0; i < ntypes; i++) {
        const char *name = argc > 1 ? argv[i + 1] : dflt[i];
        int wt = -1;
        if (!strcmp(name, "q8t")) wt = KERN_W_Q8T;
        for (int k = KERN_W_Q8T + 1; k < KERN_W_COUNT && wt < 0; k++)
            if (!strcmp(kern_qn_get(k)->name, name)) wt = k;
        if (wt < 0) {
            fprintf(stderr, "bench_qn: unknown type %s (q8t, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, q2_k)\n", name);
            return 1;
        }
        long long rr, cc;
        if (only && sscanf(only, "%lldx%lld", &rr, &cc) == 2 && rr > 0 && cc > 0 && cc % 256 % 32 == 0) {
            bench_shape(wt, name, rr, cc, "custom");
            continue;
        }
        const int whole = wt != KERN_W_Q8T && kern_qn_get(wt)->kind >= KERN_QN_K; /* K: whole super-blocks */
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            if (!whole || shapes[s].cols % (KERN_QN_BLOCKS * KERN_QK) == 0)
                bench_shape(wt, name, shapes[s].rows, shapes[s].cols, shapes[s].what);
    }
    return 0;
}
