/* unicode.c - codepoint classes, UTF-8 and the GPT-2 byte alphabet (see unicode.h). */
#include "unicode.h"

#include <pthread.h>

static uint8_t bmp_flags[0x10000]; /* flags of every BMP codepoint, filled once */
static pthread_once_t bmp_once = PTHREAD_ONCE_INIT;

static void bmp_fill(void)
{
    for (unsigned r = 0; r < uni_n_ranges; r++) {
        uint32_t lo = uni_ranges[r].start;
        uint32_t hi = r + 1 < uni_n_ranges ? uni_ranges[r + 1].start : 0x110000;
        if (lo >= 0x10000)
            break;
        if (hi > 0x10000)
            hi = 0x10000;
        for (uint32_t cp = lo; cp < hi; cp++)
            bmp_flags[cp] = uni_ranges[r].flags;
    }
}

uint8_t uni_flags(uint32_t cp)
{
    if (cp < 0x10000) {
        pthread_once(&bmp_once, bmp_fill);
        return bmp_flags[cp];
    }
    if (cp > 0x10FFFF)
        return UNI_OTHER;
    unsigned lo = 0, hi = uni_n_ranges; /* last range with start <= cp */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (uni_ranges[mid].start <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return uni_ranges[lo].flags;
}

static inline int is_cont(const unsigned char *s, size_t i, size_t len)
{
    return i < len && (s[i] & 0xC0) == 0x80;
}

uint32_t uni_decode(const char *str, size_t len, size_t *off)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = *off;
    unsigned c = s[i];
    if (c < 0x80) {
        *off = i + 1;
        return c;
    }
    if ((c & 0xE0) == 0xC0 && is_cont(s, i + 1, len)) {
        *off = i + 2;
        return ((c & 0x1F) << 6) | (s[i + 1] & 0x3F);
    }
    if ((c & 0xF0) == 0xE0 && is_cont(s, i + 1, len) && is_cont(s, i + 2, len)) {
        *off = i + 3;
        return ((c & 0x0F) << 12) | ((s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    }
    if ((c & 0xF8) == 0xF0 && is_cont(s, i + 1, len) && is_cont(s, i + 2, len) &&
        is_cont(s, i + 3, len)) {
        *off = i + 4;
        return ((c & 0x07) << 18) | ((s[i + 1] & 0x3F) << 12) | ((s[i + 2] & 0x3F) << 6) |
               (s[i + 3] & 0x3F);
    }
    *off = i + 1;
    return 0xFFFD;
}

int uni_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp > 0x10FFFF)
        cp = 0xFFFD;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = 0xC0 | (cp >> 6);
        o[1] = 0x80 | (cp & 0x3F);
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = 0xE0 | (cp >> 12);
        o[1] = 0x80 | ((cp >> 6) & 0x3F);
        o[2] = 0x80 | (cp & 0x3F);
        return 3;
    }
    o[0] = 0xF0 | (cp >> 18);
    o[1] = 0x80 | ((cp >> 12) & 0x3F);
    o[2] = 0x80 | ((cp >> 6) & 0x3F);
    o[3] = 0x80 | (cp & 0x3F);
    return 4;
}

/* Printable Latin-1 bytes stand for themselves; the 68 others are numbered from
 * U+0100 upwards in byte order. */
static int byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static uint32_t byte_cp[256];  /* byte -> alphabet codepoint */
static uint8_t  cp_byte[68];   /* alphabet codepoint - 0x100 -> byte */
static pthread_once_t byte_once = PTHREAD_ONCE_INIT;

static void byte_fill(void)
{
    unsigned n = 0;
    for (unsigned b = 0; b < 256; b++) {
        if (byte_is_printable(b)) {
            byte_cp[b] = b;
        } else {
            cp_byte[n] = (uint8_t)b;
            byte_cp[b] = 0x100 + n++;
        }
    }
}

uint32_t uni_byte_to_cp(uint8_t b)
{
    pthread_once(&byte_once, byte_fill);
    return byte_cp[b];
}

int uni_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68)
        return -1;
    pthread_once(&byte_once, byte_fill);
    return cp_byte[cp - 0x100];
}
