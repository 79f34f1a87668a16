/*
 * synth_util.h - pieces shared by `llmc quantize` and `llmc synth`: choosing the
 * weight type a tensor can take, llama.cpp's general.file_type codes, converting f32
 * rows to a packed type in bounded chunks, and a progress display (a bar on a TTY,
 * one line per stage otherwise).
 *
 *   uint32_t t = synth_pick_type(QT_Q4_K, 172, why, sizeof why);   // Q8_0 or F16
 *   synth_progress p;
 *   synth_progress_start(&p, "quantize", total_bytes);
 *   synth_progress_add(&p, n);  ...  synth_progress_end(&p);
 *
 * Ownership: nothing here allocates except synth_convert's scratch, freed before it
 * returns. Owner: gguf helper.
 */
#ifndef LLM_SYNTH_UTIL_H
#define LLM_SYNTH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qtype.h"

/* The type a matrix with rows of ne0 values gets when `want` is asked for: want if
 * ne0 is a multiple of its block size, else Q8_0 if that fits, else F16. When it
 * falls back, why gets a one-line reason ("" otherwise). */
uint32_t synth_pick_type(uint32_t want, int64_t ne0, char *why, size_t whylen);

/* llama.cpp's general.file_type (llama_ftype) for a model whose matrices are `type`. */
uint32_t synth_ftype(uint32_t type);

/* Most threads synth and quantize use. */
#define SYNTH_MAX_THREADS 64

/* `llmc CMD --threads V`: *out = V when it is a decimal 1..SYNTH_MAX_THREADS; else -1
 * after "llmc CMD: --threads must be 1..64, not V" on stderr (V NULL: missing). */
int synth_parse_threads(const char *cmd, const char *v, int *out);

/* Converts `rows` rows of ne0 values of type src (packed) into type dst (packed),
 * through f32 in chunks of bounded size, on up to `threads` threads (each a run of
 * whole chunks; the bytes do not depend on the count). 0, or -1 with a message naming
 * the type that cannot be dequantized or produced. */
int synth_convert(uint32_t src, const void *in, uint32_t dst, void *out, int64_t ne0,
                  int64_t rows, int threads, char *err, size_t errlen);

typedef struct {
    const char *label;    /* "quantize", "synth" */
    bool        tty;      /* stderr is a terminal: draw a bar */
    uint64_t    total;    /* units of work (bytes) */
    uint64_t    done;
    int         shown;    /* last permille drawn */
    double      t0;       /* start, seconds */
} synth_progress;

/* Seconds on a monotonic clock. */
double synth_now(void);
/* Starts a progress display over total units. */
void synth_progress_start(synth_progress *p, const char *label, uint64_t total);
/* Adds n units; redraws the bar on a TTY when it moved. Thread-safe enough for one
 * caller at a time (the fill callbacks run serially). */
void synth_progress_add(synth_progress *p, uint64_t n);
/* Ends the bar (newline on a TTY). */
void synth_progress_end(synth_progress *p);

#endif
