/*
 * fuzz_jsonschema.c - libFuzzer harness: the JSON Schema converter. The input is a
 * schema, then (after the first NUL) bytes to feed. jsg_to_gbnf either fails with a
 * message or gives GBNF; that GBNF is compiled (a refusal there is allowed: recursion
 * without a base case is left recursion) and the bytes are fed to its matcher. Built
 * and run by `make fuzz`; seeds: schemas using every supported keyword (fuzz_seeds
 * jsonschema).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gram.h"
#include "json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    char err[256];
    err[0] = 0;
    char *gbnf = jsg_to_gbnf((const char *)data, slen, err, sizeof err);
    if (!gbnf) {
        if (!err[0])
            abort(); /* a refusal always says why */
        return 0;
    }
    gram *g = gram_compile(gbnf, strlen(gbnf), err, sizeof err);
    free(gbnf);
    if (!g)
        return 0;
    gram_state *s = gram_state_new(g);
    if (s && nul) {
        const uint8_t *feed = nul + 1;
        size_t flen = size - slen - 1;
        for (size_t at = 0; at < flen; at += 3)
            gram_accept_bytes(s, feed + at, flen - at < 3 ? flen - at : 3);
        gram_can_end(s);
    }
    gram_state_free(s);
    gram_free(g);
    return 0;
}
