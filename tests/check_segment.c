/*
 * Suite "segment": the shared-memory weight segment. Naming from the file identity,
 * create then attach (no second conversion), header and directory contents, a dead
 * loader's LOADING segment rebuilt, workers mapped read-only, the tokenizer blob,
 * two worker processes giving identical logits with the segment counted once in
 * their PSS, listing and removal, and hostile segments rejected.
 */
#include <check.h>
#include <errno.h>
#include <grp.h>
#include <stddef.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "csum.h"
#include "engine.h"
#include "gguf.h"
#include "kernels.h"
#include "segment_build.h"

static const char *shared(void)
{
    const char *s = getenv("LLM_SHARED");
    return s ? s : "../shared";
}

static void model_path(char *buf, size_t len, const char *file)
{
    snprintf(buf, len, "%s/models/%s", shared(), file);
}

/* Copies a model to a private temporary file (so tests own their segments). */
static void copy_model(const char *file, char *dst, size_t len)
{
    char src[1024];
    model_path(src, sizeof src, file);
    snprintf(dst, len, "/tmp/llm-segtest-%d-%s", (int)getpid(), file);
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
}

static void remove_seg(const char *name)
{
    char err[256];
    seg_remove(name, err, sizeof err);
}

START_TEST(test_name_identity)
{
    char path[1100], a[SEG_NAME_MAX], b[SEG_NAME_MAX], f[SEG_NAME_MAX], err[256];
    seg_ident id;
    copy_model("stories260K-f32.gguf", path, sizeof path);
    ck_assert_int_eq(seg_name_for(path, 2, a, &id, err, sizeof err), 0); /* native, the default */
    ck_assert_int_eq(seg_name_for(path, 2, b, &id, err, sizeof err), 0);
    ck_assert_str_eq(a, b);
    char prefix[32];
    int np = snprintf(prefix, sizeof prefix, "/llm-%u-", (unsigned)geteuid());
    ck_assert_int_eq(strncmp(a, prefix, (size_t)np), 0); /* the owner's uid is in the name */
    ck_assert_int_eq(strlen(a), (size_t)np + 16);
    ck_assert_int_eq(seg_name_for(path, 1, f, &id, err, sizeof err), 0);
    ck_assert_str_ne(a, f);
    ck_assert_int_eq(strncmp(a, f, strlen(a)), 0);
    ck_assert_str_eq(f + strlen(a), "-f32");
    ck_assert_int_eq(seg_name_for(path, 0, f, &id, err, sizeof err), 0); /* int8: every matrix widened */
    ck_assert_str_eq(f + strlen(a), "-q8");
    /* a changed file (new mtime and content) gets another name */
    struct timespec ts[2] = { { 0, UTIME_OMIT }, { 1000000, 0 } };
    ck_assert_int_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
    ck_assert_int_eq(seg_name_for(path, 2, b, &id, err, sizeof err), 0);
    ck_assert_str_ne(a, b);
    ck_assert_int_eq(seg_name_for("/nonexistent.gguf", 0, b, &id, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent.gguf"));
    unlink(path);
}
END_TEST

START_TEST(test_create_then_attach)
{
    char path[1100], err[512];
    copy_model("tiny-llama2-Q8_0.gguf", path, sizeof path);
    eng_open_info i1, i2;
    eng_model *m1 = eng_open(path, ENG_INT8, &i1, err, sizeof err);
    ck_assert_msg(m1 != NULL, "%s", err);
    ck_assert(i1.converted);
    eng_model *m2 = eng_open(path, ENG_INT8, &i2, err, sizeof err);
    ck_assert_msg(m2 != NULL, "%s", err);
    ck_assert(!i2.converted);
    ck_assert_str_eq(i1.name, i2.name);
    fprintf(stderr, "segment: built in %.1f ms, attached in %.2f ms\n", i1.ms, i2.ms);

    seg_map sm;
    ck_assert_int_eq(seg_attach(i1.name, &sm, NULL, err, sizeof err), 0);
    const seg_header *h = seg_hdr(&sm);
    ck_assert_uint_eq(h->magic, SEG_MAGIC);
    ck_assert_uint_eq(h->layout_version, SEG_LAYOUT_VERSION);
    ck_assert_uint_eq(h->state, SEG_STATE_READY);
    ck_assert_int_eq(h->loader_pid, getpid());
    ck_assert_uint_eq(h->src_size, 12781792);
    ck_assert_ptr_nonnull(strstr(h->src_path, "llm-segtest"));
    ck_assert_int_eq(h->config.n_layer, 4);
    ck_assert_int_eq(h->config.n_vocab, 32000);
    ck_assert_uint_eq(h->n_tensors, 38);
    const seg_tensor *q = seg_find(&sm, "blk.0.attn_q.weight"), *n = seg_find(&sm, "blk.0.attn_norm.weight");
    ck_assert_ptr_nonnull(q);
    ck_assert_ptr_nonnull(n);
    ck_assert_uint_eq(q->type, SEG_T_Q8T);
    ck_assert_uint_eq(n->type, SEG_T_F32);
    ck_assert_uint_eq(q->row_bytes, kern_q8t_tile_bytes(256)); /* a tile of 16 rows of 256 */
    ck_assert_uint_eq(q->nbytes, 256 / 16 * q->row_bytes);
    const seg_tensor *dir = (const seg_tensor *)((const char *)sm.base + h->dir_offset);
    for (uint64_t i = 0; i < h->n_tensors; i++) ck_assert_uint_eq(dir[i].offset % SEG_ALIGN, 0);
    /* a Q8_0 tensor is repacked value for value */
    gguf_ctx *g = gguf_open(path, err, sizeof err);
    const gguf_tensor *gt = gguf_find_tensor(g, "blk.0.attn_q.weight");
    float want[256], got[256];
    for (int64_t r = 0; r < 256; r += 37) {
        qt_get(QT_Q8_0)->dequant((const char *)gt->data + r * 8 * sizeof(block_q8_0), want, 256);
        kern_q8t_dequant_row(seg_data(&sm, q), 256, r, got);
        ck_assert_int_eq(memcmp(want, got, sizeof got), 0);
    }
    gguf_close(g);
    seg_unmap(&sm);

    eng_close(m2);
    eng_close(m1);
    remove_seg(i1.name);
    unlink(path);
}
END_TEST

START_TEST(test_dead_loader_rebuilt)
{
    char path[1100], name[SEG_NAME_MAX], err[512];
    seg_ident id;
    copy_model("stories260K-f32.gguf", path, sizeof path);
    ck_assert_int_eq(seg_name_for(path, 0, name, &id, err, sizeof err), 0);
    pid_t pid = fork();
    if (pid == 0) { /* a loader that dies half-way */
        seg_map sm;
        _exit(seg_create(name, 1 << 20, &sm, err, sizeof err) == 0 ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    seg_map sm;
    int32_t lp = 0;
    ck_assert_int_eq(seg_attach(name, &sm, &lp, err, sizeof err), 1);
    ck_assert_int_eq(lp, pid);
    ck_assert_ptr_null(eng_attach(name, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "LOADING"));
    eng_open_info info;
    eng_model *m = eng_open(path, ENG_INT8, &info, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert(info.converted);
    ck_assert_int_eq(seg_attach(name, &sm, NULL, err, sizeof err), 0);
    ck_assert_uint_eq(seg_hdr(&sm)->state, SEG_STATE_READY);
    seg_unmap(&sm);
    eng_close(m);
    remove_seg(name);
    unlink(path);
}
END_TEST

START_TEST(test_worker_read_only_and_blob)
{
    char path[1100], err[512];
    copy_model("stories260K-f32.gguf", path, sizeof path);
    eng_open_info info;
    eng_model *master = eng_open(path, ENG_INT8, &info, err, sizeof err);
    ck_assert_msg(master != NULL, "%s", err);
    eng_model *w = eng_attach(info.name, err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    size_t len;
    const void *blob = eng_tokenizer_blob(w, &len);
    ck_assert_uint_gt(len, 1000);
    gguf_ctx *g = gguf_parse(blob, len, err, sizeof err);
    ck_assert_msg(g != NULL, "%s", err);
    int64_t kv = gguf_find_key(g, "tokenizer.ggml.tokens");
    ck_assert_int_ge(kv, 0);
    ck_assert_uint_eq(gguf_arr_n(g, kv), 512);
    ck_assert_int_eq(gguf_n_tensors(g), 0);
    ck_assert_str_eq(gguf_get_str(g, "general.architecture", ""), "llama");
    gguf_close(g);
    /* a write through the worker's mapping faults */
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL); /* sanitizers catch it otherwise */
        *(volatile char *)blob = 0;
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "write to the segment did not fault");
    eng_close(w);
    eng_close(master);
    remove_seg(info.name);
    unlink(path);
}
END_TEST

/* Pss and Rss (kB) of the mapping of /dev/shm/<name> in process pid. */
static void seg_pss(pid_t pid, const char *name, long *pss, long *rss)
{
    char p[64], line[512];
    snprintf(p, sizeof p, "/proc/%d/smaps", (int)pid);
    FILE *f = fopen(p, "r");
    ck_assert_ptr_nonnull(f);
    bool in = false;
    *pss = *rss = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) in = strstr(line, "/dev/shm/") && strstr(line, name);
        long v;
        if (in && sscanf(line, "Pss: %ld kB", &v) == 1) *pss += v;
        if (in && sscanf(line, "Rss: %ld kB", &v) == 1) *rss += v;
    }
    fclose(f);
}

static long rollup_pss(pid_t pid)
{
    char p[64], line[256];
    snprintf(p, sizeof p, "/proc/%d/smaps_rollup", (int)pid);
    FILE *f = fopen(p, "r");
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Pss: %ld kB", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

/* A worker: attach, evaluate, send the logits, then wait until told to exit. */
static void worker_child(const char *name, int out_fd, int go_fd)
{
    char err[512];
    eng_model *m = eng_attach(name, err, sizeof err);
    if (!m) _exit(2);
    eng_set_threads(m, 1);
    int V = eng_config_of(m)->n_vocab;
    int32_t toks[5] = { 1, 15043, 3186, 29892, 338 };
    float *lg = malloc(5 * (size_t)V * sizeof(float));
    eng_session *s = eng_session_new(m, 16, ENG_KV_F16, err, sizeof err);
    if (!s || eng_prefill(m, s, toks, 5, lg, true, err, sizeof err) != 0) _exit(3);
    /* touch every page, as a long-running worker eventually does */
    const mdl_config *c = eng_config_of(m);
    (void)c;
    size_t n = 5 * (size_t)V * sizeof(float);
    if (write(out_fd, lg, n) != (ssize_t)n) _exit(4);
    char b;
    if (read(go_fd, &b, 1) < 0) _exit(5);
    _exit(0);
}

static void read_all(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        ck_assert_int_gt(r, 0);
        got += (size_t)r;
    }
}

START_TEST(test_two_workers_share_one_copy)
{
    char path[1100], err[512];
    copy_model("tiny-llama2-Q8_0.gguf", path, sizeof path);
    eng_open_info info;
    eng_model *master = eng_open(path, ENG_INT8, &info, err, sizeof err);
    ck_assert_msg(master != NULL, "%s", err);
    int V = eng_config_of(master)->n_vocab;
    eng_close(master); /* the master holds no mapping: only the workers count */
    int out[2][2], go[2][2];
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(pipe(out[i]), 0);
        ck_assert_int_eq(pipe(go[i]), 0);
        pid[i] = fork();
        if (pid[i] == 0) worker_child(info.name, out[i][1], go[i][0]);
    }
    size_t n = 5 * (size_t)V * sizeof(float);
    float *a = malloc(n), *b = malloc(n);
    read_all(out[0][0], a, n);
    read_all(out[1][0], b, n);
    ck_assert_int_eq(memcmp(a, b, n), 0);
    long pss[2], rss[2];
    for (int i = 0; i < 2; i++) seg_pss(pid[i], info.name + 1, &pss[i], &rss[i]);
    long seg_kb = (long)(info.seg_bytes / 1024);
    fprintf(stderr, "two workers on %s (%ld kB): segment Rss %ld + %ld kB, Pss %ld + %ld = %ld kB; "
            "smaps_rollup Pss %ld + %ld kB\n", info.name, seg_kb, rss[0], rss[1], pss[0], pss[1],
            pss[0] + pss[1], rollup_pss(pid[0]), rollup_pss(pid[1]));
    /* both touched (nearly) all of it, and the two shares add up to one copy */
    ck_assert_int_gt(rss[0], seg_kb * 9 / 10);
    ck_assert_int_gt(rss[1], seg_kb * 9 / 10);
    ck_assert_int_le(pss[0] + pss[1], seg_kb + 64);
    ck_assert_int_ge(pss[0] + pss[1], seg_kb * 9 / 10);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(write(go[i][1], "x", 1), 1);
        int st;
        waitpid(pid[i], &st, 0);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    free(a);
    free(b);
    remove_seg(info.name);
    unlink(path);
}
END_TEST

/* Two masters started together on one file: one converts, the other waits for READY
 * and attaches; both see the same segment. */
START_TEST(test_concurrent_open)
{
    char path[1100], err[512];
    copy_model("tiny-llama2-Q4_0.gguf", path, sizeof path);
    int fds[2][2];
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(pipe(fds[i]), 0);
        pid[i] = fork();
        if (pid[i] == 0) {
            eng_open_info info;
            eng_model *m = eng_open(path, ENG_INT8, &info, err, sizeof err);
            if (!m) _exit(2);
            char msg[80];
            int n = snprintf(msg, sizeof msg, "%d %s", info.converted ? 1 : 0, info.name);
            if (write(fds[i][1], msg, (size_t)n + 1) != n + 1) _exit(3);
            eng_close(m);
            _exit(0);
        }
    }
    char got[2][80];
    int converted = 0;
    for (int i = 0; i < 2; i++) {
        int st;
        waitpid(pid[i], &st, 0);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "opener %d failed", i);
        ck_assert_int_gt(read(fds[i][0], got[i], sizeof got[i]), 0);
        converted += got[i][0] == '1';
    }
    ck_assert_int_eq(converted, 1);
    ck_assert_str_eq(got[0] + 2, got[1] + 2);
    remove_seg(got[0] + 2);
    unlink(path);
}
END_TEST

START_TEST(test_list_and_remove)
{
    char path[1100], err[512];
    copy_model("stories260K-f16.gguf", path, sizeof path);
    eng_open_info info;
    eng_model *m = eng_open(path, ENG_FLOAT, &info, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    eng_close(m);
    seg_info infos[256];
    int n = seg_list(infos, 256, err, sizeof err);
    ck_assert_int_ge(n, 1);
    bool found = false;
    for (int i = 0; i < n && i < 256; i++) {
        if (strcmp(infos[i].name, info.name) != 0) continue;
        found = true;
        ck_assert_int_eq(infos[i].state, SEG_STATE_READY);
        ck_assert_uint_eq(infos[i].bytes, info.seg_bytes);
        ck_assert_ptr_nonnull(strstr(infos[i].src_path, "llm-segtest"));
        ck_assert(infos[i].age_s >= 0 && infos[i].age_s < 600);
    }
    ck_assert(found);
    ck_assert_int_eq(seg_remove(info.name, err, sizeof err), 0);
    ck_assert_int_eq(seg_remove(info.name, err, sizeof err), -1);
    ck_assert_int_eq(seg_remove("../etc/passwd", err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "not a segment name"));
    unlink(path);
}
END_TEST

/* seg_header.hdr_checksum as segment.h defines it. */
static uint64_t documented_header_checksum(const seg_header *h)
{
    seg_header c = *h;
    c.state = 0;
    c.ready_ns = 0;
    c.hdr_checksum = 0;
    uint64_t sum = csum64(&c, sizeof c, 0);
    sum = csum64((const char *)h + h->dir_offset, h->n_tensors * sizeof(seg_tensor), sum);
    return csum64((const char *)h + h->tok_offset, h->tok_bytes, sum);
}

START_TEST(test_hostile_segments)
{
    char name[64], err[512];
    snprintf(name, sizeof name, "/llm-test-junk-%d", (int)getpid());
    seg_map sm;
    /* too small, then garbage of header size, then a header whose directory overflows */
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 100), 0);
    ck_assert_int_eq(seg_attach(name, &sm, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "too small"));
    ck_assert_int_eq(ftruncate(fd, 3 * SEG_HEADER_BYTES), 0);
    seg_header *h = mmap(NULL, 3 * SEG_HEADER_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    memset(h, 0x5a, 3 * SEG_HEADER_BYTES);
    ck_assert_int_eq(seg_attach(name, &sm, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "magic"));
    memset(h, 0, sizeof *h);
    h->magic = SEG_MAGIC;
    h->layout_version = SEG_LAYOUT_VERSION;
    h->state = SEG_STATE_READY;
    h->total_bytes = 3 * SEG_HEADER_BYTES;
    h->dir_offset = SEG_HEADER_BYTES;
    h->n_tensors = 1000;
    ck_assert_int_eq(seg_attach(name, &sm, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "do not fit"));
    h->n_tensors = 1;
    seg_tensor *t = (seg_tensor *)((char *)h + SEG_HEADER_BYTES);
    memset(t, 0, sizeof *t);
    strcpy(t->name, "x");
    t->ne[0] = t->ne[1] = 4;
    t->row_bytes = 16;
    t->offset = 2 * SEG_HEADER_BYTES;
    t->nbytes = 1u << 30; /* runs past the end */
    ck_assert_int_eq(seg_attach(name, &sm, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "directory entry 0"));
    t->nbytes = 64;
    ck_assert_int_eq(seg_attach(name, &sm, NULL, err, sizeof err), -1); /* no header checksum */
    ck_assert_ptr_nonnull(strstr(err, "checksum"));
    h->hdr_checksum = documented_header_checksum(h);
    ck_assert_int_eq(seg_attach(name, &sm, NULL, err, sizeof err), 0);
    seg_unmap(&sm);
    /* valid layout, but not a model: the engine refuses it with a message */
    ck_assert_ptr_null(eng_attach(name, err, sizeof err));
    munmap(h, 3 * SEG_HEADER_BYTES);
    close(fd);
    shm_unlink(name);
    ck_assert_ptr_null(eng_attach("/llm-does-not-exist", err, sizeof err));
    /* more than /dev/shm holds: a clear error naming /dev/shm, and nothing left behind */
    snprintf(name, sizeof name, "/llm-test-huge-%d", (int)getpid());
    ck_assert_int_eq(seg_create(name, 1ull << 50, &sm, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/dev/shm"));
    ck_assert_int_eq(seg_attach(name, &sm, NULL, err, sizeof err), -2);
}
END_TEST


/* ---- issue 10: another local user, corruption ---- */

#define NOBODY 65534

/* Runs fn(arg) in a child process as uid/gid NOBODY; its exit status (0 = ok).
 * Only root can do this: callers skip when geteuid() != 0. */
static int as_nobody(int (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 ||
            setresuid(NOBODY, NOBODY, NOBODY) != 0)
            _exit(90);
        _exit(fn(arg));
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

static bool root_or_skip(const char *what)
{
    if (geteuid() == 0)
        return true;
    fprintf(stderr, "segment: SKIPPED %s: needs root (to act as uid %d)\n", what, NOBODY);
    return false;
}

/* A writable mapping of an existing segment, as its owner (or root) can make one. */
static void *map_rw(const char *name, size_t *len)
{
    int fd = shm_open(name, O_RDWR, 0);
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    *len = (size_t)st.st_size;
    void *p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    ck_assert(p != MAP_FAILED);
    return p;
}

static void shm_chmod(const char *name, mode_t mode)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", name);
    ck_assert_int_eq(chmod(path, mode), 0);
}

static int name_as_nobody(void *arg)
{
    char name[SEG_NAME_MAX], err[512];
    seg_ident id;
    if (seg_name_for(arg, 0, name, &id, err, sizeof err) != 0) return 2;
    char want[32];
    snprintf(want, sizeof want, "/llm-%d-", NOBODY);
    return strncmp(name, want, strlen(want)) == 0 ? 0 : 3;
}

/* Two users never share a name: uid 65534's name for the same file differs. */
START_TEST(test_name_per_user)
{
    if (!root_or_skip("a second user's segment name")) return;
    char path[1100];
    copy_model("stories260K-f32.gguf", path, sizeof path);
    ck_assert_int_eq(as_nobody(name_as_nobody, path), 0);
    unlink(path);
}
END_TEST

/* Our own segment opened to others (mode 0644) is refused, not removed, and accepted
 * again once it is 0600. */
START_TEST(test_mode_refused)
{
    char path[1100], err[512];
    copy_model("stories260K-f32.gguf", path, sizeof path);
    eng_open_info info;
    eng_model *m = eng_open(path, ENG_INT8, &info, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    eng_close(m);
    shm_chmod(info.name, 0644);
    seg_map sm;
    ck_assert_int_eq(seg_attach(info.name, &sm, NULL, err, sizeof err), SEG_FOREIGN);
    ck_assert_msg(strstr(err, "mode 0644") && strstr(err, "--remove-segment"), "%s", err);
    ck_assert_ptr_null(eng_attach(info.name, err, sizeof err));
    ck_assert_ptr_null(eng_open(path, ENG_INT8, &info, err, sizeof err)); /* not rebuilt */
    ck_assert_ptr_nonnull(strstr(err, "mode 0644"));
    shm_chmod(info.name, 0600);
    m = eng_open(path, ENG_INT8, &info, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert(!info.converted);
    eng_close(m);
    remove_seg(info.name);
    unlink(path);
}
END_TEST

typedef struct {
    const char *path;
    char        name[SEG_NAME_MAX];
    seg_ident   id;
} plant_job;

/* The attack of issue 10: build the victim's segment under the victim's name, alter a
 * weight, recompute every checksum (anyone can), leave it readable by all. */
static int plant_segment(void *arg)
{
    plant_job *j = arg;
    char err[512];
    if (cvt_build(j->path, &j->id, j->name, 0, err, sizeof err) != 0) return 2;
    int fd = shm_open(j->name, O_RDWR, 0);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || fchmod(fd, 0644) != 0) return 3;
    seg_map m = { .len = (size_t)st.st_size, .writable = true };
    m.base = mmap(NULL, m.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m.base == MAP_FAILED) return 4;
    snprintf(m.name, sizeof m.name, "%s", j->name);
    const seg_tensor *t = seg_find(&m, "output.weight");
    if (!t) return 5;
    ((char *)m.base)[t->offset + 7] ^= 0x40;
    seg_checksum_tensors(&m);
    seg_mark_ready(&m);
    seg_unmap(&m);
    return 0;
}

START_TEST(test_planted_segment_refused)
{
    if (!root_or_skip("a segment planted by another user")) return;
    char path[1100], err[512];
    copy_model("stories260K-f32.gguf", path, sizeof path);
    ck_assert_int_eq(chmod(path, 0644), 0); /* the attacker can read the model file */
    plant_job j = { .path = path };
    ck_assert_int_eq(seg_name_for(path, 0, j.name, &j.id, err, sizeof err), 0);
    ck_assert_int_eq(as_nobody(plant_segment, &j), 0);
    seg_map sm;
    ck_assert_int_eq(seg_attach(j.name, &sm, NULL, err, sizeof err), SEG_FOREIGN);
    char want[64];
    snprintf(want, sizeof want, "owned by uid %d with mode 0644", NOBODY);
    ck_assert_msg(strstr(err, want) && strstr(err, "another user"), "%s", err);
    ck_assert_ptr_null(eng_attach(j.name, err, sizeof err));
    eng_open_info info;
    ck_assert_ptr_null(eng_open(path, ENG_INT8, &info, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, want));
    /* the segment itself is consistent: only its owner gives it away */
    char p2[128];
    snprintf(p2, sizeof p2, "/dev/shm%s", j.name);
    ck_assert_int_eq(chown(p2, geteuid(), getegid()), 0);
    shm_chmod(j.name, 0600);
    ck_assert_int_eq(seg_attach(j.name, &sm, NULL, err, sizeof err), 0);
    ck_assert_int_eq(seg_verify_tensors(&sm, err, sizeof err), 0);
    seg_unmap(&sm);
    remove_seg(j.name);
    unlink(path);
}
END_TEST

typedef struct {
    const char *path;
} squat_job;

/* As uid NOBODY: its segment name for the file is held by root with mode 0600, so the
 * open fails with EACCES. That must be a clear "owned by uid 0" error at once, never a
 * rebuild loop ending in "gave up after repeated races" (issue 10.8). */
static int open_squatted(void *arg)
{
    char err[512];
    eng_open_info info;
    eng_model *m = eng_open(((squat_job *)arg)->path, ENG_INT8, &info, err, sizeof err);
    if (m) return 2;
    if (strstr(err, "races") || !strstr(err, "owned by uid 0")) {
        fprintf(stderr, "segment: squatted name: %s\n", err);
        return 3;
    }
    return 0;
}

START_TEST(test_squatted_unreadable)
{
    if (!root_or_skip("a name squatted by another user with mode 0600")) return;
    char path[1100], name[SEG_NAME_MAX], err[512];
    copy_model("stories260K-f32.gguf", path, sizeof path);
    ck_assert_int_eq(chmod(path, 0644), 0);
    seg_ident id;
    ck_assert_int_eq(seteuid(NOBODY), 0); /* the name uid NOBODY will look for */
    int rc = seg_name_for(path, 0, name, &id, err, sizeof err);
    ck_assert_int_eq(seteuid(0), 0);
    ck_assert_msg(rc == 0, "%s", err);
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 4096), 0);
    close(fd);
    squat_job j = { path };
    int st = as_nobody(open_squatted, &j);
    shm_unlink(name);
    unlink(path);
    ck_assert_int_eq(st, 0);
}
END_TEST

/* Every tensor carries a checksum of its bytes; a flipped bit in a tensor is found by
 * seg_verify_tensors (not by the cheap attach), a flipped byte in the header, the
 * directory or the tokenizer tables is refused at attach. */
START_TEST(test_checksums)
{
    char path[1100], err[512];
    copy_model("stories260K-f32.gguf", path, sizeof path);
    eng_open_info info;
    eng_model *m = eng_open(path, ENG_INT8, &info, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    eng_close(m);
    seg_map sm;
    ck_assert_int_eq(seg_attach(info.name, &sm, NULL, err, sizeof err), 0);
    ck_assert_int_eq(seg_verify_tensors(&sm, err, sizeof err), 0);
    const seg_header *h = seg_hdr(&sm);
    const seg_tensor *dir = (const seg_tensor *)((const char *)sm.base + h->dir_offset);
    for (uint64_t i = 0; i < h->n_tensors; i++)
        ck_assert_uint_eq(dir[i].checksum, csum64(seg_data(&sm, &dir[i]), dir[i].nbytes, 0));
    ck_assert_uint_eq(h->hdr_checksum, documented_header_checksum(h));
    const seg_tensor *t = seg_find(&sm, "blk.1.ffn_down.weight");
    ck_assert_ptr_nonnull(t);
    size_t len;
    char *w = map_rw(info.name, &len);
    size_t at[] = { t->offset + t->nbytes / 2,      /* a weight */
                    offsetof(seg_header, config) + 4, /* the model configuration */
                    h->dir_offset + 3 * sizeof(seg_tensor) + 2, /* a tensor name */
                    h->dir_offset + 5 * sizeof(seg_tensor) + offsetof(seg_tensor, checksum),
                    h->tok_offset + h->tok_bytes / 2 }; /* the vocabulary */
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
        w[at[k]] ^= 0x10;
        seg_map s2;
        int rc = seg_attach(info.name, &s2, NULL, err, sizeof err);
        if (k == 0) {
            ck_assert_int_eq(rc, 0);
            ck_assert_int_eq(seg_verify_tensors(&s2, err, sizeof err), -1);
            ck_assert_msg(strstr(err, "1 of ") && strstr(err, "blk.1.ffn_down.weight"), "%s", err);
            seg_unmap(&s2);
        } else {
            ck_assert_msg(rc == -1 && strstr(err, "header checksum"), "flip %zu: rc %d, %s", k, rc, err);
        }
        w[at[k]] ^= 0x10;
        ck_assert_int_eq(seg_attach(info.name, &s2, NULL, err, sizeof err), 0);
        ck_assert_int_eq(seg_verify_tensors(&s2, err, sizeof err), 0);
        seg_unmap(&s2);
    }
    munmap(w, len);
    seg_unmap(&sm);
    remove_seg(info.name);
    unlink(path);
}
END_TEST

/* The 2 MB-page count of a mapping from smaps text: the mapping that holds the address,
 * not its neighbours (whose field lines start with hex letters too); -1 outside every
 * mapping; and the live kernel's smaps has the field for a segment of ours. */
START_TEST(test_smaps_pmd)
{
    static const char text[] =
        "7fe244000000-7fe244a00000 r--p 00000000 08:01 123                        /usr/lib/libx.so\n"
        "Size:              10240 kB\n"
        "AnonHugePages:      2048 kB\n"
        "ShmemPmdMapped:        0 kB\n"
        "FilePmdMapped:      4096 kB\n"
        "VmFlags: rd mr mw me\n"
        "7fe244a00000-7fe248a00000 r--s 00000000 00:1a 19822                      /dev/shm/llm-0-abc\n"
        "Size:              65536 kB\n"
        "AnonHugePages:         0 kB\n"
        "ShmemPmdMapped:    63488 kB\n"
        "FilePmdMapped:         0 kB\n"
        "VmFlags: rd sh mr mw me ms\n"
        "7fe248a64000-7fe248b97000 rw-p 00000000 00:00 0\n"
        "Size:               1228 kB\n"
        "ShmemPmdMapped:        0 kB\n";
    const struct { uintptr_t addr; long kb; } cases[] = {
        { 0x7fe244000000, 0 }, { 0x7fe2449fffff, 0 }, { 0x7fe244a00000, 63488 }, { 0x7fe248000000, 63488 },
        { 0x7fe248a00000, -1 }, { 0x7fe248a64000, 0 }, { 0x1000, -1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fmemopen((void *)text, sizeof text - 1, "r");
        ck_assert_ptr_nonnull(f);
        long kb = seg_smaps_pmd_kb(f, cases[i].addr);
        fclose(f);
        ck_assert_msg(kb == cases[i].kb, "address %#lx: %ld kB, want %ld", (unsigned long)cases[i].addr, kb, cases[i].kb);
    }
    char name[64], err[256];
    snprintf(name, sizeof name, "/llm-test-smaps-%d", (int)getpid());
    void *base;
    ck_assert_int_eq(seg_shm_create(name, 4u << 20, &base, err, sizeof err), 0);
    memset(base, 1, 4u << 20);
    FILE *f = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(f);
    long kb = seg_smaps_pmd_kb(f, (uintptr_t)base + 4096);
    fclose(f);
    ck_assert_msg(kb >= 0 && kb <= 4096, "the live segment's ShmemPmdMapped: %ld kB", kb);
    munmap(base, 4u << 20);
    shm_unlink(name);
}
END_TEST

Suite *segment_suite(void)
{
    Suite *s = suite_create("segment");
    TCase *tc = tcase_create("segment");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_name_identity);
    tcase_add_test(tc, test_create_then_attach);
    tcase_add_test(tc, test_dead_loader_rebuilt);
    tcase_add_test(tc, test_worker_read_only_and_blob);
    tcase_add_test(tc, test_two_workers_share_one_copy);
    tcase_add_test(tc, test_concurrent_open);
    tcase_add_test(tc, test_list_and_remove);
    tcase_add_test(tc, test_hostile_segments);
    tcase_add_test(tc, test_name_per_user);
    tcase_add_test(tc, test_mode_refused);
    tcase_add_test(tc, test_planted_segment_refused);
    tcase_add_test(tc, test_squatted_unreadable);
    tcase_add_test(tc, test_checksums);
    tcase_add_test(tc, test_smaps_pmd);
    suite_add_tcase(s, tc);
    return s;
}
