/*
 * gguf.h - read and write GGUF files (versions 2 and 3).
 *
 * A GGUF file is: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv
 * key/value pairs (string key, u32 value type, value), then n_tensors tensor infos
 * (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset), then padding to
 * general.alignment (default 32), then the tensor data. Strings are u64 length + bytes,
 * not NUL-terminated. Arrays are u32 element type, u64 count, elements (arrays may
 * nest). All little-endian.
 *
 * Reading:
 *   char err[256];
 *   gguf_ctx *g = gguf_open("model.gguf", err, sizeof err);   // mmap, validates all
 *   if (!g) { fprintf(stderr, "error: %s\n", err); ... }
 *   int64_t ctx = gguf_get_int(g, "llama.context_length", 2048);
 *   const gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
 *   gguf_close(g);
 *
 * Every byte is validated by gguf_open/gguf_parse before they return; after that the
 * accessors cannot read out of bounds. A bad file gives NULL and an error naming the
 * field and its byte offset, e.g. "tensor 3 (blk.0.attn_q.weight): data at offset
 * 123456 + 8192 bytes runs past end of file (130000 bytes)".
 *
 * Ownership: a gguf_ctx owns its mapping (gguf_open) or borrows the caller's buffer
 * (gguf_parse: the buffer must outlive the ctx). Every pointer returned by an accessor
 * points into the ctx or its buffer and lives until gguf_close.
 */
#ifndef LLM_GGUF_H
#define LLM_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qtype.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

typedef enum {
    GGUF_T_UINT8 = 0, GGUF_T_INT8 = 1, GGUF_T_UINT16 = 2, GGUF_T_INT16 = 3,
    GGUF_T_UINT32 = 4, GGUF_T_INT32 = 5, GGUF_T_FLOAT32 = 6, GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8, GGUF_T_ARRAY = 9, GGUF_T_UINT64 = 10, GGUF_T_INT64 = 11,
    GGUF_T_FLOAT64 = 12, GGUF_T_COUNT = 13
} gguf_vtype;

/* A string inside the file: not NUL-terminated. */
typedef struct {
    const char *ptr;
    uint64_t    len;
} gguf_str;

typedef struct {
    const char *name;              /* NUL-terminated copy, owned by the ctx */
    uint32_t    n_dims;
    int64_t     ne[GGUF_MAX_DIMS]; /* ne[0] is the row length; unused dims are 1 */
    uint32_t    type;              /* a qtype id, validated by the reader */
    uint64_t    offset;            /* from the start of the data section */
    uint64_t    nbytes;            /* bytes of data: rows * qt_row_size(type, ne[0]) */
    const void *data;              /* start of the data inside the buffer */
} gguf_tensor;

typedef struct gguf_ctx gguf_ctx;

/* Maps and validates a file. NULL and a message in err on any problem. */
gguf_ctx *gguf_open(const char *path, char *err, size_t errlen);
/* Validates a buffer (borrowed, must outlive the ctx). For tests and fuzzing. */
gguf_ctx *gguf_parse(const void *buf, size_t len, char *err, size_t errlen);
/* Unmaps and frees; accepts NULL. */
void gguf_close(gguf_ctx *g);

uint32_t    gguf_version(const gguf_ctx *g);
uint32_t    gguf_alignment(const gguf_ctx *g);
uint64_t    gguf_data_offset(const gguf_ctx *g); /* byte offset of the data section */
const void *gguf_buffer(const gguf_ctx *g, size_t *len);

/* Metadata: index-based access, for listing. */
int64_t     gguf_n_kv(const gguf_ctx *g);
int64_t     gguf_find_key(const gguf_ctx *g, const char *key);   /* -1 if absent */
const char *gguf_key(const gguf_ctx *g, int64_t i);               /* NUL-terminated */
gguf_vtype  gguf_kv_type(const gguf_ctx *g, int64_t i);

/* Typed getters with defaults: the default is returned when the key is absent or
 * has an incompatible type (any integer type or bool converts to int; float32/64
 * and integers convert to double). Strings are NUL-terminated copies owned by ctx. */
int64_t     gguf_get_int(const gguf_ctx *g, const char *key, int64_t def);
double      gguf_get_float(const gguf_ctx *g, const char *key, double def);
bool        gguf_get_bool(const gguf_ctx *g, const char *key, bool def);
const char *gguf_get_str(const gguf_ctx *g, const char *key, const char *def);

/* Arrays (by kv index). Element access is bounds-checked by the caller against
 * gguf_arr_n. Numeric elements are read by value (the data may be unaligned). */
gguf_vtype  gguf_arr_type(const gguf_ctx *g, int64_t kv);   /* GGUF_T_COUNT if not an array */
uint64_t    gguf_arr_n(const gguf_ctx *g, int64_t kv);
gguf_str    gguf_arr_str(const gguf_ctx *g, int64_t kv, uint64_t i);
int64_t     gguf_arr_int(const gguf_ctx *g, int64_t kv, uint64_t i);
double      gguf_arr_float(const gguf_ctx *g, int64_t kv, uint64_t i);
/* Raw element bytes of a numeric array (little-endian, possibly unaligned). */
const void *gguf_arr_data(const gguf_ctx *g, int64_t kv);

/* The vocabulary's identity: a 64-bit hash of tokenizer.ggml.model and of every token
 * text of tokenizer.ggml.tokens (in id order), and their count in *n_tokens. The same
 * for a model file and for the metadata-only tokenizer blob of its weight segment, so
 * two processes can tell whether their token ids mean the same texts. 0 and *n_tokens
 * 0 when the file has no token list. */
uint64_t    gguf_vocab_id(const gguf_ctx *g, uint32_t *n_tokens);

/*
 * Values, including arrays of arrays (additive API). A gguf_value lives in the ctx.
 *   const gguf_value *v = gguf_kv_value(g, gguf_find_key(g, "x.nested"));
 *   for (uint64_t i = 0; i < gguf_value_arr_n(v); i++) {
 *       const gguf_value *row = gguf_value_arr_sub(v, i);   // elem type GGUF_T_ARRAY
 *       int64_t first = gguf_value_arr_int(row, 0);
 *   }
 */
typedef struct gguf_value gguf_value;

/* Name of a value type ("uint32", "string", ...), "unknown" for a bad id. */
const char *gguf_vtype_name(gguf_vtype t);
/* The value of kv index kv (0 <= kv < gguf_n_kv). */
const gguf_value *gguf_kv_value(const gguf_ctx *g, int64_t kv);
gguf_vtype  gguf_value_type(const gguf_value *v);
/* Element type of an array, GGUF_T_COUNT if v is not an array. */
gguf_vtype  gguf_value_arr_type(const gguf_value *v);
/* Element count of an array, 0 if v is not an array. */
uint64_t    gguf_value_arr_n(const gguf_value *v);
/* Element i of an array of arrays (i < gguf_value_arr_n, asserted). */
const gguf_value *gguf_value_arr_sub(const gguf_value *v, uint64_t i);
/* Element i of a string array (asserted). */
gguf_str    gguf_value_arr_str(const gguf_value *v, uint64_t i);
/* Element i of a numeric array as int64 / double (0 for a non-convertible type). */
int64_t     gguf_value_arr_int(const gguf_value *v, uint64_t i);
double      gguf_value_arr_float(const gguf_value *v, uint64_t i);
/* A string scalar's bytes ({NULL, 0} for another type). */
gguf_str    gguf_value_str(const gguf_value *v);
/* The value as serialised in the file (without its type id), size in *len. */
const void *gguf_value_raw(const gguf_value *v, size_t *len);

/* Tensors. */
int64_t            gguf_n_tensors(const gguf_ctx *g);
const gguf_tensor *gguf_tensor_at(const gguf_ctx *g, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name);

/*
 * Writing:
 *   gguf_writer *w = gguf_writer_new();
 *   gguf_writer_set_str(w, "general.architecture", "llama");
 *   gguf_writer_set_u32(w, "llama.block_count", 4);
 *   gguf_writer_add_tensor(w, "token_embd.weight", QT_Q8_0, 2, ne, NULL);
 *   gguf_writer_write(w, "out.gguf", fill_cb, userdata, err, sizeof err);
 *   gguf_writer_free(w);
 * Tensor data is produced by a callback at write time, one tensor at a time, so a
 * multi-gigabyte model never has to be held in memory; a tensor added with non-NULL
 * data is copied from there instead (the data must live until write).
 */
typedef struct gguf_writer gguf_writer;

/* Called once per tensor, in order, to fill dst (nbytes bytes). Non-zero = abort. */
typedef int (*gguf_fill_fn)(void *user, int64_t tensor_index, const char *name,
                            void *dst, uint64_t nbytes);

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w); /* accepts NULL */
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Array of n elements of a numeric type, copied from data. */
void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype type, const void *data, uint64_t n);
/* Array of n strings, copied. */
void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, uint64_t n);
/* Copies every key/value of a reader ctx (e.g. the vocabulary of another model). */
void gguf_writer_copy_kv(gguf_writer *w, const gguf_ctx *src, const char *prefix);
int  gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                            const int64_t *ne, const void *data);
int  gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *user,
                       char *err, size_t errlen);
/* Additive API. Any scalar type (value points at its little-endian bytes). */
void gguf_writer_set_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v);
/* A value already serialised as in a file (without its type id), copied; how arrays
 * of arrays are written. The caller vouches for the bytes; reading back checks them. */
void gguf_writer_set_raw(gguf_writer *w, const char *key, gguf_vtype type, const void *bytes,
                         size_t len);
/* The first problem recorded by a setter or gguf_writer_add_tensor (which returns -1),
 * or NULL. gguf_writer_write fails with it. */
const char *gguf_writer_error(const gguf_writer *w);
/* Serialises to a malloc'd buffer (for tests and for embedding metadata blobs). */
void *gguf_writer_write_mem(gguf_writer *w, gguf_fill_fn fill, void *user, size_t *len,
                            char *err, size_t errlen);

#endif
