#!/usr/bin/env bash
# 36: what the second audit found (issue 18), on a worker of 4 slots:
#  1. chats held between turns never stop serving: 4 `llmc chat` clients between turns
#     hold all 4 slots, yet a new request runs at once (a held chat leaves its slot to a
#     queued request); 3 of them are killed (-9) and their chats are freed when the front
#     door's probe finds their connections closed (seconds, not the 20 s without pings),
#     while the live client's chat is kept and continues;
#  2. a fake worker (audit_client.c) that reports 2,000 sessions it never ran to a front
#     door that just started gets at most its claimed capacity adopted, and none after
#     the adoption window;
#  3. a fake worker's report of a queued request's session does not replace it (the
#     attacker's resume with its own key is refused), and `llmc status` shows no
#     session ids;
#  4. an ended session's id cannot be resumed under another key.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 300
export LLM_FAULT_STEP_DELAY_MS=3 # streams long enough to keep the worker busy in 3
start_pipeline 1 --max-sessions 4 --chat-template llama2
lib=${LLM_BUILD:-$LLM_BIN/..}/libcommon.a
cc -std=c11 -D_GNU_SOURCE -I"$E2E_ROOT/common" -o "$RUN/audit" "$E2E_ROOT/tests/e2e/audit_client.c" "$lib" \
    $(pkg-config --cflags --libs libzmq msgpack 2>/dev/null || echo -lzmq -lmsgpackc) -lrt -lm -pthread \
    || fail "cannot build audit_client"
id=$("$LLM_BIN/llmc" status --json --run-dir "$RUN" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["nv"], d["vid"])')
nv=${id% *} vid=${id#* }
FRONT=ipc://$RUN/front.sock WORKERS=ipc://$RUN/workers.sock
held() { "$LLM_BIN/llmc" status --run-dir "$RUN" | sed -n 's/.* \([0-9]*\) chat sessions held.*/\1/p'; }
ref=$LLM_SHARED/reference/stories260K-f32/story

# 1. idle chats: 4 clients between turns hold the worker's 4 slots
chat_turn() { # i: starts llmc chat $i on a fifo, sends one turn, waits for its answer
    mkfifo "$RUN/chat$1.in"
    sleep 600 >"$RUN/chat$1.in" & E2E_PIDS+=($!) # holds the fifo open between turns
    "$LLM_BIN/llmc" chat -n 4 --temp 0 <"$RUN/chat$1.in" >"$RUN/chat$1.out" 2>"$RUN/chat$1.err" & E2E_PIDS+=($!)
    CHAT_PID[$1]=$!
    echo "Hello number $1" >"$RUN/chat$1.in"
    CHAT_OUT=$RUN/chat$1.out
    wait_until 20 '[ -s "$CHAT_OUT" ]' || fail "chat $1 got no answer: $(cat "$RUN/chat$1.err")"
}
for i in 1 2 3 4; do chat_turn $i; done
wait_until 10 '[ "$(held)" = 4 ]' || fail "expected 4 held chats, status says $(held)"
t0=$(now_ms)
E2E_LLMC_TIMEOUT=20 llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/after.txt" \
    || fail "a request with every slot held by idle chats did not run"
cmp -s "$RUN/after.txt" "$ref/greedy_text.txt" || fail "wrong text next to held chats"
echo "4 idle chats held every slot; a new request ran in $(( $(now_ms) - t0 )) ms"
# 3 of the clients are killed between turns: their chats are freed (connection closed,
# or silent); the live one's is kept and its next turn is answered
for i in 1 2 3; do kill -9 "${CHAT_PID[$i]}"; wait "${CHAT_PID[$i]}" 2>/dev/null; done
wait_until 60 '[ "$(held)" = 1 ]' || fail "the killed clients' chats were not freed (held: $(held))"
grep -q "freed between turns: its client disconnected" "$RUN/tokenizerd.log" \
    || fail "no log line for chats freed on their clients' closed connections (the front door probes silent ones)"
before=$(wc -c <"$RUN/chat4.out")
echo "And then?" >"$RUN/chat4.in"
wait_until 20 '[ "$(wc -c <"$RUN/chat4.out")" -gt "$before" ]' || fail "the live chat's next turn got no answer"
echo "the killed clients' chats were freed; the live client's chat was kept and continued"

# 2. a fake worker reports 2,000 sessions to a front door that just started
$PIPELINE restart tokenizerd --run-dir "$RUN" >/dev/null || fail "restart tokenizerd failed"
restarted=$(now_ms)
rss() { awk '/VmRSS/ {print $2}' "/proc/$(cat "$RUN/tokenizerd.pid")/status"; }
before=$(rss)
out=$("$RUN/audit" "$FRONT" "$WORKERS" "$nv" "$vid" reports 2000) || fail "audit_client reports failed"
echo "$out; tokenizerd RSS $before -> $(rss) kB"
kept=$(echo "$out" | sed -n 's/.* \([0-9-]*\) kept$/\1/p')
[ -n "$kept" ] && [ "$kept" -ge 0 ] && [ "$kept" -le 16 ] || fail "the front door kept $kept fake sessions (at most the fake worker's capacity, 16)"
[ $(( $(rss) - before )) -lt 51200 ] || fail "tokenizerd grew by more than 50 MB on fake reports"
sleep $(( (10000 - ($(now_ms) - restarted)) / 1000 + 3 )) # past the adoption window
out=$("$RUN/audit" "$FRONT" "$WORKERS" "$nv" "$vid" reports 100) || fail "audit_client reports failed"
echo "after the window: $out"
echo "$out" | grep -q "100 stopped by the front door" || fail "reports after the adoption window were adopted"
grep -q "not adopted: it came after the adoption window" "$RUN/tokenizerd.log" || fail "no log line for late reports"

# 3. a queued request cannot be taken over; status shows no session ids
$PIPELINE restart tokenizerd --run-dir "$RUN" >/dev/null || fail "restart tokenizerd failed"
for i in 1 2 3 4; do llmc -n 1500 --temp 0 "Once upon a time" >/dev/null 2>&1 & E2E_PIDS+=($!); done
wait_until 20 '[ "$(status_field active)" = 4 ]' || fail "the 4 streams did not start"
llmc -n 4 --temp 0 "Once upon a time" >/dev/null 2>&1 & E2E_PIDS+=($!)
wait_until 10 '[ "$(status_field queued)" -ge 1 ]' || fail "no request queued"
"$LLM_BIN/llmc" status --run-dir "$RUN" >"$RUN/status.txt"
grep -qE 'session [0-9a-f]{16}' "$RUN/status.txt" && fail "llmc status shows session ids: $(cat "$RUN/status.txt")"
"$RUN/audit" "$FRONT" "$WORKERS" "$nv" "$vid" takeover || fail "a fake worker took over a queued request"

# 4. an ended session's id is not free for the taking
wait_until 60 '[ "$(status_field active)" = 0 ] && [ "$(status_field queued)" = 0 ]' || fail "the streams of 3 did not end"
"$RUN/audit" "$FRONT" "$WORKERS" "$nv" "$vid" squat || fail "an ended session's id was resumed under another key"
echo "PASS $E2E_NAME"
