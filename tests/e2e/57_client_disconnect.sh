#!/usr/bin/env bash
# 57: a client that disconnects mid-stream (kill -9, no goodbye) frees its session on
# the worker: the front door notices the missing keep-alive pings and tells the worker
# to drop it; status then shows 0 active requests and 0 worker sessions. A client that
# is interrupted (SIGINT) cancels at once.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
export LLM_FAULT_STEP_DELAY_MS=3 # each step 3 ms longer: the streams outlast the kills on a fast machine
start_pipeline 1
"$LLM_BIN/llmc" -n 1800 --temp 0 "Once upon a time" >"$RUN/out.txt" 2>/dev/null & pid=$!
E2E_PIDS+=($pid)
wait_until 30 '[ -s "$RUN/out.txt" ]' || fail "stream did not start"
kill -9 "$pid"
t0=$(now_ms)
wait "$pid" 2>/dev/null
wait_until 30 '[ "$(status_field active)" = 0 ] && [ "$(status_field sessions)" = 0 ]' \
    || fail "the session of the dead client was not freed"
echo "killed client's session freed after $(( $(now_ms) - t0 )) ms"
grep -E "client (disconnected|silent)" "$RUN/tokenizerd.log" | sed 's/.*INFO /front door: /' | grep . \
    || fail "front door did not notice the client going away (did the stream end before the kill?)"

"$LLM_BIN/llmc" -n 1800 --temp 0 "Once upon a time" >"$RUN/out2.txt" 2>"$RUN/err2.txt" & pid=$!
E2E_PIDS+=($pid)
wait_until 30 '[ -s "$RUN/out2.txt" ]' || fail "second stream did not start"
kill -INT "$pid"
wait "$pid" && fail "interrupted client exited 0"
wait_until 5 '[ "$(status_field active)" = 0 ] && [ "$(status_field sessions)" = 0 ]' \
    || fail "the interrupted client's session was not cancelled"
grep -q "cancelled by its client" "$RUN/tokenizerd.log" || fail "no cancel logged"
echo "interrupted client cancelled its session"
echo "PASS $E2E_NAME"
