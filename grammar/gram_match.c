/*
 * gram_match.c - the matcher: a set of parse stacks advanced one byte at a time, UTF-8
 * assembled across bytes (and so across tokens), and the state's wire form.
 *
 * Advancing by a character c: every stack whose top class holds c moves its top to the
 * next position and is expanded until its top is a class again: a REF is replaced by
 * its continuation (unless it is the last element of its alternative) and one new stack
 * per alternative of the rule; an END pops. While a character is incomplete, the stacks
 * whose top class holds no character with the bytes seen so far are dropped (so a token
 * that ends inside a character is refused as early as the bytes allow).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram_impl.h"

/* Expansion steps one advance may take: a bound on grammars whose alternatives fan out
 * exponentially before reaching a character (a1 ::= a2 | a2, a2 ::= a3 | a3, ...). */
#define EXPAND_BUDGET 200000

bool gram_class_has(const gram *g, uint32_t cls, uint32_t cp)
{
    const gram_class *c = &g->classes[cls];
    if (cp < 128)
        return (c->ascii[cp >> 6] >> (cp & 63)) & 1;
    const gram_range *r = g->ranges + c->first;
    uint32_t lo = 0, hi = c->n;
    while (lo < hi) { /* first range with hi >= cp */
        uint32_t mid = (lo + hi) / 2;
        if (r[mid].hi < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < c->n && r[lo].lo <= cp;
}

/* True when the class holds some code point in [lo, hi]. */
static bool class_meets(const gram *g, uint32_t cls, uint32_t lo, uint32_t hi)
{
    const gram_class *c = &g->classes[cls];
    const gram_range *r = g->ranges + c->first;
    uint32_t a = 0, b = c->n;
    while (a < b) {
        uint32_t mid = (a + b) / 2;
        if (r[mid].hi < lo)
            a = mid + 1;
        else
            b = mid;
    }
    return a < c->n && r[a].lo <= hi;
}

void gram_state_init(gram_state *s, const gram *g)
{
    memset(s, 0, sizeof *s);
    s->g = g;
}

void gram_state_release(gram_state *s)
{
    free(s->off);
    free(s->frames);
    free(s->hashes);
    memset(s, 0, sizeof *s);
}

static void reset(gram_state *s, bool truncated)
{
    s->n_stacks = 0;
    s->n_pend = s->need = 0;
    s->truncated = truncated;
    s->exit = s->overflow = false;
}

static bool reserve(gram_state *s, uint32_t stacks, uint32_t frames)
{
    if (stacks > s->cap_stacks || !s->off) {
        uint32_t c = s->cap_stacks ? s->cap_stacks : 4;
        while (c < stacks)
            c *= 2;
        uint32_t *off = realloc(s->off, (c + 1) * sizeof *off);
        if (!off)
            return false;
        s->off = off;
        uint32_t *h = realloc(s->hashes, c * sizeof *h);
        if (!h)
            return false;
        s->hashes = h;
        s->cap_stacks = c;
        if (stacks <= 1 && s->n_stacks == 0)
            s->off[0] = 0;
    }
    if (frames > s->cap_frames) {
        uint32_t c = s->cap_frames ? s->cap_frames : 32;
        while (c < frames)
            c *= 2;
        uint32_t *f = realloc(s->frames, c * sizeof *f);
        if (!f)
            return false;
        s->frames = f;
        s->cap_frames = c;
    }
    return true;
}

static uint32_t stack_hash(const uint32_t *f, uint32_t n)
{
    uint32_t h = 2166136261u ^ n;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ f[i]) * 16777619u;
    return h;
}

/* Appends stack f[0..n) unless s has it already. 1 added, 0 duplicate, -1 overflow. */
static int add_stack(gram_state *s, const uint32_t *f, uint32_t n, bool dedup)
{
    uint32_t h = stack_hash(f, n);
    if (dedup) {
        for (uint32_t i = 0; i < s->n_stacks; i++)
            if (s->hashes[i] == h && s->off[i + 1] - s->off[i] == n &&
                memcmp(s->frames + s->off[i], f, n * sizeof *f) == 0)
                return 0;
    }
    if (s->n_stacks >= GRAM_MAX_STACKS) {
        s->overflow = true;
        return -1;
    }
    uint32_t used = s->n_stacks ? s->off[s->n_stacks] : 0;
    if (!reserve(s, s->n_stacks + 1, used + n)) {
        s->overflow = true;
        return -1;
    }
    s->off[0] = 0;
    memcpy(s->frames + used, f, n * sizeof *f);
    s->hashes[s->n_stacks] = h;
    s->off[++s->n_stacks] = used + n;
    return 1;
}

typedef struct {
    gram_state *out;
    uint32_t *st;   /* (GRAM_MAX_DEPTH + 2) scratch frames */
    long budget;
} expander;

/* Expands the stack st[0..d) into out until every top is a class. st is left as it was
 * found (each level restores the two slots it overwrites). */
static void expand(expander *x, uint32_t d, int level)
{
    gram_state *out = x->out;
    const gram *g = out->g;
    uint32_t *st = x->st;
    for (;;) {
        if (--x->budget < 0 || level > 2 * GRAM_MAX_DEPTH) {
            out->overflow = true;
            return;
        }
        if (d == 0) {
            if (out->truncated)
                out->exit = true;
            else
                add_stack(out, st, 0, true);
            return;
        }
        uint32_t q = st[d - 1];
        const gram_elem *e = &g->elems[q];
        if (e->kind == GE_CLASS) {
            add_stack(out, st, d, true);
            return;
        }
        if (e->kind == GE_END) {
            d--;
            continue;
        }
        const gram_rule *r = &g->rules[e->val];
        uint32_t base = d - 1;
        uint32_t save0 = st[d - 1], save1 = st[d];
        if (g->elems[q + 1].kind != GE_END)
            st[base++] = q + 1;
        if (base + 1 > GRAM_MAX_DEPTH) {
            out->overflow = true;
        } else {
            for (uint32_t a = 0; a < r->n_alts && !out->overflow; a++) {
                st[base] = g->alt_start[r->first_alt + a];
                expand(x, base + 1, level + 1);
            }
        }
        st[d - 1] = save0;
        st[d] = save1;
        return;
    }
}

static int expand_into(gram_state *out, const uint32_t *f, uint32_t n, uint32_t replace_top)
{
    uint32_t st[GRAM_MAX_DEPTH + 2];
    if (n > GRAM_MAX_DEPTH) {
        out->overflow = true;
        return -1;
    }
    memcpy(st, f, n * sizeof *f);
    if (replace_top != UINT32_MAX)
        st[n - 1] = replace_top;
    expander x = {out, st, EXPAND_BUDGET};
    expand(&x, n, 0);
    return out->overflow ? -1 : 0;
}

int gram_state_set_stack(gram_state *s, const uint32_t *frames, uint32_t n, bool truncated)
{
    reset(s, truncated);
    if (!reserve(s, 1, 1))
        return -1;
    s->off[0] = 0;
    if (n == 0) {
        if (!truncated)
            add_stack(s, frames, 0, true);
        return 0;
    }
    return expand_into(s, frames, n, UINT32_MAX);
}

bool gram_state_has_empty(const gram_state *s)
{
    for (uint32_t i = 0; i < s->n_stacks; i++)
        if (s->off[i + 1] == s->off[i])
            return true;
    return false;
}

/* dst = src advanced by the complete character cp. */
static int step_char(gram_state *dst, const gram_state *src, uint32_t cp)
{
    const gram *g = src->g;
    reset(dst, src->truncated);
    if (!reserve(dst, 1, 1))
        return -1;
    dst->off[0] = 0;
    uint32_t st[GRAM_MAX_DEPTH + 2];
    expander x = {dst, st, EXPAND_BUDGET};
    for (uint32_t i = 0; i < src->n_stacks && !dst->overflow; i++) {
        uint32_t n = src->off[i + 1] - src->off[i];
        if (n == 0)
            continue;
        const uint32_t *f = src->frames + src->off[i];
        uint32_t top = f[n - 1];
        if (!gram_class_has(g, g->elems[top].val, cp))
            continue;
        memcpy(st, f, n * sizeof *f);
        st[n - 1] = top + 1;
        expand(&x, n, 0);
    }
    if (dst->overflow) { /* fail closed: a state we could not hold whole is no state */
        dst->n_stacks = 0;
        dst->exit = false;
    }
    return dst->n_stacks ? 0 : -1;
}

/* The code points whose UTF-8 starts with the n bytes b of a need-byte character:
 * [*lo, *hi], exact (overlong forms and surrogates excluded). */
static void prefix_range(const uint8_t *b, uint32_t n, uint32_t need, uint32_t *lo, uint32_t *hi)
{
    uint8_t lead = b[0];
    uint8_t s_lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
    uint8_t s_hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
    uint32_t mask = need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07;
    uint32_t a = lead & mask, z = lead & mask;
    for (uint32_t k = 1; k < need; k++) {
        uint8_t bl = k < n ? b[k] : k == 1 ? s_lo : 0x80;
        uint8_t bh = k < n ? b[k] : k == 1 ? s_hi : 0xBF;
        a = (a << 6) | (bl & 0x3F);
        z = (z << 6) | (bh & 0x3F);
    }
    *lo = a;
    *hi = z;
}

/* Valid continuation byte k (1-based) of a character with this lead? */
static bool cont_ok(uint8_t lead, uint32_t k, uint8_t b)
{
    if (k == 1) {
        uint8_t s_lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
        uint8_t s_hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
        return b >= s_lo && b <= s_hi;
    }
    return b >= 0x80 && b <= 0xBF;
}

static uint32_t lead_need(uint8_t b)
{
    return b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
}

/* dst = the stacks of src whose top can still take a character starting pend[0..n). */
static int keep_partial(gram_state *dst, const gram_state *src, const uint8_t *pend, uint32_t n, uint32_t need)
{
    const gram *g = src->g;
    reset(dst, src->truncated);
    if (!reserve(dst, 1, 1))
        return -1;
    dst->off[0] = 0;
    uint32_t lo, hi;
    prefix_range(pend, n, need, &lo, &hi);
    for (uint32_t i = 0; i < src->n_stacks; i++) {
        uint32_t len = src->off[i + 1] - src->off[i];
        const uint32_t *f = src->frames + src->off[i];
        if (len && class_meets(g, g->elems[f[len - 1]].val, lo, hi))
            if (add_stack(dst, f, len, false) < 0)
                return -1;
    }
    memcpy(dst->pend, pend, n);
    dst->n_pend = (uint8_t)n;
    dst->need = (uint8_t)need;
    return dst->n_stacks ? 0 : -1;
}

int gram_state_step(gram_state *dst, const gram_state *src, uint8_t b)
{
    if (src->need == 0) {
        if (b < 0x80)
            return step_char(dst, src, b);
        uint32_t need = lead_need(b);
        if (!need) {
            reset(dst, src->truncated);
            return -1;
        }
        return keep_partial(dst, src, &b, 1, need);
    }
    if (!cont_ok(src->pend[0], src->n_pend, b)) {
        reset(dst, src->truncated);
        return -1;
    }
    uint8_t pend[4];
    memcpy(pend, src->pend, src->n_pend);
    pend[src->n_pend] = b;
    uint32_t n = src->n_pend + 1u;
    if (n < src->need)
        return keep_partial(dst, src, pend, n, src->need);
    uint32_t cp = pend[0] & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (uint32_t k = 1; k < n; k++)
        cp = (cp << 6) | (pend[k] & 0x3F);
    return step_char(dst, src, cp);
}

int gram_state_copy(gram_state *dst, const gram_state *src)
{
    uint32_t used = src->n_stacks ? src->off[src->n_stacks] : 0;
    if (!reserve(dst, src->n_stacks > 0 ? src->n_stacks : 1, used > 0 ? used : 1))
        return -1;
    dst->g = src->g;
    dst->n_stacks = src->n_stacks;
    memcpy(dst->off, src->off, (src->n_stacks + 1) * sizeof *dst->off);
    if (src->n_stacks == 0)
        dst->off[0] = 0;
    memcpy(dst->hashes, src->hashes, src->n_stacks * sizeof *dst->hashes);
    memcpy(dst->frames, src->frames, used * sizeof *dst->frames);
    memcpy(dst->pend, src->pend, sizeof dst->pend);
    dst->n_pend = src->n_pend;
    dst->need = src->need;
    dst->truncated = src->truncated;
    dst->exit = src->exit;
    dst->overflow = src->overflow;
    return 0;
}

/* ---- the public matcher ---- */

gram_state *gram_state_new(const gram *g)
{
    gram_state *s = malloc(sizeof *s);
    if (!s)
        return NULL;
    gram_state_init(s, g);
    reset(s, false);
    if (!reserve(s, 1, 1)) {
        gram_state_free(s);
        return NULL;
    }
    s->off[0] = 0;
    const gram_rule *r = &g->rules[g->root];
    for (uint32_t a = 0; a < r->n_alts; a++) {
        uint32_t f = g->alt_start[r->first_alt + a];
        expand_into(s, &f, 1, UINT32_MAX);
    }
    if (s->overflow || s->n_stacks == 0) { /* the root alone overflows: no state */
        gram_state_free(s);
        return NULL;
    }
    return s;
}

gram_state *gram_state_clone(const gram_state *s)
{
    gram_state *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    gram_state_init(c, s->g);
    if (gram_state_copy(c, s) != 0) {
        gram_state_free(c);
        return NULL;
    }
    return c;
}

void gram_state_free(gram_state *s)
{
    if (!s)
        return;
    gram_state_release(s);
    free(s);
}

int gram_accept_bytes(gram_state *s, const void *bytes, size_t n)
{
    if (n == 0)
        return 0;
    const uint8_t *b = bytes;
    gram_state t[2];
    gram_state_init(&t[0], s->g);
    gram_state_init(&t[1], s->g);
    const gram_state *cur = s;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        gram_state *next = &t[i & 1];
        if (gram_state_step(next, cur, b[i]) != 0) {
            rc = -1;
            break;
        }
        cur = next;
    }
    if (rc == 0)
        rc = gram_state_copy(s, cur);
    gram_state_release(&t[0]);
    gram_state_release(&t[1]);
    return rc;
}

bool gram_can_end(const gram_state *s) { return s->need == 0 && gram_state_has_empty(s); }

bool gram_can_continue(const gram_state *s)
{
    for (uint32_t i = 0; i < s->n_stacks; i++)
        if (s->off[i + 1] > s->off[i])
            return true;
    return false;
}

bool gram_is_dead(const gram_state *s) { return !gram_can_end(s) && !gram_can_continue(s); }
size_t gram_pending_bytes(const gram_state *s) { return s->n_pend; }
size_t gram_state_n_stacks(const gram_state *s) { return s->n_stacks; }

/* ---- wire form ---- */

static size_t put_varint(uint8_t *buf, size_t cap, size_t at, uint64_t v)
{
    do {
        uint8_t b = v & 0x7F;
        v >>= 7;
        if (v)
            b |= 0x80;
        if (at < cap)
            buf[at] = b;
        at++;
    } while (v);
    return at;
}

size_t gram_state_to_bytes(const gram_state *s, uint8_t *buf, size_t cap)
{
    size_t at = 0;
    if (at < cap)
        buf[at] = GRAM_STATE_VERSION;
    at++;
    for (int i = 0; i < 8; i++, at++)
        if (at < cap)
            buf[at] = (uint8_t)(s->g->hash >> (8 * i));
    if (at < cap)
        buf[at] = s->n_pend;
    at++;
    for (uint32_t i = 0; i < s->n_pend; i++, at++)
        if (at < cap)
            buf[at] = s->pend[i];
    at = put_varint(buf, cap, at, s->n_stacks);
    for (uint32_t i = 0; i < s->n_stacks; i++) {
        uint32_t n = s->off[i + 1] - s->off[i];
        at = put_varint(buf, cap, at, n);
        for (uint32_t k = 0; k < n; k++)
            at = put_varint(buf, cap, at, s->frames[s->off[i] + k]);
    }
    return at;
}

typedef struct {
    const uint8_t *p;
    size_t n, at;
    bool bad;
} reader;

static uint64_t get_varint(reader *r)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (r->at >= r->n) {
            r->bad = true;
            return 0;
        }
        uint8_t b = r->p[r->at++];
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->bad = true;
    return 0;
}

#define FAIL(...) do { if (err && errlen) snprintf(err, errlen, __VA_ARGS__); goto bad; } while (0)

gram_state *gram_state_from_bytes(const gram *g, const void *buf, size_t n, char *err, size_t errlen)
{
    reader r = {buf, n, 0, false};
    gram_state *s = malloc(sizeof *s);
    uint32_t *f = malloc((GRAM_MAX_DEPTH + 1) * sizeof *f);
    if (!s || !f) {
        free(s);
        free(f);
        if (err && errlen)
            snprintf(err, errlen, "grammar state: out of memory");
        return NULL;
    }
    gram_state_init(s, g);
    reset(s, false);
    if (!reserve(s, 1, 1))
        FAIL("grammar state: out of memory");
    s->off[0] = 0;
    if (n < 10)
        FAIL("grammar state: truncated (%zu bytes)", n);
    if (r.p[0] != GRAM_STATE_VERSION)
        FAIL("grammar state: version %u, expected %u", r.p[0], GRAM_STATE_VERSION);
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h |= (uint64_t)r.p[1 + i] << (8 * i);
    if (h != g->hash)
        FAIL("grammar state: made for another grammar (hash %016llx, expected %016llx)",
             (unsigned long long)h, (unsigned long long)g->hash);
    r.at = 9;
    uint32_t n_pend = r.p[r.at++];
    if (n_pend > 3 || r.n - r.at < n_pend)
        FAIL("grammar state: bad pending character (%u bytes)", n_pend);
    if (n_pend) {
        uint32_t need = lead_need(r.p[r.at]);
        if (!need || n_pend >= need)
            FAIL("grammar state: pending bytes are not the start of a UTF-8 character");
        for (uint32_t k = 1; k < n_pend; k++)
            if (!cont_ok(r.p[r.at], k, r.p[r.at + k]))
                FAIL("grammar state: pending bytes are not the start of a UTF-8 character");
        memcpy(s->pend, r.p + r.at, n_pend);
        s->n_pend = (uint8_t)n_pend;
        s->need = (uint8_t)need;
        r.at += n_pend;
    }
    uint64_t n_stacks = get_varint(&r);
    if (r.bad || n_stacks == 0 || n_stacks > GRAM_MAX_STACKS)
        FAIL("grammar state: bad stack count");
    for (uint64_t i = 0; i < n_stacks; i++) {
        uint64_t d = get_varint(&r);
        if (r.bad || d > GRAM_MAX_DEPTH)
            FAIL("grammar state: stack %llu: bad depth", (unsigned long long)i);
        for (uint64_t k = 0; k < d; k++) {
            uint64_t pos = get_varint(&r);
            if (r.bad || pos >= g->n_elems || !g->frame_ok[pos])
                FAIL("grammar state: stack %llu frame %llu: not a position of this grammar",
                     (unsigned long long)i, (unsigned long long)k);
            f[k] = (uint32_t)pos;
        }
        if (d && g->elems[f[d - 1]].kind != GE_CLASS)
            FAIL("grammar state: stack %llu: its top is not a character class", (unsigned long long)i);
        if (d == 0 && n_pend)
            FAIL("grammar state: an ended stack inside a character");
        if (add_stack(s, f, (uint32_t)d, true) != 1)
            FAIL("grammar state: stack %llu repeated or over the limits", (unsigned long long)i);
    }
    if (r.at != r.n)
        FAIL("grammar state: %zu trailing bytes", r.n - r.at);
    free(f);
    return s;
bad:
    free(f);
    gram_state_free(s);
    return NULL;
}
