/*
 * fuzz_grammar.c - libFuzzer harness: the GBNF compiler and the matcher. The input is
 * a grammar text, then (after the first NUL) bytes to feed. A grammar that compiles is
 * driven: the bytes in chunks of 1..4 through gram_accept_bytes; after each chunk the
 * state must survive gram_state_to_bytes -> gram_state_from_bytes unchanged, and the
 * masker's mask over a small fixed vocabulary (ASCII, punctuation, JSON pieces, UTF-8
 * fragments) must equal the token-by-token answer of gram_accept_token. The bytes are
 * also given to gram_state_from_bytes as an untrusted wire form. Built and run by
 * `make fuzz`; seeds: a few grammars in llama.cpp's style (fuzz_seeds grammar).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const TOKS[] = {"a", "b", "ab", "abc", "x", "0", "1", "12", "-", ".", " ", "\n", "\t", "\"", "\\",
                                   "{", "}", "[", "]", ",", ":", "\":", "\",", "\"}", "true", "null", "{\"", "\xc3",
                                   "\xa9", "\xc3\xa9", "\xe6\x97", "\xa5", "\xf0\x9f\x99\x82", "\xff", "", "(", ")"};
#define N_TOKS ((int32_t)(sizeof TOKS / sizeof *TOKS))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static gram_vocab *v;
    if (!v) {
        gram_token t[N_TOKS];
        for (int32_t i = 0; i < N_TOKS; i++)
            t[i] = (gram_token){TOKS[i], (uint32_t)strlen(TOKS[i]), i == N_TOKS - 3};
        char e[128];
        v = gram_vocab_new(t, N_TOKS, e, sizeof e);
        if (!v)
            abort();
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *feed = nul ? nul + 1 : data + size;
    size_t flen = size - glen - (nul ? 1 : 0);
    char err[256];
    gram *g = gram_compile((const char *)data, glen, err, sizeof err);
    if (!g)
        return 0;
    gram_state *w = gram_state_from_bytes(g, feed, flen, err, sizeof err);
    if (w) {
        gram_accept_bytes(w, "a", 1);
        gram_state_free(w);
    }
    gram_state *s = gram_state_new(g);
    gram_masker *m = gram_masker_new(g, v);
    if (!s || !m)
        goto out;
    uint64_t mask[1], one[1];
    uint8_t buf[8192], buf2[8192];
    for (size_t at = 0, step = 0; at < flen && step < 64; step++) {
        size_t n = 1 + (feed[at] & 3);
        if (n > flen - at)
            n = flen - at;
        gram_accept_bytes(s, feed + at, n); /* refused or not, s stays a valid state */
        at += n;
        size_t len = gram_state_to_bytes(s, buf, sizeof buf);
        if (len <= sizeof buf) {
            gram_state *r = gram_state_from_bytes(g, buf, len, err, sizeof err);
            if (!r || gram_state_to_bytes(r, buf2, sizeof buf2) != len || memcmp(buf, buf2, len) != 0)
                abort(); /* a state must survive its own wire form */
            gram_state_free(r);
        }
        gram_mask(m, s, mask);
        one[0] = 0;
        for (int32_t i = 0; i < N_TOKS; i++) {
            gram_state *c = gram_state_clone(s);
            if (c && gram_accept_token(v, c, i) == 0)
                one[0] |= 1ull << i;
            gram_state_free(c);
        }
        if (one[0] != mask[0])
            abort(); /* the masker must say what the matcher does */
    }
out:
    gram_masker_free(m);
    gram_state_free(s);
    gram_free(g);
    return 0;
}
