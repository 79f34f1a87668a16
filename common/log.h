/*
 * log.h - one log line format for every process of the pipeline.
 *
 *   log_init("engined", LOG_INFO);
 *   log_info("segment %s ready in %.1f ms", name, ms);
 *
 * Each line goes to stderr as
 *   2026-11-22T03:30:00.123Z engined[1234] INFO segment ... ready in 3.1 ms
 * The level is checked before anything is formatted, so disabled debug lines cost
 * one comparison. LLM_LOG_LEVEL=debug|info|warn|error overrides the level.
 *
 * A warning that a peer can trigger at will (a bad message, a bad row) goes through a
 * rate limiter, one per call site, so a flood costs a few lines and a count:
 *
 *   static log_limit lim = LOG_LIMIT("bad client message");
 *   log_warn_limited(&lim, "bad client message (%zu bytes): %s", n, err);
 *   ...
 *   log_limit_tick();   // in the daemon's loop
 *
 * At most LOG_LIMIT_BURST lines per LOG_LIMIT_INTERVAL_MS from one limiter; the rest are
 * counted, and when the interval is over one line reports them:
 *   ... WARN bad client message: 2990 similar warnings suppressed in the last 5.0 s
 * The report comes from log_limit_tick once the interval is over, or else with the
 * limiter's next line. Limiters are thread-safe.
 */
#ifndef LLM_LOG_H
#define LLM_LOG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_LEVEL_COUNT } log_level;

extern log_level log_threshold;

/* Sets the component name shown on every line (copied) and the level. */
void log_init(const char *component, log_level level);
/* Writes one line; use the macros below instead. */
void log_write(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_at(lvl, ...) do { if ((lvl) >= log_threshold) log_write((lvl), __VA_ARGS__); } while (0)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_at(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_at(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_at(LOG_ERROR, __VA_ARGS__)

#define LOG_LIMIT_BURST       10   /* lines per interval from one limiter */
#define LOG_LIMIT_INTERVAL_MS 5000

/* One call site's rate limit. Static storage (LOG_LIMIT): log.c links a limiter that is
 * holding a count into a list that log_limit_tick walks. */
typedef struct log_limit {
    const char *what;              /* names the warnings in the report line */
    int         burst;             /* lines allowed per interval */
    int64_t     interval_ms;
    int64_t     start_ms;          /* monotonic ms when the interval opened; 0: none open */
    int         used;              /* lines written in this interval */
    uint64_t    suppressed;        /* lines dropped in this interval */
    struct log_limit *next;        /* in the pending list while suppressed > 0 */
} log_limit;

#define LOG_LIMIT(what) LOG_LIMIT_AT((what), LOG_LIMIT_BURST, LOG_LIMIT_INTERVAL_MS)
#define LOG_LIMIT_AT(what, burst, ms) {(what), (burst), (ms), 0, 0, 0, NULL}

/* 1 if one more line may be written now (and counts it), 0 if it is suppressed; first
 * reports a finished interval's count. _at takes the clock (monotonic ms) for tests. */
int log_limit_pass(log_limit *l);
int log_limit_pass_at(log_limit *l, int64_t now_ms);
/* Reports the count of every limiter whose interval is over. */
void log_limit_tick(void);
void log_limit_tick_at(int64_t now_ms);

#define log_warn_limited(lim, ...) \
    do { if (LOG_WARN >= log_threshold && log_limit_pass(lim)) log_write(LOG_WARN, __VA_ARGS__); } while (0)

/* A broken invariant is a bug: print file:line and abort. Not for bad input. */
#define LLM_ASSERT(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond); \
    abort(); } } while (0)

#endif
