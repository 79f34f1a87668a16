/*
 * f16.h - IEEE half and bfloat16 conversions, bit-exact with ggml's scalar code.
 *
 *   float x = f16_to_f32(h);          // exact
 *   uint16_t h = f32_to_f16(x);       // round to nearest even, overflow -> inf
 *
 * Plain C so that every translation unit can inline them; SIMD code converts with
 * F16C where it has it, which gives the same results.
 */
#ifndef LLM_F16_H
#define LLM_F16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t f16_bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float f16_float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Half -> float: exact for every input, NaN payloads kept. */
static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return f16_float_of(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return f16_float_of(sign | ((exp + 112) << 23) | (man << 13));
}

/* Float -> half, round to nearest even (what F16C's _cvtss_sh(x, 0) does). */
static inline uint16_t f32_to_f16(float f)
{
    uint32_t x = f16_bits_of(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff)); /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65536: inf */
    if (ax < 0x38800000u) {
        /* result is subnormal or zero: scale so that the integer part is the mantissa */
        if (ax < 0x33000000u) return (uint16_t)sign; /* below half the smallest subnormal */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = ax - 0x38000000u; /* rebias exponent: 127 -> 15 */
    uint32_t q = r >> 13;
    uint32_t rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

/* bfloat16 -> float: the high half of the float. */
static inline float bf16_to_f32(uint16_t h) { return f16_float_of((uint32_t)h << 16); }

/* float -> bfloat16, round to nearest even, NaN kept quiet (as ggml does). */
static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = f16_bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

#endif
