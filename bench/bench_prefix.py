#!/usr/bin/env python3
"""bench_prefix.py - a long shared prompt, as agents and chat apps send it: this project
(with and without its KV pool's prefix cache) against llama-server with cache_prompt on,
in the same run on the same file (issue 19's measurements, ../shared/BENCH.md).

    python3 bench/bench_prefix.py --model FILE [--prefix 1500] [--question 20] [--tokens 64]
                                  [--streams 8] [--workers 2] [--threads 1]
                                  [--ours NAME=ARGS ...]   # pipeline.sh options per setup
                                  [--kill]                 # + kill -9 of a worker mid-stream
    LLAMA_SERVER=/path/to/llama-server python3 bench/bench_prefix.py ...   # + the peer

Workload, per setup:
  1. cold: one request alone, nothing cached: the shared prefix (--prefix tokens of
     deterministic prose) then a question; its TTFT is the baseline.
  2. warm-up: one more request with the same prefix (a cache, where there is one, now holds
     it).
  3. burst: --streams concurrent requests with the same prefix and different ~--question
     token questions, --tokens greedy tokens each with ignore-eos: mean TTFT (and its
     ratio to the cold TTFT) and aggregate tok/s (all tokens / wall time from the first
     request to the last answer).
With --kill (ours only): one stream with the prefix and 200 greedy tokens, undisturbed;
then the same again while the worker serving it is killed with -9 after ~60 tokens: the
longest gap between tokens and whether the text is identical.

Setups of ours are named pipeline.sh option strings, e.g.
  --ours "no-cache=--kv-pool 0" --ours "cache=--kv-pool 2G"
(default: one setup, "ours", with pipeline.sh's defaults). llama-server gets
-np STREAMS -c STREAMS*CTX -t WORKERS*THREADS and "cache_prompt": true.
The machines are shared and noisy: compare ratios taken in one run.
"""
import argparse
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_serve as bs  # noqa: E402  (Pipeline, LlamaServer, Stream, summarize)

WORDS = ("the keeper lamp harbour ship rock storm evening stairs light sea wind north tide "
         "rope boat bell night fog island gull coast signal wave cliff lantern captain crew "
         "anchor sail compass chart beacon shore reef current dawn dusk winter summer").split()


def shared_prefix(n_tokens, seed=1500):
    """Deterministic prose of about n_tokens tokens (a word is about 1.3 tokens)."""
    r = random.Random(seed)
    words = []
    for i in range(int(n_tokens / 1.3)):
        w = r.choice(WORDS)
        words.append(w.capitalize() if i % 12 == 0 else w)
        if i % 12 == 11:
            words[-1] += "."
    return "You are the archivist of a lighthouse. The log follows. " + " ".join(words) + "\n"


def question(i, n_tokens):
    r = random.Random(1000 + i)
    q = " ".join(r.choice(WORDS) for _ in range(max(1, int(n_tokens / 1.3) - 6)))
    return "Question %d: what about the %s? Answer:" % (i, q)


class Ours(bs.Pipeline):
    """bench_serve's pipeline, started with a setup's extra pipeline.sh options."""

    def status(self):
        p = subprocess.run([os.path.join(self.bin, "llmc"), "status", "--json", "--run-dir", self.run],
                           env=self.env, capture_output=True, text=True)
        try:
            return json.loads(p.stdout)
        except ValueError:
            return {}


def fresh(srv, args, extra):
    """A setup on a KV pool that kept blocks from an earlier run (a pool outlives its
    pipeline, like the weight segment) would answer the cold request from them: the
    segment and its pool are removed and the setup started again."""
    time.sleep(0.6)  # the workers' first beats carry the pool's counts
    st = srv.status()
    cached = st.get("kvc", 0) + st.get("kvrc", 0)
    if not (cached or st.get("kvu") or st.get("kvru")):
        return srv
    with open(os.path.join(srv.run, "segment")) as f:
        seg = f.read().strip()
    srv.stop()
    subprocess.run([os.path.join(srv.bin, "engined"), "--remove-segment", seg], env=srv.env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print("%s: the KV pool held %d cached blocks from an earlier run: removed, setup started again"
          % (" ".join(extra), cached), file=sys.stderr)
    return Ours(args, extra)


def one(server, text, n):
    st = bs.Stream()
    server.request(text, n, st)
    if st.error:
        raise RuntimeError(st.error)
    return st


def burst(server, prefix, args):
    sts = [bs.Stream() for _ in range(args.streams)]
    th = [threading.Thread(target=server.request, args=(prefix + question(i, args.question), args.tokens, sts[i]))
          for i in range(args.streams)]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    t1 = max([s.events[-1][0] for s in sts if s.events] or [t0])
    return bs.summarize(sts, t1 - t0)


def text_of(pipe, text, n, kill_after=None):
    """One greedy stream through llmc --json; optionally kill -9 its worker after kill_after
    tokens. Returns (text, longest gap s)."""
    cmd = [os.path.join(pipe.bin, "llmc"), "--run-dir", pipe.run, "--json", "-n", str(n), "--temp", "0",
           "--ignore-eos", text]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=pipe.env)
    out, times, seen, killed = [], [], 0, False
    for line in p.stdout:
        o = json.loads(line)
        if o.get("done"):
            break
        times.append(time.monotonic())
        out.append(o.get("text", ""))
        seen = o.get("tokens", seen)
        if kill_after is not None and not killed and seen >= kill_after:
            for w in pipe.status().get("workers", []):
                if w.get("sessions", 0) > 0 and w.get("pid"):
                    os.kill(int(w["pid"]), signal.SIGKILL)
                    killed = True
                    break
    p.wait()
    gaps = [b - a for a, b in zip(times, times[1:])]
    return "".join(out), max(gaps) if gaps else float("nan"), killed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prefix", type=int, default=1500)
    ap.add_argument("--question", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--ours", action="append", default=[], help="NAME=pipeline.sh options")
    ap.add_argument("--kill", action="store_true")
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--json", help="write every figure to this file")
    args = ap.parse_args()
    args.batch_tokens = args.idle_batch_tokens = 0
    args.max_sessions = max(16, args.streams)
    prefix = shared_prefix(args.prefix)
    setups = [(s.split("=", 1)[0], shlex.split(s.split("=", 1)[1] if "=" in s else "")) for s in args.ours] \
        or [("ours", [])]
    if os.environ.get("LLAMA_SERVER"):
        setups.append(("llama-server", None))
    rows = []
    for name, extra in setups:
        if extra is None:
            srv = bs.LlamaServer(os.environ["LLAMA_SERVER"], args, args.streams, ctx_per_slot=args.ctx,
                                 cache_prompt=True)
        else:
            srv = fresh(Ours(args, extra), args, extra)
        try:
            cold = one(srv, prefix + question(99, args.question), 4)
            one(srv, prefix + question(98, args.question), 4)  # warm-up
            row = burst(srv, prefix, args)
            row.update(server=name, cold_ttft=cold.ttft(), prompt_tokens=cold.n_prompt)
            if extra is not None:
                st = srv.status()
                row["status"] = {k: st[k] for k in st if k.startswith("kv") or k.startswith("prefix")}
                if args.kill:
                    base, _, _ = text_of(srv, prefix + question(7, args.question), 200)
                    txt, gap, killed = text_of(srv, prefix + question(7, args.question), 200, kill_after=60)
                    row.update(kill_gap=gap, kill_same=(txt == base), killed=killed)
            rows.append(row)
        finally:
            srv.stop()
    print("| server | prompt tokens | cold TTFT s | burst mean TTFT s | / cold | aggregate tok/s | errors |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d | %.2f | %.2f | %.2f | %.1f | %d |" % (
            r["server"], r["prompt_tokens"], r["cold_ttft"], r["ttft_mean"], r["ttft_mean"] / r["cold_ttft"],
            r["agg_tps"], r["errors"]))
    for r in rows:
        if "kill_gap" in r:
            print("%s: kill -9 of the serving worker after 60 of 200 tokens: killed %s, longest gap %.2f s, "
                  "text identical to the undisturbed run: %s" % (r["server"], r["killed"], r["kill_gap"],
                                                                  r["kill_same"]))
        if r.get("status"):
            print("%s: status %s" % (r["server"], json.dumps(r["status"])))
    peer = [r for r in rows if r["server"] == "llama-server"]
    for r in rows:
        if peer and r is not peer[0] and peer[0]["agg_tps"] > 0:
            print("%s / llama-server aggregate = %.2fx; mean TTFT %.2f s vs %.2f s" % (
                r["server"], r["agg_tps"] / peer[0]["agg_tps"], r["ttft_mean"], peer[0]["ttft_mean"]))
    return bs.finish(rows, args.json)


if __name__ == "__main__":
    sys.exit(main())
