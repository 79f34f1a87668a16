#!/usr/bin/env bash
# 72: many streams through the gateway at once, and a worker killed under them.
# 32 concurrent streaming requests (8 prompts x 4, greedy, 2 workers) all end with
# data: [DONE], each with exactly the text llmc gives for its prompt. Then 4 long
# streams run while `kill -9` hits a worker that holds some of them: the HTTP clients
# see no error and no gap in the text (each equals an uninterrupted run), only a pause.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 300
PORT=$(free_port)
# Each step is slowed by 3 ms (a test hook) so the long streams outlast the kill on any machine.
export LLM_FAULT_STEP_DELAY_MS=3
start_pipeline 2 --http "$PORT"
URL=http://127.0.0.1:$PORT/v1/completions
# sse_text FILE: the text of a completion stream; fails on bad framing or an error event
sse_text() {
    python3 - "$1" <<'PY'
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
assert raw.endswith("data: [DONE]\n\n"), "no data: [DONE] at the end: ...%r" % raw[-200:]
events = [json.loads(e[6:]) for e in raw.split("\n\n")[:-2]]
assert not any("error" in e for e in events), "error event: %r" % [e for e in events if "error" in e]
sys.stdout.write("".join(c["text"] for e in events for c in e["choices"]))
PY
}
stream() { # PROMPT N OUT
    curl -sN --max-time 240 -H 'Content-Type: application/json' --data-binary \
        "$(python3 -c 'import json, sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": int(sys.argv[2]), "temperature": 0, "ignore_eos": True, "stream": True}))' "$1" "$2")" \
        "$URL" >"$3"
}
prompts=("Once upon a time" "The little dog" "Lily and Tom went to the park" "One day, a big bear"
         "The sun was hot" "Ben had a red ball" "Mom said" "In the forest there lived")

for i in "${!prompts[@]}"; do llmc -n 96 --temp 0 --ignore-eos "${prompts[$i]}" >"$RUN/ref$i.txt" || fail "llmc reference $i"; done
pids=()
for k in $(seq 0 31); do stream "${prompts[$((k % 8))]}" 96 "$RUN/s$k.sse" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent stream failed (curl)"; done
for k in $(seq 0 31); do
    sse_text "$RUN/s$k.sse" >"$RUN/s$k.txt" || fail "stream $k: bad SSE"
    cmp -s "$RUN/s$k.txt" "$RUN/ref$((k % 8)).txt" || fail "stream $k differs from llmc's text for its prompt"
done
echo "32 concurrent streams: all ended with [DONE], each equal to llmc's text"
m=$(curl -s "http://127.0.0.1:$PORT/metrics")
grep -q '^llm_gateway_streams 0$' <<<"$m" || fail "streams still counted in flight: $(grep streams <<<"$m")"
grep -q 'llm_http_requests_total{endpoint="/v1/completions",code="200"} 32$' <<<"$m" || fail "request count: $(grep requests_total <<<"$m")"

# kill -9 of a worker under 4 long streams
N=${E2E_KILL_N:-1500}
for i in 0 1 2 3; do llmc -n "$N" --temp 0 --ignore-eos "${prompts[$i]}" >"$RUN/long$i.txt" & E2E_PIDS+=($!); done
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "reference stream failed"; done
E2E_PIDS=()
for i in 0 1 2 3; do stream "${prompts[$i]}" "$N" "$RUN/k$i.sse" & E2E_PIDS+=($!); done
victim=""
for t in $(seq 600); do
    started=1
    for i in 0 1 2 3; do grep -q '"text"' "$RUN/k$i.sse" 2>/dev/null || started=0; done
    if [ $started = 1 ]; then
        victim=$(status_field busy)
        [ -n "$victim" ] && break
    fi
    sleep 0.01
done
[ -n "$victim" ] || fail "no worker held a stream's session"
kill -9 "$victim"
echo "killed worker $victim under 4 HTTP streams"
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "an HTTP stream failed after the kill"; done
E2E_PIDS=()
for i in 0 1 2 3; do
    sse_text "$RUN/k$i.sse" >"$RUN/k$i.txt" || fail "stream $i after the kill: bad SSE or an error event"
    cmp -s "$RUN/k$i.txt" "$RUN/long$i.txt" || fail "stream $i differs from its uninterrupted run after the kill"
done
grep -q "re-dispatching at step" "$RUN/tokenizerd.log" || fail "no session was re-dispatched (the kill missed the streams)"
echo "kill -9 of a worker mid-stream: every HTTP stream completed with its uninterrupted text"
echo "PASS $E2E_NAME"
