/*
 * oai_embed.h - the embeddings API as the gateway speaks it (owner: gateway): request
 * bodies of OpenAI's /v1/embeddings and llama-server's /embedding parsed, and their
 * response JSON built from the vectors. No I/O (client/gw_job.c runs one embedding
 * request per input through the front door: GENERATE with "embed").
 *
 *   oai_emb_req r; oai_err e;
 *   if (oai_emb_parse(&r, OAI_EMB_OPENAI, body, len, PROTO_POOL_MEAN, &e) != 0) reply(400, ...e.msg, e.param);
 *   ... r.inputs[i] (r.n_inputs): text, or token ids when r.ids[i] (r.n_ids[i] of them)
 *   char *json = oai_emb_response(&r, "model", vecs, dim, n_prompt_tokens, &len);
 *
 * OpenAI: {"input": "text" | ["a", "b"] | [1, 2, 3] | [[1, 2], [3]], "model": ..,
 * "encoding_format": "float" | "base64", "dimensions": n_embd only (another value is
 * refused: no truncation), "user": ignored, "pooling": "mean" | "last" (ours, also
 * llama-server's name for the server option)} -> {"object": "list", "data": [{"object":
 * "embedding", "index": i, "embedding": [floats] or base64 of little-endian f32}],
 * "model", "usage": {"prompt_tokens", "total_tokens"}}. llama-server's /embedding:
 * {"content": "text" | [...]} -> [{"index": i, "embedding": [[floats]]}].
 *
 * Ownership: oai_emb_req owns its strings until oai_emb_free; returned JSON is malloc'd.
 */
#ifndef LLM_OAI_EMBED_H
#define LLM_OAI_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "oai.h"

#define OAI_EMB_MAX_INPUTS 64 /* inputs per request, each a request of its own on the front door */

typedef enum { OAI_EMB_OPENAI, OAI_EMB_LLAMA } oai_emb_kind;

typedef struct {
    oai_emb_kind kind;
    char        *inputs[OAI_EMB_MAX_INPUTS]; /* text inputs (NULL where ids[i] is set) */
    int32_t     *ids[OAI_EMB_MAX_INPUTS];    /* token-id inputs (n_ids[i] of them) */
    int          n_ids[OAI_EMB_MAX_INPUTS];
    int          n_inputs;
    int          pooling;                    /* PROTO_POOL_MEAN or PROTO_POOL_LAST */
    int          base64;
    long         dimensions;                 /* 0: not given; checked against n_embd later */
} oai_emb_req;

/* Parses a body of kind; default_pool is --pooling's. 0, or -1 with e filled (a 400). */
int oai_emb_parse(oai_emb_req *r, oai_emb_kind kind, const char *body, size_t len, int default_pool, oai_err *e);
void oai_emb_free(oai_emb_req *r);
/* "mean" -> PROTO_POOL_MEAN, "last" -> PROTO_POOL_LAST, else 0. */
int oai_emb_pooling(const char *name);
/* The response for r: vecs[i] (dim floats each) for input i, n_prompt the tokens of all
 * inputs together. NULL when out of memory. */
char *oai_emb_response(const oai_emb_req *r, const char *model, float *const *vecs, int dim, uint64_t n_prompt,
                       size_t *len);

#endif
