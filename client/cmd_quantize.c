/*
 * cmd_quantize.c - `llmc quantize IN.gguf OUT.gguf TYPE`: re-quantize a model.
 *
 *   llmc quantize ../shared/models/tiny-llama2-Q8_0.gguf /tmp/q4.gguf Q4_0
 *
 * Every weight matrix goes to TYPE ("pure" mode: token_embd and output too; a 3-D
 * stack of matrices too); a matrix whose row length is not a multiple of TYPE's
 * block size falls back to Q8_0 or F16 (said on stderr); 1-D tensors (norms,
 * biases) become F32. Metadata is copied, general.file_type updated. A tensor already
 * in its target type is copied bit for bit. Progress: a bar on a TTY, otherwise one
 * line per stage. Exit 0, 1 with one "error: ..." line, 2 for usage.
 * Owner: gguf helper.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "gguf.h"
#include "synth_util.h"

#define USAGE "usage: llmc quantize IN.gguf OUT.gguf TYPE   (TYPE: Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K F16 BF16 F32)\n"

typedef struct {
    const gguf_ctx *in;
    const uint32_t *out_type;   /* [n_tensors] */
    synth_progress  prog;
    char            err[512];
} quant_job;

/* Target type of one tensor; fills why when a matrix falls back. Rows are what
 * gets quantized, so a 3-D stack of matrices (MoE experts) counts as a matrix. */
static uint32_t plan_type(const gguf_tensor *t, uint32_t want, char *why, size_t whylen)
{
    why[0] = 0;
    if (t->ne[1] * t->ne[2] * t->ne[3] == 1) return QT_F32; /* norms, biases */
    return synth_pick_type(want, t->ne[0], why, whylen);
}

static int fill_tensor(void *user, int64_t i, const char *name, void *dst, uint64_t nbytes)
{
    quant_job *j = user;
    const gguf_tensor *t = gguf_tensor_at(j->in, i);
    char err[256];
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    if (synth_convert(t->type, t->data, j->out_type[i], dst, t->ne[0], rows, err, sizeof err) != 0) {
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
            snprintf(err, errlen, "tensor %s: cannot dequantize type %s", t->name, qt_name(t->type));
            return -1;
        }
    }
    return 0;
}

static int run(const char *in_path, const char *out_path, uint32_t type)
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
    int rc = 1;
    if (!out_type || !w) {
        fprintf(stderr, "error: out of memory\n");
        goto out;
    }
    gguf_writer_copy_kv(w, in, NULL);
    gguf_writer_set_u32(w, "general.file_type", synth_ftype(type));
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    uint64_t total = 0;
    int n_target = 0, n_fallback = 0, n_f32 = 0;
    for (int64_t i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_tensor_at(in, i);
        char why[200];
        out_type[i] = plan_type(t, type, why, sizeof why);
        if (why[0]) {
            fprintf(stderr, "quantize: %s: %s\n", t->name, why);
            n_fallback++;
        } else if (out_type[i] == type) n_target++;
        else if (out_type[i] == QT_F32) n_f32++;
        if (gguf_writer_add_tensor(w, t->name, out_type[i], t->n_dims, t->ne, NULL) != 0) {
            fprintf(stderr, "error: %s\n", gguf_writer_error(w));
            goto out;
        }
        total += (uint64_t)qt_row_size(out_type[i], t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
    }
    if (check_plan(in, out_type, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        goto out;
    }
    quant_job job = {.in = in, .out_type = out_type};
    fprintf(stderr, "quantize: %s: %lld tensors -> %s (%d %s, %d fallback, %d F32)\n",
            in_path, (long long)n, out_path, n_target, qt_name(type), n_fallback, n_f32);
    synth_progress_start(&job.prog, "quantize", total);
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
    int np = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(USAGE, stdout);
            return 0;
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
    int type = qt_from_name(pos[2]);
    const qt_traits *q = type >= 0 ? qt_get((uint32_t)type) : NULL;
    if (!q || !q->quant) {
        fprintf(stderr, "llmc quantize: cannot quantize to %s\n" USAGE, pos[2]);
        return 2;
    }
    return run(pos[0], pos[1], (uint32_t)type);
}
