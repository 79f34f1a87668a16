/*
 * chat.h - chat templates: recognise the Jinja source in `tokenizer.chat_template`
 * the way llama.cpp's llm_chat_detect_template does, and render system / user /
 * assistant messages into the prompt text llama.cpp's llm_chat_apply_template builds.
 * The rendered text holds control-token text (e.g. "<|im_start|>"): tokenize it with
 * parse_special = true, or better with tok_encode_guarded and the content spans from
 * chat_render_spans, so that message contents cannot inject control tokens.
 *
 *   chat_tmpl t = chat_template_detect(gguf_get_str(g, "tokenizer.chat_template", NULL));
 *   if (t == CHAT_TMPL_UNKNOWN) ... // or chat_template_by_name("chatml")
 *   chat_msg m[] = { { "system", "Be brief." }, { "user", "Hi" } };
 *   char *text; char err[256];
 *   if (chat_render(t, m, 2, true, &text, err, sizeof err) != 0) ...
 *   ... free(text);
 *
 * Ownership: chat_render's *out is malloc'd, the caller frees it. Messages are borrowed.
 * Owner: tok (tokenizerd/chat.c).
 */
#ifndef LLM_CHAT_H
#define LLM_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "tok.h"

typedef enum {
    CHAT_TMPL_UNKNOWN = -1,
    CHAT_TMPL_CHATML = 0,        /* also Qwen / Qwen2 */
    CHAT_TMPL_LLAMA2,            /* [INST] ... [/INST], system folded into the first user */
    CHAT_TMPL_LLAMA2_SYS,        /* with <<SYS>> */
    CHAT_TMPL_LLAMA2_SYS_BOS,    /* with <<SYS>> and <s> before each [INST] */
    CHAT_TMPL_LLAMA2_SYS_STRIP,  /* with <<SYS>>, message content trimmed */
    CHAT_TMPL_MISTRAL_V1,
    CHAT_TMPL_MISTRAL_V3,
    CHAT_TMPL_MISTRAL_V3_TEKKEN,
    CHAT_TMPL_MISTRAL_V7,
    CHAT_TMPL_LLAMA3,
    CHAT_TMPL_ZEPHYR,
    CHAT_TMPL_GEMMA,
    CHAT_TMPL_PHI3,
    CHAT_TMPL_PHI4,
    CHAT_TMPL_DEEPSEEK,          /* deepseek-coder style ### Instruction / ### Response */
    CHAT_TMPL_DEEPSEEK2,         /* User: / Assistant: */
    CHAT_TMPL_DEEPSEEK3,         /* <｜User｜> / <｜Assistant｜> */
    CHAT_TMPL_COMMAND_R,
    CHAT_TMPL_VICUNA,
    CHAT_TMPL_VICUNA_ORCA,
    CHAT_TMPL_OPENCHAT,
    CHAT_TMPL_FALCON3,
    CHAT_TMPL_MONARCH,
    CHAT_TMPL_ORION,
    CHAT_TMPL_CHATGLM3,
    CHAT_TMPL_CHATGLM4,
    CHAT_TMPL_GLMEDGE,
    CHAT_TMPL_MINICPM,
    CHAT_TMPL_EXAONE3,
    CHAT_TMPL_GRANITE,
    CHAT_TMPL_MEGREZ,
    CHAT_TMPL_LLAMA4,
    CHAT_TMPL_QWEN3,             /* ChatML with <think> handling (chat_qwen3.c) */
    CHAT_TMPL_QWEN3_NOTHINK,     /* the same with enable_thinking=false */
    CHAT_TMPL_GEMMA3,            /* Gemma 3's Jinja template (chat_gemma3.c) */
    CHAT_TMPL_COUNT
} chat_tmpl;

typedef struct {
    const char *role;    /* "system", "user" or "assistant" (and "tool": chat_render_tools) */
    const char *content; /* UTF-8, NUL-terminated */
} chat_msg;

/* Recognises a Jinja chat template by the markers it contains; CHAT_TMPL_UNKNOWN for
 * NULL or a template it does not know. A bare name (e.g. "chatml") is also accepted. */
chat_tmpl chat_template_detect(const char *jinja_source);
/* chat_template_detect knowing the model's general.architecture (may be NULL): Qwen3's
 * template (ChatML with "enable_thinking" and "<think>") is qwen3 on a qwen3 or qwen3moe
 * model; elsewhere (tiny-qwen2 carries it) it stays ChatML, as chat_template_detect says. */
chat_tmpl chat_template_detect_arch(const char *jinja_source, const char *arch);
/* The template with this name (llama.cpp's names: "chatml", "llama2", "llama3",
 * "mistral-v7", "zephyr", "gemma", "phi3", "deepseek3", ...); CHAT_TMPL_UNKNOWN if none. */
chat_tmpl chat_template_by_name(const char *name);
/* The name of t ("?" when out of range). */
const char *chat_template_name(chat_tmpl t);

/* Renders msgs with template t and, if add_generation_prompt, the assistant prefix.
 * 0 and a malloc'd NUL-terminated *out, or -1 and err naming the problem (unknown
 * template, a NULL role or content, a role the template cannot express). */
int chat_render(chat_tmpl t, const chat_msg *msgs, size_t n, bool add_generation_prompt,
                char **out, char *err, size_t errlen);

/* As chat_render, and also the spans of *out that hold message contents (malloc'd,
 * caller frees; in order, disjoint). Tokenize with tok_encode_guarded(out, spans) so
 * that control-token text typed by a user stays text. spans may be NULL. */
int chat_render_spans(chat_tmpl t, const chat_msg *msgs, size_t n, bool add_generation_prompt,
                      char **out, tok_span **spans, size_t *n_spans, char *err, size_t errlen);

/* Tools (function calling). A chat_call is one tool call of the assistant message
 * msgs[msg] (name and args, a JSON object's text), or, with name NULL, the id of the
 * call that the tool message msgs[msg] answers. Tool definitions are the JSON texts of
 * OpenAI's tool objects ({"type": "function", "function": {"name", "description",
 * "parameters"}}). Messages with role "tool" carry results. */
typedef struct {
    size_t      msg;
    const char *id;    /* the call's id (Mistral: 9 letters and digits) */
    const char *name;  /* NULL: msgs[msg] is the tool result for call id */
    const char *args;  /* JSON object text */
} chat_call;

typedef struct {
    const char *const *tools;  /* (n_tools) tool objects, JSON text */
    size_t             n_tools;
    const chat_call   *calls;  /* (n_calls) in message order */
    size_t             n_calls;
    const char        *default_system; /* chatml: the system message when the chat has
                                        * none (chat_tools_default_system), or NULL */
} chat_tools;

/* The system message a template writes when a chat has none (Qwen2.5's "You are Qwen,
 * created by Alibaba Cloud. ..."), found in its Jinja source; NULL for none. A static
 * string. */
const char *chat_tools_default_system(const char *jinja_source);

/* Whether template t renders tools: chatml (the Hermes / Qwen <tool_call> style),
 * llama3 (Llama 3.1's JSON style, results in the ipython role), mistral-v3 and
 * mistral-v3-tekken ([AVAILABLE_TOOLS], [TOOL_CALLS], [TOOL_RESULTS]); qwen3 and
 * qwen3-nothink render a chat with tools as chatml does. */
bool chat_tools_supported(chat_tmpl t);

/* chat_render_spans with tools: the definitions and the calls and results in the
 * history rendered as the family's own Jinja template writes them (with tools NULL or
 * empty and no tool message, exactly chat_render_spans). -1 and err when t renders no
 * tools, a JSON text is malformed, a call refers to no assistant message, ... */
int chat_render_tools(chat_tmpl t, const chat_msg *msgs, size_t n, const chat_tools *tools,
                      bool add_generation_prompt, char **out, tok_span **spans, size_t *n_spans,
                      char *err, size_t errlen);

#endif
