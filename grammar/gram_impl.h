/*
 * gram_impl.h - the compiled grammar and the matcher state, shared by grammar/gram_*.c
 * (not a public header).
 *
 * A compiled grammar is a flat array of elements. Rule r's alternatives start at
 * alt_start[rules[r].first_alt .. + n_alts); each alternative is a run of CLASS and REF
 * elements closed by an END element. A position is an index into elems. A parse stack
 * is a list of positions, bottom first: the top is always a CLASS (the next character
 * to match); every frame below is a continuation (where to go on when the rule above
 * ends), a CLASS or REF position, never END (a call in tail position pushes nothing).
 * An empty stack means the root rule has ended: the sentence is complete.
 */
#ifndef LLM_GRAM_IMPL_H
#define LLM_GRAM_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "gram.h"

enum { GE_END = 0, GE_CLASS = 1, GE_REF = 2, GE_KIND_COUNT };

typedef struct {
    uint32_t kind; /* GE_* */
    uint32_t val;  /* CLASS: class index; REF: rule index; END: the rule it closes */
} gram_elem;

typedef struct {
    uint32_t first, n;   /* ranges[first .. first + n): sorted, disjoint, not adjacent */
    uint64_t ascii[2];   /* code points 0..127 as bits: the common case without a search */
} gram_class;

typedef struct {
    uint32_t lo, hi; /* inclusive code point range */
} gram_range;

/* A rule of a bounded repetition's chain (x{m,n}: O1 ::= x | "", Ok ::= x O(k-1) | "")
 * has chain_k = k and chain_top = the chain's largest rule; chain_top is GRAM_NO_CHAIN
 * for every other rule. gram_mask.c derives the tables of a chain's lower rules from
 * its top's (a token of at most k bytes cannot tell Ok from the top). */
#define GRAM_NO_CHAIN UINT32_MAX
typedef struct {
    uint32_t first_alt, n_alts; /* alt_start[first_alt .. + n_alts) */
    uint32_t chain_top, chain_k;
} gram_rule;

struct gram {
    gram_elem *elems;      /* (n_elems) */
    uint32_t n_elems;
    uint32_t *alt_start;   /* (n_alt) positions */
    uint32_t n_alt;
    gram_rule *rules;      /* (n_rules) */
    uint32_t n_rules;
    gram_class *classes;   /* (n_classes) */
    uint32_t n_classes;
    gram_range *ranges;    /* (n_ranges) */
    uint32_t n_ranges;
    uint32_t root;         /* rule index of `root` */
    uint64_t hash;         /* gram_text_hash of the source */
    uint8_t *frame_ok;     /* (n_elems) 1 where a stack frame may stand (CLASS or REF) */
    uint32_t *elem_rule;   /* (n_elems) the rule each element belongs to */
};

/* A matcher state. Stacks are stored back to back in frames; stack i is
 * frames[off[i] .. off[i+1]). exit is set by an advance of a truncated state (see
 * gram_mask.c) when a stack returned below its bottom frame. */
struct gram_state {
    const gram *g;
    uint32_t n_stacks;
    uint32_t *off;         /* (cap_stacks + 1) */
    uint32_t *frames;      /* (cap_frames) */
    uint32_t *hashes;      /* (cap_stacks) a hash of each stack, for dedup */
    uint32_t cap_stacks, cap_frames;
    uint8_t pend[4];       /* bytes of an incomplete character */
    uint8_t n_pend, need;  /* pend holds n_pend of need bytes (need 0 when none) */
    bool truncated;        /* the bottom frame's caller is unknown: returning is an exit */
    bool exit;             /* the last advance returned below the bottom (truncated only) */
    bool overflow;         /* the last advance hit GRAM_MAX_STACKS / GRAM_MAX_DEPTH */
};

/* gram_match.c, for gram_mask.c */
bool gram_class_has(const gram *g, uint32_t cls, uint32_t cp);
/* Resets s to the states of the given stack (frames[0..n), bottom first) expanded: the
 * top may be any frame position. truncated as in struct gram_state. 0, or -1 on
 * overflow. */
int gram_state_set_stack(gram_state *s, const uint32_t *frames, uint32_t n, bool truncated);
/* dst = src advanced by one byte; 0, or -1 when nothing survives (dst then has no
 * stacks; dst->exit may still be set). dst and src must differ. */
int gram_state_step(gram_state *dst, const gram_state *src, uint8_t byte);
/* Copies src into dst (buffers reused). -1 on OOM. */
int gram_state_copy(gram_state *dst, const gram_state *src);
void gram_state_init(gram_state *s, const gram *g);
void gram_state_release(gram_state *s);
bool gram_state_has_empty(const gram_state *s);

#endif
