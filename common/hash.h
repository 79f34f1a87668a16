/*
 * hash.h - FNV-1a, 64 bits: the one non-cryptographic hash of the project (segment
 * names, grammar texts, name tables). Not for anything an attacker may choose to collide
 * with where a collision costs more than a cache miss: users compare the bytes too.
 *
 *   uint64_t h = hash_fnv1a(HASH_FNV_SEED, text, len);
 *   h = hash_fnv1a(h, &size, sizeof size);          // chained over several fields
 */
#ifndef LLM_HASH_H
#define LLM_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV_SEED 0xcbf29ce484222325ull /* FNV-1a's 64-bit offset basis */

/* h advanced over the n bytes at p. */
static inline uint64_t hash_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

#endif
