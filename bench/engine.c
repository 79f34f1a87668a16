/*
 * bench/engine - batched multi-session decode: aggregate tokens/s when B sessions are
 * decoded together in one pass over the weights, for B = 1, 2, 4, 8, 16.
 *
 *   build/bench/engine MODEL.gguf [threads] [steps] [precision] [same|spread]
 *                      (defaults: 2 threads, 32 steps, native: engined's default layouts;
 *                       int8 widens 2-6-bit weights to Q8_0 tiles, as --precision int8;
 *                       same: each session decodes its own greedy token)
 *
 * Each session is prefilled with a short prompt first; then `steps` decode passes run
 * with B tokens each. Memory-bound decode reads the weights once per pass, so the
 * aggregate rate should grow almost linearly with B until compute catches up.
 * A random-weight model's sessions may fall into the same greedy tokens; `spread`
 * offsets session i's next token by i * 7919 (mod the vocabulary) so that the sessions'
 * tokens differ, as sampled streams' do (a mixture of experts then routes different
 * tokens; how many experts they choose is the model's router's doing). For a mixture of
 * experts a last column gives the experts a layer a pass read on average
 * (eng_moe_counts): k for one session, up to all of them for many.
 * BENCH_ENGINE_SESSIONS=B runs that session count alone (1, 2, 4, 8 or 16): quick enough
 * to alternate two builds, or to profile one batch size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "log.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: engine MODEL.gguf [threads] [steps] [native|int8|float] [same|spread]\n");
        return 2;
    }
    log_init("bench-engine", LOG_WARN);
    int threads = argc > 2 ? atoi(argv[2]) : 2, steps = argc > 3 ? atoi(argv[3]) : 32;
    char err[512];
    eng_open_info info;
    const char *prec = argc > 4 ? argv[4] : "native", *mode = argc > 5 ? argv[5] : "same";
    const int spread = strcmp(mode, "spread") == 0;
    if (!spread && strcmp(mode, "same") != 0) {
        fprintf(stderr, "error: token mode '%s' is neither same nor spread\n", mode);
        return 2;
    }
    const char *only_s = getenv("BENCH_ENGINE_SESSIONS");
    int only = 0;
    if (only_s && *only_s) {
        char *end;
        long v = strtol(only_s, &end, 10);
        if (*end || (v != 1 && v != 2 && v != 4 && v != 8 && v != 16)) {
            fprintf(stderr, "error: BENCH_ENGINE_SESSIONS must be 1, 2, 4, 8 or 16 (got \"%s\")\n", only_s);
            return 2;
        }
        only = (int)v;
    }
    eng_model *m = eng_open(argv[1], prec[0] == 'i' ? ENG_INT8 : prec[0] == 'f' ? ENG_FLOAT : ENG_NATIVE, &info, err,
                            sizeof err);
    if (!m || threads < 1 || steps < 1 || eng_set_threads(m, threads) != 0) {
        fprintf(stderr, "error: %s\n", m ? "bad threads or steps" : err);
        eng_close(m);
        return 1;
    }
    eng_warm(m);
    const mdl_config *cfg = eng_config_of(m);
    int V = cfg->n_vocab;
    double gb = eng_weight_bytes_per_token(m) / 1e9;
    const int moe = cfg->n_expert > 0; /* and the experts a step reads */
    printf("| sessions | passes/s | aggregate tok/s | weights GB/s |%s\n|---|---|---|---|%s\n",
           moe ? " experts a layer |" : "", moe ? "---|" : "");
    for (int B = 1; B <= 16; B *= 2) {
        if (only && B != only) continue;
        eng_session *s[16];
        int32_t tok[16];
        float *lg = malloc((size_t)B * V * sizeof(float));
        for (int i = 0; i < B; i++) {
            int32_t prompt[4] = { 1, 100 + i, 200 + i, 300 + i };
            s[i] = eng_session_new(m, steps + 8, ENG_KV_F16, err, sizeof err);
            if (!s[i] || eng_prefill(m, s[i], prompt, 4, lg, false, err, sizeof err) != 0) {
                fprintf(stderr, "error: %s\n", err);
                return 1;
            }
            tok[i] = eng_argmax(lg, V);
        }
        uint64_t b0, e0, b1, e1;
        eng_moe_counts(m, &b0, &e0);
        double t0 = now_s();
        for (int k = 0; k < steps; k++) {
            if (eng_decode(m, s, tok, B, lg, err, sizeof err) != 0) {
                fprintf(stderr, "error: %s\n", err);
                return 1;
            }
            for (int i = 0; i < B; i++)
                tok[i] = (int32_t)((eng_argmax(lg + (size_t)i * V, V) + (spread ? (int64_t)i * 7919 : 0)) % V);
        }
        double dt = now_s() - t0;
        eng_moe_counts(m, &b1, &e1);
        printf("| %d | %.2f | %.1f | %.1f |", B, steps / dt, B * steps / dt, gb * steps / dt);
        if (moe) printf(" %.1f |", b1 > b0 ? (double)(e1 - e0) / (double)(b1 - b0) : 0.0);
        printf("\n");
        for (int i = 0; i < B; i++) eng_session_free(s[i]);
        free(lg);
    }
    eng_close(m);
    return 0;
}
