/*
 * worker_kv.h - a worker's scheduling on the shared KV block pool: admission by free
 * blocks, prefill chunks by blocks, preemption and waits (owner: pipeline; worker_kv.c
 * says how). Called by worker.c only, and only with w->kv_on set, but for wkv_avail.
 *
 *   keep = wkv_start(w, s, sess, epoch, keep);  // PT_RUN: -1 when s was dropped
 *   wio_set_cap(&w->io, wkv_cap(w));           // what the heartbeat offers
 *   int blocks[ENG_KV_KINDS];
 *   wkv_avail(w, blocks);                      // a step's prefill takes what they hold
 *   if (step failed with "KV pool full" && wkv_full(w, now)) retry next step;
 */
#ifndef LLM_ENGD_WORKER_KV_H
#define LLM_ENGD_WORKER_KV_H

#include "worker_int.h"

/* A run of session s (its tokens set, its cache truncated to keep positions): a prompt
 * that can never fit fails at once (ERR_CONTEXT); else s takes the longest published
 * prefix past keep, from whichever worker computed it, and is admitted if the pool has
 * room for the rest, or sent back to the front door's queue (worker_full). Returns the
 * positions s holds, or -1 when s was dropped (its error sent). */
int wkv_start(worker *w, wsess *s, uint64_t sess, uint64_t epoch, int keep);
/* The sessions this worker offers: all its slots, or only those it holds while a refused
 * run's room is not free (cleared once it is). */
int wkv_cap(worker *w);
/* Blocks of each kind a step's prefill may take, into avail: free and cached ones less
 * the next block of each decoding session that needs one. 0, or -1 with no pool (no
 * limit). */
int wkv_avail(worker *w, int avail[ENG_KV_KINDS]);
/* 1 when a session preempted for blocks may try again now: nobody else of ours runs and
 * the retry time has come. */
int wkv_resume_ok(const worker *w, int64_t now);
/* A step found the pool full: gives blocks back (held chats, else the newest session) or
 * makes our sessions wait for other workers'. 1 when the next step may go on, 0 when
 * nothing helps (the step's error stands). */
int wkv_full(worker *w, int64_t now);

#endif
