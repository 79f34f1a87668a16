/*
 * worker.h - engined's daemon modes, shared by master.c and worker.c (owner: pipeline).
 *
 *   engd_opts o;
 *   engd_opts_default(&o);
 *   ... fill from flags ...
 *   return o.worker ? engd_worker_run(&o) : engd_master_run(&o);
 *
 * A worker maps the READY weight segment read-only, registers with the front door
 * (tokenizerd) over a DEALER socket with heartbeats from its own I/O thread
 * (worker_io.h), runs the sessions it is given as a continuous-batching scheduler (each
 * step: one token of every decoding session plus prefill chunks, up to batch_tokens),
 * and asks samplerd for a step's tokens in one request, with the logits in its
 * shared-memory ring (logits_shm.h).
 */
#ifndef LLM_ENGD_WORKER_H
#define LLM_ENGD_WORKER_H

typedef struct {
    const char *model;        /* master: GGUF file */
    const char *segment;      /* worker: segment name ("/llm-...") */
    const char *run_dir;      /* --run-dir (NULL: LLM_RUN_DIR / default) */
    const char *front;        /* workers endpoint of tokenizerd (NULL: run dir) */
    const char *sampler;      /* samplerd endpoint (NULL: run dir) */
    int         n_workers;    /* master: workers to keep running */
    int         threads;      /* per worker */
    int         n_ctx;        /* per session (0: model's, capped by the engine) */
    int         max_sessions; /* per worker (0: ENGD_SESSIONS_DEFAULT, or ENGD_POOL_SESSIONS_DEFAULT
                               * with a KV pool, where free blocks decide admission) */
    int         batch_tokens; /* most tokens one step evaluates (decode + prefill chunks) */
    int         idle_tokens;  /* the same when no session is decoding (nobody waits) */
    eng_kv_type kv;           /* KV cache element type (--kv) */
    const char *kv_pool;      /* --kv-pool SIZE as given (NULL or "0": no pool; kvsetup.h) */
    int         precision;    /* eng_precision for a segment the master creates */
    int         worker;       /* run as a worker (--worker / --attach) */
} engd_opts;

/* Tokens per step by default, while sessions decode and when none does: see README
 * (chosen with bench/bench_serve.py). */
#define ENGD_BATCH_TOKENS_DEFAULT 128
#define ENGD_IDLE_TOKENS_DEFAULT  512
/* Sessions per worker by default: each private KV cache is n_ctx positions of every
 * layer; with the KV pool a session holds only the blocks it uses, and admission counts
 * free blocks (worker_kv.c), so the slots may be many. */
#define ENGD_SESSIONS_DEFAULT      16
#define ENGD_POOL_SESSIONS_DEFAULT 64

/* The most positions one step adds to a session: what a step's budget (batch or idle
 * tokens, at least the prefill floor) lets one prompt take. */
int engd_chunk_max(const engd_opts *o);
/* Defaults: 1 worker, 1 thread, n_ctx 0, max_sessions 0 (above), ENGD_BATCH_TOKENS_DEFAULT tokens
 * per step, f32 KV, INT8. */
void engd_opts_default(engd_opts *o);
/* Runs one worker until SIGTERM/SIGINT; returns the exit status. */
int engd_worker_run(const engd_opts *o);
/* Runs the master (segment + N supervised workers) until SIGTERM/SIGINT. */
int engd_master_run(const engd_opts *o, const char *self_exe);

#endif
