/*
 * cmd_synth.c - `llmc synth`: a random-weight model of a real shape, for benchmarks
 * and tests (nothing large can be downloaded here).
 *
 *   llmc synth --shape tinyllama-1.1b --type Q8_0 \
 *       --vocab-from ../shared/reference/tokenizer/ggml-vocab-llama-spm.gguf \
 *       --seed 1 -o /tmp/tinyllama-q8.gguf [--arch llama|qwen2|qwen3] [--threads N]
 *
 * Mixture-of-experts shapes (--arch qwen3moe, qwen2moe, or llama for Mixtral) get a router
 * ffn_gate_inp (F32, N(0, 4 / sqrt(n_embd)): decisive routing), 3-D expert stacks ffn_{gate,up,down}_exps
 * and, with a shared expert, ffn_*_shexp and its gate ffn_gate_inp_shexp.
 * Weights ~ N(0, 0.02), norms 1 + N(0, 0.1) (qwen3 per-head q/k norms too), qwen2 q/k/v biases N(0, 0.05). Every
 * 2-D matrix (token_embd too) gets TYPE, or Q8_0/F16 when its rows do not fit TYPE's
 * blocks; 1-D tensors are F32. The tokenizer.* keys come from the vocabulary file.
 * Deterministic for a seed: each chunk of rows of each tensor draws from its own
 * xoshiro256+ stream keyed by (seed, tensor name, chunk), so the bytes do not depend
 * on the order tensors are made in or on the number of threads.
 * Exit 0, 1 with one "error: ..." line, 2 for usage. Owner: gguf helper.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "gguf.h"
#include "synth_util.h"

#define USAGE "usage: llmc synth --shape NAME --type TYPE --vocab-from VOCAB.gguf --seed N -o OUT.gguf\n" \
              "                  [--arch llama|qwen2|qwen3|gemma3|gemma2|phi3|qwen2moe|qwen3moe] [--threads N]\n" \
              "shapes: tiny stories110m tinyllama-1.1b llama2-7b llama3-8b qwen3-0.6b qwen3-tiny qwen3-yarn-tiny llama31-tiny gemma3-1b gemma3-tiny\n" \
              "        gemma2-2b gemma2-tiny phi3-mini phi3-tiny\n" \
              "        qwen3moe-tiny qwen2moe-tiny mixtral-tiny qwen3moe-a0.6b (mixture of experts)\n"

typedef struct {
    const char *name;
    int64_t     embd, layers, heads, heads_kv, ff, ctx;
    double      rope_base;
    bool        tied;       /* output shares token_embd */
    int64_t     head_dim;   /* 0: embd / heads */
    bool        rope_freqs; /* llama 3.1: rope_freqs.weight, one factor per rotated pair */
    int64_t     swa;        /* gemma3, gemma2: attention.sliding_window */
    float       softcap[2]; /* gemma2: attn_logit_softcapping, final_logit_softcapping */
} synth_shape;

static const synth_shape shapes[] = {
    {"tiny", 256, 4, 4, 2, 768, 2048, 10000.0, true, 0, false, 0, {0, 0}},
    {"stories110m", 768, 12, 12, 12, 2048, 1024, 10000.0, true, 0, false, 0, {0, 0}},
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 2048, 10000.0, false, 0, false, 0, {0, 0}},
    {"llama2-7b", 4096, 32, 32, 32, 11008, 4096, 10000.0, false, 0, false, 0, {0, 0}},
    {"llama3-8b", 4096, 32, 32, 8, 14336, 8192, 500000.0, false, 0, false, 0, {0, 0}},
    {"qwen3-0.6b", 1024, 28, 16, 8, 3072, 40960, 1000000.0, true, 128, false, 0, {0, 0}},
    {"qwen3-tiny", 64, 2, 4, 2, 128, 2048, 1000000.0, true, 32, false, 0, {0, 0}},
    /* YaRN: rope.scaling.type yarn, factor 4 over an original context of ctx / 4 */
    {"qwen3-yarn-tiny", 64, 2, 4, 2, 128, 8192, 1000000.0, true, 32, false, 0, {0, 0}},
    {"llama31-tiny", 64, 2, 4, 2, 128, 131072, 500000.0, true, 0, true, 0, {0, 0}},
    {"gemma3-1b", 1152, 26, 4, 1, 6912, 32768, 1000000.0, true, 256, false, 512, {0, 0}},
    {"gemma3-tiny", 64, 7, 4, 2, 128, 32768, 1000000.0, true, 32, false, 6, {0, 0}},
    {"gemma2-2b", 2304, 26, 8, 4, 9216, 8192, 10000.0, true, 256, false, 4096, {50.0f, 30.0f}},
    /* 26 layers: ik_llama.cpp knows gemma2 by its layer counts; caps small enough to bite */
    {"gemma2-tiny", 64, 26, 4, 2, 128, 8192, 10000.0, true, 32, false, 6, {0.05f, 0.3f}},
    /* phi3: fused attn_qkv and ffn_up, long/short rope factors for a context 32x the original */
    {"phi3-mini", 3072, 32, 32, 32, 8192, 131072, 10000.0, false, 0, false, 262144, {0, 0}},
    {"phi3-tiny", 64, 3, 4, 2, 128, 8192, 10000.0, false, 0, false, 8, {0, 0}},
    /* mixture of experts (moe_shapes below; --arch qwen3moe, qwen2moe, llama: Mixtral) */
    {"qwen3moe-tiny", 64, 2, 4, 2, 128, 40960, 1000000.0, true, 32, false, 0, {0, 0}},
    {"qwen2moe-tiny", 64, 2, 4, 2, 128, 8192, 1000000.0, true, 0, false, 0, {0, 0}},
    {"mixtral-tiny", 64, 2, 4, 2, 128, 32768, 1000000.0, false, 0, false, 0, {0, 0}},
    {"qwen3moe-a0.6b", 1024, 24, 16, 4, 3072, 40960, 1000000.0, true, 128, false, 0, {0, 0}},
};

/* The experts of the mixture-of-experts shapes (a shape not listed is dense). */
typedef struct {
    const char *name;
    int64_t     experts, used, ff_exp, ff_shexp; /* ff_shexp 0: no shared expert */
} synth_moe;

static const synth_moe moe_shapes[] = {
    {"qwen3moe-tiny", 8, 2, 64, 0},
    {"qwen2moe-tiny", 8, 4, 64, 128},
    {"mixtral-tiny", 4, 2, 128, 0},
    {"qwen3moe-a0.6b", 64, 8, 768, 0}, /* ~4B parameters, ~0.6B active */
};

static const synth_moe *shape_moe(const synth_shape *s)
{
    for (size_t i = 0; i < sizeof moe_shapes / sizeof moe_shapes[0]; i++)
        if (strcmp(moe_shapes[i].name, s->name) == 0) return &moe_shapes[i];
    return NULL;
}

typedef enum {
    SYNTH_LLAMA, SYNTH_QWEN2, SYNTH_QWEN3, SYNTH_GEMMA3, SYNTH_GEMMA2, SYNTH_PHI3, SYNTH_QWEN2MOE, SYNTH_QWEN3MOE,
    SYNTH_ARCH_COUNT
} synth_arch;
static const char *const synth_arch_names[] = { "llama", "qwen2", "qwen3", "gemma3", "gemma2", "phi3", "qwen2moe", "qwen3moe" };

static int64_t shape_head_dim(const synth_shape *s) { return s->head_dim ? s->head_dim : s->embd / s->heads; }

typedef enum { FILL_WEIGHT, FILL_NORM, FILL_BIAS, FILL_FREQ, FILL_FREQ_SHORT, FILL_ROUTER } fill_kind;

typedef struct {
    char      name[64];
    uint32_t  type;
    uint32_t  n_dims;
    int64_t   ne[3];    /* ne[2]: matrices of a stack (MoE experts), else 1 */
    fill_kind kind;
} synth_tensor;

typedef struct {
    synth_tensor  *t;
    int            n, cap;
    uint64_t       seed;
    int            threads;
    synth_progress prog;
} synth_job;

/* ---- random numbers ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct { uint64_t s[4]; } xoshiro;

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t xo_next(xoshiro *r)
{
    uint64_t *s = r->s, out = s[0] + s[3], t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* The stream of chunk `chunk` of the tensor called name. */
static void xo_seed(xoshiro *r, uint64_t seed, const char *name, uint64_t chunk)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    uint64_t x = seed ^ h ^ (chunk * 0xd1b54a32d192ed03ull);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

/* n values of mean + sd * N(0,1); the normal is Irwin-Hall of four 16-bit uniforms
 * (exact mean and variance, tails cut at 3.46 sd), one 64-bit draw per value. */
static void gen_normal(xoshiro *r, float *dst, int64_t n, float mean, float sd)
{
    const float scale = sd * 1.7320508f / 65536.0f; /* sqrt(3) / 2^16 */
    for (int64_t i = 0; i < n; i++) {
        uint64_t x = xo_next(r);
        float s = (float)((x & 0xffff) + ((x >> 16) & 0xffff) + ((x >> 32) & 0xffff) + (x >> 48));
        dst[i] = mean + (s - 131070.0f) * scale; /* 4 * 65535 / 2 */
    }
}

/* ---- the tensor plan ---- */

static int add_tensor(synth_job *j, uint32_t want, const char *name, int64_t ne0, int64_t ne1,
                      fill_kind kind)
{
    if (j->n == j->cap) {
        int cap = j->cap ? j->cap * 2 : 64;
        synth_tensor *t = realloc(j->t, (size_t)cap * sizeof *t);
        if (!t) return -1;
        j->t = t;
        j->cap = cap;
    }
    synth_tensor *t = &j->t[j->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = ne1 > 0 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 > 0 ? ne1 : 1;
    t->ne[2] = 1;
    t->kind = kind;
    t->type = QT_F32;
    if (t->n_dims == 2 && kind != FILL_ROUTER) { /* MoE routers stay F32, as llama.cpp keeps them */
        char why[200];
        t->type = synth_pick_type(want, ne0, why, sizeof why);
        if (why[0]) fprintf(stderr, "synth: %s: %s\n", name, why);
    }
    return 0;
}

/* phi3: fused Q/K/V and gate/up, rope factors long and short. */
static int plan_phi3(synth_job *j, const synth_shape *s, int64_t vocab, uint32_t type)
{
    int64_t kv = shape_head_dim(s) * s->heads_kv;
    char n[64];
    int rc = add_tensor(j, type, "token_embd.weight", s->embd, vocab, FILL_WEIGHT);
    for (int64_t l = 0; l < s->layers && rc == 0; l++) {
        struct { const char *suffix; int64_t ne0, ne1; fill_kind kind; } t[] = {
            {"attn_norm.weight", s->embd, 0, FILL_NORM}, {"attn_qkv.weight", s->embd, s->embd + 2 * kv, FILL_WEIGHT},
            {"attn_output.weight", s->embd, s->embd, FILL_WEIGHT}, {"ffn_norm.weight", s->embd, 0, FILL_NORM},
            {"ffn_up.weight", s->embd, 2 * s->ff, FILL_WEIGHT}, {"ffn_down.weight", s->ff, s->embd, FILL_WEIGHT},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            snprintf(n, sizeof n, "blk.%lld.%s", (long long)l, t[i].suffix);
            rc |= add_tensor(j, type, n, t[i].ne0, t[i].ne1, t[i].kind);
        }
    }
    rc |= add_tensor(j, type, "output_norm.weight", s->embd, 0, FILL_NORM);
    rc |= add_tensor(j, type, "rope_factors_long.weight", shape_head_dim(s) / 2, 0, FILL_FREQ);
    rc |= add_tensor(j, type, "rope_factors_short.weight", shape_head_dim(s) / 2, 0, FILL_FREQ_SHORT);
    return rc | add_tensor(j, type, "output.weight", s->embd, vocab, FILL_WEIGHT);
}

/* A stack of n matrices of ne1 rows of ne0 values (MoE experts, ffn_*_exps). */
static int add_stack(synth_job *j, uint32_t want, const char *name, int64_t ne0, int64_t ne1, int64_t n)
{
    if (add_tensor(j, want, name, ne0, ne1, FILL_WEIGHT) != 0) return -1;
    j->t[j->n - 1].n_dims = 3;
    j->t[j->n - 1].ne[2] = n;
    return 0;
}

/* Rows of a tensor, over every matrix of a stack. */
static int64_t t_rows(const synth_tensor *t) { return t->ne[1] * t->ne[2]; }

/* The FFN of a MoE layer: router, experts, the shared expert. */
static int plan_moe(synth_job *j, const synth_shape *sh, int64_t l, uint32_t type)
{
    const synth_moe *s = shape_moe(sh);
    char n[64];
    int rc = 0;
    snprintf(n, sizeof n, "blk.%lld.ffn_gate_inp.weight", (long long)l);
    rc |= add_tensor(j, type, n, sh->embd, s->experts, FILL_ROUTER);
    const char *stk[3] = { "gate", "up", "down" };
    for (int k = 0; k < 3; k++) {
        snprintf(n, sizeof n, "blk.%lld.ffn_%s_exps.weight", (long long)l, stk[k]);
        rc |= add_stack(j, type, n, k == 2 ? s->ff_exp : sh->embd, k == 2 ? sh->embd : s->ff_exp, s->experts);
    }
    for (int k = 0; k < 3 && s->ff_shexp; k++) {
        snprintf(n, sizeof n, "blk.%lld.ffn_%s_shexp.weight", (long long)l, stk[k]);
        rc |= add_tensor(j, type, n, k == 2 ? s->ff_shexp : sh->embd, k == 2 ? sh->embd : s->ff_shexp, FILL_WEIGHT);
    }
    snprintf(n, sizeof n, "blk.%lld.ffn_gate_inp_shexp.weight", (long long)l);
    if (s->ff_shexp) rc |= add_tensor(j, type, n, sh->embd, 0, FILL_ROUTER);
    return rc;
}

static int plan(synth_job *j, const synth_shape *s, synth_arch arch, int64_t vocab, uint32_t type)
{
    if (arch == SYNTH_PHI3) return plan_phi3(j, s, vocab, type);
    int64_t hd = shape_head_dim(s), kv = hd * s->heads_kv, q = hd * s->heads;
    char n[64];
    int rc = add_tensor(j, type, "token_embd.weight", s->embd, vocab, FILL_WEIGHT);
    for (int64_t l = 0; l < s->layers && rc == 0; l++) {
#define T(suffix, ne0, ne1, kind)                                         \
        snprintf(n, sizeof n, "blk.%lld.%s", (long long)l, suffix);       \
        rc |= add_tensor(j, type, n, ne0, ne1, kind);
        T("attn_norm.weight", s->embd, 0, FILL_NORM)
        T("attn_q.weight", s->embd, q, FILL_WEIGHT)
        T("attn_k.weight", s->embd, kv, FILL_WEIGHT)
        T("attn_v.weight", s->embd, kv, FILL_WEIGHT)
        if (arch == SYNTH_QWEN3 || arch == SYNTH_GEMMA3 || arch == SYNTH_QWEN3MOE) {
            T("attn_q_norm.weight", hd, 0, FILL_NORM)
            T("attn_k_norm.weight", hd, 0, FILL_NORM)
        }
        if (arch == SYNTH_QWEN2 || arch == SYNTH_QWEN2MOE) {
            T("attn_q.bias", q, 0, FILL_BIAS)
            T("attn_k.bias", kv, 0, FILL_BIAS)
            T("attn_v.bias", kv, 0, FILL_BIAS)
        }
        T("attn_output.weight", q, s->embd, FILL_WEIGHT)
        T("ffn_norm.weight", s->embd, 0, FILL_NORM)
        if (shape_moe(s)) rc |= plan_moe(j, s, l, type);
        else {
            T("ffn_gate.weight", s->embd, s->ff, FILL_WEIGHT)
            T("ffn_up.weight", s->embd, s->ff, FILL_WEIGHT)
            T("ffn_down.weight", s->ff, s->embd, FILL_WEIGHT)
        }
        if (arch == SYNTH_GEMMA3 || arch == SYNTH_GEMMA2) {
            T("post_attention_norm.weight", s->embd, 0, FILL_NORM)
            T("post_ffw_norm.weight", s->embd, 0, FILL_NORM)
        }
#undef T
    }
    rc |= add_tensor(j, type, "output_norm.weight", s->embd, 0, FILL_NORM);
    if (s->rope_freqs) rc |= add_tensor(j, type, "rope_freqs.weight", hd / 2, 0, FILL_FREQ);
    if (!s->tied) rc |= add_tensor(j, type, "output.weight", s->embd, vocab, FILL_WEIGHT);
    return rc;
}

/* ---- filling tensors, chunk by chunk, on a few threads ---- */

typedef struct {
    const synth_job    *job;
    const synth_tensor *t;
    uint8_t            *dst;
    int64_t             chunk_rows, n_chunks;
    int                 first, step;
    int                 failed;
} fill_part;

static void *fill_worker(void *arg)
{
    fill_part *p = arg;
    const synth_tensor *t = p->t;
    const qt_traits *q = qt_get(t->type);
    size_t row = qt_row_size(t->type, t->ne[0]);
    float *tmp = malloc((size_t)(p->chunk_rows * t->ne[0]) * sizeof *tmp);
    if (!tmp) {
        p->failed = 1;
        return NULL;
    }
    float mean = t->kind == FILL_NORM ? 1.0f : 0.0f;
    /* routers wider than the rest: decisive routing, as trained routers are. The input
     * is RMS-normed, so N(0, 4 / sqrt(n_embd)) gives logits of about N(0, 4) at every
     * width: 0.5 at n_embd 64; a fixed 0.5 at n_embd 1024 spread the logits so far that
     * all but the largest softmaxed to 0 and ties chose the lowest experts. */
    float sd = t->kind == FILL_NORM ? 0.1f : t->kind == FILL_BIAS ? 0.05f
             : t->kind == FILL_ROUTER ? 4.0f / sqrtf((float)t->ne[0]) : 0.02f;
    const bool ramp = t->kind == FILL_FREQ || t->kind == FILL_FREQ_SHORT;
    for (int64_t c = p->first; c < p->n_chunks; c += p->step) {
        int64_t r0 = c * p->chunk_rows;
        int64_t rows = t_rows(t) - r0 < p->chunk_rows ? t_rows(t) - r0 : p->chunk_rows;
        xoshiro rng;
        xo_seed(&rng, p->job->seed, t->name, (uint64_t)c);
        gen_normal(&rng, tmp, rows * t->ne[0], mean, sd);
        for (int64_t i = 0; ramp && i < rows * t->ne[0]; i++) /* 1 .. 8 (short: 1.5), rising */
            tmp[i] = 1.0f + (t->kind == FILL_FREQ ? 7.0f : 0.5f) * (float)i / (float)(rows * t->ne[0]);
        q->quant(tmp, p->dst + (size_t)r0 * row, rows * t->ne[0]);
    }
    free(tmp);
    return NULL;
}

static int fill_tensor(void *user, int64_t i, const char *name, void *dst, uint64_t nbytes)
{
    synth_job *j = user;
    const synth_tensor *t = &j->t[i];
    /* chunks of about 64K values: a function of the shape only */
    int64_t chunk_rows = (65536 + t->ne[0] - 1) / t->ne[0];
    int64_t n_chunks = (t_rows(t) + chunk_rows - 1) / chunk_rows;
    int nt = j->threads < n_chunks ? j->threads : (int)n_chunks;
    fill_part parts[SYNTH_MAX_THREADS];
    pthread_t tid[SYNTH_MAX_THREADS];
    int started = 0, failed = 0;
    for (int k = 0; k < nt; k++) {
        parts[k] = (fill_part){j, t, dst, chunk_rows, n_chunks, k, nt, 0};
        if (k == 0) continue;
        if (pthread_create(&tid[k], NULL, fill_worker, &parts[k]) != 0) {
            parts[k].failed = 1;
            break;
        }
        started = k;
    }
    fill_worker(&parts[0]);
    for (int k = 1; k <= started; k++) pthread_join(tid[k], NULL);
    for (int k = 0; k < nt; k++) failed |= parts[k].failed;
    if (started < nt - 1) failed = 1;
    synth_progress_add(&j->prog, nbytes);
    return failed ? -1 : 0;
}

/* ---- command line ---- */

typedef struct {
    const char *shape, *type, *vocab, *seed, *out, *arch, *threads;
} synth_args;

static int parse_args(int argc, char **argv, synth_args *a)
{
    memset(a, 0, sizeof *a);
    a->arch = "llama";
    for (int i = 1; i < argc; i++) {
        const char **dst = NULL;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
        if (strcmp(argv[i], "--shape") == 0) dst = &a->shape;
        else if (strcmp(argv[i], "--type") == 0) dst = &a->type;
        else if (strcmp(argv[i], "--vocab-from") == 0) dst = &a->vocab;
        else if (strcmp(argv[i], "--seed") == 0) dst = &a->seed;
        else if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--output") == 0) dst = &a->out;
        else if (strcmp(argv[i], "--arch") == 0) dst = &a->arch;
        else if (strcmp(argv[i], "--threads") == 0) dst = &a->threads;
        if (!dst) {
            fprintf(stderr, "llmc synth: unknown argument %s\n" USAGE, argv[i]);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "llmc synth: %s needs a value\n" USAGE, argv[i]);
            return 2;
        }
        *dst = argv[++i];
    }
    if (!a->shape || !a->type || !a->vocab || !a->seed || !a->out) {
        fprintf(stderr, "llmc synth: --shape, --type, --vocab-from, --seed and -o are required\n" USAGE);
        return 2;
    }
    return 0;
}

static bool parse_u64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    if (*s == '-' || *s == 0) return false;
    unsigned long long x = strtoull(s, &end, 0);
    if (errno || *end) return false;
    *v = x;
    return true;
}

/* Writes the model described by the checked arguments. */
static int synth_write(const synth_shape *s, synth_arch sa, uint32_t type, uint64_t seed,
                       int threads, const char *vocab_path, const char *out)
{
    char err[1024];
    double t0 = synth_now();
    gguf_ctx *v = gguf_open(vocab_path, err, sizeof err);
    if (!v) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    int64_t tok = gguf_find_key(v, "tokenizer.ggml.tokens");
    if (tok < 0 || gguf_arr_type(v, tok) != GGUF_T_STRING || gguf_arr_n(v, tok) == 0) {
        fprintf(stderr, "error: %s: no tokenizer.ggml.tokens string array\n", vocab_path);
        gguf_close(v);
        return 1;
    }
    int64_t vocab = (int64_t)gguf_arr_n(v, tok);
    const char *arch = synth_arch_names[sa];
    bool qwen = sa != SYNTH_LLAMA;
    synth_job job = {.seed = seed, .threads = threads};
    gguf_writer *w = gguf_writer_new();
    int rc = 1;
    if (!w || plan(&job, s, sa, vocab, type) != 0) {
        fprintf(stderr, "error: out of memory\n");
        goto out;
    }
    char name[96], key[128];
    snprintf(name, sizeof name, "synth-%s%s%s", s->name, qwen ? "-" : "", qwen ? arch : "");
    if (sa == SYNTH_PHI3) /* a name with "phi3" makes llama.cpp look up Phi-3's special tokens */
        snprintf(name, sizeof name, "synth-phi-%s", strchr(s->name, '-') + 1);
    gguf_writer_set_str(w, "general.architecture", arch);
    gguf_writer_set_str(w, "general.type", "model");
    gguf_writer_set_str(w, "general.name", name);
    gguf_writer_set_u32(w, "general.alignment", GGUF_DEFAULT_ALIGNMENT);
    gguf_writer_set_u32(w, "general.file_type", synth_ftype(type));
    gguf_writer_set_u32(w, "general.quantization_version", 2);
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)s->ctx);
    gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)s->embd);
    gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)s->layers);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)s->ff);
    gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)s->heads);
    gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->heads_kv);
    gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)shape_head_dim(s));
    if (s->head_dim) {
        gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
        gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
    }
    gguf_writer_set_f32(w, KEY("rope.freq_base"), sa == SYNTH_QWEN2 ? 1000000.0f : (float)s->rope_base);
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), qwen ? 1e-6f : 1e-5f);
    gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)vocab);
    if (sa == SYNTH_GEMMA3 || sa == SYNTH_GEMMA2 || sa == SYNTH_PHI3)
        gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)(s->swa ? s->swa : 512));
    if (sa == SYNTH_PHI3) { /* Phi-3.5's long rope: original context 1/32, attn_factor from the ratio */
        gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)(s->ctx / 32));
        gguf_writer_set_f32(w, KEY("rope.scaling.attn_factor"), (float)sqrt(1.0 + log(32.0) / log((double)s->ctx / 32)));
    }
    if (strstr(s->name, "yarn")) {
        gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn");
        gguf_writer_set_f32(w, KEY("rope.scaling.factor"), 4.0f);
        gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)(s->ctx / 4));
    }
    if (sa == SYNTH_GEMMA2) {
        gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), s->softcap[0] > 0 ? s->softcap[0] : 50.0f);
        gguf_writer_set_f32(w, KEY("final_logit_softcapping"), s->softcap[1] > 0 ? s->softcap[1] : 30.0f);
    }
    const synth_moe *mo = shape_moe(s);
    if (mo) {
        gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)mo->experts);
        gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)mo->used);
        gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)mo->ff_exp);
        if (mo->ff_shexp) gguf_writer_set_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)mo->ff_shexp);
    }
#undef KEY
    gguf_writer_copy_kv(w, v, "tokenizer.");
    uint64_t total = 0, params = 0;
    for (int i = 0; i < job.n; i++) {
        const synth_tensor *t = &job.t[i];
        if (gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, NULL) != 0) {
            fprintf(stderr, "error: %s\n", gguf_writer_error(w));
            goto out;
        }
        total += qt_row_size(t->type, t->ne[0]) * (uint64_t)t_rows(t);
        params += (uint64_t)(t->ne[0] * t_rows(t));
    }
    fprintf(stderr, "synth: %s (%s, %llu parameters, vocab %lld) %s seed %llu -> %s\n", s->name,
            arch, (unsigned long long)params, (long long)vocab, qt_name(type),
            (unsigned long long)seed, out);
    synth_progress_start(&job.prog, "synth", total);
    int wr = gguf_writer_write(w, out, fill_tensor, &job, err, sizeof err);
    synth_progress_end(&job.prog);
    if (wr != 0) {
        fprintf(stderr, "error: %s\n", err);
        goto out;
    }
    fprintf(stderr, "synth: wrote %s: %d tensors, %llu bytes of tensor data in %.1f s\n", out,
            job.n, (unsigned long long)total, synth_now() - t0);
    rc = 0;
out:
    free(job.t);
    gguf_writer_free(w);
    gguf_close(v);
    return rc;
}

/* Entry point of `llmc synth` (see cmds.h for the exit codes). */
int cmd_synth(int argc, char **argv)
{
    synth_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc == 1) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (prc) return prc;
    const synth_shape *s = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcmp(a.shape, shapes[i].name) == 0) s = &shapes[i];
    if (!s) {
        fprintf(stderr, "llmc synth: unknown shape %s\n" USAGE, a.shape);
        return 2;
    }
    int type = qt_from_name(a.type);
    const qt_traits *q = type >= 0 ? qt_get((uint32_t)type) : NULL;
    if (!q || !q->quant) {
        fprintf(stderr, "llmc synth: cannot produce type %s\n" USAGE, a.type);
        return 2;
    }
    int sa = -1;
    for (int i = 0; i < SYNTH_ARCH_COUNT; i++)
        if (strcmp(a.arch, synth_arch_names[i]) == 0) sa = i;
    if (sa < 0) {
        fprintf(stderr, "llmc synth: --arch must be llama, qwen2, qwen3, gemma3, gemma2, phi3, qwen2moe or qwen3moe, not %s\n", a.arch);
        return 2;
    }
    bool moe_arch = sa == SYNTH_QWEN2MOE || sa == SYNTH_QWEN3MOE;
    if (moe_arch != (shape_moe(s) != NULL) && !(sa == SYNTH_LLAMA && shape_moe(s))) {
        fprintf(stderr, "llmc synth: shape %s is %s, --arch %s is not\n", a.shape,
                shape_moe(s) ? "a mixture of experts" : "dense", a.arch);
        return 2;
    }
    uint64_t seed;
    int threads = 2;
    if (!parse_u64(a.seed, &seed)) {
        fprintf(stderr, "llmc synth: --seed must be a non-negative integer, not %s\n", a.seed);
        return 2;
    }
    if (a.threads && synth_parse_threads("synth", a.threads, &threads) != 0) return 2;
    return synth_write(s, (synth_arch)sa, (uint32_t)type, seed, threads, a.vocab, a.out);
}
