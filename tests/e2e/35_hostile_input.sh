#!/usr/bin/env bash
# 35: nothing a client sends crashes a daemon. A small ZeroMQ client (hostile_client.c,
# compiled here against libcommon) sends garbage bytes, empty and multi-frame messages,
# truncated msgpack, a 4-G-entry array header, another protocol version, missing
# fields, wrong directions and bad parameters to the front door and to samplerd (each
# must get an error reply) and to the front door's worker socket (no reply); a second
# connection that knows another's session id (not its 128-bit key) cannot cancel, ping
# or continue it; then every daemon is still running and a greedy request still gives
# the reference text.
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
for d in samplerd engined tokenizerd; do kill -0 "$(cat "$RUN/$d.pid")" || fail "$d died"; done
grep -q "bad client message" "$RUN/tokenizerd.log" || fail "front door did not log the bad messages"
grep -q "bad message" "$RUN/samplerd.log" || fail "samplerd did not log the bad messages"
ref=$LLM_SHARED/reference/stories260K-f32/story
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "request after the hostile input failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "wrong text after the hostile input"
[ "$(status_field workers)" = 1 ] || fail "the worker is gone"
echo "PASS $E2E_NAME"
