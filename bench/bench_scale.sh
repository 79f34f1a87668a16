#!/bin/bash
# bench_scale.sh - how serving scales with CPUs: the same STREAMS streams through the
# pipeline with W workers x T threads, pinned (taskset) to the first W*T CPUs, and
# llama-server (and ik_llama.cpp's) pinned to the same CPUs with -t W*T, in the same run.
#
#   bash bench/bench_scale.sh MODEL.gguf                    # configs up to this machine's CPUs
#   CONFIGS="1x1 1x2 2x1 1x4 4x1" bash bench/bench_scale.sh MODEL.gguf
#   LLAMA_SERVER=.../llama-server IK_LLAMA_SERVER=.../llama-server bash bench/bench_scale.sh ...
#
# CONFIGS: WxT pairs (default: for C = 1, 2, 4, ... up to the CPUs this shell may use,
# 1xC, then 2x(C/2) and 4x(C/4) where C >= 4). The peers run once per CPU count, beside
# the 1xC config; PEER_CPUS (default: every count) limits them to the counts it lists. STREAMS (default 16) streams of TOKENS (default 64) greedy tokens after
# a ~28-token prompt (bench_serve.py's workload), REPS (default 1) runs each, best kept.
# Per row: aggregate tok/s, tok/s per CPU, the efficiency (aggregate / (CPUs x the 1x1
# aggregate)), mean time to first token, and the faster peer's aggregate at that CPU count
# with ours / it. Figures as JSON under $OUT_DIR (default a temporary folder) too.
# The machines are shared and noisy: read ratios taken in one run.
set -eu
cd "$(dirname "$0")/.."
model=${1:?usage: bench_scale.sh MODEL.gguf}
BUILD=${BUILD:-build}
STREAMS=${STREAMS:-16}
TOKENS=${TOKENS:-64}
REPS=${REPS:-1}
ncpu=$(nproc)
if [ -z "${CONFIGS:-}" ]; then
    CONFIGS=""
    for ((c = 1; c <= ncpu; c *= 2)); do
        CONFIGS+=" 1x$c"
        ((c >= 4)) && CONFIGS+=" 2x$((c / 2)) 4x$((c / 4))"
    done
fi
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/llm-scale.XXXXXX)}
mkdir -p "$OUT_DIR"
python=$(command -v python3)

echo "serving scale on $(basename "$model"): $STREAMS streams x $TOKENS tokens, $(date -u +%FT%TZ)," \
    "$ncpu CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"
echo
echo "| workers x threads | CPUs | aggregate tok/s | per CPU | efficiency | TTFT mean s | faster peer tok/s | ours / peer |"
echo "|---|---|---|---|---|---|---|---|"
base=""
declare -A peer_done
for cfg in $CONFIGS; do
    w=${cfg%x*} t=${cfg#*x}
    c=$((w * t))
    if ((c > ncpu)); then
        echo "| $w x $t | $c | skipped: $ncpu CPUs here | | | | | |"
        continue
    fi
    js=$OUT_DIR/scale-${w}x$t.json
    env_peers=()
    if [ -z "${peer_done[$c]:-}" ] && [ "$w" = 1 ] && [[ -z "${PEER_CPUS:-}" || " $PEER_CPUS " == *" $c "* ]]; then
        peer_done[$c]=1
    else
        env_peers=(-u LLAMA_SERVER -u IK_LLAMA_SERVER)
    fi
    if ! env "${env_peers[@]}" taskset -c "0-$((c - 1))" "$python" bench/bench_serve.py --build "$BUILD" \
        --model "$model" --streams "$STREAMS" --tokens "$TOKENS" --workers "$w" --threads "$t" \
        --reps "$REPS" --json "$js" >"$OUT_DIR/scale-${w}x$t.log" 2>&1; then
        echo "| $w x $t | $c | failed: $(grep -m1 -E 'ERRORS|Error|error' "$OUT_DIR/scale-${w}x$t.log" | cut -c1-120) | | | | | |"
        continue
    fi
    read -r agg ttft peer <<<"$("$python" -c '
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if not r.get("long")]
ours = [r for r in rows if r["server"] == "ours"][0]
peers = [r["agg_tps"] for r in rows if r["server"] != "ours"]
print("%.1f %.2f %s" % (ours["agg_tps"], ours["ttft_mean"], "%.1f" % max(peers) if peers else "-"))' "$js")"
    [ -z "$base" ] && [ "$c" = 1 ] && base=$agg
    awk -v w="$w" -v t="$t" -v c="$c" -v a="$agg" -v b="$base" -v f="$ttft" -v p="$peer" 'BEGIN {
        printf "| %d x %d | %d | %.1f | %.1f | %s | %.2f | %s | %s |\n", w, t, c, a, a / c,
               b == "" ? "-" : sprintf("%.2f", a / (c * b)), f, p, p == "-" ? "-" : sprintf("%.2fx", a / p) }'
done
echo
echo "figures: $OUT_DIR"
