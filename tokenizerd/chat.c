/*
 * chat.c - chat templates as llama.cpp's llm_chat_detect_template and
 * llm_chat_apply_template define them (recognised by markers, not by running Jinja).
 * Owner: tok.
 */
#include "chat.h"
#include "chat_impl.h"
#include "errcode.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const tmpl_names[CHAT_TMPL_COUNT] = {
    [CHAT_TMPL_CHATML] = "chatml", [CHAT_TMPL_LLAMA2] = "llama2",
    [CHAT_TMPL_LLAMA2_SYS] = "llama2-sys", [CHAT_TMPL_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [CHAT_TMPL_LLAMA2_SYS_STRIP] = "llama2-sys-strip", [CHAT_TMPL_MISTRAL_V1] = "mistral-v1",
    [CHAT_TMPL_MISTRAL_V3] = "mistral-v3", [CHAT_TMPL_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [CHAT_TMPL_MISTRAL_V7] = "mistral-v7", [CHAT_TMPL_LLAMA3] = "llama3",
    [CHAT_TMPL_ZEPHYR] = "zephyr", [CHAT_TMPL_GEMMA] = "gemma", [CHAT_TMPL_PHI3] = "phi3",
    [CHAT_TMPL_PHI4] = "phi4", [CHAT_TMPL_DEEPSEEK] = "deepseek",
    [CHAT_TMPL_DEEPSEEK2] = "deepseek2", [CHAT_TMPL_DEEPSEEK3] = "deepseek3",
    [CHAT_TMPL_COMMAND_R] = "command-r", [CHAT_TMPL_VICUNA] = "vicuna",
    [CHAT_TMPL_VICUNA_ORCA] = "vicuna-orca", [CHAT_TMPL_OPENCHAT] = "openchat",
    [CHAT_TMPL_FALCON3] = "falcon3", [CHAT_TMPL_MONARCH] = "monarch", [CHAT_TMPL_ORION] = "orion",
    [CHAT_TMPL_CHATGLM3] = "chatglm3", [CHAT_TMPL_CHATGLM4] = "chatglm4",
    [CHAT_TMPL_GLMEDGE] = "glmedge", [CHAT_TMPL_MINICPM] = "minicpm",
    [CHAT_TMPL_EXAONE3] = "exaone3", [CHAT_TMPL_GRANITE] = "granite",
    [CHAT_TMPL_MEGREZ] = "megrez", [CHAT_TMPL_LLAMA4] = "llama4",
    [CHAT_TMPL_QWEN3] = "qwen3", [CHAT_TMPL_QWEN3_NOTHINK] = "qwen3-nothink",
    [CHAT_TMPL_GEMMA3] = "gemma3",
};

#define DS_USER      "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define DS_EOS       "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

const char *chat_template_name(chat_tmpl t)
{
    return t >= 0 && t < CHAT_TMPL_COUNT ? tmpl_names[t] : "?";
}

chat_tmpl chat_template_by_name(const char *name)
{
    if (!name)
        return CHAT_TMPL_UNKNOWN;
    for (int t = 0; t < CHAT_TMPL_COUNT; t++)
        if (!strcmp(name, tmpl_names[t]))
            return (chat_tmpl)t;
    return CHAT_TMPL_UNKNOWN;
}

/* Both detectors name the template source s. */
#define HAS(x) (strstr(s, x) != NULL)

/* The [INST] family: mistral v1/v3/v3-tekken/v7 and the llama2 variants. */
static chat_tmpl detect_inst(const char *s)
{
    if (HAS("[SYSTEM_PROMPT]"))
        return CHAT_TMPL_MISTRAL_V7;
    if (HAS("' [INST] ' + system_message") || HAS("[AVAILABLE_TOOLS]")) {
        if (HAS(" [INST]"))
            return CHAT_TMPL_MISTRAL_V1;
        if (HAS("\"[INST]\""))
            return CHAT_TMPL_MISTRAL_V3_TEKKEN;
        return CHAT_TMPL_MISTRAL_V3;
    }
    if (HAS("content.strip()"))
        return CHAT_TMPL_LLAMA2_SYS_STRIP;
    if (HAS("bos_token + '[INST]"))
        return CHAT_TMPL_LLAMA2_SYS_BOS;
    return HAS("<<SYS>>") ? CHAT_TMPL_LLAMA2_SYS : CHAT_TMPL_LLAMA2;
}

/* The checks run in llama.cpp's order, so a template matches what llama.cpp picks;
 * families this module does not render (smolvlm, exaone4, rwkv-world, gigachat, yandex,
 * bailing, hunyuan, kimi, ...) come out as unknown instead of a wrong match. */
chat_tmpl chat_template_detect(const char *s)
{
    if (!s)
        return CHAT_TMPL_UNKNOWN;
    chat_tmpl named = chat_template_by_name(s);
    if (named != CHAT_TMPL_UNKNOWN)
        return named;
    if (HAS("<|im_start|>"))
        return HAS("<|im_sep|>") ? CHAT_TMPL_PHI4
             : HAS("<end_of_utterance>") ? CHAT_TMPL_UNKNOWN : CHAT_TMPL_CHATML;
    if (strncmp(s, "mistral", 7) == 0 || HAS("[INST]"))
        return detect_inst(s);
    if (HAS("<|assistant|>") && HAS("<|end|>"))
        return CHAT_TMPL_PHI3;
    if (HAS("[gMASK]<sop>"))
        return CHAT_TMPL_CHATGLM4;
    if (HAS("<|assistant|>") && HAS("<|user|>"))
        return HAS("</s>") ? CHAT_TMPL_FALCON3 : CHAT_TMPL_GLMEDGE;
    if (HAS("<|{{ item['role'] }}|>") && HAS("<|begin_of_image|>"))
        return CHAT_TMPL_GLMEDGE;
    if (HAS("<|user|>") && HAS("<|endoftext|>"))
        return CHAT_TMPL_ZEPHYR;
    if (HAS("bos_token + message['role']"))
        return CHAT_TMPL_MONARCH;
    if (HAS("<start_of_turn>"))
        return HAS("first_user_prefix") ? CHAT_TMPL_GEMMA3 : CHAT_TMPL_GEMMA;
    if (HAS("'\\n\\nAssistant: ' + eos_token"))
        return CHAT_TMPL_ORION;
    if (HAS("GPT4 Correct "))
        return CHAT_TMPL_OPENCHAT;
    if (HAS("USER: ") && HAS("ASSISTANT: "))
        return HAS("SYSTEM: ") ? CHAT_TMPL_VICUNA_ORCA : CHAT_TMPL_VICUNA;
    if (HAS("### Instruction:") && HAS("<|EOT|>"))
        return CHAT_TMPL_DEEPSEEK;
    if (HAS("<|START_OF_TURN_TOKEN|>") && HAS("<|USER_TOKEN|>"))
        return CHAT_TMPL_COMMAND_R;
    if (HAS("<|start_header_id|>") && HAS("<|end_header_id|>"))
        return CHAT_TMPL_LLAMA3;
    if (HAS("[gMASK]sop"))
        return CHAT_TMPL_CHATGLM3;
    if (HAS("<\xe7\x94\xa8\xe6\x88\xb7>"))
        return CHAT_TMPL_MINICPM;
    if (HAS("'Assistant: ' + message['content'] + eos_token"))
        return CHAT_TMPL_DEEPSEEK2;
    if (HAS(DS_ASSISTANT) && HAS(DS_USER) && HAS(DS_EOS))
        return CHAT_TMPL_DEEPSEEK3;
    if (HAS("[|system|]") && HAS("[|assistant|]") && HAS("[|endofturn|]"))
        return HAS("[|tool|]") ? CHAT_TMPL_UNKNOWN /* exaone4 */ : CHAT_TMPL_EXAONE3;
    if (HAS("rwkv-world") || HAS("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}"))
        return CHAT_TMPL_UNKNOWN; /* rwkv-world */
    if (HAS("<|start_of_role|>"))
        return CHAT_TMPL_GRANITE;
    if (HAS("message['role'] + additional_special_tokens[0]"))
        return CHAT_TMPL_UNKNOWN; /* gigachat */
    if (HAS("<|role_start|>"))
        return CHAT_TMPL_MEGREZ;
    if (HAS("<|header_start|>") && HAS("<|header_end|>"))
        return CHAT_TMPL_LLAMA4;
    return CHAT_TMPL_UNKNOWN;
#undef HAS
}

chat_tmpl chat_template_detect_arch(const char *s, const char *arch)
{
    chat_tmpl t = chat_template_detect(s);
    bool qwen3 = arch && (!strcmp(arch, "qwen3") || !strcmp(arch, "qwen3moe"));
    if (t == CHAT_TMPL_CHATML && qwen3 && strstr(s, "enable_thinking") && strstr(s, "<think>"))
        return CHAT_TMPL_QWEN3;
    return t;
}

/* ---- rendering ---- */

static bool is_role(const chat_msg *m, const char *r) { return !strcmp(m->role, r); }

static void render_llama2(chat_tmpl t, const chat_msg *m, size_t n, sbuf *b)
{
    bool sys = t != CHAT_TMPL_LLAMA2, bos = t == CHAT_TMPL_LLAMA2_SYS_BOS;
    bool strip = t == CHAT_TMPL_LLAMA2_SYS_STRIP, in_turn = true;
    put(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!in_turn) {
            in_turn = true;
            put(b, bos ? "<s>[INST] " : "[INST] ");
        }
        void (*content)(sbuf *, const char *) = strip ? put_content_trim : put_content;
        if (is_role(&m[i], "system")) {
            put(b, sys ? "<<SYS>>\n" : "");
            content(b, m[i].content);
            put(b, sys ? "\n<</SYS>>\n\n" : "\n");
        } else if (is_role(&m[i], "user")) {
            content(b, m[i].content);
            put(b, " [/INST]");
        } else {
            content(b, m[i].content);
            put(b, "</s>");
            in_turn = false;
        }
    }
}

static void render_mistral(chat_tmpl t, const chat_msg *m, size_t n, sbuf *b)
{
    if (t == CHAT_TMPL_MISTRAL_V7) {
        for (size_t i = 0; i < n; i++) {
            if (is_role(&m[i], "system")) {
                put(b, "[SYSTEM_PROMPT] "), put_content(b, m[i].content), put(b, "[/SYSTEM_PROMPT]");
            } else if (is_role(&m[i], "user")) {
                put(b, "[INST] "), put_content(b, m[i].content), put(b, "[/INST]");
            } else {
                put(b, " "), put_content(b, m[i].content), put(b, "</s>");
            }
        }
        return;
    }
    const char *lead = t == CHAT_TMPL_MISTRAL_V1 ? " " : "";
    const char *trail = t == CHAT_TMPL_MISTRAL_V3_TEKKEN ? "" : " ";
    bool in_turn = false;
    /* v3, v3-tekken: the real templates (Mistral-7B-Instruct-v0.3, Nemo, Large-2407) put
     * the first message, a system one, before the last message when that is a user turn
     * (and drop it otherwise); v1 puts it in the first turn, like any system message */
    size_t skip = t != CHAT_TMPL_MISTRAL_V1 && n && is_role(&m[0], "system") ? 1 : 0;
    for (size_t i = skip; i < n; i++) {
        if (!in_turn) {
            put(b, lead), put(b, "[INST]"), put(b, trail);
            in_turn = true;
        }
        if (is_role(&m[i], "system")) {
            put_content(b, m[i].content), put(b, "\n\n");
        } else if (is_role(&m[i], "user")) {
            if (skip && i == n - 1)
                put_content(b, m[0].content), put(b, "\n\n");
            put_content(b, m[i].content), put(b, lead), put(b, "[/INST]");
        } else {
            put(b, trail);
            if (t == CHAT_TMPL_MISTRAL_V3)
                put_content_trim(b, m[i].content);
            else
                put_content(b, m[i].content);
            put(b, "</s>");
            in_turn = false;
        }
    }
}

static void render_gemma(const chat_msg *m, size_t n, bool gen, sbuf *b)
{
    sbuf sys = { 0 };
    for (size_t i = 0; i < n; i++) {
        if (is_role(&m[i], "system")) { /* no system turn: folded into the next user turn */
            put_trim(&sys, m[i].content);
            continue;
        }
        const char *role = is_role(&m[i], "assistant") ? "model" : m[i].role;
        put(b, "<start_of_turn>"), put(b, role), put(b, "\n");
        if (sys.n && strcmp(role, "model")) {
            put_content(b, sys.s), put(b, "\n\n");
            sys.n = 0;
        }
        put_content_trim(b, m[i].content);
        put(b, "<end_of_turn>\n");
    }
    b->oom |= sys.oom;
    free(sys.s);
    if (gen)
        put(b, "<start_of_turn>model\n");
}

static void render_other(chat_tmpl t, const chat_msg *m, size_t n, bool gen, sbuf *b)
{
    sbuf sys = { 0 };
    if (t == CHAT_TMPL_CHATGLM3)
        put(b, "[gMASK]sop");
    if (t == CHAT_TMPL_CHATGLM4)
        put(b, "[gMASK]<sop>");
    for (size_t i = 0; i < n; i++) {
        const char *r = m[i].role, *c = m[i].content;
        bool is_sys = is_role(&m[i], "system"), user = is_role(&m[i], "user");
        switch (t) {
        case CHAT_TMPL_MONARCH:
            put(b, i ? "<s>" : ""), put(b, r), put(b, "\n"), put_content(b, c), put(b, "</s>\n");
            break;
        case CHAT_TMPL_ORION: /* no system turn: folded into the next user turn */
            if (is_sys) {
                put(&sys, c);
            } else if (user) {
                put(b, "Human: ");
                if (sys.n) {
                    put_content(b, sys.s), put(b, "\n\n");
                    sys.n = 0;
                }
                put_content(b, c), put(b, "\n\nAssistant: </s>");
            } else {
                put_content(b, c), put(b, "</s>");
            }
            break;
        case CHAT_TMPL_OPENCHAT:
            if (!is_sys) {
                char cap[2] = { (char)toupper((unsigned char)r[0]), 0 };
                put(b, "GPT4 Correct "), put(b, cap), put(b, r + 1), put(b, ": ");
            }
            put_content(b, c), put(b, "<|end_of_turn|>");
            break;
        case CHAT_TMPL_VICUNA_ORCA:
            put(b, is_sys ? "SYSTEM: " : user ? "USER: " : "ASSISTANT: "), put_content(b, c);
            put(b, is_sys || user ? "\n" : "</s>\n");
            break;
        case CHAT_TMPL_FALCON3:
            put(b, "<|"), put(b, r), put(b, "|>\n"), put_content(b, c), put(b, "\n");
            break;
        case CHAT_TMPL_CHATGLM3:
            put(b, "<|"), put(b, r), put(b, "|>\n "), put_content(b, c);
            break;
        case CHAT_TMPL_CHATGLM4: case CHAT_TMPL_GLMEDGE:
            put(b, "<|"), put(b, r), put(b, "|>\n"), put_content(b, c);
            break;
        case CHAT_TMPL_MINICPM:
            put(b, user ? "<\xe7\x94\xa8\xe6\x88\xb7>" : ""), put_content_trim(b, c);
            put(b, user ? "<AI>" : "");
            break;
        case CHAT_TMPL_EXAONE3:
            put(b, is_sys ? "[|system|]" : user ? "[|user|]" : "[|assistant|]");
            put_content_trim(b, c), put(b, user ? "\n" : "[|endofturn|]\n");
            break;
        case CHAT_TMPL_GRANITE:
            put(b, "<|start_of_role|>"), put(b, r), put(b, "<|end_of_role|>");
            put_content(b, c), put(b, "<|end_of_text|>\n");
            break;
        case CHAT_TMPL_MEGREZ:
            put(b, "<|role_start|>"), put(b, r), put(b, "<|role_end|>"), put_content(b, c);
            put(b, "<|turn_end|>");
            break;
        case CHAT_TMPL_LLAMA4:
            put(b, "<|header_start|>"), put(b, r), put(b, "<|header_end|>\n\n");
            put_content_trim(b, c), put(b, "<|eot|>");
            break;
        default:
            break;
        }
    }
    b->oom |= sys.oom;
    free(sys.s);
    if (!gen)
        return;
    static const char *const prompt[CHAT_TMPL_COUNT] = {
        [CHAT_TMPL_MONARCH] = "<s>assistant\n", [CHAT_TMPL_OPENCHAT] = "GPT4 Correct Assistant:",
        [CHAT_TMPL_VICUNA_ORCA] = "ASSISTANT:", [CHAT_TMPL_FALCON3] = "<|assistant|>\n",
        [CHAT_TMPL_CHATGLM3] = "<|assistant|>", [CHAT_TMPL_CHATGLM4] = "<|assistant|>\n",
        [CHAT_TMPL_GLMEDGE] = "<|assistant|>", [CHAT_TMPL_EXAONE3] = "[|assistant|]",
        [CHAT_TMPL_GRANITE] = "<|start_of_role|>assistant<|end_of_role|>\n",
        [CHAT_TMPL_MEGREZ] = "<|role_start|>assistant<|role_end|>",
        [CHAT_TMPL_LLAMA4] = "<|header_start|>assistant<|header_end|>\n\n",
    };
    put(b, prompt[t] ? prompt[t] : "");
}

/* Templates made of a fixed prefix and suffix per role. */
static void render_simple(chat_tmpl t, const chat_msg *m, size_t n, bool gen, sbuf *b)
{
    for (size_t i = 0; i < n; i++) {
        const char *r = m[i].role, *c = m[i].content;
        bool sys = is_role(&m[i], "system"), user = is_role(&m[i], "user");
        switch (t) {
        case CHAT_TMPL_CHATML:
            put(b, "<|im_start|>"), put(b, r), put(b, "\n"), put_content(b, c), put(b, "<|im_end|>\n");
            break;
        case CHAT_TMPL_PHI3: /* Phi-3.5's template skips an empty system message */
            if (!sys || *c)
                put(b, "<|"), put(b, r), put(b, "|>\n"), put_content(b, c), put(b, "<|end|>\n");
            break;
        case CHAT_TMPL_PHI4:
            put(b, "<|im_start|>"), put(b, r), put(b, "<|im_sep|>"), put_content(b, c), put(b, "<|im_end|>");
            break;
        case CHAT_TMPL_ZEPHYR:
            put(b, "<|"), put(b, r), put(b, "|>\n"), put_content(b, c), put(b, "<|endoftext|>\n");
            break;
        case CHAT_TMPL_LLAMA3:
            put(b, "<|start_header_id|>"), put(b, r), put(b, "<|end_header_id|>\n\n");
            put_content_trim(b, c), put(b, "<|eot_id|>");
            break;
        case CHAT_TMPL_VICUNA:
            put(b, sys ? "" : user ? "USER: " : "ASSISTANT: "), put_content(b, c);
            put(b, sys ? "\n\n" : user ? "\n" : "</s>\n");
            break;
        case CHAT_TMPL_DEEPSEEK:
            put(b, sys ? "" : user ? "### Instruction:\n" : "### Response:\n"), put_content(b, c);
            put(b, sys ? "" : user ? "\n" : "\n<|EOT|>\n");
            break;
        case CHAT_TMPL_DEEPSEEK2:
            put(b, sys ? "" : user ? "User: " : "Assistant: "), put_content(b, c);
            put(b, sys || user ? "\n\n" : DS_EOS);
            break;
        case CHAT_TMPL_DEEPSEEK3:
            put(b, sys ? "" : user ? DS_USER : DS_ASSISTANT), put_content(b, c);
            put(b, sys ? "\n\n" : user ? "" : DS_EOS);
            break;
        case CHAT_TMPL_COMMAND_R:
            put(b, sys ? "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>" : user ?
                "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>" : "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
            put_content_trim(b, c), put(b, "<|END_OF_TURN_TOKEN|>");
            break;
        default:
            break;
        }
    }
    if (!gen) {
        put(b, t == CHAT_TMPL_PHI3 ? "<|endoftext|>" : ""); /* Phi-3's template ends with eos_token */
        return;
    }
    static const char *const prompt[CHAT_TMPL_COUNT] = {
        [CHAT_TMPL_CHATML] = "<|im_start|>assistant\n", [CHAT_TMPL_PHI3] = "<|assistant|>\n",
        [CHAT_TMPL_PHI4] = "<|im_start|>assistant<|im_sep|>", [CHAT_TMPL_ZEPHYR] = "<|assistant|>\n",
        [CHAT_TMPL_LLAMA3] = "<|start_header_id|>assistant<|end_header_id|>\n\n",
        [CHAT_TMPL_VICUNA] = "ASSISTANT:", [CHAT_TMPL_DEEPSEEK] = "### Response:\n",
        [CHAT_TMPL_DEEPSEEK2] = "Assistant:", [CHAT_TMPL_DEEPSEEK3] = DS_ASSISTANT,
        [CHAT_TMPL_COMMAND_R] = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
    };
    put(b, prompt[t] ? prompt[t] : "");
}

/* Templates that print the role verbatim accept any role; the others know three. */
static bool role_ok(chat_tmpl t, const char *role)
{
    switch (t) {
    case CHAT_TMPL_CHATML: case CHAT_TMPL_PHI3: case CHAT_TMPL_PHI4: case CHAT_TMPL_ZEPHYR:
    case CHAT_TMPL_LLAMA3: case CHAT_TMPL_MONARCH: case CHAT_TMPL_OPENCHAT: case CHAT_TMPL_FALCON3:
    case CHAT_TMPL_CHATGLM3: case CHAT_TMPL_CHATGLM4: case CHAT_TMPL_GLMEDGE:
    case CHAT_TMPL_GRANITE: case CHAT_TMPL_MEGREZ: case CHAT_TMPL_LLAMA4:
        return role[0] && !strpbrk(role, "<>|[]\n");
    default:
        break;
    }
    return !strcmp(role, "system") || !strcmp(role, "user") || !strcmp(role, "assistant");
}

int chat_render_spans(chat_tmpl t, const chat_msg *msgs, size_t n, bool add_generation_prompt,
                      char **out, tok_span **spans, size_t *n_spans, char *err, size_t errlen)
{
    *out = NULL;
    if (spans) {
        *spans = NULL;
        *n_spans = 0;
    }
    if (t < 0 || t >= CHAT_TMPL_COUNT)
        return errf(err, errlen, "chat_render: unknown chat template (id %d)", (int)t);
    if (n && !msgs)
        return errf(err, errlen, "chat_render: messages are NULL");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return errf(err, errlen, "chat_render: message %zu has a NULL %s", i,
                              msgs[i].role ? "content" : "role");
        if (!role_ok(t, msgs[i].role))
            return errf(err, errlen, "chat_render: message %zu: role '%.40s' is not "
                              "supported by template %s", i, msgs[i].role, tmpl_names[t]);
    }
    sbuf b = { 0 };
    put(&b, "");
    switch (t) {
    case CHAT_TMPL_LLAMA2: case CHAT_TMPL_LLAMA2_SYS: case CHAT_TMPL_LLAMA2_SYS_BOS:
    case CHAT_TMPL_LLAMA2_SYS_STRIP:
        render_llama2(t, msgs, n, &b);
        break;
    case CHAT_TMPL_MISTRAL_V1: case CHAT_TMPL_MISTRAL_V3: case CHAT_TMPL_MISTRAL_V3_TEKKEN:
    case CHAT_TMPL_MISTRAL_V7:
        render_mistral(t, msgs, n, &b);
        break;
    case CHAT_TMPL_GEMMA:
        render_gemma(msgs, n, add_generation_prompt, &b);
        break;
    case CHAT_TMPL_QWEN3: case CHAT_TMPL_QWEN3_NOTHINK:
        chat_render_qwen3(msgs, n, add_generation_prompt, t == CHAT_TMPL_QWEN3, &b);
        break;
    case CHAT_TMPL_GEMMA3:
        if (chat_render_gemma3(msgs, n, add_generation_prompt, &b, err, errlen) != 0) {
            free(b.s);
            free(b.spans);
            return -1;
        }
        break;
    case CHAT_TMPL_VICUNA_ORCA: case CHAT_TMPL_OPENCHAT: case CHAT_TMPL_FALCON3:
    case CHAT_TMPL_MONARCH: case CHAT_TMPL_ORION: case CHAT_TMPL_CHATGLM3: case CHAT_TMPL_CHATGLM4:
    case CHAT_TMPL_GLMEDGE: case CHAT_TMPL_MINICPM: case CHAT_TMPL_EXAONE3: case CHAT_TMPL_GRANITE:
    case CHAT_TMPL_MEGREZ: case CHAT_TMPL_LLAMA4:
        render_other(t, msgs, n, add_generation_prompt, &b);
        break;
    default:
        render_simple(t, msgs, n, add_generation_prompt, &b);
        break;
    }
    if (b.oom) {
        free(b.s);
        free(b.spans);
        return errf(err, errlen, "chat_render: out of memory");
    }
    *out = b.s;
    if (spans) {
        *spans = b.spans;
        *n_spans = b.n_spans;
    } else {
        free(b.spans);
    }
    return 0;
}

int chat_render(chat_tmpl t, const chat_msg *msgs, size_t n, bool add_generation_prompt,
                char **out, char *err, size_t errlen)
{
    return chat_render_spans(t, msgs, n, add_generation_prompt, out, NULL, NULL, err, errlen);
}
