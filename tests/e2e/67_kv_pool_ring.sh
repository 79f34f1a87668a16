#!/usr/bin/env bash
# 67_kv_pool_ring: --kv-pool with a model that has sliding-window layers (gemma3, window
# 6, tests/data): the master creates a ring pool ("-ring", 0600) beside the whole one,
# both are attached by every worker, a run from a shared prefix takes blocks of both (a
# hit in llmc status) and gives the text of the run without a pool, kill -9 of the
# worker serving a stream leaves the text exact (the adopter starts from the published
# blocks, the last window's ring blocks among them), llmc status and /metrics count the
# two pools apart, and engined --remove-segment takes both pools away with the segment.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
cp "$(dirname "$0")/../data/gemma3-tiny-Q8_0/gemma3-tiny-Q8_0.gguf" "$RUN/m.gguf"
MODEL=$RUN/m.gguf
seg=""
kv_cleanup() { [ -n "$seg" ] && "$LLM_BIN/engined" --remove-segment "$seg" >/dev/null 2>&1; e2e_cleanup; }
trap kv_cleanup EXIT
export E2E_CTX=512

long="Once upon a time there was a little girl who lived in a village near the forest, and every day she"
N=400
start_pipeline 1
wait_until 20 '[ "$(status_field workers)" = 1 ]' || fail "no worker without a pool"
seg=$(cat "$RUN/segment")
llmc -n 24 --temp 0 "$long" >"$RUN/ref_long.txt" || fail "run without a pool failed"
llmc -n $N --temp 0 "Once upon a time" >"$RUN/ref.txt" || fail "stream without a pool failed"
$PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1

export LLM_FAULT_STEP_DELAY_MS=10 # streams outlast a kill
PORT=$(free_port)
start_pipeline 2 --kv-pool 2048 --http "$PORT"
wait_until 20 '[ "$(status_field workers)" = 2 ]' || fail "2 workers did not register"
whole=/dev/shm/llm-kv-${seg#/llm-} ring=/dev/shm/llm-kv-${seg#/llm-}-ring
for f in "$whole" "$ring"; do
    [ -f "$f" ] || fail "no pool $f next to segment $seg"
    [ "$(stat -c %a "$f")" = 600 ] || fail "pool $f mode $(stat -c %a "$f"), not 600"
done
grep -q "KV pool /llm-kv-.*-ring created: [0-9]* blocks of 16 tokens" "$RUN/engined.log" || fail "no ring pool created"
nw=$(sed -n 's/.*KV pool \/llm-kv-[^ ]*[0-9a-f] created: \([0-9]*\) blocks.*/\1/p' "$RUN/engined.log" | head -1)
nr=$(sed -n 's/.*KV pool \/llm-kv-.*-ring created: \([0-9]*\) blocks.*/\1/p' "$RUN/engined.log" | head -1)
[ -n "$nw" ] && [ -n "$nr" ] || fail "pool sizes not logged: whole '$nw', ring '$nr'"
wait_until 10 '[ "$(grep -c "attached KV pool (ring layers)" "$RUN/engined.log")" -ge 2 ]' \
    || fail "workers did not attach the ring pool"

a=$(llmc -n 24 --temp 0 "$long") && b=$(llmc -n 24 --temp 0 "$long") || fail "shared-prefix runs failed"
[ "$a" = "$(cat "$RUN/ref_long.txt")" ] || fail "pooled run differs from the run without a pool: '$a'"
[ "$a" = "$b" ] || fail "a run from cached blocks gave other text: '$a' vs '$b'"
wait_until 5 '"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q "prefix hits [1-9]"' \
    || fail "no prefix hit reported: $("$LLM_BIN/llmc" status --run-dir "$RUN" | grep kv)"
"$LLM_BIN/llmc" status --run-dir "$RUN" | grep "^kv pool"
# each pool's blocks on their own: the whole pool's in kvb, the ring pool's in kvrb, and
# the finished runs' published blocks cached in both
wait_until 5 '"$LLM_BIN/llmc" status --run-dir "$RUN" |
    grep -q "^kv pool: $nw blocks of 16 tokens, 0 in use, [1-9][0-9]* cached; ring pool (sliding-window layers): $nr blocks, 0 in use, [1-9][0-9]* cached;"' \
    || fail "status does not count the pools apart: $("$LLM_BIN/llmc" status --run-dir "$RUN" | grep "^kv")"
"$LLM_BIN/llmc" status --json --run-dir "$RUN" | grep -q "\"kvrb\":$nr" || fail "status --json has no kvrb $nr"
# the gateway's figures are its last poll of the front door's status: they may lag it
wait_until 5 'curl -s "http://127.0.0.1:$PORT/metrics" | grep -q "^llm_kv_ring_blocks_cached [1-9]"' \
    || fail "/metrics: no cached ring blocks"
m=$(curl -s "http://127.0.0.1:$PORT/metrics")
echo "$m" | grep -q "^llm_kv_pool_blocks $nw\$" || fail "/metrics: llm_kv_pool_blocks is not the whole pool's $nw"
echo "$m" | grep -q "^llm_kv_ring_pool_blocks $nr\$" || fail "/metrics: no llm_kv_ring_pool_blocks $nr"

llmc -n $N --temp 0 "Once upon a time" >"$RUN/out.txt" 2>"$RUN/err.txt" & E2E_PIDS+=($!); streamer=$!
victim=""
for t in $(seq 400); do
    if [ "$(cat "$RUN/out.txt" 2>/dev/null | wc -c)" -gt 100 ]; then
        victim=$(status_field busy)
        [ -n "$victim" ] && break
    fi
    sleep 0.01
done
[ -n "$victim" ] || fail "no worker held the stream (too short?)"
kill -9 "$victim"
wait "$streamer" || fail "the stream failed after the kill: $(cat "$RUN/err.txt")"
cmp -s "$RUN/out.txt" "$RUN/ref.txt" || fail "text after kill -9 differs from the undisturbed run"
wait_until 20 'grep -q "engined\\[.*KV pool /llm-kv-.*-ring: released 1 slot of dead processes" "$RUN/engined.log"' \
    || fail "the master did not reap the dead worker's ring pool slot"
grep -q "re-dispatching at step" "$RUN/tokenizerd.log" || echo "note: the stream finished before the kill landed"
$PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1

"$LLM_BIN/engined" --remove-segment "$seg" >"$RUN/rm.txt" 2>&1 || fail "remove-segment failed: $(cat "$RUN/rm.txt")"
[ ! -e "$whole" ] && [ ! -e "$ring" ] || fail "pools left after --remove-segment: $(cat "$RUN/rm.txt")"
seg=""
echo "ring pool beside the whole one: 0600, counted apart in status and /metrics, shared prefix hit with the same text, stream exact after kill -9, removed with the segment"
