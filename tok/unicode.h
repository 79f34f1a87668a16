/*
 * unicode.h - the Unicode facts the tokenizers need: codepoint classes (from tables
 * generated out of real Unicode data by gen_unicode.py), UTF-8 decoding with
 * llama.cpp's error behaviour, and GPT-2's byte <-> printable-codepoint mapping.
 *
 *   size_t off = 0; uint32_t cp = uni_decode(s, len, &off);   // U+FFFD + 1 byte if bad
 *   if (uni_flags(cp) & UNI_LETTER) ...
 *   char buf[4]; int n = uni_encode(cp, buf);
 *
 * Everything here is stateless apart from a lookup table built once (thread-safe).
 * Owner: tok.
 */
#ifndef LLM_UNICODE_H
#define LLM_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Codepoint class bits (general category's first letter, plus White_Space). */
enum {
    UNI_LETTER = 1, UNI_NUMBER = 2, UNI_PUNCT = 4, UNI_SYMBOL = 8, UNI_MARK = 16,
    UNI_SPACE = 32, /* the White_Space property */
    UNI_SEPARATOR = 64, UNI_OTHER = 128 /* C*: controls, format, unassigned, private */
};

/* One run of codepoints with the same flags: [start, next range's start). */
typedef struct {
    uint32_t start;
    uint8_t  flags;
} uni_range;

extern const uni_range uni_ranges[];
extern const unsigned  uni_n_ranges;

/* Class bits of a codepoint; codepoints past U+10FFFF are UNI_OTHER. */
uint8_t uni_flags(uint32_t cp);

/* Decodes one codepoint at s[*off] (*off < len) and advances *off. A malformed
 * sequence (stray continuation byte, truncated sequence, bad lead byte) yields
 * U+FFFD and advances by one byte, as llama.cpp's unicode_cpts_from_utf8 does.
 * Overlong forms and surrogates are decoded, not rejected (again as llama.cpp). */
uint32_t uni_decode(const char *s, size_t len, size_t *off);

/* Writes the UTF-8 of cp (cp > U+10FFFF is written as U+FFFD); returns 1..4. */
int uni_encode(uint32_t cp, char *out);

/* Length of the UTF-8 sequence a lead byte announces (1 for continuation bytes),
 * the way llama.cpp's unicode_len_utf8 counts. */
static inline size_t uni_len_utf8(unsigned char c)
{
    static const unsigned char lookup[16] = { 1,1,1,1,1,1,1,1,1,1,1,1,2,2,3,4 };
    return lookup[c >> 4];
}

/* GPT-2 byte-level BPE alphabet: the codepoint byte b is written as. */
uint32_t uni_byte_to_cp(uint8_t b);
/* Inverse of uni_byte_to_cp; -1 if cp is not in the alphabet. */
int uni_cp_to_byte(uint32_t cp);

/* ASCII lower-casing (what the contraction rules need). */
static inline uint32_t uni_ascii_lower(uint32_t cp)
{
    return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
}

#endif
