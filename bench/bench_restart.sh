#!/usr/bin/env bash
# bench_restart.sh - how fast a supervised front door is serving again after kill -9:
# a pipeline is started with pipeline.sh --supervise, tokenizerd is killed REPS times,
# and each time the script measures, from the kill, when the new front door answers
# `llmc status` and when a 1-token request completes (a worker has re-registered).
#
#   bash bench/bench_restart.sh [MODEL] [REPS]     (default: TinyLlama-1.1B shape Q8_0)
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export LLM_BIN=${LLM_BIN:-$PWD/$BUILD/bin}
DIR=${BENCH_DIR:-/tmp/llm-bench}
MODEL=${1:-$DIR/tinyllama-1.1b-Q8_0.gguf}
REPS=${2:-10}
[ -f "$MODEL" ] || { echo "no model $MODEL (bench/bench_engine.sh makes it)" >&2; exit 1; }
RUN=$(mktemp -d /tmp/llm-bench-restart.XXXXXX)
chmod 700 "$RUN"
trap 'bash deploy/pipeline.sh stop --run-dir "$RUN" >/dev/null 2>&1; rm -rf "$RUN"' EXIT
bash deploy/pipeline.sh start --model "$MODEL" --run-dir "$RUN" --supervise --ctx 512 >/dev/null
"$LLM_BIN/llmc" --run-dir "$RUN" -n 1 --temp 0 "Hi" >/dev/null
ms() { date +%s%3N; }
for i in $(seq "$REPS"); do
    sleep 1.1 # runsv starts a daemon at most once a second: let the last one age past that
    old=$(cat "$RUN/tokenizerd.pid")
    kill -9 "$old"; t0=$(ms)
    until [ "$(cat "$RUN/tokenizerd.pid" 2>/dev/null)" != "$old" ] && "$LLM_BIN/llmc" status --run-dir "$RUN" >/dev/null 2>&1; do sleep 0.005; done
    t1=$(ms)
    until "$LLM_BIN/llmc" --run-dir "$RUN" -n 1 --temp 0 "Hi" >/dev/null 2>&1; do sleep 0.005; done
    t2=$(ms)
    echo "$((t1 - t0)) $((t2 - t0))"
done >"$RUN/times.txt"
a=$(cut -d' ' -f1 "$RUN/times.txt" | sort -n) b=$(cut -d' ' -f2 "$RUN/times.txt" | sort -n)
med() { sed -n "$(( ($(echo "$1" | wc -l) + 1) / 2 ))p" <<<"$1"; }
echo "front door restart (kill -9 -> serving), $REPS runs, $(basename "$MODEL"), load $(cut -d' ' -f1 /proc/loadavg):"
echo "  answers llmc status:         median $(med "$a") ms, max $(tail -n 1 <<<"$a") ms"
echo "  a 1-token request completes: median $(med "$b") ms, max $(tail -n 1 <<<"$b") ms"
