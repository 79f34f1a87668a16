#!/bin/bash
# bench_engine.sh - the engine's speed on a TinyLlama-1.1B-shaped Q8_0 model, next to
# llama.cpp's figures in $LLM_SHARED/reference/PERF.md and the measured read bandwidth.
#
#   bash bench/bench_engine.sh            # BUILD=build, model cached in $BENCH_DIR
#
# Prompt processing: one 512-token prompt pass (engined --eval, logits of the last
# row). Decode: 128 greedy one-token steps after a 1-token prompt. Each at 1 and 2
# threads, best of $REPS runs. Decode GB/s = weight bytes read per token x tok/s.
# The machine is shared and noisy: compare ratios taken in the same run.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=${LLM_BIN:-$BUILD/bin}
SH=${LLM_SHARED:-../shared}
DIR=${BENCH_DIR:-/tmp/llm-bench}
REPS=${REPS:-2}
MODEL=$DIR/tinyllama-1.1b-Q8_0.gguf
mkdir -p "$DIR"

if [ ! -f "$MODEL" ]; then
    echo "making $MODEL with llmc synth ..."
    "$BIN/llmc" synth --shape tinyllama-1.1b --type Q8_0 \
        --vocab-from "$SH/reference/tokenizer/ggml-vocab-llama-spm.gguf" --seed 1 -o "$MODEL"
fi
# 512 prompt tokens: BOS then a fixed spread of ordinary ids
awk 'BEGIN { print 1; for (i = 1; i < 512; i++) print 100 + (i * 7919) % 31000 }' >"$DIR/p512.txt"
echo 1 >"$DIR/p1.txt"

# build or attach the segment once, outside the timings
"$BIN/engined" --model "$MODEL" --eval "$DIR/p1.txt" -n 2 --threads 2 >/dev/null 2>"$DIR/open.log"
grep -E "built segment|attached READY" "$DIR/open.log" | sed 's/^[^ ]* //'

best() { sort -g | tail -1; }
pp() { # threads -> tok/s
    for r in $(seq "$REPS"); do
        "$BIN/engined" --model "$MODEL" --eval "$DIR/p512.txt" -n 1 --threads "$1" 2>&1 >/dev/null |
            sed -n 's/.*prefill: 512 tokens in .* ms (\([0-9.]*\) tok\/s).*/\1/p'
    done | best
}
tg() { # threads -> "tok/s GB/s"
    for r in $(seq "$REPS"); do
        "$BIN/engined" --model "$MODEL" --eval "$DIR/p1.txt" -n 129 --threads "$1" 2>&1 >/dev/null |
            sed -n 's/.*decode: 128 tokens in .* ms (\([0-9.]*\) tok\/s, \([0-9.]*\) GB\/s.*/\1 \2/p'
    done | sort -g | tail -1
}

BW=$("$BUILD/bench/bench_bw" 1024 3 2>/dev/null || true)
bw1=$(echo "$BW" | sed -n 's/.*1 thread: \([0-9.]*\) GB.*/\1/p')
bw2=$(echo "$BW" | sed -n 's/.*2 threads: \([0-9.]*\) GB.*/\1/p')
declare -A LPP=([1]=23.7 [2]=47.3) LTG=([1]=10.1 [2]=17.2) BWT=([1]=${bw1:-0} [2]=${bw2:-0})

echo
echo "engine on tinyllama-1.1b Q8_0 ($(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), kernels ${LLM_KERNELS:-auto})"
echo
echo "| threads | pp512 tok/s | llama.cpp | ratio | tg128 tok/s | llama.cpp | ratio | decode GB/s | read BW GB/s | % of BW |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for t in 1 2; do
    p=$(pp $t); read -r d g <<<"$(tg $t)"
    awk -v t=$t -v p="$p" -v lp="${LPP[$t]}" -v d="$d" -v ld="${LTG[$t]}" -v g="$g" -v bw="${BWT[$t]}" 'BEGIN {
        printf "| %d | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.1f | %.1f | %.0f%% |\n",
               t, p, lp, p / lp, d, ld, d / ld, g, bw, (bw > 0 ? 100 * g / bw : 0) }'
done
echo
echo "batched decode (one pass over the weights for B sessions), 2 threads:"
"$BUILD/bench/engine" "$MODEL" 2 32
echo
echo "llama.cpp figures: $SH/reference/PERF.md (same model shape, measured on a machine of this kind)."
