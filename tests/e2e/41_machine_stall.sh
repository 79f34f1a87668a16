#!/usr/bin/env bash
# 41: a machine that stalls (a loaded VM, a laptop lid) is not a dead worker. Every
# process of the pipeline and the streaming clients are stopped (SIGSTOP) for 5 s, then
# continued: the front door must not count its own absence as its workers' silence (no
# purge, no session moved), and the streams end equal to their uninterrupted runs.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 180
export LLM_FAULT_STEP_DELAY_MS=3 # the streams outlast the stall on a fast machine
start_pipeline 2 --no-supervise
prompts=("Once upon a time" "The little dog")
for i in 0 1; do llmc -n 1200 --temp 0 "${prompts[$i]}" >"$RUN/ref$i.txt" || fail "reference $i failed"; done
for i in 0 1; do llmc -n 1200 --temp 0 --stats "${prompts[$i]}" >"$RUN/out$i.txt" 2>"$RUN/err$i.txt" & E2E_PIDS+=($!); done
wait_until 30 '[ -s "$RUN/out0.txt" ] && [ -s "$RUN/out1.txt" ]' || fail "the streams did not start"
pids="$(cat "$RUN"/*.pid | tr '\n' ' ') ${E2E_PIDS[*]}"
kill -STOP $pids
sleep 5
kill -CONT $pids
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "a stream failed across the stall: $(cat "$RUN"/err*.txt)"; done
E2E_PIDS=()
for i in 0 1; do cmp -s "$RUN/ref$i.txt" "$RUN/out$i.txt" || fail "stream $i differs from its uninterrupted run"; done
grep -E "silent for .*purged|declared dead" "$RUN/tokenizerd.log" && fail "the front door purged a worker that was only stopped with it"
grep -q "moved [1-9]" "$RUN"/err*.txt && fail "a session moved across the stall: $(cat "$RUN"/err*.txt)"
grep -q "did not run for" "$RUN/tokenizerd.log" || fail "the front door did not notice its own absence"
echo "5 s stall of every process: 2 streams equal their uninterrupted runs, no worker purged, no session moved"
echo "PASS $E2E_NAME"
