/*
 * main.c - tokenizerd's entry point. The command-line tools live here:
 *
 *   tokenizerd --model FILE --tokenize [--add-special] [--parse-special] < text
 *       prints the ids of all of stdin on one line, space separated
 *   tokenizerd --model FILE --detokenize [--special] [--keep-space] < ids
 *       prints the text of whitespace-separated ids (--special renders control tokens)
 *
 * Every other invocation (the daemon: --run-dir ..., --help) goes to tokd_serve
 * (frontd.c, owner: pipeline). Owner: tok.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "log.h"
#include "tok.h"
#include "tokd.h"

/* All of f into a malloc'd buffer (NUL-terminated for convenience). */
static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) {
            if (ferror(f)) {
                free(buf);
                return NULL;
            }
            break;
        }
        char *p = realloc(buf, cap * 2 + 1);
        if (!p)
            free(buf);
        buf = p;
        cap *= 2;
    }
    if (buf) {
        buf[n] = 0;
        *len = n;
    }
    return buf;
}

static int do_tokenize(const tok_vocab *v, bool add_special, bool parse_special)
{
    size_t len;
    char *text = read_all(stdin, &len);
    if (!text) {
        fprintf(stderr, "error: cannot read stdin: %s\n", strerror(errno));
        return 1;
    }
    int32_t *ids;
    size_t n;
    char err[256];
    int rc = tok_encode(v, text, len, add_special, parse_special, &ids, &n, err, sizeof err);
    free(text);
    if (rc) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
    return fflush(stdout) ? 1 : 0;
}

static int do_detokenize(const tok_vocab *v, bool render_special, bool keep_space)
{
    size_t len, n = 0, cap = 256;
    char *text = read_all(stdin, &len);
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!text || !ids) {
        fprintf(stderr, "error: cannot read stdin\n");
        free(text);
        free(ids);
        return 1;
    }
    char *p = text, err[256];
    int rc = 1;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x >= tok_n_vocab(v) ||
            (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) {
            fprintf(stderr, "error: input id %zu ('%.20s') is not an id below n_vocab %d\n",
                    n, p, tok_n_vocab(v));
            goto out;
        }
        if (n == cap) {
            int32_t *q = realloc(ids, cap * 2 * sizeof *ids);
            if (!q)
                goto out;
            ids = q;
            cap *= 2;
        }
        ids[n++] = (int32_t)x;
        p = end;
    }
    size_t olen;
    char *s = tok_decode(v, ids, n, render_special, keep_space, &olen, err, sizeof err);
    if (!s) {
        fprintf(stderr, "error: %s\n", err);
        goto out;
    }
    fwrite(s, 1, olen, stdout);
    free(s);
    rc = fflush(stdout) ? 1 : 0;
out:
    free(text);
    free(ids);
    return rc;
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    bool tokenize = false, detokenize = false, add_special = false, parse_special = false;
    bool render_special = false, keep_space = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenize")) tokenize = true;
        else if (!strcmp(argv[i], "--detokenize")) detokenize = true;
        else if (!strcmp(argv[i], "--add-special")) add_special = true;
        else if (!strcmp(argv[i], "--parse-special")) parse_special = true;
        else if (!strcmp(argv[i], "--special")) render_special = true;
        else if (!strcmp(argv[i], "--keep-space")) keep_space = true;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    }
    if (!tokenize && !detokenize) {
        if (tokd_serve)
            return tokd_serve(argc, argv);
        fprintf(stderr, "error: daemon mode not built\n");
        return 1;
    }
    log_init("tokenizerd", LOG_WARN);
    if (!model || (tokenize && detokenize)) {
        fprintf(stderr, "usage: tokenizerd --model FILE --tokenize [--add-special] "
                "[--parse-special]\n       tokenizerd --model FILE --detokenize [--special] "
                "[--keep-space]\n");
        return 2;
    }
    char err[512];
    gguf_ctx *g = gguf_open(model, err, sizeof err);
    if (!g) {
        fprintf(stderr, "error: %s: %s\n", model, err);
        return 1;
    }
    tok_vocab *v = tok_vocab_load(g, err, sizeof err);
    gguf_close(g);
    if (!v) {
        fprintf(stderr, "error: %s: %s\n", model, err);
        return 1;
    }
    int rc = tokenize ? do_tokenize(v, add_special, parse_special)
                      : do_detokenize(v, render_special, keep_space);
    tok_vocab_free(v);
    return rc;
}
