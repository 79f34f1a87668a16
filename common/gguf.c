/*
 * gguf.c - the GGUF reader: validates a whole file (or buffer) once, then serves
 * metadata and tensor infos from it. See gguf.h for the format and the API.
 *
 * Hostile input is the normal case. Every read goes through rd_need(), which checks
 * the remaining length before touching a byte; every size computation is
 * overflow-checked; counts are compared with what the rest of the file could hold
 * before anything is allocated. An error names the item ("kv 3 (general.name)",
 * "tensor 5 (blk.0.attn_q.weight)"), the field and its byte offset.
 *
 * Ownership: the ctx owns its mapping (gguf_open) and every copy it makes (keys,
 * tensor names, string scalars, element tables); gguf_close frees them all.
 * Multi-byte values are read with memcpy as little-endian (the host is x86-64).
 */
#include "gguf.h"
#include "csum.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "errcode.h"
#include "hash.h"

#define GGUF_MAX_NEST 16        /* arrays of arrays deeper than this are refused */
#define GGUF_MAX_NAME 4096      /* longest key or tensor name accepted */

/* One parsed value. Scalars and numeric arrays point into the buffer (p); string
 * arrays and nested arrays get element tables so that element i is O(1). */
struct gguf_value {
    gguf_vtype         type;  /* scalar type, or GGUF_T_ARRAY */
    gguf_vtype         elem;  /* element type of an array */
    uint64_t           n;     /* elements of an array; bytes of a string */
    uint64_t           off;   /* byte offset of the value in the buffer */
    uint64_t           size;  /* serialised bytes of the value */
    const uint8_t     *raw;   /* the serialised value (size bytes) */
    const uint8_t     *p;     /* scalar bytes, string bytes or numeric elements */
    gguf_str          *strs;  /* [n] elements of a string array */
    struct gguf_value *subs;  /* [n] elements of an array of arrays */
    char              *cstr;  /* NUL-terminated copy of a string scalar (kv level) */
};

typedef struct {
    char      *key;           /* NUL-terminated copy */
    uint64_t   key_off;       /* byte offset of the key in the buffer */
    gguf_value v;
} gguf_kv;

/* Open-addressing table from a name to an index; slots hold index + 1, 0 = empty. */
typedef struct {
    int64_t *slot;
    uint64_t mask;
} gguf_map;

struct gguf_ctx {
    const uint8_t *buf;       /* the whole file */
    size_t         len;
    void          *map;       /* owned mapping (gguf_open), else NULL */
    uint32_t       version;
    uint32_t       alignment;
    uint64_t       data_offset;
    int64_t        n_kv;
    int64_t        n_tensors;
    gguf_kv       *kv;        /* [n_kv] */
    gguf_tensor   *tensors;   /* [n_tensors] */
    gguf_map       kv_map;
    gguf_map       t_map;
    uint64_t      *off_at;    /* [n_tensors] file offset of each tensor's data offset field */
};

/* Parser state: a cursor over the buffer plus the item being read, for messages. */
typedef struct {
    const uint8_t *buf;
    size_t         len;
    size_t         pos;
    char          *err;
    size_t         errlen;
    char           item[160]; /* "header", "kv 3 (general.name)", ... */
} rd;

static const uint8_t scalar_size[GGUF_T_COUNT] = {
    [GGUF_T_UINT8] = 1, [GGUF_T_INT8] = 1, [GGUF_T_UINT16] = 2, [GGUF_T_INT16] = 2,
    [GGUF_T_UINT32] = 4, [GGUF_T_INT32] = 4, [GGUF_T_FLOAT32] = 4, [GGUF_T_BOOL] = 1,
    [GGUF_T_UINT64] = 8, [GGUF_T_INT64] = 8, [GGUF_T_FLOAT64] = 8,
};

/* Smallest serialised size of one element of a type (strings: the u64 length;
 * arrays: type + count). Used to refuse counts the file cannot hold. */
static uint64_t min_size(gguf_vtype t)
{
    if (t == GGUF_T_STRING) return 8;
    if (t == GGUF_T_ARRAY) return 12;
    return scalar_size[t];
}

static const char *const vtype_names[GGUF_T_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
    "string", "array", "uint64", "int64", "float64",
};

/* Name of a value type for messages and tools. */
const char *gguf_vtype_name(gguf_vtype t)
{
    return (unsigned)t < GGUF_T_COUNT ? vtype_names[t] : "unknown";
}

static bool fail(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(rd *r, const char *fmt, ...)
{
    if (!r->err || r->errlen == 0) return false;
    int n = snprintf(r->err, r->errlen, "%s: ", r->item);
    if (n < 0 || (size_t)n >= r->errlen) return false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return false;
}

/* Checks that n more bytes exist at the cursor. */
static bool rd_need(rd *r, uint64_t n, const char *field)
{
    if (n <= r->len - r->pos) return true;
    return fail(r, "%s at offset %zu needs %llu bytes, but the file has %zu bytes",
                field, r->pos, (unsigned long long)n, r->len);
}

static bool rd_u32(rd *r, uint32_t *v, const char *field)
{
    if (!rd_need(r, 4, field)) return false;
    memcpy(v, r->buf + r->pos, 4);
    r->pos += 4;
    return true;
}

static bool rd_u64(rd *r, uint64_t *v, const char *field)
{
    if (!rd_need(r, 8, field)) return false;
    memcpy(v, r->buf + r->pos, 8);
    r->pos += 8;
    return true;
}

/* A string: u64 length, then that many bytes, all inside the buffer. */
static bool rd_str(rd *r, gguf_str *s, const char *field)
{
    size_t at = r->pos;
    uint64_t n;
    if (!rd_u64(r, &n, field)) return false;
    if (n > r->len - r->pos)
        return fail(r, "%s length %llu at offset %zu runs past the end of the file (%zu bytes)",
                    field, (unsigned long long)n, at, r->len);
    s->ptr = (const char *)r->buf + r->pos;
    s->len = n;
    r->pos += n;
    return true;
}

/* A key or tensor name: a string without NUL bytes, copied with a terminator. */
static bool rd_name(rd *r, char **out, uint64_t *off, const char *field)
{
    gguf_str s;
    *off = r->pos;
    if (!rd_str(r, &s, field)) return false;
    if (s.len > GGUF_MAX_NAME)
        return fail(r, "%s at offset %llu is %llu bytes long (limit %d)", field,
                    (unsigned long long)*off, (unsigned long long)s.len, GGUF_MAX_NAME);
    if (memchr(s.ptr, 0, s.len))
        return fail(r, "%s at offset %llu contains a NUL byte", field, (unsigned long long)*off);
    *out = malloc(s.len + 1);
    if (!*out) return fail(r, "out of memory");
    memcpy(*out, s.ptr, s.len);
    (*out)[s.len] = 0;
    return true;
}

static void value_free(gguf_value *v)
{
    if (v->subs)
        for (uint64_t i = 0; i < v->n; i++) value_free(&v->subs[i]);
    free(v->subs);
    free(v->strs);
    free(v->cstr);
    memset(v, 0, sizeof *v);
}

static bool rd_value(rd *r, gguf_vtype type, gguf_value *v, int depth);

/* The body of an array: element type, count, elements. */
static bool rd_array(rd *r, gguf_value *v, int depth)
{
    size_t at = r->pos;
    uint32_t et;
    uint64_t n;
    if (!rd_u32(r, &et, "array element type")) return false;
    if (et >= GGUF_T_COUNT)
        return fail(r, "array element type at offset %zu is unknown type id %u", at, et);
    if (!rd_u64(r, &n, "array count")) return false;
    v->elem = (gguf_vtype)et;
    if (n > (r->len - r->pos) / min_size(v->elem))
        return fail(r, "array count %llu at offset %zu (of %s) is more than the rest of the "
                    "file can hold (%zu bytes)", (unsigned long long)n, at + 4,
                    gguf_vtype_name(v->elem), r->len - r->pos);
    v->n = n;
    v->p = r->buf + r->pos;
    if (et == GGUF_T_STRING) {
        v->strs = calloc(n ? n : 1, sizeof *v->strs);
        if (!v->strs) return fail(r, "out of memory");
        for (uint64_t i = 0; i < n; i++) {
            size_t el = r->pos;
            uint64_t sl;
            if (!rd_u64(r, &sl, "array element string length")) return false;
            if (sl > r->len - r->pos)
                return fail(r, "array element %llu string length %llu at offset %zu runs past "
                            "the end of the file (%zu bytes)", (unsigned long long)i,
                            (unsigned long long)sl, el, r->len);
            v->strs[i] = (gguf_str){(const char *)r->buf + r->pos, sl};
            r->pos += sl;
        }
    } else if (et == GGUF_T_ARRAY) {
        if (depth >= GGUF_MAX_NEST)
            return fail(r, "array at offset %zu nests deeper than %d levels", at, GGUF_MAX_NEST);
        v->subs = calloc(n ? n : 1, sizeof *v->subs);
        if (!v->subs) return fail(r, "out of memory");
        for (uint64_t i = 0; i < n; i++)
            if (!rd_value(r, GGUF_T_ARRAY, &v->subs[i], depth + 1)) return false;
    } else {
        r->pos += n * scalar_size[et]; /* fits: checked against the rest above */
    }
    return true;
}

/* One value of a known type at the cursor. */
static bool rd_value(rd *r, gguf_vtype type, gguf_value *v, int depth)
{
    v->type = type;
    v->off = r->pos;
    v->raw = r->buf + r->pos;
    bool ok;
    if (type == GGUF_T_STRING) {
        gguf_str s;
        ok = rd_str(r, &s, "string value");
        if (ok) {
            v->p = (const uint8_t *)s.ptr;
            v->n = s.len;
        }
    } else if (type == GGUF_T_ARRAY) {
        ok = rd_array(r, v, depth);
    } else {
        ok = rd_need(r, scalar_size[type], "value");
        if (ok) {
            v->p = r->buf + r->pos;
            r->pos += scalar_size[type];
        }
    }
    v->size = r->pos - v->off;
    return ok;
}

static uint64_t hash_name(const char *s) { return hash_fnv1a(HASH_FNV_SEED, s, strlen(s)); }

static bool map_init(gguf_map *m, int64_t n)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2) cap *= 2;
    m->slot = calloc(cap, sizeof *m->slot);
    m->mask = cap - 1;
    return m->slot != NULL;
}

static const char *entry_name(const gguf_ctx *g, bool kv, int64_t i)
{
    return kv ? g->kv[i].key : g->tensors[i].name;
}

/* Index of the kv (or tensor) called name, or -1. */
static int64_t map_find(const gguf_ctx *g, bool kv, const char *name)
{
    const gguf_map *m = kv ? &g->kv_map : &g->t_map;
    if (!m->slot) return -1;
    for (uint64_t h = hash_name(name) & m->mask;; h = (h + 1) & m->mask) {
        int64_t s = m->slot[h];
        if (s == 0) return -1;
        if (strcmp(entry_name(g, kv, s - 1), name) == 0) return s - 1;
    }
}

static int64_t kv_lookup(const gguf_ctx *g, const char *key) { return map_find(g, true, key); }
static int64_t t_lookup(const gguf_ctx *g, const char *name) { return map_find(g, false, name); }

/* Inserts index i under name; returns the existing index on a duplicate, else -1. */
static int64_t map_insert(gguf_map *m, const char *name, int64_t i, const gguf_ctx *g, bool kv)
{
    for (uint64_t h = hash_name(name) & m->mask;; h = (h + 1) & m->mask) {
        int64_t s = m->slot[h];
        if (s == 0) {
            m->slot[h] = i + 1;
            return -1;
        }
        if (strcmp(entry_name(g, kv, s - 1), name) == 0) return s - 1;
    }
}

/* The header: magic, version, counts (checked against what the file can hold). */
static bool parse_header(rd *r, gguf_ctx *g)
{
    snprintf(r->item, sizeof r->item, "header");
    uint32_t magic;
    uint64_t nt, nkv;
    if (!rd_u32(r, &magic, "magic")) return false;
    if (magic != GGUF_MAGIC)
        return fail(r, "magic at offset 0 is 0x%08x, not \"GGUF\" (0x%08x): not a GGUF file",
                    magic, GGUF_MAGIC);
    if (!rd_u32(r, &g->version, "version")) return false;
    if (g->version < 2 || g->version > 3)
        return fail(r, "version at offset 4 is %u; only GGUF versions 2 and 3 are supported",
                    g->version);
    if (!rd_u64(r, &nt, "tensor count")) return false;
    if (!rd_u64(r, &nkv, "kv count")) return false;
    /* A kv takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8+4+8+4+8. */
    if (nkv > (r->len - r->pos) / 13)
        return fail(r, "kv count %llu at offset 16 is more than the file can hold (%zu bytes)",
                    (unsigned long long)nkv, r->len);
    if (nt > (r->len - r->pos) / 32)
        return fail(r, "tensor count %llu at offset 8 is more than the file can hold (%zu bytes)",
                    (unsigned long long)nt, r->len);
    g->n_kv = (int64_t)nkv;
    g->n_tensors = (int64_t)nt;
    return true;
}

static bool parse_kvs(rd *r, gguf_ctx *g)
{
    g->kv = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kv);
    if (!g->kv || !map_init(&g->kv_map, g->n_kv)) return fail(r, "out of memory");
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        snprintf(r->item, sizeof r->item, "kv %lld", (long long)i);
        if (!rd_name(r, &kv->key, &kv->key_off, "key")) {
            g->n_kv = i + 1; /* so that close frees what was read */
            return false;
        }
        snprintf(r->item, sizeof r->item, "kv %lld (%.100s)", (long long)i, kv->key);
        size_t at = r->pos;
        uint32_t type;
        bool ok = rd_u32(r, &type, "value type");
        if (ok && type >= GGUF_T_COUNT)
            ok = fail(r, "value type at offset %zu is unknown type id %u", at, type);
        if (ok) ok = rd_value(r, (gguf_vtype)type, &kv->v, 0);
        if (ok && type == GGUF_T_STRING) {
            kv->v.cstr = malloc(kv->v.n + 1);
            if (!kv->v.cstr) ok = fail(r, "out of memory");
            else {
                memcpy(kv->v.cstr, kv->v.p, kv->v.n);
                kv->v.cstr[kv->v.n] = 0;
            }
        }
        if (ok) {
            int64_t dup = map_insert(&g->kv_map, kv->key, i, g, true);
            if (dup >= 0)
                ok = fail(r, "key at offset %llu duplicates kv %lld",
                          (unsigned long long)kv->key_off, (long long)dup);
        }
        if (!ok) {
            g->n_kv = i + 1;
            return false;
        }
    }
    return true;
}

/* general.alignment: optional, a uint32 power of two. */
static bool parse_alignment(rd *r, gguf_ctx *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = kv_lookup(g, "general.alignment");
    if (i < 0) return true;
    const gguf_value *v = &g->kv[i].v;
    snprintf(r->item, sizeof r->item, "kv %lld (general.alignment)", (long long)i);
    if (v->type != GGUF_T_UINT32)
        return fail(r, "value at offset %llu has type %s, expected uint32",
                    (unsigned long long)v->off, gguf_vtype_name(v->type));
    uint32_t a;
    memcpy(&a, v->p, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return fail(r, "alignment %u at offset %llu is not a power of two", a,
                    (unsigned long long)v->off);
    g->alignment = a;
    return true;
}

/* Shape, type and size of one tensor info. */
static bool parse_shape(rd *r, gguf_tensor *t)
{
    size_t at = r->pos;
    if (!rd_u32(r, &t->n_dims, "n_dims")) return false;
    if (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS)
        return fail(r, "n_dims %u at offset %zu is not in 1..%d", t->n_dims, at, GGUF_MAX_DIMS);
    int64_t elems = 1;
    size_t ne_at = r->pos;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        at = r->pos;
        uint64_t ne;
        if (!rd_u64(r, &ne, "dimension")) return false;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return fail(r, "ne[%u] at offset %zu is %lld; dimensions must be positive", d, at,
                        (long long)ne);
        t->ne[d] = (int64_t)ne;
        if (__builtin_mul_overflow(elems, t->ne[d], &elems))
            return fail(r, "ne[%u] at offset %zu: the element count overflows 64 bits", d, at);
    }
    at = r->pos;
    if (!rd_u32(r, &t->type, "type")) return false;
    const qt_traits *q = qt_get(t->type);
    if (!q || q->type_size == 0)
        return fail(r, "type at offset %zu is unknown type id %u", at, t->type);
    size_t row = qt_row_size(t->type, t->ne[0]);
    if (row == 0)
        return fail(r, "ne[0] = %lld at offset %zu is not a multiple of the block size %d of type %s",
                    (long long)t->ne[0], ne_at, q->block_size, q->name);
    uint64_t nbytes;
    if (__builtin_mul_overflow((uint64_t)row, (uint64_t)(elems / t->ne[0]), &nbytes))
        return fail(r, "data size of %lld elements of type %s (shape at offset %zu) overflows 64 bits",
                    (long long)elems, q->name, ne_at);
    t->nbytes = nbytes;
    return true;
}

static bool parse_tensor_infos(rd *r, gguf_ctx *g)
{
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->tensors);
    g->off_at = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->off_at);
    if (!g->tensors || !g->off_at || !map_init(&g->t_map, g->n_tensors)) return fail(r, "out of memory");
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t name_off;
        snprintf(r->item, sizeof r->item, "tensor %lld", (long long)i);
        char *name = NULL;
        bool ok = rd_name(r, &name, &name_off, "name");
        t->name = name;
        if (!ok) {
            g->n_tensors = i + 1;
            return false;
        }
        snprintf(r->item, sizeof r->item, "tensor %lld (%.100s)", (long long)i, name);
        ok = parse_shape(r, t);
        g->off_at[i] = r->pos;
        ok = ok && rd_u64(r, &t->offset, "data offset");
        if (ok) {
            int64_t dup = map_insert(&g->t_map, name, i, g, false);
            if (dup >= 0)
                ok = fail(r, "name at offset %llu duplicates tensor %lld",
                          (unsigned long long)name_off, (long long)dup);
        }
        if (!ok) {
            g->n_tensors = i + 1;
            return false;
        }
    }
    return true;
}

typedef struct {
    uint64_t offset;
    int64_t  index;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Data section: aligned start, every tensor aligned, inside the file, no overlaps. */
static bool check_data(rd *r, gguf_ctx *g)
{
    uint64_t a = g->alignment, end = r->pos;
    uint64_t start = end + (a - end % a) % a; /* end < len, so no overflow */
    if (start > r->len) {
        if (g->n_tensors > 0) {
            snprintf(r->item, sizeof r->item, "data section");
            return fail(r, "data starts at offset %llu (tensor infos end at %llu, aligned to %llu),"
                        " past the end of the file (%zu bytes)", (unsigned long long)start,
                        (unsigned long long)end, (unsigned long long)a, r->len);
        }
        start = r->len; /* a metadata-only file may omit the final padding */
    }
    g->data_offset = start;
    uint64_t avail = r->len - start;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        snprintf(r->item, sizeof r->item, "tensor %lld (%.100s)", (long long)i, t->name);
        unsigned long long at = g->off_at[i];
        if (t->offset % a != 0)
            return fail(r, "data offset %llu (field at offset %llu) is not a multiple of the "
                        "alignment %llu", (unsigned long long)t->offset, at, (unsigned long long)a);
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return fail(r, "data at offset %llu + %llu bytes (field at offset %llu) runs past the "
                        "end of the file (data section of %llu bytes at file offset %llu)",
                        (unsigned long long)t->offset, (unsigned long long)t->nbytes, at,
                        (unsigned long long)avail, (unsigned long long)start);
        t->data = r->buf + start + t->offset;
    }
    if (g->n_tensors < 2) return true;
    span *order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return fail(r, "out of memory");
    for (int64_t i = 0; i < g->n_tensors; i++) order[i] = (span){g->tensors[i].offset, i};
    qsort(order, (size_t)g->n_tensors, sizeof *order, cmp_span);
    bool ok = true;
    for (int64_t k = 1; k < g->n_tensors && ok; k++) {
        const gguf_tensor *p = &g->tensors[order[k - 1].index], *t = &g->tensors[order[k].index];
        /* both end inside the file (checked above), so the sum cannot overflow */
        if (t->offset < p->offset + p->nbytes) {
            snprintf(r->item, sizeof r->item, "tensor %lld (%.100s)", (long long)order[k].index,
                     t->name);
            ok = fail(r, "data offset %llu (field at offset %llu) overlaps tensor %lld (%.100s) "
                      "at data offset %llu + %llu bytes", (unsigned long long)t->offset,
                      (unsigned long long)g->off_at[order[k].index], (long long)order[k - 1].index,
                      p->name,
                      (unsigned long long)p->offset, (unsigned long long)p->nbytes);
        }
    }
    free(order);
    return ok;
}

gguf_ctx *gguf_parse(const void *buf, size_t len, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    rd r = {.buf = buf, .len = len, .err = err, .errlen = errlen};
    gguf_ctx *g = calloc(1, sizeof *g);
    if (!g) {
        errf(err, errlen, "out of memory");
        return NULL;
    }
    g->buf = buf;
    g->len = len;
    if (!buf && len) {
        snprintf(r.item, sizeof r.item, "buffer");
        fail(&r, "NULL buffer of %zu bytes", len);
        gguf_close(g);
        return NULL;
    }
    if (parse_header(&r, g) && parse_kvs(&r, g) && parse_alignment(&r, g) &&
        parse_tensor_infos(&r, g) && check_data(&r, g))
        return g;
    gguf_close(g);
    return NULL;
}

gguf_ctx *gguf_open(const char *path, char *err, size_t errlen)
{
    char msg[512];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        errf(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (st.st_size == 0) {
        errf(err, errlen, "%s: header: magic at offset 0 needs 4 bytes, but the file is empty",
             path);
        close(fd);
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        errf(err, errlen, "%s: cannot map %zu bytes: %s", path, len, strerror(errno));
        return NULL;
    }
    gguf_ctx *g = gguf_parse(map, len, msg, sizeof msg);
    if (!g) {
        errf(err, errlen, "%s: %s", path, msg);
        munmap(map, len);
        return NULL;
    }
    g->map = map;
    return g;
}

void gguf_close(gguf_ctx *g)
{
    if (!g) return;
    if (g->kv) {
        for (int64_t i = 0; i < g->n_kv; i++) {
            free(g->kv[i].key);
            value_free(&g->kv[i].v);
        }
        free(g->kv);
    }
    if (g->tensors) {
        for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
        free(g->tensors);
    }
    free(g->kv_map.slot);
    free(g->t_map.slot);
    free(g->off_at);
    if (g->map) munmap(g->map, g->len);
    free(g);
}

uint32_t gguf_version(const gguf_ctx *g) { return g->version; }
uint32_t gguf_alignment(const gguf_ctx *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf_ctx *g) { return g->data_offset; }

const void *gguf_buffer(const gguf_ctx *g, size_t *len)
{
    if (len) *len = g->len;
    return g->buf;
}

int64_t gguf_n_kv(const gguf_ctx *g) { return g->n_kv; }
int64_t gguf_find_key(const gguf_ctx *g, const char *key) { return kv_lookup(g, key); }

const char *gguf_key(const gguf_ctx *g, int64_t i)
{
    LLM_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].key;
}

gguf_vtype gguf_kv_type(const gguf_ctx *g, int64_t i)
{
    LLM_ASSERT(i >= 0 && i < g->n_kv);
    return g->kv[i].v.type;
}

/* Reads a numeric scalar of type t at p as int64; false for non-integer types
 * and for a uint64 above INT64_MAX. */
static bool scalar_int(gguf_vtype t, const uint8_t *p, int64_t *out)
{
    union { uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            uint64_t u64; int64_t i64; } x;
    if ((unsigned)t >= GGUF_T_COUNT || scalar_size[t] == 0) return false;
    memcpy(&x, p, scalar_size[t]);
    switch (t) {
    case GGUF_T_UINT8: *out = x.u8; return true;
    case GGUF_T_BOOL: *out = x.u8 != 0; return true;
    case GGUF_T_INT8: *out = x.i8; return true;
    case GGUF_T_UINT16: *out = x.u16; return true;
    case GGUF_T_INT16: *out = x.i16; return true;
    case GGUF_T_UINT32: *out = x.u32; return true;
    case GGUF_T_INT32: *out = x.i32; return true;
    case GGUF_T_INT64: *out = x.i64; return true;
    case GGUF_T_UINT64:
        if (x.u64 > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)x.u64;
        return true;
    default: return false;
    }
}

/* Reads a numeric scalar as double: floats and integers (not bool). */
static bool scalar_float(gguf_vtype t, const uint8_t *p, double *out)
{
    if (t == GGUF_T_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        *out = f;
        return true;
    }
    if (t == GGUF_T_FLOAT64) {
        memcpy(out, p, 8);
        return true;
    }
    if (t == GGUF_T_UINT64) {
        uint64_t u;
        memcpy(&u, p, 8);
        *out = (double)u;
        return true;
    }
    int64_t i;
    if (t == GGUF_T_BOOL || !scalar_int(t, p, &i)) return false;
    *out = (double)i;
    return true;
}

int64_t gguf_get_int(const gguf_ctx *g, const char *key, int64_t def)
{
    int64_t i = kv_lookup(g, key), v;
    if (i < 0 || !scalar_int(g->kv[i].v.type, g->kv[i].v.p, &v)) return def;
    return v;
}

double gguf_get_float(const gguf_ctx *g, const char *key, double def)
{
    int64_t i = kv_lookup(g, key);
    double v;
    if (i < 0 || !scalar_float(g->kv[i].v.type, g->kv[i].v.p, &v)) return def;
    return v;
}

bool gguf_get_bool(const gguf_ctx *g, const char *key, bool def)
{
    int64_t i = kv_lookup(g, key);
    if (i < 0 || g->kv[i].v.type != GGUF_T_BOOL) return def;
    return g->kv[i].v.p[0] != 0;
}

const char *gguf_get_str(const gguf_ctx *g, const char *key, const char *def)
{
    int64_t i = kv_lookup(g, key);
    if (i < 0 || g->kv[i].v.type != GGUF_T_STRING) return def;
    return g->kv[i].v.cstr;
}

const gguf_value *gguf_kv_value(const gguf_ctx *g, int64_t kv)
{
    LLM_ASSERT(kv >= 0 && kv < g->n_kv);
    return &g->kv[kv].v;
}

gguf_vtype gguf_value_type(const gguf_value *v) { return v->type; }

gguf_vtype gguf_value_arr_type(const gguf_value *v)
{
    return v->type == GGUF_T_ARRAY ? v->elem : GGUF_T_COUNT;
}

uint64_t gguf_value_arr_n(const gguf_value *v) { return v->type == GGUF_T_ARRAY ? v->n : 0; }

const gguf_value *gguf_value_arr_sub(const gguf_value *v, uint64_t i)
{
    LLM_ASSERT(v->type == GGUF_T_ARRAY && v->elem == GGUF_T_ARRAY && i < v->n);
    return &v->subs[i];
}

gguf_str gguf_value_arr_str(const gguf_value *v, uint64_t i)
{
    LLM_ASSERT(v->type == GGUF_T_ARRAY && v->elem == GGUF_T_STRING && i < v->n);
    return v->strs[i];
}

int64_t gguf_value_arr_int(const gguf_value *v, uint64_t i)
{
    LLM_ASSERT(v->type == GGUF_T_ARRAY && i < v->n);
    int64_t x = 0;
    if (scalar_size[v->elem]) scalar_int(v->elem, v->p + i * scalar_size[v->elem], &x);
    return x;
}

double gguf_value_arr_float(const gguf_value *v, uint64_t i)
{
    LLM_ASSERT(v->type == GGUF_T_ARRAY && i < v->n);
    double x = 0;
    if (scalar_size[v->elem]) scalar_float(v->elem, v->p + i * scalar_size[v->elem], &x);
    return x;
}

gguf_str gguf_value_str(const gguf_value *v)
{
    gguf_str s = {0};
    if (v->type == GGUF_T_STRING) {
        s.ptr = (const char *)v->p;
        s.len = v->n;
    }
    return s;
}

const void *gguf_value_raw(const gguf_value *v, size_t *len)
{
    *len = v->size;
    return v->raw;
}

gguf_vtype gguf_arr_type(const gguf_ctx *g, int64_t kv)
{
    return gguf_value_arr_type(gguf_kv_value(g, kv));
}

uint64_t gguf_arr_n(const gguf_ctx *g, int64_t kv) { return gguf_value_arr_n(gguf_kv_value(g, kv)); }

gguf_str gguf_arr_str(const gguf_ctx *g, int64_t kv, uint64_t i)
{
    return gguf_value_arr_str(gguf_kv_value(g, kv), i);
}

int64_t gguf_arr_int(const gguf_ctx *g, int64_t kv, uint64_t i)
{
    return gguf_value_arr_int(gguf_kv_value(g, kv), i);
}

double gguf_arr_float(const gguf_ctx *g, int64_t kv, uint64_t i)
{
    return gguf_value_arr_float(gguf_kv_value(g, kv), i);
}

const void *gguf_arr_data(const gguf_ctx *g, int64_t kv)
{
    const gguf_value *v = gguf_kv_value(g, kv);
    return v->type == GGUF_T_ARRAY ? v->p : NULL;
}

int64_t gguf_n_tensors(const gguf_ctx *g) { return g->n_tensors; }

const gguf_tensor *gguf_tensor_at(const gguf_ctx *g, int64_t i)
{
    LLM_ASSERT(i >= 0 && i < g->n_tensors);
    return &g->tensors[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name)
{
    int64_t i = t_lookup(g, name);
    return i < 0 ? NULL : &g->tensors[i];
}

uint64_t gguf_vocab_id(const gguf_ctx *g, uint32_t *n_tokens)
{
    int64_t kv = gguf_find_key(g, "tokenizer.ggml.tokens");
    *n_tokens = 0;
    if (kv < 0 || gguf_arr_type(g, kv) != GGUF_T_STRING) return 0;
    uint64_t n = gguf_arr_n(g, kv);
    const char *model = gguf_get_str(g, "tokenizer.ggml.model", "");
    uint64_t h = csum64(model, strlen(model), 0x766f636162ULL); /* "vocab" */
    h = csum64(&n, sizeof n, h);
    for (uint64_t i = 0; i < n; i++) {
        gguf_str t = gguf_arr_str(g, kv, i);
        h = csum64(&t.len, sizeof t.len, h);
        if (t.len) h = csum64(t.ptr, (size_t)t.len, h);
    }
    *n_tokens = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    return h ? h : 1;
}
