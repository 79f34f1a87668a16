#!/usr/bin/env bash
# 67: the shared KV block pool (--kv-pool, engined/kvsetup.h): the master creates it
# next to the weight segment (0600), every worker attaches it, the master releases a
# worker's references when it is killed with -9, the greedy text is unchanged, and a
# hostile pool (open to others, another uid's, truncated) is refused with a clear error.
# Also: a prefix shared between runs (a hit in llmc status), kill -9 mid-stream (text
# exact), a small pool with preemption, and a prompt larger than the pool refused.
# The model is copied into the run directory so that its segment and pool are this
# test's own (removed at the end).
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 240
cp "$LLM_SHARED/models/stories260K-f32.gguf" "$RUN/m.gguf"
MODEL=$RUN/m.gguf
seg="" pool=""
kv_cleanup() { [ -n "$seg" ] && "$LLM_BIN/engined" --remove-segment "$seg" >/dev/null 2>&1; e2e_cleanup; }
trap kv_cleanup EXIT

# a bad size is refused before anything starts
if "$LLM_BIN/engined" --model "$MODEL" --kv-pool 12X --run-dir "$RUN" 2>"$RUN/err.txt"; then fail "--kv-pool 12X accepted"; fi
grep -q "^error: --kv-pool '12X': the suffix must be K, M or G" "$RUN/err.txt" || fail "bad size: $(cat "$RUN/err.txt")"

# each step is slowed by 3 ms (a test hook) so that streams outlast a kill and overlap
export LLM_FAULT_STEP_DELAY_MS=3
PORT=$(free_port)
start_pipeline 2 --kv-pool 16384 --http "$PORT"
wait_until 20 '[ "$(status_field workers)" = 2 ]' || fail "2 workers did not register"
seg=$(cat "$RUN/segment")
pool=/dev/shm/llm-kv-${seg#/llm-}
[ -f "$pool" ] || fail "no pool $pool next to segment $seg"
[ "$(stat -c %a "$pool")" = 600 ] || fail "pool mode $(stat -c %a "$pool"), not 600"
grep -q "KV pool /llm-kv-.* created: 1024 blocks of 16 tokens" "$RUN/engined.log" || fail "master did not create the pool"
wait_until 10 '[ "$(grep -c "attached KV pool" "$RUN/engined.log")" -ge 2 ]' || fail "workers did not attach the pool"

ref=$LLM_SHARED/reference/stories260K-f32/story
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "llmc greedy run failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "greedy output with the pool differs from greedy_text.txt"

wait_until 5 '"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q "^kv pool: 1024 blocks of 16 tokens"' || fail "no kv pool line in status"

# a shared prefix: the second run of a prompt takes its full blocks from the pool
long="$(cat "$ref/prompt.txt") $(cat "$ref/greedy_text.txt") $(cat "$ref/prompt.txt")"
a=$(llmc -n 16 --temp 0 "$long") && b=$(llmc -n 16 --temp 0 "$long") || fail "shared-prefix runs failed"
[ "$a" = "$b" ] || fail "a run from cached blocks gave other text: '$a' vs '$b'"
wait_until 5 '"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q "prefix hits [1-9]"' \
    || fail "no prefix hit reported: $("$LLM_BIN/llmc" status --run-dir "$RUN" | grep kv)"
"$LLM_BIN/llmc" status --json --run-dir "$RUN" | grep -q '"kvrt":[1-9]' || fail "status --json has no kvrt"
"$LLM_BIN/llmc" status --run-dir "$RUN" | grep "^kv pool"
wait_until 10 'curl -s "http://127.0.0.1:$PORT/metrics" | grep -q "^llm_kv_prompt_tokens_reused_total [1-9]"' \
    || fail "/metrics has no KV pool counts: $(curl -s "http://127.0.0.1:$PORT/metrics" | grep llm_kv)"
curl -s "http://127.0.0.1:$PORT/metrics" | grep -q "^llm_kv_pool_blocks 1024" || fail "/metrics: no llm_kv_pool_blocks"
! curl -s "http://127.0.0.1:$PORT/metrics" | grep -q "^llm_kv_ring" || fail "/metrics: ring pool counts without a ring pool"
! "$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q "ring pool" || fail "status: a ring pool line without a ring pool"

# kill -9 of the worker serving a stream: the text is exact; the master releases its
# slot and the adopting worker starts from the published blocks
N=400
llmc -n $N --temp 0 "Once upon a time" >"$RUN/ref.txt" || fail "reference stream failed"
llmc -n $N --temp 0 "Once upon a time" >"$RUN/out.txt" 2>"$RUN/err.txt" & E2E_PIDS+=($!); streamer=$!
victim=""
for t in $(seq 400); do
    if [ "$(cat "$RUN/out.txt" 2>/dev/null | wc -c)" -gt 200 ]; then
        victim=$(status_field busy)
        [ -n "$victim" ] && break
    fi
    sleep 0.01
done
[ -n "$victim" ] || fail "no worker held the stream (too short?)"
reused0=$("$LLM_BIN/llmc" status --json --run-dir "$RUN" | grep -o '"kvrt":[0-9]*' | head -n 1 | cut -d: -f2)
kill -9 "$victim"
wait "$streamer" || fail "the stream failed after the kill: $(cat "$RUN/err.txt")"
cmp -s "$RUN/out.txt" "$RUN/ref.txt" || fail "text after kill -9 differs from the undisturbed run"
wait_until 20 'grep -q "engined\\[.*KV pool /llm-kv-.*: released 1 slot of dead processes" "$RUN/engined.log"' \
    || fail "the master did not reap the dead worker's pool slot"
wait_until 20 '[ "$(grep -c "attached KV pool" "$RUN/engined.log")" -ge 3 ]' || fail "the replacement did not attach the pool"
grep -q "re-dispatching at step" "$RUN/tokenizerd.log" || echo "note: the stream finished before the kill landed"
# the front door saw the worker's process end (ipc: the kernel's pid of the connection)
# and moved the stream at once, not after 1 s of missed heartbeats
grep -q "worker pid $victim is gone (its process ended" "$RUN/tokenizerd.log" \
    || fail "the front door did not see the worker's process end: $(grep "worker pid $victim" "$RUN/tokenizerd.log" | tail -n 2)"
grep -q "worker pid $victim silent for" "$RUN/tokenizerd.log" && fail "the stream waited out the heartbeats"
echo "pool $pool: created 0600, attached by 3 workers, dead worker reaped, stream exact after kill -9"
sleep 1 # the adopting worker's counts reach the front door with its next beats
echo "after the kill (the dead worker's tallies are gone; the adopter's reused positions count):"
"$LLM_BIN/llmc" status --run-dir "$RUN" | grep "^kv pool"

# a restarted master reuses the pool (its cached blocks with it)
$PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1
[ -f "$pool" ] || fail "the pool went away with the master"
start_pipeline 1 --kv-pool 16384
wait_until 20 '[ "$(status_field workers)" = 1 ]' || fail "restart: no worker"
grep -q "KV pool /llm-kv-.* reused" "$RUN/engined.log" || fail "restarted master did not reuse the pool"
$PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1

# a pool of 10 blocks: three concurrent runs that need 7 each (slowed, to overlap) preempt and still give
# their undisturbed text; a prompt larger than the pool fails at once
"$LLM_BIN/engined" --remove-segment "$seg" >/dev/null 2>&1
start_pipeline 1 --kv-pool 160
wait_until 20 '[ "$(status_field workers)" = 1 ]' || fail "small pool: no worker"
prompts=("Once upon a time" "The little dog" "One day, a big bear")
for i in 0 1 2; do llmc -n 100 --temp 0 "${prompts[$i]}" >"$RUN/sref$i.txt" || fail "small pool: run $i alone failed"; done
pids=()
for i in 0 1 2; do llmc -n 100 --temp 0 "${prompts[$i]}" >"$RUN/sout$i.txt" 2>"$RUN/serr$i.txt" & pids+=($!); done
for i in 0 1 2; do wait "${pids[$i]}" || fail "small pool: concurrent run $i failed: $(cat "$RUN/serr$i.txt")"; done
sleep 1
for i in 0 1 2; do cmp -s "$RUN/sout$i.txt" "$RUN/sref$i.txt" || fail "small pool: run $i differs after preemption"; done
"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q "[1-9][0-9]* preemptions" \
    || fail "no preemption counted: $("$LLM_BIN/llmc" status --run-dir "$RUN" | grep kv)"
"$LLM_BIN/llmc" status --run-dir "$RUN" | grep "^kv pool"
huge=$(for i in $(seq 40); do printf 'Once upon a time there was a dog. '; done)
if llmc -n 4 --temp 0 "$huge" >/dev/null 2>"$RUN/err.txt"; then fail "a prompt larger than the pool was served"; fi
grep -q "needs more KV blocks than the whole pool has" "$RUN/err.txt" || fail "too large: $(cat "$RUN/err.txt")"
echo "small pool: 3 concurrent runs exact with preemption; too large a prompt: $(cat "$RUN/err.txt")"
# admission counts blocks: three concurrent prompts of 7 blocks each cannot run side by
# side in 10; the second and third wait in the queue until the first's blocks are free
# (deferred, not preempted: nothing is computed twice), and each gives its text alone
kvjson() { "$LLM_BIN/llmc" status --json --run-dir "$RUN" | grep -o "\"$1\":[0-9]*" | head -n 1 | cut -d: -f2; }
dog=$(for i in $(seq 17); do printf ' there was a dog.'; done)
sleep 0.5 # the last counts reach the front door with the next beats
pre0=$(kvjson kvpre) def0=$(kvjson kvdef)
pids=() # first, so that no block of these prompts is cached yet
for i in 0 1 2; do llmc -n 20 --temp 0 "${prompts[$i]}$dog" >"$RUN/aout$i.txt" 2>"$RUN/aerr$i.txt" & pids+=($!); done
for i in 0 1 2; do wait "${pids[$i]}" || fail "admission: concurrent run $i failed: $(cat "$RUN/aerr$i.txt")"; done
wait_until 5 '[ "$(kvjson kvdef)" -gt "$def0" ]' || fail "admission: no run deferred ($def0 before)"
sleep 0.5
pre1=$(kvjson kvpre) def1=$(kvjson kvdef)
for i in 0 1 2; do llmc -n 20 --temp 0 "${prompts[$i]}$dog" >"$RUN/aref$i.txt" || fail "admission: run $i alone failed"; done
for i in 0 1 2; do cmp -s "$RUN/aout$i.txt" "$RUN/aref$i.txt" || fail "admission: run $i differs"; done
[ "$pre1" = "$pre0" ] || fail "admission: preemptions $pre0 -> $pre1 (a deferred run should not be preempted)"
"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q "[1-9][0-9]* runs deferred for room" || fail "status: no runs deferred"
echo "admission by blocks: 3 runs of ~7 blocks in a 10-block pool exact, $((def1 - def0)) deferred, no preemption"
$PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1

# the same 10 blocks shared by 2 workers: a worker whose one session finds the pool full
# of the other's blocks waits for room (it cannot preempt another worker's sessions)
start_pipeline 2 --kv-pool 160
wait_until 20 '[ "$(status_field workers)" = 2 ]' || fail "small pool, 2 workers: no workers"
pids=()
for i in 0 1 2; do llmc -n 100 --temp 0 "${prompts[$i]}" >"$RUN/wout$i.txt" 2>"$RUN/werr$i.txt" & pids+=($!); done
for i in 0 1 2; do wait "${pids[$i]}" || fail "small pool, 2 workers: run $i failed: $(cat "$RUN/werr$i.txt")"; done
for i in 0 1 2; do cmp -s "$RUN/wout$i.txt" "$RUN/sref$i.txt" || fail "small pool, 2 workers: run $i differs"; done
grep -c "sessions wait for room" "$RUN/engined.log" | sed 's/^/small pool, 2 workers: 3 runs exact; waits for room: /'
$PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1

# hostile pools: refused by the master (open to others, another uid's) and a worker (truncated)
master() { timeout 30 "$LLM_BIN/engined" --model "$MODEL" --workers 1 --kv-pool 16384 --run-dir "$RUN" 2>"$RUN/hostile.txt"; }
chmod 644 "$pool"
if master; then fail "master used a pool open to others"; fi
grep -qi "error.*--kv-pool 16384: .*llm-kv-" "$RUN/hostile.txt" || fail "mode 644: $(cat "$RUN/hostile.txt")"
grep -q "644\|mode\|others" "$RUN/hostile.txt" || fail "mode 644 not named: $(cat "$RUN/hostile.txt")"
chmod 600 "$pool"
if [ "$(id -u)" = 0 ]; then
    chown 65534 "$pool"
    if master; then fail "master used another uid's pool"; fi
    grep -qi "error.*--kv-pool 16384: .*llm-kv-" "$RUN/hostile.txt" || fail "other uid: $(cat "$RUN/hostile.txt")"
    chown 0 "$pool"
fi
truncate -s 4096 "$pool"
if timeout 30 "$LLM_BIN/engined" --worker --segment "$seg" --kv-pool 16384 --run-dir "$RUN" 2>"$RUN/hostile.txt"; then
    fail "worker used a truncated pool"; fi
grep -q "cannot attach the KV pool: .*llm-kv-" "$RUN/hostile.txt" || fail "truncated: $(cat "$RUN/hostile.txt")"
echo "hostile pools refused: $(grep -o 'cannot attach the KV pool: .*' "$RUN/hostile.txt" | head -c 160)"
echo "PASS $E2E_NAME"
