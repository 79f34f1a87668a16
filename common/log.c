#include "log.h"

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
