/*
 * attn.c - one layer's attention for a pass's items, as matrix products (see attn.h).
 * Owned by the engine.
 */
#include "attn.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels.h"
#include "kv.h"

/* First visible position of an item at position p in layer il (its sliding window). */
static int att_lo(const mdl_config *c, int il, int p)
{
    int w = mdl_layer_window(c, il);
    return w > 0 && p - w + 1 > 0 ? p - w + 1 : 0;
}

/* A pooled cache's tiles and value rows come one block (16 positions) to a kernel call,
 * each block elsewhere in the pool, so the kernels' own fetching ahead (along a run)
 * finds nothing to fetch: a head's slice of the block ATT_PF_BLOCKS ahead is fetched
 * here instead, as long as it is one the pass reads. */
#define ATT_PF_BLOCKS 4
/* A pass of many query rows (a prompt's) over a pooled cache copies a head's slices of
 * up to ATT_GATHER blocks next to each other first, so that one kernel call takes them
 * all, as it takes a private cache's run: its rows share each loaded key or value over
 * more positions, and its chains stay in registers. The same bits: the same bytes, the
 * same order. Decoding's few rows would spend more on the copy than they save. */
#define ATT_GATHER 16
#define ATT_GATHER_ROWS 16

/* Score columns of a unit: whole key tiles from the first one a row sees. */
static size_t att_cols(int max_pos) { return ((size_t)max_pos / 16 + 2) * 16; }

size_t att_scratch_floats(const mdl_config *c, int max_pos)
{
    size_t rows = (size_t)ATT_ITEMS * (size_t)(c->n_head / c->n_head_kv);
    /* scores, the query rows, the outputs, the query rows quantized (q8_0 keys: 76 bytes
     * per 32 dims, within a float per dim), a head's slices of ATT_GATHER pool blocks */
    return rows * att_cols(max_pos) + 3 * rows * (size_t)c->head_dim + (size_t)ATT_GATHER * 16 * (size_t)c->head_dim;
}

typedef struct {
    const att_pass *a;
    float          *scratch;
    size_t          per_thread;
    atomic_int      next;     /* next unit to take */
    int             units;
} att_job;

static void att_fetch(const void *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o);
    __builtin_prefetch((const char *)p + bytes - 1);
}

/* Scores of query rows qb against key tiles [t0, t0 + ntiles) of kv head h: one call
 * per run of tiles that follow one another in memory (all of a private cache's, one
 * pool block, a ring up to its end; the same bits: each tile's scores depend on that
 * tile alone). q8_0 keys take the rows quantized once, into qq. */
static void att_qk(const kv_cache *kv, int layer, int h, int D, const float *qb, kern_qq *qq, int rows, int t0,
                   int ntiles, float scale, float *sc, int64_t lds, void *gb)
{
    const size_t off = kern_kv_bytes(kv->kvt, (int64_t)h * D * 16), kb = kern_kv_bytes(kv->kvt, (int64_t)D * 16);
    const bool gather = kv->pooled && rows >= ATT_GATHER_ROWS;
    if (kv->kvt == KERN_KV_Q8_0) kern_att_q8_query(qb, D, rows, D, qq);
    if (kv->pooled)
        for (int t = 1; t < ATT_PF_BLOCKS && t < ntiles; t++) att_fetch((const char *)kv_ktile(kv, layer, t0 + t) + off, kb);
    for (int t = 0; t < ntiles;) {
        int run = kv_run(kv, layer, (t0 + t) * 16) / 16;
        run = run < ntiles - t ? run : ntiles - t;
        const char *kt = (const char *)kv_ktile(kv, layer, t0 + t) + off;
        int64_t kts = kv->kv_dim * 16;
        if (gather) { /* the head's slices of the next blocks, one after another */
            for (run = 0; run < ATT_GATHER && t + run < ntiles; run++) {
                if (t + run + ATT_PF_BLOCKS < ntiles)
                    att_fetch((const char *)kv_ktile(kv, layer, t0 + t + run + ATT_PF_BLOCKS) + off, kb);
                memcpy((char *)gb + (size_t)run * kb, (const char *)kv_ktile(kv, layer, t0 + t + run) + off, kb);
            }
            kt = gb;
            kts = (int64_t)D * 16;
        } else if (kv->pooled && t + ATT_PF_BLOCKS < ntiles) {
            att_fetch((const char *)kv_ktile(kv, layer, t0 + t + ATT_PF_BLOCKS) + off, kb);
        }
        if (kv->kvt == KERN_KV_Q8_0) kern_att_qk8(qq, rows, kt, kts, D, run, scale, sc + (size_t)t * 16, lds);
        else kern_att_qk(qb, D, rows, kt, kts, kv->kvt, D, run, scale, sc + (size_t)t * 16, lds);
        t += run;
    }
}

/* Kv head h's value rows of positions [p, p + 16) from p, up to position e (one run). */
static void att_fetch_rows(const kv_cache *kv, int layer, int h, size_t sb, int p, int e)
{
    int n = 16 - p % 16 < e - p + 1 ? 16 - p % 16 : e - p + 1;
    att_fetch(kv_vh(kv, layer, h, p), (size_t)n * sb);
}

/* Continues the chains of rows nq over positions p0 + [a, b] (p0 a tile start), kv head h
 * (its value rows head_dim apart): cut where the positions stop following one another in
 * memory (a pool block's or a ring's end; kern_att_pv continues a chain exactly). */
static void att_pv(const kv_cache *kv, int layer, int h, int D, int p0, const float *p, int64_t lds, int nq, int a,
                   int b, float *out, int64_t os, void *gb)
{
    const size_t sb = kern_kv_bytes(kv->kvt, D);
    const bool gather = kv->pooled && nq >= ATT_GATHER_ROWS;
    if (kv->pooled)
        for (int k = 1; k < ATT_PF_BLOCKS && a / 16 * 16 + 16 * k <= b; k++)
            att_fetch_rows(kv, layer, h, sb, p0 + a / 16 * 16 + 16 * k, p0 + b);
    while (a <= b) {
        int ts = a / 16 * 16, run = kv_run(kv, layer, p0 + ts), te = b < ts + run - 1 ? b : ts + run - 1;
        const char *v = kv_vh(kv, layer, h, p0 + ts);
        if (gather) { /* the head's rows of the next blocks, one block after another */
            for (int k = 0; k < ATT_GATHER && ts + 16 * k <= b; k++) {
                int q0 = ts + 16 * k, n = b - q0 + 1 < 16 ? b - q0 + 1 : 16;
                if (q0 + 16 * ATT_PF_BLOCKS <= b) att_fetch_rows(kv, layer, h, sb, p0 + q0 + 16 * ATT_PF_BLOCKS, p0 + b);
                memcpy((char *)gb + (size_t)16 * k * sb, kv_vh(kv, layer, h, p0 + q0), (size_t)n * sb);
                te = q0 + n - 1;
            }
            v = gb;
        } else if (kv->pooled && ts + 16 * ATT_PF_BLOCKS <= b) {
            att_fetch_rows(kv, layer, h, sb, p0 + ts + 16 * ATT_PF_BLOCKS, p0 + b);
        }
        kern_att_pv(p + ts, lds, nq, a - ts, te - ts, v, D, kv->kvt, D, out, os);
        a = te + 1;
    }
}

/* Items [i0, i1) of one session at consecutive positions, kv head h. */
static void att_run(const att_pass *a, int i0, int i1, int h, float *scratch)
{
    const mdl_config *c = a->c;
    const kv_cache *kv = &a->sess[i0]->kv;
    const int D = c->head_dim, G = c->n_head / c->n_head_kv, nb = i1 - i0, rows = nb * G, L = a->layer;
    const size_t QS = (size_t)c->n_head * D;
    const int p0 = a->pos[i0], pl = a->pos[i1 - 1];
    const int t0 = att_lo(c, a->layer, p0) / 16 * 16, ntiles = (pl - t0) / 16 + 1;
    const int64_t lds = (int64_t)ntiles * 16;
    float *sc = scratch, *qb = sc + (size_t)rows * lds, *ob = qb + (size_t)rows * D;
    kern_qq *qq = (kern_qq *)(ob + (size_t)rows * D);
    float *gb = ob + 2 * (size_t)rows * D;
    for (int b = 0; b < nb; b++)
        memcpy(qb + (size_t)b * G * D, a->q + (size_t)(i0 + b) * QS + (size_t)h * G * D, (size_t)G * D * sizeof(float));
    att_qk(kv, L, h, D, qb, qq, rows, t0 / 16, ntiles, c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)D), sc,
           lds, gb);
    for (int b = 0; b < nb; b++) {
        int lo = att_lo(c, a->layer, p0 + b) - t0, hi = p0 + b - t0;
        for (int g = 0; g < G; g++) {
            float *row = sc + (size_t)(b * G + g) * lds + lo;
            if (c->attn_softcap > 0) kern_softcap(row, hi - lo + 1, c->attn_softcap, hi - lo + 1); /* gemma2 */
            kern_softmax(row, hi - lo + 1);
        }
    }
    /* Each row's chain runs over its positions in order: the span every row sees goes
     * through all rows at once, the positions before it (sliding window) and after it
     * (later items) per item. */
    memset(ob, 0, (size_t)rows * D * sizeof(float));
    int A = att_lo(c, a->layer, pl) - t0, B = p0 - t0;
    for (int b = 0; b < nb; b++) {
        int lo = att_lo(c, a->layer, p0 + b) - t0, hi = p0 + b - t0;
        float *pr = sc + (size_t)b * G * lds, *orow = ob + (size_t)b * G * D;
        if (A > B) att_pv(kv, L, h, D, t0, pr, lds, G, lo, hi, orow, D, gb);
        else att_pv(kv, L, h, D, t0, pr, lds, G, lo, A - 1, orow, D, gb);
    }
    if (A <= B) {
        att_pv(kv, L, h, D, t0, sc, lds, rows, A, B, ob, D, gb);
        for (int b = 1; b < nb; b++)
            att_pv(kv, L, h, D, t0, sc + (size_t)b * G * lds, lds, G, B + 1, p0 + b - t0, ob + (size_t)b * G * D, D, gb);
    }
    for (int b = 0; b < nb; b++)
        memcpy(a->out + (size_t)(i0 + b) * QS + (size_t)h * G * D, ob + (size_t)b * G * D, (size_t)G * D * sizeof(float));
}
/* Unit u: block u / n_head_kv of ATT_ITEMS items, kv head u % n_head_kv; the block is
 * cut into runs of one session at consecutive positions. */
static void att_part(void *arg, int ith, int nth)
{
    att_job *j = arg;
    const att_pass *a = j->a;
    int HKV = a->c->n_head_kv;
    float *scratch = j->scratch + (size_t)ith * j->per_thread;
    (void)nth;
    for (int u; (u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->units;) {
        int b0 = u / HKV * ATT_ITEMS, b1 = b0 + ATT_ITEMS < a->n ? b0 + ATT_ITEMS : a->n;
        for (int i = b0; i < b1;) {
            int r = i + 1;
            while (r < b1 && a->sess[r] == a->sess[i] && a->pos[r] == a->pos[r - 1] + 1) r++;
            att_run(a, i, r, u % HKV, scratch);
            i = r;
        }
    }
}

void att_forward(pool_t *pool, const att_pass *a, float *scratch, size_t per_thread)
{
    att_job j = { .a = a, .scratch = scratch, .per_thread = per_thread,
                  .units = (a->n + ATT_ITEMS - 1) / ATT_ITEMS * a->c->n_head_kv };
    atomic_init(&j.next, 0);
    pool_run(pool, att_part, &j);
}
