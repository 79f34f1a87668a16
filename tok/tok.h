/*
 * tok.h - llama.cpp-compatible tokenizers built from GGUF metadata: SentencePiece
 * (`tokenizer.ggml.model` = "llama") and byte-level BPE ("gpt2") with the pre-tokenizer
 * split named by `tokenizer.ggml.pre`, special-token partitioning, and a streaming
 * detokenizer that only ever emits complete UTF-8.
 *
 *   char err[256];
 *   gguf_ctx *g = gguf_open("model.gguf", err, sizeof err);   // or gguf_parse(blob)
 *   tok_vocab *v = tok_vocab_load(g, err, sizeof err);          // copies what it needs
 *   gguf_close(g);                                              // v stays valid
 *   int32_t *ids; size_t n;
 *   if (tok_encode(v, text, strlen(text), true, false, &ids, &n, err, sizeof err) != 0) ...
 *   tok_stream *s = tok_stream_new(v, TOK_STREAM_DEFAULT);
 *   for (size_t i = 0; i < n; i++) { size_t len; const char *p = tok_stream_push(s, ids[i], &len);
 *                                    fwrite(p, 1, len, stdout); }
 *   size_t len; const char *p = tok_stream_flush(s, &len); fwrite(p, 1, len, stdout);
 *   tok_stream_free(s); free(ids); tok_vocab_free(v);
 *
 * Ownership: a tok_vocab owns copies of everything it read from the gguf_ctx (the ctx
 * may be closed right after loading). tok_encode's *ids is malloc'd and the caller
 * frees it. Pointers returned by tok_text / tok_stream_push / tok_stream_flush point
 * into the vocab / stream and live until the next call on that stream or the free.
 * A tok_vocab is immutable after loading: any number of threads may encode with it.
 *
 * Behaviour follows llama.cpp (llama-vocab.cpp, unicode.cpp): SPM merges adjacent
 * symbols by best score with byte fallback to <0xXX>; BPE splits by the pre-tokenizer's
 * regexes (hand-written matchers over generated Unicode tables), maps bytes to the
 * GPT-2 printable alphabet and merges by rank. Invalid UTF-8 is accepted: SPM sees raw
 * bytes, BPE sees U+FFFD per bad byte, as llama.cpp does.
 * Owner: tok (tok/tok*.c, the library that tokenizerd, samplerd and llmc link).
 */
#ifndef LLM_TOK_H
#define LLM_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct tok_vocab tok_vocab;
typedef struct tok_stream tok_stream;

typedef enum { TOK_VOCAB_SPM, TOK_VOCAB_BPE, TOK_VOCAB_COUNT } tok_vocab_type;

/* tokenizer.ggml.token_type values (SentencePiece's). */
typedef enum {
    TOK_TYPE_UNDEFINED = 0, TOK_TYPE_NORMAL = 1, TOK_TYPE_UNKNOWN = 2, TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4, TOK_TYPE_UNUSED = 5, TOK_TYPE_BYTE = 6, TOK_TYPE_COUNT = 7
} tok_token_type;

#define TOK_NULL (-1) /* "no such token" for the special-id accessors */

/* Builds a vocabulary from the tokenizer.* keys of g (a model file or a metadata-only
 * GGUF blob). NULL and a message naming the key on any problem (missing tokens, an
 * unknown model or pre-tokenizer name, a special id out of range, bad merges). */
tok_vocab *tok_vocab_load(const gguf_ctx *g, char *err, size_t errlen);
/* Frees; accepts NULL. */
void tok_vocab_free(tok_vocab *v);

/* Accessors. Special ids are TOK_NULL when the vocabulary has none. */
int32_t        tok_n_vocab(const tok_vocab *v);
tok_vocab_type tok_type(const tok_vocab *v);
const char    *tok_pre_name(const tok_vocab *v); /* e.g. "llama-bpe"; "default" for SPM */
int32_t        tok_bos(const tok_vocab *v);
int32_t        tok_eos(const tok_vocab *v);
int32_t        tok_eot(const tok_vocab *v);      /* <|eot_id|>, <|im_end|>, ... */
int32_t        tok_unk(const tok_vocab *v);
bool           tok_add_bos(const tok_vocab *v);
bool           tok_add_eos(const tok_vocab *v);
/* True for every id that ends generation (eos, eot, eom and the known end markers). */
bool           tok_is_eog(const tok_vocab *v, int32_t id);
/* True for control tokens (rendered as text only on request). */
bool           tok_is_control(const tok_vocab *v, int32_t id);
/* The stored text of a token (BPE: in the byte-mapped alphabet, SPM: with '▁'), *len
 * bytes, NOT NUL-terminated; NULL for an id out of range. */
const char    *tok_text(const tok_vocab *v, int32_t id, size_t *len);
tok_token_type tok_token_type_of(const tok_vocab *v, int32_t id);
/* The id whose stored text is exactly text[0..len), or TOK_NULL. */
int32_t        tok_find(const tok_vocab *v, const char *text, size_t len);

/* Tokenizes text[0..len) (any bytes, NULs included). add_special adds BOS/EOS as the
 * vocabulary says; parse_special lets control-token text in the input become the
 * control token (otherwise it is tokenized as plain text). 0 and *ids (malloc'd,
 * caller frees; NULL-safe when *n is 0) on success, -1 and err on failure. */
int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
               bool parse_special, int32_t **ids, size_t *n, char *err, size_t errlen);

/* A byte range of a text: [off, off + len). */
typedef struct {
    size_t off, len;
} tok_span;

/* As tok_encode with parse_special, except that control-token text overlapping any of
 * the plain spans (sorted, disjoint; e.g. the message contents of a rendered chat, see
 * chat_render_spans) is tokenized as ordinary text: users cannot inject <|im_start|>.
 * Identical to tok_encode when no control-token text lies in the spans. */
int tok_encode_guarded(const tok_vocab *v, const char *text, size_t len, bool add_special,
                       const tok_span *plain, size_t n_plain, int32_t **ids, size_t *n,
                       char *err, size_t errlen);

/* The bytes of one token as llama.cpp's token_to_piece writes them: SPM '▁' -> ' ',
 * byte tokens -> their byte, BPE unmapped to raw bytes; control tokens give "" unless
 * render_special. Writes at most cap bytes to buf and returns the full length, or -1
 * for an id out of range. */
int tok_piece(const tok_vocab *v, int32_t id, bool render_special, char *buf, size_t cap);

/* Whole-sequence detokenization, as llama_detokenize(remove_special = false) does it:
 * the pieces concatenated, and for SPM the leading space of the first piece dropped
 * unless keep_leading_space (so after a BOS the space stays, as in llama.cpp). Unlike
 * llama.cpp, clean_up_tokenization_spaces is never applied, so the text re-tokenizes
 * to the same ids. Returns a malloc'd NUL-terminated string (caller frees) and its
 * length in *len, or NULL and err for an id out of range. The result may hold invalid
 * UTF-8 if the ids do (use tok_stream for text that must be valid). */
char *tok_decode(const tok_vocab *v, const int32_t *ids, size_t n, bool render_special,
                 bool keep_leading_space, size_t *len, char *err, size_t errlen);

/* Streaming detokenizer options (or-able). */
enum {
    TOK_STREAM_DEFAULT       = 0,
    TOK_STREAM_RENDER_SPECIAL = 1, /* control tokens written as their text */
    TOK_STREAM_KEEP_SPACE     = 2, /* keep SPM's leading space on the first piece: use it
                                      for generated text that continues a prompt */
};

/* A streaming detokenizer over v (borrowed: v must outlive it). NULL on OOM. */
tok_stream *tok_stream_new(const tok_vocab *v, int flags);
/* Feeds one id and returns the bytes that are now complete UTF-8 (possibly none: *len
 * = 0). Bytes of a character split over several tokens are held back until it is
 * complete; an invalid sequence comes out as U+FFFD. Ids out of range give U+FFFD.
 * The returned pointer lives until the next call on s. */
const char *tok_stream_push(tok_stream *s, int32_t id, size_t *len);
/* Emits whatever is held back (an incomplete character as U+FFFD) and resets s for a
 * new sequence. */
const char *tok_stream_flush(tok_stream *s, size_t *len);
/* Bytes of an incomplete character held back (0..3). */
size_t tok_stream_pending(const tok_stream *s);
/* Frees; accepts NULL. */
void tok_stream_free(tok_stream *s);

#endif
