/*
 * fuzz_seeds.c - writes the seed corpora of the fuzz harnesses from the real files in
 * ../shared, so that no large binary is committed (run by `make fuzz`):
 *
 *   fuzz_seeds SHARED_DIR OUT_DIR      # OUT_DIR/{vocab,proto,tok,chat,tools,sampler}/seed-*
 *
 * vocab: metadata-only GGUFs with the tokenizer.* keys of every model and reference
 * vocabulary, arrays cut to 300 entries (special ids beyond that moved inside);
 * proto: one valid message of every type; tok: the tokenizer test texts, each for every
 * vocabulary and mode; chat: a three-message conversation for every template; sampler:
 * every parameter with a value, and wire forms of a few parameter sets; grammar: GBNF
 * grammars, each with a text to feed after a NUL; jsonschema: schemas, each with a
 * document to feed after a NUL.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "chat.h"
#include "gguf.h"
#include "log.h"
#include "proto.h"
#include "sampler.h"

#define CUT 300

static const char *out_dir;
static int n_written;

static void put(const char *kind, const void *p, size_t n)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", out_dir, kind);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/%s/seed-%04d", out_dir, kind, n_written++);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) { perror(path); exit(1); }
    fclose(f);
}

static void vocab_seed(const char *path)
{
    char err[256];
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    if (!g) { fprintf(stderr, "fuzz_seeds: %s\n", err); return; }
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *k = gguf_key(g, i);
        if (strncmp(k, "tokenizer.", 10) != 0 || !strcmp(k, "tokenizer.chat_template")) continue;
        if (gguf_kv_type(g, i) != GGUF_T_ARRAY) {
            int64_t v = gguf_get_int(g, k, -1);
            if (strstr(k, "_token_id") && v >= CUT) { /* keep the special ids inside the cut */
                gguf_writer_set_u32(w, k, (uint32_t)(v % CUT));
                continue;
            }
            gguf_writer_copy_kv(w, g, k);
            continue;
        }
        uint64_t n = gguf_arr_n(g, i) < CUT ? gguf_arr_n(g, i) : CUT;
        if (gguf_arr_type(g, i) == GGUF_T_STRING) {
            char **s = calloc(n ? n : 1, sizeof *s);
            for (uint64_t j = 0; j < n; j++) {
                gguf_str t = gguf_arr_str(g, i, j);
                s[j] = strndup(t.ptr, t.len);
            }
            gguf_writer_set_arr_str(w, k, (const char *const *)s, n);
            for (uint64_t j = 0; j < n; j++) free(s[j]);
            free(s);
        } else {
            gguf_writer_set_arr(w, k, gguf_arr_type(g, i), gguf_arr_data(g, i), n);
        }
    }
    size_t len;
    void *mem = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
    if (mem) put("vocab", mem, len);
    else fprintf(stderr, "fuzz_seeds: %s: %s\n", path, err);
    free(mem);
    gguf_writer_free(w);
    gguf_close(g);
}

/* A field of the seed message of type tt, where that type has it. */
#define PUT(fn, f, ...) if (proto_type_has(tt, f)) fn(&w, f, __VA_ARGS__)

static void proto_seeds(void)
{
    proto_writer w;
    int32_t toks[] = {1, 15043, 3186, 29991};
    uint8_t sp[SMP_WIRE_MAX];
    smp_params p = smp_params_default();
    size_t spn = smp_params_to_wire(&p, sp);
    for (int t = 0; t < PT_TYPE_COUNT; t++) {
        proto_type tt = (proto_type)t;
        proto_begin(&w, tt, 7);
        PUT(proto_put_u64, MF_SESS, 42);
        PUT(proto_put_u64, MF_STEP, 3);
        PUT(proto_put_u64, MF_EPOCH, 9);
        PUT(proto_put_str, MF_KEY, "0123456789abcdef0123456789abcdef");
        PUT(proto_put_ints, MF_TOKS, toks, 4);
        PUT(proto_put_bin, MF_SP, sp, spn);
        PUT(proto_put_i64, MF_N, 16);
        PUT(proto_put_i64, MF_TOK, 5);
        PUT(proto_put_str, MF_PROMPT, "Once upon a time");
        PUT(proto_put_str, MF_TEXT, "");
        PUT(proto_put_str, MF_MSG, "error text");
        PUT(proto_put_str, MF_SEG, "/llm-0-0123456789abcdef");
        PUT(proto_put_str, MF_HOST, "vm");
        PUT(proto_put_u64, MF_PID, 1234);
        PUT(proto_put_u64, MF_ACTIVE, 1);
        PUT(proto_put_u64, MF_WID, 77);
        PUT(proto_put_u64, MF_BUDGET, 10);
        PUT(proto_put_u64, MF_NTOK, 4);
        PUT(proto_put_str, MF_REASON, "length");
        PUT(proto_put_u64, MF_NTOK_PROMPT, 4);
        PUT(proto_put_f64, MF_UPTIME, 1.5);
        PUT(proto_put_array_begin, MF_WORKERS, 0);
        PUT(proto_put_str, MF_SHM, "/llm-logits-0-1");
        PUT(proto_put_u64, MF_NV, 512);
        if (t == PT_SAMPLE || t == PT_SAMPLED) {
            proto_put_array_begin(&w, MF_ROWS, 1);
            msgpack_pack_map(&w.pk, t == PT_SAMPLE ? 5 : 3);
            proto_pack_key(&w.pk, MF_SESS); msgpack_pack_uint64(&w.pk, 42);
            proto_pack_key(&w.pk, MF_STEP); msgpack_pack_uint64(&w.pk, 3);
            if (t == PT_SAMPLE) {
                proto_pack_key(&w.pk, MF_SLOT); msgpack_pack_uint64(&w.pk, 0);
                proto_pack_key(&w.pk, MF_SP); msgpack_pack_bin(&w.pk, spn); msgpack_pack_bin_body(&w.pk, sp, spn);
                proto_pack_key(&w.pk, MF_HIST); msgpack_pack_array(&w.pk, 1); msgpack_pack_int32(&w.pk, 5);
            } else {
                proto_pack_key(&w.pk, MF_TOK); msgpack_pack_int32(&w.pk, 5);
            }
        }
        put("proto", proto_data(&w), proto_size(&w));
        proto_writer_free(&w);
    }
}
#undef PUT

/* The test texts of a llama.cpp .inp file, separated by __ggml_vocab_test__ lines. */
static void tok_seeds(const char *inp)
{
    FILE *f = fopen(inp, "rb");
    if (!f) return;
    static char all[1 << 16], seed[4096];
    size_t n = fread(all, 1, sizeof all - 1, f);
    fclose(f);
    all[n] = 0;
    const char *sep = "\n__ggml_vocab_test__\n";
    for (char *p = all, *e; *p; p = e + strlen(sep)) {
        if (!(e = strstr(p, sep))) break;
        size_t len = (size_t)(e - p);
        if (len + 1 > sizeof seed) continue;
        for (int sel = 0; sel < 15; sel += 4) { /* a few vocabulary x mode picks per text */
            seed[0] = (char)sel;
            memcpy(seed + 1, p, len);
            put("tok", seed, len + 1);
        }
    }
}

static void chat_seeds(void)
{
    static const char conv[] = "system\0You are terse.\0user\0Hello <|im_start|> there\0assistant\0Hi.";
    char seed[sizeof conv + 2];
    for (int t = 0; t < CHAT_TMPL_COUNT; t++) {
        seed[0] = (char)t;
        seed[1] = (char)(t & 1);
        memcpy(seed + 2, conv, sizeof conv - 1);
        put("chat", seed, sizeof conv + 1);
    }
}

/* tools: byte 0 the call syntax (and 0x80: streamed), byte 1 the piece size, then text */
static void tools_seeds(void)
{
    static const char *const s[] = {
        "\x00\x03<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        "\x80\x01Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}\n</tool_call>",
        "\x01\x05{\"name\": \"get_time\", \"parameters\": {\"tz\": \"UTC\"}}",
        "\x81\x02 {\"name\": \"f\", \"parameters\": {}}",
        "\x02\x07[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": \"{}\"}]",
        ("\x00\x04{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d \\\"q\\\" \\u00e9\","
         "\"parameters\":{\"type\":\"object\",\"properties\":{}}}}"),
    };
    for (size_t i = 0; i < sizeof s / sizeof *s; i++)
        put("tools", s[i], strlen(s[i] + 2) + 2);
}

static void sampler_seeds(void)
{
    static const char *const sets[][2] = {
        {"temperature", "0.8"}, {"top_k", "40"}, {"top_p", "0.95"}, {"min_p", "0.05"}, {"typical_p", "0.9"},
        {"repeat_penalty", "1.1"}, {"repeat_last_n", "64"}, {"dry_multiplier", "0.8"},
        {"dry_sequence_breakers", "[\"\\n\", \":\"]"}, {"logit_bias", "15043:-inf,29:+1.5"},
        {"samplers", "penalties;dry;top_k;top_p;min_p;temperature"}, {"mirostat", "2"}, {"seed", "1234"},
        {"xtc_probability", "0.5"}, {"n_probs", "5"}, {"ignore_eos", "true"}};
    char seed[256];
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        size_t a = strlen(sets[i][0]), b = strlen(sets[i][1]);
        seed[0] = 0;
        memcpy(seed + 1, sets[i][0], a + 1);
        memcpy(seed + 2 + a, sets[i][1], b);
        put("sampler", seed, a + b + 2);
    }
    static uint8_t wire[1 + SMP_WIRE_MAX];
    char err[200];
    for (size_t i = 0; i <= sizeof sets / sizeof sets[0]; i += 3) {
        smp_params p = smp_params_default();
        for (size_t j = 0; j < i; j++) smp_param_set(&p, sets[j][0], sets[j][1], err, sizeof err);
        wire[0] = 1;
        put("sampler", wire, 1 + smp_params_to_wire(&p, wire + 1));
    }
}

static void put2(const char *kind, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *seed = malloc(la + lb + 1);
    memcpy(seed, a, la);
    seed[la] = 0;
    memcpy(seed + la + 1, b, lb);
    put(kind, seed, la + lb + 1);
    free(seed);
}

static void grammar_seeds(void)
{
    static const char *const g[][2] = {
        {"root ::= object\nvalue ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
         "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws\n"
         "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n"
         "string ::= \"\\\"\" ([^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))* \"\\\"\" ws\n"
         "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
         "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n",
         "{\"a\": [1, 2.5, \"x\\u00e9\", {\"b\": null}]}"},
        {"root ::= (expr \"=\" term \"\\n\")+\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+ | \"(\" expr \")\"\n",
         "1+2=3\n(4*5)=20\n"},
        {"# comment\nroot ::= [^a-z\\n]{2,4} . \"\\u00e9\" [\\U0001F600-\\U0001F64F]? x?\nx ::= \"\\x41\"+\n",
         "AB\xe6\x97\xa5\xc3\xa9\xf0\x9f\x99\x82" "AA"},
        {"root ::= \"ab\" | \"ac\" (\"d\" | \"e\"){,3}", "acde"},
    };
    for (size_t i = 0; i < sizeof g / sizeof *g; i++)
        put2("grammar", g[i][0], g[i][1]);
}

static void jsonschema_seeds(void)
{
    static const char *const s[][2] = {
        {"{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 8}, "
         "\"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 150}, \"tags\": {\"type\": \"array\", "
         "\"items\": {\"enum\": [\"a\", \"b\"]}, \"minItems\": 1, \"maxItems\": 3}}, \"required\": [\"name\"], "
         "\"additionalProperties\": {\"type\": \"boolean\"}}",
         "{\"name\": \"Ann\", \"age\": 37, \"tags\": [\"a\"], \"x\": true}"},
        {"{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"number\"}, "
         "\"next\": {\"anyOf\": [{\"$ref\": \"#/$defs/node\"}, {\"type\": \"null\"}]}}, \"required\": [\"v\", \"next\"]}}, "
         "\"$ref\": \"#/$defs/node\"}", "{\"v\": 1.5, \"next\": {\"v\": 2, \"next\": null}}"},
        {"{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\", \"format\": \"date\"}, {\"type\": "
         "\"string\", \"format\": \"uuid\"}, {\"type\": \"string\", \"pattern\": \"^[A-Z]{2}(-\\\\d+)?$\"}], "
         "\"items\": false}", "[\"2024-01-02\", \"123e4567-e89b-12d3-a456-426614174000\", \"AB-12\"]"},
        {"{\"allOf\": [{\"properties\": {\"a\": {\"const\": 1}}}, {\"required\": [\"a\"]}], \"oneOf\": null}", "{\"a\": 1}"},
        {"{\"type\": [\"string\", \"null\", \"json_object\"], \"minLength\": 2}", "null"},
    };
    for (size_t i = 0; i < sizeof s / sizeof *s; i++)
        put2("jsonschema", s[i][0], s[i][1]);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fuzz_seeds SHARED_DIR OUT_DIR\n");
        return 2;
    }
    log_init("fuzz_seeds", LOG_ERROR);
    out_dir = argv[2];
    mkdir(out_dir, 0700);
    char path[1200];
    static const char *const vocabs[] = {"models/stories260K-f32.gguf", "models/tiny-llama3-Q8_0.gguf",
        "models/tiny-qwen2-Q8_0.gguf", "reference/tokenizer/ggml-vocab-llama-spm.gguf",
        "reference/tokenizer/ggml-vocab-gpt-2.gguf", "reference/tokenizer/ggml-vocab-llama-bpe.gguf",
        "reference/tokenizer/ggml-vocab-qwen2.gguf"};
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", argv[1], vocabs[i]);
        vocab_seed(path);
    }
    proto_seeds();
    static const char *const inps[] = {"llama-spm", "gpt-2", "llama-bpe", "qwen2"};
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/reference/tokenizer/ggml-vocab-%s.gguf.inp", argv[1], inps[i]);
        tok_seeds(path);
    }
    chat_seeds();
    tools_seeds();
    sampler_seeds();
    grammar_seeds();
    jsonschema_seeds();
    printf("fuzz_seeds: %d seeds in %s\n", n_written, out_dir);
    return 0;
}
