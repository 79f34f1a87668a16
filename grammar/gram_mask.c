/*
 * gram_mask.c - token masks over a whole vocabulary.
 *
 * The walk. Token texts are sorted, with the length of the prefix each shares with the
 * one before (lcp). One walk keeps the matcher state after every prefix length of the
 * current token, starts each token from the state of its shared prefix and advances
 * only its new bytes; a prefix that leads nowhere rejects every following token that
 * shares it without touching them. Cost: about one matcher step per node of the token
 * trie that the grammar lets through.
 *
 * Per-context tables (what can be precomputed per grammar). A state's mask is the union
 * of its stacks' masks, and most of a stack's mask depends only on its top frames: a
 * token that never returns below the top GRAM_MASK_CONTEXT frames is accepted or
 * rejected whatever lies below. So per distinct top (those frames, and whether they
 * are the whole stack) one walk over the vocabulary from that truncated stack gives a
 * table: the tokens accepted outright, and the uncertain ones: (token, offset) where a
 * path returned below the bottom frame after offset bytes with bytes left. A mask is
 * then the OR of its stacks' tables plus, per uncertain token, a check of the rest of
 * its bytes against the stack's lower frames (memoized per distinct rest). Tables are
 * built on first use and kept by the masker; inside a JSON string, for instance, one
 * table serves every string of the grammar and the uncertain tokens are those with a
 * closing quote followed by more bytes.
 *
 * A state inside a character keys its tables by the pending bytes too.
 *
 * Bounded repetitions. x{0,n} is a chain of rules O1..On (gram_parse.c), and each
 * position of, say, a string of at most 40 characters is a context of its own: 40
 * tables, each a walk over nearly the whole vocabulary. But a token of at most k bytes
 * cannot use more than k iterations, so from Ok it does just what it does from On: a
 * table of a lower rule is its top's table for the tokens of at most k bytes, plus a
 * walk over the longer tokens only (few when k is large; cut short after k + 1 bytes
 * when k is small).
 *
 * Masks are also cached by the state's wire form (a small round-robin cache).
 * Caches change only the speed: the tests compare every mask with gram_mask_walk.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gram_impl.h"

#define GRAM_MASK_CONTEXT 3     /* frames a table is keyed by */
#define MAX_TABLES 4096
#define MAX_TABLE_BYTES (512u << 20)
#define MASK_CACHE 16

struct gram_vocab {
    int32_t n;
    char *blob;          /* every text back to back */
    uint64_t *off;       /* (n) offset of token i's text in blob */
    uint32_t *len;       /* (n) */
    uint8_t *eog;        /* (n) */
    int32_t *ord;        /* (n_ord) ids with a text, sorted by text */
    int32_t *by_len;     /* (n_ord) the same ids, longest first */
    uint32_t *lcp;       /* (n_ord) prefix shared with the previous in ord */
    int32_t n_ord;
    uint32_t max_len;
};

static const uint8_t *text_of(const gram_vocab *v, int32_t id) { return (const uint8_t *)v->blob + v->off[id]; }

static const gram_vocab *sort_vocab; /* qsort has no context argument in C11 */
static int cmp_text(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = sort_vocab->len[x], ly = sort_vocab->len[y];
    int c = memcmp(text_of(sort_vocab, x), text_of(sort_vocab, y), lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* v->by_len: a counting sort of ord by length, longest first. */
static int sort_by_len(gram_vocab *v)
{
    uint32_t *start = calloc((size_t)v->max_len + 2, sizeof *start);
    if (!start)
        return -1;
    for (int32_t i = 0; i < v->n_ord; i++)
        start[v->max_len - v->len[v->ord[i]] + 1]++;
    for (uint32_t l = 1; l <= v->max_len + 1; l++)
        start[l] += start[l - 1];
    for (int32_t i = 0; i < v->n_ord; i++)
        v->by_len[start[v->max_len - v->len[v->ord[i]]]++] = v->ord[i];
    free(start);
    return 0;
}

gram_vocab *gram_vocab_new(const gram_token *toks, int32_t n, char *err, size_t errlen)
{
    static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;
    if (n <= 0) {
        snprintf(err, errlen, "grammar vocabulary: %d tokens", n);
        return NULL;
    }
    gram_vocab *v = calloc(1, sizeof *v);
    if (!v)
        goto oom;
    v->n = n;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (toks[i].len && !toks[i].text) {
            snprintf(err, errlen, "grammar vocabulary: token %d has no text", i);
            gram_vocab_free(v);
            return NULL;
        }
        total += toks[i].len;
    }
    v->blob = malloc(total + 1);
    v->off = malloc(n * sizeof *v->off);
    v->len = malloc(n * sizeof *v->len);
    v->eog = malloc(n);
    v->ord = malloc(n * sizeof *v->ord);
    v->lcp = malloc(n * sizeof *v->lcp);
    v->by_len = malloc(n * sizeof *v->by_len);
    if (!v->blob || !v->off || !v->len || !v->eog || !v->ord || !v->lcp || !v->by_len)
        goto oom;
    total = 0;
    for (int32_t i = 0; i < n; i++) {
        v->off[i] = total;
        v->len[i] = toks[i].len;
        v->eog[i] = toks[i].eog;
        if (toks[i].len)
            memcpy(v->blob + total, toks[i].text, toks[i].len);
        total += toks[i].len;
        if (toks[i].len && !toks[i].eog)
            v->ord[v->n_ord++] = i;
        if (toks[i].len > v->max_len)
            v->max_len = toks[i].len;
    }
    pthread_mutex_lock(&sort_lock);
    sort_vocab = v;
    qsort(v->ord, v->n_ord, sizeof *v->ord, cmp_text);
    sort_vocab = NULL;
    pthread_mutex_unlock(&sort_lock);
    for (int32_t i = 0; i < v->n_ord; i++) {
        uint32_t l = 0;
        if (i > 0) {
            int32_t a = v->ord[i - 1], b = v->ord[i];
            uint32_t m = v->len[a] < v->len[b] ? v->len[a] : v->len[b];
            while (l < m && text_of(v, a)[l] == text_of(v, b)[l])
                l++;
        }
        v->lcp[i] = l;
    }
    if (sort_by_len(v) != 0)
        goto oom;
    return v;
oom:
    snprintf(err, errlen, "grammar vocabulary: out of memory");
    gram_vocab_free(v);
    return NULL;
}

void gram_vocab_free(gram_vocab *v)
{
    if (!v)
        return;
    free(v->blob);
    free(v->off);
    free(v->len);
    free(v->eog);
    free(v->ord);
    free(v->lcp);
    free(v->by_len);
    free(v);
}

int32_t gram_vocab_size(const gram_vocab *v) { return v->n; }
bool gram_vocab_is_eog(const gram_vocab *v, int32_t id) { return id >= 0 && id < v->n && v->eog[id]; }
size_t gram_mask_words(const gram_vocab *v) { return ((size_t)v->n + 63) / 64; }

int gram_accept_token(const gram_vocab *v, gram_state *s, int32_t id)
{
    if (id < 0 || id >= v->n)
        return -1;
    if (v->eog[id])
        return gram_can_end(s) ? 0 : -1;
    if (v->len[id] == 0)
        return -1;
    return gram_accept_bytes(s, text_of(v, id), v->len[id]);
}

/* ---- the walk ---- */

typedef struct {
    uint32_t tok, off; /* token tok returned below the bottom after off of its bytes */
} exit_ent;

typedef struct {
    exit_ent *v;
    size_t n, cap;
} exit_vec;

/* Scratch of a walk: a state per prefix length. */
typedef struct {
    gram_state *st;    /* (cap + 1) */
    uint32_t *n_exit;  /* (cap + 1) exits on the current path at depths <= d */
    uint32_t cap;
} walker;

static int walker_fit(walker *w, const gram *g, uint32_t max_len)
{
    if (w->st && w->cap >= max_len)
        return 0;
    for (uint32_t i = 0; w->st && i <= w->cap; i++)
        gram_state_release(&w->st[i]);
    free(w->st);
    free(w->n_exit);
    w->st = calloc(max_len + 1, sizeof *w->st);
    w->n_exit = calloc(max_len + 1, sizeof *w->n_exit);
    w->cap = max_len;
    if (!w->st || !w->n_exit) {
        free(w->st);
        free(w->n_exit);
        w->st = NULL;
        w->n_exit = NULL;
        return -1;
    }
    for (uint32_t i = 0; i <= max_len; i++)
        gram_state_init(&w->st[i], g);
    return 0;
}

static void walker_free(walker *w)
{
    for (uint32_t i = 0; w->st && i <= w->cap; i++)
        gram_state_release(&w->st[i]);
    free(w->st);
    free(w->n_exit);
    memset(w, 0, sizeof *w);
}

static void set_bit(uint64_t *m, uint32_t i) { m[i >> 6] |= 1ull << (i & 63); }
static bool get_bit(const uint64_t *m, uint32_t i) { return (m[i >> 6] >> (i & 63)) & 1; }

static int push_exit(exit_vec *e, uint32_t tok, uint32_t off)
{
    if (e->n == e->cap) {
        size_t c = e->cap ? e->cap * 2 : 256;
        exit_ent *nv = realloc(e->v, c * sizeof *nv);
        if (!nv)
            return -1;
        e->v = nv;
        e->cap = c;
    }
    e->v[e->n++] = (exit_ent){tok, off};
    return 0;
}

/* Walks every token text of at least min_len bytes from w->st[0] (set by the caller):
 * sets accept's bit of each token the state takes whole; with a truncated start, lists
 * in unc the tokens whose paths return below the bottom with bytes left. */
static int walk(const gram_vocab *v, walker *w, uint64_t *accept, exit_vec *unc, uint32_t min_len)
{
    const uint32_t INF = UINT32_MAX;
    uint32_t k = 0, dead = INF, skipped = INF; /* skipped: the least lcp since the last token walked */
    w->n_exit[0] = 0;
    for (int32_t i = 0; i < v->n_ord; i++) {
        int32_t id = v->ord[i];
        const uint8_t *t = text_of(v, id);
        uint32_t len = v->len[id], c = v->lcp[i] < skipped ? v->lcp[i] : skipped;
        if (len < min_len) {
            skipped = c;
            continue;
        }
        skipped = INF;
        if (dead <= c) {
            /* shares a prefix that leads nowhere; only its exits may save it */
        } else {
            if (k > c)
                k = c;
            dead = INF;
            while (k < len) {
                int rc = gram_state_step(&w->st[k + 1], &w->st[k], t[k]);
                w->n_exit[k + 1] = w->n_exit[k] + (w->st[k + 1].exit ? 1 : 0);
                k++;
                if (rc != 0) {
                    dead = k;
                    break;
                }
            }
            if (dead == INF)
                set_bit(accept, (uint32_t)id);
        }
        uint32_t reach = dead < len ? dead : len;
        if (!unc || w->n_exit[reach] == 0)
            continue;
        for (uint32_t d = 1; d <= reach; d++) {
            if (w->n_exit[d] == w->n_exit[d - 1])
                continue;
            if (d == len)
                set_bit(accept, (uint32_t)id); /* returned exactly at its end: the caller goes on */
            else if (push_exit(unc, (uint32_t)id, d) != 0)
                return -1;
        }
    }
    return 0;
}

void gram_mask_walk(const gram_vocab *v, const gram_state *s, uint64_t *mask)
{
    size_t words = gram_mask_words(v);
    memset(mask, 0, words * sizeof *mask);
    walker w = {0};
    if (walker_fit(&w, s->g, v->max_len) == 0 && gram_state_copy(&w.st[0], s) == 0) {
        if (walk(v, &w, mask, NULL, 0) != 0)
            memset(mask, 0, words * sizeof *mask); /* fail closed */
    }
    walker_free(&w);
    if (gram_can_end(s))
        for (int32_t i = 0; i < v->n; i++)
            if (v->eog[i])
                set_bit(mask, (uint32_t)i);
}

/* ---- the masker ---- */

/* What a table is built for: the top frames of a stack and the bytes of a character
 * begun. */
typedef struct {
    uint32_t f[GRAM_MASK_CONTEXT];
    uint32_t klen;
    bool complete;         /* the frames are the whole stack: below them the sentence ends */
    uint8_t pend[4], n_pend;
} tkey;

typedef struct table {
    tkey key;
    uint64_t *accept;      /* (words) */
    exit_ent *unc;         /* (n_unc) by token */
    size_t n_unc;
    struct table *next;    /* hash chain */
} table;

struct gram_masker {
    const gram *g;
    const gram_vocab *v;
    pthread_mutex_t lock;
    table **buckets;       /* (n_buckets) */
    size_t n_buckets, n_tables, table_bytes;
    walker w;              /* scratch of table walks */
    gram_state parent, t0, t1;
    /* the mask cache: state wire forms and their masks, round robin */
    uint8_t *ckey[MASK_CACHE];
    size_t cklen[MASK_CACHE];
    uint64_t *cmask[MASK_CACHE];
    unsigned cnext;
    uint8_t *kbuf;
    size_t kcap;
    /* memo of suffix checks, per stack */
    struct memo { const uint8_t *p; uint32_t len; int8_t ok; } *memo;
    size_t memo_cap;
    gram_masker_stats stats;
};

gram_masker *gram_masker_new(const gram *g, const gram_vocab *v)
{
    gram_masker *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->g = g;
    m->v = v;
    m->n_buckets = 256;
    m->buckets = calloc(m->n_buckets, sizeof *m->buckets);
    if (!m->buckets || pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m->buckets);
        free(m);
        return NULL;
    }
    gram_state_init(&m->parent, g);
    gram_state_init(&m->t0, g);
    gram_state_init(&m->t1, g);
    return m;
}

static void table_free(table *t)
{
    if (!t)
        return;
    free(t->accept);
    free(t->unc);
    free(t);
}

void gram_masker_free(gram_masker *m)
{
    if (!m)
        return;
    for (size_t b = 0; b < m->n_buckets; b++)
        for (table *t = m->buckets[b], *n; t; t = n) {
            n = t->next;
            table_free(t);
        }
    free(m->buckets);
    walker_free(&m->w);
    gram_state_release(&m->parent);
    gram_state_release(&m->t0);
    gram_state_release(&m->t1);
    for (int i = 0; i < MASK_CACHE; i++) {
        free(m->ckey[i]);
        free(m->cmask[i]);
    }
    free(m->kbuf);
    free(m->memo);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t key_bucket(const gram_masker *m, const tkey *k)
{
    uint64_t h = 1469598103934665603ull ^ k->klen ^ ((uint64_t)k->complete << 8) ^ ((uint64_t)k->n_pend << 16);
    for (uint32_t i = 0; i < k->klen; i++)
        h = (h ^ k->f[i]) * 1099511628211ull;
    for (uint32_t i = 0; i < k->n_pend; i++)
        h = (h ^ k->pend[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29)) & (m->n_buckets - 1);
}

static bool key_eq(const tkey *a, const tkey *b)
{
    return a->klen == b->klen && a->complete == b->complete && a->n_pend == b->n_pend &&
           !memcmp(a->f, b->f, a->klen * sizeof *a->f) && !memcmp(a->pend, b->pend, a->n_pend);
}

/* w->st[0] = the state of key k: its frames expanded, then its pending bytes. */
static int start_state(gram_masker *m, const tkey *k)
{
    if (gram_state_set_stack(&m->w.st[0], k->f, k->klen, !k->complete) != 0)
        return -1;
    for (uint32_t i = 0; i < k->n_pend; i++) {
        gram_state *next = (i & 1) ? &m->t1 : &m->t0;
        gram_state_step(next, &m->w.st[0], k->pend[i]); /* a stack that cannot take it is dropped */
        if (gram_state_copy(&m->w.st[0], next) != 0)
            return -1;
    }
    return 0;
}

/* The lowest frame of k in a lower rule of a bounded repetition's chain: its index, or
 * -1; *canon is the same position in the chain's top rule, *bound its k. */
static int chain_frame(const gram *g, const tkey *k, uint32_t *canon, uint32_t *bound)
{
    for (uint32_t i = 0; i < k->klen; i++) {
        const gram_rule *r = &g->rules[g->elem_rule[k->f[i]]];
        if (r->chain_top == GRAM_NO_CHAIN || r->chain_top == g->elem_rule[k->f[i]])
            continue;
        const gram_rule *top = &g->rules[r->chain_top];
        *canon = g->alt_start[top->first_alt] + (k->f[i] - g->alt_start[r->first_alt]);
        *bound = r->chain_k;
        return (int)i;
    }
    return -1;
}

static table *get_table(gram_masker *m, const tkey *key, bool *owned);

/* t's accept bits and uncertain tokens: a walk, or for a lower rule of a chain its
 * top's table cut to the tokens of at most bound bytes plus a walk of the longer ones. */
static int fill_table(gram_masker *m, table *t, exit_vec *unc)
{
    const gram_vocab *v = m->v;
    exit_vec *u = t->key.complete ? NULL : unc;
    uint32_t canon, bound;
    int at = chain_frame(m->g, &t->key, &canon, &bound);
    if (at < 0)
        return start_state(m, &t->key) != 0 || walk(v, &m->w, t->accept, u, 0) != 0 ? -1 : 0;
    tkey top = t->key;
    top.f[at] = canon;
    bool owned;
    table *base = get_table(m, &top, &owned);
    if (!base)
        return -1;
    memcpy(t->accept, base->accept, gram_mask_words(v) * sizeof *t->accept);
    for (int32_t i = 0; i < v->n_ord && v->len[v->by_len[i]] > bound; i++)
        t->accept[v->by_len[i] >> 6] &= ~(1ull << (v->by_len[i] & 63));
    int rc = 0;
    for (size_t i = 0; u && i < base->n_unc && rc == 0; i++)
        if (v->len[base->unc[i].tok] <= bound)
            rc = push_exit(u, base->unc[i].tok, base->unc[i].off);
    if (owned)
        table_free(base);
    m->stats.derived++;
    if (rc != 0 || start_state(m, &t->key) != 0)
        return -1;
    return walk(v, &m->w, t->accept, u, bound + 1);
}

/* The table of a key; *owned when the caller must free it (cache full). NULL on OOM or
 * overflow. */
static table *get_table(gram_masker *m, const tkey *key, bool *owned)
{
    *owned = false;
    size_t b = key_bucket(m, key);
    for (table *t = m->buckets[b]; t; t = t->next)
        if (key_eq(&t->key, key))
            return t;
    uint64_t t0 = now_ns();
    size_t words = gram_mask_words(m->v);
    table *t = calloc(1, sizeof *t);
    exit_vec unc = {0};
    if (!t || !(t->accept = calloc(words, sizeof *t->accept)))
        goto fail;
    t->key = *key;
    if (walker_fit(&m->w, m->g, m->v->max_len) != 0 || fill_table(m, t, &unc) != 0)
        goto fail;
    t->unc = unc.v;
    t->n_unc = unc.n;
    m->stats.tables++;
    m->stats.table_ns += now_ns() - t0;
    size_t bytes = words * 8 + unc.n * sizeof(exit_ent) + sizeof *t;
    if (m->n_tables >= MAX_TABLES || m->table_bytes + bytes > MAX_TABLE_BYTES) {
        *owned = true;
        return t;
    }
    t->next = m->buckets[b];
    m->buckets[b] = t;
    m->n_tables++;
    m->table_bytes += bytes;
    return t;
fail:
    free(unc.v);
    table_free(t);
    return NULL;
}

/* Does the expanded parent state take suffix p[0..len) whole? */
static bool parent_takes(gram_masker *m, const uint8_t *p, uint32_t len)
{
    const gram_state *cur = &m->parent;
    for (uint32_t i = 0; i < len; i++) {
        gram_state *next = (i & 1) ? &m->t1 : &m->t0;
        if (gram_state_step(next, cur, p[i]) != 0)
            return false;
        cur = next;
    }
    return true;
}

static uint64_t hash_bytes(const uint8_t *p, uint32_t n)
{
    uint64_t h = 1469598103934665603ull ^ n;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* Adds to mask the uncertain tokens of t that the lower frames f[0..n) accept. */
static int recheck(gram_masker *m, const table *t, const uint32_t *f, uint32_t n, uint64_t *mask)
{
    if (gram_state_set_stack(&m->parent, f, n, false) != 0)
        return -1;
    size_t cap = 64;
    while (cap < 2 * t->n_unc)
        cap *= 2;
    if (cap > m->memo_cap) {
        free(m->memo);
        m->memo = malloc(cap * sizeof *m->memo);
        if (!m->memo) {
            m->memo_cap = 0;
            return -1;
        }
        m->memo_cap = cap;
    }
    memset(m->memo, 0, cap * sizeof *m->memo);
    for (size_t i = 0; i < t->n_unc; i++) {
        uint32_t id = t->unc[i].tok, off = t->unc[i].off;
        if (get_bit(mask, id))
            continue;
        const uint8_t *p = text_of(m->v, (int32_t)id) + off;
        uint32_t len = m->v->len[id] - off;
        size_t h = (size_t)hash_bytes(p, len) & (cap - 1);
        while (m->memo[h].p && !(m->memo[h].len == len && !memcmp(m->memo[h].p, p, len)))
            h = (h + 1) & (cap - 1);
        if (!m->memo[h].p) {
            m->memo[h] = (struct memo){p, len, (int8_t)parent_takes(m, p, len)};
            m->stats.rechecks++;
        }
        if (m->memo[h].ok)
            set_bit(mask, id);
    }
    return 0;
}

static int mask_by_tables(gram_masker *m, const gram_state *s, uint64_t *mask)
{
    size_t words = gram_mask_words(m->v);
    memset(mask, 0, words * sizeof *mask);
    for (uint32_t i = 0; i < s->n_stacks; i++) {
        const uint32_t *f = s->frames + s->off[i];
        uint32_t n = s->off[i + 1] - s->off[i];
        if (n == 0)
            continue;
        uint32_t k = n < GRAM_MASK_CONTEXT ? n : GRAM_MASK_CONTEXT;
        tkey key = {.klen = k, .complete = n == k, .n_pend = s->n_pend};
        memcpy(key.f, f + n - k, k * sizeof *f);
        memcpy(key.pend, s->pend, s->n_pend);
        bool owned;
        table *t = get_table(m, &key, &owned);
        if (!t)
            return -1;
        for (size_t w = 0; w < words; w++)
            mask[w] |= t->accept[w];
        int rc = t->n_unc ? recheck(m, t, f, n - k, mask) : 0;
        if (owned)
            table_free(t);
        if (rc != 0)
            return -1;
    }
    return 0;
}

void gram_mask(gram_masker *m, const gram_state *s, uint64_t *mask)
{
    const gram_vocab *v = m->v;
    size_t words = gram_mask_words(v);
    pthread_mutex_lock(&m->lock);
    m->stats.masks++;
    size_t klen = gram_state_to_bytes(s, NULL, 0);
    if (klen > m->kcap) {
        free(m->kbuf);
        m->kbuf = malloc(klen);
        m->kcap = m->kbuf ? klen : 0;
    }
    if (m->kbuf) {
        gram_state_to_bytes(s, m->kbuf, klen);
        for (int i = 0; i < MASK_CACHE; i++)
            if (m->ckey[i] && m->cklen[i] == klen && !memcmp(m->ckey[i], m->kbuf, klen)) {
                memcpy(mask, m->cmask[i], words * sizeof *mask);
                m->stats.cache_hits++;
                pthread_mutex_unlock(&m->lock);
                return;
            }
    }
    if (mask_by_tables(m, s, mask) != 0) {
        /* the tables failed (out of memory, overflow): the plain walk */
        m->stats.walks++;
        gram_mask_walk(v, s, mask);
    } else if (gram_can_end(s)) {
        for (int32_t i = 0; i < v->n; i++)
            if (v->eog[i])
                set_bit(mask, (uint32_t)i);
    }
    if (m->kbuf) {
        unsigned c = m->cnext++ % MASK_CACHE;
        free(m->ckey[c]);
        if (!m->cmask[c])
            m->cmask[c] = malloc(words * sizeof *mask);
        m->ckey[c] = malloc(klen);
        if (m->ckey[c] && m->cmask[c]) {
            memcpy(m->ckey[c], m->kbuf, klen);
            m->cklen[c] = klen;
            memcpy(m->cmask[c], mask, words * sizeof *mask);
        } else {
            free(m->ckey[c]);
            m->ckey[c] = NULL;
        }
    }
    pthread_mutex_unlock(&m->lock);
}

gram_masker_stats gram_masker_get_stats(gram_masker *m)
{
    pthread_mutex_lock(&m->lock);
    gram_masker_stats s = m->stats;
    pthread_mutex_unlock(&m->lock);
    return s;
}
