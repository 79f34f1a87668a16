#!/usr/bin/env bash
# 62: a worker that keeps beating but makes no progress is declared dead. Its compute
# thread is frozen by LLM_FAULT_STALL_STEP=1 (a test hook: the first step never runs)
# while its I/O thread beats on; after --stall-timeout the front door declares it dead,
# `llmc status` shows it STALLED, and its session waits in the queue until a healthy
# worker is attached, which serves it with the uninterrupted text.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
ref=$LLM_SHARED/reference/stories260K-f32/story
LLM_FAULT_STALL_STEP=1 start_pipeline 1 --stall-timeout 1500
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/out.txt" 2>"$RUN/err.txt" & E2E_PIDS+=($!)
wait_until 20 'grep -q "declared dead" "$RUN/tokenizerd.log"' || fail "the frozen worker was not declared dead"
grep "declared dead" "$RUN/tokenizerd.log" | sed 's/.*WARN /front door: /'
"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q STALLED || fail "llmc status does not show the stalled worker"
[ "$(status_field queued)" = 1 ] || fail "the session is not back in the queue ($(status_field queued) queued)"
"$LLM_BIN/engined" --attach --run-dir "$RUN" >"$RUN/attach.log" 2>&1 & E2E_PIDS+=($!)
wait "${E2E_PIDS[0]}" || fail "the request failed: $(cat "$RUN/err.txt")"
cmp -s "$RUN/out.txt" "$ref/greedy_text.txt" || fail "text after the move differs from the uninterrupted run"
grep -q "worker pid .* purged" "$RUN/tokenizerd.log" && fail "a beating worker was purged for silence"
echo "a frozen but beating worker was declared dead after the stall timeout; its session finished elsewhere"
echo "PASS $E2E_NAME"
