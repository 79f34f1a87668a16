/*
 * tok_pre.c - the BPE pre-tokenizers: llama.cpp's per-`tokenizer.ggml.pre` regex
 * lists, written as hand matchers over codepoint classes (unicode.h). Each pass
 * splits every current fragment into its matches and the gaps between them, in
 * order, exactly like llama.cpp's unicode_regex_split: the GPT-2 and Llama-3 style
 * patterns follow its custom splitters (ordered alternation, `\s+(?!\S)` leaving the
 * last space for the next word), the others follow std::regex leftmost-first search
 * (non-ASCII whitespace behaves as \s, as llama.cpp arranges). Owner: tok.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_impl.h"
#include "unicode.h"

typedef enum {
    PASS_GPT2,       /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    PASS_LLAMA3,     /* (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|... */
    PASS_QWEN2,      /* the same with \p{N} */
    PASS_PUNCT_RUN,  /* [\p{P}\$\+<=>\^~\|]+ */
    PASS_NUM_RUN,    /* \p{N}+ */
    PASS_NUM_ONE,    /* \p{N} */
    PASS_DIGIT3,     /* [0-9][0-9][0-9] */
    PASS_NEWLINE,    /* [\r\n] */
    PASS_DS_LETTER,  /* \s?[A-Za-zµÀ-Ö...]+ (deepseek-llm's letter list) */
    PASS_DS_PUNCT,   /* \s?[!-/:-~！-／：-～‘-‟　-。]+ */
    PASS_WS_END,     /* \s+$ */
    PASS_DS_CJK,     /* [一-龥ࠀ-一가-퟿]+ */
    PASS_SP_LETTER,  /* \s?\p{L}+ */
    PASS_SP_PUNCT,   /* \s?\p{P}+ */
    PASS_NONE
} pass_kind;

static const pass_kind pre_passes[TOK_PRE_COUNT][7] = {
    [TOK_PRE_DEFAULT]        = { PASS_PUNCT_RUN, PASS_GPT2, PASS_NUM_RUN, PASS_DIGIT3, PASS_NONE },
    [TOK_PRE_LLAMA3]         = { PASS_LLAMA3, PASS_NONE },
    [TOK_PRE_QWEN2]          = { PASS_QWEN2, PASS_NONE },
    [TOK_PRE_GPT2]           = { PASS_GPT2, PASS_NONE },
    [TOK_PRE_STARCODER]      = { PASS_NUM_ONE, PASS_GPT2, PASS_NONE },
    [TOK_PRE_FALCON]         = { PASS_PUNCT_RUN, PASS_GPT2, PASS_DIGIT3, PASS_NONE },
    [TOK_PRE_DEEPSEEK_LLM]   = { PASS_NEWLINE, PASS_DS_LETTER, PASS_DS_PUNCT, PASS_WS_END,
                                 PASS_DS_CJK, PASS_NUM_RUN, PASS_NONE },
    [TOK_PRE_DEEPSEEK_CODER] = { PASS_NEWLINE, PASS_SP_LETTER, PASS_SP_PUNCT, PASS_DS_CJK,
                                 PASS_NUM_ONE, PASS_NONE },
};

static const uint32_t ds_letter[][2] = {
    {0x0041, 0x005A}, {0x0061, 0x007A}, {0x00B5, 0x00B5}, {0x00C0, 0x00D6}, {0x00D8, 0x00F6}, {0x00F8, 0x01BA},
    {0x01BC, 0x01BF}, {0x01C4, 0x0293}, {0x0295, 0x02AF}, {0x0370, 0x0373}, {0x0376, 0x0376}, {0x0377, 0x0377},
    {0x037B, 0x037D}, {0x037F, 0x037F}, {0x0386, 0x0386}, {0x0388, 0x038A}, {0x038C, 0x038C}, {0x038E, 0x03A1},
    {0x03A3, 0x03F5}, {0x03F7, 0x0481}, {0x048A, 0x052F}, {0x0531, 0x0556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5},
    {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A},
    {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4},
    {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D},
    {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139},
    {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2183}, {0x2184, 0x2184}, {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF2}, {0x2CF3, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B},
    {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2},
    {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
static const uint32_t ds_punct[][2] = {
    {0x0021, 0x002F}, {0x003A, 0x007E}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E}, {0x2018, 0x201F}, {0x3000, 0x3002},
};
static const uint32_t ds_cjk[][2] = {
    {0x4E00, 0x9FA5}, {0x0800, 0x4E00}, {0xAC00, 0xD7FF},
};

static bool in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp)
{
    for (size_t i = 0; i < n; i++)
        if (cp >= r[i][0] && cp <= r[i][1])
            return true;
    return false;
}
#define IN(tab, cp) in_ranges(tab, sizeof tab / sizeof *tab, cp)

/* One pass over one fragment [beg, end) of the text. */
typedef struct {
    const uint32_t *cp;
    const uint8_t  *fl;   /* uni_flags of each codepoint */
    size_t          beg, end, prev; /* prev: end of the last piece emitted */
    uint32_t       *out;  /* piece lengths */
    size_t          n_out, cap_out;
    bool            oom;
} splitter;

static void emit(splitter *s, size_t end)
{
    if (end <= s->prev)
        return;
    if (s->n_out == s->cap_out) {
        size_t cap = s->cap_out ? s->cap_out * 2 : 256;
        uint32_t *p = realloc(s->out, cap * sizeof *p);
        if (!p) {
            s->oom = true;
            return;
        }
        s->out = p;
        s->cap_out = cap;
    }
    s->out[s->n_out++] = (uint32_t)(end - s->prev);
    s->prev = end;
}

static inline bool is_l(const splitter *s, size_t i) { return i < s->end && (s->fl[i] & UNI_LETTER); }
static inline bool is_n(const splitter *s, size_t i) { return i < s->end && (s->fl[i] & UNI_NUMBER); }
static inline bool is_ws(const splitter *s, size_t i) { return i < s->end && (s->fl[i] & UNI_SPACE); }
static inline bool is_p(const splitter *s, size_t i) { return i < s->end && (s->fl[i] & UNI_PUNCT); }
/* [^\s\p{L}\p{N}] */
static inline bool is_other(const splitter *s, size_t i)
{
    return i < s->end && !(s->fl[i] & (UNI_SPACE | UNI_LETTER | UNI_NUMBER));
}
static inline uint32_t cp_at(const splitter *s, size_t i) { return i < s->end ? s->cp[i] : 0xFFFFFFFFu; }

/* 's 't 're 've 'm 'll 'd at i (ASCII case-folded if fold): its length or 0. */
static size_t contraction(const splitter *s, size_t i, bool fold)
{
    if (cp_at(s, i) != '\'' || i + 1 >= s->end)
        return 0;
    uint32_t a = cp_at(s, i + 1), b = i + 2 < s->end ? cp_at(s, i + 2) : 0;
    if (fold) {
        a = uni_ascii_lower(a);
        b = uni_ascii_lower(b);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 3;
    return 0;
}

/* Whitespace run at i: \s+(?!\S) keeps the last space for the next word unless the
 * run ends the fragment; the caller has handled newlines where they matter. */
static size_t ws_run_end(const splitter *s, size_t i)
{
    size_t j = i;
    while (is_ws(s, j))
        j++;
    if (j - i > 1 && j < s->end)
        return j - 1;
    return j;
}

static void split_gpt2(splitter *s)
{
    for (size_t i = s->beg; i < s->end && !s->oom;) {
        size_t c = contraction(s, i, false), j;
        if (c) {
            emit(s, i += c);
            continue;
        }
        size_t k = i + (cp_at(s, i) == ' '); /* the optional leading space */
        if (is_l(s, k)) {
            for (j = k; is_l(s, j); j++) ;
        } else if (is_n(s, k)) {
            for (j = k; is_n(s, j); j++) ;
        } else if (is_other(s, k)) {
            for (j = k; is_other(s, j); j++) ;
        } else if (is_ws(s, i)) {
            j = ws_run_end(s, i);
        } else {
            j = i + 1;
        }
        emit(s, i = j);
    }
}

static void split_llama3(splitter *s, size_t max_digits)
{
    for (size_t i = s->beg; i < s->end && !s->oom;) {
        size_t c = contraction(s, i, true), j;
        uint32_t cp = cp_at(s, i);
        if (c) {
            emit(s, i += c);
            continue;
        }
        if (cp != '\r' && cp != '\n' && !is_n(s, i) && (is_l(s, i) || is_l(s, i + 1))) {
            for (j = i + 1; is_l(s, j); j++) ;
        } else if (is_n(s, i)) {
            for (j = i; is_n(s, j) && j - i < max_digits; j++) ;
        } else if (is_other(s, i + (cp == ' '))) {
            for (j = i + (cp == ' '); is_other(s, j); j++) ;
            while (cp_at(s, j) == '\r' || cp_at(s, j) == '\n')
                j++;
        } else if (is_ws(s, i)) {
            size_t last_nl = 0;
            for (j = i; is_ws(s, j); j++)
                if (s->cp[j] == '\r' || s->cp[j] == '\n')
                    last_nl = j + 1;
            j = last_nl ? last_nl : ws_run_end(s, i);
        } else {
            j = i + 1;
        }
        emit(s, i = j);
    }
}

/* As wregex sees it: non-ASCII whitespace is replaced by \v before matching. */
static inline uint32_t wcp(const splitter *s, size_t i)
{
    uint32_t c = s->cp[i];
    return c > 0x7F && (s->fl[i] & UNI_SPACE) ? 0x0B : c;
}

static bool in_class(const splitter *s, pass_kind k, size_t i)
{
    if (i >= s->end)
        return false;
    switch (k) {
    case PASS_PUNCT_RUN: {
        uint32_t c = s->cp[i];
        return (is_p(s, i) && !(s->fl[i] & UNI_SPACE)) || c == '$' || c == '+' || c == '<' ||
               c == '=' || c == '>' || c == '^' || c == '~' || c == '|';
    }
    case PASS_NUM_RUN: case PASS_NUM_ONE: return is_n(s, i);
    case PASS_DIGIT3: return s->cp[i] >= '0' && s->cp[i] <= '9';
    case PASS_NEWLINE: return s->cp[i] == '\r' || s->cp[i] == '\n';
    case PASS_DS_LETTER: return IN(ds_letter, wcp(s, i));
    case PASS_DS_PUNCT: return IN(ds_punct, wcp(s, i));
    case PASS_DS_CJK: return IN(ds_cjk, wcp(s, i));
    case PASS_SP_LETTER: return is_l(s, i);
    case PASS_SP_PUNCT: return is_p(s, i);
    default: return false;
    }
}

/* Length of the match starting exactly at i, 0 if none (leftmost-first search). */
static size_t match_at(const splitter *s, pass_kind k, size_t i, size_t trailing_ws)
{
    size_t j = i;
    switch (k) {
    case PASS_NUM_ONE: case PASS_NEWLINE:
        return in_class(s, k, i);
    case PASS_DIGIT3:
        return in_class(s, k, i) && in_class(s, k, i + 1) && in_class(s, k, i + 2) ? 3 : 0;
    case PASS_WS_END:
        return i == trailing_ws ? s->end - i : 0;
    case PASS_DS_LETTER: case PASS_DS_PUNCT: case PASS_SP_LETTER: case PASS_SP_PUNCT:
        if (is_ws(s, j) && in_class(s, k, j + 1))
            j++; /* \s? */
        /* fallthrough */
    default:
        while (in_class(s, k, j))
            j++;
        return j - i;
    }
}

static void split_search(splitter *s, pass_kind k)
{
    size_t trailing = s->end; /* start of the fragment's trailing whitespace, if any */
    while (trailing > s->beg && is_ws(s, trailing - 1))
        trailing--;
    if (trailing == s->end)
        trailing = (size_t)-1;
    for (size_t i = s->beg; i < s->end && !s->oom;) {
        size_t m = match_at(s, k, i, trailing);
        if (!m) {
            i++;
            continue;
        }
        emit(s, i); /* the gap before the match */
        emit(s, i += m);
    }
    emit(s, s->end);
}

bool tok_pre_split(tok_pre pre, const uint32_t *cps, size_t n, uint32_t **lens, size_t *n_lens)
{
    *lens = NULL;
    *n_lens = 0;
    if (n == 0)
        return true;
    uint8_t *fl = malloc(n);
    uint32_t *cur = malloc(sizeof *cur);
    if (!fl || !cur) {
        free(fl);
        free(cur);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        fl[i] = uni_flags(cps[i]);
    cur[0] = (uint32_t)n;
    size_t n_cur = 1;
    bool ok = true;
    for (int p = 0; ok && pre_passes[pre][p] != PASS_NONE; p++) {
        pass_kind k = pre_passes[pre][p];
        splitter s = { .cp = cps, .fl = fl };
        for (size_t f = 0, at = 0; f < n_cur && !s.oom; at += cur[f++]) {
            s.beg = s.prev = at;
            s.end = at + cur[f];
            if (k == PASS_GPT2)
                split_gpt2(&s);
            else if (k == PASS_LLAMA3 || k == PASS_QWEN2)
                split_llama3(&s, k == PASS_LLAMA3 ? 3 : 1);
            else
                split_search(&s, k);
        }
        free(cur);
        cur = s.out;
        n_cur = s.n_out;
        ok = !s.oom;
    }
    free(fl);
    if (!ok) {
        free(cur);
        return false;
    }
    *lens = cur;
    *n_lens = n_cur;
    return true;
}
