/*
 * cmd_generate.c - `llmc "PROMPT"` (raw completion, streamed) and `llmc chat` (REPL on
 * one session with the model's chat template). Owner: pipeline.
 *
 *   llmc -n 64 --temp 0 "Once upon a time"
 *   llmc --json --stats --seed 42 --stop "." "Once upon a time"
 *   llmc chat --system "Be brief."
 *
 * Sampler flags use llama.cpp's names (--temp, --top-k, ...); any parameter samplerd
 * knows is also accepted as --NAME (dashes or underscores) and validated here with
 * lc_param_check (conn.h, shared with the gateway) before anything is sent. While
 * streaming, the turn is an lc_stream (stream.h): llmc pings the front door
 * every second; the front door frees the session of a client that stops pinging.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "conn.h"
#include "errcode.h"
#include "gram.h"
#include "json_schema.h"
#include "net.h"
#include "sparams.h"
#include "stream.h"

#define MAX_PARAMS 64
#define MAX_STOPS  8

typedef struct {
    const char *prompt, *system, *endpoint, *run_dir, *file;
    long        n_predict;
    int         json, stats, echo;
    const char *pk[MAX_PARAMS], *pv[MAX_PARAMS];
    int         n_params;
    const char *stops[MAX_STOPS];
    int         n_stops;
    char       *grammar;   /* owned: GBNF from --grammar, --grammar-file or --json-schema */
} gen_opts;

static volatile sig_atomic_t interrupted = 0;
static void on_sigint(int s) { (void)s; interrupted = 1; }

/* llama.cpp flag names whose sampler parameter is named otherwise. */
static const char *const aliases[][2] = {
    {"temp", "temperature"}, {"typical", "typical_p"}, {"mirostat-lr", "mirostat_eta"},
    {"mirostat-ent", "mirostat_tau"}, {"top-nsigma", "top_n_sigma"}, {"dynatemp-exp", "dynatemp_exponent"},
    {"sampling-seq", "sampling_seq"}, {"dry-sequence-breaker", "dry_sequence_breaker"}, {NULL, NULL}};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: llmc \"PROMPT\" [options]      complete PROMPT, streaming only the generated text\n"
            "       llmc chat [--system TEXT] [options]\n"
            "  -f, --file FILE       read the prompt from FILE ('-': standard input)\n"
            "  -n, --n-predict N     tokens to generate (default -1: until end of text or full context)\n"
            "  --temp T --top-k K --top-p P --min-p P --repeat-penalty R --seed S ...\n"
            "                        sampler parameters, llama.cpp names; every samplerd parameter is\n"
            "                        accepted as --name (e.g. --mirostat 2, --ignore-eos, --dry-multiplier 0.8)\n"
            "  --stop TEXT           stop before TEXT (repeatable)\n"
            "  --grammar GBNF        constrain the output to a GBNF grammar (llama.cpp's syntax)\n"
            "  --grammar-file FILE   the same, read from FILE\n"
            "  --json-schema S|@F    constrain the output to JSON valid against the JSON Schema S\n"
            "                        (or in file F); a schema or grammar that cannot be honoured\n"
            "                        is an error, never unconstrained output\n"
            "  --echo                print the prompt before the completion\n"
            "  --json                one JSON object per piece, then one with counts and timings;\n"
            "                        with --n-probs N (<= 100) each token's log-prob and top N in \"probs\"\n"
            "  --stats               prompt tokens, generated tokens, time to first token, tok/s on stderr\n"
            "  -e, --endpoint EP     front door endpoint (default ipc://RUN_DIR/front.sock) [LLM_FRONT]\n"
            "  --run-dir DIR         the pipeline's run directory [LLM_RUN_DIR]\n");
}

/* Adds --name value as a sampler parameter after validating it; 0 or -1 (message printed). */
static int add_param(gen_opts *o, smp_params *chk, const char *flag, const char *value)
{
    static char names[MAX_PARAMS][64];
    if (o->n_params >= MAX_PARAMS) {
        fprintf(stderr, "error: too many sampler parameters\n");
        return -1;
    }
    const char *name = flag;
    for (int i = 0; aliases[i][0]; i++)
        if (strcmp(flag, aliases[i][0]) == 0) name = aliases[i][1];
    char *n = names[o->n_params];
    snprintf(n, 64, "%s", name);
    for (char *p = n; *p; p++)
        if (*p == '-') *p = '_';
    char err[200];
    if (lc_param_check(chk, n, value, err, sizeof err) != ERR_NONE) {
        fprintf(stderr, "error: bad parameter --%s %s: %s\n", flag, value, err);
        return -1;
    }
    o->pk[o->n_params] = n;
    o->pv[o->n_params++] = value;
    return 0;
}

static int is_param(const char *name)
{
    char n[64];
    snprintf(n, sizeof n, "%s", name);
    for (int i = 0; aliases[i][0]; i++)
        if (strcmp(name, aliases[i][0]) == 0) snprintf(n, sizeof n, "%s", aliases[i][1]);
    for (char *p = n; *p; p++)
        if (*p == '-') *p = '_';
    return smp_param_known(n);
}

static char *read_prompt(const char *path, const char *flag);

/* o->grammar from the one of --grammar (text), --grammar-file (path) or --json-schema
 * (text or @path) given, checked by compiling it here; 0, or -1 with a message printed. */
static int set_grammar(gen_opts *o, const char *text, const char *file, const char *schema)
{
    char err[300];
    if (!!text + !!file + !!schema > 1) {
        fprintf(stderr, "error: give one of --grammar, --grammar-file, --json-schema\n");
        return -1;
    }
    if (text) o->grammar = strdup(text);
    else if (file) o->grammar = read_prompt(file, "--grammar-file");
    else if (schema) {
        char *own = schema[0] == '@' ? read_prompt(schema + 1, "--json-schema") : NULL;
        if (schema[0] == '@' && !own) return -1;
        const char *s = own ? own : schema;
        o->grammar = jsg_to_gbnf(s, strlen(s), err, sizeof err);
        free(own);
        if (!o->grammar) {
            fprintf(stderr, "error: bad parameter --json-schema: %s\n", err);
            return -1;
        }
    } else return 0;
    if (!o->grammar) return -1;
    gram *g = gram_compile(o->grammar, strlen(o->grammar), err, sizeof err);
    if (!g) {
        fprintf(stderr, "error: bad parameter %s: %s\n", schema ? "--json-schema" : file ? "--grammar-file" : "--grammar",
                err);
        free(o->grammar);
        o->grammar = NULL;
        return -1;
    }
    gram_free(g);
    return 0;
}

/* Parses argv[first..]; returns 0, 1 for --help, 2 on a usage error, -1 on a bad value. */
static int parse(int argc, char **argv, int first, gen_opts *o, int chat)
{
    smp_params chk = smp_params_default();
    const char *grammar = NULL, *grammar_file = NULL, *schema = NULL;
    memset(o, 0, sizeof *o);
    o->n_predict = -1;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int need = i + 1 < argc;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { usage(stdout); return 1; }
        else if (strcmp(a, "--json") == 0) o->json = 1;
        else if (strcmp(a, "--stats") == 0) o->stats = 1;
        else if (strcmp(a, "--echo") == 0) o->echo = 1;
        else if ((strcmp(a, "-n") == 0 || strcmp(a, "--n-predict") == 0) && need) {
            char *end;
            o->n_predict = strtol(argv[++i], &end, 10);
            if (*end || !*argv[i] || o->n_predict < -1) {
                fprintf(stderr, "error: bad parameter %s %s: expected an integer >= -1\n", a, argv[i]);
                return -1;
            }
        }
        else if ((strcmp(a, "-e") == 0 || strcmp(a, "--endpoint") == 0) && need) o->endpoint = argv[++i];
        else if ((strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) && need && !chat) o->file = argv[++i];
        else if (strcmp(a, "--run-dir") == 0 && need) o->run_dir = argv[++i];
        else if (strcmp(a, "--system") == 0 && need && chat) o->system = argv[++i];
        else if (strcmp(a, "--stop") == 0 && need) {
            if (o->n_stops >= MAX_STOPS || !*argv[i + 1]) {
                fprintf(stderr, "error: bad parameter --stop: at most %d non-empty stop strings\n", MAX_STOPS);
                return -1;
            }
            o->stops[o->n_stops++] = argv[++i];
        }
        else if (strcmp(a, "--grammar") == 0 && need) grammar = argv[++i];
        else if (strcmp(a, "--grammar-file") == 0 && need) grammar_file = argv[++i];
        else if (strcmp(a, "--json-schema") == 0 && need) schema = argv[++i];
        else if (strcmp(a, "--ignore-eos") == 0) { if (add_param(o, &chk, "ignore_eos", "true") != 0) return -1; }
        else if (strncmp(a, "--", 2) == 0 && (v = strchr(a, '=')) != NULL) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(v - a - 2), a + 2);
            if (add_param(o, &chk, name, v + 1) != 0) return -1;
        }
        else if (strncmp(a, "--", 2) == 0 && need && is_param(a + 2)) {
            if (add_param(o, &chk, a + 2, argv[++i]) != 0) return -1;
        }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "error: unknown option '%s' (llmc --help)\n", a);
            return 2;
        }
        else if (!chat && !o->prompt) o->prompt = a;
        else {
            fprintf(stderr, "error: unexpected argument '%s' (llmc --help)\n", a);
            return 2;
        }
    }
    if (!chat && o->file && o->prompt) {
        fprintf(stderr, "error: give the prompt as an argument or with --file, not both\n");
        return 2;
    }
    if (!chat && !o->prompt && !o->file) {
        usage(stderr);
        return 2;
    }
    return set_grammar(o, grammar, grammar_file, schema);
}

/* A log-prob as JSON: non-finite values (a banned token's -inf) become null. */
static void json_logprob(const msgpack_object *o)
{
    double v = o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64 ? o->via.f64
               : o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER                           ? (double)o->via.i64
                                                                                      : (double)o->via.u64;
    if (isfinite(v)) printf("%.9g", v);
    else fputs("null", stdout);
}

static const msgpack_object *map_key(const msgpack_object *map, const char *key)
{
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl && memcmp(k->via.str.ptr, key, kl) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

/* A PIECE's "probs" (checked by proto_decode: entries {id, logprob, top?, text?}) as
 * ,"probs":[{"id":..,"text":..,"logprob":..,"top":[{"id":..,"logprob":..},...]},...] */
static void json_probs(const msgpack_object *probs)
{
    fputs(",\"probs\":[", stdout);
    for (uint32_t i = 0; i < probs->via.array.size; i++) {
        const msgpack_object *e = &probs->via.array.ptr[i], *text = map_key(e, "text"), *top = map_key(e, "top");
        printf("%s{\"id\":", i ? "," : "");
        lc_json_obj(stdout, map_key(e, "id"));
        if (text) {
            fputs(",\"text\":", stdout);
            lc_json_str(stdout, text->via.str.ptr, text->via.str.size);
        }
        fputs(",\"logprob\":", stdout);
        json_logprob(map_key(e, "logprob"));
        fputs(",\"top\":[", stdout);
        for (uint32_t j = 0; top && j < top->via.array.size; j++) {
            const msgpack_object *pair = top->via.array.ptr[j].via.array.ptr;
            printf("%s{\"id\":", j ? "," : "");
            lc_json_obj(stdout, &pair[0]);
            fputs(",\"logprob\":", stdout);
            json_logprob(&pair[1]);
            fputc('}', stdout);
        }
        fputs("]}", stdout);
    }
    fputc(']', stdout);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The request ids of llmc's GENERATEs: unique per process. */
static uint64_t new_id(void *cls)
{
    static uint64_t next_id = 0;
    (void)cls;
    return ((uint64_t)getpid() << 20) + ++next_id;
}

/* What a turn reports at its end (--json, --stats). */
typedef struct {
    double   t0, t_first;
    uint64_t n_prompt, n_gen, queue_pos;
} turn_stats;

/* Prints a PIECE (plain text, or a JSON line with its log-probs) and appends its text to
 * *out when out is not NULL. */
static void print_piece(const gen_opts *o, const proto_msg *m, turn_stats *ts, char **out, size_t *out_len)
{
    pm_piece pc;
    pm_piece_get(m, &pc);
    const char *p = pc.text.p;
    size_t n = pc.text.n;
    if (!ts->t_first) ts->t_first = now_s();
    ts->n_gen = pc.ntok;
    if (o->json) {
        fputs("{\"text\":", stdout);
        lc_json_str(stdout, p, n);
        printf(",\"tokens\":%llu", (unsigned long long)ts->n_gen);
        if (pc.has_probs) json_probs(pc.probs);
        fputs("}\n", stdout);
    } else {
        fwrite(p, 1, n, stdout);
    }
    fflush(stdout);
    if (out) {
        char *x = realloc(*out, *out_len + n + 1);
        if (x) { memcpy(x + *out_len, p, n); *out_len += n; x[*out_len] = 0; *out = x; }
    }
}

/* Prints the DONE's counts and timings (--json on stdout, --stats on stderr). */
static void print_done(const gen_opts *o, const proto_msg *m, turn_stats *ts, int resumes)
{
    double t1 = now_s();
    if (!ts->t_first) ts->t_first = t1;
    pm_done d;
    pm_done_get(m, &d);
    uint64_t n_gen = d.ntok, n_prompt = ts->n_prompt, queue_pos = ts->queue_pos, moves = d.moves;
    char reason[32];
    proto_sv_copy(d.reason, reason, sizeof reason);
    double t0 = ts->t0, t_first = ts->t_first;
    double gen_s = t1 - t_first, tps = n_gen > 1 && gen_s > 0 ? (double)(n_gen - 1) / gen_s : 0;
    if (o->json)
        printf("{\"done\":true,\"reason\":\"%s\",\"prompt_tokens\":%llu,\"tokens\":%llu,"
               "\"ttft_ms\":%.1f,\"total_ms\":%.1f,\"tokens_per_s\":%.2f,\"queue_pos\":%llu,"
               "\"moves\":%llu,\"resumes\":%d}\n",
               reason, (unsigned long long)n_prompt, (unsigned long long)n_gen, (t_first - t0) * 1e3,
               (t1 - t0) * 1e3, tps, (unsigned long long)queue_pos, (unsigned long long)moves, resumes);
    if (o->stats)
        fprintf(stderr, "\nprompt tokens: %llu, generated tokens: %llu, time to first token: %.1f ms, "
                        "%.2f tokens/s, total %.1f ms (%s; queued at position %llu, moved %llu times, "
                        "resumed %d times)\n",
                (unsigned long long)n_prompt, (unsigned long long)n_gen, (t_first - t0) * 1e3, tps,
                (t1 - t0) * 1e3, reason, (unsigned long long)queue_pos, (unsigned long long)moves, resumes);
}

/* Sends what the stream queued (GENERATEs, PINGs); 0, or -1 when a send failed. */
static int send_queued(lc_conn *c, lc_stream *s)
{
    int r = 0;
    proto_writer w;
    while (lc_stream_pop(s, &w))
        if (lc_send(c, &w) != 0) r = -1;
    return r;
}

/* Sends one GENERATE and streams its answer, driving an lc_stream (stream.h). The
 * generated text is appended to *out when out is not NULL; *sess and key get the
 * session (a chat turn continues session *sess with key). A front door that restarts
 * mid-stream is asked to resume: the stream pauses and continues with no gap and no
 * repeated text. 0 on success, 1 on error, 130 when interrupted. */
static int run_turn(lc_conn *c, const gen_opts *o, const char *const *msgs, int n_msgs, uint64_t *sess,
                    char *key, char **out, size_t *out_len)
{
    lc_gen g = {.n_predict = o->n_predict, .prompt = o->prompt, .msgs = msgs, .n_msgs = n_msgs, .cont = *sess,
                .key = key, .pk = o->pk, .pv = o->pv, .n_params = o->n_params, .stops = o->stops, .n_stops = o->n_stops,
                .grammar = o->grammar};
    lc_stream s;
    turn_stats ts = {.t0 = now_s()};
    lc_stream_start(&s, &g, new_id(NULL), net_now_ms(), new_id, NULL);
    if (send_queued(c, &s) != 0) {
        fprintf(stderr, "error: cannot send to %s\n", c->endpoint);
        return 1;
    }
    if (o->echo && !msgs && !o->json) {
        fputs(o->prompt, stdout);
        fflush(stdout);
    }
    while (!interrupted) {
        proto_msg m;
        int r = lc_recv(c, 200, &m);
        int64_t now = net_now_ms();
        lc_event ev = r == 1 ? lc_stream_on_msg(&s, &m, now) : LC_EV_NONE;
        if (ev == LC_EV_ACCEPTED) {
            pm_accepted a;
            pm_accepted_get(&m, &a);
            ts.n_prompt = a.ntok;
            ts.queue_pos = a.pos;
            *sess = s.rs.sess;
            snprintf(key, LC_KEY_MAX, "%s", s.rs.key);
        } else if (ev == LC_EV_NEW_SESSION) {
            *sess = 0;
        } else if (ev == LC_EV_PIECE) {
            print_piece(o, &m, &ts, out, out_len);
        } else if (ev == LC_EV_DONE) {
            print_done(o, &m, &ts, s.resumes);
        } else if (ev == LC_EV_ERROR) {
            pm_error e;
            pm_error_get(&m, &e);
            char msg[400];
            proto_sv_copy(e.msg, msg, sizeof msg);
            fflush(stdout);
            fprintf(stderr, "%serror: %s\n", s.accepted ? "\n" : "", msg);
        }
        if (r == 1) proto_msg_free(&m);
        if (ev == LC_EV_DONE || ev == LC_EV_ERROR) return ev == LC_EV_DONE ? 0 : 1;
        if (lc_stream_tick(&s, now) == LC_EV_TIMEOUT) {
            if (!s.accepted)
                fprintf(stderr, "error: the front door at %s does not answer (is tokenizerd running? "
                                "'llmc status'; " LC_START_HINT ")\n", c->endpoint);
            else
                fprintf(stderr, "\nerror: lost the front door at %s mid-stream for %d s (tokenizerd stopped?); "
                                "run the request again\n", c->endpoint, LC_STREAM_LOST_MS / 1000);
            return 1;
        }
        send_queued(c, &s);
    }
    proto_writer w;
    lc_stream_cancel(&s, &w);
    lc_send(c, &w);
    fprintf(stderr, "\nerror: interrupted\n");
    return 130;
}

static void install_sigint(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Reads a whole prompt file ("-": stdin) into a NUL-terminated buffer; NULL with a
 * message printed. */
static char *read_prompt(const char *path, const char *flag)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: %s %s: %s\n", flag, path, strerror(errno));
        return NULL;
    }
    size_t n = 0, cap = 1 << 16;
    char *b = malloc(cap);
    for (size_t k; b && (k = fread(b + n, 1, cap - n - 1, f)) > 0;) {
        n += k;
        if (n + 1 == cap) {
            char *x = cap > PROTO_MAX_MSG ? NULL : realloc(b, cap *= 2);
            if (!x) { free(b); b = NULL; }
            else b = x;
        }
    }
    if (f != stdin) fclose(f);
    if (!b) fprintf(stderr, "error: %s %s: too large (the limit is %u bytes)\n", flag, path, PROTO_MAX_MSG);
    else b[n] = 0;
    return b;
}

int cmd_generate(int argc, char **argv)
{
    gen_opts o;
    int r = parse(argc, argv, 1, &o, 0);
    if (r) return r == 1 ? 0 : r == 2 ? 2 : 1;
    char *file_prompt = NULL;
    if (o.file && !(o.prompt = file_prompt = read_prompt(o.file, "--file"))) { free(o.grammar); return 1; }
    lc_conn c;
    char err[400];
    if (lc_open(&c, o.endpoint, o.run_dir, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        free(file_prompt);
        free(o.grammar);
        return 1;
    }
    install_sigint();
    uint64_t sess = 0;
    char key[LC_KEY_MAX] = "";
    r = run_turn(&c, &o, NULL, 0, &sess, key, NULL, NULL);
    if (r == 0 && !o.json && isatty(1)) putchar('\n');
    lc_close(&c);
    free(file_prompt);
    free(o.grammar);
    return r;
}

/* Waits until stdin has input (or ends). Meanwhile the chat's session, held by the front
 * door between turns with its KV cache on a worker, is pinged every LC_STREAM_PING_MS: the front
 * door frees a held chat whose client went silent, so a killed llmc chat holds nothing
 * for long. The PONGs are drained (run_turn reads only its own request's replies). */
static void wait_input(lc_conn *c, uint64_t sess, const char *key)
{
    while (sess && !interrupted) {
        struct pollfd p = { .fd = 0, .events = POLLIN };
        if (poll(&p, 1, LC_STREAM_PING_MS) != 0) return; /* input, end of input, or an error */
        pm_ping pg = {.sess = sess, .has_sess = 1, .key = proto_sv_of(key), .has_key = 1};
        proto_writer w;
        proto_begin(&w, PT_PING, 0);
        pm_ping_put(&w, &pg);
        lc_send(c, &w);
        proto_msg m;
        while (lc_recv(c, 0, &m) == 1) proto_msg_free(&m);
    }
}

int cmd_chat(int argc, char **argv)
{
    gen_opts o;
    int r = parse(argc, argv, 1, &o, 1);
    if (r) return r == 1 ? 0 : r == 2 ? 2 : 1;
    lc_conn c;
    char err[400];
    if (lc_open(&c, o.endpoint, o.run_dir, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        free(o.grammar);
        return 1;
    }
    install_sigint();
    setvbuf(stdin, NULL, _IONBF, 0); /* no line hides in stdio's buffer from wait_input's poll */
    int tty = isatty(0), cap = 64, n = 0;
    char **msgs = malloc((size_t)cap * sizeof *msgs);
    if (o.system) { msgs[n++] = strdup("system"); msgs[n++] = strdup(o.system); }
    uint64_t sess = 0;
    char key[LC_KEY_MAX] = "", line[8192];
    r = 0;
    for (;;) {
        if (tty) { fputs("> ", stdout); fflush(stdout); }
        wait_input(&c, sess, key);
        if (!fgets(line, sizeof line, stdin)) break;
        line[strcspn(line, "\n")] = 0;
        if (!line[0]) continue;
        if (n + 4 > cap) {
            char **x = realloc(msgs, (size_t)(cap *= 2) * sizeof *msgs);
            if (!x) break;
            msgs = x;
        }
        msgs[n++] = strdup("user");
        msgs[n++] = strdup(line);
        char *reply = NULL;
        size_t len = 0;
        r = run_turn(&c, &o, (const char *const *)msgs, n, &sess, key, &reply, &len);
        putchar('\n');
        fflush(stdout);
        msgs[n++] = strdup("assistant");
        msgs[n++] = reply ? reply : strdup("");
        if (r) break;
    }
    if (sess) {
        pm_cancel cn = {.sess = sess, .has_sess = 1, .key = proto_sv_of(key), .has_key = 1};
        proto_writer w;
        proto_begin(&w, PT_CANCEL, 0);
        pm_cancel_put(&w, &cn);
        lc_send(&c, &w);
    }
    for (int i = 0; i < n; i++) free(msgs[i]);
    free(msgs);
    lc_close(&c);
    free(o.grammar);
    return r;
}
