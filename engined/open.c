/*
 * open.c - how a process gets its engine handle: the segment policy of eng_open (name
 * the segment after the file, attach it when READY, wait for a live loader, rebuild
 * after a dead one, convert when absent) and eng_attach (by name), plus eng_warm.
 * The handle itself is built by forward.c (eng_handle_new). Owned by the engine.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "engine.h"
#include "handle.h"
#include "log.h"
#include "segment_build.h"
#include "errcode.h"

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

eng_model *eng_attach(const char *seg_name, char *err, size_t errlen)
{
    seg_map sm;
    int32_t pid = 0;
    int rc = seg_attach(seg_name, &sm, &pid, err, errlen);
    if (rc == 1) errf(err, errlen, "segment %s is still LOADING (loader pid %d)", seg_name, pid);
    if (rc != 0) return NULL;
    if (seg_hdr(&sm)->precision >= ENG_PRECISION_COUNT) {
        errf(err, errlen, "segment %s: unknown precision %u", seg_name, seg_hdr(&sm)->precision);
        seg_unmap(&sm);
        return NULL;
    }
    return eng_handle_new(&sm, err, errlen);
}

/* A LOADING segment: wait for a live loader, or remove a dead loader's leftovers.
 * Returns 0 to retry, -1 with err. */
static int handle_loading(const char *name, int32_t pid, double t0, char *err, size_t errlen)
{
    /* pid 0: being created right now; give its creator 2 s to write the header */
    static double unknown_since;
    if (pid == 0 && unknown_since == 0) unknown_since = mono_ms();
    bool dead = pid < 0 || pid == getpid() || (pid > 0 && !dmn_proc_alive(pid, 0)) ||
                (pid == 0 && mono_ms() - unknown_since > 2000);
    if (pid != 0 || dead) unknown_since = 0;
    if (dead) {
        log_warn("segment %s is LOADING but its loader (pid %d) is dead: rebuilding", name, pid);
        if (shm_unlink(name) != 0 && errno != ENOENT) {
            return errf(err, errlen, "remove stale segment %s: %s", name, strerror(errno));
        }
        return 0;
    }
    if (mono_ms() - t0 > 600e3) {
        return errf(err, errlen, "segment %s: loader pid %d has not finished in 10 minutes", name, pid);
    }
    static double last_log;
    if (mono_ms() - last_log > 5000) {
        log_info("segment %s is being built by pid %d: waiting", name, pid);
        last_log = mono_ms();
    }
    usleep(50 * 1000);
    return 0;
}

/* After a build: points at segments left by older versions of the same file. */
static void note_stale(const char *real_path, const char *name)
{
    enum { MAX = 256 };
    seg_info *infos = malloc(MAX * sizeof *infos);
    char err[256];
    int n = infos ? seg_list(infos, MAX, err, sizeof err) : 0;
    const char *dash = strrchr(name, '-'); /* the name without "-f32"/"-q8": other precisions are not stale */
    size_t stem = dash && (!strcmp(dash, "-f32") || !strcmp(dash, "-q8")) ? (size_t)(dash - name) : strlen(name);
    for (int i = 0; i < n && i < MAX; i++)
        if (strcmp(infos[i].src_path, real_path) == 0 && infos[i].uid == (uint32_t)geteuid() &&
            strncmp(infos[i].name, name, stem) != 0)
            log_warn("segment %s holds an older version of %s (not reused): remove it with "
                     "engined --remove-segment %s", infos[i].name, real_path, infos[i].name);
    free(infos);
}

eng_model *eng_open(const char *gguf_path, eng_precision prec, eng_open_info *info,
                    char *err, size_t errlen)
{
    double t0 = mono_ms();
    eng_open_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    if (prec != ENG_INT8 && prec != ENG_FLOAT && prec != ENG_NATIVE) {
        errf(err, errlen, "invalid precision %d", (int)prec);
        return NULL;
    }
    seg_ident id;
    char name[SEG_NAME_MAX];
    if (seg_name_for(gguf_path, prec, name, &id, err, errlen) != 0) return NULL;
    snprintf(info->name, sizeof info->name, "%s", name);
    for (int attempt = 0;; attempt++) {
        seg_map sm;
        int32_t pid = 0;
        int rc = seg_attach(name, &sm, &pid, err, errlen);
        if (rc == 0) {
            const seg_header *h = seg_hdr(&sm);
            if (strcmp(h->src_path, id.real_path) != 0 || h->src_size != id.size ||
                h->src_mtime_ns != id.mtime_ns || h->src_hash != id.head_hash || h->precision != (uint32_t)prec) {
                errf(err, errlen, "segment %s belongs to another file (%s): remove it with "
                     "engined --remove-segment %s", name, h->src_path, name);
                seg_unmap(&sm);
                return NULL;
            }
            info->seg_bytes = sm.len;
            eng_model *m = eng_handle_new(&sm, err, errlen);
            if (!m) return NULL;
            info->ms = mono_ms() - t0;
            if (!info->converted) log_info("attached READY segment %s in %.2f ms", name, info->ms);
            return m;
        }
        if (rc == 1) {
            if (handle_loading(name, pid, t0, err, errlen) != 0) return NULL;
            continue;
        }
        if (rc == SEG_FOREIGN) return NULL; /* never removed or rebuilt behind its owner */
        if (rc == -1) {
            log_warn("%s: rebuilding it", err);
            shm_unlink(name);
        }
        if (attempt > 1000) {
            errf(err, errlen, "segment %s: gave up after repeated races", name);
            return NULL;
        }
        rc = cvt_build(gguf_path, &id, name, prec, err, errlen);
        if (rc < 0) return NULL;
        if (rc == 0) {
            info->converted = true;
            log_info("built segment %s from %s in %.0f ms", name, id.real_path, mono_ms() - t0);
            note_stale(id.real_path, name);
        }
    }
}

double eng_bits_per_weight(const eng_model *m) { return seg_bits_per_weight(eng_handle_map(m)); }

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

void eng_warm(const eng_model *m)
{
    const seg_map *sm = eng_handle_map(m);
    if (madvise(sm->base, sm->len, MADV_POPULATE_READ) == 0) return;
    /* older kernels: touch one byte per page */
    long page = sysconf(_SC_PAGESIZE);
    volatile unsigned char sink = 0;
    for (size_t off = 0; off < sm->len; off += (size_t)(page > 0 ? page : 4096))
        sink ^= ((const volatile unsigned char *)sm->base)[off];
    (void)sink;
}
