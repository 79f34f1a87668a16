/* Tests for tokenizerd's tokenizers (suite "tok"): llama.cpp's test vectors for every
 * reference vocabulary, every model prompt, special tokens, hostile input, streaming
 * detokenization, metadata-only blobs and bad metadata. Data from $LLM_SHARED. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "tok.h"
#include "tok_impl.h"
#include "unicode.h"

static const char *shared(void)
{
    const char *s = getenv("LLM_SHARED");
    return s ? s : "../shared";
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = (size_t)n;
    }
    return buf;
}

static tok_vocab *load_path(const char *path)
{
    char err[256];
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s: %s", path, err);
    tok_vocab *v = tok_vocab_load(g, err, sizeof err);
    ck_assert_msg(v != NULL, "%s: %s", path, err);
    gguf_close(g);
    return v;
}

static tok_vocab *load_ref(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/reference/tokenizer/ggml-vocab-%s.gguf", shared(), name);
    return load_path(path);
}

static size_t encode(const tok_vocab *v, const char *s, size_t len, bool add, bool parse, int32_t **ids)
{
    size_t n;
    char err[256];
    int rc = tok_encode(v, s, len, add, parse, ids, &n, err, sizeof err);
    ck_assert_msg(rc == 0, "tok_encode: %s", err);
    return n;
}

/* Every case of ggml-vocab-NAME.gguf.inp gives the ids of .out, and the ids decode to
 * text that encodes to the same ids. */
static void check_vectors(const char *name)
{
    char path[1024];
    size_t ilen, olen;
    snprintf(path, sizeof path, "%s/reference/tokenizer/ggml-vocab-%s.gguf.inp", shared(), name);
    char *inp = slurp(path, &ilen);
    snprintf(path, sizeof path, "%s/reference/tokenizer/ggml-vocab-%s.gguf.out", shared(), name);
    char *out = slurp(path, &olen);
    ck_assert_msg(inp && out, "cannot read the %s vectors under %s", name, shared());
    tok_vocab *v = load_ref(name);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *case_start = inp, *line = out;
    int n_cases = 0;
    for (char *m; (m = strstr(case_start, sep)) != NULL; case_start = m + strlen(sep), n_cases++) {
        char *eol = strchr(line, '\n');
        ck_assert_ptr_nonnull(eol);
        *eol = 0;
        int32_t want[512];
        size_t n_want = 0;
        for (char *p = line, *e; n_want < 512; p = e) {
            long x = strtol(p, &e, 10);
            if (e == p)
                break;
            want[n_want++] = (int32_t)x;
        }
        line = eol + 1;
        int32_t *ids;
        size_t n = encode(v, case_start, (size_t)(m - case_start), false, false, &ids);
        ck_assert_msg(n == n_want, "%s case %d: %zu ids, want %zu", name, n_cases, n, n_want);
        for (size_t i = 0; i < n; i++)
            ck_assert_msg(ids[i] == want[i], "%s case %d id %zu: %d, want %d", name, n_cases, i,
                          ids[i], want[i]);
        size_t tlen;
        char err[256];
        char *text = tok_decode(v, ids, n, false, false, &tlen, err, sizeof err);
        ck_assert_msg(text != NULL, "%s", err);
        int32_t *again;
        size_t n2 = encode(v, text, tlen, false, false, &again);
        ck_assert_msg(n2 == n && (n == 0 || memcmp(again, ids, n * sizeof *ids) == 0),
                      "%s case %d: decode/encode round trip differs", name, n_cases);
        free(again);
        free(text);
        free(ids);
    }
    ck_assert_int_eq(n_cases, 46);
    tok_vocab_free(v);
    free(inp);
    free(out);
}

START_TEST(test_vectors_llama_spm) { check_vectors("llama-spm"); }
END_TEST
START_TEST(test_vectors_gpt2) { check_vectors("gpt-2"); }
END_TEST
START_TEST(test_vectors_llama_bpe) { check_vectors("llama-bpe"); }
END_TEST
START_TEST(test_vectors_qwen2) { check_vectors("qwen2"); }
END_TEST

/* Every reference/<model>/<case>/prompt.txt encodes (with BOS/EOS) to its tokens.txt. */
START_TEST(test_model_prompts)
{
    char dir[1024], path[2048];
    snprintf(dir, sizeof dir, "%s/reference", shared());
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    struct dirent *e;
    int checked = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "tokenizer") || !strcmp(e->d_name, "dequant"))
            continue;
        snprintf(path, sizeof path, "%s/models/%s.gguf", shared(), e->d_name);
        struct stat st;
        if (stat(path, &st) != 0)
            continue;
        tok_vocab *v = load_path(path);
        static const char *const cases[] = { "hello", "story", "unicode" };
        for (int c = 0; c < 3; c++) {
            size_t plen, tlen;
            snprintf(path, sizeof path, "%s/%s/%s/prompt.txt", dir, e->d_name, cases[c]);
            char *prompt = slurp(path, &plen);
            snprintf(path, sizeof path, "%s/%s/%s/tokens.txt", dir, e->d_name, cases[c]);
            char *toks = slurp(path, &tlen);
            if (prompt && toks) {
                int32_t *ids;
                size_t n = encode(v, prompt, plen, true, false, &ids);
                char *p = toks, *end;
                for (size_t i = 0; i < n; i++, p = end) {
                    long x = strtol(p, &end, 10);
                    ck_assert_msg(end != p && x == ids[i], "%s/%s: id %zu is %d, want %ld",
                                  e->d_name, cases[c], i, ids[i], x);
                }
                strtol(p, &end, 10);
                ck_assert_msg(end == p, "%s/%s: too few ids (%zu)", e->d_name, cases[c], n);
                free(ids);
                checked++;
            }
            free(prompt);
            free(toks);
        }
        tok_vocab_free(v);
    }
    closedir(d);
    ck_assert_int_ge(checked, 20);
}
END_TEST

static int32_t find(const tok_vocab *v, const char *s)
{
    return tok_find(v, s, strlen(s));
}

START_TEST(test_special_tokens)
{
    tok_vocab *v = load_ref("qwen2");
    const char *s = "<|im_start|>user\nhi<think>x</think><|im_end|>";
    int32_t *ids;
    size_t n = encode(v, s, strlen(s), false, true, &ids);
    ck_assert_int_ge(n, 5);
    ck_assert_int_eq(ids[0], find(v, "<|im_start|>"));
    ck_assert_int_eq(ids[n - 1], find(v, "<|im_end|>"));
    free(ids);
    /* Without parse_special the control text is plain text, but user-defined tokens
     * (<think>) are still split out, as llama.cpp does. */
    n = encode(v, s, strlen(s), false, false, &ids);
    bool saw_control = false, saw_think = false;
    for (size_t i = 0; i < n; i++) {
        saw_control |= ids[i] == find(v, "<|im_start|>") || ids[i] == find(v, "<|im_end|>");
        saw_think |= ids[i] == find(v, "<think>");
    }
    ck_assert(!saw_control);
    ck_assert(saw_think);
    free(ids);
    ck_assert(tok_is_eog(v, find(v, "<|im_end|>")));
    ck_assert(tok_is_eog(v, find(v, "<|endoftext|>")));
    ck_assert(!tok_is_eog(v, find(v, "hello")));
    ck_assert(!tok_add_bos(v));
    tok_vocab_free(v);

    v = load_ref("llama-bpe");
    s = "<|begin_of_text|>Hi";
    n = encode(v, s, strlen(s), true, true, &ids);
    ck_assert_int_eq(n, 3); /* BOS, BOS (parsed), Hi */
    ck_assert_int_eq(ids[0], 128000);
    ck_assert_int_eq(ids[1], 128000);
    free(ids);
    ck_assert_int_eq(tok_eot(v), find(v, "<|eot_id|>"));
    ck_assert(tok_is_eog(v, tok_eot(v)));
    char buf[64];
    ck_assert_int_eq(tok_piece(v, 128000, false, buf, sizeof buf), 0);
    ck_assert_int_eq(tok_piece(v, 128000, true, buf, sizeof buf), 17);
    ck_assert(memcmp(buf, "<|begin_of_text|>", 17) == 0);
    ck_assert_int_eq(tok_piece(v, -1, true, buf, sizeof buf), -1);
    ck_assert_int_eq(tok_piece(v, tok_n_vocab(v), true, buf, sizeof buf), -1);
    tok_vocab_free(v);

    v = load_ref("llama-spm"); /* SPM: a space prefix only at the start and after specials */
    s = "<s>Hello</s>";
    n = encode(v, s, strlen(s), false, true, &ids);
    ck_assert_int_ge(n, 3);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[n - 1], 2);
    ck_assert_int_eq(ids[1], find(v, "\xe2\x96\x81Hello"));
    free(ids);
    tok_vocab_free(v);
}
END_TEST

/* Hostile input: invalid UTF-8, NUL bytes, empty input, lone continuation bytes. */
START_TEST(test_hostile_input)
{
    static const char *const names[] = { "llama-spm", "gpt-2", "llama-bpe", "qwen2" };
    static const char bad[] = "a\xff\xfe\x80" "b\0c\xc3\xe2\x82\xf0\x9f\x99 \xed\xa0\x80 \xf4\x90\x80\x80";
    for (int k = 0; k < 4; k++) {
        tok_vocab *v = load_ref(names[k]);
        int32_t *ids;
        size_t n = encode(v, bad, sizeof bad - 1, true, true, &ids);
        ck_assert_int_gt(n, 5);
        for (size_t i = 0; i < n; i++)
            ck_assert(ids[i] >= 0 && ids[i] < tok_n_vocab(v));
        free(ids);
        n = encode(v, "", 0, false, false, &ids);
        ck_assert_int_eq(n, 0);
        free(ids);
        n = encode(v, "", 0, true, false, &ids);
        ck_assert_int_eq(n, tok_add_bos(v) ? 1 : 0);
        free(ids);
        n = encode(v, "\0\0\0", 3, false, false, &ids);
        ck_assert_int_ge(n, 1);
        free(ids);
        char err[128];
        size_t m;
        ck_assert_int_eq(tok_encode(v, NULL, 5, false, false, &ids, &m, err, sizeof err), -1);
        ck_assert_ptr_nonnull(strstr(err, "NULL"));
        int32_t out_of_range[] = { 5, tok_n_vocab(v) };
        size_t tl;
        ck_assert_ptr_null(tok_decode(v, out_of_range, 2, false, false, &tl, err, sizeof err));
        ck_assert_ptr_nonnull(strstr(err, "out of range"));
        tok_vocab_free(v);
    }
}
END_TEST

/* 10 MB of mixed text through SPM and BPE: ids come back, every byte accounted for. */
START_TEST(test_ten_megabytes)
{
    static const char *const words[] = { "hello ", "world\n", "\xc3\x9cn\xc3\xaf""c\xc3\xb6""d\xc3\xa9 ",
        "\xe6\x97\xa5\xe6\x9c\xac ", "\xf0\x9f\x99\x82", "  ", "\t", "123456 ", "don't ", "<s>",
        "\xff", "x" };
    size_t len = 10u << 20, o = 0;
    char *text = malloc(len);
    uint32_t seed = 12345;
    while (o < len) {
        seed = seed * 1103515245u + 12345u;
        const char *w = words[(seed >> 16) % 12];
        size_t l = strlen(w);
        if (o + l > len)
            l = len - o;
        memcpy(text + o, w, l);
        o += l;
    }
    static const char *const names[] = { "llama-spm", "qwen2" };
    for (int k = 0; k < 2; k++) {
        tok_vocab *v = load_ref(names[k]);
        int32_t *ids;
        size_t n = encode(v, text, len, false, false, &ids);
        ck_assert_int_gt(n, len / 10);
        size_t total = 0;
        char buf[256];
        for (size_t i = 0; i < n; i++)
            total += (size_t)tok_piece(v, ids[i], false, buf, sizeof buf);
        /* SPM adds one leading space; BPE turns each bad byte into U+FFFD (3 bytes). */
        ck_assert_uint_ge(total, len);
        free(ids);
        tok_vocab_free(v);
    }
    free(text);
}
END_TEST

/* Long inputs use a word cache: the ids must equal those of the same text encoded
 * line by line (short calls, no cache; the Llama-3 split never joins a newline to a
 * following letter, so cutting there changes nothing). */
START_TEST(test_bpe_cache_consistent)
{
    static const char *const lines[] = { "The quick brown fox don't jump.\n", "  12345 apples\n",
        "caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\n", "x+=y; // \xf0\x9f\x99\x82\n",
        "Hello, World! HELLO world's\n", "supercalifragilisticexpialidocious words\n" };
    size_t cap = 96 * 1024, len = 0;
    char *text = malloc(cap);
    for (uint32_t seed = 7; len + 64 < cap;) {
        seed = seed * 1103515245u + 12345u;
        const char *l = lines[(seed >> 16) % 6];
        memcpy(text + len, l, strlen(l));
        len += strlen(l);
    }
    static const char *const names[] = { "llama-bpe", "qwen2" };
    for (int k = 0; k < 2; k++) {
        tok_vocab *v = load_ref(names[k]);
        int32_t *all, *part;
        size_t n_all = encode(v, text, len, false, false, &all), o = 0;
        for (size_t a = 0; a < len;) {
            size_t b = a;
            while (b < len && text[b] != '\n')
                b++;
            b++; /* every line starts with a letter, a space or a digit after "\n" */
            size_t n = encode(v, text + a, b - a, false, false, &part);
            ck_assert(o + n <= n_all);
            ck_assert_msg(memcmp(all + o, part, n * sizeof *part) == 0, "%s: line at %zu differs",
                          names[k], a);
            o += n;
            free(part);
            a = b;
        }
        ck_assert_uint_eq(o, n_all);
        free(all);
        tok_vocab_free(v);
    }
    free(text);
}
END_TEST

/* SPM's per-word merging gives the same ids as merging the whole text at once. */
START_TEST(test_spm_walls_equivalent)
{
    tok_vocab *v = load_ref("llama-spm");
    ck_assert(v->spm_walls);
    const char *s = " Hello  world,\tthis is\n\n a test:   of  \xe2\x96\x81 spaces\xe2\x96\x81x "
                    "and \xff bytes  \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e   ";
    int32_t *a, *b;
    size_t na = encode(v, s, strlen(s), true, false, &a);
    v->spm_walls = false;
    size_t nb = encode(v, s, strlen(s), true, false, &b);
    ck_assert_int_eq(na, nb);
    ck_assert(memcmp(a, b, na * sizeof *a) == 0);
    free(a);
    free(b);
    tok_vocab_free(v);
}
END_TEST

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t o = i;
        uint32_t cp = uni_decode(s, n, &o);
        if (cp == 0xFFFD && memcmp(s + i, "\xef\xbf\xbd", n - i < 3 ? n - i : 3) != 0)
            return false;
        i = o;
    }
    return true;
}

/* Ids one at a time: every chunk is complete UTF-8 and the chunks make the text. */
START_TEST(test_stream_utf8)
{
    static const char *const names[] = { "llama-spm", "qwen2" };
    const char *s = "\xc3\x9cn\xc3\xaf""c\xc3\xb6""d\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e "
                    "\xf0\x9f\x99\x82 tabs\tand  spaces\nnew line \xf0\x9f\xa6\x99";
    for (int k = 0; k < 2; k++) {
        tok_vocab *v = load_ref(names[k]);
        int32_t *ids;
        size_t n = encode(v, s, strlen(s), true, false, &ids);
        tok_stream *st = tok_stream_new(v, TOK_STREAM_DEFAULT);
        char got[512];
        size_t o = 0, split = 0;
        for (size_t i = 0; i < n; i++) {
            size_t l;
            const char *p = tok_stream_push(st, ids[i], &l);
            ck_assert(valid_utf8(p, l));
            split += l == 0;
            memcpy(got + o, p, l);
            o += l;
        }
        size_t l;
        tok_stream_flush(st, &l);
        ck_assert_int_eq(l, 0);
        /* After BOS llama.cpp keeps SPM's leading space (only a first-token space goes). */
        size_t lead = k == 0;
        ck_assert_int_eq(o, strlen(s) + lead);
        ck_assert(memcmp(got + lead, s, o - lead) == 0);
        if (k == 0)
            ck_assert_int_gt(split, 0); /* byte tokens really were held back */
        /* A bad id and a dangling lead byte come out as U+FFFD. */
        const char *p = tok_stream_push(st, -7, &l);
        ck_assert(l == 3 && memcmp(p, "\xef\xbf\xbd", 3) == 0);
        int32_t e6 = k == 0 ? find(v, "<0xE6>") : find(v, "\xc3\xa6");
        ck_assert_int_ge(e6, 0);
        tok_stream_push(st, e6, &l);
        ck_assert_int_eq(l, 0);
        p = tok_stream_flush(st, &l);
        ck_assert(l == 3 && memcmp(p, "\xef\xbf\xbd", 3) == 0);
        tok_stream_free(st);
        free(ids);
        tok_vocab_free(v);
    }
}
END_TEST

/* Every reference greedy.txt turns into its greedy_text.txt: pieces with control tokens
 * as text and the first space kept, both whole and through the stream. */
START_TEST(test_greedy_texts)
{
    char dir[1024], path[2048];
    snprintf(dir, sizeof dir, "%s/reference", shared());
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s", dir);
    struct dirent *e;
    int checked = 0;
    while ((e = readdir(d)) != NULL) {
        snprintf(path, sizeof path, "%s/models/%s.gguf", shared(), e->d_name);
        struct stat fst;
        if (e->d_name[0] == '.' || stat(path, &fst) != 0)
            continue;
        tok_vocab *v = load_path(path);
        static const char *const cases[] = { "hello", "story", "unicode" };
        for (int c = 0; c < 3; c++) {
            size_t glen, tlen;
            snprintf(path, sizeof path, "%s/%s/%s/greedy.txt", dir, e->d_name, cases[c]);
            char *g = slurp(path, &glen);
            snprintf(path, sizeof path, "%s/%s/%s/greedy_text.txt", dir, e->d_name, cases[c]);
            char *want = slurp(path, &tlen);
            if (g && want) {
                int32_t ids[64];
                size_t n = 0;
                for (char *p = g, *end; n < 64; p = end, n++) {
                    ids[n] = (int32_t)strtol(p, &end, 10);
                    if (end == p)
                        break;
                }
                size_t len;
                char err[256];
                char *text = tok_decode(v, ids, n, true, true, &len, err, sizeof err);
                ck_assert_msg(text != NULL, "%s", err);
                ck_assert_msg(len == tlen && memcmp(text, want, len) == 0, "%s/%s: '%s' != '%s'",
                              e->d_name, cases[c], text, want);
                tok_stream *st = tok_stream_new(v, TOK_STREAM_RENDER_SPECIAL | TOK_STREAM_KEEP_SPACE);
                char *sbuf = malloc(tlen * 3 + 16);
                size_t o = 0, l;
                for (size_t i = 0; i < n; i++) {
                    const char *p = tok_stream_push(st, ids[i], &l);
                    memcpy(sbuf + o, p, l);
                    o += l;
                }
                const char *p = tok_stream_flush(st, &l);
                memcpy(sbuf + o, p, l);
                o += l;
                if (valid_utf8(want, tlen))
                    ck_assert_msg(o == tlen && memcmp(sbuf, want, o) == 0, "%s/%s: stream differs",
                                  e->d_name, cases[c]);
                free(sbuf);
                tok_stream_free(st);
                free(text);
                checked++;
            }
            free(g);
            free(want);
        }
        tok_vocab_free(v);
    }
    closedir(d);
    ck_assert_int_ge(checked, 20);
}
END_TEST

/* The same vocabulary from a metadata-only blob (as in the engine's segment). */
START_TEST(test_load_from_blob)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/tiny-llama3-Q8_0.gguf", shared());
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kv(w, g, "tokenizer.");
    size_t len;
    void *blob = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
    ck_assert_msg(blob != NULL, "%s", err);
    gguf_writer_free(w);
    gguf_ctx *gb = gguf_parse(blob, len, err, sizeof err);
    ck_assert_msg(gb != NULL, "%s", err);
    tok_vocab *a = tok_vocab_load(g, err, sizeof err), *b = tok_vocab_load(gb, err, sizeof err);
    ck_assert(a && b);
    gguf_close(gb);
    gguf_close(g);
    free(blob);
    const char *s = "Once upon a time, there was a little girl named Lily.";
    int32_t *x, *y;
    size_t nx = encode(a, s, strlen(s), true, false, &x), ny = encode(b, s, strlen(s), true, false, &y);
    ck_assert_int_eq(nx, ny);
    ck_assert(memcmp(x, y, nx * sizeof *x) == 0);
    ck_assert_int_eq(x[0], 128000);
    free(x);
    free(y);
    tok_vocab_free(a);
    tok_vocab_free(b);
}
END_TEST

/* stories260K's vocabulary with general.name set to name (NULL: none). */
static tok_vocab *named_vocab(const char *name)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/stories260K-f32.gguf", shared());
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kv(w, g, "tokenizer.");
    if (name)
        gguf_writer_set_str(w, "general.name", name);
    size_t len;
    void *blob = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
    ck_assert_msg(blob != NULL, "%s", err);
    gguf_writer_free(w);
    gguf_close(g);
    gguf_ctx *gb = gguf_parse(blob, len, err, sizeof err);
    ck_assert_msg(gb != NULL, "%s", err);
    tok_vocab *v = tok_vocab_load(gb, err, sizeof err);
    ck_assert_msg(v != NULL, "%s", err);
    gguf_close(gb);
    free(blob);
    return v;
}

/* Phi-3 (issue 21): llama.cpp drops the whitespace after a parsed special token of a
 * model named Phi-3 (RSTRIP), except after <unk>, <s> and <|endoftext|>. */
START_TEST(test_phi3_rstrip)
{
    tok_vocab *p = named_vocab("Phi-3-mini-4k-instruct"), *n = named_vocab(NULL), *o = named_vocab("phi-2");
    const char *s = "a</s> \n b<s> c", *stripped = "a</s>b<s> c";
    int32_t *x, *y, *z;
    size_t nx = encode(p, s, strlen(s), false, true, &x), ny = encode(n, stripped, strlen(stripped), false, true, &y);
    ck_assert_int_eq(nx, ny);
    ck_assert(memcmp(x, y, nx * sizeof *x) == 0);
    free(y);
    ny = encode(n, s, strlen(s), false, true, &y);
    size_t nz = encode(o, s, strlen(s), false, true, &z);
    ck_assert(ny != nx || memcmp(x, y, nx * sizeof *x) != 0); /* others keep the whitespace */
    ck_assert(nz == ny && memcmp(y, z, ny * sizeof *y) == 0);
    free(x);
    free(y);
    free(z);
    tok_vocab_free(p);
    tok_vocab_free(n);
    tok_vocab_free(o);
}
END_TEST

/* Bad metadata gives NULL and names the key. */
static void expect_load_error(gguf_writer *w, const char *needle)
{
    char err[256] = "";
    size_t len;
    void *blob = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
    ck_assert_msg(blob != NULL, "%s", err);
    gguf_ctx *g = gguf_parse(blob, len, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    tok_vocab *v = tok_vocab_load(g, err, sizeof err);
    ck_assert_ptr_null(v);
    ck_assert_msg(strstr(err, needle) != NULL, "error '%s' does not name '%s'", err, needle);
    gguf_close(g);
    free(blob);
    gguf_writer_free(w);
}

START_TEST(test_bad_metadata)
{
    static const char *const toks[] = { "a", "b", "ab" };
    static const char *const merges[] = { "a b" };
    gguf_writer *w = gguf_writer_new();
    expect_load_error(w, "tokenizer.ggml.model");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "wordpiece");
    expect_load_error(w, "wordpiece");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    expect_load_error(w, "tokenizer.ggml.tokens");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    expect_load_error(w, "no-such-pre");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    expect_load_error(w, "tokenizer.ggml.merges");
    w = gguf_writer_new();
    float scores[2] = { 0, 0 };
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_T_FLOAT32, scores, 2);
    expect_load_error(w, "tokenizer.ggml.scores");

    w = gguf_writer_new();
    int32_t types[2] = { 1, 1 };
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types, 2);
    expect_load_error(w, "tokenizer.ggml.token_type");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true); /* default BOS 11 > n_vocab */
    expect_load_error(w, "add_bos");
    w = gguf_writer_new();
    int64_t one = 1;
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_T_INT64, &one, 1);
    expect_load_error(w, "tokenizer.ggml.tokens");

    /* Odd but harmless metadata loads: merges without a space, empty and single
     * tokens, a special id out of range (ignored), token types out of range. */
    {
        static const char *const odd_toks[] = { "a", "", "ab", "<s>" };
        static const char *const odd_merges[] = { "ab", " ", "", "a b", "a b" };
        int32_t odd_types[4] = { 1, 99, -5, 3 };
        w = gguf_writer_new();
        gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", odd_toks, 4);
        gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, odd_types, 4);
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", odd_merges, 5);
        gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 4000000000u);
        char e2[256];
        size_t l2;
        void *b2 = gguf_writer_write_mem(w, NULL, NULL, &l2, e2, sizeof e2);
        gguf_writer_free(w);
        gguf_ctx *g2 = gguf_parse(b2, l2, e2, sizeof e2);
        ck_assert_msg(g2 != NULL, "%s", e2);
        tok_vocab *v2 = tok_vocab_load(g2, e2, sizeof e2);
        ck_assert_msg(v2 != NULL, "%s", e2);
        ck_assert_int_eq(tok_find(v2, "[EMPTY_1]", 9), 1);
        int32_t *x;
        size_t nx = encode(v2, "aab<s>", 6, true, true, &x);
        ck_assert_int_eq(nx, 3); /* a, ab, <s> (control, parsed) */
        ck_assert_int_eq(x[0], 0);
        ck_assert_int_eq(x[1], 2);
        ck_assert_int_eq(x[2], 3);
        free(x);
        tok_vocab_free(v2);
        gguf_close(g2);
        free(b2);
    }

    /* A missing pre-tokenizer means "default", and a tiny BPE vocabulary works. */
    char err[256];
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    size_t len;
    void *blob = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
    gguf_writer_free(w);
    gguf_ctx *g = gguf_parse(blob, len, err, sizeof err);
    tok_vocab *v = tok_vocab_load(g, err, sizeof err);
    ck_assert_msg(v != NULL, "%s", err);
    ck_assert_str_eq(tok_pre_name(v), "default");
    int32_t *ids;
    size_t n = encode(v, "abba", 4, false, false, &ids);
    ck_assert_int_eq(n, 3); /* ab b a */
    ck_assert_int_eq(ids[0], 2);
    ck_assert_int_eq(ids[1], 1);
    ck_assert_int_eq(ids[2], 0);
    free(ids);
    tok_vocab_free(v);
    gguf_close(g);
    free(blob);
}
END_TEST

/* A token's piece as the test expects it: SPM '▁' -> ' ' and <0xXX> -> the byte,
 * GPT-2 alphabet (printable ASCII stays, U+0120 'Ġ' -> ' ', anything else copied). */
static size_t expected_piece(bool spm, const char *t, size_t l, int type, char *out)
{
    if (type == TOK_TYPE_CONTROL || type == TOK_TYPE_USER_DEFINED || type == TOK_TYPE_UNKNOWN) {
        memcpy(out, t, l);
        return l;
    }
    if (type == TOK_TYPE_BYTE && spm) {
        unsigned b;
        return l == 6 && sscanf(t, "<0x%2X>", &b) == 1 ? (out[0] = (char)b, 1) : 0;
    }
    if (type != TOK_TYPE_NORMAL)
        return 0;
    size_t o = 0;
    const char *sp = spm ? "\xe2\x96\x81" : "\xc4\xa0";
    size_t spl = spm ? 3 : 2;
    for (size_t i = 0; i < l;) {
        if (i + spl <= l && memcmp(t + i, sp, spl) == 0) {
            out[o++] = ' ';
            i += spl;
        } else {
            out[o++] = t[i++];
        }
    }
    return o;
}

/* Many tokens over few distinct texts (issue 10: the piece buffer was sized from the
 * de-duplicated texts, and a file with repeated texts overflowed it), long and odd
 * texts, every token type: loads, and every piece is right. */
static void check_duplicate_texts(bool spm)
{
    enum { N = 4096, LONG = 60000 };
    static const char *const odd[] = { "<0x41>", "<0x41>", "<s>", "</s>", "\xff\xfe", "",
        "\xf0\x9f\x98\x80", "\xe2\x96\x81", "<0xZZ>", "a", "\xc4\xa0\xc4\xa0x" };
    static const int odd_type[] = { TOK_TYPE_BYTE, TOK_TYPE_BYTE, TOK_TYPE_CONTROL,
        TOK_TYPE_CONTROL, TOK_TYPE_NORMAL, TOK_TYPE_NORMAL, TOK_TYPE_NORMAL, TOK_TYPE_NORMAL,
        TOK_TYPE_BYTE, TOK_TYPE_UNUSED, TOK_TYPE_USER_DEFINED };
    enum { N_ODD = sizeof odd / sizeof *odd };
    char *mid = malloc(1001), *lng = malloc(LONG + 1);
    for (int i = 0; i < 1000; i++) /* "▁ab▁ab..." (SPM) or "Ġab..." (BPE) */
        mid[i] = spm ? "\xe2\x96\x81" "ab"[i % 5] : "\xc4\xa0" "abc"[i % 5];
    mid[1000] = 0;
    for (int i = 0; i < LONG; i++)
        lng[i] = (char)('a' + i % 26);
    lng[LONG] = 0;
    const char **toks = malloc(N * sizeof *toks);
    int32_t *types = malloc(N * sizeof *types);
    for (int i = 0; i < N; i++) {
        toks[i] = i < N_ODD ? odd[i] : i % 500 == 0 ? lng : mid;
        types[i] = i < N_ODD ? odd_type[i] : i % 3 == 0 ? TOK_TYPE_CONTROL : TOK_TYPE_NORMAL;
    }
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
    if (!spm) {
        static const char *const merges[] = { "a b" };
        gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
        gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    }
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, N);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_INT32, types, N);
    char err[256];
    size_t len;
    void *blob = gguf_writer_write_mem(w, NULL, NULL, &len, err, sizeof err);
    ck_assert_msg(blob != NULL, "%s", err);
    gguf_writer_free(w);
    gguf_ctx *g = gguf_parse(blob, len, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    tok_vocab *v = tok_vocab_load(g, err, sizeof err);
    ck_assert_msg(v != NULL, "%s", err);
    char *got = malloc(LONG + 64), *want = malloc(LONG + 64);
    size_t total = 0;
    for (int32_t id = 0; id < N; id++) {
        size_t tl;
        const char *t = tok_text(v, id, &tl);
        int ty = tok_token_type_of(v, id);
        size_t wl = expected_piece(spm, t, tl, ty, want);
        int gl = tok_piece(v, id, true, got, LONG + 64);
        ck_assert_msg(gl >= 0 && (size_t)gl == wl && memcmp(got, want, wl) == 0,
                      "%s: piece of token %d (type %d, %zu bytes of text) is wrong: %d bytes, want %zu",
                      spm ? "spm" : "bpe", id, ty, tl, gl, wl);
        total += wl;
    }
    ck_assert_uint_gt(total, (size_t)N * 600); /* far more than the distinct texts */
    int32_t *all = malloc(N * sizeof *all);
    for (int32_t i = 0; i < N; i++)
        all[i] = i;
    char *text = tok_decode(v, all, N, true, true, &len, err, sizeof err);
    ck_assert_msg(text != NULL, "%s", err);
    ck_assert_uint_eq(len, total);
    int32_t *ids;
    size_t n = encode(v, text, len, true, true, &ids); /* and it tokenizes */
    ck_assert_uint_gt(n, 0);
    free(ids);
    free(text);
    free(all);
    free(got);
    free(want);
    tok_vocab_free(v);
    gguf_close(g);
    free(blob);
    free(toks);
    free(types);
    free(mid);
    free(lng);
}

START_TEST(test_duplicate_texts_spm) { check_duplicate_texts(true); }
END_TEST
START_TEST(test_duplicate_texts_bpe) { check_duplicate_texts(false); }
END_TEST

/* The pieces tok_pre_split makes of s, joined with '|'. */
static void expect_split(tok_pre pre, const char *s, const char *want)
{
    size_t len = strlen(s), n = 0, nw;
    uint32_t cps[256], *lens;
    for (size_t off = 0; off < len && n < 256;)
        cps[n++] = uni_decode(s, len, &off);
    ck_assert(tok_pre_split(pre, cps, n, &lens, &nw));
    char got[1024];
    size_t o = 0, c = 0;
    for (size_t w = 0; w < nw; w++) {
        if (w)
            got[o++] = '|';
        for (uint32_t k = 0; k < lens[w]; k++)
            o += (size_t)uni_encode(cps[c++], got + o);
    }
    got[o] = 0;
    free(lens);
    ck_assert_uint_eq(c, n);
    ck_assert_msg(strcmp(got, want) == 0, "pre %d: '%s' -> '%s', want '%s'", (int)pre, s, got, want);
}

/* Each pre-tokenizer family on inputs whose splits follow from its regexes. */
START_TEST(test_pre_tokenizers)
{
    const char *s = "Hello world's  test 12345abc!!  \n x";
    expect_split(TOK_PRE_GPT2, s, "Hello| world|'s| | test| 12345|abc|!!|  \n| x");
    expect_split(TOK_PRE_LLAMA3, s, "Hello| world|'s| | test| |123|45|abc|!!|  \n| x");
    expect_split(TOK_PRE_QWEN2, s, "Hello| world|'s| | test| |1|2|3|4|5|abc|!!|  \n| x");
    expect_split(TOK_PRE_LLAMA3, "DON'T", "DON|'T");
    expect_split(TOK_PRE_GPT2, "DON'T", "DON|'|T");
    expect_split(TOK_PRE_DEFAULT, "a+b=c, 1234 d", "a|+|b|=|c|,| |123|4| d");
    expect_split(TOK_PRE_FALCON, "a+b=c, 12345 d", "a|+|b|=|c|,| |123|45| d");
    expect_split(TOK_PRE_STARCODER, "ab 12 c", "ab| |1|2| c");
    expect_split(TOK_PRE_DEEPSEEK_CODER, "Hi, you\n12\xe6\x97\xa5\xe6\x9c\xac",
                 "Hi|,| you|\n|1|2|\xe6\x97\xa5\xe6\x9c\xac");
    expect_split(TOK_PRE_DEEPSEEK_LLM, "Hi, you 12\xe6\x97\xa5\xe6\x9c\xac  ",
                 "Hi|,| you| |12|\xe6\x97\xa5\xe6\x9c\xac|  ");
    /* Non-ASCII whitespace is whitespace, marks are not letters. */
    expect_split(TOK_PRE_LLAMA3, "a\xc2\xa0\xc2\xa0" "b e\xcc\x81", "a|\xc2\xa0|\xc2\xa0" "b| e|\xcc\x81");
}
END_TEST

START_TEST(test_unicode_classes)
{
    ck_assert(uni_flags('A') & UNI_LETTER);
    ck_assert(uni_flags('5') & UNI_NUMBER);
    ck_assert(uni_flags('!') & UNI_PUNCT);
    ck_assert(uni_flags('$') & UNI_SYMBOL);
    ck_assert(uni_flags(' ') & UNI_SPACE);
    ck_assert(uni_flags(0xA0) & UNI_SPACE);    /* no-break space */
    ck_assert(uni_flags(0x3000) & UNI_SPACE);  /* ideographic space */
    ck_assert(!(uni_flags(0x1C) & UNI_SPACE)); /* not White_Space, unlike str.isspace */
    ck_assert(uni_flags(0x65E5) & UNI_LETTER); /* 日 */
    ck_assert(uni_flags(0x0661) & UNI_NUMBER); /* Arabic-Indic one */
    ck_assert(uni_flags(0x0301) & UNI_MARK);   /* combining acute */
    ck_assert(uni_flags(0x1F642) & UNI_SYMBOL);
    ck_assert(uni_flags(0x10400) & UNI_LETTER);
    ck_assert(uni_flags(0x110000) & UNI_OTHER);
    for (int b = 0; b < 256; b++)
        ck_assert_int_eq(uni_cp_to_byte(uni_byte_to_cp((uint8_t)b)), b);
    ck_assert_int_eq(uni_byte_to_cp(' '), 0x120);
    size_t off = 0;
    ck_assert_uint_eq(uni_decode("\xe2\x82", 2, &off), 0xFFFD);
    ck_assert_uint_eq(off, 1);
}
END_TEST

/* The command line, when the binaries are at hand. */
START_TEST(test_cli)
{
    const char *bin = getenv("LLM_BIN");
    if (!bin)
        return;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "printf 'Hello' | %s/tokenizerd --model %s/models/stories260K-f32.gguf "
             "--tokenize --add-special 2>/dev/null", bin, shared());
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[256] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_str_eq(line, "1 346 306 414\n");
    snprintf(cmd, sizeof cmd, "echo '1 346 306 414' | %s/tokenizerd --model "
             "%s/models/stories260K-f32.gguf --detokenize 2>/dev/null", bin, shared());
    p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    memset(line, 0, sizeof line);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, p));
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_str_eq(line, " Hello"); /* as llama_detokenize: the space after BOS stays */
    snprintf(cmd, sizeof cmd, "echo '1 99999' | %s/tokenizerd --model %s/models/stories260K-f32.gguf "
             "--detokenize 2>/dev/null", bin, shared());
    p = popen(cmd, "r");
    ck_assert_int_ne(pclose(p), 0);
}
END_TEST

Suite *tok_suite(void)
{
    Suite *s = suite_create("tok");
    TCase *tc = tcase_create("vectors");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_vectors_llama_spm);
    tcase_add_test(tc, test_vectors_gpt2);
    tcase_add_test(tc, test_vectors_llama_bpe);
    tcase_add_test(tc, test_vectors_qwen2);
    tcase_add_test(tc, test_model_prompts);
    tcase_add_test(tc, test_greedy_texts);
    tcase_add_test(tc, test_load_from_blob);
    tcase_add_test(tc, test_phi3_rstrip);
    suite_add_tcase(s, tc);
    tc = tcase_create("behaviour");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_special_tokens);
    tcase_add_test(tc, test_hostile_input);
    tcase_add_test(tc, test_ten_megabytes);
    tcase_add_test(tc, test_spm_walls_equivalent);
    tcase_add_test(tc, test_bpe_cache_consistent);
    tcase_add_test(tc, test_stream_utf8);
    tcase_add_test(tc, test_bad_metadata);
    tcase_add_test(tc, test_duplicate_texts_spm);
    tcase_add_test(tc, test_duplicate_texts_bpe);
    tcase_add_test(tc, test_unicode_classes);
    tcase_add_test(tc, test_pre_tokenizers);
    tcase_add_test(tc, test_cli);
    suite_add_tcase(s, tc);
    return s;
}
