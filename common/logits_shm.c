/* logits_shm.c - the worker -> samplerd logits ring (see logits_shm.h). */
#include "logits_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "errcode.h"

struct lshm {
    char         name[64];
    uint8_t     *base;
    size_t       size;
    int          owner;
    lshm_header *hdr;
};

void lshm_name_for(pid_t pid, char *out, size_t cap)
{
    snprintf(out, cap, "/llm-logits-%u-%d", (unsigned)geteuid(), (int)pid);
}

lshm *lshm_create(pid_t pid, uint32_t n_slots, uint32_t n_vocab, char *err, size_t errcap)
{
    lshm *r = calloc(1, sizeof *r);
    if (!r || n_slots == 0 || n_vocab == 0) {
        errf(err, errcap, "logits ring: bad size (%u slots of %u floats)", n_slots, n_vocab);
        free(r);
        return NULL;
    }
    lshm_name_for(pid, r->name, sizeof r->name);
    uint64_t slot = ((uint64_t)n_vocab * 4 + LSHM_ALIGN - 1) / LSHM_ALIGN * LSHM_ALIGN;
    r->size = sizeof(lshm_header) + slot * n_slots;
    shm_unlink(r->name); /* a stale ring of ours; /dev/shm's sticky bit keeps others' */
    int fd = shm_open(r->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        char path[80];
        struct stat st;
        snprintf(path, sizeof path, "/dev/shm%s", r->name);
        if (e == EEXIST && stat(path, &st) == 0 && st.st_uid != geteuid())
            errf(err, errcap, "logits ring %s already exists and belongs to uid %u (another user "
                 "created it): remove it as root", r->name, (unsigned)st.st_uid);
        else
            errf(err, errcap, "logits ring %s: shm_open: %s", r->name, strerror(e));
        free(r);
        return NULL;
    }
    int e = ftruncate(fd, (off_t)r->size) != 0 ? errno : posix_fallocate(fd, 0, (off_t)r->size);
    if (e) {
        errf(err, errcap, "logits ring %s: cannot reserve %zu bytes in /dev/shm: %s%s", r->name, r->size,
             strerror(e), e == ENOSPC ? " (/dev/shm is full; containers need --shm-size)" : "");
        close(fd);
        shm_unlink(r->name);
        free(r);
        return NULL;
    }
    r->base = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (r->base == MAP_FAILED) {
        errf(err, errcap, "logits ring %s: mmap: %s", r->name, strerror(errno));
        shm_unlink(r->name);
        free(r);
        return NULL;
    }
    r->owner = 1;
    r->hdr = (lshm_header *)r->base;
    *r->hdr = (lshm_header){.magic = LSHM_MAGIC, .version = LSHM_VERSION, .n_slots = n_slots,
                            .n_vocab = n_vocab, .slot_bytes = slot, .total_bytes = r->size,
                            .owner_pid = (int32_t)pid};
    return r;
}

lshm *lshm_open_ro(const char *name, char *err, size_t errcap)
{
    char mine[32];
    int n = snprintf(mine, sizeof mine, "/llm-logits-%u-", (unsigned)geteuid());
    if (strncmp(name, mine, (size_t)n) != 0 || strlen(name) >= 64 || strchr(name + 1, '/')) {
        errf(err, errcap, "logits ring name '%.64s' is not %s<pid>", name, mine);
        return NULL;
    }
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        errf(err, errcap, "logits ring %s: %s", name, strerror(errno));
        return NULL;
    }
    struct stat st;
    lshm *r = calloc(1, sizeof *r);
    if (!r || fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(lshm_header)) {
        errf(err, errcap, "logits ring %s: too small or unreadable", name);
        close(fd);
        free(r);
        return NULL;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) { /* planted by another user */
        errf(err, errcap, "logits ring %s is owned by uid %u with mode %04o, expected uid %u and "
             "mode 0600: not reading it", name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
             (unsigned)geteuid());
        close(fd);
        free(r);
        return NULL;
    }
    r->size = (size_t)st.st_size;
    r->base = mmap(NULL, r->size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (r->base == MAP_FAILED) {
        errf(err, errcap, "logits ring %s: mmap: %s", name, strerror(errno));
        free(r);
        return NULL;
    }
    r->hdr = (lshm_header *)r->base;
    snprintf(r->name, sizeof r->name, "%s", name);
    const lshm_header *h = r->hdr;
    uint64_t need = sizeof(lshm_header) + h->slot_bytes * (uint64_t)h->n_slots;
    if (h->magic != LSHM_MAGIC || h->version != LSHM_VERSION || h->slot_bytes < (uint64_t)h->n_vocab * 4 ||
        h->n_slots == 0 || h->slot_bytes > (1u << 30) || need > r->size) {
        errf(err, errcap, "logits ring %s: bad header (magic, version or sizes)", name);
        lshm_destroy(&r);
        return NULL;
    }
    return r;
}

void lshm_destroy(lshm **rp)
{
    if (!rp || !*rp) return;
    lshm *r = *rp;
    if (r->base && r->base != MAP_FAILED) munmap(r->base, r->size);
    if (r->owner) shm_unlink(r->name);
    free(r);
    *rp = NULL;
}

void lshm_unlink_pid(pid_t pid)
{
    char name[64];
    lshm_name_for(pid, name, sizeof name);
    shm_unlink(name);
}

const char *lshm_name(const lshm *r) { return r->name; }
uint32_t lshm_n_slots(const lshm *r) { return r->hdr->n_slots; }

float *lshm_slot(lshm *r, uint32_t i)
{
    LLM_ASSERT(r->owner && i < r->hdr->n_slots);
    return (float *)(r->base + sizeof(lshm_header) + (size_t)i * r->hdr->slot_bytes);
}

size_t lshm_slot_floats(const lshm *r) { return (size_t)(r->hdr->slot_bytes / sizeof(float)); }

const float *lshm_row(const lshm *r, uint64_t i, uint64_t nv, char *err, size_t errcap)
{
    if (i >= r->hdr->n_slots || nv != r->hdr->n_vocab) {
        errf(err, errcap, "logits ring %s: slot %llu / n_vocab %llu out of range (%u slots of %u)", r->name,
             (unsigned long long)i, (unsigned long long)nv, r->hdr->n_slots, r->hdr->n_vocab);
        return NULL;
    }
    return (const float *)(r->base + sizeof(lshm_header) + (size_t)i * r->hdr->slot_bytes);
}
