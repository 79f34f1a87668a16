/*
 * cmds.h - llmc's subcommands. Each takes (argc, argv) with argv[0] the subcommand's
 * name (for cmd_generate: the program name) and returns the process exit status:
 * 0 success, 1 error (one "error: ..." line on stderr), 2 usage.
 * Declared weak so that the binary links while a subcommand is being written.
 */
#ifndef LLM_CMDS_H
#define LLM_CMDS_H

typedef int (*cmd_fn)(int argc, char **argv);

int cmd_generate(int argc, char **argv) __attribute__((weak)); /* client/cmd_generate.c */
int cmd_chat(int argc, char **argv) __attribute__((weak));     /* client/cmd_generate.c */
int cmd_status(int argc, char **argv) __attribute__((weak));   /* client/cmd_status.c */
int cmd_inspect(int argc, char **argv) __attribute__((weak));  /* client/cmd_inspect.c */
int cmd_quantize(int argc, char **argv) __attribute__((weak)); /* client/cmd_quantize.c */
int cmd_synth(int argc, char **argv) __attribute__((weak));    /* client/cmd_synth.c */
int cmd_serve(int argc, char **argv) __attribute__((weak));    /* client/cmd_serve.c */

#endif
