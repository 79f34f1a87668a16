/*
 * bench_sampler - microseconds per row for smp_sample on realistic logits
 * (normal(0, 3), a fresh row per call from a small rotating set, so rows are not all
 * in cache), for vocabularies of 512, 32000, 128256 and 151936 entries. Configs:
 *   default   llama.cpp's default chain (top_k 40, top_p 0.95, min_p 0.05, temp 0.8)
 *   greedy    temperature 0
 *   greedy-ie greedy with ignore_eos (benchmarks' setting: the eos is skipped in place)
 *   penalties default + repeat_penalty 1.1 over 64 tokens + DRY 0.8 over 1024 tokens
 *   no-top-k  top_k 0: top_p 0.95 + min_p 0.05 over the whole row
 *   n_probs   default + 10 log-probabilities of the raw row
 *   mirostat  mirostat 2 (tau 5, eta 0.1) over the whole row
 * Reports the median and the minimum over batches, in thread CPU time (the machine is
 * shared, so wall time would count other processes' turns).
 *
 *   build/bench/bench_sampler [rows-per-batch] [batches]   (defaults: 50 and 9)
 *
 * Owner: sampler (issue 5).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sampler.h"

enum { N_ROWS = 4, N_HIST = 1024 };

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Token texts like a real vocabulary's: short words, a few with a breaker in them. */
static char (*TEXT)[12];
static const char *piece(void *ctx, int32_t id, size_t *len)
{
    *len = strlen(TEXT[id]);
    return TEXT[id];
}

/* Times smp_sample; prints one line; returns the median in microseconds. */
static double run(const char *name, const smp_params *p, float **rows, int nv,
                  const int32_t *hist, int n_hist, int per_batch, int batches)
{
    smp_work *w = smp_work_new(nv);
    smp_work_set_pieces(w, piece, NULL);
    smp_state st;
    smp_state_init(&st, p, 1);
    smp_result r;
    double t[64];
    long sink = 0;
    for (int i = 0; i < N_ROWS; i++)   /* warm-up */
        sink += smp_sample(p, &st, rows[i], nv, hist, n_hist, 2, &r, w);
    for (int b = 0; b < batches; b++) {
        double t0 = now_us();
        for (int i = 0; i < per_batch; i++)
            sink += smp_sample(p, &st, rows[i % N_ROWS], nv, hist, n_hist, 2, &r, w);
        t[b] = (now_us() - t0) / per_batch;
    }
    qsort(t, (size_t)batches, sizeof t[0], cmp_d);
    printf("%-10s %7d %10.2f %10.2f   (checksum %ld)\n", name, nv, t[batches / 2], t[0], sink);
    smp_work_destroy(&w);
    return t[batches / 2];
}

int main(int argc, char **argv)
{
    int per_batch = argc > 1 ? atoi(argv[1]) : 50;
    int batches = argc > 2 ? atoi(argv[2]) : 9;
    if (per_batch < 1)
        per_batch = 1;
    if (batches < 1 || batches > 64)
        batches = 9;
    const int sizes[] = { 512, 32000, 128256, 151936 };
    TEXT = malloc(151936 * sizeof *TEXT);
    if (!TEXT)
        return 1;
    for (int i = 0; i < 151936; i++)
        snprintf(TEXT[i], sizeof TEXT[i], i % 97 == 5 ? "\n" : " w%d", i);
    int32_t hist[N_HIST];
    for (int i = 0; i < N_HIST; i++)
        hist[i] = (int32_t)(smp_rng_u64(5, 6, (uint32_t)i, 0) % 400) * 3 + 1;  /* ids = 5 mod 97 are "\n" */
    printf("bench_sampler: us per row (median, min) over %d batches of %d rows\n", batches, per_batch);
    printf("%-10s %7s %10s %10s\n", "config", "n_vocab", "median_us", "min_us");
    for (int s = 0; s < 4; s++) {
        int nv = sizes[s];
        float *rows[N_ROWS];
        for (int r = 0; r < N_ROWS; r++) {
            rows[r] = malloc((size_t)nv * sizeof(float));
            if (!rows[r])
                return 1;
            for (int i = 0; i < nv; i++) {
                double u1 = smp_rng_uniform(1, (uint64_t)r, (uint32_t)i, 0) + 1e-12;
                double u2 = smp_rng_uniform(1, (uint64_t)r, (uint32_t)i, 1);
                rows[r][i] = (float)(3.0 * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
            }
        }
        smp_params def = smp_params_default();
        def.seed = 1234;
        run("default", &def, rows, nv, NULL, 0, per_batch, batches);
        smp_params g = def;
        g.temperature = 0;
        run("greedy", &g, rows, nv, NULL, 0, per_batch, batches);
        smp_params gi = g;
        gi.ignore_eos = true;
        run("greedy-ie", &gi, rows, nv, NULL, 0, per_batch, batches);
        smp_params pen = def;
        pen.repeat_penalty = 1.1f;
        pen.dry_multiplier = 0.8f;
        pen.dry_penalty_last_n = N_HIST;
        run("penalties", &pen, rows, nv, hist, N_HIST, per_batch, batches);
        smp_params nk = def;
        nk.top_k = 0;
        run("no-top-k", &nk, rows, nv, NULL, 0, per_batch, batches);
        smp_params np = def;
        np.n_probs = 10;
        run("n_probs", &np, rows, nv, NULL, 0, per_batch, batches);
        smp_params mi = def;
        mi.mirostat = 2;
        run("mirostat", &mi, rows, nv, NULL, 0, per_batch, batches);
        for (int r = 0; r < N_ROWS; r++)
            free(rows[r]);
    }
    return 0;
}
