/*
 * fuzz_proto.c - libFuzzer harness: bytes -> proto_decode (the check every daemon runs
 * on every message), then every getter on the decoded message and on each row of a
 * SAMPLE/SAMPLED batch, as the daemons read them. Built and run by `make fuzz`
 * (tests/fuzz/README in the Makefile); seeds: one valid message of every type
 * (fuzz_seeds proto).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void touch(const proto_msg *m)
{
    char buf[64];
    int32_t ints[16];
    size_t n;
    for (int i = 0; i < MF_COUNT; i++) { /* every field, as every kind */
        proto_field_id f = (proto_field_id)i;
        proto_u64(m, f, 0);
        proto_i64(m, f, 0);
        proto_f64(m, f, 0);
        proto_bool(m, f, 0);
        const char *s = proto_str(m, f, &n);
        if (s && n) buf[0] = s[n - 1]; /* the pointer must be readable for n bytes */
        proto_strcpy(m, f, buf, sizeof buf);
        proto_ints(m, f, ints, 16);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet++) log_init("fuzz", LOG_ERROR);
    proto_msg m;
    char err[256];
    if (proto_decode(&m, data, size, err, sizeof err) != 0) return 0;
    touch(&m);
    proto_type_name(m.type);
    const msgpack_object *rows = proto_field(&m, MF_ROWS);
    if (rows && (m.type == PT_SAMPLE || m.type == PT_SAMPLED)) /* proto_decode checked the rows' kinds */
        for (uint32_t i = 0; i < rows->via.array.size; i++) {
            proto_msg row = proto_view(&m, &rows->via.array.ptr[i]);
            touch(&row);
        }
    proto_msg_free(&m);
    return 0;
}
