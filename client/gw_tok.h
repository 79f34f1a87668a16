/*
 * gw_tok.h - llama-server's /tokenize and /detokenize for `llmc serve` (owner:
 * gateway): request bodies in, response bodies out, on the vocabulary of the served
 * model (the one the gateway loads for top_logprobs texts). No I/O.
 *
 *   POST /tokenize   {"content": "Hello", "add_special": false, "parse_special": true,
 *                     "with_pieces": false}      -> {"tokens": [15043]}
 *                    with_pieces                 -> {"tokens": [{"id": 15043, "piece": " Hello"}]}
 *                    (a piece that is not valid UTF-8 is an array of its bytes, as
 *                    llama-server writes it)
 *   POST /detokenize {"tokens": [15043]}         -> {"content": "Hello"}
 *
 *   int status; char *body = gwt_tokenize(vocab, req, len, &status);   // 200 or 400
 *
 * Detokenizing is tok_decode's (render special tokens, SPM's leading space of the first
 * piece dropped), so tokenize then detokenize gives the content back. An id outside the
 * vocabulary is a 400 naming it.
 *
 * Ownership: the returned body is malloc'd (the caller frees); NULL only when out of memory.
 */
#ifndef LLM_GW_TOK_H
#define LLM_GW_TOK_H

#include <stddef.h>

#include "tok.h"

char *gwt_tokenize(const tok_vocab *v, const char *body, size_t len, int *status);
char *gwt_detokenize(const tok_vocab *v, const char *body, size_t len, int *status);

#endif
