#!/usr/bin/env bash
# 73: the front door's ERROR codes become the HTTP statuses of the OpenAI API. A stand-in
# front door (fake_front.c, compiled here against libcommon) refuses each request with
# the error its prompt names: queue_full -> 429 with Retry-After, unavailable -> 503,
# internal -> 500, context_length_exceeded -> 400, no code before ACCEPTED -> 400, after
# ACCEPTED -> 500 (or, in a stream that already sent text, an error event and [DONE]),
# and a front door that goes silent after ACCEPTED -> the gateway asks it to resume every
# 2 s, then gives up with 503 after --front-timeout (8 s here; 30 by default) without a word.
# /health is 503 while no worker is up.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
lib=${LLM_BUILD:-$LLM_BIN/..}/libcommon.a
[ -f "$lib" ] || fail "libcommon.a not found (set LLM_BUILD)"
build_fake() {
    cc -std=c11 -D_GNU_SOURCE "$@" -I"$E2E_ROOT/common" -o "$RUN/fake_front" "$E2E_ROOT/tests/e2e/fake_front.c" "$lib" \
        $(pkg-config --cflags --libs libzmq msgpack 2>/dev/null || echo -lzmq -lmsgpackc) -lrt -lm -pthread
}
build_fake 2>/dev/null || build_fake -fsanitize=address,undefined || fail "cannot build fake_front"
"$RUN/fake_front" "ipc://$RUN/front.sock" & E2E_PIDS+=($!)
PORT=$(free_port)
"$LLM_BIN/llmc" serve --run-dir "$RUN" --port "$PORT" --front-timeout 8 2>"$RUN/gateway.log" & E2E_PIDS+=($!)
URL=http://127.0.0.1:$PORT
wait_until 10 '[ "$(curl -s "$URL/health" | json_get "[\"error\"][\"message\"]")" = "no engine worker is up" ]' \
    || fail "/health with a front door but no worker: $(curl -s "$URL/health")"

expect() { # PROMPT STREAM STATUS CODE
    curl -s -D "$RUN/h" -o "$RUN/b" -w '%{http_code}' -H 'Content-Type: application/json' \
        --data-binary "{\"prompt\": \"$1\", \"stream\": $2}" "$URL/v1/completions" >"$RUN/s"
    [ "$(cat "$RUN/s")" = "$3" ] || fail "$1 (stream $2): status $(cat "$RUN/s"), expected $3: $(cat "$RUN/b")"
    [ "$(json_get '["error"]["code"]' <"$RUN/b")" = "$4" ] || fail "$1: error code in $(cat "$RUN/b")"
}
expect queue_full false 429 queue_full
grep -qi '^retry-after: 3' "$RUN/h" || fail "429 without Retry-After: 3 (retry_ms 2500): $(cat "$RUN/h")"
expect queue_full true 429 queue_full
expect unavailable false 503 unavailable
expect internal true 500 internal
expect context_length_exceeded false 400 context_length_exceeded
expect nocode false 400 null
expect late false 500 null
echo "ERROR codes: 429 + Retry-After, 503, 500, 400; no code: 400 before ACCEPTED, 500 after"

curl -sN -o "$RUN/late.sse" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary '{"prompt": "late", "stream": true}' "$URL/v1/completions" >"$RUN/s"
[ "$(cat "$RUN/s")" = 200 ] || fail "late error in a stream: status $(cat "$RUN/s")"
python3 - "$RUN/late.sse" <<'PY' || fail "late error in a stream: $(cat "$RUN/late.sse")"
import json, sys
ev = open(sys.argv[1]).read().split("\n\n")
assert json.loads(ev[0][6:])["choices"][0]["text"] == "Hello"
assert json.loads(ev[1][6:])["error"]["message"] == "refused without a code"
assert ev[2] == "data: [DONE]"
PY
echo "an error after text in a stream: an error event, then data: [DONE]"

t0=$(now_ms)
expect silent false 503 unavailable
n=$(grep -c "resuming on the front door" "$RUN/gateway.log")
[ "$n" -ge 2 ] || fail "the gateway asked the silent front door to resume $n times"
waited=$(( $(now_ms) - t0 ))
[ "$waited" -ge 8000 ] || fail "the gateway gave up on a silent front door after $waited ms (--front-timeout 8)"
grep -q "no answer for [89] s" "$RUN/b" || fail "the 503 does not say how long the front door was silent: $(cat "$RUN/b")"
echo "a front door that goes silent: $n resumes asked, then 503 after $waited ms"
echo "PASS $E2E_NAME"
