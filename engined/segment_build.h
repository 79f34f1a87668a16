/*
 * segment_build.h - building a weight segment (segment.h has its layout and the reader
 * side): its name, creation, checksums and the READY mark. Only the engine builds.
 *
 *   char name[SEG_NAME_MAX];
 *   seg_ident id;
 *   seg_name_for("model.gguf", 0, name, &id, err, sizeof err);   // "/llm-<euid>-<hash>"
 *   seg_map m;
 *   seg_create(name, total_bytes, &m, err, sizeof err);    // O_EXCL, 0600, fallocated
 *   ... fill m.hdr, the directory and the tensors ...
 *   seg_checksum_tensors(&m);                               // one pass over the data
 *   seg_mark_ready(&m);                                     // header checksum, READY
 *   seg_unmap(&m);
 *
 * Ownership: a seg_map from seg_create owns its read-write mapping (seg_unmap). The
 * state word is written last with a release store after msync, so a reader that sees
 * READY sees every byte.
 */
#ifndef LLM_SEGMENT_BUILD_H
#define LLM_SEGMENT_BUILD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "segment.h"

/* The identity of a model file, the input of its segment name. */
typedef struct {
    char     real_path[1024];
    uint64_t size;
    int64_t  mtime_ns;
    uint64_t head_hash;
} seg_ident;

/* Computes the segment name of a model file for a precision, "/llm-<euid>-<16 hex>"
 * (plus "-f32" for the float path), from the effective uid and the file's identity
 * (real path, size, mtime, hash of its first 64 KiB, layout version); fills id. 0 or -1. */
int seg_name_for(const char *path, uint32_t precision, char name[SEG_NAME_MAX], seg_ident *id,
                 char *err, size_t errlen);

/* The creation step every segment of ours shares (weights, KV pool): shm_open with
 * O_CREAT|O_EXCL and mode 0600, ftruncate and posix_fallocate to total bytes (so a full
 * /dev/shm fails here, not with SIGBUS later), mapped read-write into *base. Returns 0,
 * 1 when the name exists (nothing done), -1 with err (the name is unlinked again). */
int seg_shm_create(const char *name, uint64_t total, void **base, char *err, size_t errlen);

/* Creates a new segment of total bytes (O_CREAT|O_EXCL, mode 0600), reserves its memory
 * with posix_fallocate and maps it read-write. Returns 0, 1 when it already exists
 * (nothing done), -1 with err (e.g. /dev/shm too small). */
int seg_create(const char *name, uint64_t total, seg_map *m, char *err, size_t errlen);

/* Sets the checksum of every directory entry of a writable segment from its data
 * (one pass over all tensor bytes at memory speed). Call when the data and the
 * directory are final, just before seg_mark_ready. */
void seg_checksum_tensors(seg_map *m);

/* Marks a writable segment READY: sets the header checksum, msync, then a release
 * store of the state. */
void seg_mark_ready(seg_map *m);

/* How much of this process's mapping that contains addr the kernel maps in 2 MB pages
 * (its ShmemPmdMapped in the smaps text f), in kB; -1 when no mapping contains addr. */
long seg_smaps_pmd_kb(FILE *f, uintptr_t addr);

/* Logs how a freshly written segment is backed: in 2 MB pages (a tmpfs /dev/shm mounted
 * huge=within_size or huge=always), or in 4 KB pages with the mount option that would
 * change it. Decode reads every weight once a step, through one TLB entry per page
 * (TinyLlama, 2 threads: 8-20% faster in 2 MB pages, bench/bench_pages.sh). */
void seg_log_pages(const seg_map *m);

/* Builds the segment `name` for a GGUF file (convert.c): creates it,
 * writes the header, directory, tokenizer blob and every tensor (q8 matrices for
 * precision 0, f32 copies for precision 1; norms and biases f32), marks it READY and
 * unmaps it. 0, 1 when the name already exists (someone else builds it), -1 with err. */
int cvt_build(const char *gguf_path, const seg_ident *id, const char *name, uint32_t precision,
              char *err, size_t errlen);

#endif
