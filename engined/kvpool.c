/*
 * kvpool.c - the KV block pool in shared memory: layout, create and attach, the robust
 * mutex and its repair, slots and their liveness, the block state machine, the hash
 * index and the LRU list. The rules are in kvpool.h. Owned by the engine.
 */
#include "kvpool.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "csum.h"
#include "daemon.h"
#include "errcode.h"
#include "log.h"
#include "segment_build.h"
#include "sparams.h"

struct kvp {
    void        *base;
    size_t       len;
    kvp_header  *h;
    kvp_block   *blk;     /* (n_blocks) */
    kvp_ientry  *index;   /* (index_cap) */
    int32_t     *tokens;  /* (n_blocks, block_tokens) */
    kvp_slot    *slots;   /* (n_slots) */
    uint64_t    *bits;    /* (n_slots, bitmap_words) */
    char        *data;    /* (n_blocks, block_bytes) */
    uint32_t    *mine;    /* (n_blocks) references this process holds */
    int          slot;    /* -1: the creator's handle */
    pid_t        pid;     /* the process that made the handle */
    char         name[SEG_NAME_MAX];
};

static int fault_step;
void kvp_set_fault(int step) { fault_step = step; }
#define FAULT(step) do { if (fault_step == (step)) raise(SIGKILL); } while (0)

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* ---- names, identity, hash, layout ---------------------------------------------- */

int kvp_name_for(const char *wname, char name[SEG_NAME_MAX])
{
    const char *rest = wname[0] == '/' ? wname + 1 : wname;
    if (strncmp(rest, "llm-", 4) != 0 || strncmp(rest, "llm-kv-", 7) == 0 ||
        strncmp(rest, "llm-logits-", 11) == 0 || strchr(rest, '/'))
        return -1;
    int n = snprintf(name, SEG_NAME_MAX, "/llm-kv-%s", rest + 4);
    return n > 0 && n < SEG_NAME_MAX ? 0 : -1;
}

uint64_t kvp_model_id(const seg_header *h)
{
    return smp_mix64(h->hdr_checksum ^ ((uint64_t)h->layout_version << 56) ^ h->precision);
}

uint64_t kvp_row_bytes(kvp_type type, uint32_t kv_dim)
{
    switch (type) {
    case KVP_F32: return (uint64_t)kv_dim * 4;
    case KVP_F16: return (uint64_t)kv_dim * 2;
    case KVP_Q8_0: return kv_dim % 32 == 0 ? (uint64_t)kv_dim / 32 * 34 : 0;
    default: return 0;
    }
}

/* One word into the chain: an odd multiply then splitmix's finaliser, both bijections,
 * so two inputs that differ in one word never meet in that step. */
static uint64_t absorb(uint64_t h, uint64_t w)
{
    return smp_mix64(h ^ (w * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull));
}

uint64_t kvp_hash(uint64_t parent, const int32_t *tokens, int n, const kvp_ident *id)
{
    uint64_t h = absorb(0x6b76706f6f6c3031ull, id->model_id);
    h = absorb(h, (uint64_t)id->type << 32 | id->kv_dim);
    h = absorb(h, parent);
    int i = 0;
    for (; i + 1 < n; i += 2)
        h = absorb(h, (uint64_t)(uint32_t)tokens[i] | (uint64_t)(uint32_t)tokens[i + 1] << 32);
    if (i < n) h = absorb(h, (uint64_t)(uint32_t)tokens[i] | 0xffffffff00000000ull);
    return absorb(h, (uint64_t)n);
}

int kvp_layout(const kvp_ident *id, uint32_t n_blocks, uint32_t n_slots, kvp_geometry *g,
               kvp_offsets *off, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    memset(off, 0, sizeof *off);
    uint64_t row = id->type < KVP_TYPE_COUNT ? kvp_row_bytes((kvp_type)id->type, id->kv_dim) : 0;
    if (id->n_layer == 0 || id->n_layer > 4096 || id->kv_dim == 0 || id->kv_dim > (1u << 20) || row == 0 ||
        id->block_tokens == 0 || id->block_tokens > KVP_MAX_BLOCK_TOKENS || n_blocks == 0 ||
        n_blocks > (1u << 28) || n_slots == 0 || n_slots > KVP_MAX_SLOTS) {
        return errf(err, errlen, "KV pool: invalid geometry (type %u, layers %u, kv_dim %u, block_tokens %u, "
                    "blocks %u, slots %u; q8_0 needs kv_dim %% 32 == 0)", id->type, id->n_layer, id->kv_dim,
                    id->block_tokens, n_blocks, n_slots);
    }
    g->id = *id;
    g->n_blocks = n_blocks;
    g->n_slots = n_slots;
    g->index_cap = 16;
    while (g->index_cap < 2 * n_blocks) g->index_cap *= 2;
    g->bitmap_words = (n_blocks + 63) / 64;
    g->row_bytes = row;
    g->plane_bytes = align_up(row * id->block_tokens, KVP_ALIGN);
    g->block_bytes = 2 * (uint64_t)id->n_layer * g->plane_bytes;
    off->blocks = KVP_HEADER_BYTES;
    off->index = align_up(off->blocks + (uint64_t)n_blocks * sizeof(kvp_block), KVP_ALIGN);
    off->tokens = align_up(off->index + (uint64_t)g->index_cap * sizeof(kvp_ientry), KVP_ALIGN);
    off->slots = align_up(off->tokens + (uint64_t)n_blocks * id->block_tokens * 4, KVP_ALIGN);
    off->bitmaps = align_up(off->slots + (uint64_t)n_slots * sizeof(kvp_slot), KVP_ALIGN);
    off->data = align_up(off->bitmaps + (uint64_t)n_slots * g->bitmap_words * 8, 4096);
    off->total = off->data + (uint64_t)n_blocks * g->block_bytes;
    g->total_bytes = off->total;
    return 0;
}

/* ---- processes ------------------------------------------------------------------- */

/* Whether the process that took slot s still runs: a gone pid, a zombie, or a pid now
 * worn by another process (another start time) is dead. */
static bool slot_alive(const kvp_slot *s) { return dmn_proc_alive(s->pid, s->start_time); }

/* ---- bitmaps, lists, index (under the mutex) --------------------------------------- */

static uint64_t *slot_bits(const kvp *p, int s) { return p->bits + (size_t)s * p->h->g.bitmap_words; }
static bool bit_get(const kvp *p, int s, int b) { return slot_bits(p, s)[b / 64] >> (b % 64) & 1; }
static void bit_set(kvp *p, int s, int b) { slot_bits(p, s)[b / 64] |= 1ull << (b % 64); }
static void bit_clear(kvp *p, int s, int b) { slot_bits(p, s)[b / 64] &= ~(1ull << (b % 64)); }

static void free_push(kvp *p, int b)
{
    kvp_block *k = &p->blk[b];
    k->state = KVP_FREE;
    k->writer = -1;
    k->nref = 0;
    k->hash = k->parent = 0;
    k->prev = -1;
    k->next = p->h->free_head;
    p->h->free_head = b;
    p->h->n_free++;
}

static int free_pop(kvp *p)
{
    int b = p->h->free_head;
    if (b < 0) return -1;
    LLM_ASSERT((uint32_t)b < p->h->g.n_blocks && p->blk[b].state == KVP_FREE);
    p->h->free_head = p->blk[b].next;
    p->h->n_free--;
    p->blk[b].next = p->blk[b].prev = -1;
    return b;
}

/* Appends a PUBLISHED block that lost its last reference: the newest cached block. */
static void lru_append(kvp *p, int b)
{
    kvp_header *h = p->h;
    kvp_block *k = &p->blk[b];
    k->lru = ++h->lru_clock;
    k->prev = h->lru_tail;
    k->next = -1;
    if (h->lru_tail >= 0) p->blk[h->lru_tail].next = b;
    else h->lru_head = b;
    h->lru_tail = b;
    h->n_cached++;
}

static void lru_unlink(kvp *p, int b)
{
    kvp_header *h = p->h;
    kvp_block *k = &p->blk[b];
    if (k->prev >= 0) p->blk[k->prev].next = k->next;
    else h->lru_head = k->next;
    if (k->next >= 0) p->blk[k->next].prev = k->prev;
    else h->lru_tail = k->prev;
    k->prev = k->next = -1;
    h->n_cached--;
}

static uint32_t index_home(const kvp *p, uint64_t hash) { return (uint32_t)(smp_mix64(hash) & (p->h->g.index_cap - 1)); }

/* The index position holding hash, or -1. */
static int64_t index_find(const kvp *p, uint64_t hash)
{
    uint32_t mask = p->h->g.index_cap - 1;
    for (uint32_t i = index_home(p, hash), n = 0; n <= mask; i = (i + 1) & mask, n++) {
        if (p->index[i].block < 0) return -1;
        if (p->index[i].hash == hash) return i;
    }
    return -1;
}

/* Inserts (hash, b); the caller made sure hash is absent. The index is at most half full. */
static void index_insert(kvp *p, uint64_t hash, int b)
{
    uint32_t mask = p->h->g.index_cap - 1, i = index_home(p, hash);
    while (p->index[i].block >= 0) i = (i + 1) & mask;
    p->index[i].hash = hash;
    p->index[i].block = b;
}

/* Removes the entry at position i and shifts the rest of its run back (no tombstones). */
static void index_delete(kvp *p, uint32_t i)
{
    uint32_t mask = p->h->g.index_cap - 1;
    p->index[i].block = -1;
    for (uint32_t j = (i + 1) & mask; p->index[j].block >= 0; j = (j + 1) & mask) {
        uint32_t home = index_home(p, p->index[j].hash);
        /* j's entry may move to the hole i unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        p->index[i] = p->index[j];
        p->index[j].block = -1;
        i = j;
    }
}

/* Unindexes a PUBLISHED block if the index points to it. */
static void index_drop_block(kvp *p, int b)
{
    int64_t i = index_find(p, p->blk[b].hash);
    if (i >= 0 && p->index[i].block == b) index_delete(p, (uint32_t)i);
}

/* ---- repair ---------------------------------------------------------------------------- */

static int cmp_lru(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b; /* (stamp, block) pairs */
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void clear_slot(kvp *p, int s)
{
    memset(slot_bits(p, s), 0, p->h->g.bitmap_words * 8);
    p->slots[s].pid = 0;
    p->slots[s].start_time = 0;
    p->slots[s].state = KVP_SLOT_FREE;
}

/* Rebuilds every derived structure from the block states and the live bitmaps: what a
 * critical section writes first. Clears dead slots first. Idempotent; under the mutex. */
static void rebuild(kvp *p)
{
    kvp_header *h = p->h;
    const kvp_geometry *g = &h->g;
    h->n_live_slots = 0;
    for (uint32_t s = 0; s < g->n_slots; s++) {
        if (p->slots[s].state == KVP_SLOT_LIVE && (int)s != p->slot && !slot_alive(&p->slots[s])) {
            clear_slot(p, (int)s);
            h->c.reaped++;
        }
        if (p->slots[s].state != KVP_SLOT_LIVE) clear_slot(p, (int)s);
        else h->n_live_slots++;
    }
    for (uint32_t b = 0; b < g->n_blocks; b++) {
        kvp_block *k = &p->blk[b];
        if (k->state >= KVP_STATE_COUNT) k->state = KVP_FREE;
        if (k->state == KVP_WRITING && (k->writer < 0 || (uint32_t)k->writer >= g->n_slots ||
                                        p->slots[k->writer].state != KVP_SLOT_LIVE))
            k->state = KVP_FREE;
        k->nref = 0;
        if (k->state != KVP_WRITING) k->writer = -1;
    }
    /* only a PUBLISHED block may be referenced: mask every bitmap, a word at a time */
    for (uint32_t i = 0; i < g->bitmap_words; i++) {
        uint64_t published = 0;
        for (uint32_t j = 0; j < 64 && i * 64 + j < g->n_blocks; j++)
            published |= (uint64_t)(p->blk[i * 64 + j].state == KVP_PUBLISHED) << j;
        for (uint32_t s = 0; s < g->n_slots; s++) slot_bits(p, (int)s)[i] &= published;
    }
    for (uint32_t s = 0; s < g->n_slots; s++) {
        const uint64_t *w = slot_bits(p, (int)s);
        for (uint32_t i = 0; i < g->bitmap_words; i++)
            for (uint64_t x = w[i]; x; x &= x - 1) p->blk[i * 64 + (uint32_t)__builtin_ctzll(x)].nref++;
    }
    for (uint32_t i = 0; i < g->index_cap; i++) p->index[i].block = -1;
    h->free_head = h->lru_head = h->lru_tail = -1;
    h->n_free = h->n_cached = 0;
    uint64_t *cached = malloc((size_t)g->n_blocks * 2 * sizeof *cached);
    uint32_t nc = 0;
    for (uint32_t b0 = g->n_blocks; b0-- > 0;) { /* pushed backwards: the free list ascends */
        int b = (int)b0;
        kvp_block *k = &p->blk[b];
        if (k->state == KVP_PUBLISHED) {
            if (index_find(p, k->hash) < 0) index_insert(p, k->hash, b);
            else if (k->nref == 0) k->state = KVP_FREE; /* a duplicate nobody holds */
        }
        if (k->state == KVP_FREE) free_push(p, b);
        else if (k->state == KVP_PUBLISHED && k->nref == 0) {
            if (cached) {
                cached[2 * nc] = k->lru;
                cached[2 * nc + 1] = b0;
            }
            nc++;
        }
    }
    uint64_t clock = h->lru_clock;
    if (cached) {
        qsort(cached, nc, 2 * sizeof *cached, cmp_lru);
        for (uint32_t i = 0; i < nc; i++) lru_append(p, (int)cached[2 * i + 1]);
    } else {
        for (uint32_t b = 0; b < g->n_blocks; b++)
            if (p->blk[b].state == KVP_PUBLISHED && p->blk[b].nref == 0) lru_append(p, (int)b);
    }
    /* lru_append restamps; keep the clock ahead of every stamp */
    if (h->lru_clock < clock) h->lru_clock = clock;
    free(cached);
}

/* The mutex is waited for in steps of KVP_LOCK_STEP_MS, never for good. An unlock wakes
 * one waiter; if that one is killed before it takes the lock, while a third process took
 * it in between, the wakeup dies with it: the kernel's death handling sees an owner and
 * wakes no one, the lock word no longer says anyone waits, so no later unlock wakes the
 * others and they would sleep on a free lock (check_kvpool's test_lost_wakeup makes it;
 * a worker killed -9 at that moment could leave another asleep until something woke it).
 * A step that times out just tries again: a lost wakeup costs one step. */
#define KVP_LOCK_STEP_MS 20

static int lock_wait(pthread_mutex_t *m)
{
    int rc = pthread_mutex_trylock(m);
    while (rc == EBUSY || rc == ETIMEDOUT) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t); /* timedlock's clock (sanitizers know it, not clocklock) */
        t.tv_nsec += KVP_LOCK_STEP_MS * 1000000L;
        if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
        rc = pthread_mutex_timedlock(m, &t);
    }
    return rc;
}

static void lock(kvp *p)
{
    int rc = lock_wait(&p->h->mutex.m);
    if (rc == EOWNERDEAD) {
        /* its owner died inside a critical section: whatever it half wrote is rebuilt */
        rebuild(p);
        p->h->c.repairs++;
        pthread_mutex_consistent(&p->h->mutex.m);
        log_warn("KV pool %s: a process died holding its lock; repaired", p->name);
    } else {
        LLM_ASSERT(rc == 0);
    }
}

static void unlock(kvp *p) { pthread_mutex_unlock(&p->h->mutex.m); }

/* Releases the slots of dead attachers; under the mutex. Returns how many. */
static int reap_locked(kvp *p)
{
    int dead = 0;
    for (uint32_t s = 0; s < p->h->g.n_slots; s++)
        if (p->slots[s].state == KVP_SLOT_LIVE && (int)s != p->slot && !slot_alive(&p->slots[s])) dead++;
    if (dead) rebuild(p); /* rare: one tested path for every release of the dead */
    return dead;
}

int kvp_reap(kvp *p)
{
    if (!p || p->pid != getpid()) return -1;
    lock(p);
    int n = reap_locked(p);
    unlock(p);
    if (n) log_info("KV pool %s: released %d slot%s of dead processes", p->name, n, n == 1 ? "" : "s");
    return n;
}

/* ---- create, attach, close ------------------------------------------------------------ */

static kvp *handle_new(void *base, size_t len, const char *name)
{
    kvp *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    kvp_header *h = base;
    kvp_geometry g;
    kvp_offsets off;
    if (kvp_layout(&h->g.id, h->g.n_blocks, h->g.n_slots, &g, &off, NULL, 0) != 0) {
        free(p);
        return NULL;
    }
    p->mine = calloc(g.n_blocks, sizeof *p->mine);
    if (!p->mine) {
        free(p);
        return NULL;
    }
    char *c = base;
    p->base = base;
    p->len = len;
    p->h = h;
    p->blk = (kvp_block *)(c + off.blocks);
    p->index = (kvp_ientry *)(c + off.index);
    p->tokens = (int32_t *)(c + off.tokens);
    p->slots = (kvp_slot *)(c + off.slots);
    p->bits = (uint64_t *)(c + off.bitmaps);
    p->data = c + off.data;
    p->slot = -1;
    p->pid = getpid();
    snprintf(p->name, sizeof p->name, "%s", name);
    return p;
}

static void handle_free(kvp *p)
{
    if (!p) return;
    if (p->base) munmap(p->base, p->len);
    free(p->mine);
    free(p);
}

int kvp_create(const char *name, const kvp_params *pr, kvp **out, char *err, size_t errlen)
{
    *out = NULL;
    uint32_t n_slots = pr->n_slots ? pr->n_slots : 64;
    kvp_geometry g;
    kvp_offsets off;
    uint64_t nb = pr->n_blocks;
    if (!nb && pr->tokens && pr->id.block_tokens) nb = (pr->tokens + pr->id.block_tokens - 1) / pr->id.block_tokens;
    if (!nb && pr->bytes) {
        /* the metadata grows with the block count: start from the data alone, shrink to fit */
        if (kvp_layout(&pr->id, 1, n_slots, &g, &off, err, errlen) != 0) return -1;
        nb = pr->bytes / g.block_bytes;
        if (nb > (1u << 28)) nb = 1u << 28;
        while (nb > 0 && kvp_layout(&pr->id, (uint32_t)nb, n_slots, &g, &off, NULL, 0) == 0 && off.total > pr->bytes)
            nb--;
        if (nb == 0)
            return errf(err, errlen, "KV pool %s: %llu bytes hold no block of %llu bytes", name,
                        (unsigned long long)pr->bytes, (unsigned long long)g.block_bytes);
    }
    if (nb > UINT32_MAX || kvp_layout(&pr->id, (uint32_t)nb, n_slots, &g, &off, err, errlen) != 0) {
        if (nb > UINT32_MAX) errf(err, errlen, "KV pool %s: %llu blocks are too many", name, (unsigned long long)nb);
        return -1;
    }
    void *base;
    int rc = seg_shm_create(name, g.total_bytes, &base, err, errlen);
    if (rc != 0) return rc;
    kvp_header *h = base;
    h->magic = KVP_MAGIC;
    h->layout_version = KVP_LAYOUT_VERSION;
    h->creator_pid = (int32_t)getpid();
    h->created_ns = now_ns();
    h->g = g;
    h->geo_checksum = csum64(&h->g, sizeof h->g, 0);
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    rc = pthread_mutex_init(&h->mutex.m, &a);
    pthread_mutexattr_destroy(&a);
    kvp *p = rc == 0 ? handle_new(base, g.total_bytes, name) : NULL;
    if (!p) {
        errf(err, errlen, "KV pool %s: %s", name, rc ? strerror(rc) : "out of memory");
        munmap(base, g.total_bytes);
        shm_unlink(name);
        return -1;
    }
    /* the segment is zeroed: every slot FREE; the rebuild links every block FREE */
    rebuild(p);
    __atomic_store_n(&h->state, KVP_READY, __ATOMIC_RELEASE);
    *out = p;
    return 0;
}

/* Validates a mapped pool of len bytes against the identity expected (NULL: any). */
static int check_pool(const void *base, size_t len, const char *name, const kvp_ident *want, char *err,
                      size_t errlen)
{
    const kvp_header *h = base;
    if (h->magic != KVP_MAGIC)
        return errf(err, errlen, "KV pool %s: bad magic (not a KV pool)", name);
    if (h->layout_version != KVP_LAYOUT_VERSION)
        return errf(err, errlen, "KV pool %s: layout version %u, this engined reads %u (remove it with "
                    "engined --remove-segment %s)", name, h->layout_version, KVP_LAYOUT_VERSION, name);
    uint64_t sum = csum64(&h->g, sizeof h->g, 0);
    if (sum != h->geo_checksum)
        return errf(err, errlen, "KV pool %s: header checksum mismatch (stored %016llx, computed %016llx): "
                    "the header is corrupt; remove it (engined --remove-segment %s)", name,
                    (unsigned long long)h->geo_checksum, (unsigned long long)sum, name);
    kvp_geometry g;
    kvp_offsets off;
    char why[160];
    if (kvp_layout(&h->g.id, h->g.n_blocks, h->g.n_slots, &g, &off, why, sizeof why) != 0)
        return errf(err, errlen, "%s (in %s)", why, name);
    if (memcmp(&g, &h->g, sizeof g) != 0 || g.total_bytes != len)
        return errf(err, errlen, "KV pool %s: header sizes do not match its geometry or its %zu bytes", name, len);
    const kvp_ident *id = &h->g.id;
    if (want && (want->model_id != id->model_id || want->n_layer != id->n_layer || want->kv_dim != id->kv_dim ||
                 want->type != id->type || want->kind != id->kind ||
                 (want->block_tokens && want->block_tokens != id->block_tokens)))
        return errf(err, errlen, "KV pool %s holds another cache (model %016llx, %u layers of kind %u, kv_dim %u, "
                    "type %u, %u tokens a block; expected %016llx, %u, %u, %u, %u, %u): remove it (engined "
                    "--remove-segment %s)", name, (unsigned long long)id->model_id, id->n_layer, id->kind, id->kv_dim,
                    id->type, id->block_tokens, (unsigned long long)want->model_id, want->n_layer, want->kind,
                    want->kv_dim, want->type, want->block_tokens, name);
    return 0;
}

int kvp_attach(const char *name, const kvp_ident *expect, kvp **out, char *err, size_t errlen)
{
    *out = NULL;
    struct stat st;
    int fd = seg_open_owned(name, O_RDWR, &st, err, errlen);
    if (fd < 0) return fd;
    if (st.st_size == 0) { /* a creator between shm_open and ftruncate */
        close(fd);
        return 1;
    }
    if ((size_t)st.st_size < sizeof(kvp_header)) {
        close(fd);
        return errf(err, errlen, "KV pool %s: too small (%lld bytes) to hold a header", name, (long long)st.st_size);
    }
    size_t len = (size_t)st.st_size;
    void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) return errf(err, errlen, "mmap %s: %s", name, strerror(errno));
    const kvp_header *h = base;
    uint32_t state = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
    if (h->magic == 0 || (h->magic == KVP_MAGIC && state == KVP_CREATING)) {
        munmap(base, len);
        return 1;
    }
    if (check_pool(base, len, name, expect, err, errlen) != 0) {
        munmap(base, len);
        return -1;
    }
    if (state != KVP_READY) {
        munmap(base, len);
        return errf(err, errlen, "KV pool %s: unknown state %u", name, state);
    }
    kvp *p = handle_new(base, len, name);
    if (!p) {
        munmap(base, len);
        return errf(err, errlen, "KV pool %s: out of memory", name);
    }
    char st_letter;
    uint64_t start = dmn_proc_start(getpid(), &st_letter);
    lock(p);
    reap_locked(p);
    for (uint32_t s = 0; s < p->h->g.n_slots && p->slot < 0; s++) {
        kvp_slot *sl = &p->slots[s];
        if (sl->state != KVP_SLOT_FREE) continue;
        memset(slot_bits(p, (int)s), 0, p->h->g.bitmap_words * 8);
        sl->pid = (int32_t)getpid();
        sl->start_time = start;
        sl->attach_ns = now_ns();
        sl->state = KVP_SLOT_LIVE; /* last: a slot is LIVE only once whole */
        p->h->n_live_slots++;
        p->slot = (int)s;
    }
    uint32_t n_slots = p->h->g.n_slots;
    unlock(p);
    if (p->slot < 0) {
        handle_free(p);
        return errf(err, errlen, "KV pool %s: all %u slots are held by live processes", name, n_slots);
    }
    *out = p;
    return 0;
}

void kvp_close(kvp **pp)
{
    if (!pp || !*pp) return;
    kvp *p = *pp;
    *pp = NULL;
    if (p->slot >= 0 && p->pid == getpid()) {
        lock(p);
        /* our slot as if we had died: one release path for every leaver */
        clear_slot(p, p->slot);
        p->slot = -1;
        rebuild(p);
        unlock(p);
    }
    handle_free(p);
}

int kvp_remove(const char *name, char *err, size_t errlen)
{
    if (strncmp(name, "/llm-kv-", 8) != 0 || strchr(name + 1, '/'))
        return errf(err, errlen, "'%s' is not a KV pool name (expected /llm-kv-...)", name);
    if (shm_unlink(name) != 0) {
        if (errno == ENOENT) return 1;
        return errf(err, errlen, "remove %s: %s", name, strerror(errno));
    }
    return 0;
}

/* ---- the block state machine ------------------------------------------------------------ */

static void check_block(const kvp *p, int b)
{
    LLM_ASSERT(b >= 0 && (uint32_t)b < p->h->g.n_blocks);
    LLM_ASSERT(p->slot >= 0 && p->pid == getpid()); /* a handle with a slot, in its own process */
}

static bool tokens_equal(const kvp *p, int b, const int32_t *tokens)
{
    uint32_t n = p->h->g.id.block_tokens;
    return !tokens || memcmp(p->tokens + (size_t)b * n, tokens, n * sizeof *tokens) == 0;
}

/* Takes a reference on PUBLISHED block b for this process; under the mutex. */
static void ref_take(kvp *p, int b)
{
    if (p->mine[b]++ > 0) return; /* this process holds it already: the bit is set */
    bit_set(p, p->slot, b);
    FAULT(KVP_FAULT_LOOKUP_BIT);
    if (p->blk[b].nref++ == 0) lru_unlink(p, b);
}

int kvp_lookup(kvp *p, uint64_t hash, uint64_t parent, const int32_t *tokens)
{
    LLM_ASSERT(p->slot >= 0 && p->pid == getpid());
    lock(p);
    p->h->c.lookups++;
    int64_t i = index_find(p, hash);
    int b = i >= 0 ? p->index[i].block : -1;
    if (b >= 0 && (p->blk[b].parent != parent || !tokens_equal(p, b, tokens))) b = -1;
    if (b >= 0) {
        LLM_ASSERT(p->blk[b].state == KVP_PUBLISHED);
        ref_take(p, b);
        p->h->c.hits++;
    }
    unlock(p);
    return b;
}

int kvp_alloc(kvp *p)
{
    LLM_ASSERT(p->slot >= 0 && p->pid == getpid());
    lock(p);
    int b = free_pop(p);
    if (b < 0 && p->h->lru_head < 0) reap_locked(p); /* the dead may hold what we need */
    if (b < 0) b = free_pop(p);
    if (b < 0 && (b = p->h->lru_head) >= 0) {
        LLM_ASSERT(p->blk[b].state == KVP_PUBLISHED && p->blk[b].nref == 0);
        lru_unlink(p, b);
        index_drop_block(p, b);
        FAULT(KVP_FAULT_ALLOC_EVICTED);
        p->h->c.evictions++;
    }
    if (b >= 0) {
        kvp_block *k = &p->blk[b];
        k->writer = p->slot;
        k->hash = k->parent = 0;
        k->state = KVP_WRITING;
        p->h->c.allocs++;
    } else {
        p->h->c.alloc_fails++;
    }
    unlock(p);
    return b;
}

int kvp_publish(kvp *p, int b, uint64_t hash, uint64_t parent, const int32_t *tokens)
{
    check_block(p, b);
    LLM_ASSERT(tokens != NULL);
    uint32_t n = p->h->g.id.block_tokens;
    lock(p);
    FAULT(KVP_FAULT_PUBLISH_LOCKED);
    kvp_block *k = &p->blk[b];
    LLM_ASSERT(k->state == KVP_WRITING && k->writer == p->slot);
    int64_t i = index_find(p, hash);
    int use = b;
    if (i >= 0) {
        int other = p->index[i].block;
        if (p->blk[other].parent == parent && tokens_equal(p, other, tokens)) {
            /* the same block, published first by another attacher: ours goes back */
            free_push(p, b);
            ref_take(p, other);
            p->h->c.duplicates++;
            use = other;
        } else {
            p->h->c.collisions++;
            use = KVP_COLLISION;
        }
    } else {
        k->hash = hash;
        k->parent = parent;
        memcpy(p->tokens + (size_t)b * n, tokens, n * sizeof *tokens);
        FAULT(KVP_FAULT_PUBLISH_META);
        k->writer = -1;
        k->state = KVP_PUBLISHED;
        FAULT(KVP_FAULT_PUBLISH_STATE);
        index_insert(p, hash, b);
        FAULT(KVP_FAULT_PUBLISH_INDEXED);
        p->mine[b] = 1;
        bit_set(p, p->slot, b);
        FAULT(KVP_FAULT_PUBLISH_BIT);
        k->nref++;
        p->h->c.publishes++;
    }
    unlock(p);
    return use;
}

void kvp_release(kvp *p, int b)
{
    check_block(p, b);
    lock(p);
    kvp_block *k = &p->blk[b];
    if (k->state == KVP_WRITING) {
        LLM_ASSERT(k->writer == p->slot);
        free_push(p, b);
    } else {
        LLM_ASSERT(k->state == KVP_PUBLISHED && p->mine[b] > 0 && bit_get(p, p->slot, b));
        if (--p->mine[b] == 0) {
            bit_clear(p, p->slot, b);
            FAULT(KVP_FAULT_RELEASE_BIT);
            LLM_ASSERT(k->nref > 0);
            if (--k->nref == 0) lru_append(p, b);
        }
    }
    unlock(p);
}

uint32_t kvp_refs(const kvp *p, int b) { return b >= 0 && (uint32_t)b < p->h->g.n_blocks ? p->mine[b] : 0; }

void *kvp_block_data(const kvp *p, int b)
{
    LLM_ASSERT(b >= 0 && (uint32_t)b < p->h->g.n_blocks);
    return p->data + (size_t)b * p->h->g.block_bytes;
}

void *kvp_plane(const kvp *p, int b, int layer, kvp_half half)
{
    LLM_ASSERT(layer >= 0 && (uint32_t)layer < p->h->g.id.n_layer);
    return (char *)kvp_block_data(p, b) + ((size_t)layer * 2 + half) * p->h->g.plane_bytes;
}

const kvp_geometry *kvp_geometry_of(const kvp *p) { return &p->h->g; }
int kvp_slot_of(const kvp *p) { return p->slot; }
kvp_header *kvp_header_of(const kvp *p) { return p->h; }
kvp_slot *kvp_slot_table(const kvp *p) { return p->slots; }

void kvp_stats(kvp *p, kvp_stats_t *s)
{
    memset(s, 0, sizeof *s);
    lock(p);
    const kvp_geometry *g = &p->h->g;
    s->n_blocks = g->n_blocks;
    s->block_tokens = g->id.block_tokens;
    s->n_slots = g->n_slots;
    s->block_bytes = g->block_bytes;
    s->total_bytes = g->total_bytes;
    for (uint32_t b = 0; b < g->n_blocks; b++) {
        const kvp_block *k = &p->blk[b];
        if (k->state == KVP_FREE) s->free++;
        else if (k->state == KVP_WRITING) s->writing++;
        else {
            s->published++;
            if (k->nref) s->referenced++;
            else s->cached++;
        }
    }
    s->live_slots = p->h->n_live_slots;
    s->c = p->h->c;
    unlock(p);
}

uint32_t kvp_available(kvp *p)
{
    lock(p);
    uint32_t n = p->h->n_free + p->h->n_cached;
    unlock(p);
    return n;
}

/* ---- the sanity check ----------------------------------------------------------------- */

static int check_locked(kvp *p, char *err, size_t errlen)
{
    const kvp_header *h = p->h;
    const kvp_geometry *g = &h->g;
    uint32_t live = 0, n_free = 0, n_cached = 0, n_indexed = 0;
    for (uint32_t s = 0; s < g->n_slots; s++) {
        if (p->slots[s].state == KVP_SLOT_LIVE) {
            live++;
            continue;
        }
        for (uint32_t i = 0; i < g->bitmap_words; i++)
            if (slot_bits(p, (int)s)[i]) return errf(err, errlen, "slot %u is free but holds references", s);
    }
    if (live != h->n_live_slots) return errf(err, errlen, "%u live slots, header says %u", live, h->n_live_slots);
    for (uint32_t b = 0; b < g->n_blocks; b++) {
        const kvp_block *k = &p->blk[b];
        uint32_t refs = 0;
        for (uint32_t s = 0; s < g->n_slots; s++) refs += bit_get(p, (int)s, (int)b);
        if (k->state >= KVP_STATE_COUNT) return errf(err, errlen, "block %u: state %u", b, k->state);
        if (k->state != KVP_PUBLISHED && refs) return errf(err, errlen, "block %u: state %u with %u references", b, k->state, refs);
        if (k->state == KVP_PUBLISHED && refs != k->nref)
            return errf(err, errlen, "block %u: nref %u, bitmaps say %u", b, k->nref, refs);
        if (k->state == KVP_WRITING && (k->writer < 0 || (uint32_t)k->writer >= g->n_slots ||
                                        p->slots[k->writer].state != KVP_SLOT_LIVE))
            return errf(err, errlen, "block %u: WRITING by slot %d, not a live slot", b, k->writer);
        if (k->state == KVP_PUBLISHED) {
            int64_t i = index_find(p, k->hash);
            if (i < 0 || p->index[i].block != (int)b) return errf(err, errlen, "block %u: PUBLISHED, not indexed", b);
        }
        if (k->state == KVP_FREE) n_free++;
        if (k->state == KVP_PUBLISHED && k->nref == 0) n_cached++;
    }
    for (uint32_t i = 0; i < g->index_cap; i++) {
        int b = p->index[i].block;
        if (b < 0) continue;
        n_indexed++;
        if ((uint32_t)b >= g->n_blocks || p->blk[b].state != KVP_PUBLISHED || p->blk[b].hash != p->index[i].hash)
            return errf(err, errlen, "index entry %u points to block %d, not PUBLISHED with its hash", i, b);
        if (index_find(p, p->index[i].hash) != (int64_t)i)
            return errf(err, errlen, "index entry %u is not reachable from its home", i);
    }
    uint32_t n = 0;
    for (int b = h->free_head; b >= 0; b = p->blk[b].next, n++)
        if (n > g->n_blocks || p->blk[b].state != KVP_FREE) return errf(err, errlen, "free list broken at block %d", b);
    if (n != n_free || n != h->n_free) return errf(err, errlen, "free list holds %u, %u FREE blocks, header says %u", n, n_free, h->n_free);
    n = 0;
    uint64_t last = 0;
    int prev = -1;
    for (int b = h->lru_head; b >= 0; prev = b, b = p->blk[b].next, n++) {
        const kvp_block *k = &p->blk[b];
        if (n > g->n_blocks || k->state != KVP_PUBLISHED || k->nref != 0 || k->prev != prev || k->lru < last)
            return errf(err, errlen, "LRU list broken at block %d", b);
        last = k->lru;
    }
    if (prev != h->lru_tail || n != n_cached || n != h->n_cached)
        return errf(err, errlen, "LRU list holds %u, %u cached blocks, header says %u", n, n_cached, h->n_cached);
    return 0;
}

int kvp_check(kvp *p, char *err, size_t errlen)
{
    lock(p);
    int rc = check_locked(p, err, errlen);
    unlock(p);
    return rc;
}
