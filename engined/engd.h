/*
 * engd.h - the engine daemon entry point (master, --attach, --worker modes).
 *
 *   if (engd_serve) return engd_serve(argc, argv);
 *
 * engined/main.c handles the one-shot commands (--eval, --list-segments,
 * --remove-segment, --help) and hands every other invocation to engd_serve, which
 * the pipeline implements in engined/master.c and engined/worker.c. Declared weak so
 * that engined links while the daemon is being written.
 */
#ifndef LLM_ENGD_H
#define LLM_ENGD_H

/* Runs the daemon for argv (argv[0] the program name); returns the exit status. */
int engd_serve(int argc, char **argv) __attribute__((weak));

#endif
