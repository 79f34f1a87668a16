/*
 * convert.c - GGUF tensors -> a weight segment: q8t tiles for matrices (INT8 path,
 * kernels.h: Q8_0 rows are repacked as they are, other types are dequantized and
 * requantized with ggml's Q8_0 rounding) or f32 copies (float path), f32 for norms,
 * biases and rope factors; plus the metadata-only GGUF image for the tokenizer.
 * Owned by the engine.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "engine.h"
#include "gguf.h"
#include "kernels.h"
#include "log.h"
#include "model.h"
#include "pool.h"
#include "qtype.h"
#include "segment_build.h"
#include "errcode.h"

static uint64_t align_up(uint64_t x) { return (x + SEG_ALIGN - 1) / SEG_ALIGN * SEG_ALIGN; }

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

_Static_assert(SEG_TILE_ROWS == KERN_TILE, "segment.h and kernels.h disagree on the tile");
_Static_assert(SEG_T_QN_LAST - SEG_T_QN0 + 2 == KERN_W_COUNT, "segment.h has a type for every native layout");

/* Rows and stored bytes of a GGUF tensor in the segment. 1-D tensors and every tensor
 * of the float path are f32 rows; matrices of the INT8 path are q8t tiles. A 3-D stack
 * of matrices (MoE experts) is one matrix of all their rows, expert after expert. */
static void plan_tensor(const gguf_tensor *t, uint32_t precision, seg_tensor *e)
{
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", t->name);
    e->src_type = t->type;
    e->ne[0] = t->ne[0];
    e->ne[1] = t->ne[1] * t->ne[2] * t->ne[3];
    /* MoE routers stay f32 (llama.cpp keeps them so): a rounding there can change the experts chosen */
    bool matrix = t->n_dims >= 2 && e->ne[1] > 1 && !strstr(t->name, "ffn_gate_inp");
    e->type = SEG_T_F32;
    if (matrix && precision != ENG_FLOAT) e->type = SEG_T_Q8T;
    int wt = kern_qn_from_qtype(t->type);
    if (matrix && precision == ENG_NATIVE && wt > 0 && qt_row_size(t->type, t->ne[0]) != 0) /* whole blocks */
        e->type = SEG_T_QN0 + (uint32_t)(wt - 1);
    e->row_bytes = e->type == SEG_T_F32 ? (uint64_t)e->ne[0] * sizeof(float) : kern_w_tile_bytes(seg_wtype(e->type), e->ne[0]);
    e->nbytes = e->row_bytes * seg_stored_rows(e);
}

/* Tiles (or f32 rows) of one tensor, split across the pool. */
typedef struct {
    const gguf_tensor *t;
    const seg_tensor  *e;
    const qt_traits   *tr;
    size_t             src_row;
    void              *dst;
    char              *scratch; /* (n_threads, scratch_bytes) */
    size_t             scratch_bytes;
} cvt_job;

/* Scratch per thread: one f32 row and a tile's worth of block_q8_0 rows. */
static size_t cvt_scratch_bytes(int64_t max_cols)
{
    return (size_t)max_cols * sizeof(float) + KERN_TILE * kern_q8_row_bytes(max_cols);
}

/* Source row r as block_q8_0 (zero-padded past cols) at q8: a copy for Q8_0 rows of
 * whole blocks, else dequantized and requantized with ggml's reference rounding. */
static void source_q8_row(const cvt_job *j, int64_t r, float *row, void *q8)
{
    const char *src = (const char *)j->t->data + (size_t)r * j->src_row;
    int64_t cols = j->t->ne[0];
    if (j->t->type == QT_Q8_0 && cols % KERN_QK == 0) {
        memcpy(q8, src, kern_q8_row_bytes(cols));
        return;
    }
    j->tr->dequant(src, row, cols);
    kern_q8_quantize_w(row, cols, q8);
}

static void cvt_part(void *arg, int ith, int nth)
{
    const cvt_job *j = arg;
    float *row = (float *)(j->scratch + (size_t)ith * j->scratch_bytes);
    char *q8 = (char *)(row + j->e->ne[0]);
    size_t rb = kern_q8_row_bytes(j->e->ne[0]);
    int64_t u0, u1;
    pool_range((int64_t)seg_stored_rows(j->e), 1, ith, nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        char *out = (char *)j->dst + (size_t)u * j->e->row_bytes;
        if (j->e->type == SEG_T_F32) {
            j->tr->dequant((const char *)j->t->data + (size_t)u * j->src_row, (float *)out, j->t->ne[0]);
            continue;
        }
        int64_t r0 = u * KERN_TILE, n = j->e->ne[1] - r0 < KERN_TILE ? j->e->ne[1] - r0 : KERN_TILE;
        if (j->e->type != SEG_T_Q8T) { /* native: the source blocks as they are */
            kern_qn_pack(seg_wtype(j->e->type), j->t->type, (const char *)j->t->data + (size_t)r0 * j->src_row, j->src_row,
                         (int)n, j->e->ne[0], out);
            continue;
        }
        for (int64_t i = 0; i < n; i++) source_q8_row(j, r0 + i, row, q8 + (size_t)i * rb);
        kern_q8t_pack(q8, (int)n, j->e->ne[0], out);
    }
}

/* Converts one tensor into dst, its tiles or rows split across the pool. */
static int convert_tensor(const gguf_tensor *t, const seg_tensor *e, void *dst, pool_t *pool,
                          char *scratch, size_t scratch_bytes, char *err, size_t errlen)
{
    const qt_traits *tr = qt_get(t->type);
    size_t src_row = qt_row_size(t->type, t->ne[0]);
    if (t->type == QT_F32 && e->type == SEG_T_F32) {
        memcpy(dst, t->data, e->nbytes);
        return 0;
    }
    if (!tr || !tr->dequant || src_row == 0) {
        return errf(err, errlen, "tensor %s: weight type %s cannot be converted (no dequantizer)",
                    t->name, qt_name(t->type));
    }
    cvt_job j = { t, e, tr, src_row, dst, scratch, scratch_bytes };
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
        errf(err, errlen, "out of memory for the tokenizer metadata");
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
    int cpus = cpu_count_usable();
    int nth = cpus > 8 ? 8 : cpus;
    pool_t *pool = pool_new(nth);
    size_t sb = cvt_scratch_bytes(max_cols);
    char *row = malloc((size_t)nth * sb);
    if (!row || !pool) {
        errf(err, errlen, "out of memory for %d conversion threads", nth);
        free(row);
        pool_destroy(&pool);
        return -1;
    }
    double t0 = mono_s();
    uint64_t done_bytes = 0;
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (convert_tensor(t, &dir[i], (char *)sm->base + dir[i].offset, pool, row, sb, err, errlen) != 0) {
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
        if (!dir) errf(err, errlen, "out of memory for %lld directory entries", (long long)nt);
        goto out;
    }
    uint64_t dir_off = SEG_HEADER_BYTES, tok_off = align_up(dir_off + (uint64_t)nt * sizeof *dir);
    uint64_t off = align_up(tok_off + blob_len), data_off = off;
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (strlen(t->name) >= sizeof dir[i].name) {
            errf(err, errlen, "tensor name '%s' is longer than %zu bytes", t->name, sizeof dir[i].name - 1);
            goto out;
        }
        plan_tensor(t, precision, &dir[i]);
        dir[i].offset = off;
        off = align_up(off + dir[i].nbytes);
    }
    log_info("creating segment %s: %.1f MB for %lld tensors (%s)", name, off / 1e6, (long long)nt,
             precision == ENG_FLOAT ? "f32" : precision == ENG_INT8 ? "int8 (q8t)" : "native");
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
    seg_log_pages(&sm);
    seg_unmap(&sm);
    rc = 0;
out:
    free(dir);
    free(blob);
    gguf_close(g);
    return rc;
}
