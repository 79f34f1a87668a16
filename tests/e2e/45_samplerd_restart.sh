#!/usr/bin/env bash
# 45: restart samplerd mid-stream: a seeded, non-greedy stream (temp 0.8) is identical
# to an uninterrupted run with the same seed (the worker re-sends the pending sample
# request; the RNG is a pure function of seed and step).
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 180
# Each step is slowed by 5 ms (a test hook) so the stream outlasts the restart on any machine.
LLM_FAULT_STEP_DELAY_MS=5 start_pipeline 1
args=(-n "${E2E_N:-1500}" --temp 0.8 --top-k 40 --top-p 0.95 --repeat-penalty 1.1 --seed 1234 "Once upon a time")
llmc "${args[@]}" >"$RUN/ref.txt" || fail "reference run failed"
[ "$(wc -c <"$RUN/ref.txt")" -gt 500 ] || fail "reference run too short to restart mid-stream"

llmc "${args[@]}" >"$RUN/out.txt" 2>"$RUN/err.txt" & E2E_PIDS+=($!)
wait_until 30 '[ -s "$RUN/out.txt" ]' || fail "stream did not start"
old=$(cat "$RUN/samplerd.pid")
$PIPELINE restart samplerd --run-dir "$RUN" >/dev/null || fail "restart samplerd failed"
new=$(cat "$RUN/samplerd.pid")
[ "$old" != "$new" ] || fail "samplerd was not restarted"
bytes=$(wc -c <"$RUN/out.txt")
wait "${E2E_PIDS[0]}" || fail "stream failed across the samplerd restart: $(cat "$RUN/err.txt")"
E2E_PIDS=()
echo "samplerd restarted (pid $old -> $new) with $bytes of $(wc -c <"$RUN/ref.txt") bytes streamed"
[ "$bytes" -lt "$(wc -c <"$RUN/ref.txt")" ] || fail "the stream had finished before the restart"
cmp -s "$RUN/ref.txt" "$RUN/out.txt" || fail "output differs from the uninterrupted run with the same seed"
grep -q "samplerd did not answer" "$RUN/engined.log" && grep "samplerd did not answer" "$RUN/engined.log" | head -n 1 | sed 's/.*WARN /worker: /'
echo "PASS $E2E_NAME"
