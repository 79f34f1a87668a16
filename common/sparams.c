/*
 * sparams.c - the sampling parameters: defaults, parsing one parameter from text by
 * its llama.cpp name, formatting it back, validating a whole set, the wire form and
 * the seed of a session. One table describes every scalar parameter, so parsing,
 * formatting and validation agree. Owner: sampler (issue 5). See sparams.h.
 */
#include "sparams.h"
#include "errcode.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

typedef enum { PT_FLOAT, PT_INT, PT_BOOL, PT_SEED, PT_BIAS, PT_BREAKERS, PT_BREAKER,
               PT_SAMPLERS, PT_SEQ, PT_COUNT } ptype;

typedef struct {
    const char *name;
    const char *alias;   /* llama.cpp's other spelling, or NULL */
    ptype       type;
    size_t      off;     /* offsetof the field in smp_params (scalars) */
    double      lo, hi;  /* inclusive range for scalars */
    bool        lo_open; /* lo itself excluded */
    bool        listed;  /* appears in smp_param_name() */
} pdesc;

#define F(field) offsetof(smp_params, field)
static const pdesc PARAMS[] = {
    { "temperature",         "temp",  PT_FLOAT, F(temperature),        0, FLT_MAX, false, true },
    { "dynatemp_range",      NULL,    PT_FLOAT, F(dynatemp_range),     0, FLT_MAX, false, true },
    { "dynatemp_exponent",   NULL,    PT_FLOAT, F(dynatemp_exponent),  0, FLT_MAX, false, true },
    { "top_k",               NULL,    PT_INT,   F(top_k),              -1, INT_MAX, false, true },
    { "top_p",               NULL,    PT_FLOAT, F(top_p),              0, 1, false, true },
    { "min_p",               NULL,    PT_FLOAT, F(min_p),              0, 1, false, true },
    { "typical_p",           "typ_p", PT_FLOAT, F(typical_p),          0, 1, true, true },
    { "top_n_sigma",         NULL,    PT_FLOAT, F(top_n_sigma),        -FLT_MAX, FLT_MAX, false, true },
    { "xtc_probability",     NULL,    PT_FLOAT, F(xtc_probability),    0, 1, false, true },
    { "xtc_threshold",       NULL,    PT_FLOAT, F(xtc_threshold),      0, 1, false, true },
    { "repeat_penalty",      NULL,    PT_FLOAT, F(repeat_penalty),     0, FLT_MAX, true, true },
    { "repeat_last_n",       NULL,    PT_INT,   F(repeat_last_n),      -1, INT_MAX, false, true },
    { "frequency_penalty",   NULL,    PT_FLOAT, F(frequency_penalty),  -FLT_MAX, FLT_MAX, false, true },
    { "presence_penalty",    NULL,    PT_FLOAT, F(presence_penalty),   -FLT_MAX, FLT_MAX, false, true },
    { "dry_multiplier",      NULL,    PT_FLOAT, F(dry_multiplier),     0, FLT_MAX, false, true },
    { "dry_base",            NULL,    PT_FLOAT, F(dry_base),           1, FLT_MAX, false, true },
    { "dry_allowed_length",  NULL,    PT_INT,   F(dry_allowed_length), 0, INT_MAX, false, true },
    { "dry_penalty_last_n",  NULL,    PT_INT,   F(dry_penalty_last_n), -1, INT_MAX, false, true },
    { "dry_sequence_breakers", NULL,  PT_BREAKERS, 0, 0, 0, false, true },
    { "dry_sequence_breaker", NULL,   PT_BREAKER,  0, 0, 0, false, false },
    { "mirostat",            NULL,    PT_INT,   F(mirostat),           0, 2, false, true },
    { "mirostat_tau",        "mirostat_ent", PT_FLOAT, F(mirostat_tau), 0, FLT_MAX, false, true },
    { "mirostat_eta",        "mirostat_lr",  PT_FLOAT, F(mirostat_eta), 0, FLT_MAX, false, true },
    { "min_keep",            NULL,    PT_INT,   F(min_keep),           0, INT_MAX, false, true },
    { "ignore_eos",          NULL,    PT_BOOL,  F(ignore_eos),         0, 1, false, true },
    { "post_sampling_probs", NULL,    PT_BOOL,  F(post_sampling_probs), 0, 1, false, true },
    { "n_probs",             NULL,    PT_INT,   F(n_probs),            0, SMP_MAX_PROBS, false, true },
    { "seed",                NULL,    PT_SEED,  F(seed),               0, 0, false, true },
    { "samplers",            NULL,    PT_SAMPLERS, 0, 0, 0, false, false },
    { "sampling_seq",        "sampler_seq", PT_SEQ, 0, 0, 0, false, true },
    { "logit_bias",          NULL,    PT_BIAS,  0, 0, 0, false, true },
};
#undef F
enum { N_PARAMS = sizeof PARAMS / sizeof PARAMS[0] };

/* Sampler names (llama.cpp's and its aliases) and their order letters. */
static const struct { const char *name; char letter; } SAMPLER_NAMES[] = {
    { "penalties", 'e' }, { "dry", 'd' }, { "top_n_sigma", 's' }, { "top_k", 'k' },
    { "top-k", 'k' }, { "typ_p", 'y' }, { "typical_p", 'y' }, { "typical-p", 'y' },
    { "typ-p", 'y' }, { "typ", 'y' }, { "typical", 'y' }, { "top_p", 'p' },
    { "top-p", 'p' }, { "nucleus", 'p' }, { "min_p", 'm' }, { "min-p", 'm' },
    { "xtc", 'x' }, { "temperature", 't' }, { "temp", 't' },
};
static const char ORDER_LETTERS[] = "edskypmxt";

smp_params smp_params_default(void)
{
    static const char *const brk[] = { "\n", ":", "\"", "*" };
    smp_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.8f;
    p.dynatemp_range = 0.0f;
    p.dynatemp_exponent = 1.0f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.typical_p = 1.0f;
    p.top_n_sigma = -1.0f;
    p.xtc_probability = 0.0f;
    p.xtc_threshold = 0.1f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.dry_multiplier = 0.0f;
    p.dry_base = 1.75f;
    p.dry_allowed_length = 2;
    p.dry_penalty_last_n = -1;
    p.n_breakers = 4;
    for (int i = 0; i < 4; i++) {
        p.breakers[i].len = (uint8_t)strlen(brk[i]);
        memcpy(p.breakers[i].s, brk[i], p.breakers[i].len + 1);
    }
    p.mirostat = 0;
    p.mirostat_tau = 5.0f;
    p.mirostat_eta = 0.1f;
    p.seed = SMP_SEED_RANDOM;
    strcpy(p.order, SMP_ORDER_DEFAULT);
    return p;
}

static const pdesc *find_param(const char *name)
{
    for (int i = 0; i < N_PARAMS; i++)
        if (!strcmp(PARAMS[i].name, name) || (PARAMS[i].alias && !strcmp(PARAMS[i].alias, name)))
            return &PARAMS[i];
    return NULL;
}

const char *smp_param_name(int i)
{
    for (int j = 0, k = 0; j < N_PARAMS; j++)
        if (PARAMS[j].listed && k++ == i)
            return PARAMS[j].name;
    return NULL;
}

int smp_param_count(void)
{
    int k = 0;
    for (int j = 0; j < N_PARAMS; j++)
        k += PARAMS[j].listed;
    return k;
}

/* ---- scalar parsing ---- */

static int range_check(const pdesc *d, double v, char *err, size_t errlen)
{
    if (isnan(v))
        return errf(err, errlen, "%s: NaN is not a valid value", d->name);
    if (v < d->lo || v > d->hi || (d->lo_open && v == d->lo)) {
        if (d->type == PT_INT)
            return errf(err, errlen, "%s: %.0f is out of range [%.0f, %.0f]", d->name, v, d->lo, d->hi);
        if (isinf(v))
            return errf(err, errlen, "%s: must be finite", d->name);
        if (d->hi == FLT_MAX && d->lo == -FLT_MAX)
            return errf(err, errlen, "%s: %g is not a finite number", d->name, v);
        if (d->hi == FLT_MAX)
            return errf(err, errlen, "%s: %g must be %s %g", d->name, v, d->lo_open ? ">" : ">=", d->lo);
        return errf(err, errlen, "%s: %g is out of range %c%g, %g]", d->name, v,
                    d->lo_open ? '(' : '[', d->lo, d->hi);
    }
    return 0;
}

static int parse_float(const char *s, double *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    while (*end == ' ' || *end == '\t')
        end++;
    if (end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, long long *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    while (*end == ' ' || *end == '\t')
        end++;
    if (end == s || *end || errno == ERANGE)
        return -1;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on"))
        *out = true;
    else if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off"))
        *out = false;
    else
        return -1;
    return 0;
}

static int set_scalar(smp_params *p, const pdesc *d, const char *v, char *err, size_t errlen)
{
    char *base = (char *)p + d->off;
    switch (d->type) {
    case PT_FLOAT: {
        double x;
        if (parse_float(v, &x))
            return errf(err, errlen, "%s: '%s' is not a number", d->name, v);
        if (range_check(d, x, err, errlen))
            return -1;
        float f = (float)x;
        memcpy(base, &f, sizeof f);
        return 0;
    }
    case PT_INT: {
        long long x;
        if (parse_int(v, &x))
            return errf(err, errlen, "%s: '%s' is not an integer", d->name, v);
        if (range_check(d, (double)x, err, errlen))
            return -1;
        int32_t i = (int32_t)x;
        memcpy(base, &i, sizeof i);
        return 0;
    }
    case PT_BOOL: {
        bool b;
        if (parse_bool(v, &b))
            return errf(err, errlen, "%s: '%s' is not a boolean (true/false/1/0)", d->name, v);
        memcpy(base, &b, sizeof b);
        return 0;
    }
    case PT_SEED: {
        long long x;
        if (parse_int(v, &x) || x < -1 || x > (long long)UINT32_MAX)
            return errf(err, errlen, "seed: '%s' is not -1 or an integer in [0, 4294967295]", v);
        uint32_t s = x == -1 ? SMP_SEED_RANDOM : (uint32_t)x;
        memcpy(base, &s, sizeof s);
        return 0;
    }
    default:
        return errf(err, errlen, "%s: not a scalar parameter", d->name);
    }
}

/* ---- list parameters ---- */

int smp_params_add_bias(smp_params *p, int32_t id, float bias, char *err, size_t errlen)
{
    if (id < 0)
        return errf(err, errlen, "logit_bias: token id %d is negative", (int)id);
    if (isnan(bias) || bias == INFINITY)
        return errf(err, errlen, "logit_bias: bias for token %d must be finite or -inf", (int)id);
    if (p->n_logit_bias >= SMP_MAX_LOGIT_BIAS)
        return errf(err, errlen, "logit_bias: more than %d entries", SMP_MAX_LOGIT_BIAS);
    p->logit_bias[p->n_logit_bias].id = id;
    p->logit_bias[p->n_logit_bias].bias = bias;
    p->n_logit_bias++;
    return 0;
}

/* One entry: "ID:BIAS", "ID+BIAS" or "ID-BIAS" (llama.cpp's --logit-bias), BIAS may be
 * "-inf"/"false" (ban). */
static int parse_bias_entry(const char *s, size_t n, int32_t *id, float *bias)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf)
        return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (end == buf || errno == ERANGE || v < INT32_MIN || v > INT32_MAX)
        return -1;
    *id = (int32_t)v;
    const char *b = end;
    if (*b == ':' || *b == '=')
        b++;
    else if (*b != '+' && *b != '-')
        return -1;
    if (!strcasecmp(b, "false") || !strcasecmp(b, "-inf") || !strcasecmp(b, "-infinity")) {
        *bias = -INFINITY;
        return 0;
    }
    double x;
    if (parse_float(b, &x) || isnan(x) || x > FLT_MAX)
        return -1;
    *bias = x < -FLT_MAX ? -INFINITY : (float)x;
    return 0;
}

static int set_bias(smp_params *p, const char *v, char *err, size_t errlen)
{
    if (!strcasecmp(v, "none") || !*v) {
        p->n_logit_bias = 0;
        return 0;
    }
    smp_params tmp = *p;
    for (const char *s = v; *s;) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s)
            break;
        size_t n = strcspn(s, ",");
        while (n && s[n - 1] == ' ')
            n--;
        int32_t id;
        float bias;
        if (parse_bias_entry(s, n, &id, &bias))
            return errf(err, errlen, "logit_bias: '%.*s' is not ID:BIAS, ID+BIAS or ID-BIAS",
                        (int)(n > 40 ? 40 : n), s);
        if (smp_params_add_bias(&tmp, id, bias, err, errlen))
            return -1;
        s += n;
        while (*s == ' ')
            s++;
    }
    *p = tmp;
    return 0;
}

static int put_breaker(smp_params *p, const char *s, size_t len, char *err, size_t errlen)
{
    if (p->n_breakers >= SMP_MAX_BREAKERS)
        return errf(err, errlen, "dry_sequence_breakers: more than %d breakers", SMP_MAX_BREAKERS);
    if (len == 0)
        return errf(err, errlen, "dry_sequence_breakers: a breaker is empty");
    if (len > SMP_MAX_BREAKER_LEN)
        return errf(err, errlen, "dry_sequence_breakers: a breaker is %zu bytes, the limit is %d",
                    len, SMP_MAX_BREAKER_LEN);
    if (memchr(s, 0, len))
        return errf(err, errlen, "dry_sequence_breakers: a breaker contains a NUL byte");
    smp_breaker *b = &p->breakers[p->n_breakers++];
    memcpy(b->s, s, len);
    b->s[len] = 0;
    b->len = (uint8_t)len;
    return 0;
}

int smp_params_set_breakers(smp_params *p, const char *const *strs, const size_t *lens,
                            int n, char *err, size_t errlen)
{
    if (n < 0 || n > SMP_MAX_BREAKERS)
        return errf(err, errlen, "dry_sequence_breakers: %d breakers, the limit is %d", n, SMP_MAX_BREAKERS);
    smp_params tmp = *p;
    tmp.n_breakers = 0;
    for (int i = 0; i < n; i++)
        if (put_breaker(&tmp, strs[i], lens ? lens[i] : strlen(strs[i]), err, errlen))
            return -1;
    *p = tmp;
    return 0;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads \uXXXX at s (after the backslash-u); returns the code unit or -1. */
static long read_u4(const char *s)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval((unsigned char)s[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

static size_t put_utf8(char *o, unsigned long cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63)); return 4;
}

/* Parses one JSON string at *ps (at the opening quote) into out; advances *ps. */
static int json_string(const char **ps, char *out, size_t cap, size_t *outlen)
{
    const char *s = *ps + 1;
    size_t n = 0;
    while (*s && *s != '"') {
        char tmp[4];
        size_t k = 1;
        if ((unsigned char)*s < 0x20)
            return -1;
        if (*s != '\\') {
            tmp[0] = *s++;
        } else {
            s++;
            switch (*s) {
            case '"': case '\\': case '/': tmp[0] = *s; break;
            case 'b': tmp[0] = '\b'; break;
            case 'f': tmp[0] = '\f'; break;
            case 'n': tmp[0] = '\n'; break;
            case 'r': tmp[0] = '\r'; break;
            case 't': tmp[0] = '\t'; break;
            case 'u': {
                long cp = read_u4(s + 1);
                if (cp < 0)
                    return -1;
                s += 4;
                if (cp >= 0xD800 && cp < 0xDC00) {
                    long lo = s[1] == '\\' && s[2] == 'u' ? read_u4(s + 3) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        return -1;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    s += 6;
                }
                k = put_utf8(tmp, (unsigned long)cp);
                break;
            }
            default: return -1;
            }
            s++;
        }
        if (n + k > cap)
            return -2;
        memcpy(out + n, tmp, k);
        n += k;
    }
    if (*s != '"')
        return -1;
    *ps = s + 1;
    *outlen = n;
    return 0;
}

static int set_breakers_json(smp_params *p, const char *v, char *err, size_t errlen)
{
    const char *s = v;
    smp_params tmp = *p;
    tmp.n_breakers = 0;
    while (*s == ' ' || *s == '\t' || *s == '\n') s++;
    if (*s++ != '[')
        return errf(err, errlen, "dry_sequence_breakers: expected a JSON array of strings like [\"\\n\", \":\"]");
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (*s == ']' && tmp.n_breakers == 0) { s++; break; }
        if (*s != '"')
            return errf(err, errlen, "dry_sequence_breakers: expected a string at offset %d", (int)(s - v));
        char buf[SMP_MAX_BREAKER_LEN + 4];
        size_t n;
        int rc = json_string(&s, buf, SMP_MAX_BREAKER_LEN, &n);
        if (rc == -2)
            return errf(err, errlen, "dry_sequence_breakers: a breaker is longer than %d bytes", SMP_MAX_BREAKER_LEN);
        if (rc)
            return errf(err, errlen, "dry_sequence_breakers: bad JSON string at offset %d", (int)(s - v));
        if (put_breaker(&tmp, buf, n, err, errlen))
            return -1;
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (*s == ',') { s++; continue; }
        if (*s == ']') { s++; break; }
        return errf(err, errlen, "dry_sequence_breakers: expected ',' or ']' at offset %d", (int)(s - v));
    }
    while (*s == ' ' || *s == '\t' || *s == '\n') s++;
    if (*s)
        return errf(err, errlen, "dry_sequence_breakers: text after the array at offset %d", (int)(s - v));
    *p = tmp;
    return 0;
}

static int set_order(smp_params *p, const char *letters, const char *pname, char *err, size_t errlen)
{
    size_t n = strlen(letters);
    if (n > SMP_MAX_ORDER)
        return errf(err, errlen, "%s: more than %d samplers", pname, SMP_MAX_ORDER);
    for (size_t i = 0; i < n; i++) {
        if (!strchr(ORDER_LETTERS, letters[i]) || !letters[i])
            return errf(err, errlen, "%s: unknown sampler letter '%c' (known: %s)", pname,
                        letters[i], ORDER_LETTERS);
        if (memchr(letters, letters[i], i))
            return errf(err, errlen, "%s: sampler '%c' appears twice", pname, letters[i]);
    }
    memcpy(p->order, letters, n + 1);
    return 0;
}

static int set_samplers(smp_params *p, const char *v, char *err, size_t errlen)
{
    char letters[SMP_MAX_ORDER + 2];
    size_t nl = 0;
    for (const char *s = v; *s;) {
        while (*s == ';' || *s == ',' || *s == ' ')
            s++;
        size_t n = strcspn(s, ";, ");
        if (!n)
            break;
        char c = 0;
        for (size_t i = 0; i < sizeof SAMPLER_NAMES / sizeof SAMPLER_NAMES[0]; i++)
            if (strlen(SAMPLER_NAMES[i].name) == n && !strncasecmp(SAMPLER_NAMES[i].name, s, n))
                c = SAMPLER_NAMES[i].letter;
        if (!c)
            return errf(err, errlen, "samplers: unknown sampler '%.*s'", (int)(n > 32 ? 32 : n), s);
        if (nl > SMP_MAX_ORDER)
            return errf(err, errlen, "samplers: more than %d samplers", SMP_MAX_ORDER);
        letters[nl++] = c;
        s += n;
    }
    letters[nl] = 0;
    return set_order(p, letters, "samplers", err, errlen);
}

int smp_param_known(const char *name)
{
    return name && find_param(name) != NULL;
}

int smp_param_set(smp_params *p, const char *name, const char *value, char *err, size_t errlen)
{
    if (!name)
        return errf(err, errlen, "parameter name missing");
    const pdesc *d = find_param(name);
    if (!d)
        return errf(err, errlen, "%.64s: unknown sampling parameter", name);
    if (!value)
        return errf(err, errlen, "%s: value missing", d->name);
    switch (d->type) {
    case PT_BIAS:     return set_bias(p, value, err, errlen);
    case PT_BREAKERS: return set_breakers_json(p, value, err, errlen);
    case PT_BREAKER:
        if (!strcmp(value, "none")) {
            p->n_breakers = 0;
            return 0;
        }
        return put_breaker(p, value, strlen(value), err, errlen);
    case PT_SAMPLERS: return set_samplers(p, value, err, errlen);
    case PT_SEQ:      return set_order(p, value, d->name, err, errlen);
    default:          return set_scalar(p, d, value, err, errlen);
    }
}

/* ---- formatting ---- */

/* Appends to buf at *pos, keeping the NUL; counts what would have been written. */
static void app(char *buf, size_t buflen, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void app(char *buf, size_t buflen, size_t *pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = *pos < buflen ? buflen - *pos : 0;
    int n = vsnprintf(room ? buf + *pos : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        *pos += (size_t)n;
}

static void format_breakers(const smp_params *p, char *buf, size_t buflen, size_t *pos)
{
    app(buf, buflen, pos, "[");
    for (int i = 0; i < p->n_breakers && i < SMP_MAX_BREAKERS; i++) {
        app(buf, buflen, pos, "%s\"", i ? ", " : "");
        for (int j = 0; j < p->breakers[i].len && j < SMP_MAX_BREAKER_LEN; j++) {
            unsigned char c = (unsigned char)p->breakers[i].s[j];
            if (c == '"' || c == '\\')
                app(buf, buflen, pos, "\\%c", c);
            else if (c == '\n')
                app(buf, buflen, pos, "\\n");
            else if (c == '\t')
                app(buf, buflen, pos, "\\t");
            else if (c == '\r')
                app(buf, buflen, pos, "\\r");
            else if (c < 0x20)
                app(buf, buflen, pos, "\\u%04x", c);
            else
                app(buf, buflen, pos, "%c", c);
        }
        app(buf, buflen, pos, "\"");
    }
    app(buf, buflen, pos, "]");
}

int smp_param_format(const smp_params *p, const char *name, char *buf, size_t buflen)
{
    const pdesc *d = name ? find_param(name) : NULL;
    if (!d)
        return -1;
    size_t pos = 0;
    const char *base = (const char *)p + d->off;
    if (buflen)
        buf[0] = 0;
    switch (d->type) {
    case PT_FLOAT: { float f; memcpy(&f, base, sizeof f); app(buf, buflen, &pos, "%.9g", f); break; }
    case PT_INT: { int32_t i; memcpy(&i, base, sizeof i); app(buf, buflen, &pos, "%d", (int)i); break; }
    case PT_BOOL: { bool b; memcpy(&b, base, sizeof b); app(buf, buflen, &pos, "%s", b ? "true" : "false"); break; }
    case PT_SEED: { uint32_t s; memcpy(&s, base, sizeof s);
        if (s == SMP_SEED_RANDOM) app(buf, buflen, &pos, "-1");
        else app(buf, buflen, &pos, "%u", (unsigned)s);
        break; }
    case PT_BIAS:
        if (p->n_logit_bias <= 0)
            app(buf, buflen, &pos, "none");
        for (int i = 0; i < p->n_logit_bias && i < SMP_MAX_LOGIT_BIAS; i++) {
            float b = p->logit_bias[i].bias;
            if (b == -INFINITY)
                app(buf, buflen, &pos, "%s%d:-inf", i ? "," : "", (int)p->logit_bias[i].id);
            else
                app(buf, buflen, &pos, "%s%d:%.9g", i ? "," : "", (int)p->logit_bias[i].id, b);
        }
        break;
    case PT_BREAKERS: case PT_BREAKER:
        format_breakers(p, buf, buflen, &pos);
        break;
    case PT_SAMPLERS:   /* canonical names: the first entry of each letter */
        for (int i = 0; i < SMP_MAX_ORDER && p->order[i]; i++)
            for (size_t j = 0; j < sizeof SAMPLER_NAMES / sizeof SAMPLER_NAMES[0]; j++)
                if (SAMPLER_NAMES[j].letter == p->order[i]) {
                    app(buf, buflen, &pos, "%s%s", i ? ";" : "", SAMPLER_NAMES[j].name);
                    break;
                }
        break;
    case PT_SEQ:
        app(buf, buflen, &pos, "%.*s", SMP_MAX_ORDER, p->order);
        break;
    default:
        return -1;
    }
    return (int)(pos < buflen ? pos : (buflen ? buflen - 1 : 0));
}

/* ---- validation ---- */

int smp_params_validate(const smp_params *p, int n_vocab, char *err, size_t errlen)
{
    if (n_vocab <= 0)
        return errf(err, errlen, "n_vocab: %d is not a vocabulary size", n_vocab);
    for (int i = 0; i < N_PARAMS; i++) {
        const pdesc *d = &PARAMS[i];
        const char *base = (const char *)p + d->off;
        if (d->type == PT_FLOAT) {
            float f;
            memcpy(&f, base, sizeof f);
            if (range_check(d, f, err, errlen))
                return -1;
        } else if (d->type == PT_INT) {
            int32_t v;
            memcpy(&v, base, sizeof v);
            if (range_check(d, v, err, errlen))
                return -1;
        }
    }
    size_t on = strnlen(p->order, SMP_MAX_ORDER + 1);
    if (on > SMP_MAX_ORDER)
        return errf(err, errlen, "samplers: order string is not terminated");
    smp_params tmp = *p;
    if (set_order(&tmp, p->order, "samplers", err, errlen))
        return -1;
    if (p->n_breakers < 0 || p->n_breakers > SMP_MAX_BREAKERS)
        return errf(err, errlen, "dry_sequence_breakers: %d breakers, the limit is %d",
                    (int)p->n_breakers, SMP_MAX_BREAKERS);
    for (int i = 0; i < p->n_breakers; i++) {
        const smp_breaker *b = &p->breakers[i];
        if (b->len == 0 || b->len > SMP_MAX_BREAKER_LEN || memchr(b->s, 0, b->len) || b->s[b->len])
            return errf(err, errlen, "dry_sequence_breakers: breaker %d is empty, too long or malformed", i);
    }
    if (p->n_logit_bias < 0 || p->n_logit_bias > SMP_MAX_LOGIT_BIAS)
        return errf(err, errlen, "logit_bias: %d entries, the limit is %d", (int)p->n_logit_bias,
                    SMP_MAX_LOGIT_BIAS);
    for (int i = 0; i < p->n_logit_bias; i++) {
        const smp_bias *b = &p->logit_bias[i];
        if (b->id < 0 || b->id >= n_vocab)
            return errf(err, errlen, "logit_bias: token id %d is outside the vocabulary [0, %d)",
                        (int)b->id, n_vocab);
        if (isnan(b->bias) || b->bias == INFINITY)
            return errf(err, errlen, "logit_bias: bias for token %d must be finite or -inf", (int)b->id);
    }
    return 0;
}

/* ---- wire form ---- */

size_t smp_params_to_wire(const smp_params *p, uint8_t *buf)
{
    uint32_t magic = SMP_WIRE_MAGIC;
    int nb = p->n_logit_bias < 0 ? 0 : p->n_logit_bias > SMP_MAX_LOGIT_BIAS ? SMP_MAX_LOGIT_BIAS : p->n_logit_bias;
    size_t n = offsetof(smp_params, logit_bias) + (size_t)nb * sizeof(smp_bias);
    memcpy(buf, &magic, 4);
    memcpy(buf + 4, p, n);
    return 4 + n;
}

int smp_params_from_wire(const void *data, size_t len, int n_vocab, smp_params *p, char *err, size_t errlen)
{
    const uint8_t *d = data;
    uint32_t magic;
    size_t head = offsetof(smp_params, logit_bias);
    if (!d || len < 4 + head || len > SMP_WIRE_MAX)
        return errf(err, errlen, "sampler parameters: %zu bytes is not a parameter block", len);
    memcpy(&magic, d, 4);
    if (magic != SMP_WIRE_MAGIC)
        return errf(err, errlen, "sampler parameters: unknown format (magic %08x)", (unsigned)magic);
    memset(p, 0, sizeof *p);
    memcpy(p, d + 4, len - 4);
    if (p->n_logit_bias < 0 || p->n_logit_bias > SMP_MAX_LOGIT_BIAS ||
        len - 4 != head + (size_t)p->n_logit_bias * sizeof(smp_bias))
        return errf(err, errlen, "logit_bias: %d entries do not match a parameter block of %zu bytes",
                    (int)p->n_logit_bias, len);
    /* a bool holding anything but 0 or 1 is undefined behaviour once read */
    const size_t bools[] = { offsetof(smp_params, ignore_eos), offsetof(smp_params, post_sampling_probs) };
    for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++)
        if (d[4 + bools[i]] > 1) return errf(err, errlen, "sampler parameters: a boolean is %u", d[4 + bools[i]]);
    return smp_params_validate(p, n_vocab, err, errlen);
}

int smp_history_needed(const smp_params *p)
{
    bool pen = p->repeat_last_n != 0 && (p->repeat_penalty != 1.0f ||
               p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
    bool dry = p->dry_multiplier > 0.0f && p->dry_penalty_last_n != 0;
    if ((pen && p->repeat_last_n < 0) || (dry && p->dry_penalty_last_n < 0))
        return -1;
    int n = 0;
    if (pen && p->repeat_last_n > n)
        n = p->repeat_last_n;
    if (dry && p->dry_penalty_last_n > n)
        n = p->dry_penalty_last_n;
    return n;
}

/* ---- the seed of a session ---- */

uint64_t smp_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The kernel's entropy when available; time and pid otherwise (never fails). */
uint32_t smp_seed_resolve(uint32_t seed)
{
    if (seed != SMP_SEED_RANDOM)
        return seed;
    uint32_t s = 0;
    ssize_t n;
    do {
        n = getrandom(&s, sizeof s, GRND_NONBLOCK);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint32_t)smp_mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec
                            + ((uint64_t)getpid() << 40));
    }
    return s == SMP_SEED_RANDOM ? 0x2545F491u : s;
}
