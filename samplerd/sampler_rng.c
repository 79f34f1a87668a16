/*
 * sampler_rng.c - the counter-based random numbers behind every draw: a pure hash of
 * (seed, session, step, draw), so no generator state exists anywhere to be lost.
 * Owner: sampler (issue 5). See sampler.h.
 */
#include "sampler.h"

/* Each key word goes through its own mixing round, so (seed, session, step, draw)
 * tuples that differ in any word give unrelated outputs. */
uint64_t smp_rng_u64(uint32_t seed, uint64_t session, uint32_t step, uint32_t draw)
{
    uint64_t h = smp_mix64(0x5A3D1E0F00000000ull ^ seed);
    h = smp_mix64(h ^ session);
    h = smp_mix64(h ^ (((uint64_t)draw << 32) | step));
    return h;
}

/* The top 53 bits as a double in [0, 1). */
double smp_rng_uniform(uint32_t seed, uint64_t session, uint32_t step, uint32_t draw)
{
    return (double)(smp_rng_u64(seed, session, step, draw) >> 11) * 0x1.0p-53;
}
