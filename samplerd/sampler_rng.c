/*
 * sampler_rng.c - the counter-based random numbers behind every draw: a pure hash of
 * (seed, session, step, draw), so no generator state exists anywhere to be lost.
 * Owner: sampler (issue 5). See sampler.h.
 */
#include "sampler.h"

/* splitmix64's finaliser: a bijection on 64 bits with full avalanche. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Each key word goes through its own mixing round, so (seed, session, step, draw)
 * tuples that differ in any word give unrelated outputs. */
uint64_t smp_rng_u64(uint32_t seed, uint64_t session, uint32_t step, uint32_t draw)
{
    uint64_t h = mix64(0x5A3D1E0F00000000ull ^ seed);
    h = mix64(h ^ session);
    h = mix64(h ^ (((uint64_t)draw << 32) | step));
    return h;
}

/* The top 53 bits as a double in [0, 1). */
double smp_rng_uniform(uint32_t seed, uint64_t session, uint32_t step, uint32_t draw)
{
    return (double)(smp_rng_u64(seed, session, step, draw) >> 11) * 0x1.0p-53;
}
