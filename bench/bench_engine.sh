#!/bin/bash
# bench_engine.sh - the engine's speed on TinyLlama-1.1B-shaped Q8_0, Q4_0 and Q4_K_M
# files, side by side with llama.cpp and ik_llama.cpp on the same files in the same run.
#
#   bash bench/bench_engine.sh                  # ours only
#   LLAMA_BENCH=.../llama.cpp/build/bin/llama-bench \
#   IK_LLAMA_BENCH=.../ik_llama.cpp/build/bin/llama-bench bash bench/bench_engine.sh
#
# Files: $BENCH_DIR/tinyllama-1.1b-{Q8_0,Q4_0,Q4_K_M}.gguf (default /tmp/llm-bench), made
# with `llmc synth --seed 2001` when missing (../shared/BENCH.md); Q4_K_M is `llmc quantize`
# of the Q8_0 file (llama.cpp's mix). Ours run the default native segment (4-bit tiles
# for 4-bit files); decode GB/s = the file's bytes read per token (every tensor but
# token_embd, of which a step reads one row) x tok/s, next to bench_bw's read bandwidth.
# PRECISION=int8 runs our widened Q8 layout instead, for comparison. Prompt processing: one
# 512-token prompt pass after an untimed pass of the same prompt (engined --eval --warmup
# 1: weights mapped, scratch and KV cache touched, as llama-bench's warm-up run); decode: 128 greedy one-token steps after a 1-token prompt. Peers:
# `llama-bench -m FILE -p 512 -n 128 -r 3 -t T -fa 0` (its mean of 3). $REPS rounds
# (default 3) of ours and each peer back to back; each column is its best round.
# Threads $THREADS (default "1 2"). Another shape: SHAPE (default tinyllama-1.1b), ARCH and
# VOCAB for llmc synth, e.g. the mixture of experts
#   SHAPE=qwen3moe-a0.6b ARCH=qwen3moe VOCAB=../shared/reference/tokenizer/ggml-vocab-qwen2.gguf \
#   TYPES=Q4_K_M THREADS=2 REPS=1 bash bench/bench_engine.sh
# (~4B parameters, 64 experts, top-8; decode GB/s counts the experts a token reads: the
# expert stacks times used/count). Then pp2048 (Q8_0; the peers' llama-bench -p 2048 -fa 0)
# and each engine's pp2048 over its pp512, and
# batched decode of 1..16 sessions (bench/engine). The machine is shared and noisy:
# compare ratios taken in the same run. Segments this run builds are removed at the end
# (KEEP_SEGMENTS=1 keeps them).
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=${LLM_BIN:-$BUILD/bin}
SH=${LLM_SHARED:-../shared}
DIR=${BENCH_DIR:-/tmp/llm-bench}
REPS=${REPS:-3}
THREADS=${THREADS:-"1 2"}
TYPES=${TYPES:-"Q8_0 Q4_0 Q4_K_M"}
PREC=${PRECISION:-native}
SHAPE=${SHAPE:-tinyllama-1.1b}
ARCH=${ARCH:-llama}
VOCAB=${VOCAB:-$SH/reference/tokenizer/ggml-vocab-llama-spm.gguf}
mkdir -p "$DIR"

awk 'BEGIN { print 1; for (i = 1; i < 512; i++) print 100 + (i * 7919) % 31000 }' >"$DIR/p512.txt"
awk 'BEGIN { print 1; for (i = 1; i < 2048; i++) print 100 + (i * 7919) % 31000 }' >"$DIR/p2048.txt"
echo 1 >"$DIR/p1.txt"

built=()
for ty in $TYPES; do
    f=$DIR/$SHAPE-$ty.gguf
    if [ ! -f "$f" ] && [ "$ty" = Q4_K_M ]; then
        [ -f "$DIR/$SHAPE-Q8_0.gguf" ] || "$BIN/llmc" synth --shape "$SHAPE" --arch "$ARCH" --type Q8_0 \
            --vocab-from "$VOCAB" --seed 2001 -o "$DIR/$SHAPE-Q8_0.gguf"
        "$BIN/llmc" quantize "$DIR/$SHAPE-Q8_0.gguf" "$f" Q4_K_M
    fi
    if [ ! -f "$f" ]; then
        echo "making $f with llmc synth (seed 2001) ..."
        "$BIN/llmc" synth --shape "$SHAPE" --arch "$ARCH" --type "$ty" \
            --vocab-from "$VOCAB" --seed 2001 -o "$f"
    fi
    # build or attach the segment once, outside the timings
    "$BIN/engined" --model "$f" --precision "$PREC" --eval "$DIR/p1.txt" -n 2 --threads 2 >/dev/null 2>"$DIR/open.log"
    grep -E "converted|built segment|attached READY" "$DIR/open.log" | sed 's/^[^ ]* //'
    seg=$(sed -n 's/.*built segment \(\/llm-[0-9a-f-]*\) from.*/\1/p' "$DIR/open.log")
    [ -n "$seg" ] && built+=("$seg")
done

max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "-" || a == "" ? b : b == "-" || b == "" ? a : (a + 0 > b + 0 ? a : b)) }'; }
ours_pp() { # file threads prompt -> tok/s of one run
    "$BIN/engined" --model "$1" --precision "$PREC" --eval "$3" -n 1 --threads "$2" --warmup 1 2>&1 >/dev/null |
        sed -n 's/.*prefill: [0-9]* tokens in .* ms (\([0-9.]*\) tok\/s).*/\1/p'
}
ours_tg() { # file threads -> tok/s of one run
    "$BIN/engined" --model "$1" --precision "$PREC" --eval "$DIR/p1.txt" -n 129 --threads "$2" 2>&1 >/dev/null |
        sed -n 's/.*decode: 128 tokens in .* ms (\([0-9.]*\) tok\/s.*/\1/p'
}
# llama-bench -o csv on stdin -> for each PROMPT:GEN, the mean tok/s of that test (its -r 3), or -
bench_ts() {
    python3 -c '
import csv, sys
ts = {(r["n_prompt"], r["n_gen"]): "%.1f" % float(r["avg_ts"]) for r in csv.DictReader(sys.stdin)}
print(" ".join(ts.get(tuple(a.split(":")), "-") for a in sys.argv[1:]))' "$@"
}
# the peer's "pp512 tg128", or "- -" without the binary
peer() { # binary file threads
    if [ -z "$1" ] || [ ! -x "$1" ]; then echo "- -"; return; fi
    "$1" -m "$2" -p 512 -n 128 -r 3 -t "$3" -fa 0 -o csv 2>/dev/null | bench_ts 512:0 0:128
}
peer_pp() { # binary file threads prompt-tokens -> the peer's tok/s for that prompt, or -
    if [ -z "$1" ] || [ ! -x "$1" ]; then echo "-"; return; fi
    "$1" -m "$2" -p "$4" -n 0 -r 3 -t "$3" -fa 0 -o csv 2>/dev/null | bench_ts "$4:0"
}
# awk: the faster of two figures and a ratio, "-" standing for a missing one
RATIO_AWK='function best(a, b) { return a == "-" ? b : b == "-" ? a : (a + 0 > b + 0 ? a : b) }
           function ratio(x, y) { return x == "-" || y == "-" ? "-" : sprintf("%.2f", x / y) }'

echo
echo "engine on $SHAPE ($(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), kernels ${LLM_KERNELS:-auto}, precision $PREC)"
echo "ratio = ours / the faster peer"
echo
echo "| file | threads | pp512 ours | llama.cpp | ik_llama.cpp | ratio | tg128 ours | llama.cpp | ik_llama.cpp | ratio | decode GB/s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
# bytes a decoded token reads: every tensor but token_embd (unless it is the tied output),
# expert stacks (_exps) times used/count
read_bytes() { "$BIN/llmc" inspect "$1" --tensors | awk '$1 == "experts" { f = $3 / ($2 + 0) }
    $1 == "output.weight" { o = 1 } $1 == "token_embd.weight" { te = $NF }
    $1 != "token_embd.weight" && $NF ~ /^[0-9]+$/ { s += ($1 ~ /_exps\./ && f ? f : 1) * $NF } END { print s + (o ? 0 : te) }'; }
declare -A PP512 LP512 IP512
for ty in $TYPES; do
    f=$DIR/$SHAPE-$ty.gguf
    for t in $THREADS; do
        # $REPS rounds of ours, llama.cpp, ik_llama.cpp back to back; the best of each
        p=- g=- lp=- lg=- ip=- ig=-
        for r in $(seq "$REPS"); do
            p=$(max "$p" "$(ours_pp "$f" "$t" "$DIR/p512.txt")"); g=$(max "$g" "$(ours_tg "$f" "$t")")
            read -r a b <<<"$(peer "${LLAMA_BENCH:-}" "$f" "$t")"; lp=$(max "$lp" "$a"); lg=$(max "$lg" "$b")
            read -r a b <<<"$(peer "${IK_LLAMA_BENCH:-}" "$f" "$t")"; ip=$(max "$ip" "$a"); ig=$(max "$ig" "$b")
        done
        PP512[$ty.$t]=$p LP512[$ty.$t]=$lp IP512[$ty.$t]=$ip
        awk -v ty="$ty" -v t="$t" -v p="$p" -v lp="$lp" -v ip="$ip" -v g="$g" -v lg="$lg" -v ig="$ig" -v rb="$(read_bytes "$f")" "$RATIO_AWK"'
            BEGIN { bp = best(lp, ip); bg = best(lg, ig)
                    printf "| %s | %d | %.1f | %s | %s | %s | %.1f | %s | %s | %s | %.1f |\n",
                           ty, t, p, lp, ip, ratio(p, bp), g, lg, ig, ratio(g, bg), g * rb / 1e9 }'
    done
done
if [[ " $TYPES " == *" Q8_0 "* && $SHAPE == tinyllama-1.1b ]]; then
    echo
    echo "| file | threads | pp2048 ours | llama.cpp | ik_llama.cpp | ratio | pp2048 / pp512: ours | llama.cpp | ik_llama.cpp |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for t in $THREADS; do
        f=$DIR/tinyllama-1.1b-Q8_0.gguf p2=- l2=- i2=-
        for r in $(seq "$REPS"); do
            p2=$(max "$p2" "$(ours_pp "$f" "$t" "$DIR/p2048.txt")")
            l2=$(max "$l2" "$(peer_pp "${LLAMA_BENCH:-}" "$f" "$t" 2048)")
            i2=$(max "$i2" "$(peer_pp "${IK_LLAMA_BENCH:-}" "$f" "$t" 2048)")
        done
        awk -v t="$t" -v p="$p2" -v l="$l2" -v i="$i2" -v p5="${PP512[Q8_0.$t]}" -v l5="${LP512[Q8_0.$t]}" \
            -v i5="${IP512[Q8_0.$t]}" "$RATIO_AWK"'
            BEGIN { printf "| Q8_0 | %d | %.1f | %s | %s | %s | %s | %s | %s |\n", t, p, l, i, ratio(p, best(l, i)),
                           ratio(p, p5), ratio(l, l5), ratio(i, i5) }'
    done
    echo
    echo "batched decode (one pass over the weights for B sessions), Q8_0, 2 threads:"
    "$BUILD/bench/engine" "$DIR/tinyllama-1.1b-Q8_0.gguf" 2 32
fi
echo
# read bandwidth up to the most threads asked; many cores have a large L3: a larger buffer
mt=$(printf '%s\n' $THREADS | sort -n | tail -1)
[ -x "$BUILD/bench/bench_bw" ] && "$BUILD/bench/bench_bw" $((mt > 2 ? 4096 : 512)) 3 $((mt > 2 ? mt : 2))
if [ "${KEEP_SEGMENTS:-0}" != 1 ]; then
    for s in "${built[@]}"; do "$BIN/engined" --remove-segment "$s" >/dev/null 2>&1 || true; done
fi
