#!/usr/bin/env bash
# 75: the gateway against clients that hold connections open. A refusal the headers
# decide (401 without or with a wrong key, 413 for a Content-Length over --max-body, 3e6
# or 3e9) is answered and the connection closed within 1 s though the announced body
# never comes; an address with --max-connections-per-ip connections open has its next
# one closed unanswered while another address is served; beyond --max-connections a
# connection waits until another closes; a client that trickles its headers or its body
# a byte at a time is cut off after --request-timeout, while an SSE stream that outlasts
# it runs to data: [DONE] and a keep-alive connection serves a second request.
# Raw-socket probes: tests/e2e/http_raw.py.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 150
command -v curl >/dev/null || fail "curl is needed"
RAW="python3 $E2E_ROOT/tests/e2e/http_raw.py"
# Each step is slowed by 3 ms (a test hook): the stream that outlasts --request-timeout
# takes seconds on any machine without burning them
LLM_FAULT_STEP_DELAY_MS=3 start_pipeline 1

# start_gateway LOG [llmc serve options...]: sets PORT once the gateway answers
start_gateway() {
    local log=$1; shift
    PORT=$(free_port)
    "$LLM_BIN/llmc" serve --run-dir "$RUN" --port "$PORT" "$@" 2>"$RUN/$log" & E2E_PIDS+=($!)
    wait_until 10 '[ "$(curl -s -o /dev/null -w "%{http_code}" "http://127.0.0.1:$PORT/health")" = 200 ]' \
        || fail "gateway $* did not start: $(cat "$RUN/$log")"
}

# Refusals from the headers alone. The key comes from LLM_API_KEY, which every version
# of the gateway reads, so this part fails on a gateway that waits for the body.
LLM_API_KEY=k-one start_gateway gateway.log
for cl in 3000000 3000000000; do
    for auth in "" "Authorization: Bearer k-wrong"; do
        s=$($RAW early "$PORT" "Content-Length: $cl" ${auth:+"$auth"}) || fail "Content-Length $cl, ${auth:-no key}"
        [ "$s" = 401 ] || fail "Content-Length $cl, ${auth:-no key}: status $s, expected 401"
    done
    s=$($RAW early "$PORT" "Content-Length: $cl" "Authorization: Bearer k-one") || fail "Content-Length $cl with the key"
    [ "$s" = 413 ] || fail "Content-Length $cl with the key: status $s, expected 413"
done
echo "a body announced and never sent: 401 without or with a wrong key, 413 with the key, answered and closed within 1 s"

# Connections per client address
start_gateway per_ip.log --max-connections-per-ip 4
$RAW per_ip "$PORT" 4 || fail "--max-connections-per-ip 4"

# Connections in all (two threads of two connections each)
start_gateway total.log --threads 2 --max-connections 4 --max-connections-per-ip 0
$RAW total "$PORT" 4 || fail "--max-connections 4"
out=$(timeout 10 "$LLM_BIN/llmc" serve --run-dir "$RUN" --port "$(free_port)" --threads 4 --max-connections 2 2>&1) \
    && fail "--max-connections below --threads was accepted"
grep -q -- '--max-connections 2 is below --threads 4' <<<"$out" || fail "--max-connections below --threads: $out"

# The deadline to send a request, and a stream that outlasts it
start_gateway deadline.log --request-timeout 1
for part in head body; do
    t=$($RAW trickle "$PORT" "$part" 0.9 4) || fail "a request whose $part trickles was not cut off at --request-timeout 1"
    echo "a request whose $part trickles a byte every 0.2 s: closed after $t s (--request-timeout 1)"
done
[ "$(grep -c 'no whole request within 1 s' "$RUN/deadline.log")" -ge 2 ] || fail "the cut-off connections were not logged"
r=$(curl -s -o /dev/null -o /dev/null -w '%{http_code}:%{num_connects} ' "http://127.0.0.1:$PORT/health" "http://127.0.0.1:$PORT/v1/models")
[ "$r" = "200:1 200:0 " ] || fail "two requests on one keep-alive connection: $r (status:new connections)"
t0=$(now_ms)
curl -sN -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/v1/completions" \
    --data-binary '{"prompt": "Once upon a time", "max_tokens": 1500, "ignore_eos": true, "stream": true}' >"$RUN/long.sse" \
    || fail "the long stream failed"
ms=$(( $(now_ms) - t0 ))
tail -c 20 "$RUN/long.sse" | grep -q 'data: \[DONE\]' || fail "the long stream was cut after $ms ms: $(tail -c 300 "$RUN/long.sse")"
[ "$ms" -gt 3000 ] || fail "the stream took $ms ms, too short to outlast --request-timeout 1 (make it longer)"
echo "an SSE stream of $ms ms ran to [DONE] under --request-timeout 1"
echo "PASS $E2E_NAME"
