/*
 * test_sampler.h - what the sampler suites share (check_sampler.c, check_sampler_ops.c):
 * a deterministic normal row, candidates from logits, and DRY's small vocabulary.
 */
#ifndef LLM_TEST_SAMPLER_H
#define LLM_TEST_SAMPLER_H

#include <math.h>

#include "sampler.h"

/* A deterministic pseudo-random float row, normal(0, sd) via Box-Muller. */
static inline void fill_normal(float *x, int n, uint32_t seed, float sd)
{
    for (int i = 0; i < n; i++) {
        double u1 = smp_rng_uniform(seed, 99, (uint32_t)i, 0) + 1e-12;
        double u2 = smp_rng_uniform(seed, 99, (uint32_t)i, 1);
        x[i] = (float)(sd * sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

static inline smp_cands cands_of(smp_tok *buf, const float *logits, int n)
{
    for (int i = 0; i < n; i++)
        buf[i] = (smp_tok){ i, logits[i], 0 };
    return (smp_cands){ buf, n, 0 };
}

static inline int has_id(const smp_cands *c, int id)
{
    for (int i = 0; i < c->n; i++)
        if (c->data[i].id == id)
            return 1;
    return 0;
}

/* vocabulary for DRY: ids 0..6 */
static const char *const DRY_TEXT[7] = { "a", "b", "c", "d", "\n", "x", "y" };
static smp_piece_table DRY_VOCAB = { DRY_TEXT, 7 };

#endif
