#!/usr/bin/env bash
# 35: nothing a client sends crashes a daemon. A small ZeroMQ client (hostile_client.c,
# compiled here against libcommon) sends garbage bytes, empty and multi-frame messages,
# truncated msgpack, a 4-G-entry array header, another protocol version, missing
# fields, wrong directions and bad parameters to the front door and to samplerd (each
# must get an error reply) and to the front door's worker socket (no reply); a second
# connection that knows another's session id (not its 128-bit key) cannot cancel, ping
# or continue it; a flood (3,000 garbage messages to each daemon, one SAMPLE of 2,000 bad
# rows) adds a bounded number of log lines, with a count of the warnings suppressed;
# then every daemon is still running and a greedy request still gives the reference text.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
start_pipeline 1
lib=${LLM_BUILD:-$LLM_BIN/..}/libcommon.a
[ -f "$lib" ] || fail "libcommon.a not found (set LLM_BUILD)"
build_hostile() {
    cc -std=c11 -D_GNU_SOURCE "$@" -I"$E2E_ROOT/common" -o "$RUN/hostile" "$E2E_ROOT/tests/e2e/hostile_client.c" "$lib" \
        $(pkg-config --cflags --libs libzmq msgpack 2>/dev/null || echo -lzmq -lmsgpackc) -lrt -lm -pthread
}
# a sanitizer build's libcommon.a needs the sanitizer runtime
build_hostile 2>/dev/null || build_hostile -fsanitize=address,undefined || fail "cannot build hostile_client"
"$RUN/hostile" "ipc://$RUN/front.sock" front || fail "front door did not answer every hostile message with an error"
"$RUN/hostile" "ipc://$RUN/sampler.sock" sampler || fail "samplerd did not answer every hostile message with an error"
"$RUN/hostile" "ipc://$RUN/workers.sock" workers || fail "front door answered a fake worker"
"$RUN/hostile" "ipc://$RUN/front.sock" hijack || fail "a connection could act on another connection's session"
for d in samplerd engined tokenizerd; do e2e_running "$(cat "$RUN/$d.pid")" || fail "$d died"; done
grep -q "bad client message" "$RUN/tokenizerd.log" || fail "front door did not log the bad messages"
grep -q "bad message" "$RUN/samplerd.log" || fail "samplerd did not log the bad messages"

# a flood costs a few lines per call site and a count, not a line per message or row
front0=$(wc -l <"$RUN/tokenizerd.log"); samp0=$(wc -l <"$RUN/samplerd.log")
"$RUN/hostile" "ipc://$RUN/front.sock" flood 3000 || fail "the front door did not answer the flood"
"$RUN/hostile" "ipc://$RUN/sampler.sock" flood 3000 || fail "samplerd did not answer the flood"
w=$(status_field pids); w=${w%% *}
"$RUN/hostile" "ipc://$RUN/sampler.sock" badrows "/llm-logits-$(id -u)-$w" 512 2000 \
    || fail "samplerd did not answer every bad row"
flood_lines() {
    front=$(( $(wc -l <"$RUN/tokenizerd.log") - front0 )); samp=$(( $(wc -l <"$RUN/samplerd.log") - samp0 ))
    [ "$front" -le 30 ] || fail "3000 bad messages wrote $front lines to tokenizerd.log"
    [ "$samp" -le 60 ] || fail "3000 bad messages and 2000 bad rows wrote $samp lines to samplerd.log"
}
flood_lines
suppressed() { grep -q "$2: [0-9]* similar warnings suppressed in the last" "$RUN/$1.log"; }
wait_until 15 'suppressed tokenizerd "bad client message" && suppressed samplerd "bad message" &&
               suppressed samplerd "bad sample row"' || fail "no line counts the suppressed warnings"
flood_lines
echo "flood: 3000 bad messages added $front lines to tokenizerd.log; 3000 bad messages and 2000 bad rows" \
     "added $samp lines to samplerd.log"
grep -h "similar warnings suppressed" "$RUN/tokenizerd.log" "$RUN/samplerd.log" | sed 's/.*WARN /  /'
ref=$LLM_SHARED/reference/stories260K-f32/story
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "request after the hostile input failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "wrong text after the hostile input"
[ "$(status_field workers)" = 1 ] || fail "the worker is gone"
echo "PASS $E2E_NAME"
