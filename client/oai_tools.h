/*
 * oai_tools.h - OpenAI function calling in the gateway (owner: gateway): the request's
 * tools, tool_choice, parallel_tool_calls and the tool calls and results of its history
 * checked and held for the GENERATE (the front door renders them with the model's chat
 * template, tokenizerd/chat.h); the grammar that makes tool_choice "required" or a named
 * function produce calls in the family's syntax; and the parser that turns generated
 * text back into tool calls, streamed or whole.
 *
 *   oait_req t = {0}; oait_init(&t);
 *   oait_parse_tools(&t, tools_json, err, sizeof err);    // per key of the request body
 *   oait_parse_choice(&t, choice_json, err, sizeof err);
 *   oait_parse_message(&t, message_json, index, err, sizeof err);
 *   oait_check(&t, err, sizeof err);                      // after every key
 *   oait_family f = oait_family_of("chatml");             // the front door's template
 *   char *gbnf = oait_grammar(&t, f, err, sizeof err);    // NULL and err "" when none is needed
 *
 *   oait_parser p; oait_parser_init(&p, f);
 *   oait_feed(&p, text, n, &sink);     // sink.content(...) for text, sink.call(...) per call
 *   oait_finish(&p, &sink);            // the rest; p.n_calls > 0: finish_reason "tool_calls"
 *   oait_parser_free(&p);
 *
 * Families and their call syntax: hermes (chatml templates, Qwen):
 * <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one after another;
 * llama3 (Llama 3.1 JSON): the whole answer is {"name": ..., "parameters": {...}}, one
 * call; mistral (mistral-v3, mistral-v3-tekken): [TOOL_CALLS][{"name": ..., "arguments":
 * {...}}, ...]. Text that looks like the start of a call is held back while streaming;
 * a call that does not parse is given back as content.
 *
 * Ownership: oait_req owns its strings (oait_req_free); oait_grammar's text is malloc'd
 * for the caller; a sink's strings are borrowed for the call.
 */
#ifndef LLM_OAI_TOOLS_H
#define LLM_OAI_TOOLS_H

#include <jansson.h>
#include <stddef.h>

#define OAIT_MAX_TOOLS 128   /* the front door's limit */
#define OAIT_MAX_CALLS 8     /* calls one answer may make under a grammar */

typedef enum { OAIT_UNSUPPORTED = -1, OAIT_HERMES = 0, OAIT_LLAMA3, OAIT_MISTRAL, OAIT_FAMILY_COUNT } oait_family;
typedef enum { OAIT_AUTO, OAIT_NONE, OAIT_REQUIRED, OAIT_NAMED } oait_choice;

typedef struct {
    char      **tools;      /* (n_tools) the tool objects, compact JSON */
    char      **names;      /* (n_tools) their functions' names */
    char      **params;     /* (n_tools) their parameters schemas, compact JSON */
    int         n_tools;
    oait_choice choice;
    char       *named;      /* OAIT_NAMED: the function's name */
    int         parallel;   /* parallel_tool_calls (OpenAI's default: true) */
    char      **tcalls;     /* (n_tcalls) message index, id, name, arguments per history
                             * call; index, tool_call_id, "", "" per tool result */
    int         n_tcalls, cap_tcalls;
} oait_req;

void oait_init(oait_req *t);
void oait_req_free(oait_req *t);
/* "tools": an array of {"type": "function", "function": {"name", "description",
 * "parameters"}}; each name [A-Za-z0-9_-]{1,64} and unique, each parameters schema one
 * jsg_to_gbnf converts. 0, or -1 with err naming the bad tool. */
int oait_parse_tools(oait_req *t, const json_t *v, char *err, size_t cap);
/* "tool_choice": "auto", "none", "required" or {"type": "function", "function": {"name"}}. */
int oait_parse_choice(oait_req *t, const json_t *v, char *err, size_t cap);
/* A history message msgs[idx]: an assistant's "tool_calls" ({"id", "type": "function",
 * "function": {"name", "arguments": a JSON object's text}}) or a tool message's
 * "tool_call_id". Other messages: nothing to do. */
int oait_parse_message(oait_req *t, const json_t *m, size_t idx, char *err, size_t cap);
/* After every key: a named choice names a tool, required has tools. */
int oait_check(const oait_req *t, char *err, size_t cap);
/* Whether the answer is parsed for calls (tools given and tool_choice not "none"). */
int oait_active(const oait_req *t);

/* The family of the front door's chat template (chat_template_name), or OAIT_UNSUPPORTED. */
oait_family oait_family_of(const char *template_name);
/* tool_choice required or named: GBNF allowing only calls of the chosen tools in f's
 * syntax (1 to n calls with parallel_tool_calls, n the tools chosen, at most
 * OAIT_MAX_CALLS; llama3 one). NULL with err "" when no grammar is needed; NULL with
 * err set on failure. */
char *oait_grammar(const oait_req *t, oait_family f, char *err, size_t cap);

/* One parsed call. */
typedef struct {
    const char *id;    /* "call_..." (mistral: 9 letters and digits) */
    const char *name;
    const char *args;  /* the arguments object, compact JSON */
} oait_call;

/* Where parsed output goes. With head and args (streaming), a hermes or llama3 call
 * whose object begins {"name": ..., "arguments": { is sent as it comes: head once, then
 * args with each new piece of the arguments' text (a call cut short stays cut short: a
 * stream cannot take back what it sent); without them, or for a call written another
 * way, call gives each whole call once it parses (one that does not is content). Either
 * way a call's arguments are its text as generated when it is an object (so a stream and
 * a whole answer agree), compact JSON when it came as a string. */
typedef struct {
    void (*content)(void *cls, const char *text, size_t n);
    void (*call)(void *cls, int index, const oait_call *c);
    void (*head)(void *cls, int index, const char *id, const char *name);
    void (*args)(void *cls, int index, const char *text, size_t n);
    void *cls;
} oait_sink;

/* Where a JSON object ends, scanned piece by piece (strings skipped). */
typedef struct {
    size_t pos;
    int    depth, in_str, esc;
} oait_scan;

typedef struct {
    oait_family fam;
    char       *buf;      /* all text so far (len) */
    size_t      len, cap;
    size_t      sent;     /* bytes of buf given out as content or consumed by calls */
    int         in_call;  /* buf[sent..) starts a call region */
    int         never;    /* llama3: the answer did not start as a call */
    int         n_calls;
    int         oom;
    int         streaming;  /* a call's head went out; its arguments go on at args_at */
    size_t      args_at, args_sent, args_end;
    oait_scan   scan;
} oait_parser;

void oait_parser_init(oait_parser *p, oait_family fam);
/* Takes the next generated text; content that cannot start a call goes out at once,
 * each call as soon as it is complete. */
void oait_feed(oait_parser *p, const char *text, size_t n, const oait_sink *s);
/* The end of the generation: the held text as content, or a malformed call as content. */
void oait_finish(oait_parser *p, const oait_sink *s);
void oait_parser_free(oait_parser *p);

#endif
