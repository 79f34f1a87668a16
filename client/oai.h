/*
 * oai.h - the OpenAI HTTP API as the pipeline speaks it (owner: gateway): request
 * bodies of /v1/completions and /v1/chat/completions parsed and mapped to what the
 * front door takes (prompt or role/content pairs, n, sampler parameters by their
 * llama.cpp names, stop strings), and the JSON the gateway answers with: whole
 * responses, Server-Sent-Event chunks, usage, log-probabilities and errors. No I/O:
 * client/cmd_serve.c does the HTTP, client/gw_bridge.c the ZeroMQ.
 *
 *   oai_req r; oai_err e;
 *   if (oai_parse(&r, OAI_CHAT, body, len, &e) != 0) reply(400, oai_error_body(400, e.msg, e.param, NULL));
 *   oai_out o; oai_out_init(&o, &r, "tinyllama", time(NULL), 7);
 *   char *sse = oai_chunk(&o, " Once", 5, NULL, 0, &n);          // "data: {...}\n\n"
 *   char *end = oai_chunk_end(&o, "eog", 12, 40, &n);            // final chunk(s) + "data: [DONE]\n\n"
 *   ... free(sse); free(end); oai_out_free(&o); oai_req_free(&r);
 *
 * Mapping (OpenAI name -> front door): messages -> msgs (developer -> system; content
 * parts of type "text" are joined), prompt (a string, or an array of one string) ->
 * prompt, max_tokens / max_completion_tokens / n_predict -> n (default -1: until end of
 * text), stop (string or array) -> stop, temperature, top_p, seed, presence_penalty,
 * frequency_penalty -> the sampler parameters of the same name, logit_bias {"id": bias}
 * -> "id:bias,...", logprobs / top_logprobs -> n_probs, and every other top-level key
 * that samplerd knows (top_k, min_p, repeat_penalty, mirostat, dry_*, xtc_*, samplers,
 * ignore_eos, ...) passes through as text. Values are checked with smp_param_set, so a
 * bad one is refused here with its name. Structured output: response_format
 * {"type": "json_object"} (any object, or llama-server's "schema" inside it) and
 * {"type": "json_schema", "json_schema": {"schema": ..., "strict": ...}} (always
 * enforced, strict or not), and llama-server's top-level "json_schema" (a schema) and
 * "grammar" (GBNF) become the GENERATE's grammar: a schema is converted here
 * (jsg_to_gbnf) and every grammar compiled, so one that cannot be honoured is a 400
 * naming the problem, never unconstrained output; at most one of them per request.
 * Function calling (chat only; oai_tools.h): tools, tool_choice, parallel_tool_calls,
 * assistant messages with tool_calls and tool messages are checked here and travel in
 * the GENERATE (tools, tcalls); oai_tools_prepare, once the front door's chat template
 * is known, picks the call syntax and, for tool_choice required or a named function,
 * the grammar. The answer is then parsed for calls: message.tool_calls and
 * finish_reason "tool_calls", streamed as OpenAI streams them (a call's index, id, type
 * and name first, then its arguments).
 * n (1 to OAI_MAX_N choices) is n_choices: the gateway runs one session per choice.
 * best_of > 1, functions, another response_format type and suffix are
 * refused as unsupported; other keys (user, metadata, ...) are ignored as llama-server
 * does.
 *
 * Ownership: every char * returned is malloc'd and freed by the caller; oai_req and
 * oai_out own their strings until oai_req_free / oai_out_free.
 */
#ifndef LLM_OAI_H
#define LLM_OAI_H

#include <stddef.h>
#include <stdint.h>

#include "oai_tools.h"

#define OAI_MAX_STOPS  8    /* the front door's limit */
#define OAI_MAX_PARAMS 48
#define OAI_MAX_MSGS   256  /* chat messages (the front door's limit) */
#define OAI_MAX_TOP    20   /* top_logprobs per token (OpenAI's limit) */
#define OAI_MAX_N      8    /* choices per request (n), each a session of its own */

typedef enum { OAI_COMPLETION, OAI_CHAT, OAI_KIND_COUNT } oai_kind;

/* A parsed request. msgs holds role, content, role, content, ... (n_msgs strings). */
typedef struct {
    oai_kind kind;
    char    *prompt;                  /* completion */
    char   **msgs;                    /* chat: (n_msgs) */
    int      n_msgs;
    long     n_predict;               /* -1: until end of text or a full context */
    char    *pk[OAI_MAX_PARAMS], *pv[OAI_MAX_PARAMS]; /* sampler parameter name -> value text */
    int      n_params;
    char    *stops[OAI_MAX_STOPS];
    int      n_stops;
    int      stream, include_usage, echo;
    int      logprobs;                /* report log-probabilities */
    int      top_logprobs;            /* alternatives per token, [0, OAI_MAX_TOP] */
    int      greedy;                  /* temperature <= 0 (for the logs) */
    char    *grammar;                 /* GBNF constraining the output (compiled), or NULL */
    int      n_choices;               /* n: choices, [1, OAI_MAX_N]; 0 when not given (1) */
    oait_req tl;                      /* tools, tool_choice and the history's calls */
    oait_family family;               /* the call syntax (oai_tools_prepare) */
} oai_req;

/* Why a request was refused: the message and the offending parameter ("" if none). */
typedef struct {
    char msg[300];
    char param[64];
} oai_err;

/* Fills e (the message from fmt, the parameter named) and returns -1: the one way the
 * request parsers (oai.c, oai_embed.c) refuse a request. */
int oai_bad(oai_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Parses a request body of kind; 0, or -1 with e filled (an HTTP 400). */
int oai_parse(oai_req *r, oai_kind kind, const char *body, size_t len, oai_err *e);
/* With the front door's chat template (its name; NULL or "" if unknown): the tool-call
 * syntax, and for tool_choice required or named the grammar of the calls. 0, or -1
 * with e filled (an HTTP 400: tools the template cannot express, a grammar besides). */
int oai_tools_prepare(oai_req *r, const char *template_name, oai_err *e);
/* Frees what oai_parse allocated; accepts a zeroed request. */
void oai_req_free(oai_req *r);

/* One alternative of a token: id and log-probability. */
typedef struct {
    int32_t id;
    double  logprob;
} oai_alt;

/* One generated token with its log-probability (from a PIECE's "probs"). */
typedef struct {
    const char    *text;   /* the token's own text (len bytes) */
    size_t         len;
    double         logprob;
    const oai_alt *top;    /* (n_top) most probable first */
    int            n_top;
} oai_token;

/* The text of token id for an alternative (whose text the front door does not send);
 * writes at most cap bytes to buf and returns the length, or -1 when unknown. */
typedef int (*oai_text_fn)(void *cls, int32_t id, char *buf, size_t cap);

/* The answer being built for one request: its id, model and what it reports. */
typedef struct {
    oai_kind    kind;
    char        id[48];     /* "chatcmpl-..." or "cmpl-..." */
    long long   created;    /* unix seconds */
    char        model[128];
    int         logprobs, top_logprobs, include_usage;
    size_t      text_off;   /* completion log-probs: bytes of text before the next token */
    char       *text;       /* non-streaming: the whole text so far (len) */
    size_t      len, cap;
    void       *lp;         /* non-streaming: log-probs so far (a json_t *) */
    oai_text_fn text_fn;
    void       *text_cls;
    int         index;      /* the choice's index (n > 1), 0 by default */
    int         tools;      /* the answer is parsed for tool calls (family) */
    oait_family family;
    oait_parser tp;         /* streaming: the parser over the text so far */
    char       *ev;         /* streaming: the events the parser made (ev_len) */
    size_t      ev_len;
} oai_out;

/* Starts an answer for r (kind, log-probs, usage) named after model; seq makes the id. */
void oai_out_init(oai_out *o, const oai_req *r, const char *model, long long created, uint64_t seq);
void oai_out_free(oai_out *o);

/* Streaming: the first chat chunk (role "assistant", empty content); NULL for completions. */
char *oai_chunk_role(oai_out *o, size_t *len);
/* Streaming: one "data: {...}\n\n" event with text[0..n) and its tokens' log-probs. */
char *oai_chunk(oai_out *o, const char *text, size_t n, const oai_token *toks, int n_toks, size_t *len);
/* Streaming: the chunk with finish_reason (from the front door's DONE reason), the usage
 * chunk when asked for, and "data: [DONE]\n\n". */
char *oai_chunk_end(oai_out *o, const char *reason, uint64_t n_prompt, uint64_t n_gen, size_t *len);
/* oai_chunk_end in two parts, for n > 1: the finish chunk of one choice, then (after
 * every choice finished) the usage chunk when asked for and "data: [DONE]\n\n". */
char *oai_chunk_finish(oai_out *o, const char *reason, size_t *len);
char *oai_chunk_tail(oai_out *o, uint64_t n_prompt, uint64_t n_gen, size_t *len);
/* Streaming: an error after the 200 headers went out: an error event and "data: [DONE]". */
char *oai_chunk_error(int status, const char *msg, const char *code, size_t *len);

/* Non-streaming: appends a piece and its tokens' log-probs; 0 or -1 (out of memory). */
int oai_add(oai_out *o, const char *text, size_t n, const oai_token *toks, int n_toks);
/* Non-streaming: the whole response body. */
char *oai_response(oai_out *o, const char *reason, uint64_t n_prompt, uint64_t n_gen, size_t *len);
/* The same with n choices (outs[i].index == i; reasons[i] theirs); n_gen is their sum. */
char *oai_response_n(oai_out *outs, int n, const char *const *reasons, uint64_t n_prompt, uint64_t n_gen, size_t *len);

/* OpenAI's finish_reason for a front door DONE reason: "length" for length and
 * context, "stop" for eog, stop and anything else. */
const char *oai_finish_reason(const char *reason);
/* The HTTP status for a front door ERROR with optional code (NULL: absent), before or
 * after it accepted the request. */
int oai_error_status(const char *code, int accepted);
/* {"error":{"message":..,"type":..,"param":..,"code":..}}; param and code may be NULL or "". */
char *oai_error_body(int status, const char *msg, const char *param, const char *code);

#endif
