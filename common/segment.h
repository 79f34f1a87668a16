/*
 * segment.h - the POSIX shared-memory weight segment: its binary layout and the reader
 * side (read-only attach, checks, the tokenizer blob, listing, removal) that every
 * program uses. Building a segment (naming, create, checksums, READY) is the engine's
 * alone: engined/segment_build.h.
 *
 * Layout (all offsets from the start of the segment, every tensor 64-byte aligned):
 *   [seg_header, 8 KiB] [seg_tensor directory, n_tensors x 128 B]
 *   [tokenizer blob: metadata-only GGUF image] [tensor data ...]
 *
 *   seg_map m;
 *   seg_attach(name, &m, NULL, err, sizeof err);  // owner/mode, header checksum, PROT_READ
 *   seg_verify_tensors(&m, err, sizeof err);      // every tensor's checksum (slow: all bytes)
 *   const seg_tensor *t = seg_find(&m, "output_norm.weight");
 *   seg_unmap(&m);
 *   gguf_ctx *g = seg_tokenizer_open(name, &m, err, sizeof err); // the blob, for tokenizers
 *
 * Trust: /dev/shm is shared by every local user and a segment's name is predictable,
 * so attach maps only a segment owned by the effective uid with no group or other
 * access (another user could otherwise plant altered weights under the name); the uid
 * is also part of the name, so two users never want the same one. Checksums (csum.h)
 * catch accidental corruption; they are no defence against the owner's own processes.
 *
 * Ownership: a seg_map owns its mapping (seg_unmap). The state word is written last
 * with a release store after msync, so a reader that sees READY sees every byte.
 */
#ifndef LLM_SEGMENT_H
#define LLM_SEGMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mdl_config.h"

#define SEG_MAGIC 0x31474553474d4c4cull /* "LLMGSEG1" little-endian */
#define SEG_LAYOUT_VERSION 13u /* 2: checksums, uid in the name; 3: q8t row tiles (kernels.h); 4: native qn tiles; 5: native Q2_K; 6: qwen3 (mdl_config.has_qk_norm); 7: gemma3 (swa_pattern, rope_base_local, attn_scale); 8: gemma2 (attn_softcap, final_softcap); 9: phi3 (rope_attn_factor, n_ctx_orig, has_rope_long_short); 10: mixture of experts (mdl_config.n_expert.., router f32); 11: YaRN (mdl_config.yarn_*); 12: native blocks with their 5th/6th bits beside them (kern_qn_block_bytes); 13: native tiles without a partial super-block's unused blocks (kern_qn_tile_bytes) */
#define SEG_NAME_MAX 64
#define SEG_ALIGN 64
#define SEG_HEADER_BYTES 8192
#define SEG_FOREIGN (-3) /* seg_attach: another uid's segment, or open to others */

typedef enum { SEG_STATE_LOADING = 1, SEG_STATE_READY = 2 } seg_state;

/* Element type of a tensor in the segment. 1 was version 1's q8 rows (no longer made).
 * SEG_T_QN0 + (w - 1) is native layout w (kern_wtype KERN_W_Q4_0 .. KERN_W_Q2_K). */
typedef enum { SEG_T_F32 = 0, SEG_T_Q8T = 2, SEG_T_QN0 = 3, SEG_T_QN_LAST = 10, SEG_T_COUNT } seg_ttype;

/* One directory entry. */
typedef struct {
    char     name[64];     /* GGUF tensor name, NUL-terminated */
    uint32_t type;         /* seg_ttype */
    uint32_t src_type;     /* qtype of the tensor in the GGUF file */
    int64_t  ne[2];        /* ne[0] = row length (values), ne[1] = rows */
    uint64_t offset;       /* bytes from the segment start, multiple of SEG_ALIGN */
    uint64_t nbytes;       /* bytes of data */
    uint64_t row_bytes;    /* f32: bytes per row; q8t: bytes per tile of KERN_TILE rows */
    uint64_t checksum;     /* csum64(data, nbytes, 0), set by seg_checksum_tensors */
    uint8_t  reserved[8];
} seg_tensor;
_Static_assert(sizeof(seg_tensor) == 128, "seg_tensor is part of the segment layout");

/* Rows per q8t tile (KERN_TILE in kernels.h; convert.c asserts they agree). */
#define SEG_TILE_ROWS 16

/* Whether a directory entry's type is one this layout version makes. */
static inline int seg_type_valid(uint32_t type)
{
    return type == SEG_T_F32 || type == SEG_T_Q8T || (type >= SEG_T_QN0 && type <= SEG_T_QN_LAST);
}
/* The kernels' weight type (kern_wtype) of a tiled entry type; -1 for f32. */
static inline int seg_wtype(uint32_t type)
{
    return type == SEG_T_Q8T ? 0 : type >= SEG_T_QN0 && type <= SEG_T_QN_LAST ? (int)(type - SEG_T_QN0) + 1 : -1;
}
/* Units of row_bytes a tensor stores: its rows (f32) or its tiles (q8t, qn). */
static inline uint64_t seg_stored_rows(const seg_tensor *t)
{
    return t->type != SEG_T_F32 ? ((uint64_t)t->ne[1] + SEG_TILE_ROWS - 1) / SEG_TILE_ROWS : (uint64_t)t->ne[1];
}

/* The segment header, at offset 0. */
typedef struct {
    uint64_t   magic;          /* SEG_MAGIC */
    uint32_t   layout_version; /* SEG_LAYOUT_VERSION */
    uint32_t   state;          /* seg_state, written last (atomic release) */
    int32_t    loader_pid;     /* pid of the process that built it */
    uint32_t   precision;      /* eng_precision: 0 INT8 (q8t), 1 float (f32), 2 native (qn + q8t) */
    uint64_t   total_bytes;    /* size of the segment */
    int64_t    created_ns;     /* CLOCK_REALTIME at creation, nanoseconds */
    int64_t    ready_ns;       /* CLOCK_REALTIME when marked READY */
    char       src_path[1024]; /* real path of the GGUF file */
    uint64_t   src_size;       /* its size in bytes */
    int64_t    src_mtime_ns;   /* its modification time */
    uint64_t   src_hash;       /* FNV-1a of its first 64 KiB */
    mdl_config config;         /* the model configuration */
    uint64_t   n_tensors;      /* directory entries */
    uint64_t   dir_offset;     /* offset of the directory */
    uint64_t   tok_offset;     /* offset of the tokenizer blob */
    uint64_t   tok_bytes;      /* its size */
    uint64_t   data_offset;    /* first tensor byte */
    uint64_t   hdr_checksum;   /* csum64 of this header (with state, ready_ns and this
                                  field as 0), then the directory, then the tokenizer
                                  blob; set by seg_mark_ready, checked by seg_attach */
    uint8_t    reserved[SEG_HEADER_BYTES - 1344];
} seg_header;
_Static_assert(sizeof(seg_header) == SEG_HEADER_BYTES, "seg_header is part of the segment layout");

/* A mapping of a segment. */
typedef struct seg_map {
    void       *base;     /* start of the mapping */
    size_t      len;      /* mapped bytes */
    bool        writable; /* created here (PROT_WRITE) or attached (PROT_READ) */
    char        name[SEG_NAME_MAX];
} seg_map;

/* Header of a mapping. */
static inline const seg_header *seg_hdr(const seg_map *m) { return (const seg_header *)m->base; }

/* The header checksum of a mapped segment: csum64 of its header with state, ready_ns
 * and hdr_checksum as 0, then of the directory, then of the tokenizer blob. The builder
 * stores it (seg_mark_ready), seg_attach compares. The layout must be valid. */
uint64_t seg_header_checksum(const void *base);

/* Maps an existing segment read-only and validates it: owner and mode first (see
 * Trust above), then header, directory and the header checksum.
 * Returns 0 (READY), 1 (exists but LOADING: not attached), -2 (does not exist),
 * SEG_FOREIGN with err (owned by another uid or open to group/others: not mapped, and
 * never to be removed or rebuilt silently), or -1 with err (invalid, corrupt,
 * unreadable). *loader_pid (may be NULL) receives the loader's pid when it returns 1,
 * or 0 when the segment is still being created (empty, or no header written yet). */
int seg_attach(const char *name, seg_map *m, int32_t *loader_pid, char *err, size_t errlen);

struct stat;
/* The trust rule above for any of our shared-memory objects (the weight segment, the KV
 * pool of engined/kvpool.h): 0 when st is owned by the effective uid with no group or
 * other access, else SEG_FOREIGN with err naming owner, mode and the way out. */
int seg_check_owner(const char *name, const struct stat *st, char *err, size_t errlen);
/* shm_open(name, oflag) of an existing object that passes seg_check_owner; fills *st.
 * Returns the descriptor (O_CLOEXEC; the caller closes it), -2 when it does not exist,
 * SEG_FOREIGN (also for a name we may not open) or -1, with err. */
int seg_open_owned(const char *name, int oflag, struct stat *st, char *err, size_t errlen);

/* Checks every tensor of an attached segment against its directory checksum.
 * 0, or -1 with err naming the first bad tensor and how many are bad. */
int seg_verify_tensors(const seg_map *m, char *err, size_t errlen);

/* Unmaps; accepts a zeroed map. */
void seg_unmap(seg_map *m);

/* Removes a segment by name (with or without the leading '/'). 0 or -1 with err. */
int seg_remove(const char *name, char *err, size_t errlen);

/* What seg_list knows of one "/llm-*" segment under /dev/shm (logits rings and KV pools
 * excluded). */
typedef struct {
    char     name[SEG_NAME_MAX];
    char     src_path[1024];
    uint64_t bytes;
    uint32_t uid;         /* owner */
    uint32_t mode;        /* permission bits */
    int      state;       /* seg_state, 0 when the header is unreadable */
    int32_t  loader_pid;
    double   age_s;
    bool     loader_dead; /* LOADING with a dead loader */
} seg_info;
/* Fills up to max entries of infos; returns how many exist (may exceed max) or -1. */
int seg_list(seg_info *infos, int max, char *err, size_t errlen);

/* Maps READY segment name read-only into *m and parses its tokenizer blob (every
 * key/value of the model file): what tokenizerd and samplerd need, without binding
 * weights or starting threads. The context points into the mapping: gguf_close it,
 * then seg_unmap(m). NULL with err (m is then unmapped). */
struct gguf_ctx *seg_tokenizer_open(const char *name, seg_map *m, char *err, size_t errlen);

/* Pointer to a directory entry by name, NULL when absent. */
const seg_tensor *seg_find(const seg_map *m, const char *name);
/* Bits of segment memory per weight: 8 x the bytes of every tensor (tile padding,
 * scales and f32 norms included) / their values. 0 for an empty directory. */
double seg_bits_per_weight(const seg_map *m);
/* Data of a directory entry. */
static inline const void *seg_data(const seg_map *m, const seg_tensor *t)
{
    return (const char *)m->base + t->offset;
}

#endif
