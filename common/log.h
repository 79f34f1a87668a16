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
 */
#ifndef LLM_LOG_H
#define LLM_LOG_H

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

/* A broken invariant is a bug: print file:line and abort. Not for bad input. */
#define LLM_ASSERT(cond) do { if (!(cond)) { \
    fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond); \
    abort(); } } while (0)

#endif
