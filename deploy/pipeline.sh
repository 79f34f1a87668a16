#!/usr/bin/env bash
# pipeline.sh - start, stop, inspect and restart the local pipeline (samplerd, engined
# master + workers, tokenizerd) in the background. Used by `make run` / `make stop`.
#
#   deploy/pipeline.sh start --model FILE [--workers N] [--run-dir DIR] [--ctx N] [--threads N] [--float]
#                          [--max-sessions N] [--batch-tokens N] [--idle-batch-tokens N] [--kv f16|f32|q8_0] [--kv-pool SIZE] (engined)
#                          [--max-requests N] [--max-per-client N] [--stall-timeout MS] [--worker-wait MS] (tokenizerd)
#                          [--http PORT [--http-host HOST]] [--chat-template NAME]      (gateway, tokenizerd)
#                          [--no-supervise] do not restart daemons that die (default: each runs
#                          under runit's runsv, back within a second; --supervise is the default)
#                          (--threads: per worker, default cores / workers; --http: also the
#                          OpenAI-compatible gateway `llmc serve`, API keys from $LLM_API_KEY)
#   deploy/pipeline.sh stop    [--run-dir DIR]
#   deploy/pipeline.sh status  [--run-dir DIR]
#   deploy/pipeline.sh restart tokenizerd|samplerd|engined|gateway|all [--run-dir DIR]
#
# Binaries come from $LLM_BIN (default: build/bin next to this script's repository).
# The run directory (--run-dir, else $LLM_RUN_DIR, else $XDG_RUNTIME_DIR/llm, else
# /tmp/llm-$UID, mode 0700) holds the sockets, one pid file and one log per daemon
# (<daemon>.pid always holds the daemon's current pid), worker-<pid>.pid for every
# engine worker (attached ones too: stop stops them all), sv/<daemon>/ (the runit
# service directories) and pipeline.conf (the start options, reused by restart). Two
# pipelines with two run directories run side by side.
set -u
umask 077 # logs, pid files and the configuration are for their owner only

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${LLM_BIN:-$here/../build/bin}
DAEMONS="samplerd engined tokenizerd"

die() { echo "pipeline.sh: $*" >&2; exit 1; }

usage() {
    sed -n '5,15p' "${BASH_SOURCE[0]}" | sed 's/^# //'
    exit "${1:-2}"
}

cmd=${1:-}; [ -n "$cmd" ] || usage
shift
component=""
if [ "$cmd" = restart ]; then component=${1:-}; [ -n "$component" ] || usage; shift; fi

MODEL="" WORKERS=${LLM_WORKERS_N:-1} RUN_DIR="" CTX=${LLM_CTX:-0} THREADS=${LLM_THREADS:-} FLOAT=0
MAX_SESSIONS="" BATCH_TOKENS="" IDLE_TOKENS="" KV="" KV_POOL="" MAX_REQUESTS="" MAX_PER_CLIENT="" STALL_TIMEOUT="" WORKER_WAIT="" SUPERVISE=1
HTTP=${LLM_HTTP_PORT:-} HTTP_HOST=${LLM_HTTP_HOST:-127.0.0.1} TEMPLATE=""
while [ $# -gt 0 ]; do
    case $1 in
        --model) MODEL=${2:?--model needs a file}; shift 2 ;;
        --max-sessions) MAX_SESSIONS=${2:?}; shift 2 ;;
        --batch-tokens) BATCH_TOKENS=${2:?}; shift 2 ;;
        --idle-batch-tokens) IDLE_TOKENS=${2:?}; shift 2 ;;
        --kv) KV=${2:?}; shift 2 ;;
        --kv-pool) KV_POOL=${2:?}; shift 2 ;;
        --max-requests) MAX_REQUESTS=${2:?}; shift 2 ;;
        --max-per-client) MAX_PER_CLIENT=${2:?}; shift 2 ;;
        --stall-timeout) STALL_TIMEOUT=${2:?}; shift 2 ;;
        --worker-wait) WORKER_WAIT=${2:?}; shift 2 ;;
        --supervise) SUPERVISE=1; shift ;;
        --no-supervise) SUPERVISE=0; shift ;;
        --workers) WORKERS=${2:?}; shift 2 ;;
        --run-dir) RUN_DIR=${2:?}; shift 2 ;;
        --ctx) CTX=${2:?}; shift 2 ;;
        --threads) THREADS=${2:?}; shift 2 ;;
        --float) FLOAT=1; shift ;;
        --http) HTTP=${2:?--http needs a port}; shift 2 ;;
        --http-host) HTTP_HOST=${2:?}; shift 2 ;;
        --chat-template) TEMPLATE=${2:?}; shift 2 ;;
        -h|--help) usage 0 ;;
        *) die "unknown option '$1' (pipeline.sh --help)" ;;
    esac
done

case $HTTP in *[!0-9]*) die "--http must be a port number, got '$HTTP'" ;; esac
for v in WORKERS CTX; do
    case ${!v} in ''|*[!0-9]*) die "--$(echo "$v" | tr 'A-Z' 'a-z') must be a whole number, got '${!v}'" ;; esac
done
for v in MAX_SESSIONS BATCH_TOKENS IDLE_TOKENS MAX_REQUESTS MAX_PER_CLIENT STALL_TIMEOUT WORKER_WAIT; do
    case ${!v} in '') ;; *[!0-9]*|0*) die "--$(echo "$v" | tr 'A-Z_' 'a-z-') must be a positive whole number, got '${!v}'" ;; esac
done
case $KV in ''|f16|f32|q8_0) ;; *) die "--kv must be f16, f32 or q8_0, got '$KV'" ;; esac
[ "$WORKERS" -ge 1 ] || die "--workers must be at least 1"
# threads per worker: the cores shared evenly between the workers unless told
if [ -z "$THREADS" ]; then
    THREADS=$(( $(nproc 2>/dev/null || echo 1) / WORKERS ))
    [ "$THREADS" -ge 1 ] || THREADS=1
fi

if [ -z "$RUN_DIR" ]; then
    if [ -n "${LLM_RUN_DIR:-}" ]; then RUN_DIR=$LLM_RUN_DIR
    elif [ -n "${XDG_RUNTIME_DIR:-}" ]; then RUN_DIR=$XDG_RUNTIME_DIR/llm
    else RUN_DIR=/tmp/llm-$(id -u); fi
fi
# never through a symlink (chmod would change its target) nor in another user's directory
[ -L "$RUN_DIR" ] && die "run directory $RUN_DIR is a symbolic link; give the real directory"
mkdir -p -m 700 "$RUN_DIR" || die "cannot create run directory $RUN_DIR"
[ -d "$RUN_DIR" ] && [ ! -L "$RUN_DIR" ] || die "run directory $RUN_DIR is not a directory"
[ -O "$RUN_DIR" ] || die "run directory $RUN_DIR belongs to another user"
chmod 700 "$RUN_DIR"
export LLM_RUN_DIR=$RUN_DIR

pid_of() { local f=$RUN_DIR/$1.pid; [ -f "$f" ] && cat "$f"; }
# running PID: the process exists and has not exited. An exited one stays a zombie until
# its parent reaps it, and a daemon started in the background has init for a parent,
# which may reap seconds late: kill -0 alone would wait for that.
running() {
    local s
    kill -0 "$1" 2>/dev/null && s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }
    [ "${s%% *}" != Z ]
}
alive() { local p; p=$(pid_of "$1"); [ -n "$p" ] && running "$p"; }

sv_dir() { echo "$RUN_DIR/sv/$1"; }
supervised() { [ -e "$(sv_dir "$1")/supervise/ok" ] && sv status "$(sv_dir "$1")" >/dev/null 2>&1; }

start_one() {
    local d=$1 args=() dir
    alive "$d" && { echo "$d already running (pid $(pid_of "$d"))"; return 0; }
    case $d in
        samplerd) args=(--run-dir "$RUN_DIR") ;;
        engined) args=(--model "$MODEL" --workers "$WORKERS" --threads "$THREADS" --ctx "$CTX" --run-dir "$RUN_DIR")
                 [ "$FLOAT" = 1 ] && args+=(--float)
                 [ -n "$MAX_SESSIONS" ] && args+=(--max-sessions "$MAX_SESSIONS")
                 [ -n "$BATCH_TOKENS" ] && args+=(--batch-tokens "$BATCH_TOKENS")
                 [ -n "$IDLE_TOKENS" ] && args+=(--idle-batch-tokens "$IDLE_TOKENS")
                 [ -n "$KV" ] && args+=(--kv "$KV")
                 [ -n "$KV_POOL" ] && args+=(--kv-pool "$KV_POOL") ;;
        tokenizerd) args=(--model "$MODEL" --run-dir "$RUN_DIR")
                 [ -n "$MAX_REQUESTS" ] && args+=(--max-requests "$MAX_REQUESTS")
                 [ -n "$MAX_PER_CLIENT" ] && args+=(--max-per-client "$MAX_PER_CLIENT")
                 [ -n "$STALL_TIMEOUT" ] && args+=(--stall-timeout "$STALL_TIMEOUT")
                 [ -n "$WORKER_WAIT" ] && args+=(--worker-wait "$WORKER_WAIT")
                 [ -n "$TEMPLATE" ] && args+=(--chat-template "$TEMPLATE") ;;
        gateway) args=(serve --run-dir "$RUN_DIR" --host "$HTTP_HOST" --port "$HTTP") ;;
    esac
    local exe=$d
    [ "$d" = gateway ] && exe=llmc
    [ -x "$BIN/$exe" ] || die "$BIN/$exe not found: build first (make), or set LLM_BIN"
    rm -f "$RUN_DIR/$d.pid"
    if [ "$SUPERVISE" != 1 ]; then
        nohup "$BIN/$exe" "${args[@]}" >>"$RUN_DIR/$d.log" 2>&1 </dev/null &
        echo $! >"$RUN_DIR/$d.pid"
        return 0
    fi
    # runit's runsv runs ./run and starts it again whenever it ends (at once, or one
    # second after the last start if it died younger than that); ./run writes the pid
    # it is about to exec into $d.pid, so the pid file follows every restart
    command -v runsv >/dev/null && command -v sv >/dev/null ||
        die "runsv/sv not found: install runit (make deps does), or start with --no-supervise"
    dir=$(sv_dir "$d")
    supervised "$d" && stop_one "$d" # a runsv left over, its daemon down: a fresh one
    rm -rf "$dir"
    mkdir -p "$dir"
    {
        echo '#!/usr/bin/env bash'
        printf 'echo $$ >%q\n' "$RUN_DIR/$d.pid"
        printf 'exec %q' "$BIN/$exe"; printf ' %q' "${args[@]}"; printf ' >>%q 2>&1 </dev/null\n' "$RUN_DIR/$d.log"
    } >"$dir/run"
    {
        echo '#!/usr/bin/env bash'
        printf 'echo "$(date -u +%%FT%%T.%%3NZ) runsv WARN %s ended (exit code $1, signal $2)" >>%q\n' "$d" "$RUN_DIR/$d.log"
    } >"$dir/finish"
    chmod 700 "$dir/run" "$dir/finish"
    setsid runsv "$dir" </dev/null >>"$RUN_DIR/$d.log" 2>&1 &
    for i in $(seq 100); do [ -s "$RUN_DIR/$d.pid" ] && break; sleep 0.02; done
}

# Stops a daemon: through sv when runsv supervises it (sv exit: TERM now, KILL after 15 s,
# and runsv exits once it is down), else by its pid file. The waits poll every 50 ms
# (sv -w polls every 0.42 s, which made every stop take seconds).
stop_one() {
    local d=$1 p i
    if supervised "$d"; then
        sv exit "$(sv_dir "$d")" >/dev/null 2>&1
        for i in $(seq 300); do supervised "$d" || break; sleep 0.05; done
        if supervised "$d"; then
            echo "$d ignored SIGTERM for 15 s; killing it" >&2
            sv kill "$(sv_dir "$d")" >/dev/null 2>&1
            for i in $(seq 100); do supervised "$d" || break; sleep 0.05; done
        fi
    fi
    p=$(pid_of "$d") || p=""
    if [ -n "$p" ] && running "$p"; then
        kill -TERM "$p" 2>/dev/null
        for i in $(seq 200); do running "$p" || break; sleep 0.05; done
        running "$p" && { echo "$d (pid $p) ignored SIGTERM for 10 s; killing it" >&2; kill -KILL "$p"; }
    fi
    rm -f "$RUN_DIR/$d.pid"
}

# Stops every engine worker of the run directory (worker-<pid>.pid: the master's, which
# normally go with it, and those added by engined --attach, which no master supervises).
stop_workers() {
    local f p i left=()
    for f in "$RUN_DIR"/worker-*.pid; do
        [ -f "$f" ] || continue
        p=$(cat "$f" 2>/dev/null)
        case $p in ''|*[!0-9]*) rm -f "$f"; continue ;; esac
        # only an engined (a recycled pid may be anything)
        if running "$p" && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q 'engined'; then
            kill -TERM "$p" 2>/dev/null && left+=("$p")
        else
            rm -f "$f"
        fi
    done
    for p in "${left[@]}"; do
        for i in $(seq 100); do running "$p" || break; sleep 0.05; done
        running "$p" && { echo "worker pid $p ignored SIGTERM for 5 s; killing it" >&2; kill -KILL "$p"; }
        rm -f "$RUN_DIR/worker-$p.pid" "/dev/shm/llm-logits-$(id -u)-$p"
    done
}

load_conf() {
    [ -f "$RUN_DIR/pipeline.conf" ] || die "no pipeline.conf in $RUN_DIR: start the pipeline first"
    # shellcheck disable=SC1091
    . "$RUN_DIR/pipeline.conf"
}

# The daemons of this pipeline: the gateway too when it has an HTTP port.
daemons() { echo "$DAEMONS${HTTP:+ gateway}"; }

# Waits until the front door answers and reports the expected number of workers (and
# the gateway answers /health). A daemon that is gone (unsupervised) or restarted 3
# times meanwhile (supervised) fails it.
wait_ready() {
    local want=$1 i out n d p
    declare -A last=() deaths=()
    for i in $(seq 600); do
        for d in $(daemons); do
            p=$(pid_of "$d") || p=""
            if [ "$SUPERVISE" = 1 ]; then
                [ -n "$p" ] && [ "$p" != "${last[$d]:-}" ] && { [ -n "${last[$d]:-}" ] && deaths[$d]=$(( ${deaths[$d]:-0} + 1 )); last[$d]=$p; }
                [ "${deaths[$d]:-0}" -lt 3 ] && continue
            elif alive "$d"; then continue; fi
            echo "pipeline.sh: $d keeps exiting; last lines of $RUN_DIR/$d.log:" >&2
            tail -n 5 "$RUN_DIR/$d.log" >&2
            return 1
        done
        if out=$("$BIN/llmc" status --run-dir "$RUN_DIR" 2>/dev/null); then
            n=$(printf '%s\n' "$out" | sed -n 's/^workers: //p')
            [ "${n:-0}" -ge "$want" ] && { [ -z "$HTTP" ] || curl -sf -o /dev/null "http://$HTTP_HOST:$HTTP/health"; } \
                && return 0
        fi
        sleep 0.2
    done
    echo "pipeline.sh: not ready after 120 s (see $RUN_DIR/*.log)" >&2
    return 1
}

stop_all() {
    for d in gateway tokenizerd engined samplerd; do stop_one "$d"; done
    stop_workers
}

case $cmd in
    start)
        [ -n "$MODEL" ] || die "start needs --model FILE"
        [ -r "$MODEL" ] || die "model $MODEL is not readable"
        MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
        for v in MODEL WORKERS CTX THREADS FLOAT MAX_SESSIONS BATCH_TOKENS IDLE_TOKENS KV MAX_REQUESTS MAX_PER_CLIENT STALL_TIMEOUT WORKER_WAIT SUPERVISE HTTP HTTP_HOST TEMPLATE; do
            printf '%s=%q\n' "$v" "${!v}"
        done >"$RUN_DIR/pipeline.conf"
        for d in $(daemons); do start_one "$d"; done
        wait_ready "$WORKERS" || { [ "$SUPERVISE" = 1 ] && stop_all >/dev/null 2>&1; exit 1; }
        echo "pipeline ready in $RUN_DIR ($WORKERS worker(s), model $(basename "$MODEL"))${HTTP:+; OpenAI API on http://$HTTP_HOST:$HTTP/v1}; logs: $RUN_DIR/*.log"
        ;;
    stop)
        stop_all
        echo "pipeline in $RUN_DIR stopped"
        ;;
    status)
        rc=0
        [ -f "$RUN_DIR/pipeline.conf" ] && load_conf
        for d in $(daemons); do
            if alive "$d"; then how="pid $(pid_of "$d")"
                supervised "$d" && how="$how; runsv: $(sv status "$(sv_dir "$d")" | sed 's/^run: [^:]*: //')"
                echo "$d: running ($how)"
            elif supervised "$d"; then echo "$d: down, runsv restarting it ($(sv status "$(sv_dir "$d")"))"; rc=1
            else echo "$d: not running"; rc=1; fi
        done
        for f in "$RUN_DIR"/worker-*.pid; do
            [ -f "$f" ] && p=$(cat "$f") && running "$p" && echo "engine worker: running (pid $p)"
        done
        "$BIN/llmc" status --run-dir "$RUN_DIR" || rc=1
        exit $rc
        ;;
    restart)
        load_conf
        case $component in
            all) stop_all
                 for d in $(daemons); do start_one "$d"; done ;;
            samplerd|engined|tokenizerd) stop_one "$component"; start_one "$component" ;;
            gateway) [ -n "$HTTP" ] || die "this pipeline was started without --http"
                     stop_one gateway; start_one gateway ;;
            *) die "restart what? tokenizerd, samplerd, engined, gateway or all" ;;
        esac
        wait_ready "$WORKERS" || exit 1
        echo "$component restarted"
        ;;
    *) usage ;;
esac
