/*
 * bench_quant - throughput of every type's dequantizer and quantizer.
 *
 *   build/bench/bench_quant            # default: 4M values per type
 *   build/bench/bench_quant 16777216   # more values
 *   LLM_QUANT=scalar build/bench/bench_quant # the scalar reference kernels only
 *                                            # (common/cpu.h's override convention)
 *
 * Prints one line per type: dequantize rate (values/s and GB/s of f32 written) and
 * quantize rate. Dequantization runs at model load over every weight, so its rate
 * bounds how fast a model can be converted. Single-threaded.
 * Owner: quant helper.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "qtype.h"
#include "quant.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int64_t n = argc > 1 ? atoll(argv[1]) : (int64_t)1 << 22;
    n -= n % 256;
    if (n <= 0) {
        fprintf(stderr, "error: value count must be at least 256\n");
        return 1;
    }
    printf("quant twins: %s\n", quant_name());
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
    void *q = malloc((size_t)n * sizeof(float));
    if (!x || !y || !q) {
        fprintf(stderr, "error: out of memory for %lld values\n", (long long)n);
        return 1;
    }
    uint32_t s = 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = 0.02f * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    printf("%-6s %14s %10s %14s\n", "type", "dequant Mval/s", "GB/s out", "quant Mval/s");
    for (uint32_t type = 0; type < QT_COUNT; type++) {
        const qt_traits *t = qt_get(type);
        if (!t || !t->dequant || !t->quant) continue;
        double t0 = now_s();
        t->quant(x, q, n);
        const double tq = now_s() - t0;
        int reps = 0;
        t0 = now_s();
        double td;
        do {
            t->dequant(q, y, n);
            reps++;
            td = now_s() - t0;
        } while (td < 0.3 && reps < 50);
        const double dps = (double)n * reps / td;
        printf("%-6s %14.0f %10.2f %14.1f\n", t->name, dps / 1e6, dps * 4 / 1e9, (double)n / tq / 1e6);
    }
    free(x);
    free(y);
    free(q);
    return 0;
}
