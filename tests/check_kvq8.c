/*
 * Suite "kvq8": the q8_0 KV cache (kv.h, kernels.h). Its writer stores ggml's q8_0
 * blocks (keys transposed in tiles); models whose head_dim is not a multiple of 32 are
 * refused with a message; logits against llama.cpp's references for each KV type
 * (q8_0 within 2e-2 relative L2 per row, top-1 >= 95%); batch invariance and every
 * kernel table's bits with a q8_0 cache; the pool's hash and identity tell types apart.
 * (Pooled q8_0 sessions against private ones: suite kvblocks.)
 */
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "f16.h"
#include "kernels.h"
#include "kv.h"
#include "kvpool.h"
#include "kvsetup.h"
#include "quant.h"
#include "test_model.h"

static uint32_t seed = 12345;
static float frnd(void)
{
    seed = seed * 1103515245u + 12345u;
    return (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* kv_store on a q8_0 cache writes, for each key and value row, the bytes of ggml's
 * reference quantize_row_q8_0 (keys: scales and int8 transposed into their tile), and
 * kv_ktile/kv_vh find them (each kv head's value row on its own); the names parse; bad
 * shapes are refused. */
START_TEST(test_q8_roundtrip)
{
    char err[256];
    kv_cache kv;
    const int L = 2, C = 40, KD = 96;
    ck_assert_msg(kv_init(&kv, L, C, KD, 32, ENG_KV_Q8_0, NULL, 0, err, sizeof err) == 0, "%s", err);
    float k[96], v[96];
    block_q8_0 kb[3], vb[3];
    for (int l = 0; l < L; l++)
        for (int p = 0; p < C; p++) {
            for (int i = 0; i < KD; i++) {
                k[i] = frnd() * (float)(1 + p % 5);
                v[i] = frnd() * 3.0f;
            }
            if (p == 7) memset(k, 0, sizeof k); /* an all-zero block: scale 0 */
            kv_store(&kv, l, p, k, v);
            qt_get(QT_Q8_0)->quant(k, kb, KD);
            qt_get(QT_Q8_0)->quant(v, vb, KD);
            for (int h = 0; h < KD / 32; h++)
                ck_assert_msg(memcmp(kv_vh(&kv, l, h, p), &vb[h], sizeof vb[h]) == 0, "value row %d/%d/%d", l, h, p);
            const uint8_t *tile = kv_ktile(&kv, l, p / 16);
            for (int g = 0; g < KD / 32; g++) {
                const uint8_t *grp = tile + (size_t)g * KERN_KVQ_GROUP;
                uint16_t d;
                memcpy(&d, grp + 2 * (p % 16), 2);
                ck_assert_uint_eq(d, kb[g].d);
                for (int i = 0; i < 32; i++) {
                    ck_assert_int_eq((int8_t)grp[KERN_KVQ_AT(i, p % 16)], kb[g].qs[i]);
                    float back = f16_to_f32(d) * (float)kb[g].qs[i];
                    ck_assert(fabsf(back - k[g * 32 + i]) <= f16_to_f32(d) * 0.57f + 1e-7f);
                }
            }
        }
    kv_free(&kv);
    ck_assert_int_eq(kv_init(&kv, L, C, 48, 48, ENG_KV_Q8_0, NULL, 0, err, sizeof err), -1); /* head_dim % 32 */
    ck_assert_int_eq(kv_init(&kv, L, C, 96, 64, ENG_KV_F16, NULL, 0, err, sizeof err), -1); /* kv_dim % head_dim */
    ck_assert_int_eq(kv_init(&kv, L, C, 96, 0, ENG_KV_F16, NULL, 0, err, sizeof err), -1);
    for (int t = 0; t < ENG_KV_COUNT; t++) ck_assert_int_eq(eng_kv_parse(eng_kv_name((eng_kv_type)t)), t);
    ck_assert_int_eq(eng_kv_parse("q4_0"), -1);
    ck_assert_ptr_null(eng_kv_name(ENG_KV_COUNT));
    ck_assert_uint_eq(kern_kv_bytes(KERN_KV_Q8_0, 64 * 16), 64 * 17);
}
END_TEST

/* stories260K (head_dim 8) cannot hold q8_0 blocks per head: refused, naming why. */
START_TEST(test_q8_refused)
{
    bool built;
    char err[256] = "";
    eng_model *m = test_model_open("stories260K-f32.gguf", ENG_INT8, &built);
    ck_assert_ptr_null(eng_session_new(m, 16, ENG_KV_Q8_0, err, sizeof err));
    ck_assert_msg(strstr(err, "head_dim") && strstr(err, "q8_0"), "%s", err);
    kvs_spec ks = { .tokens = 64, .kv = ENG_KV_Q8_0, .step = 16 };
    kvp *pools[ENG_KV_KINDS];
    ck_assert_int_eq(kvs_open(m, &ks, 1, pools, err, sizeof err), -1);
    ck_assert(!pools[ENG_KV_WHOLE] && !pools[ENG_KV_RING]);
    ck_assert_msg(strstr(err, "head_dim"), "%s", err);
    ck_assert_int_eq(eng_kv_check(m, ENG_KV_F16, err, sizeof err), 0);
    test_model_close(m, built);
}
END_TEST

typedef struct {
    double rel;      /* worst relative L2 over the rows */
    int    rows, top1;
} fid;

/* Logits of a reference case with cache type kv against the reference (and, in *self,
 * against the same run with an f32 cache when f32 is given). */
static fid eval_ref(eng_model *m, const char *dir, eng_kv_type kv, const float *f32, float **keep)
{
    char path[1600], err[512];
    int n, V = eng_config_of(m)->n_vocab;
    snprintf(path, sizeof path, "%s/tokens.txt", dir);
    int32_t *toks = test_read_ids(path, &n);
    size_t len;
    snprintf(path, sizeof path, "%s/logits.f32", dir);
    float *ref = test_slurp(path, &len);
    ck_assert(toks && ref && len == (size_t)n * V * sizeof(float));
    float *out = malloc(len);
    eng_session *s = eng_session_new(m, 512, kv, err, sizeof err);
    ck_assert_msg(s && eng_prefill(m, s, toks, n, out, true, err, sizeof err) == 0, "%s", err);
    fid r = { 0, n, 0 };
    const float *base = f32 ? f32 : ref;
    for (int p = 0; p < n; p++) {
        double num = 0, den = 0;
        const float *a = out + (size_t)p * V, *b = base + (size_t)p * V;
        for (int t = 0; t < V; t++) {
            num += (double)(a[t] - b[t]) * (a[t] - b[t]);
            den += (double)b[t] * b[t];
        }
        r.rel = fmax(r.rel, sqrt(num / den));
        r.top1 += eng_argmax(a, V) == eng_argmax(b, V);
    }
    eng_session_free(s);
    if (keep) *keep = out;
    else free(out);
    free(ref);
    free(toks);
    return r;
}

/* One model's cases on the native path: each KV type against the reference (made with
 * an f32 cache). q8_0 is held to 2e-2 relative L2 (worst row) and top-1 >= 95% on the
 * Q8_0 files (measured 2026-11-27, AVX-512: worst 0.0187 on tiny-llama2-Q8_0/unicode;
 * f16 0.0165 there, f32 0.0105), and on every file to 3e-2 of our own f32-cache logits
 * (worst 0.0236, Q5_K_M/story): these random-weight models' logits are flat, and any
 * change of an activation moves them ~1e-2 (the f16 cache moves them up to 0.0203), so
 * their near-ties flip (top-1 on the 4- and 5-bit files 14/18 to 24/24, f16 16/18 up).
 * stories260K (head_dim 8) holds no q8_0 cache. */
static void fidelity_model(const char *stem, const char *rdir)
{
    char file[300], err[256];
    snprintf(file, sizeof file, "%s.gguf", stem);
    bool built;
    eng_model *m = test_model_open(file, ENG_NATIVE, &built);
    ck_assert_int_eq(eng_set_threads(m, 2), 0);
    int q8ok = eng_kv_check(m, ENG_KV_Q8_0, err, sizeof err) == 0;
    const char *cases[3] = { "hello", "story", "unicode" };
    for (int c = 0; c < 3; c++) {
        char cdir[1400], probe[1500];
        snprintf(cdir, sizeof cdir, "%s/%s/%s", rdir, stem, cases[c]);
        snprintf(probe, sizeof probe, "%s/logits.f32", cdir);
        if (access(probe, R_OK) != 0) continue;
        float *own = NULL;
        fid f32 = eval_ref(m, cdir, ENG_KV_F32, NULL, &own), f16 = eval_ref(m, cdir, ENG_KV_F16, NULL, NULL);
        fprintf(stderr, "kv fidelity %-22s %-8s f32 rel %.4f top1 %d/%d | f16 rel %.4f top1 %d/%d", stem, cases[c],
                f32.rel, f32.top1, f32.rows, f16.rel, f16.top1, f16.rows);
        if (q8ok) {
            fid q8 = eval_ref(m, cdir, ENG_KV_Q8_0, NULL, NULL), self = eval_ref(m, cdir, ENG_KV_Q8_0, own, NULL);
            fprintf(stderr, " | q8_0 rel %.4f top1 %d/%d (vs our f32 cache %.4f)\n", q8.rel, q8.top1, q8.rows, self.rel);
            ck_assert_msg(self.rel <= 3e-2, "%s/%s: q8_0 cache moves logits by %.3g", stem, cases[c], self.rel);
            if (strstr(stem, "Q8_0")) {
                ck_assert_msg(q8.rel <= 2e-2, "%s/%s: q8_0 cache rel %.3g > 2e-2", stem, cases[c], q8.rel);
                ck_assert_msg(q8.top1 * 100 >= q8.rows * 95, "%s/%s: q8_0 cache top-1 %d/%d", stem, cases[c], q8.top1,
                              q8.rows);
            }
        } else {
            fprintf(stderr, " | q8_0 n/a (head_dim)\n");
        }
        free(own);
    }
    test_model_close(m, built);
}

START_TEST(test_q8_fidelity)
{
    kern_init();
    char rdir[1024];
    snprintf(rdir, sizeof rdir, "%s/reference", test_shared());
    DIR *d = opendir(rdir);
    ck_assert_msg(d != NULL, "cannot open %s (set LLM_SHARED)", rdir);
    struct dirent *e;
    int models = 0;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "stories", 7) != 0 && strncmp(e->d_name, "tiny-", 5) != 0) continue;
        fidelity_model(e->d_name, rdir);
        models++;
    }
    closedir(d);
    ck_assert_int_ge(models, 14);
}
END_TEST

/* A q8_0 session's rows are the same bits however its tokens are split: one prefill,
 * chunks of 1, 5 and 16, and mixed steps with two other sessions; and every kernel
 * table this CPU runs gives those bits. */
static void invariance_model(const char *file, eng_precision prec)
{
    bool built;
    char err[512];
    eng_model *m = test_model_open(file, prec, &built);
    const int V = eng_config_of(m)->n_vocab, N = 45;
    int32_t toks[45];
    for (int t = 0; t < N; t++) toks[t] = t == 0 ? 1 : (int32_t)(3 + (t * 7919) % (V - 3));
    float *ref = malloc((size_t)N * V * sizeof(float)), *out = malloc((size_t)N * V * sizeof(float));
    eng_session *s = eng_session_new(m, 64, ENG_KV_Q8_0, err, sizeof err);
    ck_assert_msg(s && eng_prefill(m, s, toks, N, ref, true, err, sizeof err) == 0, "%s", err);
    static const int chunks[] = { 1, 5, 16 };
    for (int c = 0; c < 3; c++) {
        eng_session_reset(s);
        for (int done = 0; done < N; done += chunks[c]) {
            int k = N - done < chunks[c] ? N - done : chunks[c];
            ck_assert_int_eq(eng_prefill(m, s, toks + done, k, out + (size_t)done * V, true, err, sizeof err), 0);
        }
        ck_assert_msg(memcmp(out, ref, (size_t)N * V * sizeof(float)) == 0, "%s: q8_0 chunks of %d differ", file,
                      chunks[c]);
    }
    eng_session *o1 = eng_session_new(m, 64, ENG_KV_Q8_0, err, sizeof err);
    eng_session *o2 = eng_session_new(m, 64, ENG_KV_Q8_0, err, sizeof err);
    ck_assert_int_eq(eng_prefill(m, o1, toks + 3, 9, NULL, false, err, sizeof err), 0);
    eng_session_reset(s);
    for (int t = 0; t < N; t += 3) { /* s: 3 tokens a step; o1: one; o2: two */
        eng_item it[6] = { { o1, toks[t % 20], false, false }, { s, toks[t], true, false },
                           { s, toks[t + 1], true, false }, { s, toks[t + 2], true, false },
                           { o2, toks[t / 2 % 20], false, false }, { o2, toks[(t + 1) / 2 % 20], false, false } };
        ck_assert_msg(eng_step(m, it, 6, out, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(memcmp(out, ref + (size_t)t * V, 3 * (size_t)V * sizeof(float)) == 0,
                      "%s: q8_0 rows %d..%d in a mixed step differ", file, t, t + 2);
    }
    static const char *const names[] = { "scalar", "avx2", "avxvnni", "avx512vnni", "neon", "neoni8mm" };
    const kern_ops *dflt = kern_active;
    for (int k = 0; k < 6 && prec != ENG_FLOAT; k++) { /* the float path's matmul is per table */
        if (!kern_get(names[k])) continue;
        ck_assert_int_eq(kern_select(names[k]), 0);
        eng_session_reset(s);
        ck_assert_int_eq(eng_prefill(m, s, toks, N, out, true, err, sizeof err), 0);
        ck_assert_msg(memcmp(out, ref, (size_t)N * V * sizeof(float)) == 0, "%s: table %s differs with q8_0", file,
                      names[k]);
    }
    kern_active = dflt;
    eng_session_free(o1);
    eng_session_free(o2);
    eng_session_free(s);
    free(ref);
    free(out);
    test_model_close(m, built);
}

START_TEST(test_q8_invariance)
{
    kern_init();
    invariance_model("tiny-llama2-Q8_0.gguf", ENG_INT8);
    invariance_model("tiny-qwen2-Q8_0.gguf", ENG_NATIVE);
    invariance_model("tiny-llama2-Q4_K_M.gguf", ENG_FLOAT);
}
END_TEST

/* The pool's identity and block hash include the KV type: the same tokens hash apart,
 * and a pool of one type is not attached as another. */
START_TEST(test_q8_pool_identity)
{
    bool built;
    char err[256], name[SEG_NAME_MAX];
    eng_model *m = test_model_open("tiny-llama2-Q8_0.gguf", ENG_INT8, &built);
    kvp_params p = { .n_blocks = 4 };
    kvs_ident(m, ENG_KV_Q8_0, ENG_KV_WHOLE, &p.id);
    ck_assert_uint_eq(p.id.type, KVP_Q8_0);
    kvp_ident f16 = p.id;
    kvs_ident(m, ENG_KV_F16, ENG_KV_WHOLE, &f16);
    int32_t toks[16];
    for (int i = 0; i < 16; i++) toks[i] = 100 + i;
    ck_assert(kvp_hash(0, toks, 16, &p.id) != kvp_hash(0, toks, 16, &f16));
    snprintf(name, sizeof name, "/llm-kv-%u-test%d-q8id", (unsigned)geteuid(), (int)getpid());
    kvp *pool = NULL;
    ck_assert_msg(kvp_create(name, &p, &pool, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(kvp_geometry_of(pool)->plane_bytes, (uint64_t)(p.id.kv_dim * 17 + 63) / 64 * 64);
    kvp *other = NULL;
    ck_assert(kvp_attach(name, &f16, &other, err, sizeof err) != 0);
    kvp_close(&pool);
    kvp_remove(name, err, sizeof err);
    test_model_close(m, built);
}
END_TEST

Suite *kvq8_suite(void)
{
    Suite *s = suite_create("kvq8");
    TCase *tc = tcase_create("kvq8");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_q8_roundtrip);
    tcase_add_test(tc, test_q8_refused);
    tcase_add_test(tc, test_q8_invariance);
    tcase_add_test(tc, test_q8_pool_identity);
    tcase_add_test(tc, test_q8_fidelity);
    suite_add_tcase(s, tc);
    return s;
}
