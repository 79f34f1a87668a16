#!/usr/bin/env bash
# run.sh - every benchmark, one after the other (what `make bench` runs). Output goes to
# the terminal and to bench/out/<name>.txt. Slow: the engine benchmark synthesises a
# TinyLlama-1.1B-shaped Q8_0 model (1.17 GB, cached in $BENCH_DIR, default
# /tmp/llm-bench). The machines are shared and noisy: read the figures as ratios taken
# in the same run, not as absolutes.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export LLM_SHARED=${LLM_SHARED:-$(cd ../shared && pwd)}
mkdir -p bench/out
run() { # name command...
    local name=$1; shift
    echo "== $name"
    "$@" 2>&1 | tee "bench/out/$name.txt"
    echo
}
run bw "$BUILD/bench/bench_bw" 1024 3
run kernels "$BUILD/bench/bench_kernels"
run csum "$BUILD/bench/bench_csum" 1024 5
run engine env BUILD="$BUILD" bash bench/bench_engine.sh
run tokenizer "$BUILD/bench/bench_tok"
run sampler "$BUILD/bench/bench_sampler"
run grammar "$BUILD/bench/bench_grammar"
run quant "$BUILD/bench/bench_quant"
# serving: ours against llama-server when LLAMA_SERVER points at one (same file, same run),
# with the long-prompt case; then the gateway's cost against llmc
run serve python3 bench/bench_serve.py --build "$BUILD" --model "${BENCH_DIR:-/tmp/llm-bench}/tinyllama-1.1b-Q8_0.gguf" \
    --streams 1,8 --tokens 64 --long --reps 2
run gateway env -u LLAMA_SERVER python3 bench/bench_serve.py --build "$BUILD" --model "${BENCH_DIR:-/tmp/llm-bench}/tinyllama-1.1b-Q8_0.gguf" \
    --streams 1,8 --reps 3 --gateway
# serving as CPUs are added: W workers x T threads pinned to W x T CPUs, up to this machine's
run scale env BUILD="$BUILD" bash bench/bench_scale.sh "${BENCH_DIR:-/tmp/llm-bench}/tinyllama-1.1b-Q8_0.gguf"
run restart env BUILD="$BUILD" bash bench/bench_restart.sh "${BENCH_DIR:-/tmp/llm-bench}/tinyllama-1.1b-Q8_0.gguf" 8
