/*
 * kvpool.h - a crash-safe pool of KV cache blocks in POSIX shared memory, one per weight
 * segment: the master creates it, every worker attaches it read-write, and a block of
 * keys and values computed by one worker is found by hash and read by any other.
 * Used by engined --kv-pool (kvsetup.h, kv.h; docs/ARCHITECTURE.md, Shared memory).
 *
 *   master:
 *     char name[SEG_NAME_MAX];
 *     kvp_name_for("/llm-1000-0123456789abcdef", name);       // "/llm-kv-1000-0123456789abcdef"
 *     kvp_params p = { .id = { kvp_model_id(seg_hdr(&sm)), n_layer, kv_dim, KVP_F16, 16 },
 *                      .bytes = 2ull << 30, .n_slots = 64 };
 *     kvp *pool = NULL;
 *     kvp_create(name, &p, &pool, err, sizeof err);           // 0 made, 1 exists, -1
 *     ... every second: kvp_reap(pool);  at exit: kvp_close(&pool) ...
 *   worker (one slot per process):
 *     kvp *pool = NULL;
 *     kvp_attach(name, &p.id, &pool, err, sizeof err);
 *     uint64_t h = kvp_hash(parent, toks, 16, &p.id);         // the prefix chain
 *     int b = kvp_lookup(pool, h, parent, toks);              // a reference, or -1
 *     if (b < 0 && (b = kvp_alloc(pool)) >= 0) {              // WRITING, ours alone
 *         ... fill kvp_plane(pool, b, layer, KVP_K / KVP_V) without any lock ...
 *         b = kvp_publish(pool, b, h, parent, toks);           // the block to use now
 *     }
 *     ... read it while referenced ...
 *     kvp_release(pool, b);
 *     kvp_close(&pool);
 *
 * Layout (offsets from the segment start, derived from kvp_geometry by one function):
 *   [kvp_header, 4 KiB] [kvp_block x n_blocks] [kvp_ientry x index_cap]
 *   [int32 tokens, block_tokens per block] [kvp_slot x n_slots]
 *   [reference bitmaps: n_slots x ceil(n_blocks / 64) words] [block data, 4 KiB aligned]
 * A block's data is [n_layer][K|V][block_tokens][kv_dim] elements of the pool's type,
 * each (layer, K|V) plane padded to 64 bytes; q8_0 rows are ggml's block_q8_0 (f16 scale
 * + 32 int8) and need kv_dim % 32 == 0. The engine (kv.h, 16-token blocks) stores a K
 * plane transposed, [kv_dim][16], the key tile its attention kernels read (q8_0: the
 * same bytes as 16 rows, in 32-dim groups of 16 f16 scales then [32][16] int8) and a V
 * plane head-major, [n_head_kv][16][head_dim] (the same bytes as 16 rows).
 *
 * States: FREE (on the free list) -> kvp_alloc -> WRITING (its writer slot alone may
 * touch its bytes) -> kvp_publish -> PUBLISHED (indexed by hash; its bytes never change
 * again while any slot references it). A PUBLISHED block with no reference sits in the
 * LRU list of cached blocks; kvp_alloc takes a FREE block, else evicts the least
 * recently released cached block, else fails (everything is referenced or being written).
 *
 * Crash safety: a block is referenced iff the bit of a live slot is set; a slot is live
 * while its pid runs with the start time /proc recorded at attach (a reused pid is not
 * the attacher; a zombie is dead). One robust process-shared mutex guards every metadata
 * change and nothing else (never a block's bytes). When its owner dies inside a critical
 * section, the next locker gets EOWNERDEAD and repairs: dead slots are cleared (their
 * references dropped, their WRITING blocks FREE), then every derived structure (reference
 * counts, hash index, free and LRU lists) is rebuilt from the block states and the live
 * bitmaps, which every critical section writes first. A holder that died outside the
 * lock is released by kvp_reap (the master, periodically) or by the next kvp_attach.
 * Lockers wait in bounded steps, so a wakeup that died with a killed waiter is not lost.
 *
 * Trust: named from the weight segment ("/llm-kv-<euid>-<its id>"), 0600, and opened only
 * when owned by the effective uid with no group or other access (seg_open_owned), like
 * the weight segment; the geometry is checksummed. Processes of the same uid are trusted.
 *
 * Ownership and threads: a kvp handle belongs to the process that made it (after fork
 * the child attaches its own; kvp_close in a child only unmaps) and to one thread at a
 * time. References are per process: the pool sees one bit per slot, the handle counts
 * how many times this process holds each block. Pointers from kvp_block_data stay valid
 * until kvp_close, their bytes only while referenced or WRITING.
 */
#ifndef LLM_KVPOOL_H
#define LLM_KVPOOL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "segment.h"

#define KVP_MAGIC 0x314c50564b4d4c4cull /* "LLMKVPL1" little-endian */
#define KVP_LAYOUT_VERSION 5u /* 2: a block's K planes hold the attention's transposed key tile; 3: q8_0 keys in quads (KERN_KVQ_AT); 4: kvp_ident.kind; 5: V planes head-major (kv.h) */
#define KVP_HEADER_BYTES 4096
#define KVP_ALIGN 64
#define KVP_MAX_SLOTS 1024
#define KVP_MAX_BLOCK_TOKENS 1024
#define KVP_COLLISION (-2) /* kvp_publish: another block holds the hash for other tokens */

/* Element type of the keys and values in a block. */
typedef enum { KVP_F32 = 0, KVP_F16 = 1, KVP_Q8_0 = 2, KVP_TYPE_COUNT } kvp_type;
/* Which half of a (layer) plane pair. */
typedef enum { KVP_K = 0, KVP_V = 1 } kvp_half;
typedef enum { KVP_FREE = 0, KVP_WRITING = 1, KVP_PUBLISHED = 2, KVP_STATE_COUNT } kvp_state;
typedef enum { KVP_CREATING = 1, KVP_READY = 2 } kvp_pool_state;
typedef enum { KVP_SLOT_FREE = 0, KVP_SLOT_LIVE = 1 } kvp_slot_state;

/* What a block's bytes mean: a worker attaches only a pool of its model and cache shape. */
typedef struct {
    uint64_t model_id;     /* kvp_model_id of the weight segment */
    uint32_t n_layer;
    uint32_t kv_dim;       /* n_head_kv * head_dim */
    uint32_t type;         /* kvp_type */
    uint32_t block_tokens; /* positions per block (kvp_attach: 0 accepts the pool's) */
    uint32_t kind;         /* which of the model's layers (engine.h: ENG_KV_WHOLE, ENG_KV_RING) */
    uint32_t reserved;
} kvp_ident;

/* Immutable after creation, covered by geo_checksum. */
typedef struct {
    kvp_ident id;
    uint32_t  n_blocks;
    uint32_t  n_slots;     /* attachers at once */
    uint32_t  index_cap;   /* hash index entries: a power of two >= 2 * n_blocks */
    uint32_t  bitmap_words;/* uint64 words of one slot's bitmap: ceil(n_blocks / 64) */
    uint64_t  row_bytes;   /* bytes of one position's kv_dim keys (or values) */
    uint64_t  plane_bytes; /* block_tokens rows, padded to KVP_ALIGN */
    uint64_t  block_bytes; /* 2 * n_layer planes */
    uint64_t  total_bytes; /* the whole segment */
} kvp_geometry;

/* Counters, under the mutex. */
typedef struct {
    uint64_t lookups, hits;     /* kvp_lookup calls, and those that found a block */
    uint64_t allocs, evictions; /* kvp_alloc successes, and those that evicted a cached block */
    uint64_t alloc_fails;       /* kvp_alloc with every block referenced or WRITING */
    uint64_t publishes;         /* blocks made PUBLISHED */
    uint64_t duplicates;        /* kvp_publish that found the same block published first */
    uint64_t collisions;        /* kvp_publish refused: same hash, other tokens */
    uint64_t reaped;            /* slots of dead attachers released */
    uint64_t repairs;           /* EOWNERDEAD repairs */
} kvp_counters;

/* The header, at offset 0. */
typedef struct {
    uint64_t     magic;          /* KVP_MAGIC */
    uint32_t     layout_version; /* KVP_LAYOUT_VERSION */
    uint32_t     state;          /* kvp_pool_state, written last (release) */
    int32_t      creator_pid;
    uint32_t     reserved0;
    int64_t      created_ns;     /* CLOCK_REALTIME */
    kvp_geometry g;
    uint64_t     geo_checksum;   /* csum64 of g */
    uint8_t      reserved1[256 - 32 - sizeof(kvp_geometry) - 8];
    /* mutable, under the mutex */
    int32_t      free_head;      /* first FREE block, -1 when none */
    int32_t      lru_head;       /* oldest cached block (evicted first), -1 when none */
    int32_t      lru_tail;       /* newest cached block */
    uint32_t     n_free;
    uint32_t     n_cached;       /* PUBLISHED without a reference: the LRU list's length */
    uint32_t     n_live_slots;
    uint64_t     lru_clock;      /* stamps kvp_block.lru */
    kvp_counters c;
    uint8_t      reserved2[1024 - 256 - 32 - sizeof(kvp_counters)];
    union {
        pthread_mutex_t m;       /* robust, process-shared */
        uint8_t         pad[128];
    } mutex;
    uint8_t      reserved3[KVP_HEADER_BYTES - 1024 - 128];
} kvp_header;
_Static_assert(sizeof(pthread_mutex_t) <= 128, "the mutex must fit its room in kvp_header");
_Static_assert(sizeof(kvp_header) == KVP_HEADER_BYTES, "kvp_header is part of the pool layout");
_Static_assert(offsetof(kvp_header, free_head) == 256 && offsetof(kvp_header, mutex) == 1024,
               "kvp_header's immutable, mutable and mutex parts start at fixed offsets");

/* One block's metadata. */
typedef struct {
    uint64_t hash;    /* PUBLISHED: kvp_hash of its tokens */
    uint64_t parent;  /* the previous block's hash, 0 for the first */
    uint64_t lru;     /* lru_clock when it was last released to no reference */
    uint32_t state;   /* kvp_state */
    int32_t  writer;  /* WRITING: the slot writing it; else -1 */
    uint32_t nref;    /* live slots whose bit is set (derived from the bitmaps) */
    int32_t  prev;    /* LRU list (cached blocks) */
    int32_t  next;    /* LRU list, or the free list */
    uint32_t reserved;
} kvp_block;
_Static_assert(sizeof(kvp_block) == 48, "kvp_block is part of the pool layout");

/* One hash index entry (open addressing, linear probing, backward-shift deletion). */
typedef struct {
    uint64_t hash;
    int32_t  block;   /* -1: empty */
    uint32_t reserved;
} kvp_ientry;
_Static_assert(sizeof(kvp_ientry) == 16, "kvp_ientry is part of the pool layout");

/* One attacher. */
typedef struct {
    int32_t  pid;
    uint32_t state;      /* kvp_slot_state */
    uint64_t start_time; /* field 22 of /proc/<pid>/stat at attach (clock ticks); 0 unknown */
    int64_t  attach_ns;
    uint8_t  reserved[40];
} kvp_slot;
_Static_assert(sizeof(kvp_slot) == 64, "kvp_slot is part of the pool layout");

/* Where everything is, derived from the geometry (kvp_layout). */
typedef struct {
    uint64_t blocks, index, tokens, slots, bitmaps, data, total;
} kvp_offsets;

/* How the master sizes a pool: n_blocks when set, else ceil(tokens / block_tokens),
 * else as many blocks as fit in bytes (the whole segment, metadata included). */
typedef struct {
    kvp_ident id;
    uint32_t  n_blocks;
    uint64_t  tokens;
    uint64_t  bytes;
    uint32_t  n_slots;   /* 0: 64 */
} kvp_params;

typedef struct kvp kvp;

/* What kvp_stats reports. */
typedef struct {
    uint32_t     n_blocks, block_tokens, n_slots;
    uint64_t     block_bytes, total_bytes;
    uint32_t     free, writing, published;
    uint32_t     referenced;   /* PUBLISHED with a live reference */
    uint32_t     cached;       /* PUBLISHED without: evictable */
    uint32_t     live_slots;
    kvp_counters c;
} kvp_stats_t;

/* The pool of weight segment wname ("/llm-<euid>-<id>[-f32|-q8]"): "/llm-kv-<euid>-<id>...".
 * 0, or -1 when wname is not a weight segment's name. */
int kvp_name_for(const char *wname, char name[SEG_NAME_MAX]);
/* The model identity of a weight segment: its header checksum (which covers the source
 * file's identity, the configuration and the tensor directory) mixed with its layout. */
uint64_t kvp_model_id(const seg_header *h);
/* Bytes of one position's kv_dim values of a type; 0 when the type cannot hold kv_dim. */
uint64_t kvp_row_bytes(kvp_type type, uint32_t kv_dim);
/* Fills g and off for an identity and a block count; 0, or -1 with err (bad sizes). */
int kvp_layout(const kvp_ident *id, uint32_t n_blocks, uint32_t n_slots, kvp_geometry *g,
               kvp_offsets *off, char *err, size_t errlen);

/* The hash of a full block: parent's hash (0 for the first block), its n token ids, the
 * model and the KV type. Deterministic across processes and builds of this layout. */
uint64_t kvp_hash(uint64_t parent, const int32_t *tokens, int n, const kvp_ident *id);

/* Master: creates the pool (O_EXCL, 0600, reserved) and a handle on it without a slot
 * (kvp_reap, kvp_stats, kvp_check). 0, 1 when the name exists (nothing done: attach or
 * remove it), -1 with err. */
int kvp_create(const char *name, const kvp_params *p, kvp **out, char *err, size_t errlen);
/* Worker: maps an existing pool read-write after the owner, layout and checksum checks,
 * refuses one of another identity (expect NULL: any), reaps dead attachers and takes a
 * slot. 0, 1 while it is still being created, -2 when it does not exist, SEG_FOREIGN
 * (another uid's or open to others: never to be used or removed silently) or -1, with
 * err. */
int kvp_attach(const char *name, const kvp_ident *expect, kvp **out, char *err, size_t errlen);
/* Releases this process's slot (references and WRITING blocks) and unmaps; *pp = NULL.
 * Accepts NULL and *pp == NULL. In a forked child of the handle's owner it only unmaps. */
void kvp_close(kvp **pp);
/* Removes a pool by name: 0, 1 when there is none, -1 with err. Mappings stay valid
 * until closed; engined --remove-segment removes a weight segment's pool with it. */
int kvp_remove(const char *name, char *err, size_t errlen);

/* The PUBLISHED block of this hash, parent and block_tokens tokens (tokens NULL: hash and
 * parent alone), with a reference taken for this process; -1 when none. A 64-bit
 * collision therefore misses instead of returning another prefix's keys. */
int kvp_lookup(kvp *p, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* A block in WRITING state that only this process may write: a FREE one, else the least
 * recently used cached one (evicted from the index). -1 when every block is referenced
 * or being written (dead attachers are reaped first). */
int kvp_alloc(kvp *p);
/* Makes a WRITING block of ours findable, with a reference kept for us. Returns the block
 * to use from now on: b, or the block of the same hash, parent and tokens that another
 * attacher published first (b is then FREE again and that block referenced instead), or
 * KVP_COLLISION when another block holds the hash for other tokens (b stays WRITING and
 * ours: use it privately, then kvp_release it). tokens: block_tokens ids. */
int kvp_publish(kvp *p, int b, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Drops one of this process's references to b (the last one makes it cached), or gives
 * back a WRITING block of ours (FREE again). */
void kvp_release(kvp *p, int b);
/* References this process holds on b (0 for a WRITING block). */
uint32_t kvp_refs(const kvp *p, int b);

/* Start of block b's data (block_bytes, 64-byte aligned). */
void *kvp_block_data(const kvp *p, int b);
/* Plane (layer, half) of block b: block_tokens rows of row_bytes. */
void *kvp_plane(const kvp *p, int b, int layer, kvp_half half);
/* The pool's geometry (identity, sizes). */
const kvp_geometry *kvp_geometry_of(const kvp *p);
/* This handle's slot, -1 for the creator's. */
int kvp_slot_of(const kvp *p);

/* Releases the slots of dead attachers (their references and WRITING blocks). Returns
 * how many, or -1 when the handle is unusable. */
int kvp_reap(kvp *p);
/* A snapshot of the counts and counters. */
void kvp_stats(kvp *p, kvp_stats_t *s);
/* Blocks kvp_alloc can hand out now without reaping: FREE ones plus cached ones (the
 * header's counts, one lock: cheap enough for every step). */
uint32_t kvp_available(kvp *p);
/* Checks every invariant above under the mutex (the debug sanity function): 0, or -1
 * with err naming the first broken one. */
int kvp_check(kvp *p, char *err, size_t errlen);

/* The header and the slot table of a handle's mapping, for tests and tools. */
kvp_header *kvp_header_of(const kvp *p);
kvp_slot *kvp_slot_table(const kvp *p);

/* Test hook: the process raises SIGKILL on itself when it reaches fault point `step`
 * inside a critical section (KVP_FAULT_*); 0 turns it off. */
enum {
    KVP_FAULT_NONE = 0,
    KVP_FAULT_PUBLISH_LOCKED,   /* publish: holding the mutex, nothing written */
    KVP_FAULT_PUBLISH_META,     /* publish: hash, parent and tokens written */
    KVP_FAULT_PUBLISH_STATE,    /* publish: PUBLISHED, not yet indexed */
    KVP_FAULT_PUBLISH_INDEXED,  /* publish: indexed, our bit not yet set */
    KVP_FAULT_PUBLISH_BIT,      /* publish: bit set, nref not yet counted */
    KVP_FAULT_ALLOC_EVICTED,    /* alloc: cached block unlinked and unindexed, still PUBLISHED */
    KVP_FAULT_LOOKUP_BIT,       /* lookup: bit set, nref and LRU list not yet updated */
    KVP_FAULT_RELEASE_BIT,      /* release: bit cleared, nref not yet dropped */
    KVP_FAULT_COUNT
};
void kvp_set_fault(int step);

#endif
