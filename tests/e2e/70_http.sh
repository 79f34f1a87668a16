#!/usr/bin/env bash
# 70: the OpenAI-compatible gateway (`llmc serve`, started by pipeline.sh --http) seen
# through curl: /v1/completions and /v1/chat/completions give llama.cpp's greedy text,
# the SSE framing (data: lines, blank-line separators, finish_reason, the usage chunk,
# data: [DONE]), stop strings, log-probs, /v1/models, /health, /metrics, OpenAI-shaped
# errors with the right status (400 naming the parameter, 404, 405, 413), API keys
# (401), a client that disconnects mid-stream (its request is cancelled on the front
# door) and a front door that is not running (503).
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 180
E2E_CTX=16384 # room for a stream long enough to be cut
command -v curl >/dev/null || fail "curl is needed"
PORT=$(free_port)
start_pipeline 1 --http "$PORT" --chat-template llama2
URL=http://127.0.0.1:$PORT
ref=$LLM_SHARED/reference/stories260K-f32/story
prompt=$(cat "$ref/prompt.txt")
expected=$(cat "$ref/greedy_text.txt")
body() { python3 -c 'import json, sys; d = json.loads(sys.argv[1]); d.update(json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}); print(json.dumps(d))' "$@"; }
post() { # PATH JSON [curl options] -> body on stdout, status in $RUN/status
    local p=$1 b=$2; shift 2
    curl -s -o "$RUN/resp" -w '%{http_code}' -H 'Content-Type: application/json' "$@" --data-binary "$b" "$URL$p" >"$RUN/status"
    cat "$RUN/resp"
}
status() { cat "$RUN/status"; }

# non-streaming completion: llama.cpp's greedy text, usage, finish_reason
req=$(body "{\"max_tokens\": 32, \"temperature\": 0}" "$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1]}))' "$prompt")")
r=$(post /v1/completions "$req")
[ "$(status)" = 200 ] || fail "completion: status $(status): $r"
[ "$(json_get '["choices"][0]["text"]' <<<"$r")" = "$expected" ] || fail "completion text differs: $r"
[ "$(json_get '["usage"]' <<<"$r")" = '{"prompt_tokens": 20, "completion_tokens": 32, "total_tokens": 52}' ] || fail "usage: $r"
[ "$(json_get '["choices"][0]["finish_reason"]' <<<"$r")" = length ] || fail "finish_reason: $r"
[ "$(json_get '["object"]' <<<"$r")" = text_completion ] || fail "object: $r"
echo "completion: llama.cpp's greedy text, usage and finish_reason"

# streaming completion: the SSE framing, checked line by line
sreq=$(body "$req" '{"stream": true, "stream_options": {"include_usage": true}}')
curl -sN -D "$RUN/headers" -H 'Content-Type: application/json' --data-binary "$sreq" "$URL/v1/completions" >"$RUN/sse" \
    || fail "streaming request failed"
grep -qi '^content-type: text/event-stream' "$RUN/headers" || fail "stream content type: $(cat "$RUN/headers")"
python3 - "$RUN/sse" "$expected" <<'PY' || fail "SSE framing (see above)"
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
assert raw.endswith("data: [DONE]\n\n"), "the stream does not end with 'data: [DONE]' and a blank line"
events = raw.split("\n\n")[:-1]
assert all(e.startswith("data: ") and "\n" not in e for e in events), "an event is not one 'data: ' line"
chunks = [json.loads(e[6:]) for e in events[:-1]]
assert len({c["id"] for c in chunks}) == 1, "chunks of one stream have different ids"
assert all(c["object"] == "text_completion" for c in chunks)
text = "".join(ch["text"] for c in chunks for ch in c["choices"])
assert text == sys.argv[2], "streamed text %r" % text
fins = [ch["finish_reason"] for c in chunks for ch in c["choices"]]
assert fins[-1] == "length" and all(f is None for f in fins[:-1]), "finish_reason %r" % fins
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 32, "usage chunk %r" % chunks[-1]
print("SSE: %d events, text equals the reference, finish_reason and usage chunk in place" % len(events))
PY

# stop strings end the text before them (as llmc --stop), finish_reason stop
r=$(post /v1/completions "$(body "$req" '{"stop": ["big"]}')")
[ "$(json_get '["choices"][0]["text"]' <<<"$r")" = " play outside in the park. One day, she saw a " ] || fail "stop: $r"
[ "$(json_get '["choices"][0]["finish_reason"]' <<<"$r")" = stop ] || fail "stop finish_reason: $r"
r=$(post /v1/completions "$(body "$req" '{"stop": "red ball. She"}')")
[ "$(json_get '["choices"][0]["text"]' <<<"$r")" = " play outside in the park. One day, she saw a big, " ] || fail "stop string: $r"
echo "stop strings: text and finish_reason stop"

# log-probs: the chosen token's and the top 3, best first
r=$(post /v1/completions "$(body "$req" '{"max_tokens": 4, "logprobs": 3}')")
python3 -c 'import json, sys
lp = json.loads(sys.argv[1])["choices"][0]["logprobs"]
assert len(lp["tokens"]) == 4 and "".join(lp["tokens"]) == json.loads(sys.argv[1])["choices"][0]["text"], lp
assert all(len(t) == 3 for t in lp["top_logprobs"]) and all(v <= 0 for v in lp["token_logprobs"]), lp
assert all(max(t.values()) == l for t, l in zip(lp["top_logprobs"], lp["token_logprobs"])), "greedy token is not the best"
' "$r" || fail "logprobs: $r"
echo "logprobs: 4 tokens with their top 3"

# chat (tokenizerd --chat-template llama2): same text as llmc chat, stream and not
creq='{"messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Tell me a story"}], "max_tokens": 24, "temperature": 0}'
want=$(printf 'Tell me a story\n' | llmc chat --system "Be brief" -n 24 --temp 0) || fail "llmc chat failed"
r=$(post /v1/chat/completions "$creq")
[ "$(status)" = 200 ] || fail "chat: status $(status): $r"
[ "$(json_get '["choices"][0]["message"]["content"]' <<<"$r")" = "$want" ] || fail "chat text differs from llmc chat: $r"
[ "$(json_get '["object"]' <<<"$r")" = chat.completion ] || fail "chat object: $r"
curl -sN -H 'Content-Type: application/json' --data-binary "$(body "$creq" '{"stream": true}')" "$URL/v1/chat/completions" >"$RUN/csse"
python3 - "$RUN/csse" "$want" <<'PY' || fail "chat SSE"
import json, sys
events = open(sys.argv[1], encoding="utf-8").read().split("\n\n")
assert events[-2] == "data: [DONE]", events[-2:]
chunks = [json.loads(e[6:]) for e in events[:-2]]
assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}, chunks[0]
text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
assert text == sys.argv[2], text
assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["object"] == "chat.completion.chunk"
PY
wait_until 5 '[ "$(status_field sessions)" = 0 ]' || fail "chat sessions are left on the worker after the answers"
echo "chat: same text as llmc chat, streamed and not; no session left held"

# models, health
r=$(curl -s "$URL/v1/models")
[ "$(json_get '["data"][0]["id"]' <<<"$r")" = stories260K-f32.gguf ] || fail "/v1/models: $r"
[ "$(curl -s "$URL/health" | json_get '["status"]')" = ok ] || fail "/health: $(curl -s "$URL/health")"

# errors in OpenAI's shape, with the status and the parameter named
check_err() { # STATUS PARAM PATH BODY [curl options]
    local want=$1 param=$2 p=$3 b=$4; shift 4
    r=$(post "$p" "$b" "$@")
    [ "$(status)" = "$want" ] || fail "expected $want for $b, got $(status): $r"
    [ "$(json_get '["error"]["type"]' <<<"$r")" != "" ] && [ "$(json_get '["error"]["message"]' <<<"$r")" != "" ] \
        || fail "not an OpenAI error: $r"
    [ -z "$param" ] || [ "$(json_get '["error"]["param"]' <<<"$r")" = "$param" ] || fail "param not named: $r"
}
check_err 400 temperature /v1/completions '{"prompt": "x", "temperature": -1}'
check_err 400 top_k /v1/completions '{"prompt": "x", "top_k": "many"}'
check_err 400 max_tokens /v1/completions '{"prompt": "x", "max_tokens": "ten"}'
check_err 400 n /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "n": 9}'
check_err 400 messages /v1/chat/completions '{"messages": []}'
check_err 400 prompt /v1/completions '{"max_tokens": 1}'
check_err 400 "" /v1/completions '{"prompt": "x",'
check_err 400 "" /v1/completions '{"prompt": "x", "repeat_penalty": 0}'
check_err 404 "" /v1/nothing '{}'
check_err 405 "" /v1/models '{}'
head -c 3000000 /dev/zero | tr '\0' 'a' >"$RUN/big"
check_err 413 "" /v1/completions @"$RUN/big"
r=$(curl -s -w ' %{http_code}' -X GET "$URL/v1/completions"); [ "${r##* }" = 405 ] || fail "GET completions: $r"
echo "errors: 400 (parameter named), 404, 405, 413 in OpenAI's JSON shape"

# metrics: counters agree with what was done, histograms, gauges, per-daemon up
m=$(curl -s "$URL/metrics")
for k in 'llm_http_requests_total{endpoint="/v1/completions",code="200"}' 'llm_http_requests_total{endpoint="/v1/completions",code="400"}' \
         'llm_time_to_first_token_seconds_count' 'llm_inter_token_seconds_bucket{le="+Inf"}' 'llm_generated_tokens_total' \
         'llm_queue_depth 0' 'llm_workers_live 1' 'llm_up{daemon="tokenizerd"} 1' 'llm_up{daemon="engined"} 1' \
         'llm_up{daemon="samplerd"} 1'; do
    grep -qF "$k" <<<"$m" || fail "/metrics lacks $k"
done
gen=$(sed -n 's/^llm_generated_tokens_total //p' <<<"$m")
[ "$gen" -ge $((32 * 2 + 4 + 24 * 2)) ] || fail "generated tokens counted: $gen"
echo "metrics: $(grep -c '^llm_' <<<"$m") samples, $gen tokens generated"

# a client that leaves mid-stream cancels its request on the front door
curl -sN -H 'Content-Type: application/json' --data-binary '{"prompt": "Once upon a time", "max_tokens": 16000, "ignore_eos": true, "stream": true}' \
    "$URL/v1/completions" >"$RUN/cut" 2>/dev/null & cut=$!
wait_until 20 '[ -s "$RUN/cut" ]' || fail "the stream to cut did not start"
kill "$cut"; wait "$cut" 2>/dev/null
grep -q '\[DONE\]' "$RUN/cut" && fail "the stream ended before the client left (make it longer)"
wait_until 5 '[ "$(status_field active)" = 0 ] && [ "$(status_field sessions)" = 0 ]' || fail "the request of a client that left is still running"
grep -q "cancelled by its client" "$RUN/tokenizerd.log" || fail "the front door was not told"
echo "a client that disconnected mid-stream: request cancelled on the front door"

# API keys: 401 in OpenAI's shape without or with a wrong key; /health stays open
KPORT=$(free_port)
"$LLM_BIN/llmc" serve --run-dir "$RUN" --port "$KPORT" --api-key k-one --api-key k-two 2>"$RUN/kgw.log" & E2E_PIDS+=($!)
wait_until 10 'curl -sf -o /dev/null http://127.0.0.1:$KPORT/health' || fail "keyed gateway did not start: $(cat "$RUN/kgw.log")"
URL=http://127.0.0.1:$KPORT
check_err 401 "" /v1/completions '{"prompt": "x", "max_tokens": 1}'
[ "$(json_get '["error"]["type"]' <<<"$r")" = authentication_error ] || fail "401 type: $r"
check_err 401 "" /v1/completions '{"prompt": "x", "max_tokens": 1}' -H 'Authorization: Bearer k-three'
check_err 401 "" /v1/models '' -X GET
r=$(post /v1/completions '{"prompt": "x", "max_tokens": 1}' -H 'Authorization: Bearer k-two')
[ "$(status)" = 200 ] || fail "the second key was refused: $r"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] || fail "/health needs a key"
echo "API keys: 401 without or with a wrong key, 200 with either key, /health open"

# no front door: 503 with code unavailable, /health 503
DPORT=$(free_port)
other=$(mktemp -d /tmp/llm-e2e-none.XXXXXX)
"$LLM_BIN/llmc" serve --run-dir "$other" --port "$DPORT" 2>"$RUN/dgw.log" & E2E_PIDS+=($!)
URL=http://127.0.0.1:$DPORT
wait_until 10 '[ "$(curl -s -o /dev/null -w "%{http_code}" $URL/health)" = 503 ]' || { rm -rf "$other"; fail "/health without a front door"; }
check_err 503 "" /v1/completions '{"prompt": "x"}'
rm -rf "$other"
[ "$(json_get '["error"]["code"]' <<<"$r")" = unavailable ] || fail "503 code: $r"
echo "no front door: 503 unavailable"
echo "PASS $E2E_NAME"
