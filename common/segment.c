/*
 * segment.c - POSIX shared-memory weight segments, the reader side: attach, checks,
 * the tokenizer blob, list, remove. Building one is engined/segment_build.c.
 */
#include "segment.h"

#include "gguf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "csum.h"
#include "daemon.h"
#include "log.h"
#include "errcode.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t seg_header_checksum(const void *base)
{
    seg_header c;
    memcpy(&c, base, sizeof c);
    c.state = 0;
    c.ready_ns = 0;
    c.hdr_checksum = 0;
    uint64_t sum = csum64(&c, sizeof c, 0);
    sum = csum64((const char *)base + c.dir_offset, c.n_tensors * sizeof(seg_tensor), sum);
    return csum64((const char *)base + c.tok_offset, c.tok_bytes, sum);
}

/* Validates the header and the directory of a mapped segment of len bytes. */
static int check_layout(const void *base, size_t len, const char *name, char *err, size_t errlen)
{
    const seg_header *h = base;
    if (h->magic != SEG_MAGIC) {
        return errf(err, errlen, "segment %s: bad magic (not a weight segment)", name);
    }
    if (h->layout_version != SEG_LAYOUT_VERSION) {
        return errf(err, errlen, "segment %s: layout version %u, this engined reads %u (built by "
                    "another version: remove it with engined --remove-segment %s)", name,
                    h->layout_version, SEG_LAYOUT_VERSION, name);
    }
    if (h->total_bytes != len || h->n_tensors > 100000 || h->dir_offset < sizeof *h ||
        h->dir_offset > len || h->n_tensors * sizeof(seg_tensor) > len - h->dir_offset ||
        h->tok_offset > len || h->tok_bytes > len - h->tok_offset) {
        return errf(err, errlen, "segment %s: header sizes do not fit its %zu bytes", name, len);
    }
    const seg_tensor *dir = (const seg_tensor *)((const char *)base + h->dir_offset);
    for (uint64_t i = 0; i < h->n_tensors; i++) {
        const seg_tensor *t = &dir[i];
        if (memchr(t->name, 0, sizeof t->name) == NULL || !seg_type_valid(t->type) ||
            t->offset % SEG_ALIGN != 0 || t->offset > len || t->nbytes > len - t->offset ||
            t->ne[0] <= 0 || t->ne[1] <= 0 || t->row_bytes == 0 ||
            seg_stored_rows(t) > t->nbytes / t->row_bytes) {
            return errf(err, errlen, "segment %s: directory entry %llu is invalid", name, (unsigned long long)i);
        }
    }
    return 0;
}

/* Only a segment of our own that nobody else can write is trusted: another local user
 * can create any name in /dev/shm before we do. */
int seg_check_owner(const char *name, const struct stat *st, char *err, size_t errlen)
{
    if (st->st_uid == geteuid() && (st->st_mode & 077) == 0)
        return 0;
    bool other = st->st_uid != geteuid();
    errf(err, errlen, "segment %s is owned by uid %u with mode %04o, expected uid %u and "
         "mode 0600: %s; not using it. Remove it (engined --remove-segment %s%s) and start "
         "again", name, (unsigned)st->st_uid, (unsigned)(st->st_mode & 07777), (unsigned)geteuid(),
         other ? "another user created it" : "others may read or write it", name,
         other ? ", as root or that user" : "");
    return SEG_FOREIGN;
}

int seg_open_owned(const char *name, int oflag, struct stat *st, char *err, size_t errlen)
{
    int fd = shm_open(name, oflag | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        char path[SEG_NAME_MAX + 16];
        snprintf(path, sizeof path, "/dev/shm%s", name);
        /* a name we may not open: someone else's squat, never ours to remove or rebuild */
        if ((e == EACCES || e == EPERM) && stat(path, st) == 0 && seg_check_owner(name, st, err, errlen) != 0)
            return SEG_FOREIGN;
        if (e == EACCES || e == EPERM) {
            errf(err, errlen, "segment %s: %s (it is not ours to use; remove it as root)", name, strerror(e));
            return SEG_FOREIGN;
        }
        errf(err, errlen, "segment %s: %s", name, strerror(e));
        return e == ENOENT ? -2 : -1;
    }
    if (fstat(fd, st) != 0) {
        errf(err, errlen, "segment %s: %s", name, strerror(errno));
        close(fd);
        return -1;
    }
    int rc = seg_check_owner(name, st, err, errlen);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int seg_verify_tensors(const seg_map *m, char *err, size_t errlen)
{
    const seg_header *h = seg_hdr(m);
    const seg_tensor *dir = (const seg_tensor *)((const char *)m->base + h->dir_offset);
    uint64_t bad = 0, first = 0;
    for (uint64_t i = 0; i < h->n_tensors; i++)
        if (csum64(seg_data(m, &dir[i]), dir[i].nbytes, 0) != dir[i].checksum && bad++ == 0)
            first = i;
    if (!bad)
        return 0;
    return errf(err, errlen, "segment %s: %llu of %llu tensors fail their checksum (first: %s): the "
                "weights are corrupt; remove the segment (engined --remove-segment %s)", m->name,
                (unsigned long long)bad, (unsigned long long)h->n_tensors, dir[first].name, m->name);
}

int seg_attach(const char *name, seg_map *m, int32_t *loader_pid, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    struct stat st;
    int fd = seg_open_owned(name, O_RDONLY, &st, err, errlen);
    if (fd < 0) return fd;
    if (st.st_size == 0) { /* a loader between shm_open and ftruncate */
        if (loader_pid) *loader_pid = 0;
        close(fd);
        return 1;
    }
    if ((size_t)st.st_size < sizeof(seg_header)) {
        errf(err, errlen, "segment %s: too small (%lld bytes) to hold a header", name,
             (long long)st.st_size);
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        return errf(err, errlen, "mmap %s: %s", name, strerror(errno));
    }
    const seg_header *h = p;
    uint32_t state = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
    if ((h->magic == SEG_MAGIC && state == SEG_STATE_LOADING) || h->magic == 0) {
        /* magic 0: a loader between ftruncate and its first header write */
        if (loader_pid) *loader_pid = h->magic == 0 ? 0 : h->loader_pid;
        munmap(p, (size_t)st.st_size);
        return 1;
    }
    if (check_layout(p, (size_t)st.st_size, name, err, errlen) != 0) {
        munmap(p, (size_t)st.st_size);
        return -1;
    }
    if (state != SEG_STATE_READY) {
        errf(err, errlen, "segment %s: unknown state %u", name, state);
        munmap(p, (size_t)st.st_size);
        return -1;
    }
    uint64_t sum = seg_header_checksum(p);
    if (sum != h->hdr_checksum) {
        errf(err, errlen, "segment %s: header checksum mismatch (stored %016llx, computed "
             "%016llx): the header, directory or tokenizer tables are corrupt", name,
             (unsigned long long)h->hdr_checksum, (unsigned long long)sum);
        munmap(p, (size_t)st.st_size);
        return -1;
    }
    m->base = p;
    m->len = (size_t)st.st_size;
    snprintf(m->name, sizeof m->name, "%s", name);
    return 0;
}

void seg_unmap(seg_map *m)
{
    if (m->base) munmap(m->base, m->len);
    memset(m, 0, sizeof *m);
}

int seg_remove(const char *name, char *err, size_t errlen)
{
    char full[SEG_NAME_MAX + 1];
    snprintf(full, sizeof full, "%s%s", name[0] == '/' ? "" : "/", name);
    if (strncmp(full, "/llm-", 5) != 0 || strchr(full + 1, '/')) {
        return errf(err, errlen, "'%s' is not a segment name (expected /llm-...)", name);
    }
    if (shm_unlink(full) != 0) {
        return errf(err, errlen, "remove %s: %s", full, strerror(errno));
    }
    return 0;
}

/* Reads what it can of one segment's header for listing. */
static void info_of(const char *name, seg_info *in)
{
    memset(in, 0, sizeof *in);
    snprintf(in->name, sizeof in->name, "/%s", name);
    char path[SEG_NAME_MAX + 16];
    struct stat st;
    snprintf(path, sizeof path, "/dev/shm%s", in->name);
    if (stat(path, &st) == 0) { /* even when we may not open it */
        in->bytes = (uint64_t)st.st_size;
        in->uid = (uint32_t)st.st_uid;
        in->mode = (uint32_t)(st.st_mode & 07777);
    }
    int fd = shm_open(in->name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return;
    if (in->bytes >= sizeof(seg_header)) {
        seg_header *h = mmap(NULL, sizeof *h, PROT_READ, MAP_SHARED, fd, 0);
        if (h != MAP_FAILED) {
            if (h->magic == SEG_MAGIC) {
                in->state = (int)__atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
                in->loader_pid = h->loader_pid;
                memcpy(in->src_path, h->src_path, sizeof in->src_path);
                in->src_path[sizeof in->src_path - 1] = 0;
                in->age_s = (now_ns() - h->created_ns) / 1e9;
                in->loader_dead = in->state == SEG_STATE_LOADING && !dmn_proc_alive(in->loader_pid, 0);
            }
            munmap(h, sizeof *h);
        }
    }
    close(fd);
}

int seg_list(seg_info *infos, int max, char *err, size_t errlen)
{
    DIR *d = opendir("/dev/shm");
    if (!d) {
        return errf(err, errlen, "/dev/shm: %s", strerror(errno));
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "llm-", 4) != 0 || strncmp(e->d_name, "llm-logits-", 11) == 0 ||
            strncmp(e->d_name, "llm-kv-", 7) == 0 ||
            strlen(e->d_name) >= SEG_NAME_MAX - 1) continue;
        if (n < max) info_of(e->d_name, &infos[n]);
        n++;
    }
    closedir(d);
    return n;
}

const seg_tensor *seg_find(const seg_map *m, const char *name)
{
    const seg_header *h = seg_hdr(m);
    const seg_tensor *dir = (const seg_tensor *)((const char *)m->base + h->dir_offset);
    for (uint64_t i = 0; i < h->n_tensors; i++)
        if (strcmp(dir[i].name, name) == 0) return &dir[i];
    return NULL;
}

double seg_bits_per_weight(const seg_map *m)
{
    const seg_header *h = seg_hdr(m);
    const seg_tensor *dir = (const seg_tensor *)((const char *)m->base + h->dir_offset);
    double bytes = 0, values = 0;
    for (uint64_t i = 0; i < h->n_tensors; i++) {
        bytes += (double)dir[i].nbytes;
        values += (double)dir[i].ne[0] * (double)dir[i].ne[1];
    }
    return values > 0 ? 8.0 * bytes / values : 0.0;
}

struct gguf_ctx *seg_tokenizer_open(const char *name, seg_map *m, char *err, size_t errlen)
{
    int32_t pid = 0;
    memset(m, 0, sizeof *m);
    int rc = seg_attach(name, m, &pid, err, errlen);
    if (rc != 0) {
        if (rc == 1) errf(err, errlen, "segment %s is still LOADING (loader pid %d)", name, pid);
        else if (rc == -2) errf(err, errlen, "segment %s does not exist", name);
        return NULL;
    }
    const seg_header *h = seg_hdr(m);
    gguf_ctx *g = NULL;
    if (h->tok_offset > m->len || h->tok_bytes > m->len - h->tok_offset)
        errf(err, errlen, "segment %s: tokenizer blob outside the segment", name);
    else
        g = gguf_parse((const char *)m->base + h->tok_offset, h->tok_bytes, err, errlen);
    if (!g) seg_unmap(m);
    return g;
}
