/*
 * master.c - engined's daemon modes: option parsing (engd_serve) and the master, which
 * opens the weight segment (converting the GGUF once, or attaching the READY segment a
 * previous master built), starts N worker processes (engined --worker --segment NAME),
 * restarts any that die, and stops them all on SIGTERM/SIGINT. The segment outlives the
 * master on purpose: the next master reuses it in milliseconds.
 *
 *   engined --model stories.gguf --workers 2          # master + 2 workers
 *   engined --attach [--run-dir DIR]                  # one more worker, foreground
 *   engined --worker --segment /llm-1000-0123456789abcdef  # what the master execs
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "engd.h"
#include "engine.h"
#include "kvsetup.h"
#include "log.h"
#include "logits_shm.h"
#include "net.h"
#include "worker.h"

#define MAX_WORKERS 64

static void usage(FILE *f)
{
    fprintf(f,
            "usage: engined --model FILE [--workers N] [options]   master: segment + N workers\n"
            "       engined --attach [--model FILE | --segment NAME] [options]   one more worker (default:\n"
            "                     the segment of the master running in the run directory)\n"
            "       engined --worker --segment NAME [options]        (started by the master)\n"
            "options (environment in brackets):\n"
            "  --model FILE        the GGUF model [LLM_MODEL]\n"
            "  --run-dir DIR       endpoints and pid files [LLM_RUN_DIR]\n"
            "  --workers N         workers the master keeps running (default 1) [LLM_WORKERS_N]\n"
            "  --threads N         threads per worker (default 1) [LLM_THREADS]\n"
            "  --ctx N             context per session (default: the model's, capped at 4096)\n"
            "  --max-sessions N    sessions per worker (default %d; %d with --kv-pool, where free\n"
            "                      KV blocks decide how many run)\n"
            "  --batch-tokens N    most tokens a worker evaluates per step: one per decoding\n"
            "                      session plus prefill chunks (default %d)\n"
            "  --idle-batch-tokens N  the same when no session is decoding (default %d)\n"
            "  --kv f16|f32|q8_0   KV cache type (default f16; q8_0 needs head_dim %% 32 == 0)\n"
            "  --kv-pool SIZE      shared KV block pool next to the weights: bytes with a K/M/G\n"
            "                      suffix, or a bare number of tokens; 0 or off (default): none;\n"
            "                      sessions hold blocks of it, and share published prefixes\n"
            "  --precision P       native (default: 2/4/5/6-bit weights kept at their width, the\n"
            "                      rest INT8), int8 (every matrix widened to Q8) or float (f32)\n"
            "  --float             the same as --precision float\n"
            "  --front EP          front door's worker endpoint (default ipc://RUN_DIR/workers.sock) [LLM_WORKERS]\n"
            "  --sampler EP        samplerd endpoint (default ipc://RUN_DIR/sampler.sock) [LLM_SAMPLER]\n"
            "one-shot commands: engined --eval/--list-segments/--remove-segment/--verify-segment (above)\n",
            ENGD_SESSIONS_DEFAULT, ENGD_POOL_SESSIONS_DEFAULT, ENGD_BATCH_TOKENS_DEFAULT, ENGD_IDLE_TOKENS_DEFAULT);
}

static int parse(int argc, char **argv, engd_opts *o, int *attach)
{
    long v;
    o->model = dmn_env("LLM_MODEL", NULL);
    const char *s = dmn_env("LLM_WORKERS_N", NULL);
    if (s && dmn_int("LLM_WORKERS_N", s, 1, MAX_WORKERS, &v) == 0) o->n_workers = (int)v;
    s = dmn_env("LLM_THREADS", NULL);
    if (s && dmn_int("LLM_THREADS", s, 1, 256, &v) == 0) o->threads = (int)v;
    for (int i = 1; i < argc; i++) {
        const char *val = NULL;
        int r;
#define OPT(name) ((r = dmn_opt(argc, argv, &i, name, &val)) != 0)
        if (OPT("--model")) o->model = val;
        else if (OPT("--segment")) o->segment = val;
        else if (OPT("--run-dir")) o->run_dir = val;
        else if (OPT("--front")) o->front = val;
        else if (OPT("--sampler")) o->sampler = val;
        else if (OPT("--workers")) { if (r > 0 && dmn_int("--workers", val, 1, MAX_WORKERS, &v) == 0) o->n_workers = (int)v; else r = -1; }
        else if (OPT("--threads")) { if (r > 0 && dmn_int("--threads", val, 1, 256, &v) == 0) o->threads = (int)v; else r = -1; }
        else if (OPT("--ctx")) { if (r > 0 && dmn_int("--ctx", val, 0, 1 << 20, &v) == 0) o->n_ctx = (int)v; else r = -1; }
        else if (OPT("--idle-batch-tokens")) { if (r > 0 && dmn_int("--idle-batch-tokens", val, 1, 4096, &v) == 0) o->idle_tokens = (int)v; else r = -1; }
        else if (OPT("--batch-tokens")) { if (r > 0 && dmn_int("--batch-tokens", val, 1, 4096, &v) == 0) o->batch_tokens = (int)v; else r = -1; }
        else if (OPT("--max-sessions")) { if (r > 0 && dmn_int("--max-sessions", val, 1, 256, &v) == 0) o->max_sessions = (int)v; else r = -1; }
        else if (OPT("--kv")) {
            if (r > 0 && eng_kv_parse(val) >= 0) o->kv = (eng_kv_type)eng_kv_parse(val);
            else { fprintf(stderr, "error: --kv must be f16, f32 or q8_0\n"); r = -1; }
        }
        else if (OPT("--kv-pool")) {
            kvs_spec ks;
            char e[160];
            if (r > 0 && kvs_parse(val, &ks, e, sizeof e) == 0) o->kv_pool = val;
            else { if (r > 0) fprintf(stderr, "error: %s\n", e); r = -1; }
        }
        else if (dmn_flag(argv[i], "--float")) { o->precision = ENG_FLOAT; r = 1; }
        else if (OPT("--precision")) {
            if (r > 0 && (!strcmp(val, "native") || !strcmp(val, "int8") || !strcmp(val, "float")))
                o->precision = val[0] == 'n' ? ENG_NATIVE : val[0] == 'i' ? ENG_INT8 : ENG_FLOAT;
            else { fprintf(stderr, "error: --precision must be native, int8 or float\n"); r = -1; }
        }
        else if (dmn_flag(argv[i], "--worker")) { o->worker = 1; r = 1; }
        else if (dmn_flag(argv[i], "--attach")) { *attach = 1; o->worker = 1; r = 1; }
        else if (dmn_flag(argv[i], "--help") || dmn_flag(argv[i], "-h")) { usage(stdout); return 1; }
        else { fprintf(stderr, "error: unknown option '%s' (engined --help)\n", argv[i]); return 2; }
#undef OPT
        if (r < 0) return 2;
    }
    if (!o->worker && !o->model) {
        fprintf(stderr, "error: the master needs --model FILE (engined --help)\n");
        return 2;
    }
    return 0;
}

/* Every worker, the master's and the attached ones (engined --attach), leaves
 * RUN_DIR/worker-<pid>.pid while it runs, so `pipeline.sh stop` (make stop) finds and
 * stops every worker of the run directory, even one no master supervises. */
static int run_worker_with_pidfile(const engd_opts *o)
{
    char dir[256], err[256], path[320] = "", name[32];
    if (net_run_dir(o->run_dir, dir, sizeof dir, err, sizeof err) == 0) {
        snprintf(name, sizeof name, "worker-%d.pid", (int)getpid());
        net_run_path(dir, name, path, sizeof path);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            dprintf(fd, "%d\n", (int)getpid());
            close(fd);
        } else {
            log_warn("cannot write %s in %s: %s (pipeline.sh stop will not find this worker)", name, dir,
                     strerror(errno));
            path[0] = 0;
        }
    }
    int rc = engd_worker_run(o);
    if (path[0]) unlink(path);
    return rc;
}

int engd_serve(int argc, char **argv)
{
    engd_opts o;
    engd_opts_default(&o);
    int attach = 0, r = parse(argc, argv, &o, &attach);
    if (r) return r == 1 ? 0 : 2;
    dmn_signals_install();
    log_init(o.worker ? "engined-worker" : "engined", LOG_INFO);
    if (attach && !o.segment && !o.model) {
        /* the running master wrote its segment's name into the run directory */
        char dir[256], err[256], path[300];
        static char name[64];
        if (net_run_dir(o.run_dir, dir, sizeof dir, err, sizeof err) != 0) {
            log_error("%s", err);
            return 1;
        }
        net_run_path(dir, "segment", path, sizeof path);
        FILE *f = fopen(path, "r");
        int ok = f && fgets(name, sizeof name, f) != NULL;
        if (f) fclose(f);
        name[strcspn(name, "\n")] = 0;
        if (!ok || strncmp(name, "/llm-", 5) != 0) {
            log_error("--attach: no running master in %s (no segment file there); give --model FILE or --segment NAME",
                      dir);
            return 1;
        }
        o.segment = name;
    }
    if (attach && !o.segment) {
        /* find the segment of the running master: eng_open attaches a READY one */
        char err[256];
        eng_open_info info;
        eng_model *m = eng_open(o.model, (eng_precision)o.precision, &info, err, sizeof err);
        if (!m) {
            log_error("%s", err);
            return 1;
        }
        static char name[64];
        snprintf(name, sizeof name, "%s", info.name);
        o.segment = name;
        log_info("--attach: segment %s (%s in %.1f ms)", name, info.converted ? "converted" : "attached", info.ms);
        eng_close(m);
    }
    if (o.worker) return run_worker_with_pidfile(&o);
    return engd_master_run(&o, "/proc/self/exe");
}

typedef struct {
    pid_t   pid;
    int64_t started_ms;
    int     fails;      /* quick deaths in a row: restart backoff */
    int64_t next_ms;    /* not before */
} wslot;

static pid_t spawn(const engd_opts *o, const char *self, const char *seg)
{
    char th[16], ctx[16], ms[16], bt[16], it[16];
    snprintf(th, sizeof th, "%d", o->threads);
    snprintf(ctx, sizeof ctx, "%d", o->n_ctx);
    snprintf(ms, sizeof ms, "%d", o->max_sessions);
    snprintf(bt, sizeof bt, "%d", o->batch_tokens);
    snprintf(it, sizeof it, "%d", o->idle_tokens);
    const char *av[32];
    int n = 0;
    av[n++] = "engined";
    av[n++] = "--worker";
    av[n++] = "--segment"; av[n++] = seg;
    av[n++] = "--threads"; av[n++] = th;
    av[n++] = "--ctx"; av[n++] = ctx;
    if (o->max_sessions > 0) { av[n++] = "--max-sessions"; av[n++] = ms; }
    av[n++] = "--batch-tokens"; av[n++] = bt;
    av[n++] = "--idle-batch-tokens"; av[n++] = it;
    av[n++] = "--kv"; av[n++] = eng_kv_name(o->kv);
    if (o->kv_pool) { av[n++] = "--kv-pool"; av[n++] = o->kv_pool; }
    if (o->run_dir) { av[n++] = "--run-dir"; av[n++] = o->run_dir; }
    if (o->front) { av[n++] = "--front"; av[n++] = o->front; }
    if (o->sampler) { av[n++] = "--sampler"; av[n++] = o->sampler; }
    av[n] = NULL;
    fflush(stderr);
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        /* a master killed with -9 takes its workers along (SIGTERM: they say goodbye, so
         * their sessions move at once); the next master starts fresh ones on the segment */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(0); /* it died before prctl */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(self, (char *const *)av);
        fprintf(stderr, "engined: exec %s: %s\n", self, strerror(errno));
        _exit(127);
    }
    if (pid < 0) log_error("fork: %s", strerror(errno));
    return pid;
}

static void describe(int status, char *buf, size_t cap)
{
    if (WIFSIGNALED(status)) snprintf(buf, cap, "killed by signal %d", WTERMSIG(status));
    else snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
}

static void reap(wslot *ws, int n, int64_t now, kvp *const pools[ENG_KV_KINDS])
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < n; i++) {
            if (ws[i].pid != pid) continue;
            char how[64];
            describe(status, how, sizeof how);
            lshm_unlink_pid(pid);
            ws[i].pid = 0;
            ws[i].fails = now - ws[i].started_ms < 2000 ? ws[i].fails + 1 : 0;
            int64_t delay = ws[i].fails ? 250LL << (ws[i].fails < 5 ? ws[i].fails : 5) : 0;
            ws[i].next_ms = now + delay;
            log_warn("worker %d (pid %d) %s; restarting it%s", i, (int)pid, how, delay ? " after a backoff" : "");
        }
    }
    kvs_reap(pools); /* its KV block references and unfinished blocks (logged there) */
}

static void stop_all(wslot *ws, int n)
{
    for (int i = 0; i < n; i++)
        if (ws[i].pid > 0) kill(ws[i].pid, SIGTERM);
    for (int t = 0; t < 50; t++) {
        int left = 0;
        for (int i = 0; i < n; i++) {
            if (ws[i].pid <= 0) continue;
            int st;
            if (waitpid(ws[i].pid, &st, WNOHANG) == ws[i].pid) {
                lshm_unlink_pid(ws[i].pid);
                ws[i].pid = 0;
            } else left++;
        }
        if (!left) return;
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < n; i++)
        if (ws[i].pid > 0) {
            log_warn("worker pid %d ignored SIGTERM for 5 s; killing it", (int)ws[i].pid);
            kill(ws[i].pid, SIGKILL);
            waitpid(ws[i].pid, NULL, 0);
            lshm_unlink_pid(ws[i].pid);
        }
}

int engd_master_run(const engd_opts *o, const char *self_exe)
{
    char err[256], dir[256];
    if (net_run_dir(o->run_dir, dir, sizeof dir, err, sizeof err) != 0) {
        log_error("%s", err);
        return 1;
    }
    eng_open_info info;
    eng_model *m = eng_open(o->model, (eng_precision)o->precision, &info, err, sizeof err);
    if (!m) {
        log_error("cannot open model %s: %s", o->model, err);
        return 1;
    }
    if (info.converted)
        log_info("segment %s converted from %s in %.1f ms (%llu bytes)", info.name, o->model, info.ms,
                 (unsigned long long)info.seg_bytes);
    else
        log_info("segment %s READY: attached in %.1f ms, no conversion (%llu bytes)", info.name, info.ms,
                 (unsigned long long)info.seg_bytes);
    char seg[64], path[300];
    snprintf(seg, sizeof seg, "%s", info.name);
    net_run_path(dir, "segment", path, sizeof path); /* for engined --attach */
    FILE *sf = fopen(path, "w");
    if (sf) {
        fprintf(sf, "%s\n", seg);
        fclose(sf);
    }
    if (eng_kv_check(m, o->kv, err, sizeof err) != 0) {
        log_error("--kv %s: %s", eng_kv_name(o->kv), err);
        eng_close(m);
        return 1;
    }
    kvp *pools[ENG_KV_KINDS] = { NULL, NULL };
    kvs_spec ks = { .kv = o->kv, .n_ctx = o->n_ctx, .step = engd_chunk_max(o) };
    if (o->kv_pool && kvs_parse(o->kv_pool, &ks, err, sizeof err) == 0 && kvs_enabled(&ks) &&
        kvs_open(m, &ks, 1, pools, err, sizeof err) != 0) {
        log_error("--kv-pool %s: %s", o->kv_pool, err);
        eng_close(m);
        return 1;
    }
    wslot ws[MAX_WORKERS] = {{0}};
    int n = o->n_workers;
    int64_t last_reap = net_now_ms();
    while (!dmn_stop) {
        int64_t now = net_now_ms();
        if (dmn_child || ((pools[0] || pools[1]) && now - last_reap >= 1000)) {
            dmn_child = 0;
            last_reap = now;
            reap(ws, n, now, pools); /* also an attached worker's (engined --attach) death */
        }
        for (int i = 0; i < n && !dmn_stop; i++) {
            if (ws[i].pid > 0 || now < ws[i].next_ms) continue;
            ws[i].pid = spawn(o, self_exe, seg);
            ws[i].started_ms = now;
            if (ws[i].pid > 0) log_info("worker %d started: pid %d", i, (int)ws[i].pid);
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL); /* SIGCHLD interrupts it */
    }
    log_info("stopping %d workers", n);
    stop_all(ws, n);
    kvs_close(pools); /* the pools stay, their cached blocks with them, for the next master */
    eng_close(m);
    log_info("stopped; segment %s stays READY for the next master", seg);
    return 0;
}
