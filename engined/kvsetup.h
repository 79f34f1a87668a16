/*
 * kvsetup.h - the daemon's KV block pools (kvpool.h) next to its weight segment: the
 * --kv-pool SIZE option, the pools the master creates (or reuses) and the ones each
 * worker attaches.
 *
 *   kvs_spec spec = { .kv = ENG_KV_F16, .n_ctx = 4096, .step = 512 };
 *   if (kvs_parse("2G", &spec, err, sizeof err) != 0) ...      // "0"/"off": no pool
 *   kvp *pools[ENG_KV_KINDS];
 *   kvs_open(m, &spec, 1, pools, err, sizeof err);             // master: create or reuse
 *   kvs_open(m, &spec, 0, pools, err, sizeof err);             // worker: attach
 *   eng_set_kv_pools(m, pools[ENG_KV_WHOLE], pools[ENG_KV_RING]);
 *   ... kvs_close(pools);
 *
 * Two pools, one per kind of layer (engine.h): "/llm-kv-<euid>-<id>" for the layers that
 * keep every position, and, for a model with sliding-window layers, "...-ring" for
 * those, whose sessions hold only about a window of blocks. A kind without layers has
 * no pool. SIZE: bytes with a K, M or G suffix (binary: 2G = 2 GiB, both pools with
 * their metadata), or a bare number of tokens (rounded up to whole blocks of the whole
 * pool). The ring pool gets the share that lets sessions of n_ctx positions use both
 * pools up together: per such session, one ring block for every n_ctx / 16 whole blocks
 * times its most ring blocks at once (kvs_peak with spec's step). Blocks hold
 * KVS_BLOCK_TOKENS positions, a multiple of the attention kernel's 16-position key
 * tiles. The element type follows --kv (f16, f32 or q8_0).
 */
#ifndef LLM_KVSETUP_H
#define LLM_KVSETUP_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "kvpool.h"
#include "model.h"

#define KVS_BLOCK_TOKENS 16

/* What --kv-pool asked for: neither bytes nor tokens means no pool. */
typedef struct {
    uint64_t bytes;
    uint64_t tokens;
    eng_kv_type kv;    /* the element type */
    int      n_ctx;    /* a session's positions (0: the model's default, eng_ctx): sizes the ring pool */
    int      step;     /* the most positions a step adds to one session (engd_chunk_max) */
} kvs_spec;

/* Parses SIZE into s (bytes, tokens; kv untouched): 0, or -1 with err. */
int kvs_parse(const char *size, kvs_spec *s, char *err, size_t errlen);
/* 1 when s asks for a pool. */
int kvs_enabled(const kvs_spec *s);
/* Layers of a model whose KV goes to blocks of kind (ENG_KV_RING: the sliding-window
 * ones, mdl_layer_window > 0; ENG_KV_WHOLE: the others). */
int kvs_layers(const mdl_config *c, int kind);
/* The most blocks of each kind a pooled session of n positions, added at most step a
 * step (eng_step), holds at once: one whole block per 16 positions, ring blocks for its
 * last window and a step (kv_ring_peak; 0 for a kind the model has no layers of). */
void kvs_peak(const mdl_config *c, int n, int step, int peak[ENG_KV_KINDS]);
/* The pools s asks for (s->n_ctx > 0), of a model of configuration c and identity
 * model_id (kvp_model_id): p[kind].id.n_layer 0 where it has no such layers, else the
 * bytes or blocks it gets. */
void kvs_plan(const mdl_config *c, uint64_t model_id, const kvs_spec *s, kvp_params p[ENG_KV_KINDS]);
/* The identity of the pool of model m's layers of kind (ENG_KV_*) with element type kv
 * (n_layer 0: the model has no such layers). */
void kvs_ident(const eng_model *m, eng_kv_type kv, int kind, kvp_ident *id);
/* The name of the pool of kind of weight segment wname; 0, or -1 when it has none. */
int kvs_name(const char *wname, int kind, char name[SEG_NAME_MAX]);
/* master 1: creates the pools of m's segment, or reuses existing ones of the same
 * identity (their blocks stay cached); one of another identity and ours is replaced.
 * master 0: attaches the master's pools, waiting up to 5 s while they are being created.
 * pools[kind] NULL for a kind without layers. 0, or -1 with err and no pool open
 * (another uid's or open to others, truncated, corrupt, other model, a type the model
 * cannot hold: eng_kv_check). */
int kvs_open(const eng_model *m, const kvs_spec *s, int master, kvp *pools[ENG_KV_KINDS], char *err, size_t errlen);
/* The same pools for one process alone (`engined --eval --kv-pool`): created (made)
 * under the pool names with "-evalPID" added, so a pipeline's pools of the same segment
 * are never touched, and attached as a worker attaches them (use: for eng_set_kv_pools);
 * names[kind] receives each name. 0, or -1 with err and nothing left open or made. */
int kvs_open_own(const eng_model *m, const kvs_spec *s, kvp *made[ENG_KV_KINDS], kvp *use[ENG_KV_KINDS],
                 char names[ENG_KV_KINDS][SEG_NAME_MAX], char *err, size_t errlen);
/* Removes the pools kvs_open_own made for segment wname in processes that are gone
 * (killed before they removed them; kvs_open_own and engined --remove-segment call it):
 * names <pool>-eval<pid> of this user whose pid no longer runs. */
void kvs_sweep_own(const char *wname);
/* Closes both and removes the pools kvs_open_own made. */
void kvs_remove_own(kvp *made[ENG_KV_KINDS], kvp *use[ENG_KV_KINDS], char names[ENG_KV_KINDS][SEG_NAME_MAX]);
/* kvp_close of each; accepts NULLs. */
void kvs_close(kvp *pools[ENG_KV_KINDS]);
/* Releases dead attachers' slots in each (kvp_reap). */
void kvs_reap(kvp *const pools[ENG_KV_KINDS]);

#endif
