#!/usr/bin/env bash
# 64: admission and back-pressure. One worker with room for 2 sessions gets 6 concurrent
# requests (3x its capacity): the 4 beyond capacity wait in the front door's FIFO queue
# (visible with their positions in `llmc status`) and every request completes with the
# text it gives alone. With tokenizerd --max-requests 3, a 4th concurrent request is
# refused at once with a clear "full" error, and the others still complete.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 240
export LLM_FAULT_STEP_DELAY_MS=3 # each step 3 ms longer: the queue outlasts the status polls on a fast machine
start_pipeline 1 --max-sessions 2
N=300 # with the step delay (at least 0.9 s a round of 2), long enough that the queue is still there when status is asked
prompts=("Once upon a time" "The little dog" "Lily and Tom went to the park" "One day, a big bear" "Sam had a red ball" "The sun was hot")
for i in 0 1 2 3 4 5; do llmc -n $N --temp 0 "${prompts[$i]}" >"$RUN/solo$i.txt" || fail "solo run $i failed"; done
for i in 0 1 2 3 4 5; do llmc -n $N --temp 0 "${prompts[$i]}" >"$RUN/par$i.txt" 2>"$RUN/err$i.txt" & E2E_PIDS+=($!); done
wait_until 20 '[ "$(status_field queued)" -ge 2 ]' || fail "requests beyond capacity are not queued ($(status_field queued))"
"$LLM_BIN/llmc" status --run-dir "$RUN" >"$RUN/status.txt"
grep -q "^  1\. [0-9]* prompt tokens" "$RUN/status.txt" || fail "llmc status shows no queue positions: $(cat "$RUN/status.txt")"
grep -A4 "^queue:" "$RUN/status.txt"
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "a queued request failed: $(cat "$RUN"/err*.txt)"; done
E2E_PIDS=()
for i in 0 1 2 3 4 5; do cmp -s "$RUN/solo$i.txt" "$RUN/par$i.txt" || fail "request $i differs from its solo run"; done
echo "6 requests on a worker of capacity 2: all completed, equal to their solo runs"

$PIPELINE stop --run-dir "$RUN" >/dev/null
start_pipeline 1 --max-sessions 2 --max-requests 3
for i in 0 1 2; do llmc -n $N --temp 0 "${prompts[$i]}" >"$RUN/par$i.txt" 2>"$RUN/err$i.txt" & E2E_PIDS+=($!); done
wait_until 20 '[ "$(status_field queued)" = 1 ]' || fail "third request not queued"
if llmc -n 8 --temp 0 "one too many" >"$RUN/over.txt" 2>"$RUN/over.err"; then fail "a request over --max-requests was admitted"; fi
[ "$(grep -c . "$RUN/over.err")" = 1 ] || fail "refusal is not one line: $(cat "$RUN/over.err")"
grep -q "max-requests" "$RUN/over.err" || fail "refusal does not name the limit: $(cat "$RUN/over.err")"
echo "over the cap: $(cat "$RUN/over.err")"
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "a request failed under the cap: $(cat "$RUN"/err*.txt)"; done
E2E_PIDS=()
for i in 0 1 2; do cmp -s "$RUN/solo$i.txt" "$RUN/par$i.txt" || fail "request $i differs under the cap"; done
echo "PASS $E2E_NAME"
