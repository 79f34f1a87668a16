/*
 * pool.h - a persistent thread pool: N-1 worker threads created once, plus the caller.
 *
 *   pool_t *pool = pool_new(2);                    // NULL on a bad count or no threads
 *   pool_run(pool, matmul_part, &job);             // job fn(arg, ith, nth) on every thread
 *   pool_destroy(&pool);                           // joins the workers, sets pool = NULL
 *
 *   static void matmul_part(void *arg, int ith, int nth) {
 *       int64_t r0, r1;
 *       pool_range(rows, 4, ith, nth, &r0, &r1);   // this thread's rows, multiple of 4
 *       kern_q8t_matmul(..., r0, r1);
 *   }
 *
 * pool_run calls fn(arg, 0, nth) on the calling thread and fn(arg, i, nth) for
 * i = 1..nth-1 on the workers, and returns once every call has returned (a full
 * barrier: writes made by any fn are visible to the caller afterwards). Workers wait
 * for work by spinning briefly, then sleeping on a futex, so back-to-back calls (about
 * ten per layer per decoded token) cost microseconds, and an idle pool costs no CPU.
 *
 * Ownership: the pool owns its threads; pool_destroy joins them. A pool is driven by
 * one thread at a time (pool_run is not reentrant, and fn must not call pool_run on
 * the same pool).
 */
#ifndef LLM_POOL_H
#define LLM_POOL_H

#include <stdint.h>

typedef struct pool pool_t;

/* A job: runs on thread ith of nth (0 <= ith < nth). */
typedef void (*pool_fn)(void *arg, int ith, int nth);

#define POOL_MAX_THREADS 256

/* Creates a pool of n_threads threads counting the caller (1 <= n_threads <=
 * POOL_MAX_THREADS; 1 means no worker thread). Returns NULL, with a logged error
 * naming the cause, on a bad count or when a thread cannot be created. */
pool_t *pool_new(int n_threads);

/* Runs fn(arg, ith, nth) once on each of the pool's nth threads, the caller being
 * ith 0, and returns when all have finished. */
void pool_run(pool_t *pool, pool_fn fn, void *arg);

/* Number of threads, counting the caller. */
int pool_threads(const pool_t *pool);

/* Stops and joins the workers, frees the pool and sets *pool to NULL; NULL or a
 * pointer to NULL is accepted. */
void pool_destroy(pool_t **pool);

/* Splits [0, n) into nth nearly equal contiguous parts whose boundaries are multiples
 * of `align` (except the end n); part ith is [*r0, *r1), possibly empty. */
static inline void pool_range(int64_t n, int64_t align, int ith, int nth, int64_t *r0, int64_t *r1)
{
    if (align < 1) align = 1;
    int64_t units = (n + align - 1) / align;
    int64_t a = units * ith / nth * align, b = units * (ith + 1) / nth * align;
    *r0 = a < n ? a : n;
    *r1 = b < n ? b : n;
}

#endif
