#!/usr/bin/env python3
"""bench_structured.py - constrained decoding: generation speed with a nested JSON schema
against the same requests unconstrained, and against llama-server with the same
json_schema, in the same run on the same file (issue 20's measurement, ../shared/BENCH.md).

    python3 bench/bench_structured.py --model FILE [--streams 1,8] [--tokens 128]
                                      [--workers 1] [--threads 2] [--reps 2]
    LLAMA_SERVER=/path/to/llama-server python3 bench/bench_structured.py ...   # + the peer

The model should have a large vocabulary, where masks cost the most: the TinyLlama-1.1B
shape with the Llama-3 vocabulary (128k tokens),
  llmc synth --shape tinyllama-1.1b --type Q8_0 --seed 2001 \\
       --vocab-from ../shared/reference/tokenizer/ggml-vocab-llama-bpe.gguf -o FILE
Both servers get the same HTTP requests: ours through the gateway (`llmc serve`, POST
/v1/completions with llama-server's `json_schema` field), llama-server on /completion,
streaming, temperature 1.0 with a fixed seed per stream (a random-weight model writes
noise, so the schema decides the text's shape), at most --tokens tokens. A constrained
stream may end sooner (its document is complete): speed is tokens / time from the first
token to the last of each stream (decode), and aggregate tokens / wall time. Reported per
setup: decode tok/s per stream, aggregate tok/s, mean TTFT; then constrained /
unconstrained and ours / llama-server, and the extra time per token the grammar costs
(1/constrained - 1/unconstrained, which bounds samplerd's mask time).
The machines are shared and noisy: compare ratios taken in one run.
"""
import argparse
import http.client
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_serve as bs  # noqa: E402  (Pipeline, LlamaServer, Stream, summarize, pct)

SCHEMA = {
    "type": "object", "required": ["id", "owner", "pets"],
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "owner": {"$ref": "#/$defs/person"},
        "pets": {"type": "array", "maxItems": 4, "items": {"type": "object", "required": ["kind", "name", "age"],
                 "properties": {"kind": {"enum": ["cat", "dog", "fish"]},
                                "name": {"type": "string", "maxLength": 20},
                                "age": {"type": "integer", "minimum": 0, "maximum": 30}}}},
        "notes": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 4}},
    "$defs": {"person": {"type": "object", "required": ["name", "age"], "additionalProperties": False,
                         "properties": {"name": {"type": "string", "maxLength": 24},
                                        "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                        "email": {"type": "string", "maxLength": 40}}}},
}
PROMPT = "Write the record of a pet owner as JSON.\n"


def post_stream(port, path, body, st):
    """Streams one request; appends (time, 1) per piece that carries text."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    st.t_send = time.monotonic()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        st.error = "HTTP %d: %s" % (r.status, r.read()[:300])
        return
    while True:
        line = r.fp.readline()
        if not line:
            break
        t = time.monotonic()
        line = line.strip()
        if line == b"data: [DONE]" or not line.startswith(b"data: "):
            if line == b"data: [DONE]":
                break
            continue
        o = json.loads(line[6:])
        if "error" in o:
            st.error = str(o["error"])
            break
        if "choices" in o:  # ours: OpenAI chunks
            if o.get("usage"):
                extra = o["usage"]["completion_tokens"] - st.n_tokens()
                if extra > 0 and st.events:
                    st.events[-1] = (st.events[-1][0], st.events[-1][1] + extra)
            elif o["choices"] and o["choices"][0].get("text"):
                st.events.append((t, 1))
        else:  # llama-server
            if o.get("content"):
                st.events.append((t, 1))
            if o.get("stop"):
                break


class Ours(bs.Pipeline):
    def __init__(self, args):
        args.gateway = True
        super().__init__(args)

    def request(self, schema, seed, n, st):
        body = {"prompt": PROMPT, "max_tokens": n, "temperature": 1.0, "seed": seed, "stream": True,
                "stream_options": {"include_usage": True}}
        if schema:
            body["json_schema"] = schema
        post_stream(self.port, "/v1/completions", body, st)


class Peer(bs.LlamaServer):
    def request(self, schema, seed, n, st):
        body = {"prompt": PROMPT, "n_predict": n, "temperature": 1.0, "seed": seed, "stream": True,
                "cache_prompt": False}
        if schema:
            body["json_schema"] = schema
        post_stream(self.port, "/completion", body, st)


def run(server, n_streams, schema, tokens, rep):
    sts = [bs.Stream() for _ in range(n_streams)]
    th = [threading.Thread(target=server.request, args=(schema, 1000 * rep + i + 1, tokens, sts[i]))
          for i in range(n_streams)]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    t1 = max([s.events[-1][0] for s in sts if s.events] or [t0])
    row = bs.summarize(sts, t1 - t0)
    rates = []
    for s in sts:
        tt = s.token_times()
        if len(tt) > 1 and tt[-1] > tt[0]:
            rates.append((len(tt) - 1) / (tt[-1] - tt[0]))
    row["decode_tps"] = sum(rates) / len(rates) if rates else float("nan")
    row["tokens_per_stream"] = row["tokens"] / n_streams
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=2, help="runs per setup; the best decode rate is kept")
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--json", help="write every figure to this file")
    args = ap.parse_args()
    args.batch_tokens = args.idle_batch_tokens = 0
    ns = [int(x) for x in args.streams.split(",")]
    args.max_sessions = max([16] + ns)
    servers = [("ours", None)]
    if os.environ.get("LLAMA_SERVER"):
        servers.append(("llama-server", os.environ["LLAMA_SERVER"]))
    rows = []
    for name, path in servers:
        srv = Ours(args) if path is None else Peer(path, args, max(ns))
        try:
            run(srv, 1, None, 8, 99)  # warm-up: page in the weights
            for n in ns:
                # the two modes alternate rep by rep, so that a machine whose load drifts
                # weighs on both alike
                best = {}
                for rep in range(args.reps):
                    for mode, schema in (("unconstrained", None), ("json_schema", SCHEMA)):
                        row = run(srv, n, schema, args.tokens, rep)
                        if mode not in best or row["decode_tps"] > best[mode]["decode_tps"]:
                            best[mode] = row
                for mode in ("unconstrained", "json_schema"):
                    best[mode].update(server=name, mode=mode)
                    rows.append(best[mode])
        finally:
            srv.stop()
    print("| server | streams | mode | decode tok/s per stream | aggregate tok/s | tokens per stream | "
          "TTFT mean s | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %s | %.1f | %.1f | %.0f | %.2f | %d |" % (
            r["server"], r["streams"], r["mode"], r["decode_tps"], r["agg_tps"], r["tokens_per_stream"],
            r["ttft_mean"], r["errors"]))
    by = {(r["server"], r["streams"], r["mode"]): r for r in rows}
    for n in ns:
        for name, _ in servers:
            u, c = by.get((name, n, "unconstrained")), by.get((name, n, "json_schema"))
            if u and c and u["decode_tps"] > 0 and c["decode_tps"] > 0:
                print("%s, %d streams: json_schema / unconstrained decode = %.2fx (grammar cost %.2f ms per token)"
                      % (name, n, c["decode_tps"] / u["decode_tps"], (1 / c["decode_tps"] - 1 / u["decode_tps"]) * 1e3))
        a, b = by.get(("ours", n, "json_schema")), by.get(("llama-server", n, "json_schema"))
        if a and b and b["decode_tps"] > 0:
            print("%d streams, json_schema: ours / llama-server decode = %.2fx, aggregate = %.2fx" % (
                n, a["decode_tps"] / b["decode_tps"], a["agg_tps"] / b["agg_tps"] if b["agg_tps"] else float("nan")))
    return bs.finish(rows, args.json)


if __name__ == "__main__":
    sys.exit(main())
