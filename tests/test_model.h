/*
 * test_model.h - opening a model of ../shared/models for a suite, and closing it so that
 * a segment the suite built is removed again (shared by the engine suites).
 *
 *   bool built;
 *   eng_model *m = test_model_open("stories260K-f32.gguf", ENG_FLOAT, &built);
 *   ...
 *   test_model_close(m, built);
 */
#ifndef LLM_TEST_MODEL_H
#define LLM_TEST_MODEL_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

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

#endif
