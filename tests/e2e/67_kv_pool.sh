#!/usr/bin/env bash
# 67: the shared KV block pool (--kv-pool, engined/kvsetup.h): the master creates it
# next to the weight segment (0600), every worker attaches it, the master releases a
# worker's references when it is killed with -9, the greedy text is unchanged, and a
# hostile pool (open to others, another uid's, truncated) is refused with a clear error.
# The model is copied into the run directory so that its segment and pool are this
# test's own (removed at the end). Not yet tested: prefix reuse (the forward pass does
# not read the pool yet, issue 19).
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 150
cp "$LLM_SHARED/models/stories260K-f32.gguf" "$RUN/m.gguf"
MODEL=$RUN/m.gguf
seg="" pool=""
kv_cleanup() { [ -n "$seg" ] && "$LLM_BIN/engined" --remove-segment "$seg" >/dev/null 2>&1; e2e_cleanup; }
trap kv_cleanup EXIT

# a bad size is refused before anything starts
if "$LLM_BIN/engined" --model "$MODEL" --kv-pool 12X --run-dir "$RUN" 2>"$RUN/err.txt"; then fail "--kv-pool 12X accepted"; fi
grep -q "^error: --kv-pool '12X': the suffix must be K, M or G" "$RUN/err.txt" || fail "bad size: $(cat "$RUN/err.txt")"

start_pipeline 2 --kv-pool 1M
wait_until 20 '[ "$(status_field workers)" = 2 ]' || fail "2 workers did not register"
seg=$(cat "$RUN/segment")
pool=/dev/shm/llm-kv-${seg#/llm-}
[ -f "$pool" ] || fail "no pool $pool next to segment $seg"
[ "$(stat -c %a "$pool")" = 600 ] || fail "pool mode $(stat -c %a "$pool"), not 600"
grep -q "KV pool /llm-kv-.* created: .* blocks of 16 tokens" "$RUN/engined.log" || fail "master did not create the pool"
wait_until 10 '[ "$(grep -c "attached KV pool" "$RUN/engined.log")" -ge 2 ]' || fail "workers did not attach the pool"

ref=$LLM_SHARED/reference/stories260K-f32/story
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "llmc greedy run failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "greedy output with the pool differs from greedy_text.txt"

# kill -9 of a worker: the master releases its slot, a new one attaches
victim=$(status_field pids | cut -d' ' -f1)
kill -9 "$victim"
wait_until 20 'grep -q "engined\\[.*KV pool /llm-kv-.*: released 1 slot of dead processes" "$RUN/engined.log"' \
    || fail "the master did not reap the dead worker's pool slot"
wait_until 20 '[ "$(grep -c "attached KV pool" "$RUN/engined.log")" -ge 3 ]' || fail "the replacement did not attach the pool"
echo "pool $pool: created 0600, attached by 3 workers, dead worker reaped"

# a restarted master reuses the pool (its cached blocks with it)
$PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1
[ -f "$pool" ] || fail "the pool went away with the master"
start_pipeline 1 --kv-pool 1M
wait_until 20 '[ "$(status_field workers)" = 1 ]' || fail "restart: no worker"
grep -q "KV pool /llm-kv-.* reused" "$RUN/engined.log" || fail "restarted master did not reuse the pool"
$PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1

# hostile pools: refused by the master (open to others, another uid's) and a worker (truncated)
master() { timeout 30 "$LLM_BIN/engined" --model "$MODEL" --workers 1 --kv-pool 1M --run-dir "$RUN" 2>"$RUN/hostile.txt"; }
chmod 644 "$pool"
if master; then fail "master used a pool open to others"; fi
grep -qi "error.*--kv-pool 1M: .*llm-kv-" "$RUN/hostile.txt" || fail "mode 644: $(cat "$RUN/hostile.txt")"
grep -q "644\|mode\|others" "$RUN/hostile.txt" || fail "mode 644 not named: $(cat "$RUN/hostile.txt")"
chmod 600 "$pool"
if [ "$(id -u)" = 0 ]; then
    chown 65534 "$pool"
    if master; then fail "master used another uid's pool"; fi
    grep -qi "error.*--kv-pool 1M: .*llm-kv-" "$RUN/hostile.txt" || fail "other uid: $(cat "$RUN/hostile.txt")"
    chown 0 "$pool"
fi
truncate -s 4096 "$pool"
if timeout 30 "$LLM_BIN/engined" --worker --segment "$seg" --kv-pool 1M --run-dir "$RUN" 2>"$RUN/hostile.txt"; then
    fail "worker used a truncated pool"; fi
grep -q "cannot attach the KV pool: .*llm-kv-" "$RUN/hostile.txt" || fail "truncated: $(cat "$RUN/hostile.txt")"
echo "hostile pools refused: $(grep -o 'cannot attach the KV pool: .*' "$RUN/hostile.txt" | head -c 160)"
echo "PASS $E2E_NAME"
