#!/bin/bash
# bench_serve.sh - the serving benchmark, once through llmc and once through the HTTP
# gateway (`llmc serve`), on the same running pipeline: N concurrent streams, each a
# ~28-token prompt and 64 greedy tokens with ignore_eos (../shared/BENCH.md's serving
# workload). Prints aggregate tok/s (all generated tokens / wall time from the first
# request to the last answer) and mean time to first token for both, and the gateway's
# cost as a ratio. Runs alternate (llmc, gateway, llmc, ...) $REPS times; best of each.
#
#   bash bench/bench_serve.sh [N]        # N streams (default 8)
#   BENCH_MODEL=file.gguf WORKERS=1 THREADS=2 REPS=3 TOKENS=64 bash bench/bench_serve.sh 8
#
# The model defaults to the TinyLlama-1.1B-shaped Q8_0 of bench_engine.sh (made with
# llmc synth when missing). The machine is shared and noisy: read the ratio, which
# comes from runs taken back to back, not the absolute figures.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=${LLM_BIN:-$PWD/$BUILD/bin}
SH=${LLM_SHARED:-../shared}
DIR=${BENCH_DIR:-/tmp/llm-bench}
N=${1:-8}
REPS=${REPS:-3}
TOKENS=${TOKENS:-64}
WORKERS=${WORKERS:-1}
THREADS=${THREADS:-2}
MODEL=${BENCH_MODEL:-$DIR/tinyllama-1.1b-Q8_0.gguf}
mkdir -p "$DIR"
if [ ! -f "$MODEL" ]; then
    echo "making $MODEL with llmc synth ..."
    "$BIN/llmc" synth --shape tinyllama-1.1b --type Q8_0 \
        --vocab-from "$SH/reference/tokenizer/ggml-vocab-llama-spm.gguf" --seed 1 -o "$MODEL"
fi
RUN=$(mktemp -d /tmp/llm-bench-serve.XXXXXX)
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
trap 'LLM_BIN=$BIN bash deploy/pipeline.sh stop --run-dir "$RUN" >/dev/null 2>&1; rm -rf "$RUN"' EXIT
LLM_BIN=$BIN bash deploy/pipeline.sh start --model "$MODEL" --workers "$WORKERS" --threads "$THREADS" \
    --ctx 1024 --run-dir "$RUN" --http "$PORT" >/dev/null

prompt() { echo "Story $1: Once upon a time there was a little robot who lived in a small town by the sea, and every morning it walked to the harbor"; }
now() { date +%s.%N; }

run_llmc() { # -> "tok/s ttft_ms"
    local t0 t1 i
    t0=$(now)
    for i in $(seq "$N"); do
        "$BIN/llmc" --run-dir "$RUN" --json -n "$TOKENS" --temp 0 --ignore-eos "$(prompt "$i")" | tail -n 1 >"$RUN/l$i" &
    done
    wait
    t1=$(now)
    cat "$RUN"/l* | python3 -c 'import json, sys
d = [json.loads(l) for l in sys.stdin]
t0, t1 = float(sys.argv[1]), float(sys.argv[2])
assert len(d) == int(sys.argv[3]) and all(x["done"] for x in d), "an llmc stream failed"
print("%.2f %.1f" % (sum(x["tokens"] for x in d) / (t1 - t0), sum(x["ttft_ms"] for x in d) / len(d)))' "$t0" "$t1" "$N"
    rm -f "$RUN"/l*
}

run_http() { # -> "tok/s ttft_ms"
    local t0 t1 i
    t0=$(now)
    for i in $(seq "$N"); do
        curl -sN -o "$RUN/h$i.sse" -w '%{time_starttransfer}\n' -H 'Content-Type: application/json' --data-binary \
            "{\"prompt\": \"$(prompt "$i")\", \"max_tokens\": $TOKENS, \"temperature\": 0, \"ignore_eos\": true, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" \
            "http://127.0.0.1:$PORT/v1/completions" >"$RUN/t$i" &
    done
    wait
    t1=$(now)
    python3 -c 'import json, sys
t0, t1, n, run = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
toks, ttft = 0, 0.0
for i in range(1, n + 1):
    ev = open("%s/h%d.sse" % (run, i)).read().split("\n\n")
    assert ev[-2] == "data: [DONE]", "a gateway stream failed"
    toks += json.loads(ev[-3][6:])["usage"]["completion_tokens"]
    ttft += float(open("%s/t%d" % (run, i)).read()) * 1000
print("%.2f %.1f" % (toks / (t1 - t0), ttft / n))' "$t0" "$t1" "$N" "$RUN"
    rm -f "$RUN"/h* "$RUN"/t*
}

run_llmc >/dev/null # warm-up (page cache, first prefill)
echo "serving: $N streams x $TOKENS tokens, $(basename "$MODEL"), $WORKERS worker(s) x $THREADS threads," \
     "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| run | llmc tok/s | llmc mean TTFT ms | gateway tok/s | gateway mean TTFT ms | gateway / llmc |"
echo "|---|---|---|---|---|---|"
best_l=0 best_h=0
for r in $(seq "$REPS"); do
    read -r l lt <<<"$(run_llmc)"
    read -r h ht <<<"$(run_http)"
    awk -v r="$r" -v l="$l" -v lt="$lt" -v h="$h" -v ht="$ht" 'BEGIN { printf "| %d | %.2f | %.0f | %.2f | %.0f | %.3f |\n", r, l, lt, h, ht, h / l }'
    best_l=$(awk -v a="$best_l" -v b="$l" 'BEGIN { print (b > a ? b : a) }')
    best_h=$(awk -v a="$best_h" -v b="$h" 'BEGIN { print (b > a ? b : a) }')
done
awk -v l="$best_l" -v h="$best_h" 'BEGIN { printf "| best | %.2f | | %.2f | | %.3f (gateway cost %.1f%%) |\n", l, h, h / l, (1 - h / l) * 100 }'
