/*
 * logits_shm.h - the shared-memory logits ring between one engine worker and samplerd.
 * Logits never go through a socket: the worker writes a row into a slot, sends a
 * PT_SAMPLE message naming the segment and slot, and samplerd reads the row from its
 * read-only mapping.
 *
 * Worker (owner: creates, writes, unlinks on exit; the master unlinks it when it reaps
 * a worker that died without doing so):
 *   char err[200];
 *   lshm *w = lshm_create(getpid(), 16, n_vocab, err, sizeof err);
 *   memcpy(lshm_slot(w, 3), logits, n_vocab * sizeof(float));
 *   ... send PT_SAMPLE {shm: lshm_name(w), slot: 3, nv: n_vocab}
 *   lshm_destroy(&w);
 *
 * samplerd (reader; keeps a few mappings open, re-validates on every use):
 *   lshm *r = lshm_open_ro("/llm-logits-1000-1234", err, sizeof err);
 *   const float *row = lshm_row(r, slot, nv, err, sizeof err);  // NULL if slot/nv disagree
 *   lshm_destroy(&r);
 *
 * A slot belongs to one session at a time; the worker does not rewrite it before the
 * sample reply for that step arrived (or was given up), so a retried request reads the
 * same row.
 */
#ifndef LLM_LOGITS_SHM_H
#define LLM_LOGITS_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define LSHM_MAGIC   0x53544c4cu /* "LLTS" */
#define LSHM_VERSION 1
#define LSHM_ALIGN   64

/* The header at offset 0 of the segment; slot i starts at hdr_bytes + i * slot_bytes. */
typedef struct {
    uint32_t magic;       /* LSHM_MAGIC */
    uint32_t version;     /* LSHM_VERSION */
    uint32_t n_slots;     /* number of rows */
    uint32_t n_vocab;     /* floats per row */
    uint64_t slot_bytes;  /* bytes per slot (n_vocab * 4 rounded up to LSHM_ALIGN) */
    uint64_t total_bytes; /* size of the whole segment */
    int32_t  owner_pid;   /* the worker that created it */
    uint8_t  pad[28];
} lshm_header;
_Static_assert(sizeof(lshm_header) == 64, "lshm_header is part of the shared layout");

typedef struct lshm lshm;

/* The segment name of a worker pid: "/llm-logits-<euid>-<pid>". */
void lshm_name_for(pid_t pid, char *out, size_t cap);
/* Creates (replacing a stale one) the ring of worker pid; NULL with err on failure
 * (full /dev/shm is reported as such). */
lshm *lshm_create(pid_t pid, uint32_t n_slots, uint32_t n_vocab, char *err, size_t errcap);
/* Maps an existing ring read-only after checking its name (our euid's), owner (our
 * euid), mode (no group or other access: another local user could otherwise plant
 * logits under a name a worker will use) and header; NULL with err. */
lshm *lshm_open_ro(const char *name, char *err, size_t errcap);
/* Unmaps (and, for the creator, unlinks); accepts NULL and nulls the pointer. */
void lshm_destroy(lshm **r);
/* Unlinks the ring of pid if it exists (the master after reaping a dead worker). */
void lshm_unlink_pid(pid_t pid);
const char *lshm_name(const lshm *r);
uint32_t lshm_n_slots(const lshm *r);
/* Writable row of slot i (creator only; i < n_slots asserted). Slots follow each other
 * lshm_slot_floats() floats apart, so consecutive slots take rows of one strided write. */
float *lshm_slot(lshm *r, uint32_t i);
size_t lshm_slot_floats(const lshm *r);
/* Read-only row of slot i, checking i < n_slots and nv == n_vocab; NULL with err. */
const float *lshm_row(const lshm *r, uint64_t i, uint64_t nv, char *err, size_t errcap);

#endif
