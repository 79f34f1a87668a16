#!/usr/bin/env bash
# 50: restart tokenizerd mid-stream. The client whose stream was cut gets one clear
# error line and a non-zero exit (requests are not resumed across a front door restart:
# the front door holds their state); the workers and samplerd keep running (same pids),
# re-register by themselves, and new requests work at once.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
start_pipeline 2
ref=$LLM_SHARED/reference/stories260K-f32/story
workers=$(status_field pids)
master=$(cat "$RUN/engined.pid") sampler=$(cat "$RUN/samplerd.pid")

llmc -n 1800 --temp 0 "Once upon a time" >"$RUN/out.txt" 2>"$RUN/err.txt" & E2E_PIDS+=($!)
wait_until 30 '[ -s "$RUN/out.txt" ]' || fail "stream did not start"
$PIPELINE restart tokenizerd --run-dir "$RUN" >/dev/null || fail "restart tokenizerd failed"
if wait "${E2E_PIDS[0]}"; then
    # the stream may legitimately have finished before the restart; it must then be whole
    [ "$(grep -c . "$RUN/err.txt")" = 0 ] || fail "exit 0 but errors: $(cat "$RUN/err.txt")"
    echo "note: the stream finished before the restart"
else
    [ "$(grep -c '^error:' "$RUN/err.txt")" = 1 ] || fail "cut client did not print one error line: $(cat "$RUN/err.txt")"
    grep -q "restart" "$RUN/err.txt" || fail "error does not say the front door restarted: $(cat "$RUN/err.txt")"
    echo "cut client: $(grep '^error:' "$RUN/err.txt")"
fi
E2E_PIDS=()
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "new request after the restart failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "new request gave the wrong text"
[ "$(status_field pids)" = "$workers" ] || fail "workers changed: $workers -> $(status_field pids)"
[ "$(cat "$RUN/engined.pid")" = "$master" ] && kill -0 "$master" || fail "engined master was restarted"
[ "$(cat "$RUN/samplerd.pid")" = "$sampler" ] && kill -0 "$sampler" || fail "samplerd was restarted"
wait_until 10 '[ "$(status_field sessions)" = 0 ]' || fail "workers still hold sessions of the old front door"
echo "new requests work; workers $workers and samplerd kept running"
echo "PASS $E2E_NAME"
