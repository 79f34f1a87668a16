#!/usr/bin/env bash
# 39: the front door's worker registry against foreign and fake workers (issue 10.5).
# - a worker on another model (engined --attach --model with another vocabulary) is
#   refused with a log line naming both models; one on the same vocabulary (the f16
#   file of the same model) is accepted;
# - fake workers (hostile_client fakeworkers) cannot fill the registry: one connection
#   cycling through 64 worker ids holds one slot; 64 connections of one process hold at
#   most --max-workers-per-host; when they stop beating they expire and the real
#   worker still serves.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 150
start_pipeline 1
lib=${LLM_BUILD:-$LLM_BIN/..}/libcommon.a
build_hostile() {
    cc -std=c11 -D_GNU_SOURCE "$@" -I"$E2E_ROOT/common" -o "$RUN/hostile" "$E2E_ROOT/tests/e2e/hostile_client.c" "$lib" \
        $(pkg-config --cflags --libs libzmq msgpack 2>/dev/null || echo -lzmq -lmsgpackc) -lrt -lm -pthread
}
build_hostile 2>/dev/null || build_hostile -fsanitize=address,undefined || fail "cannot build hostile_client"

# another model's worker: refused, and said so
other=$LLM_SHARED/models/tiny-llama3-Q8_0.gguf
"$LLM_BIN/engined" --attach --model "$other" --run-dir "$RUN" --threads 1 2>"$RUN/other.log" & E2E_PIDS+=($!)
wait_until 60 'grep -q "refusing worker pid .*is not this front door" "$RUN/tokenizerd.log"' \
    || fail "a worker of another model was not refused"
grep -m 1 "refusing worker pid" "$RUN/tokenizerd.log" | sed 's/.*WARN /front door: /'
[ "$(status_field workers)" = 1 ] || fail "the foreign worker was registered"
llmc -n 16 --temp 0 "Once upon a time" >/dev/null || fail "request with a foreign worker around failed"
kill -TERM "${E2E_PIDS[0]}"; wait "${E2E_PIDS[0]}" 2>/dev/null; E2E_PIDS=()
seg=$(grep -o -m 1 '/llm-[0-9]*-[0-9a-f]*' "$RUN/other.log") && "$LLM_BIN/engined" --remove-segment "$seg" >/dev/null 2>&1
# the same vocabulary from another file of the same model: welcome
"$LLM_BIN/engined" --attach --model "$LLM_SHARED/models/stories260K-f16.gguf" --run-dir "$RUN" --threads 1 \
    2>"$RUN/f16.log" & E2E_PIDS+=($!)
wait_until 60 '[ "$(status_field workers)" = 2 ]' || fail "a worker with the same vocabulary was refused"
kill -TERM "${E2E_PIDS[0]}"; wait "${E2E_PIDS[0]}" 2>/dev/null; E2E_PIDS=()
wait_until 10 '[ "$(status_field workers)" = 1 ]' || fail "the f16 worker did not leave"
echo "same vocabulary (stories260K-f16): registered; another vocabulary (tiny-llama3): refused"

# fake workers with the right identity (read from the front door's status)
id=$("$LLM_BIN/llmc" status --json --run-dir "$RUN" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["nv"], d["vid"])')
nv=${id% *} vid=${id#* }
"$RUN/hostile" "ipc://$RUN/workers.sock" fakeworkers 1 64 4 "$nv" "$vid" &
fp=$!
sleep 3
n=$(status_field workers); wait $fp
[ "$n" -le 2 ] || fail "one connection cycling through 64 worker ids holds $((n - 1)) registry slots"
echo "one connection, 64 worker ids: $((n - 1)) slot"
wait_until 5 '[ "$(status_field workers)" = 1 ]' || fail "the fake worker did not expire"
"$RUN/hostile" "ipc://$RUN/workers.sock" fakeworkers 64 1 4 "$nv" "$vid" &
fp=$!
sleep 3
n=$(status_field workers); wait $fp
[ "$n" -le 17 ] || fail "64 connections of one process hold $((n - 1)) registry slots (cap 16)"
grep -q "16 workers from .* already" "$RUN/tokenizerd.log" || fail "no log line for the per-host cap"
echo "64 connections of one process: $((n - 1)) slots (--max-workers-per-host 16)"
wait_until 5 '[ "$(status_field workers)" = 1 ]' || fail "the fake workers did not expire"
ref=$LLM_SHARED/reference/stories260K-f32/story
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "request after the fakes failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "wrong text after the fakes"
echo "the real worker serves after the fakes expired"
echo "PASS $E2E_NAME"
