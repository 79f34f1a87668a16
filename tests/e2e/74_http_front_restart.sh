#!/usr/bin/env bash
# 74: a front door killed (-9) under HTTP streams is invisible to the HTTP clients. With
# the daemons supervised (pipeline.sh --supervise), 4 greedy streams and 2 seeded sampled
# ones run through the gateway while tokenizerd is killed: the gateway resumes each
# request on the new front door (GENERATE with resume, key, rbytes, the seed pinned), the
# new front door replays the text from the bytes received, and every SSE stream ends
# with data: [DONE] and exactly the text of an uninterrupted run.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 240
PORT=$(free_port)
# Each step is slowed by 3 ms (a test hook) so the streams outlast the fault on any machine.
export LLM_FAULT_STEP_DELAY_MS=3
start_pipeline 2 --supervise --http "$PORT"
N=1200
prompts=("Once upon a time" "The little dog" "Lily and Tom went to the park" "One day, a big bear" "Sam had a red ball" "The sun was hot")
args() { if [ "$1" -lt 4 ]; then echo "--temp 0"; else echo "--temp 0.9 --seed $((40 + $1))"; fi; }
body() { python3 -c 'import json, sys
i = int(sys.argv[2]); d = {"prompt": sys.argv[1], "max_tokens": int(sys.argv[3]), "stream": True}
d.update({"temperature": 0} if i < 4 else {"temperature": 0.9, "seed": 40 + i})
print(json.dumps(d))' "$@"; }
sse_text() {
    python3 - "$1" <<'PY'
import json, sys
raw = open(sys.argv[1], encoding="utf-8").read()
assert raw.endswith("data: [DONE]\n\n"), "no data: [DONE] at the end: ...%r" % raw[-300:]
events = [json.loads(e[6:]) for e in raw.split("\n\n")[:-2]]
assert not any("error" in e for e in events), "error event: %r" % [e for e in events if "error" in e]
sys.stdout.write("".join(c["text"] for e in events for c in e["choices"]))
PY
}
for i in 0 1 2 3 4 5; do llmc -n $N $(args $i) "${prompts[$i]}" >"$RUN/ref$i.txt" & E2E_PIDS+=($!); done
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "reference stream failed"; done
E2E_PIDS=()
for i in 0 1 2 3 4 5; do
    curl -sN --max-time 200 -H 'Content-Type: application/json' --data-binary "$(body "${prompts[$i]}" $i $N)" \
        "http://127.0.0.1:$PORT/v1/completions" >"$RUN/s$i.sse" & E2E_PIDS+=($!)
done
wait_until 30 '(for i in 0 1 2 3 4 5; do grep -q "\"text\"" "$RUN/s$i.sse" 2>/dev/null || exit 1; done)' || fail "streams did not start"
old=$(cat "$RUN/tokenizerd.pid")
kill -9 "$old"
echo "killed tokenizerd $old under 6 HTTP streams"
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "an HTTP stream failed (curl) across the restart"; done
E2E_PIDS=()
for i in 0 1 2 3 4 5; do
    sse_text "$RUN/s$i.sse" >"$RUN/s$i.txt" || fail "stream $i: bad SSE or an error event across the restart"
    cmp -s "$RUN/s$i.txt" "$RUN/ref$i.txt" || fail "stream $i differs from its uninterrupted run ($(wc -c <"$RUN/s$i.txt") vs $(wc -c <"$RUN/ref$i.txt") bytes)"
done
[ "$(cat "$RUN/tokenizerd.pid")" != "$old" ] || fail "tokenizerd was not restarted"
n=$(grep -c "resuming on the front door" "$RUN/gateway.log")
[ "$n" -ge 1 ] || fail "the gateway resumed nothing (did the kill land mid-stream?)"
grep -q "resumed by its client" "$RUN/tokenizerd.log" || fail "the new front door saw no resume"
echo "6 HTTP streams (4 greedy, 2 sampled) equal their uninterrupted runs across kill -9 of tokenizerd ($n resumes)"
echo "PASS $E2E_NAME"
