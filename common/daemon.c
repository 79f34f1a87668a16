/* daemon.c - signal flags and option helpers shared by the daemons (see daemon.h). */
#include "daemon.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

volatile sig_atomic_t dmn_stop = 0;
volatile sig_atomic_t dmn_child = 0;

static void on_stop(int sig) { (void)sig; dmn_stop = 1; }
static void on_child(int sig) { (void)sig; dmn_child = 1; }

void dmn_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int dmn_opt(int argc, char **argv, int *i, const char *name, const char **val)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "error: option %s needs a value\n", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

int dmn_flag(const char *arg, const char *name) { return strcmp(arg, name) == 0; }

const char *dmn_env(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

int dmn_int(const char *what, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "error: %s must be an integer in [%ld, %ld], got '%s'\n", what, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}
