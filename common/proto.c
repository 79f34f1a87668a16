/* proto.c - msgpack encoding, validation and field access for proto.h. */
#include "proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "errcode.h"

/* The names and kinds of proto_fields.h, indexed by proto_field_id. */
static const struct {
    const char *name;
    proto_kind  kind;
} fields[MF_COUNT] = {
#define PROTO_FIELD_ROW(id, nm, k) [MF_##id] = {nm, PK_##k},
    PROTO_FIELDS(PROTO_FIELD_ROW)
#undef PROTO_FIELD_ROW
};

const char *proto_field_name(proto_field_id f)
{
    return (unsigned)f < MF_COUNT ? fields[f].name : "?";
}

/* A field of a message type or a row: its id and, where the type checks it as more
 * than the field's own kind (the rows of a batch), that kind. */
typedef struct {
    proto_field_id f;
    int            own;  /* kind below, instead of the field's */
    proto_kind     kind;
} proto_field_spec;

#define MAXF 32
typedef struct {
    const char      *name;
    proto_field_spec req[MAXF]; /* required fields */
    proto_field_spec opt[MAXF]; /* optional fields */
    int              n_req, n_opt;
} proto_type_spec;

/* The rows of proto_schema, from the table of proto_msgs.h. */
#define SPEC_F(id, m) {MF_##id, 0, PK_ANY},
#define SPEC_K(id, m, k) {MF_##id, 1, PK_##k},
#define SPEC_NONE(...)
#define SPEC_ONE(...) +1
#define SPEC(T)                                                                          \
    {.name = #T, .req = {PM_##T(SPEC_F, SPEC_NONE, SPEC_K)}, .opt = {PM_##T(SPEC_NONE, SPEC_F, SPEC_NONE)}, \
     .n_req = 0 PM_##T(SPEC_ONE, SPEC_NONE, SPEC_ONE), .n_opt = 0 PM_##T(SPEC_NONE, SPEC_ONE, SPEC_NONE)}
#define SPEC_ROW(T, t) [PT_##T] = SPEC(T),
static const proto_type_spec proto_schema[PT_TYPE_COUNT] = {
    PROTO_MSGS(SPEC_ROW)
    [PT_RUN] = SPEC(RUN),
    [PT_REPORT] = SPEC(REPORT),
};
#undef SPEC_ROW
static const proto_type_spec sample_row = SPEC(SAMPLE_ROW), sampled_row = SPEC(SAMPLED_ROW);

static proto_kind spec_kind(const proto_field_spec *s)
{
    return s->own ? s->kind : fields[s->f].kind;
}

const char *proto_type_name(int type)
{
    return type >= 0 && type < PT_TYPE_COUNT ? proto_schema[type].name : "?";
}

/* ---- well-formedness walk (no allocation) ---- */

static uint64_t rd_be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

/* Skips one value at *pos; -1 if malformed. */
static int walk(const uint8_t *d, size_t len, size_t *pos, int depth)
{
    if (*pos >= len || depth < 0) return -1;
    uint8_t c = d[(*pos)++];
    size_t left = len - *pos;
    uint64_t n = 0, skip = 0;
    int hdr = 0, is_cont = 0, pairs = 0;
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) return 0;
    if ((c & 0xf0) == 0x80) { n = c & 0x0f; is_cont = 1; pairs = 1; }
    else if ((c & 0xf0) == 0x90) { n = c & 0x0f; is_cont = 1; }
    else if ((c & 0xe0) == 0xa0) skip = c & 0x1f;
    else switch (c) {
    case 0xc4: case 0xd9: hdr = 1; break;
    case 0xc5: case 0xda: hdr = 2; break;
    case 0xc6: case 0xdb: hdr = 4; break;
    case 0xc7: case 0xc8: case 0xc9:
        hdr = c == 0xc7 ? 1 : c == 0xc8 ? 2 : 4;
        if (left < (size_t)hdr + 1) return -1;
        skip = rd_be(d + *pos, hdr) + 1;
        *pos += hdr;
        hdr = 0;
        break;
    case 0xca: skip = 4; break;
    case 0xcb: skip = 8; break;
    case 0xcc: case 0xd0: skip = 1; break;
    case 0xcd: case 0xd1: skip = 2; break;
    case 0xce: case 0xd2: skip = 4; break;
    case 0xcf: case 0xd3: skip = 8; break;
    case 0xd4: skip = 2; break;
    case 0xd5: skip = 3; break;
    case 0xd6: skip = 5; break;
    case 0xd7: skip = 9; break;
    case 0xd8: skip = 17; break;
    case 0xdc: case 0xde: if (left < 2) return -1; n = rd_be(d + *pos, 2); *pos += 2;
        is_cont = 1; pairs = c == 0xde; break;
    case 0xdd: case 0xdf: if (left < 4) return -1; n = rd_be(d + *pos, 4); *pos += 4;
        is_cont = 1; pairs = c == 0xdf; break;
    default: return -1; /* 0xc1 */
    }
    if (hdr) {
        if (left < (size_t)hdr) return -1;
        skip = rd_be(d + *pos, hdr);
        *pos += hdr;
    }
    if (!is_cont) {
        if (skip > len - *pos) return -1;
        *pos += skip;
        return 0;
    }
    if (pairs) n *= 2;
    if (n > len - *pos) return -1; /* each element takes at least one byte */
    for (uint64_t i = 0; i < n; i++)
        if (walk(d, len, pos, depth - 1) != 0) return -1;
    return 0;
}

int proto_wellformed(const void *data, size_t len, int max_depth)
{
    size_t pos = 0;
    if (!data || walk(data, len, &pos, max_depth) != 0) return -1;
    return pos == len ? 0 : -1;
}

/* ---- decoding ---- */

/* The value of field f in map, NULL if absent. */
static const msgpack_object *map_get(const msgpack_object_map *map, proto_field_id f)
{
    const char *key = fields[f].name;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < map->size; i++) {
        const msgpack_object *k = &map->ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl && memcmp(k->via.str.ptr, key, kl) == 0)
            return &map->ptr[i].val;
    }
    return NULL;
}

/* msgpack-c leaves the pointer of a zero-length str/bin NULL when nothing of variable
 * length preceded it (a message whose first key is ""): every reader would then pass
 * NULL to memcpy/memcmp/strndup with length 0, which is undefined. Point them at "". */
static void fix_empty(msgpack_object *o, int depth)
{
    static const char empty[1] = "";
    if (depth > 16) return; /* proto_wellformed bounds nesting far below this */
    switch (o->type) {
    case MSGPACK_OBJECT_STR: if (!o->via.str.ptr) o->via.str.ptr = empty; break;
    case MSGPACK_OBJECT_BIN: if (!o->via.bin.ptr) o->via.bin.ptr = empty; break;
    case MSGPACK_OBJECT_ARRAY:
        for (uint32_t i = 0; i < o->via.array.size; i++) fix_empty(&o->via.array.ptr[i], depth + 1);
        break;
    case MSGPACK_OBJECT_MAP:
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            fix_empty(&o->via.map.ptr[i].key, depth + 1);
            fix_empty(&o->via.map.ptr[i].val, depth + 1);
        }
        break;
    default: break;
    }
}

static int is_int(const msgpack_object *o)
{
    return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER || o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
}

static int is_int32(const msgpack_object *e)
{
    return (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER && e->via.u64 <= INT32_MAX) ||
           (e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && e->via.i64 >= INT32_MIN);
}

static int is_num(const msgpack_object *o)
{
    return is_int(o) || o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64;
}

/* [[id, logprob], ...] */
static int tops_ok(const msgpack_object *o)
{
    if (o->type != MSGPACK_OBJECT_ARRAY) return 0;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_ARRAY || e->via.array.size != 2 || !is_int32(&e->via.array.ptr[0]) ||
            !is_num(&e->via.array.ptr[1]))
            return 0;
    }
    return 1;
}

/* [{id, logprob, top?, text?}, ...]; other keys of an entry are ignored. */
static int probs_ok(const msgpack_object *o)
{
    if (o->type != MSGPACK_OBJECT_ARRAY) return 0;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_MAP) return 0;
        const msgpack_object *id = map_get(&e->via.map, MF_ID),
                             *lp = map_get(&e->via.map, MF_LOGPROB),
                             *top = map_get(&e->via.map, MF_TOP),
                             *text = map_get(&e->via.map, MF_TEXT);
        if (!id || !is_int32(id) || !lp || !is_num(lp) || (top && !tops_ok(top)) ||
            (text && text->type != MSGPACK_OBJECT_STR))
            return 0;
    }
    return 1;
}

static int kind_ok(const msgpack_object *o, proto_kind k);

/* 0 when map has every required field of spec with its kind and each optional one it
 * has with its kind (other keys are ignored); -1 with the first bad field in *bad and
 * whether it was present in *present. */
static int spec_ok(const msgpack_object_map *map, const proto_type_spec *spec, const proto_field_spec **bad,
                   int *present)
{
    for (int i = 0; i < spec->n_req; i++) {
        const msgpack_object *f = map_get(map, spec->req[i].f);
        if (!f || !kind_ok(f, spec_kind(&spec->req[i]))) {
            *bad = &spec->req[i];
            *present = f != NULL;
            return -1;
        }
    }
    for (int i = 0; i < spec->n_opt; i++) {
        const msgpack_object *f = map_get(map, spec->opt[i].f);
        if (f && !kind_ok(f, spec_kind(&spec->opt[i]))) {
            *bad = &spec->opt[i];
            *present = 1;
            return -1;
        }
    }
    return 0;
}

/* An array of maps, each a valid row of spec. */
static int rows_ok(const msgpack_object *o, const proto_type_spec *spec)
{
    if (o->type != MSGPACK_OBJECT_ARRAY) return 0;
    for (uint32_t i = 0; i < o->via.array.size; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        const proto_field_spec *bad;
        int present;
        if (e->type != MSGPACK_OBJECT_MAP || spec_ok(&e->via.map, spec, &bad, &present) != 0) return 0;
    }
    return 1;
}

static int kind_ok(const msgpack_object *o, proto_kind k)
{
    switch (k) {
    case PK_U64: return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
    case PK_I64: return is_int(o) && (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER || o->via.u64 <= INT64_MAX);
    case PK_F64: return is_num(o);
    case PK_STR: return o->type == MSGPACK_OBJECT_STR;
    case PK_BIN: return o->type == MSGPACK_OBJECT_BIN;
    case PK_BOOL: return o->type == MSGPACK_OBJECT_BOOLEAN;
    case PK_ANY: return 1;
    case PK_TOPS: return tops_ok(o);
    case PK_PROBS: return probs_ok(o);
    case PK_SAMPLE_ROWS: return rows_ok(o, &sample_row);
    case PK_SAMPLED_ROWS: return rows_ok(o, &sampled_row);
    case PK_INTS:
        if (o->type != MSGPACK_OBJECT_ARRAY) return 0;
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            const msgpack_object *e = &o->via.array.ptr[i];
            if (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER && e->via.u64 <= INT32_MAX) continue;
            if (e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && e->via.i64 >= INT32_MIN) continue;
            return 0;
        }
        return 1;
    case PK_STRS:
        if (o->type != MSGPACK_OBJECT_ARRAY) return 0;
        for (uint32_t i = 0; i < o->via.array.size; i++)
            if (o->via.array.ptr[i].type != MSGPACK_OBJECT_STR) return 0;
        return 1;
    case PK_PARAMS:
        if (o->type != MSGPACK_OBJECT_MAP) return 0;
        for (uint32_t i = 0; i < o->via.map.size; i++)
            if (o->via.map.ptr[i].key.type != MSGPACK_OBJECT_STR || o->via.map.ptr[i].val.type != MSGPACK_OBJECT_STR)
                return 0;
        return 1;
    default: return 0;
    }
}

static const char *const kind_names[PK_KIND_COUNT] = {
    "unsigned integer", "integer", "number", "string", "binary", "array of int32",
    "array of strings", "map of strings", "boolean", "value", "array of [id, logprob] pairs",
    "array of {id, logprob, top, text} maps", "array of sample rows {sess, step, slot, sp, hist, mu?}",
    "array of sampled rows {sess, step, tok | err, mu?, logprob?, top?}"};

static int fail(char *err, size_t cap, const char *fmt, const char *a, const char *b)
{
    return errf(err, cap, fmt, a, b);
}

int proto_decode(proto_msg *m, const void *data, size_t len, char *err, size_t errcap)
{
    memset(m, 0, sizeof *m);
    char num[32];
    if (len > PROTO_MAX_MSG) return fail(err, errcap, "message of %s bytes exceeds the maximum%s", "many", "");
    if (proto_wellformed(data, len, 8) != 0)
        return fail(err, errcap, "not one well-formed msgpack value%s%s", "", "");
    msgpack_unpacked_init(&m->up);
    m->bytes = malloc(len ? len : 1);
    if (!m->bytes) {
        proto_msg_free(m);
        return fail(err, errcap, "out of memory decoding a message%s%s", "", "");
    }
    memcpy(m->bytes, data, len);
    m->len = len;
    size_t off = 0;
    if (msgpack_unpack_next(&m->up, m->bytes, len, &off) != MSGPACK_UNPACK_SUCCESS) {
        proto_msg_free(m);
        return fail(err, errcap, "msgpack could not unpack the message%s%s", "", "");
    }
    fix_empty(&m->up.data, 0);
    const msgpack_object *root = &m->up.data;
    if (root->type != MSGPACK_OBJECT_MAP) {
        proto_msg_free(m);
        return fail(err, errcap, "message is not a msgpack map%s%s", "", "");
    }
    m->map = &root->via.map;
    const msgpack_object *v = map_get(m->map, MF_V), *t = map_get(m->map, MF_T),
                         *id = map_get(m->map, MF_ID);
    if (!v || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        proto_msg_free(m);
        return fail(err, errcap, "missing protocol version field 'v'%s%s", "", "");
    }
    if (v->via.u64 != PROTO_VERSION) {
        snprintf(num, sizeof num, "%llu", (unsigned long long)v->via.u64);
        proto_msg_free(m);
        return fail(err, errcap, "protocol version %s, this daemon speaks %s", num, PROTO_VERSION_STR);
    }
    if (!id || id->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        proto_msg_free(m);
        return fail(err, errcap, "missing request id field 'id'%s%s", "", "");
    }
    m->id = id->via.u64;
    if (!t || t->type != MSGPACK_OBJECT_POSITIVE_INTEGER || t->via.u64 >= PT_TYPE_COUNT) {
        proto_msg_free(m);
        return fail(err, errcap, "missing or unknown message type field 't'%s%s", "", "");
    }
    m->type = (proto_type)t->via.u64;
    const proto_type_spec *spec = &proto_schema[m->type];
    const proto_field_spec *bad;
    int present;
    if (spec_ok(m->map, spec, &bad, &present) != 0) {
        char what[96];
        snprintf(what, sizeof what, "%s: field '%s'", spec->name, fields[bad->f].name);
        proto_msg_free(m);
        return fail(err, errcap, present ? "%s must be a %s" : "%s is missing (a %s)", what,
                    kind_names[spec_kind(bad)]);
    }
    return 0;
}

void proto_msg_free(proto_msg *m)
{
    if (!m) return;
    if (m->up.zone) msgpack_unpacked_destroy(&m->up);
    free(m->bytes);
    memset(m, 0, sizeof *m);
}

proto_msg proto_view(const proto_msg *m, const msgpack_object *map)
{
    proto_msg v;
    memset(&v, 0, sizeof v);
    v.type = m->type;
    v.id = m->id;
    v.map = map && map->type == MSGPACK_OBJECT_MAP ? &map->via.map : NULL;
    return v;
}

void proto_msg_move(proto_msg *dst, proto_msg *src)
{
    *dst = *src;
    if (src->map == &src->up.data.via.map) dst->map = &dst->up.data.via.map;
    memset(src, 0, sizeof *src);
}

const msgpack_object *proto_field(const proto_msg *m, proto_field_id f)
{
    return m->map && (unsigned)f < MF_COUNT ? map_get(m->map, f) : NULL;
}

uint64_t proto_u64(const proto_msg *m, proto_field_id f, uint64_t dflt)
{
    const msgpack_object *o = proto_field(m, f);
    return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : dflt;
}

int64_t proto_i64(const proto_msg *m, proto_field_id f, int64_t dflt)
{
    const msgpack_object *o = proto_field(m, f);
    return o && kind_ok(o, PK_I64) ? (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? o->via.i64 : (int64_t)o->via.u64)
                                   : dflt;
}

double proto_f64(const proto_msg *m, proto_field_id f, double dflt)
{
    const msgpack_object *o = proto_field(m, f);
    if (!o) return dflt;
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64) return o->via.f64;
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) return (double)o->via.u64;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return (double)o->via.i64;
    return dflt;
}

int proto_bool(const proto_msg *m, proto_field_id f, int dflt)
{
    const msgpack_object *o = proto_field(m, f);
    return o && o->type == MSGPACK_OBJECT_BOOLEAN ? o->via.boolean : dflt;
}

const char *proto_str(const proto_msg *m, proto_field_id f, size_t *len)
{
    const msgpack_object *o = proto_field(m, f);
    if (!o || o->type != MSGPACK_OBJECT_STR) return NULL;
    if (len) *len = o->via.str.size;
    return o->via.str.ptr;
}

int proto_strcpy(const proto_msg *m, proto_field_id f, char *out, size_t cap)
{
    size_t n;
    const char *s = proto_str(m, f, &n);
    if (!s) { if (cap) out[0] = 0; return -1; }
    if (n >= cap) n = cap - 1;
    memcpy(out, s, n);
    out[n] = 0;
    return 0;
}

long proto_ints(const proto_msg *m, proto_field_id f, int32_t *out, size_t cap)
{
    const msgpack_object *o = proto_field(m, f);
    if (!o || !kind_ok(o, PK_INTS)) return -1;
    for (uint32_t i = 0; i < o->via.array.size && i < cap; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        out[i] = (int32_t)(e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? e->via.i64 : (int64_t)e->via.u64);
    }
    return (long)o->via.array.size;
}

/* ---- encoding ---- */

static int spec_has(const proto_type_spec *spec, proto_field_id f)
{
    for (int i = 0; i < spec->n_req; i++)
        if (spec->req[i].f == f) return 1;
    for (int i = 0; i < spec->n_opt; i++)
        if (spec->opt[i].f == f) return 1;
    return 0;
}

int proto_pack_key(msgpack_packer *pk, proto_field_id f)
{
    LLM_ASSERT((unsigned)f < MF_COUNT);
    size_t n = strlen(fields[f].name);
    return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, fields[f].name, n);
}

int proto_type_has(proto_type t, proto_field_id f)
{
    return (unsigned)t < PT_TYPE_COUNT && spec_has(&proto_schema[t], f);
}

/* A top-level key: one the message's type lists (the header's three are proto_begin's). */
static void put_key(proto_writer *w, proto_field_id f)
{
    LLM_ASSERT(f == MF_V || f == MF_T || f == MF_ID || spec_has(&proto_schema[w->type], f));
    proto_pack_key(&w->pk, f);
    w->n_keys++;
}

void proto_begin(proto_writer *w, proto_type type, uint64_t id)
{
    LLM_ASSERT(type < PT_TYPE_COUNT);
    msgpack_sbuffer_init(&w->buf);
    msgpack_packer_init(&w->pk, &w->buf, msgpack_sbuffer_write);
    w->n_keys = 0;
    w->open = 0;
    w->type = type;
    /* map32 header with the count patched by proto_data: a valid, if not minimal, encoding */
    static const char hdr[5] = {(char)0xdf, 0, 0, 0, 0};
    msgpack_sbuffer_write(&w->buf, hdr, 5);
    proto_put_u64(w, MF_V, PROTO_VERSION);
    proto_put_u64(w, MF_T, (uint64_t)type);
    proto_put_u64(w, MF_ID, id);
}

void proto_put_u64(proto_writer *w, proto_field_id f, uint64_t v) { put_key(w, f); msgpack_pack_uint64(&w->pk, v); }
void proto_put_i64(proto_writer *w, proto_field_id f, int64_t v) { put_key(w, f); msgpack_pack_int64(&w->pk, v); }
void proto_put_f64(proto_writer *w, proto_field_id f, double v) { put_key(w, f); msgpack_pack_double(&w->pk, v); }

void proto_put_bool(proto_writer *w, proto_field_id f, int v)
{
    put_key(w, f);
    if (v) msgpack_pack_true(&w->pk);
    else msgpack_pack_false(&w->pk);
}

void proto_pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

void proto_put_str(proto_writer *w, proto_field_id f, const char *s) { proto_put_strn(w, f, s, strlen(s)); }

void proto_put_strn(proto_writer *w, proto_field_id f, const char *s, size_t n)
{
    put_key(w, f);
    msgpack_pack_str(&w->pk, n);
    msgpack_pack_str_body(&w->pk, s, n);
}

void proto_put_bin(proto_writer *w, proto_field_id f, const void *p, size_t n)
{
    put_key(w, f);
    msgpack_pack_bin(&w->pk, n);
    msgpack_pack_bin_body(&w->pk, p, n);
}

void proto_put_ints(proto_writer *w, proto_field_id f, const int32_t *v, size_t n)
{
    put_key(w, f);
    msgpack_pack_array(&w->pk, n);
    for (size_t i = 0; i < n; i++) msgpack_pack_int32(&w->pk, v[i]);
}

void proto_put_obj(proto_writer *w, proto_field_id f, const msgpack_object *o)
{
    put_key(w, f);
    msgpack_pack_object(&w->pk, *o);
}

void proto_put_raw(proto_writer *w, proto_field_id f, const void *packed, size_t n)
{
    put_key(w, f);
    msgpack_sbuffer_write(&w->buf, packed, n);
}

void proto_put_map_begin(proto_writer *w, proto_field_id f, uint32_t n) { put_key(w, f); msgpack_pack_map(&w->pk, n); }
void proto_put_array_begin(proto_writer *w, proto_field_id f, uint32_t n) { put_key(w, f); msgpack_pack_array(&w->pk, n); }

const void *proto_data(proto_writer *w)
{
    uint8_t *p = (uint8_t *)w->buf.data;
    p[1] = (uint8_t)(w->n_keys >> 24);
    p[2] = (uint8_t)(w->n_keys >> 16);
    p[3] = (uint8_t)(w->n_keys >> 8);
    p[4] = (uint8_t)w->n_keys;
    return p;
}

size_t proto_size(const proto_writer *w) { return w->buf.size; }

void proto_writer_free(proto_writer *w)
{
    if (!w) return;
    msgpack_sbuffer_destroy(&w->buf);
    memset(w, 0, sizeof *w);
}

void proto_put_sessrec(proto_writer *w, const proto_sessrec *s)
{
    proto_put_u64(w, MF_SESS, s->sess);
    proto_put_ints(w, MF_TOKS, s->toks, s->n_toks);
    proto_put_u64(w, MF_STEP, s->step);
    proto_put_u64(w, MF_BUDGET, s->budget);
    proto_put_bin(w, MF_SP, s->sp, s->sp_len);
    proto_put_u64(w, MF_EPOCH, s->epoch);
    if (s->fb_len) proto_put_bin(w, MF_FB, s->fb, s->fb_len);
    if (s->n_eog) proto_put_ints(w, MF_EOG, s->eog, (size_t)s->n_eog);
    if (s->mu_set) proto_put_f64(w, MF_MU, s->mu);
    if (s->idle) proto_put_bool(w, MF_IDLE, 1);
    if (s->grammar) proto_put_strn(w, MF_GRAMMAR, s->grammar, s->grammar_len);
    if (s->embed) proto_put_u64(w, MF_EMBED, (uint64_t)s->embed);
}

void proto_get_sessrec(const proto_msg *m, proto_sessrec *s)
{
    memset(s, 0, sizeof *s);
    s->sess = proto_u64(m, MF_SESS, 0);
    s->step = proto_u64(m, MF_STEP, 0);
    s->budget = proto_u64(m, MF_BUDGET, 0);
    s->epoch = proto_u64(m, MF_EPOCH, 0);
    const msgpack_object *toks = proto_field(m, MF_TOKS), *sp = proto_field(m, MF_SP), *fb = proto_field(m, MF_FB);
    s->n_toks = toks ? toks->via.array.size : 0;
    if (sp) {
        s->sp = (const uint8_t *)sp->via.bin.ptr;
        s->sp_len = sp->via.bin.size;
    }
    if (fb) {
        s->fb = (const uint8_t *)fb->via.bin.ptr;
        s->fb_len = fb->via.bin.size;
    }
    long ne = proto_ints(m, MF_EOG, s->eog, PROTO_MAX_EOG);
    s->n_eog = ne < 0 ? 0 : ne > PROTO_MAX_EOG ? PROTO_MAX_EOG : (int)ne;
    s->mu_set = proto_field(m, MF_MU) != NULL;
    s->mu = proto_f64(m, MF_MU, 0);
    s->idle = proto_bool(m, MF_IDLE, 0);
    s->grammar = proto_str(m, MF_GRAMMAR, &s->grammar_len);
    s->embed = (int)proto_u64(m, MF_EMBED, 0);
}

/* ---- typed messages ---- */

proto_sv proto_sv_of(const char *s)
{
    proto_sv v = {s ? s : "", s ? strlen(s) : 0};
    return v;
}

char *proto_sv_copy(proto_sv v, char *out, size_t cap)
{
    if (!cap) return out;
    size_t n = v.n < cap - 1 ? v.n : cap - 1;
    if (n) memcpy(out, v.p, n);
    out[n] = 0;
    return out;
}

/* Reading a field of each kind (proto_decode checked the kinds). */
static uint64_t kget_U64(const proto_msg *m, proto_field_id f) { return proto_u64(m, f, 0); }
static int64_t kget_I64(const proto_msg *m, proto_field_id f) { return proto_i64(m, f, 0); }
static double kget_F64(const proto_msg *m, proto_field_id f) { return proto_f64(m, f, 0); }
static int kget_BOOL(const proto_msg *m, proto_field_id f) { return proto_bool(m, f, 0); }

static proto_sv kget_STR(const proto_msg *m, proto_field_id f)
{
    const msgpack_object *o = proto_field(m, f);
    proto_sv v = {"", 0};
    if (o && o->type == MSGPACK_OBJECT_STR) v = (proto_sv){o->via.str.ptr, o->via.str.size};
    return v;
}

static proto_sv kget_BIN(const proto_msg *m, proto_field_id f)
{
    const msgpack_object *o = proto_field(m, f);
    proto_sv v = {"", 0};
    if (o && o->type == MSGPACK_OBJECT_BIN) v = (proto_sv){o->via.bin.ptr, o->via.bin.size};
    return v;
}

static proto_iv kget_INTS(const proto_msg *m, proto_field_id f)
{
    const msgpack_object *o = proto_field(m, f);
    proto_iv v = {NULL, 0, NULL};
    if (o && o->type == MSGPACK_OBJECT_ARRAY) v = (proto_iv){NULL, o->via.array.size, o};
    return v;
}

uint32_t proto_ints_copy(const proto_iv *a, int32_t *out, size_t cap)
{
    for (uint32_t i = 0; i < a->n && i < cap; i++) {
        if (a->v) out[i] = a->v[i];
        else {
            const msgpack_object *e = &a->obj->via.array.ptr[i];
            out[i] = (int32_t)(e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? e->via.i64 : (int64_t)e->via.u64);
        }
    }
    return a->n;
}

#define GET_OBJ(k) \
    static const msgpack_object *kget_##k(const proto_msg *m, proto_field_id f) { return proto_field(m, f); }
GET_OBJ(STRS) GET_OBJ(PARAMS) GET_OBJ(ANY) GET_OBJ(TOPS) GET_OBJ(PROBS)
#undef GET_OBJ

/* Packing the value of a field of each kind; 0 when an object field is unset (NULL):
 * nothing to write. */
#define SET_ALWAYS(k, t) static int kset_##k(const t *v) { (void)v; return 1; }
#define SET_OBJ(k) static int kset_##k(const msgpack_object *const *v) { return *v != NULL; }
SET_ALWAYS(U64, uint64_t) SET_ALWAYS(I64, int64_t) SET_ALWAYS(F64, double) SET_ALWAYS(BOOL, int) SET_ALWAYS(STR, proto_sv)
SET_ALWAYS(BIN, proto_sv)
static int kset_INTS(const proto_iv *v) { return v->v || v->obj; }
SET_OBJ(STRS) SET_OBJ(PARAMS) SET_OBJ(ANY) SET_OBJ(TOPS) SET_OBJ(PROBS)
#undef SET_ALWAYS
#undef SET_OBJ

static int kpack_U64(msgpack_packer *pk, const uint64_t *v) { return msgpack_pack_uint64(pk, *v); }
static int kpack_I64(msgpack_packer *pk, const int64_t *v) { return msgpack_pack_int64(pk, *v); }
static int kpack_F64(msgpack_packer *pk, const double *v) { return msgpack_pack_double(pk, *v); }
static int kpack_BOOL(msgpack_packer *pk, const int *v) { return *v ? msgpack_pack_true(pk) : msgpack_pack_false(pk); }

static int kpack_STR(msgpack_packer *pk, const proto_sv *v)
{
    return msgpack_pack_str(pk, v->n) | msgpack_pack_str_body(pk, v->n ? v->p : "", v->n);
}

static int kpack_BIN(msgpack_packer *pk, const proto_sv *v)
{
    return msgpack_pack_bin(pk, v->n) | msgpack_pack_bin_body(pk, v->n ? v->p : "", v->n);
}

#define PACK_OBJ(k) \
    static int kpack_##k(msgpack_packer *pk, const msgpack_object *const *v) { return msgpack_pack_object(pk, **v); }
static int kpack_INTS(msgpack_packer *pk, const proto_iv *v)
{
    if (!v->v) return msgpack_pack_object(pk, *v->obj);
    int bad = msgpack_pack_array(pk, v->n);
    for (uint32_t i = 0; i < v->n; i++) bad |= msgpack_pack_int32(pk, v->v[i]);
    return bad;
}
PACK_OBJ(STRS) PACK_OBJ(PARAMS) PACK_OBJ(ANY) PACK_OBJ(TOPS) PACK_OBJ(PROBS)
#undef PACK_OBJ

/* Per field: its reader, whether a value is set, its packer (by the field's kind). */
#define FIELD_FUNCS(id, nm, k)                                                            \
    __attribute__((unused)) static mf_ctype_##id fget_##id(const proto_msg *m) { return kget_##k(m, MF_##id); } \
    __attribute__((unused)) static int fset_##id(const mf_ctype_##id *v) { return kset_##k(v); } \
    __attribute__((unused)) static int fpack_##id(msgpack_packer *pk, const mf_ctype_##id *v) { return kpack_##k(pk, v); }
PROTO_FIELDS(FIELD_FUNCS)
#undef FIELD_FUNCS

#define GET_R(id, m) out->m = fget_##id(msg);
#define GET_O(id, m) out->has_##m = proto_field(msg, MF_##id) != NULL; out->m = fget_##id(msg);
#define GET_K(id, m, k) GET_R(id, m)
#define PUT_R(id, m) if (fset_##id(&in->m)) { put_key(w, MF_##id); fpack_##id(&w->pk, &in->m); }
#define PUT_O(id, m) if (in->has_##m) { put_key(w, MF_##id); fpack_##id(&w->pk, &in->m); }
#define PUT_K(id, m, k) PUT_R(id, m)
#define MSG_FUNCS(T, t)                                                                   \
    void pm_##t##_get(const proto_msg *msg, pm_##t *out)                                  \
    {                                                                                     \
        memset(out, 0, sizeof *out);                                                      \
        out->id = msg->id;                                                                \
        PM_##T(GET_R, GET_O, GET_K)                                                       \
    }                                                                                     \
    void pm_##t##_put(proto_writer *w, const pm_##t *in)                                  \
    {                                                                                     \
        LLM_ASSERT(w->type == PT_##T);                                                    \
        PM_##T(PUT_R, PUT_O, PUT_K)                                                       \
    }
PROTO_MSGS(MSG_FUNCS)
#undef MSG_FUNCS

#define CNT_R(id, m) + fset_##id(&in->m)
#define CNT_O(id, m) + (in->has_##m != 0)
#define CNT_K(id, m, k) CNT_R(id, m)
#define ROWPACK_R(id, m) if (fset_##id(&in->m)) bad |= proto_pack_key(pk, MF_##id) | fpack_##id(pk, &in->m);
#define ROWPACK_O(id, m) if (in->has_##m) bad |= proto_pack_key(pk, MF_##id) | fpack_##id(pk, &in->m);
#define ROWPACK_K(id, m, k) ROWPACK_R(id, m)
#define ROW_FUNCS(T, t)                                                                   \
    void pm_##t##_get(const proto_msg *m, const msgpack_object *row, pm_##t *out)         \
    {                                                                                     \
        proto_msg v = proto_view(m, row), *msg = &v;                                      \
        memset(out, 0, sizeof *out);                                                      \
        PM_##T(GET_R, GET_O, GET_K)                                                       \
    }                                                                                     \
    int pm_##t##_pack(msgpack_packer *pk, const pm_##t *in, uint32_t n_more)             \
    {                                                                                     \
        int bad = msgpack_pack_map(pk, (size_t)(n_more PM_##T(CNT_R, CNT_O, CNT_K)));     \
        PM_##T(ROWPACK_R, ROWPACK_O, ROWPACK_K)                                           \
        return bad;                                                                       \
    }
PROTO_ROWS(ROW_FUNCS)
#undef ROW_FUNCS
