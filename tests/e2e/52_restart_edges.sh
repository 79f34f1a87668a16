#!/usr/bin/env bash
# 52: restarts at the edges of a generation (issue 24). With a context of 128 tokens:
#  1. the front door dies (kill -9, a test hook at token 100) and the generation runs into
#     the end of the context before the new front door is up: the client's resume gets
#     the rest of the text and the finish reason "context", never an error (greedy and
#     seeded sampling);
#  2. a request sent while the engine master is down waits in the queue and is served
#     when the master is back; requests sent while the master restarts all succeed;
#  3. with no engine worker for longer than --worker-wait, a request fails with an error
#     that says so.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 300
command -v curl >/dev/null || fail "curl is needed"
PORT=$(free_port)
E2E_CTX=128 start_pipeline 2 --supervise --http "$PORT"
prompt="Once upon a time"
greedy="--temp 0"
seeded="--temp 0.8 --seed 7"

kill_front() { # kills tokenizerd and waits for the supervisor's new one to answer
    local old
    old=$(cat "$RUN/tokenizerd.pid")
    kill -9 "$old"
    wait_until 20 '[ "$(cat "$RUN/tokenizerd.pid")" != "$old" ] && "$LLM_BIN/llmc" status --run-dir "$RUN" >/dev/null 2>&1' \
        || fail "the supervisor did not bring tokenizerd back"
}

# 1. the end of the context reached while the front door is down
for mode in greedy seeded; do
    llmc -n 200 ${!mode} --stats "$prompt" >"$RUN/ref-$mode.txt" 2>"$RUN/referr-$mode.txt" || fail "$mode reference failed"
    grep -q "(context;" "$RUN/referr-$mode.txt" || fail "the $mode reference did not end at the context: $(cat "$RUN/referr-$mode.txt")"
    echo "100 any" >"$RUN/fault-front-exit"
    kill_front # the new front door reads the hook file
    llmc -n 200 ${!mode} --stats "$prompt" >"$RUN/out-$mode.txt" 2>"$RUN/err-$mode.txt" \
        || fail "the $mode stream failed across a front-door death at the context's end: $(cat "$RUN/err-$mode.txt")"
    grep -q "test hook: exiting at token 100" "$RUN/tokenizerd.log" || fail "the front door did not die at token 100"
    cmp -s "$RUN/ref-$mode.txt" "$RUN/out-$mode.txt" || fail "$mode: text across the death differs from an uninterrupted run"
    grep -q "(context;" "$RUN/err-$mode.txt" || fail "$mode: finish reason is not context: $(cat "$RUN/err-$mode.txt")"
    grep -q "resumed [1-9]" "$RUN/err-$mode.txt" || fail "$mode: the stream was not resumed: $(cat "$RUN/err-$mode.txt")"
    echo "$mode: the context filled while the front door was down; text equal, finish: context"
done
grep -q "adopted from worker .*(stopped: queued)" "$RUN/tokenizerd.log" \
    || echo "(no session was adopted after it stopped: the resumes regenerated them)"

# 2. a request sent while the engine master is down. The front door is paused while the
# workers say goodbye and a request comes through the HTTP gateway's open connection, so
# that it reads both in one turn: the request must wait in the queue for workers to come
# back, not be refused for want of a worker's context.
ref=$LLM_SHARED/reference/stories260K-f32/story
req=$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 32, "temperature": 0}))' "$(cat "$ref/prompt.txt")")
front=$(cat "$RUN/tokenizerd.pid")
kill -STOP "$front"
sv -w 15 down "$RUN/sv/engined" >/dev/null 2>&1 || { kill -CONT "$front"; fail "sv down engined failed"; } # runsv keeps it down
curl -s -o "$RUN/down.json" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary "$req" \
    "http://127.0.0.1:$PORT/v1/completions" >"$RUN/down.status" & E2E_PIDS+=($!)
sleep 0.1
kill -CONT "$front"
wait_until 20 '[ "$(status_field workers)" = 0 ]' || fail "the workers did not leave with their master"
wait_until 20 '[ "$(status_field queued)" = 1 ]' || fail "the request is not queued while no worker is registered: $(cat "$RUN/down.json")"
sleep 2
e2e_running "${E2E_PIDS[0]}" || fail "the request ended while no worker was registered: $(cat "$RUN/down.json")"
$PIPELINE restart engined --run-dir "$RUN" >/dev/null || fail "restart engined failed"
wait "${E2E_PIDS[0]}"
E2E_PIDS=()
[ "$(cat "$RUN/down.status")" = 200 ] || fail "the request sent while the master was down failed: $(cat "$RUN/down.status") $(cat "$RUN/down.json")"
[ "$(json_get '["choices"][0]["text"]' <"$RUN/down.json")" = "$(cat "$ref/greedy_text.txt")" ] \
    || fail "the request sent while the master was down has the wrong text: $(cat "$RUN/down.json")"
echo "a request sent while no worker was registered waited and was served when the master came back"

# requests in a loop by 4 clients across 2 restarts of the master: every one succeeds
rm -f "$RUN/loop-stop"
for c in 0 1 2 3; do
    ( n=0; while [ ! -e "$RUN/loop-stop" ]; do
          llmc -n 24 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/loop$c.txt" 2>"$RUN/loop$c.err" || { echo "client $c: $(cat "$RUN/loop$c.err")"; exit 1; }
          cmp -s "$RUN/loop$c.txt" <(head -c "$(wc -c <"$RUN/loop$c.txt")" "$ref/greedy_text.txt") || { echo "client $c: wrong text"; exit 1; }
          n=$((n + 1))
      done; echo "$n" >"$RUN/loop$c.n" ) & E2E_PIDS+=($!)
done
for k in 1 2; do
    sleep 1
    $PIPELINE restart engined --run-dir "$RUN" >/dev/null || fail "restart engined failed"
done
sleep 1
touch "$RUN/loop-stop"
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "a request across a master restart failed"; done
E2E_PIDS=()
echo "4 clients in a loop across 2 master restarts: $(cat "$RUN"/loop*.n | paste -sd+ | bc) requests, all served"

# 3. no worker for longer than --worker-wait: a clear error
$PIPELINE stop --run-dir "$RUN" >/dev/null
rm -f "$RUN"/*.log
"$LLM_BIN/tokenizerd" --model "$MODEL" --run-dir "$RUN" --worker-wait 1500 >>"$RUN/tokenizerd.log" 2>&1 & E2E_PIDS+=($!)
wait_until 20 '"$LLM_BIN/llmc" status --run-dir "$RUN" >/dev/null 2>&1' || fail "tokenizerd did not start"
llmc -n 8 "$prompt" >/dev/null 2>"$RUN/nowork.err" && fail "a request succeeded with no engine"
grep -q "no engine worker available for [0-9]* s" "$RUN/nowork.err" || fail "unexpected error with no engine: $(cat "$RUN/nowork.err")"
echo "no engine: $(grep error "$RUN/nowork.err")"
echo "PASS $E2E_NAME"
