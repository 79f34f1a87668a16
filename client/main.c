/*
 * llmc - the one user-facing command.
 *
 *   llmc "PROMPT" [options]         raw completion, streamed (cmd_generate)
 *   llmc chat [options]             interactive chat REPL (cmd_chat)
 *   llmc status                     workers, segment, uptime (cmd_status)
 *   llmc inspect FILE [--tensors] [--json]
 *   llmc quantize IN.gguf OUT.gguf TYPE
 *   llmc synth --shape NAME --type TYPE --vocab-from VOCAB.gguf --seed N -o OUT.gguf
 *   llmc serve [--host H] [--port N] [--api-key KEY]   OpenAI-compatible HTTP gateway (cmd_serve)
 *
 * Each subcommand lives in its own client/cmd_*.c file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"

typedef struct {
    const char *name;
    cmd_fn      fn;
    const char *usage;
} subcommand;

static const subcommand subcommands[] = {
    {"chat",     cmd_chat,     "chat [--system TEXT] [options]   interactive chat on one session"},
    {"status",   cmd_status,   "status                           workers, segment, uptime"},
    {"inspect",  cmd_inspect,  "inspect FILE [--tensors] [--json]"},
    {"quantize", cmd_quantize, "quantize IN.gguf OUT.gguf TYPE"},
    {"synth",    cmd_synth,    "synth --shape NAME --type TYPE --vocab-from V.gguf --seed N -o OUT.gguf"},
    {"serve",    cmd_serve,    "serve [--host H] [--port N] [--api-key KEY] [--threads N]   OpenAI HTTP gateway"},
};

/* Options of every subcommand that talks to a pipeline, each followed by a value. */
static int is_global_option(const char *arg)
{
    return strcmp(arg, "-e") == 0 || strcmp(arg, "--endpoint") == 0 || strcmp(arg, "--run-dir") == 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: llmc \"PROMPT\" [options]        complete a prompt, streamed\n");
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(f, "       llmc %s\n", subcommands[i].usage);
    fprintf(f, "run 'llmc --help' for the generation options\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    /* Options that pick the pipeline may come before the subcommand
     * (llmc --run-dir D status); they are handed to it after its name. */
    int first = 1;
    while (first + 1 < argc && is_global_option(argv[first])) first += 2;
    for (size_t i = 0; first < argc && i < sizeof subcommands / sizeof subcommands[0]; i++) {
        if (strcmp(argv[first], subcommands[i].name) != 0) continue;
        if (!subcommands[i].fn) {
            fprintf(stderr, "error: 'llmc %s' is not built into this binary\n", argv[first]);
            return 1;
        }
        char **sub_argv = malloc((size_t)(argc + 1) * sizeof *sub_argv);
        if (!sub_argv) return 1;
        int n = 0;
        sub_argv[n++] = argv[first];
        for (int j = 1; j < argc; j++)
            if (j != first) sub_argv[n++] = argv[j];
        sub_argv[n] = NULL;
        int rc = subcommands[i].fn(n, sub_argv);
        free(sub_argv);
        return rc;
    }
    if (!cmd_generate) {
        usage(stderr);
        return 2;
    }
    return cmd_generate(argc, argv);
}
