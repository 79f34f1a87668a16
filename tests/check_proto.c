/* Tests for common/proto (wire protocol), common/net (sockets; the run directory is in
 * check_net.c) and common/logits_shm: round trips, schema validation, hostile bytes.
 * Suite "proto". */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "logits_shm.h"
#include "net.h"
#include "errcode.h"
#include "proto.h"
#include "sampler.h"
#include "zap.h"

static void make_run(proto_writer *w, uint32_t n_toks)
{
    proto_begin(w, PT_RUN, 42);
    proto_put_u64(w, MF_SESS, 7);
    int32_t toks[64];
    for (uint32_t i = 0; i < n_toks && i < 64; i++) toks[i] = (int32_t)i * 3 - 5;
    proto_put_ints(w, MF_TOKS, toks, n_toks);
    proto_put_u64(w, MF_STEP, 3);
    proto_put_u64(w, MF_BUDGET, 100);
    uint8_t sp[SMP_WIRE_MAX];
    smp_params p = smp_params_default();
    p.temperature = 0.5f;
    p.seed = 9;
    proto_put_bin(w, MF_SP, sp, smp_params_to_wire(&p, sp));
    proto_put_u64(w, MF_EPOCH, 99);
    proto_put_f64(w, MF_MU, 2.5);
}

START_TEST(test_round_trip)
{
    proto_writer w;
    make_run(&w, 10);
    proto_msg m;
    char err[200];
    ck_assert_int_eq(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err), 0);
    ck_assert_int_eq(m.type, PT_RUN);
    ck_assert_uint_eq(m.id, 42);
    ck_assert_uint_eq(proto_u64(&m, MF_SESS, 0), 7);
    ck_assert_uint_eq(proto_u64(&m, MF_EPOCH, 0), 99);
    ck_assert_double_eq(proto_f64(&m, MF_MU, 0), 2.5);
    int32_t t[16];
    ck_assert_int_eq(proto_ints(&m, MF_TOKS, t, 16), 10);
    ck_assert_int_eq(t[0], -5);
    ck_assert_int_eq(t[9], 22);
    ck_assert_int_eq(proto_ints(&m, MF_TOKS, t, 4), 10); /* full length even when capped */
    ck_assert_uint_eq(proto_u64(&m, MF_RETRY_MS, 77), 77); /* absent */
    ck_assert_ptr_null(proto_str(&m, MF_SESS, NULL)); /* wrong kind: absent */
    proto_writer_free(&w);
    proto_msg_free(&m);
    /* the message owns its bytes: the source buffer may be gone */
    proto_begin(&w, PT_PIECE, 5);
    proto_put_str(&w, MF_TEXT, "h\xc3\xa9llo");
    proto_put_u64(&w, MF_NTOK, 1);
    char *copy = malloc(proto_size(&w));
    size_t n = proto_size(&w);
    memcpy(copy, proto_data(&w), n);
    proto_writer_free(&w);
    ck_assert_int_eq(proto_decode(&m, copy, n, err, sizeof err), 0);
    memset(copy, 0xAA, n);
    free(copy);
    size_t len;
    const char *s = proto_str(&m, MF_TEXT, &len);
    ck_assert_uint_eq(len, 6);
    ck_assert_int_eq(memcmp(s, "h\xc3\xa9llo", 6), 0);
    char buf[4];
    ck_assert_int_eq(proto_strcpy(&m, MF_TEXT, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "h\xc3\xa9");
    proto_msg_free(&m);
    proto_msg_free(&m); /* twice is fine */
    /* a message moved elsewhere reads its own fields (its map pointed into the struct) */
    make_run(&w, 3);
    proto_msg *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    ck_assert_int_eq(proto_decode(a, proto_data(&w), proto_size(&w), err, sizeof err), 0);
    proto_writer_free(&w);
    proto_msg_move(b, a);
    memset(a, 0x5A, sizeof *a);
    free(a);
    ck_assert_uint_eq(proto_u64(b, MF_SESS, 0), 7);
    ck_assert_int_eq(proto_ints(b, MF_TOKS, t, 16), 3);
    proto_msg_free(b);
    free(b);
}
END_TEST

static int decode_err(proto_writer *w, char *err, size_t cap)
{
    proto_msg m;
    int r = proto_decode(&m, proto_data(w), proto_size(w), err, cap);
    if (r == 0) proto_msg_free(&m);
    proto_writer_free(w);
    return r;
}

START_TEST(test_schema_errors)
{
    char err[200];
    proto_writer w;
    /* a required field missing: the error names type and field */
    proto_begin(&w, PT_TOKEN, 1);
    proto_put_u64(&w, MF_SESS, 1);
    proto_put_u64(&w, MF_STEP, 1);
    proto_put_u64(&w, MF_EPOCH, 1);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "TOKEN: field 'tok' is missing"));
    /* wrong kind */
    proto_begin(&w, PT_PIECE, 1);
    proto_put_u64(&w, MF_TEXT, 3);
    proto_put_u64(&w, MF_NTOK, 1);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "'text' must be a string"));
    /* ints out of int32 range, in an optional field */
    proto_begin(&w, PT_RUN, 1);
    proto_put_u64(&w, MF_SESS, 1);
    proto_put_ints(&w, MF_TOKS, NULL, 0);
    proto_put_u64(&w, MF_STEP, 0);
    proto_put_u64(&w, MF_BUDGET, 0);
    proto_put_bin(&w, MF_SP, "", 0);
    proto_put_u64(&w, MF_EPOCH, 0);
    proto_put_array_begin(&w, MF_EOG, 1);
    msgpack_pack_int64(&w.pk, (int64_t)1 << 40);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "'eog'"));
    /* params must map strings to strings */
    proto_begin(&w, PT_GENERATE, 1);
    proto_put_i64(&w, MF_N, 5);
    proto_put_map_begin(&w, MF_PARAMS, 1);
    proto_pack_str(&w.pk, "temp");
    msgpack_pack_double(&w.pk, 0.5);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "'params'"));
    /* another version */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    proto_pack_key(&pk, MF_V); msgpack_pack_uint64(&pk, PROTO_VERSION + 1);
    proto_pack_key(&pk, MF_T); msgpack_pack_uint64(&pk, PT_PING);
    proto_pack_key(&pk, MF_ID); msgpack_pack_uint64(&pk, 1);
    proto_msg m;
    ck_assert_int_eq(proto_decode(&m, sb.data, sb.size, err, sizeof err), -1);
    char want[64];
    snprintf(want, sizeof want, "protocol version %d, this daemon speaks %d", PROTO_VERSION + 1, PROTO_VERSION);
    ck_assert_msg(strstr(err, want), "%s", err);
    /* unknown type */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 3);
    proto_pack_key(&pk, MF_V); msgpack_pack_uint64(&pk, PROTO_VERSION);
    proto_pack_key(&pk, MF_T); msgpack_pack_uint64(&pk, PT_TYPE_COUNT);
    proto_pack_key(&pk, MF_ID); msgpack_pack_uint64(&pk, 1);
    ck_assert_int_eq(proto_decode(&m, sb.data, sb.size, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "type"));
    /* no request id */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 2);
    proto_pack_key(&pk, MF_V); msgpack_pack_uint64(&pk, PROTO_VERSION);
    proto_pack_key(&pk, MF_T); msgpack_pack_uint64(&pk, PT_PING);
    ck_assert_int_eq(proto_decode(&m, sb.data, sb.size, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "request id"));
    /* not a map */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_array(&pk, 0);
    ck_assert_int_eq(proto_decode(&m, sb.data, sb.size, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not a msgpack map"));
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

/* SAMPLED/TOKEN "logprob" + "top" and PIECE "probs" (params n_probs > 0). */
static void begin_sampled(proto_writer *w)
{
    proto_begin(w, PT_TOKEN, 3);
    proto_put_u64(w, MF_SESS, 1);
    proto_put_u64(w, MF_STEP, 0);
    proto_put_i64(w, MF_TOK, 5);
    proto_put_u64(w, MF_EPOCH, 1);
}

/* SAMPLE / SAMPLED batches: every row is checked; proto_view reads a row. */
static void sample_row(msgpack_packer *pk, uint64_t sess, int good_sp, int with_hist)
{
    msgpack_pack_map(pk, 4 + (with_hist ? 1 : 0));
    proto_pack_key(pk, MF_SESS); msgpack_pack_uint64(pk, sess);
    proto_pack_key(pk, MF_STEP); msgpack_pack_uint64(pk, 3);
    proto_pack_key(pk, MF_SLOT); msgpack_pack_uint64(pk, 1);
    proto_pack_str(pk, "sp");
    if (good_sp) { msgpack_pack_bin(pk, 2); msgpack_pack_bin_body(pk, "ab", 2); }
    else proto_pack_str(pk, "ab");
    if (with_hist) { proto_pack_key(pk, MF_HIST); msgpack_pack_array(pk, 1); msgpack_pack_int32(pk, 4); }
}

START_TEST(test_batch_rows)
{
    char err[200];
    proto_writer w;
    proto_msg m;
    proto_begin(&w, PT_SAMPLE, 9);
    proto_put_str(&w, MF_SHM, "/llm-logits-0-1");
    proto_put_u64(&w, MF_NV, 32);
    proto_put_array_begin(&w, MF_ROWS, 2);
    sample_row(&w.pk, 5, 1, 1);
    sample_row(&w.pk, 6, 1, 1);
    ck_assert_int_eq(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err), 0);
    const msgpack_object *rows = proto_field(&m, MF_ROWS);
    ck_assert_uint_eq(rows->via.array.size, 2);
    proto_msg r1 = proto_view(&m, &rows->via.array.ptr[1]);
    ck_assert_uint_eq(proto_u64(&r1, MF_SESS, 0), 6);
    int32_t h[2];
    ck_assert_int_eq(proto_ints(&r1, MF_HIST, h, 2), 1);
    ck_assert_int_eq(h[0], 4);
    proto_msg_free(&m);
    proto_writer_free(&w);
    /* a row without hist, a row whose sp is a string: the whole message is refused */
    for (int bad = 0; bad < 2; bad++) {
        proto_begin(&w, PT_SAMPLE, 9);
        proto_put_str(&w, MF_SHM, "/llm-logits-0-1");
        proto_put_u64(&w, MF_NV, 32);
        proto_put_array_begin(&w, MF_ROWS, 2);
        sample_row(&w.pk, 5, 1, 1);
        sample_row(&w.pk, 6, bad, !bad);
        ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
        ck_assert_ptr_nonnull(strstr(err, "SAMPLE: field 'rows' must be"));
    }
    /* SAMPLED rows: tok or err, optional kinds checked */
    proto_begin(&w, PT_SAMPLED, 9);
    proto_put_array_begin(&w, MF_ROWS, 2);
    msgpack_pack_map(&w.pk, 3);
    proto_pack_key(&w.pk, MF_SESS); msgpack_pack_uint64(&w.pk, 5);
    proto_pack_key(&w.pk, MF_STEP); msgpack_pack_uint64(&w.pk, 3);
    proto_pack_key(&w.pk, MF_TOK); msgpack_pack_int32(&w.pk, 17);
    msgpack_pack_map(&w.pk, 3);
    proto_pack_key(&w.pk, MF_SESS); msgpack_pack_uint64(&w.pk, 6);
    proto_pack_key(&w.pk, MF_STEP); msgpack_pack_uint64(&w.pk, 3);
    proto_pack_key(&w.pk, MF_ERR); proto_pack_str(&w.pk, "top_k: bad");
    ck_assert_int_eq(decode_err(&w, err, sizeof err), 0);
    proto_begin(&w, PT_SAMPLED, 9);
    proto_put_array_begin(&w, MF_ROWS, 1);
    msgpack_pack_map(&w.pk, 3);
    proto_pack_key(&w.pk, MF_SESS); msgpack_pack_uint64(&w.pk, 5);
    proto_pack_key(&w.pk, MF_STEP); msgpack_pack_uint64(&w.pk, 3);
    proto_pack_key(&w.pk, MF_TOP); msgpack_pack_uint64(&w.pk, 3);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
}
END_TEST

/* Sampler parameters travel in their wire form; a damaged block is refused by name. */
START_TEST(test_params_wire)
{
    char err[200];
    uint8_t buf[SMP_WIRE_MAX];
    smp_params p = smp_params_default(), q;
    p.top_k = 7;
    p.seed = 1234;
    ck_assert_int_eq(smp_params_add_bias(&p, 11, -2.5f, err, sizeof err), 0);
    size_t n = smp_params_to_wire(&p, buf);
    ck_assert_uint_lt(n, 1000); /* only the bias entries in use travel */
    ck_assert_int_eq(smp_params_from_wire(buf, n, 32000, &q, err, sizeof err), 0);
    ck_assert_int_eq(q.top_k, 7);
    ck_assert_uint_eq(q.seed, 1234);
    ck_assert_int_eq(q.n_logit_bias, 1);
    ck_assert_int_eq(q.logit_bias[0].id, 11);
    ck_assert_int_eq(smp_params_from_wire(buf, n - 1, 32000, &q, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "logit_bias"));
    ck_assert_int_eq(smp_params_from_wire(buf, n, 5, &q, err, sizeof err), -1); /* id 11 >= n_vocab 5 */
    ck_assert_ptr_nonnull(strstr(err, "logit_bias"));
    buf[0] ^= 1;
    ck_assert_int_eq(smp_params_from_wire(buf, n, 32000, &q, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "unknown format"));
    buf[0] ^= 1;
    smp_params r = p;
    r.top_p = 7.0f; /* out of range */
    n = smp_params_to_wire(&r, buf);
    ck_assert_int_eq(smp_params_from_wire(buf, n, 32000, &q, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "top_p"));
    n = smp_params_to_wire(&p, buf);
    buf[4 + offsetof(smp_params, ignore_eos)] = 7;
    ck_assert_int_eq(smp_params_from_wire(buf, n, 32000, &q, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "boolean"));
    ck_assert_int_eq(smp_params_from_wire(buf, 3, 32000, &q, err, sizeof err), -1);
}
END_TEST

static void begin_piece(proto_writer *w, uint32_t n)
{
    proto_begin(w, PT_PIECE, 3);
    proto_put_str(w, MF_TEXT, "hi");
    proto_put_u64(w, MF_NTOK, 1);
    proto_put_array_begin(w, MF_PROBS, n);
}

static void pack_kv_str(msgpack_packer *pk, const char *k, const char *v)
{
    proto_pack_str(pk, k);
    proto_pack_str(pk, v);
}

START_TEST(test_logprob_fields)
{
    char err[200];
    proto_writer w;
    proto_msg m;
    /* valid: integer and float log-probs, an empty top list */
    begin_sampled(&w);
    proto_put_f64(&w, MF_LOGPROB, -0.25);
    proto_put_array_begin(&w, MF_TOP, 2);
    msgpack_pack_array(&w.pk, 2); msgpack_pack_int32(&w.pk, 5); msgpack_pack_double(&w.pk, -0.25);
    msgpack_pack_array(&w.pk, 2); msgpack_pack_int32(&w.pk, 9); msgpack_pack_int64(&w.pk, -3);
    ck_assert_int_eq(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err), 0);
    ck_assert_double_eq(proto_f64(&m, MF_LOGPROB, 0), -0.25);
    ck_assert_uint_eq(proto_field(&m, MF_TOP)->via.array.size, 2);
    proto_msg_free(&m);
    proto_writer_free(&w);
    begin_sampled(&w);
    proto_put_array_begin(&w, MF_TOP, 0);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), 0);
    /* bad tops: a pair of 3, an id beyond int32, a string log-prob, not an array */
    begin_sampled(&w);
    proto_put_array_begin(&w, MF_TOP, 1);
    msgpack_pack_array(&w.pk, 3); msgpack_pack_int32(&w.pk, 5); msgpack_pack_double(&w.pk, -1); msgpack_pack_nil(&w.pk);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "TOKEN: field 'top' must be"));
    begin_sampled(&w);
    proto_put_array_begin(&w, MF_TOP, 1);
    msgpack_pack_array(&w.pk, 2); msgpack_pack_int64(&w.pk, (int64_t)1 << 40); msgpack_pack_double(&w.pk, -1);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    begin_sampled(&w);
    proto_put_array_begin(&w, MF_TOP, 1);
    msgpack_pack_array(&w.pk, 2); msgpack_pack_int32(&w.pk, 1); proto_pack_str(&w.pk, "-1");
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    begin_sampled(&w);
    proto_put_u64(&w, MF_TOP, 3);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    begin_sampled(&w);
    proto_put_str(&w, MF_LOGPROB, "x");
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "'logprob' must be a number"));
    /* PIECE probs: a full entry and a minimal one decode */
    begin_piece(&w, 2);
    msgpack_pack_map(&w.pk, 4);
    proto_pack_key(&w.pk, MF_ID); msgpack_pack_int32(&w.pk, 7);
    pack_kv_str(&w.pk, "text", "hi");
    proto_pack_key(&w.pk, MF_LOGPROB); msgpack_pack_double(&w.pk, -0.5);
    proto_pack_key(&w.pk, MF_TOP); msgpack_pack_array(&w.pk, 1);
    msgpack_pack_array(&w.pk, 2); msgpack_pack_int32(&w.pk, 7); msgpack_pack_double(&w.pk, -0.5);
    msgpack_pack_map(&w.pk, 2);
    proto_pack_key(&w.pk, MF_ID); msgpack_pack_int32(&w.pk, 8);
    proto_pack_key(&w.pk, MF_LOGPROB); msgpack_pack_double(&w.pk, -1.5);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), 0);
    /* bad entries: not a map, no logprob, no id, text not a string, a bad top */
    begin_piece(&w, 1);
    msgpack_pack_array(&w.pk, 0);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "PIECE: field 'probs' must be"));
    begin_piece(&w, 1);
    msgpack_pack_map(&w.pk, 1);
    proto_pack_key(&w.pk, MF_ID); msgpack_pack_int32(&w.pk, 8);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    begin_piece(&w, 1);
    msgpack_pack_map(&w.pk, 1);
    proto_pack_key(&w.pk, MF_LOGPROB); msgpack_pack_double(&w.pk, -1.5);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    begin_piece(&w, 1);
    msgpack_pack_map(&w.pk, 3);
    proto_pack_key(&w.pk, MF_ID); msgpack_pack_int32(&w.pk, 8);
    proto_pack_key(&w.pk, MF_LOGPROB); msgpack_pack_double(&w.pk, -1.5);
    proto_pack_key(&w.pk, MF_TEXT); msgpack_pack_int32(&w.pk, 1);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    begin_piece(&w, 1);
    msgpack_pack_map(&w.pk, 3);
    proto_pack_key(&w.pk, MF_ID); msgpack_pack_int32(&w.pk, 8);
    proto_pack_key(&w.pk, MF_LOGPROB); msgpack_pack_double(&w.pk, -1.5);
    proto_pack_key(&w.pk, MF_TOP); msgpack_pack_array(&w.pk, 1); msgpack_pack_int32(&w.pk, 8);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    /* truncated inside the nested lists: rejected before unpacking */
    begin_piece(&w, 1);
    msgpack_pack_map(&w.pk, 3);
    proto_pack_key(&w.pk, MF_ID); msgpack_pack_int32(&w.pk, 8);
    proto_pack_key(&w.pk, MF_LOGPROB); msgpack_pack_double(&w.pk, -1.5);
    proto_pack_key(&w.pk, MF_TOP); msgpack_pack_array(&w.pk, 1);
    msgpack_pack_array(&w.pk, 2); msgpack_pack_int32(&w.pk, 7); msgpack_pack_double(&w.pk, -0.5);
    for (size_t cut = 1; cut < 30; cut++)
        ck_assert_int_eq(proto_decode(&m, proto_data(&w), proto_size(&w) - cut, err, sizeof err), -1);
    proto_writer_free(&w);
}
END_TEST

START_TEST(test_truncated_and_trailing)
{
    proto_writer w;
    make_run(&w, 40);
    size_t n = proto_size(&w);
    uint8_t *buf = malloc(n + 1);
    memcpy(buf, proto_data(&w), n);
    proto_writer_free(&w);
    char err[200];
    proto_msg m;
    for (size_t k = 0; k < n; k++) /* every proper prefix is refused */
        ck_assert_int_eq(proto_decode(&m, buf, k, err, sizeof err), -1);
    buf[n] = 0xc0; /* trailing bytes are refused too */
    ck_assert_int_eq(proto_decode(&m, buf, n + 1, err, sizeof err), -1);
    ck_assert_int_eq(proto_decode(&m, buf, n, err, sizeof err), 0);
    proto_msg_free(&m);
    free(buf);
}
END_TEST

START_TEST(test_hostile_headers)
{
    char err[200];
    proto_msg m;
    /* array32 / map32 / str32 / bin32 claiming 4 G entries in a few bytes */
    static const uint8_t huge[][6] = {{0xdd, 0xff, 0xff, 0xff, 0xff, 0x00}, {0xdf, 0xff, 0xff, 0xff, 0xff, 0x00},
                                      {0xdb, 0xff, 0xff, 0xff, 0xff, 0x41}, {0xc6, 0xff, 0xff, 0xff, 0xff, 0x41},
                                      {0xc9, 0xff, 0xff, 0xff, 0xff, 0x01}, {0xc1, 0, 0, 0, 0, 0}};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        ck_assert_int_eq(proto_wellformed(huge[i], 6, 8), -1);
        ck_assert_int_eq(proto_decode(&m, huge[i], 6, err, sizeof err), -1);
    }
    /* nesting deeper than 8 */
    uint8_t deep[64];
    memset(deep, 0x91, sizeof deep); /* fixarray of 1, nested */
    deep[63] = 0x00;
    ck_assert_int_eq(proto_wellformed(deep, sizeof deep, 8), -1);
    ck_assert_int_eq(proto_decode(&m, deep, sizeof deep, err, sizeof err), -1);
    ck_assert_int_eq(proto_wellformed(deep + 56, 8, 8), 0);
    ck_assert_int_eq(proto_decode(&m, NULL, 0, err, sizeof err), -1);
}
END_TEST

START_TEST(test_random_bytes)
{
    char err[200];
    uint8_t buf[256];
    srand(12345);
    proto_writer w;
    make_run(&w, 20);
    size_t n = proto_size(&w);
    uint8_t *good = malloc(n);
    memcpy(good, proto_data(&w), n);
    proto_writer_free(&w);
    int accepted = 0;
    for (int it = 0; it < 20000; it++) {
        size_t len;
        if (it % 2) { /* pure noise */
            len = (size_t)(rand() % (int)sizeof buf);
            for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rand();
        } else { /* a valid message with a few bytes flipped */
            len = n < sizeof buf ? n : sizeof buf;
            memcpy(buf, good, len);
            for (int k = 0; k < 3; k++) buf[rand() % (int)len] = (uint8_t)rand();
        }
        proto_msg m;
        if (proto_decode(&m, buf, len, err, sizeof err) == 0) {
            accepted++;
            /* whatever was accepted is safe to read through every getter */
            int32_t t[8];
            proto_ints(&m, MF_TOKS, t, 8);
            proto_str(&m, MF_TEXT, NULL);
            proto_f64(&m, MF_MU, 0);
            proto_msg_free(&m);
        } else {
            ck_assert(err[0] != 0);
        }
    }
    free(good);
    ck_assert_int_lt(accepted, 20000);
}
END_TEST

START_TEST(test_sockets_and_max_size)
{
    void *ctx = zmq_ctx_new();
    void *r = net_socket(ctx, ZMQ_ROUTER), *d = net_socket(ctx, ZMQ_DEALER);
    ck_assert_int_eq(zmq_bind(r, "inproc://proto-test"), 0);
    ck_assert_int_eq(zmq_connect(d, "inproc://proto-test"), 0);
    int64_t max = 0;
    size_t sz = sizeof max;
    zmq_getsockopt(r, ZMQ_MAXMSGSIZE, &max, &sz);
    ck_assert_int_eq(max, PROTO_MAX_MSG);
    proto_writer w;
    proto_begin(&w, PT_PING, 3);
    ck_assert_int_eq(net_send(d, NULL, 0, proto_data(&w), proto_size(&w)), 0);
    proto_writer_free(&w);
    zmq_pollitem_t it = {r, 0, ZMQ_POLLIN, 0};
    ck_assert_int_eq(zmq_poll(&it, 1, 2000), 1);
    uint8_t rid[NET_RID_MAX];
    size_t rl = 0;
    zmq_msg_t zm;
    ck_assert_int_eq(net_recv(r, 1, rid, &rl, &zm), 1);
    ck_assert_uint_gt(rl, 0);
    proto_msg m;
    char err[100];
    ck_assert_int_eq(proto_decode(&m, zmq_msg_data(&zm), zmq_msg_size(&zm), err, sizeof err), 0);
    ck_assert_int_eq(m.type, PT_PING);
    proto_msg_free(&m);
    zmq_msg_close(&zm);
    ck_assert_int_eq(net_recv(r, 1, rid, &rl, &zm), 0); /* nothing more */
    zmq_msg_close(&zm);
    /* a payload over the limit is never sent (the peer would drop the connection), and
     * the connection keeps working */
    size_t big = PROTO_MAX_MSG + 1;
    char *blob = calloc(1, big);
    errno = 0;
    ck_assert_int_eq(net_send(d, NULL, 0, blob, big), -1);
    ck_assert_int_eq(errno, EMSGSIZE);
    ck_assert_int_eq(net_send(d, NULL, 0, blob, PROTO_MAX_MSG), 0); /* the limit itself passes */
    free(blob);
    ck_assert_int_eq(zmq_poll(&it, 1, 2000), 1);
    ck_assert_int_eq(net_recv(r, 1, rid, &rl, &zm), 1);
    ck_assert_uint_eq(zmq_msg_size(&zm), PROTO_MAX_MSG);
    zmq_msg_close(&zm);
    net_close(&r);
    net_close(&d);
    ck_assert_ptr_null(r);
    zmq_ctx_term(ctx);
}
END_TEST

START_TEST(test_logits_ring)
{
    char err[200];
    pid_t fake = 2000000000 + (getpid() % 100000); /* no real process has it */
    lshm *w = lshm_create(fake, 4, 100, err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    for (uint32_t s = 0; s < 4; s++)
        for (int i = 0; i < 100; i++) lshm_slot(w, s)[i] = (float)(s * 1000 + i);
    char name[64];
    lshm_name_for(fake, name, sizeof name);
    ck_assert_str_eq(lshm_name(w), name);
    lshm *r = lshm_open_ro(name, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    const float *row = lshm_row(r, 3, 100, err, sizeof err);
    ck_assert_ptr_nonnull(row);
    ck_assert_float_eq(row[99], 3099.0f);
    ck_assert_ptr_null(lshm_row(r, 4, 100, err, sizeof err)); /* slot out of range */
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
    ck_assert_ptr_null(lshm_row(r, 0, 101, err, sizeof err)); /* n_vocab disagrees */
    ck_assert_ptr_null(lshm_open_ro("/etc-passwd", err, sizeof err));
    ck_assert_ptr_null(lshm_open_ro("/llm-logits-../../x", err, sizeof err));
    lshm_destroy(&r);
    lshm_destroy(&w);
    ck_assert_ptr_null(w);
    ck_assert_ptr_null(lshm_open_ro(name, err, sizeof err)); /* the creator unlinked it */
}
END_TEST


#define NOBODY 65534

/* Plants a valid-looking ring under the name in arg, as another user would. */
static int plant_ring(void *arg)
{
    const char *name = arg;
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0644);
    if (fd < 0 || fchmod(fd, 0644) != 0 || ftruncate(fd, 4096) != 0) return 2;
    lshm_header h = {.magic = LSHM_MAGIC, .version = LSHM_VERSION, .n_slots = 1, .n_vocab = 100,
                     .slot_bytes = 448, .total_bytes = 4096, .owner_pid = 1};
    return pwrite(fd, &h, sizeof h, 0) == (ssize_t)sizeof h ? 0 : 3;
}

/* samplerd reads only rings of its own uid that nobody else can write (issue 10). */
START_TEST(test_logits_ring_foreign)
{
    char err[200], name[64], path[96];
    pid_t fake = 2000000000 + (getpid() % 100000) + 1;
    lshm *w = lshm_create(fake, 2, 100, err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    lshm_name_for(fake, name, sizeof name);
    snprintf(path, sizeof path, "/dev/shm%s", name);
    ck_assert_int_eq(chmod(path, 0644), 0);
    lshm *r = lshm_open_ro(name, err, sizeof err);
    ck_assert_ptr_null(r);
    ck_assert_msg(strstr(err, "mode 0644"), "%s", err);
    ck_assert_int_eq(chmod(path, 0600), 0);
    r = lshm_open_ro(name, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    lshm_destroy(&r);
    lshm_destroy(&w);
    char other[64]; /* another uid's ring is not ours to read, whatever its mode */
    snprintf(other, sizeof other, "/llm-logits-%u-%d", (unsigned)geteuid() + 1, (int)fake);
    ck_assert_ptr_null(lshm_open_ro(other, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "is not /llm-logits-"));
    if (geteuid() != 0) {
        fprintf(stderr, "proto: SKIPPED a ring planted by uid %d: needs root\n", NOBODY);
        return;
    }
    pid_t pid = fork(); /* uid 65534 plants a ring under our next worker's name */
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 ||
            setresuid(NOBODY, NOBODY, NOBODY) != 0)
            _exit(90);
        _exit(plant_ring(name));
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    r = lshm_open_ro(name, err, sizeof err);
    ck_assert_ptr_null(r);
    char want[64];
    snprintf(want, sizeof want, "owned by uid %d", NOBODY);
    ck_assert_msg(strstr(err, want), "%s", err);
    ck_assert_int_eq(shm_unlink(name), 0);
}
END_TEST

/* An empty string or bin that comes before anything else of variable length decodes
 * with a NULL pointer in msgpack-c: proto_str must still give a usable pointer, or every
 * memcpy(dst, p, 0) after it is undefined behaviour (issue 10.8). */
START_TEST(test_empty_strings)
{
    /* {"": "", "v": 1, "t": PING, "id": 3}: the first key and its value are empty */
    const uint8_t raw[] = {0x84, 0xa0, 0xa0, 0xa1, 'v', PROTO_VERSION, 0xa1, 't', PT_PING, 0xa2, 'i', 'd', 3};
    proto_msg e;
    char err0[200];
    ck_assert_int_eq(proto_decode(&e, raw, sizeof raw, err0, sizeof err0), 0);
    /* a reader that walks the map (sampler parameters are read that way) gets pointers */
    ck_assert_ptr_nonnull(e.map->ptr[0].key.via.str.ptr);
    ck_assert_ptr_nonnull(e.map->ptr[0].val.via.str.ptr);
    ck_assert_uint_eq(e.map->ptr[0].val.via.str.size, 0);
    proto_msg_free(&e);
    proto_writer w;
    proto_begin(&w, PT_PIECE, 3);
    proto_put_str(&w, MF_TEXT, "");
    proto_put_u64(&w, MF_NTOK, 0);
    proto_msg m;
    char err[200], out[8] = "xx";
    ck_assert_int_eq(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err), 0);
    size_t n = 99;
    const char *p = proto_str(&m, MF_TEXT, &n);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(proto_strcpy(&m, MF_TEXT, out, sizeof out), 0);
    ck_assert_str_eq(out, "");
    proto_writer_free(&w);
    proto_msg_free(&m);
}
END_TEST

/* Allow-lists of CURVE keys: inline (commas, spaces), from a file with comments, "*";
 * a bad key or an empty list is an error naming it. */
START_TEST(test_zap_lists)
{
    char pub[41], sec[41], pub2[41], err[200];
    ck_assert_int_eq(zmq_curve_keypair(pub, sec), 0);
    ck_assert_int_eq(zmq_curve_keypair(pub2, sec), 0);
    static uint8_t keys[8][32];
    char list[200];
    snprintf(list, sizeof list, " %s,%s\n", pub, pub2);
    ck_assert_int_eq(zap_parse_list(list, keys, 8, err, sizeof err), 2);
    uint8_t k[32];
    zmq_z85_decode(k, pub2);
    ck_assert_int_eq(memcmp(keys[1], k, 32), 0);
    ck_assert_int_eq(zap_parse_list("*", keys, 8, err, sizeof err), -2);
    ck_assert_int_eq(zap_parse_list("tooshort, x", keys, 8, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "tooshort"));
    ck_assert_int_eq(zap_parse_list("  ", keys, 8, err, sizeof err), -1);
    char path[64] = "/tmp/llm-zap-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    dprintf(fd, "# the workers\n%s  # host a\n\n%s\n", pub, pub2);
    close(fd);
    ck_assert_int_eq(zap_parse_list(path, keys, 8, err, sizeof err), 2);
    ck_assert_int_eq(zap_parse_list(path, keys, 1, err, sizeof err), -1); /* over the cap */
    unlink(path);
    ck_assert_int_eq(zap_parse_list("/nonexistent/keys", keys, 8, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/keys"));
}
END_TEST

/* A tcp:// server socket without CURVE is served, with a warning saying so (issue 10.8). */
START_TEST(test_plaintext_warning)
{
    unsetenv("LLM_CURVE_SECRET");
    char path[64] = "/tmp/llm-warn-XXXXXX", err[200] = "";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    int saved = dup(2);
    dup2(fd, 2);
    void *ctx = zmq_ctx_new(), *sock = net_socket(ctx, ZMQ_ROUTER);
    int rc = net_curve(sock, "tcp://127.0.0.1:1", 1, err, sizeof err);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    net_close(&sock);
    zmq_ctx_term(ctx);
    ck_assert_int_eq(rc, 0);
    char buf[512] = "";
    ck_assert_int_ge(pread(fd, buf, sizeof buf - 1, 0), 1);
    close(fd);
    unlink(path);
    ck_assert_msg(strstr(buf, "plaintext") && strstr(buf, "LLM_CURVE_SECRET"), "%s", buf);
}
END_TEST

START_TEST(test_errcodes)
{
    /* every code round-trips through its wire name; unknown names are no code */
    for (int c = ERR_NONE + 1; c < ERR_COUNT; c++) {
        ck_assert_ptr_nonnull(errcode_name((errcode)c));
        ck_assert_int_eq(errcode_from_name(errcode_name((errcode)c)), c);
    }
    ck_assert_int_eq(errcode_from_name("no_such_code"), ERR_NONE);
    ck_assert_int_eq(errcode_from_name(NULL), ERR_NONE);
    ck_assert_ptr_null(errcode_name(ERR_NONE));
    ck_assert_str_eq(errcode_name(ERR_FULL), "queue_full");
    ck_assert_int_eq(errcode_http_status(ERR_FULL), 429);
    ck_assert_int_eq(errcode_http_status(ERR_UNKNOWN_REQUEST), 0);
}
END_TEST

START_TEST(test_field_table)
{
    /* one name per field, no two fields share a name */
    for (int a = 0; a < MF_COUNT; a++) {
        ck_assert_ptr_nonnull(proto_field_name((proto_field_id)a));
        ck_assert_uint_gt(strlen(proto_field_name((proto_field_id)a)), 0);
        for (int b = a + 1; b < MF_COUNT; b++)
            ck_assert_str_ne(proto_field_name((proto_field_id)a), proto_field_name((proto_field_id)b));
    }
    ck_assert_str_eq(proto_field_name(MF_SESS), "sess");
    ck_assert_str_eq(proto_field_name(MF_COUNT), "?");
    char err[200];
    proto_writer w;
    /* an optional field of its type, of the wrong kind: refused, naming type and field */
    proto_begin(&w, PT_ACCEPTED, 1);
    proto_put_u64(&w, MF_NTOK, 1);
    proto_put_u64(&w, MF_SESS, 1);
    proto_put_u64(&w, MF_KEY, 5);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "ACCEPTED: field 'key' must be a string"), "%s", err);
    /* a field another type has is not this type's: ignored, whatever its kind (a newer
     * peer may add it) */
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    proto_pack_key(&pk, MF_V); msgpack_pack_uint64(&pk, PROTO_VERSION);
    proto_pack_key(&pk, MF_T); msgpack_pack_uint64(&pk, PT_PONG);
    proto_pack_key(&pk, MF_ID); msgpack_pack_uint64(&pk, 9);
    proto_pack_key(&pk, MF_TOKS); msgpack_pack_str(&pk, 1); msgpack_pack_str_body(&pk, "x", 1);
    proto_msg m;
    ck_assert_msg(proto_decode(&m, sb.data, sb.size, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(m.type, PT_PONG);
    ck_assert_int_eq(proto_ints(&m, MF_TOKS, NULL, 0), -1); /* of another kind: absent */
    proto_msg_free(&m);
    msgpack_sbuffer_destroy(&sb);
    /* errf: formats, truncates, accepts no buffer, always -1 */
    char small[8];
    ck_assert_int_eq(errf(small, sizeof small, "%s %d", "abcdef", 12345), -1);
    ck_assert_str_eq(small, "abcdef ");
    ck_assert_int_eq(errf(NULL, 0, "x"), -1);
}
END_TEST

START_TEST(test_typed_messages)
{
    /* a typed message round-trips: required fields, the optional ones set, not the others */
    pm_token in = {.sess = 7, .step = 3, .tok = -2, .epoch = 99, .mu = 4.5, .has_mu = 1};
    proto_writer w;
    proto_begin(&w, PT_TOKEN, 11);
    pm_token_put(&w, &in);
    proto_msg m;
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    pm_token out;
    pm_token_get(&m, &out);
    ck_assert(out.id == 11 && out.sess == 7 && out.step == 3 && out.tok == -2 && out.epoch == 99);
    ck_assert(out.has_mu && out.mu == 4.5 && !out.has_logprob && !out.has_top && !out.top);
    ck_assert_ptr_null(proto_field(&m, MF_LOGPROB)); /* not written */
    proto_msg_free(&m);
    proto_writer_free(&w);
    /* strings are views; a zeroed string is written as "" */
    pm_error e = {.code = proto_sv_of("queue_full"), .has_code = 1};
    proto_begin(&w, PT_ERROR, 1);
    pm_error_put(&w, &e);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    pm_error eo;
    pm_error_get(&m, &eo);
    ck_assert(eo.msg.n == 0 && eo.has_code && eo.code.n == 10 && !memcmp(eo.code.p, "queue_full", 10));
    ck_assert(!eo.has_sess && !eo.has_retry_ms);
    proto_msg_free(&m);
    proto_writer_free(&w);
    /* rows: packed from C arrays, with one more entry packed by the caller, read back */
    int32_t hist[3] = {5, -1, 9};
    pm_sample_row r = {.sess = 1, .step = 2, .slot = 3, .sp = {"ab", 2}, .hist = {hist, 3, NULL}};
    pm_sample sm = {.shm = proto_sv_of("/llm-logits-0-1"), .nv = 32};
    proto_begin(&w, PT_SAMPLE, 5);
    pm_sample_put(&w, &sm); /* rows unset: not written */
    proto_put_array_begin(&w, MF_ROWS, 1);
    ck_assert_int_eq(pm_sample_row_pack(&w.pk, &r, 1), 0);
    proto_pack_key(&w.pk, MF_MU);
    msgpack_pack_double(&w.pk, 0.5);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    pm_sample so;
    pm_sample_get(&m, &so);
    ck_assert(so.nv == 32 && so.shm.n == 15 && !so.has_eos && so.rows && so.rows->via.array.size == 1);
    pm_sample_row ro;
    pm_sample_row_get(&m, &so.rows->via.array.ptr[0], &ro);
    int32_t back[3];
    ck_assert(ro.sess == 1 && ro.step == 2 && ro.slot == 3 && ro.sp.n == 2 && ro.hist.n == 3);
    ck_assert(ro.has_mu && ro.mu == 0.5);
    ck_assert_uint_eq(proto_ints_copy(&ro.hist, back, 3), 3);
    ck_assert(back[0] == 5 && back[1] == -1 && back[2] == 9);
    proto_msg_free(&m);
    proto_writer_free(&w);
    /* the table is what proto_decode checks: a type's optional field, another type's not */
    ck_assert(proto_type_has(PT_TOKEN, MF_MU) && proto_type_has(PT_TOKEN, MF_SESS));
    ck_assert(!proto_type_has(PT_TOKEN, MF_PROMPT) && !proto_type_has(PT_PONG, MF_SESS));
}
END_TEST

START_TEST(test_kv_counts)
{
    /* the KV pools' counts: an array into a heartbeat, over the wire, into another array
     * through a status reply, every count in its place; absent without a pool */
    uint64_t in[PROTO_KV_COUNTS], mid[PROTO_KV_COUNTS], out[PROTO_KV_COUNTS];
    for (int k = 0; k < PROTO_KV_COUNTS; k++) in[k] = 1000 + 7 * (uint64_t)k;
    ck_assert(PKV_KVB == 0 && PKV_KVRC < PKV_KVPT && PKV_KVDEF == PROTO_KV_COUNTS - 1);
    pm_worker_hb hb = {.pid = 1, .host = proto_sv_of("h"), .seg = proto_sv_of("/llm-0-1"), .wid = 2};
    PROTO_KV_PUT(hb, in, 1);
    ck_assert(hb.has_kvrb && hb.kvrb == in[PKV_KVRB] && hb.kvdef == in[PKV_KVDEF]);
    proto_writer w;
    proto_begin(&w, PT_WORKER_HB, 1);
    pm_worker_hb_put(&w, &hb);
    proto_msg m;
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    pm_worker_hb back;
    pm_worker_hb_get(&m, &back);
    ck_assert(back.has_kvb && back.has_kvrc);
    PROTO_KV_GET(back, mid);
    ck_assert_mem_eq(mid, in, sizeof in);
    ck_assert_uint_eq(proto_u64(&m, MF_KVRU, 0), in[PKV_KVRU]);
    proto_msg_free(&m);
    proto_writer_free(&w);
    pm_status_reply st = {.uptime = 1};
    PROTO_KV_PUT(st, mid, 1);
    PROTO_KV_GET(st, out);
    ck_assert_mem_eq(out, in, sizeof in);
    pm_worker_hb none = {.pid = 1, .host = proto_sv_of("h"), .seg = proto_sv_of("/llm-0-1")};
    PROTO_KV_PUT(none, in, 0);
    proto_begin(&w, PT_WORKER_HB, 1);
    pm_worker_hb_put(&w, &none);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_null(proto_field(&m, MF_KVB));
    ck_assert_ptr_null(proto_field(&m, MF_KVRB));
    proto_msg_free(&m);
    proto_writer_free(&w);
}
END_TEST

START_TEST(test_sessrec)
{
    /* RUN and REPORT carry one session record: what is written is what is read */
    int32_t toks[5] = {1, 2, 3, 4, 5};
    uint8_t sp[3] = {7, 8, 9}, fb[2] = {0xc3, 0xc2};
    proto_sessrec in = {.sess = 42, .toks = toks, .n_toks = 5, .step = 2, .budget = 10, .sp = sp, .sp_len = 3,
                        .epoch = 99, .fb = fb, .fb_len = 2, .n_eog = 2, .mu = 6.5, .mu_set = 1, .idle = 1};
    in.eog[0] = 2;
    in.eog[1] = 13;
    for (int type = PT_RUN; type <= PT_REPORT; type += PT_REPORT - PT_RUN) {
        proto_writer w;
        proto_begin(&w, (proto_type)type, 1);
        proto_put_sessrec(&w, &in);
        proto_msg m;
        char err[200];
        ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
        proto_sessrec out;
        proto_get_sessrec(&m, &out);
        ck_assert(out.sess == 42 && out.step == 2 && out.budget == 10 && out.epoch == 99 && out.n_toks == 5);
        ck_assert(out.sp_len == 3 && !memcmp(out.sp, sp, 3) && out.fb_len == 2 && !memcmp(out.fb, fb, 2));
        ck_assert(out.n_eog == 2 && out.eog[0] == 2 && out.eog[1] == 13 && out.mu_set && out.mu == 6.5 && out.idle);
        int32_t back[5];
        ck_assert_int_eq(proto_ints(&m, MF_TOKS, back, 5), 5);
        ck_assert(!memcmp(back, toks, sizeof toks));
        proto_msg_free(&m);
        proto_writer_free(&w);
    }
    /* optional parts absent: no mu, no eog, not idle, no fb */
    proto_sessrec bare = {.sess = 1, .toks = toks, .n_toks = 1, .sp = sp, .sp_len = 1};
    proto_writer w;
    proto_begin(&w, PT_RUN, 1);
    proto_put_sessrec(&w, &bare);
    proto_msg m;
    char err[200];
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    proto_sessrec out;
    proto_get_sessrec(&m, &out);
    ck_assert(!out.mu_set && !out.n_eog && !out.idle && !out.fb_len);
    proto_msg_free(&m);
    proto_writer_free(&w);
}
END_TEST

START_TEST(test_grammar_fields)
{
    /* structured output (protocols 4 and 5): GENERATE's grammar, the session record's grammar,
     * a SAMPLE row's grammar + gst or gtoks, a SAMPLED row's gst */
    char err[200];
    proto_writer w;
    proto_msg m;
    const char *g = "root ::= \"yes\" | \"no\"";
    pm_generate gen = {.n = 4, .prompt = proto_sv_of("q"), .has_prompt = 1, .grammar = proto_sv_of(g), .has_grammar = 1};
    proto_begin(&w, PT_GENERATE, 3);
    pm_generate_put(&w, &gen);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    pm_generate go;
    pm_generate_get(&m, &go);
    ck_assert(go.has_grammar && go.grammar.n == strlen(g) && !memcmp(go.grammar.p, g, go.grammar.n));
    proto_msg_free(&m);
    proto_writer_free(&w);
    /* a grammar that is not a string is refused by the schema */
    proto_begin(&w, PT_GENERATE, 3);
    proto_put_i64(&w, MF_N, 1);
    proto_put_bin(&w, MF_GRAMMAR, "x", 1);
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "'grammar' must be a string"));
    /* the session record: grammar round-trips, absent stays NULL */
    int32_t toks[2] = {1, 2};
    uint8_t sp[1] = {0};
    proto_sessrec in = {.sess = 5, .toks = toks, .n_toks = 2, .sp = sp, .sp_len = 1, .grammar = g,
                        .grammar_len = strlen(g)};
    for (int with = 1; with >= 0; with--) {
        if (!with) in.grammar = NULL;
        proto_begin(&w, PT_REPORT, 1);
        proto_put_sessrec(&w, &in);
        ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
        proto_sessrec out;
        proto_get_sessrec(&m, &out);
        if (with) ck_assert(out.grammar && out.grammar_len == strlen(g) && !memcmp(out.grammar, g, out.grammar_len));
        else ck_assert(!out.grammar && !out.grammar_len);
        proto_msg_free(&m);
        proto_writer_free(&w);
    }
    /* SAMPLE rows: one with state bytes, one with the tokens to replay */
    int32_t hist[1] = {4}, gen_toks[3] = {7, 8, 9};
    uint8_t gst[4] = {1, 0, 0xff, 2};
    pm_sample sm = {.shm = proto_sv_of("/llm-logits-0-1"), .nv = 32};
    pm_sample_row r1 = {.sess = 1, .step = 3, .slot = 0, .sp = {"ab", 2}, .hist = {hist, 1, NULL},
                        .grammar = proto_sv_of(g), .has_grammar = 1, .gst = {(const char *)gst, 4}, .has_gst = 1};
    pm_sample_row r2 = {.sess = 2, .step = 3, .slot = 1, .sp = {"ab", 2}, .hist = {hist, 1, NULL},
                        .grammar = proto_sv_of(g), .has_grammar = 1, .gtoks = {gen_toks, 3, NULL}, .has_gtoks = 1};
    proto_begin(&w, PT_SAMPLE, 5);
    pm_sample_put(&w, &sm);
    proto_put_array_begin(&w, MF_ROWS, 2);
    ck_assert_int_eq(pm_sample_row_pack(&w.pk, &r1, 0), 0);
    ck_assert_int_eq(pm_sample_row_pack(&w.pk, &r2, 0), 0);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    pm_sample so;
    pm_sample_get(&m, &so);
    pm_sample_row a, b;
    pm_sample_row_get(&m, &so.rows->via.array.ptr[0], &a);
    pm_sample_row_get(&m, &so.rows->via.array.ptr[1], &b);
    ck_assert(a.has_grammar && a.grammar.n == strlen(g) && a.has_gst && a.gst.n == 4 && !memcmp(a.gst.p, gst, 4));
    ck_assert(!a.has_gtoks && b.has_gtoks && !b.has_gst && b.gtoks.n == 3);
    int32_t back[3];
    ck_assert_uint_eq(proto_ints_copy(&b.gtoks, back, 3), 3);
    ck_assert(back[0] == 7 && back[2] == 9);
    proto_msg_free(&m);
    proto_writer_free(&w);
    /* a row whose gst is not binary: the batch is refused */
    proto_begin(&w, PT_SAMPLE, 5);
    pm_sample_put(&w, &sm);
    proto_put_array_begin(&w, MF_ROWS, 1);
    ck_assert_int_eq(pm_sample_row_pack(&w.pk, &(pm_sample_row){.sess = 1, .sp = {"ab", 2}, .hist = {hist, 1, NULL}}, 1), 0);
    proto_pack_key(&w.pk, MF_GST);
    proto_pack_str(&w.pk, "state");
    ck_assert_int_eq(decode_err(&w, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "SAMPLE: field 'rows' must be"));
    /* SAMPLED rows return the advanced state */
    pm_sampled_row sr = {.sess = 1, .step = 3, .tok = 12, .has_tok = 1, .gst = {(const char *)gst, 4}, .has_gst = 1};
    proto_begin(&w, PT_SAMPLED, 5);
    proto_put_array_begin(&w, MF_ROWS, 1);
    ck_assert_int_eq(pm_sampled_row_pack(&w.pk, &sr, 0), 0);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    pm_sampled sd;
    pm_sampled_get(&m, &sd);
    pm_sampled_row so2;
    pm_sampled_row_get(&m, &sd.rows->via.array.ptr[0], &so2);
    ck_assert(so2.has_tok && so2.tok == 12 && so2.has_gst && so2.gst.n == 4 && !memcmp(so2.gst.p, gst, 4));
    proto_msg_free(&m);
    proto_writer_free(&w);
    /* protocol 5: a row may carry the grammar's hash alone; samplerd answers without a token,
     * asking for the text (code) or ending the generation (end) */
    pm_sample_row r3 = {.sess = 3, .step = 4, .slot = 2, .sp = {"ab", 2}, .hist = {hist, 1, NULL},
                        .ghash = 0x0123456789abcdefull, .has_ghash = 1};
    pm_sampled_row ask = {.sess = 3, .step = 4, .code = proto_sv_of("grammar_unknown"), .has_code = 1};
    pm_sampled_row fin = {.sess = 4, .step = 9, .end = proto_sv_of("grammar"), .has_end = 1};
    proto_begin(&w, PT_SAMPLE, 6);
    pm_sample_put(&w, &sm);
    proto_put_array_begin(&w, MF_ROWS, 1);
    ck_assert_int_eq(pm_sample_row_pack(&w.pk, &r3, 0), 0);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    pm_sample_get(&m, &so);
    pm_sample_row_get(&m, &so.rows->via.array.ptr[0], &a);
    ck_assert(a.has_ghash && a.ghash == 0x0123456789abcdefull && !a.has_grammar);
    proto_msg_free(&m);
    proto_writer_free(&w);
    proto_begin(&w, PT_SAMPLED, 6);
    proto_put_array_begin(&w, MF_ROWS, 2);
    ck_assert_int_eq(pm_sampled_row_pack(&w.pk, &ask, 0), 0);
    ck_assert_int_eq(pm_sampled_row_pack(&w.pk, &fin, 0), 0);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    pm_sampled_get(&m, &sd);
    pm_sampled_row_get(&m, &sd.rows->via.array.ptr[0], &so2);
    char name[32];
    ck_assert(!so2.has_tok && so2.has_code && !so2.has_end &&
              errcode_from_name(proto_sv_copy(so2.code, name, sizeof name)) == ERR_GRAMMAR_UNKNOWN);
    pm_sampled_row_get(&m, &sd.rows->via.array.ptr[1], &so2);
    ck_assert(!so2.has_tok && so2.has_end && so2.end.n == 7 && !memcmp(so2.end.p, "grammar", 7));
    proto_msg_free(&m);
    proto_writer_free(&w);
    ck_assert(proto_type_has(PT_ERROR, MF_END) && !proto_type_has(PT_DONE, MF_END));
    ck_assert(proto_type_has(PT_GENERATE, MF_GRAMMAR) && proto_type_has(PT_RUN, MF_GRAMMAR));
    ck_assert(proto_type_has(PT_REPORT, MF_GRAMMAR) && !proto_type_has(PT_TOKEN, MF_GRAMMAR));
    ck_assert_int_eq(PROTO_VERSION, 6);
}
END_TEST

/* GENERATE's tools and tcalls (protocol 6): arrays of strings, optional, GENERATE only. */
START_TEST(test_tools_fields)
{
    proto_writer w;
    proto_msg m;
    char err[200];
    proto_begin(&w, PT_GENERATE, 9);
    proto_put_i64(&w, MF_N, 4);
    proto_put_array_begin(&w, MF_TOOLS, 1);
    proto_pack_str(&w.pk, "{\"type\":\"function\"}");
    proto_put_array_begin(&w, MF_TCALLS, 4);
    const char *tc[4] = {"1", "call_1", "f", "{}"};
    for (int i = 0; i < 4; i++) proto_pack_str(&w.pk, tc[i]);
    ck_assert_msg(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err) == 0, "%s", err);
    pm_generate g;
    pm_generate_get(&m, &g);
    ck_assert(g.has_tools && g.tools->via.array.size == 1 && g.has_tcalls && g.tcalls->via.array.size == 4);
    ck_assert(g.tcalls->via.array.ptr[1].via.str.size == 6);
    proto_msg_free(&m);
    proto_writer_free(&w);
    /* not strings: refused */
    proto_begin(&w, PT_GENERATE, 9);
    proto_put_i64(&w, MF_N, 4);
    proto_put_array_begin(&w, MF_TCALLS, 1);
    msgpack_pack_int(&w.pk, 3);
    ck_assert_int_eq(proto_decode(&m, proto_data(&w), proto_size(&w), err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "tcalls"));
    proto_writer_free(&w);
    ck_assert(proto_type_has(PT_GENERATE, MF_TOOLS) && !proto_type_has(PT_RUN, MF_TOOLS));
}
END_TEST

Suite *proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *tc = tcase_create("wire");
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_errcodes);
    tcase_add_test(tc, test_sessrec);
    tcase_add_test(tc, test_kv_counts);
    tcase_add_test(tc, test_grammar_fields);
    tcase_add_test(tc, test_tools_fields);
    tcase_add_test(tc, test_field_table);
    tcase_add_test(tc, test_typed_messages);
    tcase_add_test(tc, test_empty_strings);
    tcase_add_test(tc, test_schema_errors);
    tcase_add_test(tc, test_logprob_fields);
    tcase_add_test(tc, test_batch_rows);
    tcase_add_test(tc, test_params_wire);
    tcase_add_test(tc, test_truncated_and_trailing);
    tcase_add_test(tc, test_hostile_headers);
    tcase_add_test(tc, test_random_bytes);
    suite_add_tcase(s, tc);
    TCase *tn = tcase_create("net");
    tcase_set_timeout(tn, 20);
    tcase_add_test(tn, test_sockets_and_max_size);
    tcase_add_test(tn, test_logits_ring);
    tcase_add_test(tn, test_logits_ring_foreign);
    tcase_add_test(tn, test_zap_lists);
    tcase_add_test(tn, test_plaintext_warning);
    suite_add_tcase(s, tn);
    return s;
}
