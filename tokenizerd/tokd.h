/*
 * tokd.h - the seam between tokenizerd's command line (main.c, owner: tok) and its
 * daemon mode (frontd.c, owner: pipeline). main.c handles --tokenize/--detokenize and
 * hands every other invocation to tokd_serve; the symbol is weak so tokenizerd still
 * links while the daemon is not built.
 */
#ifndef LLM_TOKD_H
#define LLM_TOKD_H

/* Runs the tokenizer daemon with main's argc/argv; returns the process exit code. */
int tokd_serve(int argc, char **argv) __attribute__((weak));

#endif
