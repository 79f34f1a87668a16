/*
 * gram.h - GBNF grammars (as llama.cpp writes them), a byte-level matcher, and token
 * masks over a whole vocabulary. The library behind structured output (issue 20); the
 * JSON Schema converter that produces GBNF is json_schema.h.
 *
 *   char err[256];
 *   gram *g = gram_compile(text, len, err, sizeof err);      // NULL + "line 3 col 7: ..."
 *   gram_vocab *v = gram_vocab_new(toks, n_vocab, err, sizeof err);   // once per vocabulary
 *   gram_masker *m = gram_masker_new(g, v);                  // once per (grammar, vocab)
 *   gram_state *s = gram_state_new(g);                       // the start of the output
 *   uint64_t *mask = calloc(gram_mask_words(v), 8);
 *   for (;;) {
 *       gram_mask(m, s, mask);            // bit id set: token id may come next
 *       ... sample id among the set bits ...
 *       if (gram_accept_token(v, s, id) != 0) break;   // cannot happen for a masked id
 *       if (gram_vocab_is_eog(v, id)) break;
 *   }
 *   gram_state_free(s); gram_masker_free(m); gram_vocab_free(v); gram_free(g);
 *
 * The grammar. Rules `name ::= body`; `root` is the start. A body is alternatives
 * (`|`) of sequences of: "literals" (UTF-8, escapes \n \r \t \\ \" \[ \] \xHH \uHHHH
 * \UHHHHHHHH), character classes `[a-z_]`, `[^"\\]`, `.` (any character), rule names,
 * groups `( ... )`, each optionally repeated by `*` `+` `?` `{m}` `{m,}` `{m,n}` `{,n}`.
 * `#` starts a comment. At the top level a newline ends a rule body (except right after
 * `::=` or `|`); inside parentheses newlines are spaces. Rejected with a message naming
 * the problem and its line and column: syntax errors, bad escapes, invalid UTF-8, an
 * undefined or twice-defined rule, no `root`, a class that matches nothing, left
 * recursion (a rule that can reach itself without consuming a character, which also
 * covers `(x?)*`), more than GRAM_MAX_ELEMS elements after repetitions are expanded,
 * parentheses nested deeper than GRAM_MAX_NEST.
 *
 * The matcher. A state is the set of parse stacks of a pushdown automaton over Unicode
 * characters, plus the bytes of an incomplete UTF-8 character (a token may end inside
 * a character; the next one completes it). It advances by bytes; a byte sequence that
 * leads nowhere is refused and leaves the state as it was. gram_can_end says whether
 * the text so far is a complete sentence (an end-of-generation token is allowed).
 * A state never holds more than GRAM_MAX_STACKS stacks of GRAM_MAX_DEPTH frames; bytes
 * that would exceed that are refused (fail closed: the generation stops, it is never
 * unconstrained).
 *
 * Where the state lives (the integration's contract). samplerd keeps nothing between
 * requests, a restarted samplerd must give the same tokens, a session may move to
 * another worker, and a token must not depend on how sessions were batched. So the
 * state is a pure function of (grammar, the bytes of the tokens generated so far): it
 * depends on nothing else (no clock, no address, no cache content) and travels with the
 * session like mirostat's mu: samplerd receives it as bytes (gram_state_from_bytes),
 * masks, samples, advances and returns the new bytes (gram_state_to_bytes) with the
 * token; the worker and the front door keep the latest bytes with the session's tokens.
 * When they are lost (a worker or front door restarted without them) the state is
 * rebuilt by replaying the generated tokens from gram_state_new. Bytes from the wire
 * are untrusted: gram_state_from_bytes checks the version, the grammar's hash and every
 * frame against the grammar before use. Compiled grammars are immutable and may be
 * shared by threads; cache them by gram_text_hash of their text (or of the JSON schema
 * they came from). A gram_masker caches per-grammar tables and masks: a cache only
 * ever changes speed, never a mask.
 *
 * Ownership: gram_compile's grammar is the caller's (gram_free). A gram_state borrows
 * its grammar, a gram_masker borrows its grammar and vocabulary: free them first.
 * gram_vocab copies the token texts it is given.
 * Owner: grammar (grammar/, libgrammar.a; depends on common/ only).
 */
#ifndef LLM_GRAM_H
#define LLM_GRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRAM_MAX_TEXT   (1u << 20) /* bytes of grammar text */
#define GRAM_MAX_ELEMS  (1u << 20) /* elements after repetitions are expanded */
#define GRAM_MAX_RULES  (1u << 16)
#define GRAM_MAX_NEST   64         /* nested parentheses */
#define GRAM_MAX_REPEAT 10000      /* the largest m or n of {m,n} */
#define GRAM_MAX_STACKS 512        /* parse stacks in one state */
#define GRAM_MAX_DEPTH  1024       /* frames in one stack */

typedef struct gram gram;
typedef struct gram_state gram_state;
typedef struct gram_vocab gram_vocab;
typedef struct gram_masker gram_masker;

/* ---- grammars ---- */

/* Compiles GBNF text[0..len) (need not be NUL-terminated). NULL and a message "line L
 * col C: problem" (or a problem without position) on any error. */
gram *gram_compile(const char *text, size_t len, char *err, size_t errlen);
/* Frees; accepts NULL. */
void gram_free(gram *g);
/* A 64-bit hash of a grammar text (FNV-1a): the key of a cache of compiled grammars.
 * gram_hash(g) == gram_text_hash(the text g was compiled from). */
uint64_t gram_text_hash(const void *text, size_t len);
uint64_t gram_hash(const gram *g);
/* Sizes after compilation (tests, logs). */
size_t gram_n_rules(const gram *g);
size_t gram_n_elems(const gram *g);

/* ---- the matcher ---- */

/* The state before any output. NULL on OOM. */
gram_state *gram_state_new(const gram *g);
gram_state *gram_state_clone(const gram_state *s);
/* Frees; accepts NULL. */
void gram_state_free(gram_state *s);
/* Advances by bytes[0..n). 0 when the grammar allows them (s advanced), -1 when not
 * (s unchanged). n == 0 is accepted. */
int gram_accept_bytes(gram_state *s, const void *bytes, size_t n);
/* True when the text so far is a complete sentence of the grammar. */
bool gram_can_end(const gram_state *s);
/* True when some further byte is allowed. */
bool gram_can_continue(const gram_state *s);
/* True when neither: no token, not even end-of-generation, can follow. */
bool gram_is_dead(const gram_state *s);
/* Bytes of an incomplete UTF-8 character at the end of the text so far (0..3). */
size_t gram_pending_bytes(const gram_state *s);
/* The number of parse stacks (tests, logs). */
size_t gram_state_n_stacks(const gram_state *s);

/* ---- the state on the wire ----
 * Layout (every integer a LEB128 varint unless noted):
 *   u8 version (1), u64 grammar hash (8 bytes, little-endian), u8 pending count (0..3),
 *   the pending bytes, n_stacks, then per stack: depth, depth frame positions (bottom
 *   first). Deterministic: equal states give equal bytes. */
#define GRAM_STATE_VERSION 1
/* Writes the state to buf (at most cap bytes) and returns its full size; call with
 * cap 0 to size the buffer. */
size_t gram_state_to_bytes(const gram_state *s, uint8_t *buf, size_t cap);
/* Rebuilds a state of g from untrusted bytes. NULL and a message on a wrong version,
 * another grammar's hash, truncation, trailing bytes, a frame that is not a position of
 * g where the matcher can stand, an invalid pending UTF-8 prefix, or sizes over the
 * limits. */
gram_state *gram_state_from_bytes(const gram *g, const void *buf, size_t n, char *err, size_t errlen);

/* ---- vocabularies and token masks ---- */

/* One token as it is written into the output: the bytes of llama.cpp's token_to_piece
 * (tok_piece without special rendering). Tokens with no bytes (control tokens) are
 * never allowed by a mask, except end-of-generation tokens (eog), which are allowed
 * exactly when gram_can_end. */
typedef struct {
    const char *text; /* len bytes, any bytes (a token may hold part of a character) */
    uint32_t len;
    bool eog;
} gram_token;

/* Indexes n token texts (copied) for mask walks. NULL and a message on bad input. */
gram_vocab *gram_vocab_new(const gram_token *toks, int32_t n, char *err, size_t errlen);
void gram_vocab_free(gram_vocab *v);
int32_t gram_vocab_size(const gram_vocab *v);
bool gram_vocab_is_eog(const gram_vocab *v, int32_t id);
/* uint64_t words of a mask: (n_vocab + 63) / 64. Bit id of word id / 64 is token id. */
size_t gram_mask_words(const gram_vocab *v);

/* Advances s by token id: an eog token is accepted (s unchanged) when gram_can_end, any
 * other by its bytes. 0 or -1 as gram_accept_bytes (also for an id out of range). */
int gram_accept_token(const gram_vocab *v, gram_state *s, int32_t id);

/* Per-(grammar, vocabulary) tables and a mask cache; thread-safe (one mutex). NULL on
 * OOM. g and v must outlive it. */
gram_masker *gram_masker_new(const gram *g, const gram_vocab *v);
void gram_masker_free(gram_masker *m);
/* Fills mask (gram_mask_words(v) words) with the tokens allowed after s: those whose
 * bytes gram_accept_bytes would accept, plus the eog tokens when gram_can_end(s). */
void gram_mask(gram_masker *m, const gram_state *s, uint64_t *mask);
/* The same by walking every token text from s (the reference, and the fallback when the
 * masker's tables cannot be built). */
void gram_mask_walk(const gram_vocab *v, const gram_state *s, uint64_t *mask);

/* Counters of a masker (benchmarks, logs). */
typedef struct {
    uint64_t masks, cache_hits, walks; /* gram_mask calls; answered from the mask cache;
                                          answered by a whole-vocabulary walk */
    uint64_t tables, table_ns;         /* per-context tables built, and their time */
    uint64_t derived;                  /* of those, derived from a repetition's top table */
    uint64_t rechecks;                 /* context-dependent tokens checked in full */
} gram_masker_stats;
gram_masker_stats gram_masker_get_stats(gram_masker *m);

#endif
