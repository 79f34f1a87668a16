#!/bin/bash
# bench_pages.sh - decode with the weight segment in 4 KB pages against 2 MB pages (README:
# huge pages). Needs root: each round remounts /dev/shm with huge=never, then with
# huge=within_size, rebuilds the model's segment under each (a segment keeps the pages it
# was built in) and times `engined --eval -n TOKENS` twice. The mount's huge= option is
# put back as it was at the end, and the segment is removed.
#
#   sudo bash bench/bench_pages.sh MODEL.gguf [ROUNDS] [THREADS] [TOKENS]
set -eu
cd "$(dirname "$0")/.."
BIN=${LLM_BIN:-build/bin}
M=$(realpath "${1:?usage: bench_pages.sh MODEL.gguf [ROUNDS] [THREADS] [TOKENS]}")
ROUNDS=${2:-3} THREADS=${3:-2} TOKENS=${4:-128}
[ "$(id -u)" = 0 ] || { echo "bench_pages.sh: remounting /dev/shm needs root" >&2; exit 2; }
[ -r "$M" ] || { echo "bench_pages.sh: cannot read $M" >&2; exit 2; }
# the option of the mount that is in effect (the last /dev/shm line), never when absent
was=$(awk '$2 == "/dev/shm" {o = $4} END {print o}' /proc/mounts | tr ',' '\n' | sed -n 's/^huge=//p')
was=${was:-never}
TOK=$(mktemp /tmp/llm-pages.XXXXXX)
echo 1 >"$TOK"
segment() { "$BIN/engined" --list-segments | awk -v m="$M" '$NF == m {print $1}'; }
cleanup() {
    s=$(segment); [ -z "$s" ] || "$BIN/engined" --remove-segment "$s" >/dev/null 2>&1 || true
    mount -o remount,huge="$was" /dev/shm
    rm -f "$TOK"
}
trap cleanup EXIT
echo "| round | pages | segment in 2 MB pages | decode tok/s (two runs) |"
echo "|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
    for mode in never within_size; do
        mount -o remount,huge=$mode /dev/shm
        s=$(segment); [ -z "$s" ] || "$BIN/engined" --remove-segment "$s" >/dev/null
        log=$("$BIN/engined" --model "$M" --eval "$TOK" -n 1 --threads "$THREADS" 2>&1)
        huge=$(echo "$log" | sed -n 's/.*INFO segment .*: \([0-9]* of [0-9]* MB\) in 2 MB pages$/\1/p')
        runs=""
        for _ in 1 2; do
            t=$("$BIN/engined" --model "$M" --eval "$TOK" -n "$TOKENS" --threads "$THREADS" --warmup 1 2>&1 |
                sed -n 's/.*INFO decode: .*(\([0-9.]*\) tok\/s.*/\1/p')
            runs="$runs ${t:-?}"
        done
        echo "| $r | $([ $mode = never ] && echo "4 KB" || echo "2 MB") | ${huge:-none} |$runs |"
    done
done
