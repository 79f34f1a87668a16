/*
 * gguf_write.c - the GGUF writer (version 3): metadata and tensor infos are kept in
 * memory, tensor data is streamed through the caller's fill callback one tensor at a
 * time, so writing a multi-gigabyte model needs one tensor's worth of memory.
 *
 *   gguf_writer *w = gguf_writer_new();
 *   gguf_writer_set_str(w, "general.architecture", "llama");
 *   gguf_writer_add_tensor(w, "output_norm.weight", QT_F32, 1, (int64_t[]){256}, NULL);
 *   if (gguf_writer_write(w, "out.gguf", fill, user, err, sizeof err) != 0) ...
 *   gguf_writer_free(w);
 *
 * Ownership: the writer copies keys, names and values; tensor data passed to
 * gguf_writer_add_tensor is borrowed until the write. Files are written to
 * PATH.tmp.PID and renamed into place, so a failed write leaves no partial file.
 * Setters record allocation failures and bad arguments; the write reports them.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "errcode.h"

typedef struct {
    char      *key;
    gguf_vtype type;
    uint8_t   *bytes;  /* the serialised value, without its type id */
    size_t     len;
} wkv;

typedef struct {
    char       *name;
    uint32_t    type;
    uint32_t    n_dims;
    int64_t     ne[GGUF_MAX_DIMS];
    const void *data;    /* borrowed, or NULL: produced by the fill callback */
    uint64_t    nbytes;
    uint64_t    offset;  /* in the data section, set at write time */
} wtensor;

struct gguf_writer {
    wkv     *kv;
    int64_t  n_kv, cap_kv;
    wtensor *t;
    int64_t  n_t, cap_t;
    char     err[256];   /* first recorded problem, "" if none */
};

/* A growable byte buffer; a failed allocation sets oom and drops further writes. */
typedef struct {
    uint8_t *p;
    size_t   len, cap;
    bool     oom;
} bbuf;

static void bb_put(bbuf *b, const void *src, size_t n)
{
    if (b->oom || n == 0) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) { b->oom = true; return; }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void bb_u32(bbuf *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bbuf *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(bbuf *b, const char *s, size_t n) { bb_u64(b, n); bb_put(b, s, n); }

static void w_error(gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_error(gguf_writer *w, const char *fmt, ...)
{
    if (w->err[0]) return; /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
}

static const uint8_t wscalar_size[GGUF_T_COUNT] = {
    [GGUF_T_UINT8] = 1, [GGUF_T_INT8] = 1, [GGUF_T_UINT16] = 2, [GGUF_T_INT16] = 2,
    [GGUF_T_UINT32] = 4, [GGUF_T_INT32] = 4, [GGUF_T_FLOAT32] = 4, [GGUF_T_BOOL] = 1,
    [GGUF_T_UINT64] = 8, [GGUF_T_INT64] = 8, [GGUF_T_FLOAT64] = 8,
};

gguf_writer *gguf_writer_new(void)
{
    return calloc(1, sizeof(gguf_writer));
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w) return;
    for (int64_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].bytes);
    }
    for (int64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

const char *gguf_writer_error(const gguf_writer *w)
{
    return w->err[0] ? w->err : NULL;
}

/* Sets key to a serialised value (taking ownership of bytes); replaces an old value
 * of the same key in place, so the key order stays that of the first set. */
static void set_owned(gguf_writer *w, const char *key, gguf_vtype type, uint8_t *bytes, size_t len)
{
    LLM_ASSERT(key != NULL);
    if (!bytes && len) {
        w_error(w, "out of memory setting %s", key);
        return;
    }
    for (int64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) != 0) continue;
        free(w->kv[i].bytes);
        w->kv[i] = (wkv){w->kv[i].key, type, bytes, len};
        return;
    }
    if (w->n_kv == w->cap_kv) {
        int64_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *kv = realloc(w->kv, (size_t)cap * sizeof *kv);
        if (!kv) { free(bytes); w_error(w, "out of memory setting %s", key); return; }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) { free(bytes); w_error(w, "out of memory setting %s", key); return; }
    w->kv[w->n_kv++] = (wkv){k, type, bytes, len};
}

void gguf_writer_set_raw(gguf_writer *w, const char *key, gguf_vtype type, const void *bytes,
                         size_t len)
{
    if ((unsigned)type >= GGUF_T_COUNT) {
        w_error(w, "%s: unknown value type id %u", key, (unsigned)type);
        return;
    }
    uint8_t *copy = malloc(len ? len : 1);
    if (copy && len) memcpy(copy, bytes, len);
    set_owned(w, key, type, copy, len);
}

void gguf_writer_set_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v)
{
    if ((unsigned)type >= GGUF_T_COUNT || wscalar_size[type] == 0) {
        w_error(w, "%s: %s is not a scalar value type", key, gguf_vtype_name(type));
        return;
    }
    gguf_writer_set_raw(w, key, type, v, wscalar_size[type]);
}

void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) { gguf_writer_set_scalar(w, key, GGUF_T_UINT32, &v); }
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) { gguf_writer_set_scalar(w, key, GGUF_T_INT32, &v); }
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) { gguf_writer_set_scalar(w, key, GGUF_T_UINT64, &v); }
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v) { gguf_writer_set_scalar(w, key, GGUF_T_FLOAT32, &v); }

void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    gguf_writer_set_scalar(w, key, GGUF_T_BOOL, &b);
}

void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v)
{
    bbuf b = {0};
    bb_str(&b, v, strlen(v));
    set_owned(w, key, GGUF_T_STRING, b.oom ? (free(b.p), NULL) : b.p, b.len);
}

void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype type, const void *data,
                         uint64_t n)
{
    if ((unsigned)type >= GGUF_T_COUNT || wscalar_size[type] == 0) {
        w_error(w, "%s: gguf_writer_set_arr takes a numeric element type, not %s", key,
                gguf_vtype_name(type));
        return;
    }
    if (n > (SIZE_MAX - 12) / wscalar_size[type]) {
        w_error(w, "%s: array of %llu elements is too large", key, (unsigned long long)n);
        return;
    }
    bbuf b = {0};
    bb_u32(&b, type);
    bb_u64(&b, n);
    bb_put(&b, data, n * wscalar_size[type]);
    set_owned(w, key, GGUF_T_ARRAY, b.oom ? (free(b.p), NULL) : b.p, b.len);
}

void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n)
{
    bbuf b = {0};
    bb_u32(&b, GGUF_T_STRING);
    bb_u64(&b, n);
    for (uint64_t i = 0; i < n; i++) bb_str(&b, strs[i], strlen(strs[i]));
    set_owned(w, key, GGUF_T_ARRAY, b.oom ? (free(b.p), NULL) : b.p, b.len);
}

void gguf_writer_copy_kv(gguf_writer *w, const gguf_ctx *src, const char *prefix)
{
    size_t pl = prefix ? strlen(prefix) : 0;
    for (int64_t i = 0; i < gguf_n_kv(src); i++) {
        const char *key = gguf_key(src, i);
        if (pl && strncmp(key, prefix, pl) != 0) continue;
        size_t len;
        const gguf_value *v = gguf_kv_value(src, i);
        const void *raw = gguf_value_raw(v, &len);
        gguf_writer_set_raw(w, key, gguf_value_type(v), raw, len);
    }
}

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, const void *data)
{
    LLM_ASSERT(name != NULL && ne != NULL);
    wtensor t = {.type = type, .n_dims = n_dims, .data = data};
    const qt_traits *q = qt_get(type);
    if (!q || q->type_size == 0) {
        w_error(w, "tensor %s: unknown type id %u", name, type);
        return -1;
    }
    if (n_dims == 0 || n_dims > GGUF_MAX_DIMS) {
        w_error(w, "tensor %s: n_dims %u is not in 1..%d", name, n_dims, GGUF_MAX_DIMS);
        return -1;
    }
    int64_t rows = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        t.ne[d] = ne[d];
        if (ne[d] <= 0 || (d > 0 && __builtin_mul_overflow(rows, ne[d], &rows))) {
            w_error(w, "tensor %s: bad dimension ne[%u] = %lld", name, d, (long long)ne[d]);
            return -1;
        }
    }
    size_t row = qt_row_size(type, ne[0]);
    if (row == 0 || __builtin_mul_overflow((uint64_t)row, (uint64_t)rows, &t.nbytes)) {
        w_error(w, "tensor %s: ne[0] = %lld does not fit type %s (block size %d)", name,
                (long long)ne[0], q->name, q->block_size);
        return -1;
    }
    for (int64_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            w_error(w, "tensor %s: added twice", name);
            return -1;
        }
    if (w->n_t == w->cap_t) {
        int64_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *p = realloc(w->t, (size_t)cap * sizeof *p);
        if (!p) { w_error(w, "out of memory adding tensor %s", name); return -1; }
        w->t = p;
        w->cap_t = cap;
    }
    t.name = strdup(name);
    if (!t.name) { w_error(w, "out of memory adding tensor %s", name); return -1; }
    w->t[w->n_t++] = t;
    return 0;
}

/* The alignment the file will use: general.alignment if set, else 32; 0 when it is
 * set with a type other than uint32 (readers refuse that). */
static uint64_t w_alignment(const gguf_writer *w)
{
    for (int64_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        if (w->kv[i].type != GGUF_T_UINT32 || w->kv[i].len != 4) return 0;
        uint32_t a;
        memcpy(&a, w->kv[i].bytes, 4);
        return a;
    }
    return GGUF_DEFAULT_ALIGNMENT;
}

/* Serialises everything before the data section (padded) into b, assigns tensor
 * offsets, and returns the size of the data section; false on a bad writer state. */
static bool w_header(gguf_writer *w, bbuf *b, uint64_t *data_size, char *err, size_t errlen)
{
    uint64_t a = w_alignment(w);
    if (w->err[0]) {
        errf(err, errlen, "%s", w->err);
        return false;
    }
    if (a == 0 || (a & (a - 1)) != 0) {
        errf(err, errlen, "general.alignment must be a uint32 power of two (got %llu)",
             (unsigned long long)a);
        return false;
    }
    bb_u32(b, GGUF_MAGIC);
    bb_u32(b, 3);
    bb_u64(b, (uint64_t)w->n_t);
    bb_u64(b, (uint64_t)w->n_kv);
    for (int64_t i = 0; i < w->n_kv; i++) {
        bb_str(b, w->kv[i].key, strlen(w->kv[i].key));
        bb_u32(b, w->kv[i].type);
        bb_put(b, w->kv[i].bytes, w->kv[i].len);
    }
    uint64_t off = 0;
    for (int64_t i = 0; i < w->n_t; i++) {
        wtensor *t = &w->t[i];
        t->offset = off;
        bb_str(b, t->name, strlen(t->name));
        bb_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) bb_u64(b, (uint64_t)t->ne[d]);
        bb_u32(b, t->type);
        bb_u64(b, t->offset);
        uint64_t pad = (a - t->nbytes % a) % a;
        if (__builtin_add_overflow(off, t->nbytes + pad, &off) || t->nbytes > UINT64_MAX - pad) {
            errf(err, errlen, "tensor %s: data section overflows 64 bits", t->name);
            return false;
        }
    }
    static const uint8_t zeros[4096];
    size_t pad = (size_t)((a - b->len % a) % a);
    while (pad > 0) {
        size_t n = pad < sizeof zeros ? pad : sizeof zeros;
        bb_put(b, zeros, n);
        pad -= n;
    }
    if (b->oom) {
        errf(err, errlen, "out of memory serialising the GGUF header");
        return false;
    }
    *data_size = off;
    return true;
}

/* Produces tensor i into dst: a copy of its borrowed data or the fill callback. */
static bool w_fill(const gguf_writer *w, int64_t i, void *dst, gguf_fill_fn fill, void *user,
                   char *err, size_t errlen)
{
    const wtensor *t = &w->t[i];
    if (t->data) {
        memcpy(dst, t->data, t->nbytes);
        return true;
    }
    if (!fill) {
        errf(err, errlen, "tensor %s has no data and there is no fill callback", t->name);
        return false;
    }
    if (fill(user, i, t->name, dst, t->nbytes) != 0) {
        errf(err, errlen, "tensor %s: the fill callback failed", t->name);
        return false;
    }
    return true;
}

void *gguf_writer_write_mem(gguf_writer *w, gguf_fill_fn fill, void *user, size_t *len,
                            char *err, size_t errlen)
{
    bbuf b = {0};
    uint64_t data_size;
    if (!w_header(w, &b, &data_size, err, errlen)) {
        free(b.p);
        return NULL;
    }
    size_t total;
    uint8_t *out = NULL;
    if (__builtin_add_overflow(b.len, data_size, &total) || !(out = calloc(total ? total : 1, 1))) {
        errf(err, errlen, "out of memory for a %llu-byte GGUF image",
             (unsigned long long)(b.len + data_size));
        free(b.p);
        return NULL;
    }
    memcpy(out, b.p, b.len);
    for (int64_t i = 0; i < w->n_t; i++)
        if (!w_fill(w, i, out + b.len + w->t[i].offset, fill, user, err, errlen)) {
            free(out);
            free(b.p);
            return NULL;
        }
    *len = total;
    free(b.p);
    return out;
}

static bool write_all(int fd, const void *p, size_t n)
{
    const uint8_t *s = p;
    while (n > 0) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        s += k;
        n -= (size_t)k;
    }
    return true;
}

/* Streams the data section: one tensor buffer, reused (grown to the largest). */
static bool w_stream(const gguf_writer *w, int fd, uint64_t a, gguf_fill_fn fill, void *user,
                     const char *path, char *err, size_t errlen)
{
    uint8_t *buf = NULL;
    uint64_t cap = 0;
    bool ok = true;
    for (int64_t i = 0; i < w->n_t && ok; i++) {
        const wtensor *t = &w->t[i];
        uint64_t pad = (a - t->nbytes % a) % a, need = t->nbytes + pad;
        if (need > cap) {
            free(buf);
            buf = need <= SIZE_MAX ? malloc((size_t)need) : NULL;
            cap = buf ? need : 0;
            if (!buf) {
                errf(err, errlen, "tensor %s: out of memory for %llu bytes", t->name,
                     (unsigned long long)need);
                ok = false;
                break;
            }
        }
        memset(buf + t->nbytes, 0, (size_t)pad);
        ok = w_fill(w, i, buf, fill, user, err, errlen);
        if (ok && !write_all(fd, buf, (size_t)need)) {
            errf(err, errlen, "%s: write failed: %s", path, strerror(errno));
            ok = false;
        }
    }
    free(buf);
    return ok;
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user,
                      char *err, size_t errlen)
{
    bbuf b = {0};
    uint64_t data_size;
    if (!w_header(w, &b, &data_size, err, errlen)) {
        free(b.p);
        return -1;
    }
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        errf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        free(b.p);
        return -1;
    }
    bool ok = write_all(fd, b.p, b.len);
    if (!ok) errf(err, errlen, "%s: write failed: %s", path, strerror(errno));
    free(b.p);
    if (ok) ok = w_stream(w, fd, w_alignment(w), fill, user, path, err, errlen);
    if (close(fd) != 0 && ok) {
        errf(err, errlen, "%s: close failed: %s", path, strerror(errno));
        ok = false;
    }
    if (ok && rename(tmp, path) != 0) {
        errf(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
        ok = false;
    }
    if (!ok) unlink(tmp);
    return ok ? 0 : -1;
}
