#!/usr/bin/env bash
# 80: an embedding does not stall the worker's other sessions. On a model of real shape
# (stories110m, llmc synth) with one worker thread, a stream decodes while a ~1900-token
# input is embedded through /v1/embeddings: the embedding's prefill goes through the
# continuous-batching steps (batch_tokens at a time, beside the decoding session), so the
# stream's longest gap between chunks stays a small part of the embedding's own time
# (run all at once, it would be all of it). The vector equals the one the same input
# gets alone (batch invariance), and is L2-normalized.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 240
MODEL=$(synth_model stories110m Q8_0)
export LLM_KERNELS=avx2 # as 61: the 256-bit kernels, so the prefill is long enough to see
PORT=$(free_port)
start_pipeline 1 --threads 1 --http "$PORT"
BASE=http://127.0.0.1:$PORT
wait_until 30 "curl -sf $BASE/health >/dev/null" || fail "the gateway did not come up"
long=$(words 1900)
python3 - "$BASE" "$long" "$RUN" <<'PY' || fail "see above"
import http.client, json, math, sys, threading, time, urllib.parse
base, text, run = sys.argv[1], sys.argv[2], sys.argv[3]
u = urllib.parse.urlparse(base)
def post(path, body):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return c, c.getresponse()
def embed():
    c, r = post("/v1/embeddings", {"model": "m", "input": text})
    assert r.status == 200, r.read()
    return json.loads(r.read())["data"][0]["embedding"]
alone = embed()
assert abs(math.sqrt(sum(x * x for x in alone)) - 1) < 1e-5, "not normalized"
c, r = post("/v1/completions", {"model": "m", "prompt": "Once upon a time", "max_tokens": 400,
                                "temperature": 0, "ignore_eos": True, "stream": True})
assert r.status == 200
stamps, box = [], {}
def during():
    time.sleep(1.0)
    t0 = time.time()
    box["vec"] = embed()
    box["t"] = (t0, time.time())
th = threading.Thread(target=during)
th.start()
for line in r:
    if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
        stamps.append(time.time())
th.join()
t0, t1 = box["t"]
gaps = [b - a for a, b in zip(stamps, stamps[1:]) if b > t0 and a < t1]
emb_ms, gap_ms = (t1 - t0) * 1000, max(gaps) * 1000 if gaps else 0
print("embedding of ~1900 tokens beside a stream: %.0f ms; the stream's longest gap meanwhile %.0f ms (%d chunks)"
      % (emb_ms, gap_ms, len(gaps)))
assert gaps, "the stream ended before the embedding began: nothing measured"
assert emb_ms >= 800, "the embedding took only %.0f ms: the test would prove nothing" % emb_ms
assert gap_ms < 0.5 * emb_ms, "the stream stalled for %.0f ms of the embedding's %.0f ms" % (gap_ms, emb_ms)
assert len(gaps) >= 3, "the stream ended during the embedding: too little measured"
assert box["vec"] == alone, "the vector beside a stream differs from the one alone"
PY
echo "PASS $E2E_NAME"
