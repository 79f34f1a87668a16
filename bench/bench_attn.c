/*
 * bench_attn - the attention of one decode token over a long context, per KV type (f32,
 * f16, q8_0) and kernel table, one thread: TinyLlama-1.1B's shape (22 layers, 4 kv heads
 * of 64 dims, 8 query heads each) over CTX cached positions, each layer's keys and
 * values in their own buffers (together 49-185 MB at 4096: they come from memory, as in
 * a real decode). Scores (kern_att_qk; q8_0: kern_att_q8_query and kern_att_qk8), softmax and value sums (kern_att_pv) per (layer,
 * kv head), the best of 5 runs.
 *
 *   build/bench/bench_attn [CTX] [table ...] [f32|f16|q8_0 ...]
 *   (defaults: 4096, every table this CPU runs, every KV type; BENCH_ATTN_REPS=N times
 *   the 5 runs, for perf)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "f16.h"
#include "kernels.h"

#define LAYERS 22
#define HEADS  4
#define DIM    64
#define GROUP  8
#define KVD    (HEADS * DIM)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static float frnd(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }

/* Key tiles and value rows of LAYERS layers of n positions of type kvt, random values
 * written as kv.c writes them (values head-major: a head's rows follow one another). */
static void fill(int kvt, int n, char *kt, char *v)
{
    size_t tb = kern_kv_bytes(kvt, (int64_t)KVD * 16), rb = kern_kv_bytes(kvt, KVD), hb = kern_kv_bytes(kvt, DIM);
    float x[KVD], y[KVD];
    for (int l = 0; l < LAYERS; l++)
        for (int t = 0; t < n; t++) {
            for (int i = 0; i < KVD; i++) x[i] = frnd(), y[i] = frnd();
            char *tile = kt + ((size_t)l * (n / 16) + t / 16) * tb;
            for (int h = 0; h < HEADS; h++) {
                char *row = v + (size_t)l * n * rb + ((size_t)h * n + t) * hb;
                if (kvt == KERN_KV_Q8_0) kern_kv_q8_row(y + h * DIM, DIM, row);
                for (int i = 0; i < DIM && kvt != KERN_KV_Q8_0; i++) {
                    if (kvt == KERN_KV_F16) ((uint16_t *)row)[i] = f32_to_f16(y[h * DIM + i]);
                    else ((float *)row)[i] = y[h * DIM + i];
                }
            }
            if (kvt == KERN_KV_Q8_0) {
                kern_kv_q8_key(x, KVD, tile, t % 16);
                continue;
            }
            for (int i = 0; i < KVD; i++) {
                if (kvt == KERN_KV_F16) ((uint16_t *)tile)[i * 16 + t % 16] = f32_to_f16(x[i]);
                else ((float *)tile)[i * 16 + t % 16] = x[i];
            }
        }
}

/* Milliseconds of one token's attention over every layer and kv head (best of 5). */
static double one_token(int kvt, int n, const char *kt, const char *v, const float *q, float *sc, float *out)
{
    kern_qq qq[GROUP * DIM / 32];
    size_t tb = kern_kv_bytes(kvt, (int64_t)KVD * 16), rb = kern_kv_bytes(kvt, KVD);
    double best = 1e30;
    const char *e = getenv("BENCH_ATTN_REPS");
    int reps = 5 * (e && atoi(e) > 0 ? atoi(e) : 1);
    for (int rep = 0; rep < reps; rep++) {
        double t0 = now();
        for (int l = 0; l < LAYERS; l++)
            for (int h = 0; h < HEADS; h++) {
                const char *k = kt + (size_t)l * (n / 16) * tb + kern_kv_bytes(kvt, (int64_t)h * DIM * 16);
                const char *vv = v + (size_t)l * n * rb + (size_t)h * n * kern_kv_bytes(kvt, DIM);
                if (kvt == KERN_KV_Q8_0) { /* the query quantized once per head, as attn.c does */
                    kern_att_q8_query(q, DIM, GROUP, DIM, qq);
                    kern_att_qk8(qq, GROUP, k, (int64_t)KVD * 16, DIM, n / 16, 0.125f, sc, n);
                } else kern_att_qk(q, DIM, GROUP, k, (int64_t)KVD * 16, kvt, DIM, n / 16, 0.125f, sc, n);
                for (int r = 0; r < GROUP; r++) kern_softmax(sc + (size_t)r * n, n);
                memset(out, 0, GROUP * DIM * sizeof(float));
                kern_att_pv(sc, n, GROUP, 0, n - 1, vv, DIM, kvt, DIM, out, DIM);
            }
        double t = now() - t0;
        best = t < best ? t : best;
    }
    return best * 1e3;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) / 16 * 16 : 4096;
    if (n < 16) {
        fprintf(stderr, "usage: bench_attn [CTX >= 16] [table ...]\n");
        return 2;
    }
    static const char *const all[] = { "scalar", "avx2", "avxvnni", "avx512vnni", "neon", "neoni8mm" };
    static const int kvts[] = { KERN_KV_F32, KERN_KV_F16, KERN_KV_Q8_0 };
    static const char *const kvn[] = { "f32", "f16", "q8_0" };
    float q[GROUP * DIM], *sc = malloc((size_t)GROUP * n * sizeof(float)), out[GROUP * DIM];
    for (int i = 0; i < GROUP * DIM; i++) q[i] = frnd();
    int kvnamed = 0;
    for (int a = 2; a < argc; a++)
        for (int k = 0; k < 3; k++) kvnamed |= !strcmp(argv[a], kvn[k]);
    int tnamed = 0;
    for (int a = 2; a < argc; a++)
        for (int t = 0; t < 6; t++) tnamed |= !strcmp(argv[a], all[t]);
    for (int k = 0; k < 3; k++) {
        int want = !kvnamed;
        for (int a = 2; a < argc; a++) want |= !strcmp(argv[a], kvn[k]);
        if (!want) continue;
        size_t kb = (size_t)LAYERS * (n / 16) * kern_kv_bytes(kvts[k], (int64_t)KVD * 16);
        size_t vb = (size_t)LAYERS * n * kern_kv_bytes(kvts[k], KVD);
        char *kt = malloc(kb), *v = malloc(vb);
        if (!kt || !v || !sc) return 1;
        fill(kvts[k], n, kt, v);
        for (int t = 0; t < 6; t++) {
            int named = !tnamed;
            for (int a = 2; a < argc; a++) named |= !strcmp(argv[a], all[t]);
            if (!named || (!tnamed && t == 0) || kern_select(all[t]) != 0) continue;
            printf("%-10s %-4s ctx %d: %7.2f ms per token (KV %.0f MB)\n", all[t], kvn[k], n,
                   one_token(kvts[k], n, kt, v, q, sc, out), (kb + vb) / 1e6);
        }
        free(kt);
        free(v);
    }
    free(sc);
    return 0;
}
