/*
 * cmd_inspect.c - `llmc inspect FILE [--tensors] [--json]`: what a GGUF model is.
 *
 *   llmc inspect ../shared/models/tiny-llama2-Q8_0.gguf
 *   llmc inspect model.gguf --tensors --json | python3 -m json.tool
 *
 * Prints the architecture, parameter count, context, widths, head counts, rope
 * settings, rms eps, vocabulary and tokenizer, special ids, chat template presence,
 * tensor count, bytes per weight type and sizes; --tensors adds one line per tensor
 * (name, type, shape, offset, bytes); --json prints the same as one JSON object.
 * Exit 0, or 1 with one "error: ..." line for a bad file, 2 for bad usage.
 * Owner: gguf helper.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "gguf.h"

typedef struct {
    const char *arch, *name, *tok_model, *tok_pre, *rope_scaling;
    int64_t     ctx, embd, layers, heads, heads_kv, head_dim, ff, vocab, rope_dims;
    int64_t     bos, eos, file_type, swa, ctx_orig;
    int64_t     experts, experts_used, ff_exp; /* mixture of experts; 0 when dense */
    double      rope_base, rope_factor, rms_eps, softcap[2], rope_attn;
    bool        neox, chat_template;
    uint64_t    params, tensor_bytes, file_size;
    int64_t     type_count[QT_COUNT];
    uint64_t    type_bytes[QT_COUNT];
} model_info;

/* Architectures whose rope rotates the two halves of a head (llama.cpp's NEOX). */
static bool arch_neox(const char *a)
{
    static const char *const neox[] = {"qwen", "qwen2", "qwen2moe", "qwen2vl", "qwen3",
                                       "qwen3moe", "phi2", "phi3", "gemma", "gemma2", "gemma3",
                                       "gptneox", "stablelm", "falcon", "starcoder2", "olmo2",
                                       "bert", "nomic-bert", "codeshell", "orion", "minicpm3",
                                       "dbrx", "exaone", "openelm", "plamo", "bitnet"};
    for (size_t i = 0; i < sizeof neox / sizeof neox[0]; i++)
        if (strcmp(a, neox[i]) == 0) return true;
    return false;
}

static int64_t arch_int(const gguf_ctx *g, const char *arch, const char *suffix, int64_t def)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_int(g, key, def);
}

static double arch_float(const gguf_ctx *g, const char *arch, const char *suffix, double def)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_float(g, key, def);
}

static const char *arch_str(const gguf_ctx *g, const char *arch, const char *suffix)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_str(g, key, NULL);
}

static void collect(const gguf_ctx *g, model_info *m)
{
    memset(m, 0, sizeof *m);
    const char *a = m->arch = gguf_get_str(g, "general.architecture", "unknown");
    m->name = gguf_get_str(g, "general.name", NULL);
    m->ctx = arch_int(g, a, "context_length", -1);
    m->embd = arch_int(g, a, "embedding_length", -1);
    m->layers = arch_int(g, a, "block_count", -1);
    m->heads = arch_int(g, a, "attention.head_count", -1);
    m->heads_kv = arch_int(g, a, "attention.head_count_kv", m->heads);
    m->head_dim = arch_int(g, a, "attention.key_length",
                           m->heads > 0 && m->embd > 0 ? m->embd / m->heads : -1);
    m->ff = arch_int(g, a, "feed_forward_length", -1);
    m->rope_dims = arch_int(g, a, "rope.dimension_count", m->head_dim);
    m->experts = arch_int(g, a, "expert_count", 0);
    m->experts_used = arch_int(g, a, "expert_used_count", 0);
    m->ff_exp = arch_int(g, a, "expert_feed_forward_length", m->experts ? m->ff : 0);
    m->rope_base = arch_float(g, a, "rope.freq_base", 10000.0);
    m->rope_scaling = arch_str(g, a, "rope.scaling.type");
    m->rope_factor = arch_float(g, a, "rope.scaling.factor", 0.0);
    m->rms_eps = arch_float(g, a, "attention.layer_norm_rms_epsilon", -1.0);
    m->neox = arch_neox(a);
    m->swa = arch_int(g, a, "attention.sliding_window", 0);
    m->ctx_orig = arch_int(g, a, "rope.scaling.original_context_length", 0);
    m->rope_attn = arch_float(g, a, "rope.scaling.attn_factor", 0.0);
    m->softcap[0] = arch_float(g, a, "attn_logit_softcapping", 0.0);
    m->softcap[1] = arch_float(g, a, "final_logit_softcapping", 0.0);
    int64_t tok = gguf_find_key(g, "tokenizer.ggml.tokens");
    m->vocab = tok >= 0 ? (int64_t)gguf_arr_n(g, tok) : arch_int(g, a, "vocab_size", -1);
    m->tok_model = gguf_get_str(g, "tokenizer.ggml.model", NULL);
    m->tok_pre = gguf_get_str(g, "tokenizer.ggml.pre", NULL);
    m->bos = gguf_get_int(g, "tokenizer.ggml.bos_token_id", -1);
    m->eos = gguf_get_int(g, "tokenizer.ggml.eos_token_id", -1);
    m->file_type = gguf_get_int(g, "general.file_type", -1);
    m->chat_template = gguf_find_key(g, "tokenizer.chat_template") >= 0;
    size_t len;
    gguf_buffer(g, &len);
    m->file_size = len;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        m->params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        m->tensor_bytes += t->nbytes;
        if (t->type < QT_COUNT) {
            m->type_count[t->type]++;
            m->type_bytes[t->type] += t->nbytes;
        }
    }
}

static void shape_str(const gguf_tensor *t, char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = 0;
    for (uint32_t d = 0; d < t->n_dims && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)t->ne[d]);
}

static void fmt_num(double v, char *buf, size_t n);

/* A count for the text output: "n/a" when the file does not say. */
static void pr_int(const char *label, int64_t v)
{
    if (v < 0) printf("%-15s n/a\n", label);
    else printf("%-15s %lld\n", label, (long long)v);
}

static void print_text(const gguf_ctx *g, const char *path, const model_info *m, bool tensors)
{
    printf("file            %s\n", path);
    printf("file size       %llu bytes\n", (unsigned long long)m->file_size);
    printf("gguf            version %u, alignment %u, data at offset %llu\n", gguf_version(g),
           gguf_alignment(g), (unsigned long long)gguf_data_offset(g));
    printf("architecture    %s\n", m->arch);
    if (m->name) printf("name            %s\n", m->name);
    printf("parameters      %llu (%.2f M)\n", (unsigned long long)m->params, m->params / 1e6);
    pr_int("context", m->ctx);
    pr_int("embedding", m->embd);
    pr_int("layers", m->layers);
    pr_int("heads", m->heads);
    pr_int("kv heads", m->heads_kv);
    pr_int("head dim", m->head_dim);
    pr_int("ffn", m->ff);
    if (m->experts > 0)
        printf("experts         %lld, %lld used per token, expert ffn %lld\n", (long long)m->experts,
               (long long)m->experts_used, (long long)m->ff_exp);
    char num[40];
    fmt_num(m->rope_base, num, sizeof num);
    printf("rope            freq base %s, %lld dims, %s", num, (long long)m->rope_dims,
           m->neox ? "neox" : "normal");
    if (m->rope_scaling) printf(", scaling %s", m->rope_scaling);
    fmt_num(m->rope_factor, num, sizeof num);
    if (m->rope_factor > 0) printf(", factor %s", num);
    fmt_num(m->rope_attn, num, sizeof num);
    if (m->rope_attn > 0) printf(", attn factor %s", num);
    if (m->ctx_orig > 0) printf(", original context %lld", (long long)m->ctx_orig);
    if (gguf_find_tensor(g, "rope_factors_long.weight")) printf(", long/short factors");
    printf("\n");
    fmt_num(m->rms_eps, num, sizeof num);
    printf("rms eps         %s\n", m->rms_eps < 0 ? "n/a" : num);
    if (m->swa > 0) pr_int("sliding window", m->swa);
    for (int k = 0; k < 2; k++) {
        fmt_num(m->softcap[k], num, sizeof num);
        if (m->softcap[k] > 0) printf("%s %s\n", k ? "final softcap  " : "attn softcap   ", num);
    }
    pr_int("vocab", m->vocab);
    printf("tokenizer       %s (pre %s)\n", m->tok_model ? m->tok_model : "none",
           m->tok_pre ? m->tok_pre : "none");
    pr_int("bos", m->bos);
    pr_int("eos", m->eos);
    printf("chat template   %s\n", m->chat_template ? "yes" : "no");
    pr_int("file type", m->file_type);
    printf("tensors         %lld\n", (long long)gguf_n_tensors(g));
    for (int t = 0; t < QT_COUNT; t++)
        if (m->type_count[t])
            printf("  %-8s      %lld tensors, %llu bytes\n", qt_name((uint32_t)t),
                   (long long)m->type_count[t], (unsigned long long)m->type_bytes[t]);
    printf("total size      %llu bytes of tensor data\n", (unsigned long long)m->tensor_bytes);
    if (!tensors) return;
    printf("\n%-32s %-8s %-24s %12s %12s\n", "name", "type", "shape", "offset", "bytes");
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char shape[96], br[100];
        shape_str(t, shape, sizeof shape);
        snprintf(br, sizeof br, "[%s]", shape);
        printf("%-32s %-8s %-24s %12llu %12llu\n", t->name, qt_name(t->type), br,
               (unsigned long long)t->offset, (unsigned long long)t->nbytes);
    }
}

/* Length of a valid UTF-8 sequence at s (n bytes left), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t k = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    if (k == 0 || k > n || (k == 2 && s[0] < 0xc2)) return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return k;
}

/* The shortest decimal that reads back as v (as a float if v is one: most GGUF
 * floats are float32, and 1e-05 reads better than 9.999999747378752e-06). */
static void fmt_num(double v, char *buf, size_t n)
{
    bool is_f32 = (double)(float)v == v;
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, n, "%.0f", v);
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        double back = strtod(buf, NULL);
        if (is_f32 ? (float)back == (float)v : back == v) return;
    }
}

/* A JSON number, or null for NaN/infinity (which JSON cannot hold). */
static void json_num(double v)
{
    char buf[40];
    if (!isfinite(v)) {
        fputs("null", stdout);
        return;
    }
    fmt_num(v, buf, sizeof buf);
    fputs(buf, stdout);
}

/* A JSON string: quotes, escapes, invalid UTF-8 replaced by U+FFFD; null for NULL. */
static void json_str(const char *s)
{
    if (!s) {
        fputs("null", stdout);
        return;
    }
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    putchar('"');
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c < 0x20) printf("\\u%04x", c);
        else if (c < 0x80) putchar(c);
        else {
            size_t k = utf8_len(p + i, n - i);
            if (k == 0) {
                fputs("\\ufffd", stdout);
                i++;
                continue;
            }
            fwrite(p + i, 1, k, stdout);
            i += k;
            continue;
        }
        i++;
    }
    putchar('"');
}

/* ", "key": v" with null for an absent (negative) value. */
static void json_int(const char *key, int64_t v)
{
    if (v < 0) printf(", \"%s\": null", key);
    else printf(", \"%s\": %lld", key, (long long)v);
}

static void print_json(const gguf_ctx *g, const char *path, const model_info *m, bool tensors)
{
    printf("{\"file\": ");
    json_str(path);
    printf(", \"file_size\": %llu, \"gguf_version\": %u, \"alignment\": %u, \"data_offset\": %llu",
           (unsigned long long)m->file_size, gguf_version(g), gguf_alignment(g),
           (unsigned long long)gguf_data_offset(g));
    printf(", \"architecture\": ");
    json_str(m->arch);
    printf(", \"name\": ");
    json_str(m->name);
    printf(", \"parameters\": %llu", (unsigned long long)m->params);
    json_int("context_length", m->ctx);
    json_int("embedding_length", m->embd);
    json_int("layers", m->layers);
    json_int("heads", m->heads);
    json_int("heads_kv", m->heads_kv);
    json_int("head_dim", m->head_dim);
    json_int("feed_forward_length", m->ff);
    if (m->experts > 0) {
        json_int("expert_count", m->experts);
        json_int("expert_used_count", m->experts_used);
        json_int("expert_feed_forward_length", m->ff_exp);
    }
    printf(", \"rope\": {\"freq_base\": ");
    json_num(m->rope_base);
    json_int("dimension_count", m->rope_dims);
    printf(", \"type\": \"%s\", \"scaling_type\": ", m->neox ? "neox" : "normal");
    json_str(m->rope_scaling);
    printf(", \"scaling_factor\": ");
    if (m->rope_factor > 0) json_num(m->rope_factor);
    else fputs("null", stdout);
    printf(", \"attn_factor\": ");
    if (m->rope_attn > 0) json_num(m->rope_attn);
    else fputs("null", stdout);
    json_int("original_context_length", m->ctx_orig > 0 ? m->ctx_orig : -1);
    printf("}, \"rms_eps\": ");
    if (m->rms_eps >= 0) json_num(m->rms_eps);
    else fputs("null", stdout);
    json_int("sliding_window", m->swa);
    const char *caps[2] = { "attn_logit_softcapping", "final_logit_softcapping" };
    for (int k = 0; k < 2; k++) {
        printf(", \"%s\": ", caps[k]);
        if (m->softcap[k] > 0) json_num(m->softcap[k]);
        else fputs("null", stdout);
    }
    json_int("vocab_size", m->vocab);
    printf(", \"tokenizer_model\": ");
    json_str(m->tok_model);
    printf(", \"tokenizer_pre\": ");
    json_str(m->tok_pre);
    json_int("bos_token_id", m->bos);
    json_int("eos_token_id", m->eos);
    printf(", \"chat_template\": %s", m->chat_template ? "true" : "false");
    json_int("file_type", m->file_type);
    printf(", \"tensor_count\": %lld, \"types\": {", (long long)gguf_n_tensors(g));
    const char *sep = "";
    for (int t = 0; t < QT_COUNT; t++)
        if (m->type_count[t]) {
            printf("%s\"%s\": {\"count\": %lld, \"bytes\": %llu}", sep, qt_name((uint32_t)t),
                   (long long)m->type_count[t], (unsigned long long)m->type_bytes[t]);
            sep = ", ";
        }
    printf("}, \"tensor_bytes\": %llu", (unsigned long long)m->tensor_bytes);
    if (tensors) {
        printf(", \"tensors\": [");
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            char shape[96];
            shape_str(t, shape, sizeof shape);
            printf("%s{\"name\": ", i ? ", " : "");
            json_str(t->name);
            printf(", \"type\": \"%s\", \"shape\": [%s], \"offset\": %llu, \"bytes\": %llu}",
                   qt_name(t->type), shape, (unsigned long long)t->offset,
                   (unsigned long long)t->nbytes);
        }
        printf("]");
    }
    printf("}\n");
}

/* Entry point of `llmc inspect` (see cmds.h for the exit codes). */
int cmd_inspect(int argc, char **argv)
{
    const char *path = NULL;
    bool tensors = false, json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tensors") == 0) tensors = true;
        else if (strcmp(argv[i], "--json") == 0) json = true;
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: llmc inspect FILE [--tensors] [--json]\n");
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] != 0) {
            fprintf(stderr, "llmc inspect: unknown option %s\nusage: llmc inspect FILE [--tensors] [--json]\n", argv[i]);
            return 2;
        } else if (!path) path = argv[i];
        else {
            fprintf(stderr, "llmc inspect: one FILE only\nusage: llmc inspect FILE [--tensors] [--json]\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: llmc inspect FILE [--tensors] [--json]\n");
        return 2;
    }
    char err[1024];
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    if (!g) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    model_info m;
    collect(g, &m);
    if (json) print_json(g, path, &m, tensors);
    else print_text(g, path, &m, tensors);
    gguf_close(g);
    return 0;
}
