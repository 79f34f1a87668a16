/*
 * convert.c - GGUF tensors -> a weight segment: q8 rows for matrices (INT8 path) or
 * f32 copies (float path), f32 for norms, biases and rope factors; plus the
 * metadata-only GGUF image for the tokenizer. Owned by the engine.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gguf.h"
#include "kernels.h"
#include "log.h"
#include "model.h"
#include "pool.h"
#include "qtype.h"
#include "segment.h"

static uint64_t align_up(uint64_t x) { return (x + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN; }

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Rows and stored row bytes of a GGUF tensor in the segment. 1-D tensors and every
 * tensor of the float path are f32; matrices of the INT8 path are q8 rows. */
static void plan_tensor(const gguf_tensor *t, uint32_t precision, seg_tensor *e)
{
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", t->name);
    e->src_type = t->type;
    e->ne[0] = t->ne[0];
    e->ne[1] = t->ne[1] * t->ne[2] * t->ne[3];
    bool matrix = t->n_dims >= 2 && e->ne[1] > 1;
    e->type = (matrix && precision == 0) ? SEG_T_Q8W : SEG_T_F32;
    e->row_bytes = e->type == SEG_T_Q8W ? kern_q8_row_bytes(e->ne[0]) : (uint64_t)e->ne[0] * sizeof(float);
    e->nbytes = e->row_bytes * (uint64_t)e->ne[1];
}

/* Rows [r0, r1) of a tensor that needs dequantizing (and requantizing to q8). */
typedef struct {
    const gguf_tensor *t;
    const seg_tensor  *e;
    const qt_traits   *tr;
    size_t             src_row;
    void              *dst;
    float             *rows;   /* (n_threads, ne[0]) scratch */
} cvt_job;

static void cvt_part(void *arg, int ith, int nth)
{
    const cvt_job *j = arg;
    float *row = j->rows + (size_t)ith * j->e->ne[0];
    int64_t r0, r1;
    pool_range(j->e->ne[1], 1, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *src = (const char *)j->t->data + (size_t)r * j->src_row;
        char *out = (char *)j->dst + (size_t)r * j->e->row_bytes;
        if (j->e->type == SEG_T_F32) {
            j->tr->dequant(src, (float *)out, j->t->ne[0]);
        } else {
            j->tr->dequant(src, row, j->t->ne[0]);
            kern_q8_quantize_w(row, j->t->ne[0], out);
        }
    }
}

/* Converts one tensor into dst, its rows split across the pool; rows is a scratch of
 * n_threads rows of the widest tensor. */
static int convert_tensor(const gguf_tensor *t, const seg_tensor *e, void *dst, pool_t *pool,
                          float *rows, char *err, size_t errlen)
{
    const qt_traits *tr = qt_get(t->type);
    size_t src_row = qt_row_size(t->type, t->ne[0]);
    if (e->type == SEG_T_Q8W && t->type == QT_Q8_0 && t->ne[0] % KERN_QK == 0) {
        memcpy(dst, t->data, e->nbytes); /* q8 rows are Q8_0 rows byte for byte */
        return 0;
    }
    if (t->type == QT_F32 && e->type == SEG_T_F32) {
        memcpy(dst, t->data, e->nbytes);
        return 0;
    }
    if (!tr || !tr->dequant || src_row == 0) {
        snprintf(err, errlen, "tensor %s: weight type %s cannot be converted (no dequantizer)",
                 t->name, qt_name(t->type));
        return -1;
    }
    cvt_job j = { t, e, tr, src_row, dst, rows };
    pool_run(pool, cvt_part, &j);
    return 0;
}

/* Progress: a bar on a TTY, nothing per tensor otherwise. */
static void progress(int done, int total, uint64_t bytes, double t0)
{
    if (!isatty(2)) return;
    int width = 40, fill = total ? done * width / total : width;
    fprintf(stderr, "\rconverting [%.*s%*s] %d/%d tensors, %.0f MB, %.1f s",
            fill, "########################################", width - fill, "", done, total,
            bytes / 1e6, mono_s() - t0);
    if (done == total) fputc('\n', stderr);
}

/* Serialises every key/value of g into a malloc'd metadata-only GGUF image. */
static void *tokenizer_blob(const gguf_ctx *g, size_t *len, char *err, size_t errlen)
{
    gguf_writer *w = gguf_writer_new();
    if (!w) {
        snprintf(err, errlen, "out of memory for the tokenizer metadata");
        return NULL;
    }
    gguf_writer_copy_kv(w, g, NULL);
    void *blob = gguf_writer_write_mem(w, NULL, NULL, len, err, errlen);
    gguf_writer_free(w);
    return blob;
}

static int fill_segment(const gguf_ctx *g, seg_map *sm, seg_tensor *dir, int64_t nt,
                        char *err, size_t errlen)
{
    seg_header *h = sm->base;
    int64_t max_cols = 1;
    for (int64_t i = 0; i < nt; i++) if (dir[i].ne[0] > max_cols) max_cols = dir[i].ne[0];
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nth = cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
    pool_t *pool = pool_new(nth);
    float *row = malloc((size_t)nth * (size_t)max_cols * sizeof(float));
    if (!row || !pool) {
        snprintf(err, errlen, "out of memory for %d conversion threads", nth);
        free(row);
        pool_destroy(&pool);
        return -1;
    }
    double t0 = mono_s();
    uint64_t done_bytes = 0;
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (convert_tensor(t, &dir[i], (char *)sm->base + dir[i].offset, pool, row, err, errlen) != 0) {
            free(row);
            pool_destroy(&pool);
            return -1;
        }
        done_bytes += dir[i].nbytes;
        progress((int)(i + 1), (int)nt, done_bytes, t0);
    }
    free(row);
    pool_destroy(&pool);
    memcpy((char *)sm->base + h->dir_offset, dir, (size_t)nt * sizeof *dir);
    log_info("converted %lld tensors (%.1f MB) in %.2f s", (long long)nt, done_bytes / 1e6, mono_s() - t0);
    return 0;
}

int cvt_build(const char *gguf_path, const seg_ident *id, const char *name, uint32_t precision,
              char *err, size_t errlen)
{
    gguf_ctx *g = gguf_open(gguf_path, err, errlen);
    if (!g) return -1;
    int rc = -1;
    seg_tensor *dir = NULL;
    void *blob = NULL;
    seg_map sm = { 0 };
    mdl_config cfg;
    if (mdl_config_from_gguf(g, &cfg, err, errlen) != 0) goto out;
    int64_t nt = gguf_n_tensors(g);
    dir = calloc((size_t)(nt > 0 ? nt : 1), sizeof *dir);
    size_t blob_len = 0;
    blob = tokenizer_blob(g, &blob_len, err, errlen);
    if (!dir || !blob) {
        if (!dir) snprintf(err, errlen, "out of memory for %lld directory entries", (long long)nt);
        goto out;
    }
    uint64_t dir_off = SEG_HEADER_BYTES, tok_off = align_up(dir_off + (uint64_t)nt * sizeof *dir);
    uint64_t off = align_up(tok_off + blob_len), data_off = off;
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (strlen(t->name) >= sizeof dir[i].name) {
            snprintf(err, errlen, "tensor name '%s' is longer than %zu bytes", t->name, sizeof dir[i].name - 1);
            goto out;
        }
        plan_tensor(t, precision, &dir[i]);
        dir[i].offset = off;
        off = align_up(off + dir[i].nbytes);
    }
    log_info("creating segment %s: %.1f MB for %lld tensors (%s)", name, off / 1e6, (long long)nt,
             precision ? "f32" : "int8");
    rc = seg_create(name, off, &sm, err, errlen);
    if (rc != 0) goto out;
    rc = -1;
    seg_header *h = sm.base;
    h->precision = precision;
    memcpy(h->src_path, id->real_path, sizeof h->src_path);
    h->src_size = id->size;
    h->src_mtime_ns = id->mtime_ns;
    h->src_hash = id->head_hash;
    h->config = cfg;
    h->n_tensors = (uint64_t)nt;
    h->dir_offset = dir_off;
    h->tok_offset = tok_off;
    h->tok_bytes = blob_len;
    h->data_offset = data_off;
    memcpy((char *)sm.base + tok_off, blob, blob_len);
    log_info("tokenizer metadata: %zu bytes", blob_len);
    if (fill_segment(g, &sm, dir, nt, err, errlen) != 0) {
        seg_unmap(&sm);
        shm_unlink(name);
        goto out;
    }
    double t0 = mono_s();
    seg_checksum_tensors(&sm);
    log_info("checksummed %.1f MB of tensors in %.2f ms", (off - data_off) / 1e6, (mono_s() - t0) * 1e3);
    seg_mark_ready(&sm);
    seg_unmap(&sm);
    rc = 0;
out:
    free(dir);
    free(blob);
    gguf_close(g);
    return rc;
}
