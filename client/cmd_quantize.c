/*
 * cmd_quantize.c - `llmc quantize IN.gguf OUT.gguf TYPE`: re-quantize a model.
 *
 *   llmc quantize ../shared/models/tiny-llama2-Q8_0.gguf /tmp/q4.gguf Q4_0
 *   llmc quantize ../shared/models/tiny-llama2-Q8_0.gguf /tmp/q4km.gguf Q4_K_M
 *
 * TYPE is a weight type or one of llama.cpp's mixes Q4_K_M / Q5_K_M.
 * A weight type is "pure" mode: every weight matrix goes to TYPE (token_embd and
 * output too; a 3-D stack of matrices too); a matrix whose row length is not a
 * multiple of TYPE's block size falls back to Q8_0 or F16 (said on stderr).
 * A mix gives each tensor the type llama.cpp's rules give it (qmix.h: Q6_K for the
 * output matrix and for attn_v / ffn_down on some layers, Q4_K or Q5_K elsewhere,
 * Q5_0 / Q5_1 / Q8_0 / F16 where a row does not fill 256-value blocks), and
 * general.file_type says the mix (15, 17) as llama-quantize writes it.
 * In both modes 1-D tensors (norms, biases) become F32. Metadata is copied,
 * general.file_type updated. A tensor already in its target type is copied bit for
 * bit. Progress: a bar on a TTY, otherwise one line per stage. Exit 0, 1 with one
 * "error: ..." line, 2 for usage.
 * Owner: gguf helper.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "cpu.h"
#include "gguf.h"
#include "qmix.h"
#include "synth_util.h"
#include "errcode.h"

#define USAGE                                                                             \
    "usage: llmc quantize IN.gguf OUT.gguf TYPE [--threads N]\n"                           \
    "  TYPE: Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K F16 BF16 F32 (every matrix)\n" \
    "        Q4_K_M Q5_K_M (llama.cpp's mixes: Q6_K output, attn_v and ffn_down on some layers)\n" \
    "  --threads N: rows of a tensor converted on N threads (1-64; default: the CPUs this\n"   \
    "               process may run on); the output is the same for every N\n"

typedef struct {
    const gguf_ctx *in;
    const uint32_t *out_type;   /* [n_tensors] */
    int             threads;
    synth_progress  prog;
    char            err[512];
} quant_job;

/* What was asked for: a weight type for every matrix, or a mix. */
typedef struct {
    uint32_t   type;      /* pure mode's type */
    bool       is_mix;
    qmix_model mix;       /* when is_mix */
} quant_target;

/* Target type of one tensor; fills why when a matrix falls back. Rows are what
 * gets quantized, so a 3-D stack of matrices (MoE experts) counts as a matrix. */
static uint32_t plan_type(const quant_target *q, const gguf_tensor *t, char *why, size_t whylen)
{
    why[0] = 0;
    if (q->is_mix) return qmix_tensor_type(&q->mix, t->name, t->n_dims, t->ne, why, whylen);
    if (t->ne[1] * t->ne[2] * t->ne[3] == 1) return QT_F32; /* norms, biases */
    if (strstr(t->name, "ffn_gate_inp")) return QT_F32;       /* MoE routers, as llama.cpp keeps them */
    return synth_pick_type(q->type, t->ne[0], why, whylen);
}

static int fill_tensor(void *user, int64_t i, const char *name, void *dst, uint64_t nbytes)
{
    quant_job *j = user;
    const gguf_tensor *t = gguf_tensor_at(j->in, i);
    char err[256];
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (synth_convert(t->type, t->data, j->out_type[i], dst, t->ne[0], rows, j->threads, err,
                      sizeof err) != 0) {
        snprintf(j->err, sizeof j->err, "tensor %s: %s", name, err);
        return -1;
    }
    synth_progress_add(&j->prog, nbytes);
    return 0;
}

/* Checks the plan can run: every tensor that changes type must be dequantizable. */
static int check_plan(const gguf_ctx *in, const uint32_t *out_type, char *err, size_t errlen)
{
    for (int64_t i = 0; i < gguf_n_tensors(in); i++) {
        const gguf_tensor *t = gguf_tensor_at(in, i);
        if (out_type[i] == t->type) continue;
        const qt_traits *q = qt_get(t->type);
        if (!q || !q->dequant) {
            return errf(err, errlen, "tensor %s: cannot dequantize type %s", t->name, qt_name(t->type));
        }
    }
    return 0;
}

/* "Q4_K 24, Q6_K 5, F32 9": how many tensors of each type the plan writes. */
static void plan_summary(const uint32_t *out_type, int64_t n, char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = 0;
    for (uint32_t ty = 0; ty < QT_COUNT; ty++) {
        int c = 0;
        for (int64_t i = 0; i < n; i++) c += out_type[i] == ty;
        if (c && off < len)
            off += (size_t)snprintf(buf + off, len - off, "%s%s %d", off ? ", " : "", qt_name(ty), c);
    }
}

/* Chooses every tensor's type and declares it to the writer. Returns the bytes of
 * tensor data to write, or -1 with a message in err. */
static int64_t plan(const quant_target *q, const gguf_ctx *in, gguf_writer *w, uint32_t *out_type,
                    int *n_fallback, char *err, size_t errlen)
{
    uint64_t total = 0;
    *n_fallback = 0;
    for (int64_t i = 0; i < gguf_n_tensors(in); i++) {
        const gguf_tensor *t = gguf_tensor_at(in, i);
        char why[200];
        out_type[i] = plan_type(q, t, why, sizeof why);
        if (why[0]) {
            fprintf(stderr, "quantize: %s: %s\n", t->name, why);
            ++*n_fallback;
        }
        if (gguf_writer_add_tensor(w, t->name, out_type[i], t->n_dims, t->ne, NULL) != 0) {
            return errf(err, errlen, "%s", gguf_writer_error(w));
        }
        total += (uint64_t)qt_row_size(out_type[i], t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
    }
    if (check_plan(in, out_type, err, errlen) != 0) return -1;
    return (int64_t)total;
}

static int run(const char *in_path, const char *out_path, quant_target *q, const char *type_name,
               int threads)
{
    char err[1024];
    double t0 = synth_now();
    gguf_ctx *in = gguf_open(in_path, err, sizeof err);
    if (!in) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    int64_t n = gguf_n_tensors(in);
    uint32_t *out_type = calloc(n ? (size_t)n : 1, sizeof *out_type);
    gguf_writer *w = gguf_writer_new();
    int rc = 1, n_fallback;
    if (!out_type || !w) {
        fprintf(stderr, "error: out of memory\n");
        goto out;
    }
    if (q->is_mix && qmix_model_init(&q->mix, q->mix.kind, in, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s: %s\n", in_path, err);
        goto out;
    }
    gguf_writer_copy_kv(w, in, NULL);
    gguf_writer_set_u32(w, "general.file_type", q->is_mix ? qmix_ftype(q->mix.kind) : synth_ftype(q->type));
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    int64_t total = plan(q, in, w, out_type, &n_fallback, err, sizeof err);
    if (total < 0) {
        fprintf(stderr, "error: %s\n", err);
        goto out;
    }
    char types[256];
    plan_summary(out_type, n, types, sizeof types);
    quant_job job = {.in = in, .out_type = out_type, .threads = threads};
    fprintf(stderr, "quantize: %s: %lld tensors -> %s as %s (%s; %d fallback; %d threads)\n", in_path,
            (long long)n, out_path, type_name, types, n_fallback, threads);
    synth_progress_start(&job.prog, "quantize", (uint64_t)total);
    int wr = gguf_writer_write(w, out_path, fill_tensor, &job, err, sizeof err);
    synth_progress_end(&job.prog);
    if (wr != 0) {
        fprintf(stderr, "error: %s\n", job.err[0] ? job.err : err);
        goto out;
    }
    fprintf(stderr, "quantize: wrote %s: %llu bytes of tensor data in %.1f s\n", out_path,
            (unsigned long long)total, synth_now() - t0);
    rc = 0;
out:
    gguf_writer_free(w);
    free(out_type);
    gguf_close(in);
    return rc;
}

/* Entry point of `llmc quantize` (see cmds.h for the exit codes). */
int cmd_quantize(int argc, char **argv)
{
    const char *pos[3];
    int np = 0, threads = cpu_count_usable();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--threads") == 0) {
            if (synth_parse_threads("quantize", i + 1 < argc ? argv[i + 1] : NULL, &threads) != 0) return 2;
            i++;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1] != 0) {
            fprintf(stderr, "llmc quantize: unknown option %s\n" USAGE, argv[i]);
            return 2;
        }
        if (np == 3) {
            fprintf(stderr, "llmc quantize: too many arguments\n" USAGE);
            return 2;
        }
        pos[np++] = argv[i];
    }
    if (np != 3) {
        fputs(USAGE, stderr);
        return 2;
    }
    if (threads > SYNTH_MAX_THREADS) threads = SYNTH_MAX_THREADS;
    quant_target q = {0};
    int mix = qmix_from_name(pos[2]);
    if (mix >= 0) {
        q.is_mix = true;
        q.mix.kind = (qmix_kind)mix;
        return run(pos[0], pos[1], &q, qmix_name(q.mix.kind), threads);
    }
    int type = qt_from_name(pos[2]);
    const qt_traits *tr = type >= 0 ? qt_get((uint32_t)type) : NULL;
    if (!tr || !tr->quant) {
        fprintf(stderr, "llmc quantize: cannot quantize to %s\n" USAGE, pos[2]);
        return 2;
    }
    q.type = (uint32_t)type;
    return run(pos[0], pos[1], &q, tr->name, threads);
}
