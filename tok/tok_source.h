/*
 * tok_source.h - where a program finds a model's tokenizer tables: its GGUF file, or
 * the tokenizer blob of its weight segment (segment.h). The front door (its
 * vocabulary), samplerd (DRY's token texts) and llmc serve (top_logprobs texts) all
 * open them this way.
 *
 *   tok_source s;
 *   if (tok_source_open(&s, file, segment, err, sizeof err) == 0) {
 *       tok_vocab *v = tok_vocab_load(s.g, err, sizeof err);  // owns its copies
 *       const char *tmpl = gguf_get_str(s.g, "tokenizer.chat_template", NULL);
 *       ...                                                 // tmpl dies with s
 *   }
 *   tok_source_close(&s);
 *
 * Ownership: a tok_source owns the parsed metadata and the segment mapping it points
 * into; tok_source_close frees both, and accepts a source whose open failed.
 */
#ifndef LLM_TOK_SOURCE_H
#define LLM_TOK_SOURCE_H

#include <stddef.h>

#include "gguf.h"
#include "segment.h"

typedef struct {
    gguf_ctx *g;   /* the model's metadata (every key); NULL when the open failed */
    seg_map   seg; /* the segment mapping g points into; zeroed for a file */
} tok_source;

/* Opens the GGUF file `file` when not NULL; else, or when that fails, the READY segment
 * `segment` when not NULL (err then holds the segment's failure). 0, or -1 with err
 * (left untouched when both are NULL). */
int tok_source_open(tok_source *s, const char *file, const char *segment, char *err, size_t errlen);

/* Closes the metadata and unmaps the segment; s is zeroed. */
void tok_source_close(tok_source *s);

#endif
