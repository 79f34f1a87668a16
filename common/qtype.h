/*
 * qtype.h - the weight types of GGUF/ggml and their traits, declared once.
 *
 * The numeric ids are ggml's (they are what GGUF files store). Block layouts live in
 * quant.h; this header only names the types so that the GGUF reader can validate
 * tensor infos without knowing how to dequantize.
 *
 *   const qt_traits *t = qt_get(QT_Q4_K);
 *   if (t && t->dequant) t->dequant(src, dst, n);   // n a multiple of t->block_size
 */
#ifndef LLM_QTYPE_H
#define LLM_QTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    QT_F32 = 0, QT_F16 = 1, QT_Q4_0 = 2, QT_Q4_1 = 3,
    /* 4 and 5 were Q4_2 / Q4_3, removed from ggml */
    QT_Q5_0 = 6, QT_Q5_1 = 7, QT_Q8_0 = 8, QT_Q8_1 = 9,
    QT_Q2_K = 10, QT_Q3_K = 11, QT_Q4_K = 12, QT_Q5_K = 13, QT_Q6_K = 14, QT_Q8_K = 15,
    QT_IQ2_XXS = 16, QT_IQ2_XS = 17, QT_IQ3_XXS = 18, QT_IQ1_S = 19, QT_IQ4_NL = 20,
    QT_IQ3_S = 21, QT_IQ2_S = 22, QT_IQ4_XS = 23,
    QT_I8 = 24, QT_I16 = 25, QT_I32 = 26, QT_I64 = 27, QT_F64 = 28, QT_IQ1_M = 29,
    QT_BF16 = 30,
    /* 31..33 were the Q4_0_4_4-style repacks, removed from ggml */
    QT_TQ1_0 = 34, QT_TQ2_0 = 35,
    /* 36..38 were IQ4_NL_4_4-style repacks, removed from ggml */
    QT_MXFP4 = 39,
    QT_COUNT = 40
} qtype;

/* Converts n values (n a multiple of block_size) from the packed type to f32. */
typedef void (*qt_dequant_fn)(const void *src, float *dst, int64_t n);
/* Converts n f32 values (n a multiple of block_size) into packed blocks. */
typedef void (*qt_quant_fn)(const float *src, void *dst, int64_t n);

typedef struct {
    const char   *name;        /* ggml's name: "Q4_K", "F16", "IQ2_XXS" ... */
    int           block_size;  /* values per block (1 for plain types) */
    size_t        type_size;   /* bytes per block; 0 for a removed id */
    qt_dequant_fn dequant;     /* NULL when we cannot dequantize it (IQ*, TQ*) */
    qt_quant_fn   quant;       /* NULL when we cannot produce it */
} qt_traits;

/* Traits of a type id, or NULL for an id that is not a ggml type at all
 * (out of range or one of the removed ids). Known-but-unsupported types return
 * traits with a name and sizes but NULL dequant. */
const qt_traits *qt_get(uint32_t type);
/* Name for messages: the ggml name, or "unknown" for an invalid id. */
const char *qt_name(uint32_t type);
/* Type id from a name, case-insensitive ("q8_0", "Q4_K"), or -1. */
int qt_from_name(const char *name);
/* Bytes of one row of n values; 0 when n is not a multiple of the block size
 * or the type is invalid. */
size_t qt_row_size(uint32_t type, int64_t n);

#endif
