/*
 * pool.c - the persistent thread pool (see pool.h).
 *
 * Two futex words drive it. `gen` counts the jobs posted: a worker that has seen
 * generation g waits for gen != g (spinning first, then FUTEX_WAIT). `pending` counts
 * workers that have not finished the current job; the caller waits for it to reach 0
 * the same way. A sleeper announces itself in a counter before its final re-check, and
 * the waker reads that counter after its store (both seq_cst), so a wake-up is never
 * lost: either the sleeper sees the new value or the waker sees the sleeper.
 *
 * Invariant: fn and arg are written only while pending == 0, i.e. when no worker can
 * be reading them; a worker reads them after it observed the new gen (acquire).
 */
#include "pool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

/* Spins before sleeping: long enough to bridge the gap between two kernels of one
 * layer (microseconds), short enough not to burn a shared core when idle. */
#define POOL_SPIN 4000

struct pool;

typedef struct {
    struct pool *pool;
    int          ith;
    pthread_t    thread;
} pool_worker;

struct pool {
    int                  n;            /* threads counting the caller */
    _Atomic uint32_t     gen;          /* job generation (futex word) */
    _Atomic uint32_t     pending;      /* workers still running the job (futex word) */
    _Atomic int          gen_sleepers; /* workers sleeping on gen */
    _Atomic int          caller_sleeps;/* 1 while the caller sleeps on pending */
    _Atomic int          stop;         /* set by pool_destroy */
    pool_fn              fn;           /* the current job */
    void                *arg;
    pool_worker          workers[];    /* n - 1 entries */
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr, int n)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Waits until *addr != val; returns the new value. */
static uint32_t wait_change(_Atomic uint32_t *addr, uint32_t val, _Atomic int *sleepers)
{
    uint32_t v;
    for (int i = 0; i < POOL_SPIN; i++) {
        if ((v = atomic_load_explicit(addr, memory_order_acquire)) != val) return v;
        cpu_relax();
    }
    for (;;) {
        atomic_fetch_add(sleepers, 1);
        if ((v = atomic_load(addr)) == val) futex_wait(addr, val);
        atomic_fetch_sub(sleepers, 1);
        if ((v = atomic_load(addr)) != val) return v;
    }
}

static void *worker_main(void *p)
{
    pool_worker *w = p;
    struct pool *pool = w->pool;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_change(&pool->gen, seen, &pool->gen_sleepers);
        if (atomic_load(&pool->stop)) break;
        pool->fn(pool->arg, w->ith, pool->n);
        if (atomic_fetch_sub(&pool->pending, 1) == 1 && atomic_load(&pool->caller_sleeps))
            futex_wake(&pool->pending, 1);
    }
    return NULL;
}

/* Posts the job in pool->fn/arg to every worker. */
static void post(pool_t *pool)
{
    atomic_store(&pool->pending, (uint32_t)(pool->n - 1));
    atomic_fetch_add(&pool->gen, 1);
    if (atomic_load(&pool->gen_sleepers) > 0) futex_wake(&pool->gen, INT_MAX);
}

static void wait_done(pool_t *pool)
{
    uint32_t v;
    for (int i = 0; i < POOL_SPIN; i++) {
        if (atomic_load_explicit(&pool->pending, memory_order_acquire) == 0) return;
        cpu_relax();
    }
    while ((v = atomic_load(&pool->pending)) != 0) {
        atomic_store(&pool->caller_sleeps, 1);
        if ((v = atomic_load(&pool->pending)) != 0) futex_wait(&pool->pending, v);
        atomic_store(&pool->caller_sleeps, 0);
    }
}

pool_t *pool_new(int n_threads)
{
    if (n_threads < 1 || n_threads > POOL_MAX_THREADS) {
        log_error("thread pool: %d threads requested, expected 1..%d", n_threads, POOL_MAX_THREADS);
        return NULL;
    }
    pool_t *pool = calloc(1, sizeof *pool + (size_t)(n_threads - 1) * sizeof(pool_worker));
    if (!pool) {
        log_error("thread pool: out of memory");
        return NULL;
    }
    pool->n = 1;
    for (int i = 1; i < n_threads; i++) {
        pool_worker *w = &pool->workers[i - 1];
        w->pool = pool;
        w->ith = i;
        int err = pthread_create(&w->thread, NULL, worker_main, w);
        if (err) {
            log_error("thread pool: cannot create thread %d of %d: %s", i + 1, n_threads, strerror(err));
            pool_destroy(&pool);
            return NULL;
        }
        pool->n = i + 1; /* workers started so far, for pool_destroy */
    }
    return pool;
}

void pool_run(pool_t *pool, pool_fn fn, void *arg)
{
    LLM_ASSERT(pool && fn);
    if (pool->n == 1) { fn(arg, 0, 1); return; }
    pool->fn = fn;
    pool->arg = arg;
    post(pool);
    fn(arg, 0, pool->n);
    wait_done(pool);
}

int pool_threads(const pool_t *pool) { return pool ? pool->n : 0; }

void pool_destroy(pool_t **pp)
{
    if (!pp || !*pp) return;
    pool_t *pool = *pp;
    if (pool->n > 1) {
        atomic_store(&pool->stop, 1);
        post(pool);
        for (int i = 1; i < pool->n; i++) pthread_join(pool->workers[i - 1].thread, NULL);
    }
    free(pool);
    *pp = NULL;
}
