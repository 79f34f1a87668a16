#!/usr/bin/env bash
# 55: restart the engine master: it finds the READY segment of the same model file and
# attaches it (no conversion pass), its new workers serve, and a stream in flight
# across the restart completes with the text of an uninterrupted run.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
# Each step is slowed by 3 ms (a test hook) so the streams outlast the fault on any machine.
export LLM_FAULT_STEP_DELAY_MS=3
start_pipeline 2
ref=$LLM_SHARED/reference/stories260K-f32/story
llmc -n 1500 --temp 0 "Once upon a time" >"$RUN/ref.txt" || fail "reference run failed"
# a stream in flight during the restart: the stopping workers hand their sessions back
# (a goodbye heartbeat) and the front door re-dispatches them to the new workers
llmc -n 1500 --temp 0 "Once upon a time" >"$RUN/out.txt" 2>"$RUN/err.txt" & E2E_PIDS+=($!)
wait_until 30 '[ -s "$RUN/out.txt" ]' || fail "stream did not start"
old=$(cat "$RUN/engined.pid")
$PIPELINE restart engined --run-dir "$RUN" >/dev/null || fail "restart engined failed"
wait "${E2E_PIDS[0]}" || fail "the stream failed across the master restart: $(cat "$RUN/err.txt")"
E2E_PIDS=()
cmp -s "$RUN/ref.txt" "$RUN/out.txt" || fail "the stream across the master restart differs from an uninterrupted run"
if grep -q "is shutting down: purged" "$RUN/tokenizerd.log"; then
    echo "a stream in flight continued across the master restart, text unchanged"
fi
new=$(cat "$RUN/engined.pid")
[ "$old" != "$new" ] || fail "engined was not restarted"
line=$(grep "engined\[$new\].*segment .* READY: attached in .* ms, no conversion" "$RUN/engined.log") \
    || fail "the new master did not reuse the READY segment"
grep -q "engined\[$new\].*converted" "$RUN/engined.log" && fail "the new master converted the model again"
echo "new master: ${line#*INFO }"
wait_until 20 '[ "$(status_field workers)" = 2 ] && status_field pids >/dev/null' || fail "workers did not come back"
# the old workers were stopped with their master; only new ones serve
for p in $(grep -o "engined\[$old\] INFO worker [0-9] started: pid [0-9]*" "$RUN/engined.log" | awk '{print $NF}'); do
    e2e_running "$p" && fail "old worker $p still running"
done
wait_until 10 '[ "$(status_field workers)" = 2 ]' || fail "expected 2 workers"
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "request after the restart failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "wrong text after the restart"
echo "PASS $E2E_NAME"
