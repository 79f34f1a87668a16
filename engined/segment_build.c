/*
 * segment_build.c - building a weight segment: its name from the model file's identity,
 * creation in /dev/shm, the tensors' checksums and the READY mark. The reader side is
 * common/segment.c. Owned by the engine.
 */
#include "segment_build.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "csum.h"
#include "engine.h"
#include "log.h"
#include "errcode.h"
#include "hash.h"


static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int seg_name_for(const char *path, uint32_t precision, char name[SEG_NAME_MAX], seg_ident *id,
                 char *err, size_t errlen)
{
    memset(id, 0, sizeof *id);
    char rp[PATH_MAX];
    if (!realpath(path, rp)) {
        return errf(err, errlen, "%s: %s", path, strerror(errno));
    }
    if (strlen(rp) >= sizeof id->real_path) {
        return errf(err, errlen, "%s: path longer than %zu bytes", path, sizeof id->real_path - 1);
    }
    int fd = open(rp, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        errf(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    enum { HEAD = 65536 };
    unsigned char *head = malloc(HEAD);
    ssize_t got = head ? pread(fd, head, HEAD, 0) : -1;
    close(fd);
    if (got < 0) {
        errf(err, errlen, "%s: read: %s", path, head ? strerror(errno) : "out of memory");
        free(head);
        return -1;
    }
    snprintf(id->real_path, sizeof id->real_path, "%s", rp);
    id->size = (uint64_t)st.st_size;
    id->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    id->head_hash = hash_fnv1a(HASH_FNV_SEED, head, (size_t)got);
    free(head);
    uint64_t h = hash_fnv1a(HASH_FNV_SEED, rp, strlen(rp));
    h = hash_fnv1a(h, &id->size, sizeof id->size);
    h = hash_fnv1a(h, &id->mtime_ns, sizeof id->mtime_ns);
    h = hash_fnv1a(h, &id->head_hash, sizeof id->head_hash);
    uint32_t lv = SEG_LAYOUT_VERSION;
    h = hash_fnv1a(h, &lv, sizeof lv);
    snprintf(name, SEG_NAME_MAX, "/llm-%u-%016llx%s", (unsigned)geteuid(), (unsigned long long)h,
             precision == ENG_FLOAT ? "-f32" : precision == ENG_INT8 ? "-q8" : "");
    return 0;
}

int seg_shm_create(const char *name, uint64_t total, void **base, char *err, size_t errlen)
{
    *base = NULL;
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST) return 1;
        return errf(err, errlen, "shm_open %s: %s", name, strerror(errno));
    }
    int rc = ftruncate(fd, (off_t)total);
    if (rc == 0) rc = posix_fallocate(fd, 0, (off_t)total);
    else rc = errno;
    if (rc != 0) {
        errf(err, errlen, "cannot reserve %.1f MB for segment %s in /dev/shm: %s "
             "(is /dev/shm large enough? containers default to 64 MB: use --shm-size)",
             total / 1e6, name, strerror(rc));
        close(fd);
        shm_unlink(name);
        return -1;
    }
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        errf(err, errlen, "mmap %s (%llu bytes): %s", name, (unsigned long long)total, strerror(errno));
        shm_unlink(name);
        return -1;
    }
    *base = p;
    return 0;
}

int seg_create(const char *name, uint64_t total, seg_map *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    void *p;
    int rc = seg_shm_create(name, total, &p, err, errlen);
    if (rc != 0) return rc;
    m->base = p;
    m->len = total;
    m->writable = true;
    snprintf(m->name, sizeof m->name, "%s", name);
    seg_header *h = p;
    h->magic = SEG_MAGIC;
    h->layout_version = SEG_LAYOUT_VERSION;
    h->loader_pid = (int32_t)getpid();
    h->total_bytes = total;
    h->created_ns = now_ns();
    __atomic_store_n(&h->state, SEG_STATE_LOADING, __ATOMIC_RELEASE);
    return 0;
}

void seg_checksum_tensors(seg_map *m)
{
    LLM_ASSERT(m->writable);
    seg_header *h = m->base;
    seg_tensor *dir = (seg_tensor *)((char *)m->base + h->dir_offset);
    for (uint64_t i = 0; i < h->n_tensors; i++)
        dir[i].checksum = csum64((const char *)m->base + dir[i].offset, dir[i].nbytes, 0);
}

void seg_mark_ready(seg_map *m)
{
    LLM_ASSERT(m->writable);
    seg_header *h = m->base;
    h->ready_ns = now_ns();
    h->hdr_checksum = seg_header_checksum(m->base);
    msync(m->base, m->len, MS_SYNC);
    __atomic_store_n(&h->state, SEG_STATE_READY, __ATOMIC_RELEASE);
}

long seg_smaps_pmd_kb(FILE *f, uintptr_t addr)
{
    char line[512];
    int in = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char c;
        if (sscanf(line, "%lx-%lx%c", &lo, &hi, &c) == 3 && c == ' ') { /* a mapping's first line */
            in = addr >= lo && addr < hi;
            continue;
        }
        long kb;
        if (in && sscanf(line, "ShmemPmdMapped: %ld kB", &kb) == 1) return kb;
    }
    return -1;
}

void seg_log_pages(const seg_map *m)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    long kb = f ? seg_smaps_pmd_kb(f, (uintptr_t)m->base) : -1;
    if (f) fclose(f);
    if (kb < 0) return; /* no smaps (not Linux, or /proc not mounted): nothing to say */
    double huge = kb / 1024.0, all = m->len / 1048576.0;
    if (huge >= all / 2)
        log_info("segment %s: %.0f of %.0f MB in 2 MB pages", m->name, huge, all);
    else if (m->len >= (8u << 20))
        log_info("segment %s: in 4 KB pages; `mount -o remount,huge=within_size /dev/shm` (root) puts the "
                 "next one built in 2 MB pages, which decodes faster (README: huge pages)", m->name);
}
