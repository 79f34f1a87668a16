#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

log_level log_threshold = LOG_INFO;
static char log_component[32] = "llm";

static const char *const level_names[LOG_LEVEL_COUNT] = {"DEBUG", "INFO", "WARN", "ERROR"};

void log_init(const char *component, log_level level)
{
    snprintf(log_component, sizeof log_component, "%s", component ? component : "llm");
    log_threshold = level;
    const char *env = getenv("LLM_LOG_LEVEL");
    if (env) {
        for (int i = 0; i < LOG_LEVEL_COUNT; i++)
            if (strcasecmp(env, level_names[i]) == 0) log_threshold = (log_level)i;
        if (strcasecmp(env, "warning") == 0) log_threshold = LOG_WARN;
    }
}

void log_write(log_level level, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[32];
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    /* One fprintf per line so lines from concurrent processes do not interleave. */
    fprintf(stderr, "%s.%03dZ %s[%d] %s %s\n", ts, (int)(tv.tv_usec / 1000), log_component,
            (int)getpid(), level_names[level < LOG_LEVEL_COUNT ? level : LOG_ERROR], msg);
}

/* Limiters holding a count, and the lock over every limiter's fields. */
static pthread_mutex_t limit_mu = PTHREAD_MUTEX_INITIALIZER;
static log_limit *limit_pending;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void limit_unlink(log_limit *l)
{
    for (log_limit **p = &limit_pending; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            l->next = NULL;
            return;
        }
}

/* Closes l's interval: one line with what it suppressed, if anything. Under limit_mu. */
static void limit_close(log_limit *l, int64_t now_ms)
{
    if (l->suppressed) {
        log_at(LOG_WARN, "%s: %llu similar warnings suppressed in the last %.1f s", l->what,
               (unsigned long long)l->suppressed, (double)(now_ms - l->start_ms) / 1000.0);
        limit_unlink(l);
    }
    l->start_ms = 0;
    l->used = 0;
    l->suppressed = 0;
}

int log_limit_pass_at(log_limit *l, int64_t now_ms)
{
    pthread_mutex_lock(&limit_mu);
    if (l->start_ms && now_ms - l->start_ms >= l->interval_ms) limit_close(l, now_ms);
    if (!l->start_ms) l->start_ms = now_ms ? now_ms : 1; /* 0 means none open */
    int ok = l->used < l->burst;
    if (ok) l->used++;
    else if (l->suppressed++ == 0) {
        l->next = limit_pending;
        limit_pending = l;
    }
    pthread_mutex_unlock(&limit_mu);
    return ok;
}

int log_limit_pass(log_limit *l) { return log_limit_pass_at(l, mono_ms()); }

void log_limit_tick_at(int64_t now_ms)
{
    pthread_mutex_lock(&limit_mu);
    for (log_limit *l = limit_pending, *next; l; l = next) {
        next = l->next;
        if (now_ms - l->start_ms >= l->interval_ms) limit_close(l, now_ms);
    }
    pthread_mutex_unlock(&limit_mu);
}

void log_limit_tick(void) { log_limit_tick_at(mono_ms()); }
