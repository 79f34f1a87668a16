/*
 * main.c - engined: one-shot commands (evaluate tokens, list and remove segments);
 * every other invocation is the daemon (engd.h).
 *
 *   engined --model M.gguf --eval tokens.txt --logits-out out.f32 [--precision int8]
 *   engined --model M.gguf --eval tokens.txt -n 32          # greedy ids, one a line
 *   engined --list-segments                                  # with bits per weight
 *   engined --remove-segment /llm-1000-0123456789abcdef | --all
 *   engined --verify-segment /llm-1000-0123456789abcdef | --all   # every checksum
 *   engined --model M.gguf --workers 2                      # daemon (engd_serve)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "engd.h"
#include "engine.h"
#include "kvsetup.h"
#include "log.h"
#include "segment.h"
#include "errcode.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: engined --model FILE --eval TOKENS.txt [--logits-out OUT.f32] [-n N]\n"
        "               [--precision native|int8|float] [--threads N] [--kv f16|f32|q8_0] [--ctx N]\n"
        "               [--warmup N] [--kv-pool SIZE]\n"
        "       engined --list-segments\n"
        "       engined --remove-segment NAME | --all\n"
        "       engined --verify-segment NAME | --all    (attach as a worker, check every checksum)\n"
        "       engined --model FILE --workers N [--run-dir DIR]   (daemon, see README)\n"
        "\n"
        "  --eval FILE        token ids, one per line, evaluated in one prompt pass\n"
        "  --logits-out FILE  write n_tokens x n_vocab float32 logits (little-endian)\n"
        "  -n N               without --logits-out: greedy-decode N tokens (default 32)\n"
        "  --precision P      native (default: 2/4/5/6-bit matrices kept at their width, others\n"
        "                     q8), int8 (every matrix widened to q8) or float (f32 reference)\n"
        "  --threads N        compute threads (default 2)\n"
        "  --kv T             KV cache type f16 (default), f32 or q8_0\n"
        "  --warmup N         N untimed passes of the prompt first (default 0), as llama-bench's\n"
        "                     warm-up run: the timed pass then finds its buffers touched\n"
        "  --kv-pool SIZE     the session holds blocks of KV pools of its own (bytes with a\n"
        "                     K/M/G suffix, or tokens), as a pipeline's sessions with --kv-pool\n"
        "                     do; the pools are removed at exit\n");
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Reads token ids, one per line; returns a malloc'd array or NULL with err. */
static int32_t *read_tokens(const char *path, int *n, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        errf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    int cap = 256, cnt = 0, line = 0;
    int32_t *t = malloc((size_t)cap * sizeof *t);
    char buf[256];
    while (t && fgets(buf, sizeof buf, f)) {
        line++;
        char *p = buf, *end;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '\n' || *p == '\r' || *p == 0) continue;
        errno = 0;
        long v = strtol(p, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
        if (errno || end == p || *end || v < 0 || v > INT32_MAX) {
            errf(err, errlen, "%s:%d: expected one token id per line", path, line);
            free(t);
            fclose(f);
            return NULL;
        }
        if (cnt == cap) {
            int32_t *nt = realloc(t, (size_t)(cap *= 2) * sizeof *t);
            if (!nt) { free(t); t = NULL; break; }
            t = nt;
        }
        t[cnt++] = (int32_t)v;
    }
    fclose(f);
    if (!t) errf(err, errlen, "out of memory reading %s", path);
    else if (cnt == 0) {
        errf(err, errlen, "%s: no token ids", path);
        free(t);
        return NULL;
    }
    *n = cnt;
    return t;
}

typedef struct {
    const char *model, *eval, *logits_out, *kv_pool;
    int n_gen, threads, n_ctx, warmup;
    eng_precision prec;
    eng_kv_type kv;
} eval_opts;

static int write_logits(const char *path, const float *lg, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(lg, sizeof(float), n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "error: %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

static int greedy(eng_model *m, eng_session *s, float *lg, int n_gen, int n_vocab)
{
    char err[256];
    double t0 = now_ms();
    int tok = eng_argmax(lg, n_vocab), i;
    for (i = 0; i < n_gen; i++) {
        printf("%d\n", tok);
        if (i + 1 == n_gen) break;
        int32_t t32 = tok;
        if (eng_decode(m, &s, &t32, 1, lg, err, sizeof err) != 0) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        tok = eng_argmax(lg, n_vocab);
    }
    double ms = now_ms() - t0;
    if (n_gen > 1) {
        double tps = (n_gen - 1) / ms * 1e3;
        log_info("decode: %d tokens in %.1f ms (%.2f tok/s, %.1f GB/s of weights)", n_gen - 1, ms, tps,
                 tps * (double)eng_weight_bytes_per_token(m) / 1e9);
    }
    return 0;
}

static int run_eval(const eval_opts *o)
{
    char err[512];
    int n = 0, rc = 1;
    int32_t *toks = read_tokens(o->eval, &n, err, sizeof err);
    if (!toks) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    eng_open_info info;
    eng_model *m = eng_open(o->model, o->prec, &info, err, sizeof err);
    eng_session *s = NULL;
    float *lg = NULL;
    kvp *made[ENG_KV_KINDS] = { NULL }, *use[ENG_KV_KINDS] = { NULL };
    char pool_names[ENG_KV_KINDS][SEG_NAME_MAX] = { "" };
    if (!m) goto fail;
    if (eng_set_threads(m, o->threads) != 0) {
        errf(err, sizeof err, "--threads %d: cannot start that many threads", o->threads);
        goto fail;
    }
    const mdl_config *c = eng_config_of(m);
    int n_ctx = o->n_ctx > 0 ? o->n_ctx : n + o->n_gen + 1;
    if (o->kv_pool) {
        kvs_spec ks = { .kv = o->kv, .n_ctx = n_ctx, .step = n };
        if (kvs_parse(o->kv_pool, &ks, err, sizeof err) != 0) goto fail;
        if (!kvs_enabled(&ks)) {
            errf(err, sizeof err, "--kv-pool %s: no pool asked for", o->kv_pool);
            goto fail;
        }
        if (kvs_open_own(m, &ks, made, use, pool_names, err, sizeof err) != 0) goto fail;
        eng_set_kv_pools(m, use[ENG_KV_WHOLE], use[ENG_KV_RING]);
    }
    s = eng_session_new(m, n_ctx, o->kv, err, sizeof err);
    bool all = o->logits_out != NULL;
    lg = malloc((size_t)c->n_vocab * (all ? (size_t)n : 1) * sizeof(float));
    if (!s || !lg) {
        if (!lg) errf(err, sizeof err, "out of memory for the logits");
        goto fail;
    }
    log_info("session: %d positions, %.2f MiB of KV cache", n_ctx, eng_session_kv_bytes(s) / 1048576.0);
    eng_warm(m); /* page faults of the first touch are not prompt processing */
    for (int i = 0; i < o->warmup; i++) { /* nor are the scratch's and the cache's */
        if (eng_prefill(m, s, toks, n, lg, all, err, sizeof err) != 0) goto fail;
        eng_session_reset(s);
    }
    double t0 = now_ms();
    if (eng_prefill(m, s, toks, n, lg, all, err, sizeof err) != 0) goto fail;
    double ms = now_ms() - t0;
    log_info("prefill: %d tokens in %.1f ms (%.2f tok/s)", n, ms, n / ms * 1e3);
    if (all) rc = write_logits(o->logits_out, lg, (size_t)n * c->n_vocab);
    else rc = greedy(m, s, lg, o->n_gen, c->n_vocab);
    goto done;
fail:
    fprintf(stderr, "error: %s\n", err);
    rc = 1;
done:
    free(lg);
    free(toks);
    eng_session_free(s);
    kvs_remove_own(made, use, pool_names);
    eng_close(m);
    return rc;
}

/* Bits per weight of a READY segment we may attach (validated as a worker would),
 * as "8.50"; bpw is left as it is ("-") for any other. */
static void segment_bpw(const seg_info *s, char *bpw, size_t len)
{
    seg_map sm;
    char err[256];
    if (s->state != SEG_STATE_READY || seg_attach(s->name, &sm, NULL, err, sizeof err) != 0) return;
    snprintf(bpw, len, "%.2f", seg_bits_per_weight(&sm));
    seg_unmap(&sm);
}

static int list_segments(void)
{
    char err[256];
    seg_info infos[256];
    int n = seg_list(infos, 256, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    printf("%-32s %-8s %6s %5s %10s %8s %10s  %s\n", "NAME", "STATE", "UID", "MODE", "SIZE_MB", "BITS/W", "AGE_S",
           "MODEL");
    for (int i = 0; i < n && i < 256; i++) {
        const seg_info *s = &infos[i];
        const char *st = s->state == SEG_STATE_READY ? "READY"
                       : s->state == SEG_STATE_LOADING ? (s->loader_dead ? "STALE" : "LOADING") : "UNKNOWN";
        char bpw[16] = "-";
        segment_bpw(s, bpw, sizeof bpw);
        printf("%-32s %-8s %6u %05o %10.1f %8s %10.0f  %s\n", s->name, st, (unsigned)s->uid, (unsigned)s->mode,
               s->bytes / 1e6, bpw, s->age_s, s->src_path);
    }
    return 0;
}

/* A weight segment's KV pools (kvsetup.h) go with it, when there are some. */
static void remove_pool_of(const char *wname)
{
    char pool[SEG_NAME_MAX], full[SEG_NAME_MAX + 1], err[256];
    snprintf(full, sizeof full, "%s%s", wname[0] == '/' ? "" : "/", wname);
    for (int k = 0; k < ENG_KV_KINDS; k++) {
        if (kvs_name(full, k, pool) != 0) return;
        int rc = kvp_remove(pool, err, sizeof err);
        if (rc == 0) printf("removed %s\n", pool);
        else if (rc < 0) fprintf(stderr, "error: %s\n", err);
    }
    kvs_sweep_own(full); /* and those of `engined --eval --kv-pool` runs killed before their exit */
}

static int remove_segments(const char *what)
{
    char err[256];
    if (strcmp(what, "--all") != 0) {
        if (seg_remove(what, err, sizeof err) != 0) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        printf("removed %s\n", what);
        remove_pool_of(what);
        return 0;
    }
    seg_info infos[256];
    int n = seg_list(infos, 256, err, sizeof err), rc = 0;
    if (n < 0) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    for (int i = 0; i < n && i < 256; i++) {
        if (infos[i].state == 0) continue; /* not one of ours */
        if (infos[i].uid != (uint32_t)geteuid()) { /* another user's: name it to remove it */
            printf("skipped %s (owned by uid %u)\n", infos[i].name, (unsigned)infos[i].uid);
            continue;
        }
        if (seg_remove(infos[i].name, err, sizeof err) != 0) {
            fprintf(stderr, "error: %s\n", err);
            rc = 1;
        } else {
            printf("removed %s\n", infos[i].name);
            remove_pool_of(infos[i].name);
        }
    }
    return rc;
}

/* One segment: attached as a worker would (owner, mode, header checksum, directory,
 * every tensor of the model), then every tensor's checksum. 0 or -1 with err. */
static int verify_one(const char *name, char arch[32], char *err, size_t errlen)
{
    seg_map sm;
    int rc = seg_attach(name, &sm, NULL, err, errlen);
    if (rc == 1) errf(err, errlen, "segment %.64s is still LOADING", name);
    if (rc != 0) return -1;
    rc = seg_verify_tensors(&sm, err, errlen);
    seg_unmap(&sm);
    if (rc != 0) return -1;
    eng_model *m = eng_attach(name, err, errlen);
    if (!m) return -1;
    snprintf(arch, 32, "%s", eng_config_of(m)->arch_name);
    eng_close(m);
    return 0;
}

/* Verifies each named segment (or every one); one line per segment. */
static int verify_segments(const char *what)
{
    char err[512];
    seg_info infos[256];
    int n = 1, rc = 0;
    if (strcmp(what, "--all") == 0) {
        n = seg_list(infos, 256, err, sizeof err);
        if (n < 0) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
    } else {
        snprintf(infos[0].name, sizeof infos[0].name, "%s%s", what[0] == '/' ? "" : "/", what);
        infos[0].state = SEG_STATE_READY;
    }
    for (int i = 0; i < n && i < 256; i++) {
        if (infos[i].state == 0) continue; /* not one of ours */
        char arch[32];
        if (verify_one(infos[i].name, arch, err, sizeof err) == 0)
            printf("%s OK (%s)\n", infos[i].name, arch);
        else {
            printf("%s BAD: %s\n", infos[i].name, err);
            rc = 1;
        }
    }
    return rc;
}

/* Parses eval options; returns 0, or 2 on a usage error (message printed). */
static int parse_eval(int argc, char **argv, eval_opts *o)
{
    *o = (eval_opts){ .n_gen = 32, .threads = 2, .prec = ENG_NATIVE, .kv = ENG_KV_F16 };
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v) o->model = v;
        else if (!strcmp(a, "--eval") && v) o->eval = v;
        else if (!strcmp(a, "--logits-out") && v) o->logits_out = v;
        else if (!strcmp(a, "-n") && v) o->n_gen = atoi(v);
        else if (!strcmp(a, "--threads") && v) o->threads = atoi(v);
        else if (!strcmp(a, "--ctx") && v) o->n_ctx = atoi(v);
        else if (!strcmp(a, "--warmup") && v) o->warmup = atoi(v);
        else if (!strcmp(a, "--kv-pool") && v) o->kv_pool = v;
        else if (!strcmp(a, "--precision") && v && (!strcmp(v, "int8") || !strcmp(v, "float") || !strcmp(v, "native")))
            o->prec = !strcmp(v, "float") ? ENG_FLOAT : !strcmp(v, "int8") ? ENG_INT8 : ENG_NATIVE;
        else if (!strcmp(a, "--kv") && v && eng_kv_parse(v) >= 0)
            o->kv = (eng_kv_type)eng_kv_parse(v);
        else {
            fprintf(stderr, "error: unknown option or missing/invalid value: %s%s%s\n", a, v ? " " : "", v ? v : "");
            return 2;
        }
    }
    if (!o->model || !o->eval) {
        fprintf(stderr, "error: --eval needs --model FILE and --eval TOKENS.txt\n");
        return 2;
    }
    if (o->n_gen < 1 || o->threads < 1 || o->threads > 256 || o->n_ctx < 0 || o->warmup < 0) {
        fprintf(stderr, "error: -n, --threads and --ctx must be positive, --warmup at least 0\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    log_init("engined", LOG_INFO);
    bool eval = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            if (engd_serve) { /* and the daemon's own options */
                char *help_argv[] = {argv[0], "--help", NULL};
                fputc('\n', stdout);
                fflush(stdout);
                engd_serve(2, help_argv);
            }
            return 0;
        }
        if (!strcmp(argv[i], "--list-segments")) return list_segments();
        if (!strcmp(argv[i], "--remove-segment")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "error: --remove-segment needs a NAME or --all\n");
                return 2;
            }
            return remove_segments(argv[i + 1]);
        }
        if (!strcmp(argv[i], "--verify-segment")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "error: --verify-segment needs a NAME or --all\n");
                return 2;
            }
            return verify_segments(argv[i + 1]);
        }
        if (!strcmp(argv[i], "--eval")) eval = true;
    }
    if (eval) {
        eval_opts o;
        int rc = parse_eval(argc, argv, &o);
        return rc ? rc : run_eval(&o);
    }
    if (!engd_serve) {
        if (argc < 2) {
            usage(stderr);
            return 2;
        }
        fprintf(stderr, "error: daemon mode not built\n");
        return 1;
    }
    return engd_serve(argc, argv); /* no arguments too: the daemon may take LLM_MODEL */
}
