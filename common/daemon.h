/*
 * daemon.h - what every daemon of the pipeline shares: flag-only signal handlers and
 * command-line/environment option parsing.
 *
 *   dmn_signals_install();
 *   for (int i = 1; i < argc; i++) {
 *       const char *v;
 *       if (dmn_opt(argc, argv, &i, "--run-dir", &v)) run_dir = v;
 *       else if (dmn_flag(argv[i], "--help")) { usage(); return 0; }
 *       else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
 *   }
 *   while (!dmn_stop) { ...poll with a timeout...; if (dmn_child) reap(); }
 *
 * The handlers only set the volatile flags below; all work happens in the main loop.
 * SIGPIPE is ignored.
 *
 * And whether another process of this machine still runs (dmn_proc_alive): the KV pool's
 * slots, a segment's loader, the front door's local workers.
 */
#ifndef LLM_DAEMON_H
#define LLM_DAEMON_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

extern volatile sig_atomic_t dmn_stop;  /* set by SIGTERM/SIGINT */
extern volatile sig_atomic_t dmn_child; /* set by SIGCHLD; the loop clears it */

/* Installs the SIGTERM/SIGINT/SIGCHLD flag handlers (without SA_RESTART, so blocking
 * calls return EINTR) and ignores SIGPIPE. */
void dmn_signals_install(void);

/* If argv[*i] is name ("--x V" or "--x=V"), stores the value in *val, advances *i past
 * it and returns 1; returns 0 if argv[*i] is something else; -1 when the value is
 * missing (message on stderr). */
int dmn_opt(int argc, char **argv, int *i, const char *name, const char **val);
/* 1 if arg equals name. */
int dmn_flag(const char *arg, const char *name);
/* getenv(name) if set and non-empty, else dflt. */
const char *dmn_env(const char *name, const char *dflt);
/* Parses a whole non-negative integer in [lo, hi]; 0 or -1 (message on stderr naming what). */
int dmn_int(const char *what, const char *s, long lo, long hi, long *out);

/* Start time of process pid (clock ticks since boot, /proc/<pid>/stat field 22) and its
 * state letter ('?' when unknown); 0 when it cannot be read. */
uint64_t dmn_proc_start(pid_t pid, char *state);
/* Whether process pid runs: false for a pid that is gone, a zombie, or (start_time not 0)
 * a pid now worn by a process started at another time. A process of another user
 * counts as running. */
bool dmn_proc_alive(pid_t pid, uint64_t start_time);

#endif
