/*
 * kvsetup.h - the daemon's KV block pool (kvpool.h) next to its weight segment: the
 * --kv-pool SIZE option, the pool the master creates (or reuses) and the one each worker
 * attaches. The forward pass does not read the pool yet (issue 19): it is created,
 * attached, owner-checked and reaped, so a hostile pool is refused at start.
 *
 *   kvs_spec spec;
 *   if (kvs_parse("2G", &spec, err, sizeof err) != 0) ...      // "0"/"off": no pool
 *   kvp *pool = kvs_open(m, &spec, 1, err, sizeof err);        // master: create or reuse
 *   kvp *pool = kvs_open(m, &spec, 0, err, sizeof err);        // worker: attach
 *
 * SIZE: bytes with a K, M or G suffix (binary: 2G = 2 GiB, the whole pool with its
 * metadata), or a bare number of tokens (rounded up to whole blocks). Blocks hold
 * KVS_BLOCK_TOKENS positions, a multiple of the attention kernel's 16-position key tiles.
 * The element type follows --kv (f16, f32 or q8_0).
 */
#ifndef LLM_KVSETUP_H
#define LLM_KVSETUP_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "kvpool.h"

#define KVS_BLOCK_TOKENS 16

/* What --kv-pool asked for: neither bytes nor tokens means no pool. */
typedef struct {
    uint64_t bytes;
    uint64_t tokens;
    eng_kv_type kv;    /* the element type */
} kvs_spec;

/* Parses SIZE into s (bytes, tokens; kv untouched): 0, or -1 with err. */
int kvs_parse(const char *size, kvs_spec *s, char *err, size_t errlen);
/* 1 when s asks for a pool. */
int kvs_enabled(const kvs_spec *s);
/* The identity of the pool of model m with element type kv. */
void kvs_ident(const eng_model *m, eng_kv_type kv, kvp_ident *id);
/* master 1: creates the pool of m's segment, or reuses an existing one of the same
 * identity (its blocks stay cached); one of another identity and ours is replaced.
 * master 0: attaches the master's pool, waiting up to 5 s while it is being created.
 * NULL with err (another uid's or open to others, truncated, corrupt, other model, a
 * type the model cannot hold: eng_kv_check). */
kvp *kvs_open(const eng_model *m, const kvs_spec *s, int master, char *err, size_t errlen);

#endif
