/*
 * test_model.h - opening a model of ../shared/models for a suite, and closing it so that
 * a segment the suite built is removed again (shared by the engine suites).
 *
 *   bool built;
 *   eng_model *m = test_model_open("stories260K-f32.gguf", ENG_FLOAT, &built);
 *   ...
 *   test_model_close(m, built);
 *   int32_t *ids = test_read_ids("dir/tokens.txt", &n);     // a reference case's tokens
 */
#ifndef LLM_TEST_MODEL_H
#define LLM_TEST_MODEL_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "segment.h"

/* $LLM_SHARED, else ../shared (the tests run in the repository root). */
static inline const char *test_shared(void)
{
    const char *s = getenv("LLM_SHARED");
    return s ? s : "../shared";
}

/* Opens ../shared/models/FILE at prec (the test fails if it cannot); *built: this call
 * converted it into a new segment. */
static inline eng_model *test_model_open(const char *file, eng_precision prec, bool *built)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/models/%s", test_shared(), file);
    eng_open_info info;
    eng_model *m = eng_open(path, prec, &info, err, sizeof err);
    if (!m) ck_abort_msg("eng_open %s: %s", path, err);
    *built = info.converted;
    return m;
}

/* Closes m and removes its segment if test_model_open built it. */
static inline void test_model_close(eng_model *m, bool built)
{
    char name[SEG_NAME_MAX], err[256];
    snprintf(name, sizeof name, "%s", eng_segment_name(m));
    eng_close(m);
    if (built) seg_remove(name, err, sizeof err);
}

/* Reads a whole file (NUL-terminated; *len its size); NULL when absent. */
static inline void *test_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_int_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* Token ids of a text file, one per line (*n of them); NULL when absent. */
static inline int32_t *test_read_ids(const char *path, int *n)
{
    size_t len;
    char *txt = test_slurp(path, &len);
    *n = 0;
    if (!txt) return NULL;
    int32_t *ids = malloc((len / 2 + 1) * sizeof *ids);
    int k = 0;
    for (char *p = strtok(txt, "\n"); p; p = strtok(NULL, "\n")) ids[k++] = (int32_t)atoi(p);
    free(txt);
    *n = k;
    return ids;
}

#endif
