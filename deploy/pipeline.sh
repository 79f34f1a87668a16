#!/usr/bin/env bash
# pipeline.sh - start, stop, inspect and restart the local pipeline (samplerd, engined
# master + workers, tokenizerd) in the background. Used by `make run` / `make stop`.
#
#   deploy/pipeline.sh start --model FILE [--workers N] [--run-dir DIR] [--ctx N] [--threads N] [--float]
#                          [--max-sessions N] [--batch-tokens N] [--idle-batch-tokens N] [--kv f16|f32] (engined)
#                          [--max-requests N] [--max-per-client N] [--stall-timeout MS] (tokenizerd)
#                          [--http PORT [--http-host HOST]] [--chat-template NAME]      (gateway, tokenizerd)
#                          [--supervise]    restart any daemon that dies, as systemd would
#                          (--threads: per worker, default cores / workers; --http: also the
#                          OpenAI-compatible gateway `llmc serve`, API keys from $LLM_API_KEY)
#   deploy/pipeline.sh stop    [--run-dir DIR]
#   deploy/pipeline.sh status  [--run-dir DIR]
#   deploy/pipeline.sh restart tokenizerd|samplerd|engined|gateway|all [--run-dir DIR]
#
# Binaries come from $LLM_BIN (default: build/bin next to this script's repository).
# The run directory (--run-dir, else $LLM_RUN_DIR, else $XDG_RUNTIME_DIR/llm, else
# /tmp/llm-$UID, mode 0700) holds the sockets, one pid file and one log per daemon,
# and pipeline.conf (the start options, reused by restart). Two pipelines with two
# run directories run side by side.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${LLM_BIN:-$here/../build/bin}
DAEMONS="samplerd engined tokenizerd"

die() { echo "pipeline.sh: $*" >&2; exit 1; }

usage() {
    sed -n '5,14p' "${BASH_SOURCE[0]}" | sed 's/^# //'
    exit "${1:-2}"
}

cmd=${1:-}; [ -n "$cmd" ] || usage
shift
component=""
if [ "$cmd" = restart ]; then component=${1:-}; [ -n "$component" ] || usage; shift; fi

MODEL="" WORKERS=${LLM_WORKERS_N:-1} RUN_DIR="" CTX=${LLM_CTX:-0} THREADS=${LLM_THREADS:-} FLOAT=0
MAX_SESSIONS="" BATCH_TOKENS="" IDLE_TOKENS="" KV="" MAX_REQUESTS="" MAX_PER_CLIENT="" STALL_TIMEOUT="" SUPERVISE=0
HTTP=${LLM_HTTP_PORT:-} HTTP_HOST=${LLM_HTTP_HOST:-127.0.0.1} TEMPLATE=""
while [ $# -gt 0 ]; do
    case $1 in
        --model) MODEL=${2:?--model needs a file}; shift 2 ;;
        --max-sessions) MAX_SESSIONS=${2:?}; shift 2 ;;
        --batch-tokens) BATCH_TOKENS=${2:?}; shift 2 ;;
        --idle-batch-tokens) IDLE_TOKENS=${2:?}; shift 2 ;;
        --kv) KV=${2:?}; shift 2 ;;
        --max-requests) MAX_REQUESTS=${2:?}; shift 2 ;;
        --max-per-client) MAX_PER_CLIENT=${2:?}; shift 2 ;;
        --stall-timeout) STALL_TIMEOUT=${2:?}; shift 2 ;;
        --supervise) SUPERVISE=1; shift ;;
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
for v in MAX_SESSIONS BATCH_TOKENS IDLE_TOKENS MAX_REQUESTS MAX_PER_CLIENT STALL_TIMEOUT; do
    case ${!v} in '') ;; *[!0-9]*|0*) die "--$(echo "$v" | tr 'A-Z_' 'a-z-') must be a positive whole number, got '${!v}'" ;; esac
done
case $KV in ''|f16|f32) ;; *) die "--kv must be f16 or f32, got '$KV'" ;; esac
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
mkdir -p -m 700 "$RUN_DIR" || die "cannot create run directory $RUN_DIR"
chmod 700 "$RUN_DIR"
export LLM_RUN_DIR=$RUN_DIR

pid_of() { local f=$RUN_DIR/$1.pid; [ -f "$f" ] && cat "$f"; }
alive() { local p; p=$(pid_of "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

start_one() {
    local d=$1 args=()
    alive "$d" && { echo "$d already running (pid $(pid_of "$d"))"; return 0; }
    case $d in
        samplerd) args=(--run-dir "$RUN_DIR") ;;
        engined) args=(--model "$MODEL" --workers "$WORKERS" --threads "$THREADS" --ctx "$CTX" --run-dir "$RUN_DIR")
                 [ "$FLOAT" = 1 ] && args+=(--float)
                 [ -n "$MAX_SESSIONS" ] && args+=(--max-sessions "$MAX_SESSIONS")
                 [ -n "$BATCH_TOKENS" ] && args+=(--batch-tokens "$BATCH_TOKENS")
                 [ -n "$IDLE_TOKENS" ] && args+=(--idle-batch-tokens "$IDLE_TOKENS")
                 [ -n "$KV" ] && args+=(--kv "$KV") ;;
        tokenizerd) args=(--model "$MODEL" --run-dir "$RUN_DIR")
                 [ -n "$MAX_REQUESTS" ] && args+=(--max-requests "$MAX_REQUESTS")
                 [ -n "$MAX_PER_CLIENT" ] && args+=(--max-per-client "$MAX_PER_CLIENT")
                 [ -n "$STALL_TIMEOUT" ] && args+=(--stall-timeout "$STALL_TIMEOUT")
                 [ -n "$TEMPLATE" ] && args+=(--chat-template "$TEMPLATE") ;;
        gateway) args=(serve --run-dir "$RUN_DIR" --host "$HTTP_HOST" --port "$HTTP") ;;
    esac
    local exe=$d
    [ "$d" = gateway ] && exe=llmc
    [ -x "$BIN/$exe" ] || die "$BIN/$exe not found: build first (make), or set LLM_BIN"
    if [ "$SUPERVISE" != 1 ]; then
        nohup "$BIN/$exe" "${args[@]}" >>"$RUN_DIR/$d.log" 2>&1 </dev/null &
        echo $! >"$RUN_DIR/$d.pid"
        return 0
    fi
    # the supervisor: restarts the daemon when it dies (at once; backing off from 50 ms
    # to 2 s when it keeps dying young); $d.pid always holds the daemon's current pid
    rm -f "$RUN_DIR/$d.stop" "$RUN_DIR/$d.pid"
    (
        trap '' HUP
        trap '[ -n "${child:-}" ] && kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; exit 0' TERM INT
        delay=0
        while :; do
            "$BIN/$exe" "${args[@]}" >>"$RUN_DIR/$d.log" 2>&1 </dev/null &
            child=$! born=$(date +%s%3N)
            echo "$child" >"$RUN_DIR/$d.pid"
            wait "$child"; st=$?
            [ -f "$RUN_DIR/$d.stop" ] && exit 0
            if [ $(( $(date +%s%3N) - born )) -lt 1000 ]; then delay=$(( delay < 50 ? 50 : delay * 2 > 2000 ? 2000 : delay * 2 )); else delay=0; fi
            echo "$(date -u +%FT%T.%3NZ) pipeline.sh[$$] WARN $d (pid $child) ended with status $st; restarting it in $delay ms" >>"$RUN_DIR/$d.log"
            [ "$delay" -gt 0 ] && sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
        done
    ) </dev/null >/dev/null 2>&1 &
    echo $! >"$RUN_DIR/$d.sup"
    for i in $(seq 50); do [ -f "$RUN_DIR/$d.pid" ] && break; sleep 0.02; done
}

stop_one() {
    local d=$1 p i s
    if [ -f "$RUN_DIR/$d.sup" ]; then # supervised: the supervisor goes first
        touch "$RUN_DIR/$d.stop"
        s=$(cat "$RUN_DIR/$d.sup")
        kill -TERM "$s" 2>/dev/null
        for i in $(seq 100); do kill -0 "$s" 2>/dev/null || break; sleep 0.1; done
        rm -f "$RUN_DIR/$d.sup"
    fi
    p=$(pid_of "$d") || return 0
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
        kill -TERM "$p" 2>/dev/null
        for i in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$p" 2>/dev/null && { echo "$d (pid $p) ignored SIGTERM for 10 s; killing it" >&2; kill -KILL "$p"; }
    fi
    rm -f "$RUN_DIR/$d.pid"
}

load_conf() {
    [ -f "$RUN_DIR/pipeline.conf" ] || die "no pipeline.conf in $RUN_DIR: start the pipeline first"
    # shellcheck disable=SC1091
    . "$RUN_DIR/pipeline.conf"
}

# The daemons of this pipeline: the gateway too when it has an HTTP port.
daemons() { echo "$DAEMONS${HTTP:+ gateway}"; }

# Waits until the front door answers and reports the expected number of workers (and
# the gateway answers /health).
wait_ready() {
    local want=$1 i out n
    for i in $(seq 600); do
        for d in $(daemons); do
            alive "$d" || { echo "pipeline.sh: $d exited; last lines of $RUN_DIR/$d.log:" >&2
                            tail -n 5 "$RUN_DIR/$d.log" >&2; return 1; }
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

case $cmd in
    start)
        [ -n "$MODEL" ] || die "start needs --model FILE"
        [ -r "$MODEL" ] || die "model $MODEL is not readable"
        MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
        for v in MODEL WORKERS CTX THREADS FLOAT MAX_SESSIONS BATCH_TOKENS IDLE_TOKENS KV MAX_REQUESTS MAX_PER_CLIENT STALL_TIMEOUT SUPERVISE HTTP HTTP_HOST TEMPLATE; do
            printf '%s=%q\n' "$v" "${!v}"
        done >"$RUN_DIR/pipeline.conf"
        for d in $(daemons); do start_one "$d"; done
        wait_ready "$WORKERS" || exit 1
        echo "pipeline ready in $RUN_DIR ($WORKERS worker(s), model $(basename "$MODEL"))${HTTP:+; OpenAI API on http://$HTTP_HOST:$HTTP/v1}; logs: $RUN_DIR/*.log"
        ;;
    stop)
        for d in gateway tokenizerd engined samplerd; do stop_one "$d"; done
        echo "pipeline in $RUN_DIR stopped"
        ;;
    status)
        rc=0
        [ -f "$RUN_DIR/pipeline.conf" ] && load_conf
        for d in $(daemons); do
            if alive "$d"; then echo "$d: running (pid $(pid_of "$d"))"; else echo "$d: not running"; rc=1; fi
        done
        "$BIN/llmc" status --run-dir "$RUN_DIR" || rc=1
        exit $rc
        ;;
    restart)
        load_conf
        case $component in
            all) for d in gateway tokenizerd engined samplerd; do stop_one "$d"; done
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
