/*
 * synth_util.c - type choice, file_type codes, chunked conversion and progress for
 * `llmc quantize` and `llmc synth`. See synth_util.h.
 */
#include "synth_util.h"
#include "errcode.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint32_t synth_pick_type(uint32_t want, int64_t ne0, char *why, size_t whylen)
{
    if (why && whylen) why[0] = 0;
    if (qt_row_size(want, ne0) != 0) return want;
    uint32_t alt = (want != QT_Q8_0 && qt_row_size(QT_Q8_0, ne0) != 0) ? QT_Q8_0 : QT_F16;
    const qt_traits *q = qt_get(want);
    if (why && whylen)
        snprintf(why, whylen, "row length %lld is not a multiple of %s's block size %d; using %s",
                 (long long)ne0, qt_name(want), q ? q->block_size : 0, qt_name(alt));
    return alt;
}

uint32_t synth_ftype(uint32_t type)
{
    switch (type) {
    case QT_F32: return 0;
    case QT_F16: return 1;
    case QT_Q4_0: return 2;
    case QT_Q4_1: return 3;
    case QT_Q8_0: return 7;
    case QT_Q5_0: return 8;
    case QT_Q5_1: return 9;
    case QT_Q2_K: return 10;
    case QT_Q3_K: return 11; /* Q3_K_S: every matrix Q3_K */
    case QT_Q4_K: return 14; /* Q4_K_S */
    case QT_Q5_K: return 16; /* Q5_K_S */
    case QT_Q6_K: return 18;
    case QT_BF16: return 32;
    default: return 1024;   /* LLAMA_FTYPE_GUESSED */
    }
}

/* Rows per chunk so that a chunk holds about 256K values (1 MiB of f32). */
static int64_t chunk_rows(int64_t ne0)
{
    int64_t r = (256 * 1024) / ne0;
    return r < 1 ? 1 : r;
}

/* One thread's share of synth_convert: rows [r0, r1). */
typedef struct {
    uint32_t    src, dst;
    const void *in;
    void       *out;
    int64_t     ne0, r0, r1;
    int         failed;    /* out of memory */
} convert_part;

static void *convert_rows(void *arg)
{
    convert_part *p = arg;
    const qt_traits *s = qt_get(p->src), *d = qt_get(p->dst);
    size_t in_row = qt_row_size(p->src, p->ne0), out_row = qt_row_size(p->dst, p->ne0);
    int64_t step = chunk_rows(p->ne0);
    float *tmp = malloc((size_t)(step * p->ne0) * sizeof *tmp);
    if (!tmp) {
        p->failed = 1;
        return NULL;
    }
    for (int64_t r = p->r0; r < p->r1; r += step) {
        int64_t n = p->r1 - r < step ? p->r1 - r : step;
        s->dequant((const uint8_t *)p->in + (size_t)r * in_row, tmp, n * p->ne0);
        d->quant(tmp, (uint8_t *)p->out + (size_t)r * out_row, n * p->ne0);
    }
    free(tmp);
    return NULL;
}

int synth_convert(uint32_t src, const void *in, uint32_t dst, void *out, int64_t ne0,
                  int64_t rows, int threads, char *err, size_t errlen)
{
    size_t in_row = qt_row_size(src, ne0), out_row = qt_row_size(dst, ne0);
    const qt_traits *s = qt_get(src), *d = qt_get(dst);
    if (!in_row || !out_row || !s || !d) {
        return errf(err, errlen, "cannot convert rows of %lld values from %s to %s", (long long)ne0,
                    qt_name(src), qt_name(dst));
    }
    if (src == dst) {
        memcpy(out, in, in_row * (size_t)rows);
        return 0;
    }
    if (!s->dequant) {
        return errf(err, errlen, "cannot dequantize type %s", s->name);
    }
    if (!d->quant) {
        return errf(err, errlen, "cannot quantize to type %s", d->name);
    }
    /* whole chunks per thread: a row is quantized alone, so the split changes no byte */
    int64_t step = chunk_rows(ne0), n_chunks = (rows + step - 1) / step;
    int nt = threads < 1 ? 1 : threads > SYNTH_MAX_THREADS ? SYNTH_MAX_THREADS : threads;
    if (nt > n_chunks) nt = n_chunks < 1 ? 1 : (int)n_chunks;
    convert_part parts[SYNTH_MAX_THREADS];
    pthread_t tid[SYNTH_MAX_THREADS];
    int started = 0, failed = 0;
    for (int k = 0; k < nt; k++) {
        int64_t c0 = n_chunks * k / nt, c1 = n_chunks * (k + 1) / nt;
        parts[k] = (convert_part){src, dst, in, out, ne0, c0 * step, c1 * step < rows ? c1 * step : rows, 0};
    }
    for (int k = 1; k < nt; k++) {
        if (pthread_create(&tid[k], NULL, convert_rows, &parts[k]) != 0) {
            for (int m = k; m < nt; m++) convert_rows(&parts[m]); /* the rest on this thread */
            break;
        }
        started = k;
    }
    convert_rows(&parts[0]);
    for (int k = 1; k <= started; k++) pthread_join(tid[k], NULL);
    for (int k = 0; k < nt; k++) failed |= parts[k].failed;
    return failed ? errf(err, errlen, "out of memory") : 0;
}

int synth_parse_threads(const char *cmd, const char *v, int *out)
{
    char *end = NULL;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || n < 1 || n > SYNTH_MAX_THREADS) {
        fprintf(stderr, "llmc %s: --threads must be 1..%d, not %s\n", cmd, SYNTH_MAX_THREADS, v ? v : "(missing)");
        return -1;
    }
    *out = (int)n;
    return 0;
}

double synth_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void synth_progress_start(synth_progress *p, const char *label, uint64_t total)
{
    memset(p, 0, sizeof *p);
    p->label = label;
    p->tty = isatty(2);
    p->total = total ? total : 1;
    p->shown = -1;
    p->t0 = synth_now();
    synth_progress_add(p, 0);
}

void synth_progress_add(synth_progress *p, uint64_t n)
{
    p->done += n;
    if (!p->tty) return;
    int permille = (int)(p->done >= p->total ? 1000 : p->done * 1000 / p->total);
    if (permille == p->shown) return;
    p->shown = permille;
    char bar[41];
    int fill = permille * 40 / 1000;
    for (int i = 0; i < 40; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[40] = 0;
    fprintf(stderr, "\r%s [%s] %5.1f%%  %.1f s", p->label, bar, permille / 10.0,
            synth_now() - p->t0);
    fflush(stderr);
}

void synth_progress_end(synth_progress *p)
{
    if (p->tty) fputc('\n', stderr);
}
