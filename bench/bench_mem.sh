#!/bin/bash
# bench_mem.sh - what a segment costs: its bytes against the file's tensor bytes, and the
# memory of N workers attached to it (their Pss of the segment mapping adds up to one
# copy; Rss of each is the whole segment once warmed).
#
#   bash bench/bench_mem.sh FILE.gguf [WORKERS] [PRECISION]
#
# Starts `engined --model FILE --workers N --precision P` in a scratch run directory
# (no front door: workers attach, warm their pages and wait), reads /proc/PID/smaps of
# every worker after the pages are in, stops it. Segments this run builds are removed.
set -eu
cd "$(dirname "$0")/.."
BIN=${LLM_BIN:-build/bin}
F=$1 N=${2:-4} P=${3:-native}
RUN=$(mktemp -d /tmp/llm-mem.XXXXXX)
trap 'kill $(cat "$RUN"/engined.pid 2>/dev/null) 2>/dev/null; sleep 1; rm -rf "$RUN"' EXIT
tensor_bytes=$("$BIN/llmc" inspect "$F" | sed -n 's/^total size *\([0-9]*\) bytes of tensor data.*/\1/p')
"$BIN/engined" --model "$F" --workers "$N" --precision "$P" --run-dir "$RUN" --threads 1 \
    >"$RUN/engined.log" 2>&1 &
echo $! >"$RUN/engined.pid"
for _ in $(seq 600); do
    [ "$(grep -c "attached segment" "$RUN/engined.log" || true)" -ge "$N" ] && break
    sleep 0.5
done
seg=$(sed -n 's/.*INFO segment \(\/llm-[0-9a-f-]*\) \(READY\|converted\).*/\1/p' "$RUN/engined.log" | head -n 1)
seg_bytes=$(sed -n 's/.*INFO segment .* (\([0-9]*\) bytes)$/\1/p' "$RUN/engined.log" | head -n 1)
pids=$(pgrep -f "engined --worker --segment $seg" || true)
sleep "${WARM_S:-8}" # the workers' background page warm-up
tp=0 tr=0
for p in $pids; do
    read -r pss rss < <(awk -v s="/dev/shm$seg" '
        /^[0-9a-f]+-[0-9a-f]+ / { in_seg = index($0, s) > 0 }
        in_seg && /^Pss:/ { pss += $2 } in_seg && /^Rss:/ { rss += $2 }
        END { print pss + 0, rss + 0 }' "/proc/$p/smaps")
    tp=$((tp + pss)) tr=$((tr + rss))
    echo "worker $p: segment Rss $((rss / 1024)) MiB, Pss $((pss / 1024)) MiB"
done
awk -v f="$F" -v p="$P" -v n="$(echo $pids | wc -w)" -v tb="$tensor_bytes" -v sb="$seg_bytes" -v tp="$tp" -v tr="$tr" 'BEGIN {
    printf "%s (%s): file tensors %.1f MB, segment %.1f MB (%.3fx); %d workers: Pss sum %.1f MB (%.2f copies), Rss sum %.1f MB\n",
        f, p, tb / 1e6, sb / 1e6, sb / tb, n, tp * 1024 / 1e6, tp * 1024 / sb, tr * 1024 / 1e6 }'
if grep -q "INFO segment .* converted from" "$RUN/engined.log" && [ "${KEEP_SEGMENTS:-0}" != 1 ]; then
    kill "$(cat "$RUN/engined.pid")" 2>/dev/null || true
    sleep 1
    "$BIN/engined" --remove-segment "$seg" >/dev/null 2>&1 || true
fi
