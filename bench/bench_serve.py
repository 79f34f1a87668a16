#!/usr/bin/env python3
"""bench_serve.py - serving benchmark: N concurrent streams through the real daemons and
llmc, and the same through llama-server (llama.cpp) on the same file in the same run.

    python3 bench/bench_serve.py --model FILE [--streams 1,8] [--tokens 64]
                                 [--workers 1] [--threads 2] [--batch-tokens N]
                                 [--long]              # + one 512-token prompt while 7 decode
                                 [--gateway]           # + the same streams through `llmc serve`
    LLAMA_SERVER=/path/to/llama-server python3 bench/bench_serve.py ...   # + the peer
    IK_LLAMA_SERVER=/path/to/ik_llama.cpp/.../llama-server ...             # + ik_llama.cpp's

Each stream is a ~28-token prompt and --tokens greedy tokens with ignore-eos. Reported
per setup: aggregate tok/s (every generated token / wall time from the first request to
the last answer), mean and p95 time to first token, mean and max inter-token gap. With
--long: 7 streams decode (--tokens x 3) and, once all have produced a token, one
~512-token prompt arrives: its TTFT and the largest gap any of the 7 saw meanwhile.
llama-server gets -np N -c N*1024 -t WORKERS*THREADS and POSTs to /completion with
"ignore_eos": true, "cache_prompt": false, streaming (../shared/BENCH.md).
With --gateway the pipeline also runs the OpenAI-compatible gateway and every rep sends
the same N streams through llmc and then through the gateway (POST /v1/completions,
streaming, stream_options.include_usage): the ratio of the two aggregates is the
gateway's cost, taken back to back on one pipeline. The gateway's streams also get ratio
lines against the peers: HTTP from the same client threads on both sides, where llmc
starts a process per request (8 of them reach the engine over tens of milliseconds).
The servers of one stream count run side by side (an idle one takes no CPU) and take their
reps in turn: ours, each peer, ours again. A minute's swing of the machine then lands on
all of them, and the ratio lines give each rep's ratio beside the best-of-reps one.
The machines are shared and noisy: compare ratios taken in one run.
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

STORY = ("Once upon a time, there was a little girl named Lily who loved to play outside "
         "in the park with her friends every day after school.")
LONG = ("The old lighthouse keeper climbed the winding stairs each evening, counting the "
        "steps as his father had taught him, and lit the great lamp that warned the ships "
        "away from the rocks. ")


def prompt(i):
    return "%s Story %d:" % (STORY, i)


def long_prompt():
    return (LONG * 13).strip()


class Stream:
    """One request's timeline: send time, (arrival time, tokens) per piece."""

    def __init__(self):
        self.t_send = 0.0
        self.events = []
        self.n_prompt = 0
        self.error = None

    def ttft(self):
        return self.events[0][0] - self.t_send if self.events else None

    def n_tokens(self):
        return sum(k for _, k in self.events)

    def token_times(self):
        out = []
        for t, k in self.events:
            out += [t] * k
        return out

    def gaps(self, t0=None, t1=None):
        tt = self.token_times()
        return [b - a for a, b in zip(tt, tt[1:])
                if (t0 is None or b >= t0) and (t1 is None or a <= t1)]


# ---- ours: the pipeline and llmc ---------------------------------------------------------

class Pipeline:
    def __init__(self, args, extra=()):
        """extra: more pipeline.sh start options (bench_prefix.py's setups)."""
        self.bin = os.path.join(ROOT, args.build, "bin")
        self.run = tempfile.mkdtemp(prefix="llm-bench-serve.")
        os.chmod(self.run, 0o700)
        self.env = dict(os.environ, LLM_BIN=self.bin, LLM_RUN_DIR=self.run)
        cmd = ["bash", os.path.join(ROOT, "deploy/pipeline.sh"), "start", "--model", args.model,
               "--workers", str(args.workers), "--threads", str(args.threads), "--run-dir", self.run,
               "--ctx", str(args.ctx), "--max-sessions", str(max(args.max_sessions, 8))]
        if args.batch_tokens:
            cmd += ["--batch-tokens", str(args.batch_tokens)]
        if args.idle_batch_tokens:
            cmd += ["--idle-batch-tokens", str(args.idle_batch_tokens)]
        self.port = free_port() if getattr(args, "gateway", False) else 0
        if self.port:
            cmd += ["--http", str(self.port)]
        cmd += list(extra)
        subprocess.run(cmd, env=self.env, check=True, stdout=subprocess.DEVNULL)

    def stop(self):
        subprocess.run(["bash", os.path.join(ROOT, "deploy/pipeline.sh"), "stop", "--run-dir", self.run],
                       env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.run, ignore_errors=True)

    def request(self, text, n, st):
        cmd = [os.path.join(self.bin, "llmc"), "--run-dir", self.run, "--json", "-n", str(n), "--temp", "0",
               "--ignore-eos", text]
        st.t_send = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env)
        seen = 0
        for line in p.stdout:
            t = time.monotonic()
            o = json.loads(line)
            if o.get("done"):
                st.n_prompt = o.get("prompt_tokens", 0)
                break
            k = o.get("tokens", seen) - seen
            seen = o.get("tokens", seen)
            st.events.append((t, k))
        err = p.stderr.read().decode(errors="replace")
        if p.wait() != 0:
            st.error = err.strip() or "llmc exit %d" % p.returncode


class Gateway:
    """The same pipeline through its OpenAI-compatible HTTP gateway (llmc serve)."""

    def __init__(self, port, run_dir):
        self.port = port
        with open(os.path.join(run_dir, "gateway.pid")) as f:
            self.pid = int(f.read())

    def cpu_s(self):
        """CPU seconds the gateway process has used so far (user + system)."""
        with open("/proc/%d/stat" % self.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def request(self, text, n, st):
        body = json.dumps({"prompt": text, "max_tokens": n, "ignore_eos": True, "temperature": 0,
                           "stream": True, "stream_options": {"include_usage": True}})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        st.t_send = time.monotonic()
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            st.error = "HTTP %d: %s" % (r.status, r.read()[:200])
            return
        done = False
        while True:
            line = r.fp.readline()
            if not line:
                break
            t = time.monotonic()
            line = line.strip()
            if line == b"data: [DONE]":
                done = True
                break
            if not line.startswith(b"data: "):
                continue
            o = json.loads(line[6:])
            if "error" in o:
                st.error = o["error"].get("message", "error event")
            elif o.get("usage"):  # the last chunk: the exact count (a piece may carry several tokens)
                st.n_prompt = o["usage"]["prompt_tokens"]
                extra = o["usage"]["completion_tokens"] - st.n_tokens()
                if extra > 0 and st.events:
                    st.events[-1] = (st.events[-1][0], st.events[-1][1] + extra)
            elif o["choices"] and o["choices"][0]["text"]:
                st.events.append((t, 1))
        if not done and not st.error:
            st.error = "the stream ended without data: [DONE]"


# ---- the peer: llama-server --------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def peer_threads(args):
    """A peer server gets every thread ours has: workers x threads."""
    return getattr(args, "workers", 1) * args.threads


class LlamaServer:
    def __init__(self, path, args, n_par, ctx_per_slot=1024, cache_prompt=False, extra=()):
        """extra: more llama-server arguments (a KV type, flash attention)."""
        self.port = free_port()
        self.cache_prompt = cache_prompt
        self.log = open(os.path.join(tempfile.gettempdir(), "llama-server-bench.log"), "w")
        self.p = subprocess.Popen([path, "-m", args.model, "-np", str(n_par), "-c", str(n_par * ctx_per_slot),
                                   "-t", str(peer_threads(args)), "--port", str(self.port), "--host", "127.0.0.1"]
                                  + list(extra), stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(1200):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            if self.p.poll() is not None:
                raise RuntimeError("llama-server exited (see %s)" % self.log.name)
            time.sleep(0.1)
        raise RuntimeError("llama-server did not become healthy")

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
        self.log.close()

    def request(self, text, n, st):
        body = json.dumps({"prompt": text, "n_predict": n, "ignore_eos": True, "cache_prompt": self.cache_prompt,
                           "temperature": 0, "stream": True})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        st.t_send = time.monotonic()
        c.request("POST", "/completion", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            st.error = "HTTP %d" % r.status
            return
        while True:
            line = r.fp.readline()
            if not line:
                break
            t = time.monotonic()
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            o = json.loads(line[6:])
            if o.get("stop"):
                st.n_prompt = o.get("timings", {}).get("prompt_n", o.get("tokens_evaluated", 0))
                break
            st.events.append((t, 1))


# ---- workloads ---------------------------------------------------------------------------

def run_streams(server, n, tokens):
    sts = [Stream() for _ in range(n)]
    th = [threading.Thread(target=server.request, args=(prompt(i), tokens, sts[i])) for i in range(n)]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    t1 = max([s.events[-1][0] for s in sts if s.events] or [t0])
    return sts, t1 - t0


def run_long(server, tokens):
    """7 streams decode; once each has a token, a ~512-token prompt arrives."""
    sts = [Stream() for _ in range(7)]
    th = [threading.Thread(target=server.request, args=(prompt(i), tokens, sts[i])) for i in range(7)]
    for t in th:
        t.start()
    while any(not s.events and not s.error for s in sts):
        time.sleep(0.01)
    lg = Stream()
    tl = threading.Thread(target=server.request, args=(long_prompt(), 8, lg))
    tl.start()
    tl.join()
    for t in th:
        t.join()
    t_end = lg.events[0][0] if lg.events else time.monotonic()
    gaps = [g for s in sts for g in s.gaps(lg.t_send, t_end)]
    return lg, max(gaps) if gaps else float("nan"), sts


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))] if xs else float("nan")


def summarize(sts, wall):
    errs = [s.error for s in sts if s.error]
    toks = sum(s.n_tokens() for s in sts)
    ttft = [s.ttft() for s in sts if s.ttft() is not None]
    gaps = [g for s in sts for g in s.gaps()]
    return {"streams": len(sts), "tokens": toks, "errors": len(errs), "first_error": errs[0] if errs else "",
            "agg_tps": toks / wall if wall > 0 else 0.0, "ttft_mean": sum(ttft) / len(ttft) if ttft else float("nan"),
            "ttft_p95": pct(ttft, 95), "gap_mean": sum(gaps) / len(gaps) if gaps else float("nan"),
            "gap_max": max(gaps) if gaps else float("nan"), "prompt_tokens": sts[0].n_prompt if sts else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--streams", default="1,8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-tokens", type=int, default=0)
    ap.add_argument("--idle-batch-tokens", type=int, default=0)
    ap.add_argument("--max-sessions", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--long", action="store_true", help="also: one 512-token prompt while 7 streams decode")
    ap.add_argument("--reps", type=int, default=1, help="runs per setup; the best aggregate is kept")
    ap.add_argument("--gateway", action="store_true", help="also: the same streams through `llmc serve`")
    ap.add_argument("--json", help="write every figure to this file")
    args = ap.parse_args()
    ns = [int(x) for x in args.streams.split(",")]
    args.max_sessions = max([args.max_sessions] + ns)
    peers = [("ours", None)]
    if os.environ.get("LLAMA_SERVER"):
        peers.append(("llama-server", os.environ["LLAMA_SERVER"]))
    if os.environ.get("IK_LLAMA_SERVER"):
        peers.append(("ik_llama-server", os.environ["IK_LLAMA_SERVER"]))
    results = []
    for n in ns:
        # every server of this stream count started side by side (an idle one takes no CPU),
        # then the reps in turn, ours, the peers, ours...: a minute's swing of the machine
        # lands on every server rather than on one's whole run
        srvs = []
        try:
            for name, path in peers:
                srvs.append((name, path, Pipeline(args) if path is None
                             else LlamaServer(path, args, max(n, 8 if args.long else n))))
            runs = []
            for name, path, srv in srvs:
                gw = Gateway(srv.port, srv.run) if path is None and args.gateway else None
                runs.append({"name": name, "path": path, "srv": srv, "gw": gw, "best": None, "best_gw": None,
                             "pairs": [], "gw_cpu": 0.0, "gw_wall": 0.0, "gw_toks": 0.0, "reps": [],
                             "gw_reps": []})
                run_streams(srv, 1, 4)  # warm-up: page in the weights
            for _ in range(args.reps):
                for r in runs:  # llmc and the gateway alternate, back to back
                    sts, wall = run_streams(r["srv"], n, args.tokens)
                    row = summarize(sts, wall)
                    r["reps"].append(row["agg_tps"])
                    if r["best"] is None or row["agg_tps"] > r["best"]["agg_tps"]:
                        r["best"] = row
                    gw = r["gw"]
                    if gw:
                        llmc_tps = row["agg_tps"]
                        c0 = gw.cpu_s()
                        sts, wall = run_streams(gw, n, args.tokens)
                        r["gw_cpu"] += gw.cpu_s() - c0
                        r["gw_wall"] += wall
                        row = summarize(sts, wall)
                        r["gw_toks"] += row["tokens"]
                        r["gw_reps"].append(row["agg_tps"])
                        if r["best_gw"] is None or row["agg_tps"] > r["best_gw"]["agg_tps"]:
                            r["best_gw"] = row
                        if llmc_tps > 0:
                            r["pairs"].append(row["agg_tps"] / llmc_tps)
            for r in runs:
                best, best_gw = r["best"], r["best_gw"]
                best.update(server=r["name"], reps=r["reps"],
                            setup="%d x %d" % (args.workers, args.threads) if r["path"] is None
                            else "-np %d -t %d" % (n, peer_threads(args)))
                results.append(best)
                if best_gw:
                    best_gw.update(server="ours via HTTP gateway", setup=best["setup"], pairs=r["pairs"],
                                   reps=r["gw_reps"],
                                   gw_cpu_share=r["gw_cpu"] / r["gw_wall"] if r["gw_wall"] else 0.0,
                                   gw_cpu_ms_per_tok=r["gw_cpu"] * 1e3 / r["gw_toks"] if r["gw_toks"] else 0.0)
                    results.append(best_gw)
                if args.long and n == ns[-1]:
                    lg, gap, sts = run_long(r["srv"], args.tokens * 3)
                    results.append({"server": r["name"], "long": True, "ttft_long": lg.ttft() or float("nan"),
                                    "long_prompt_tokens": lg.n_prompt, "max_gap_others": gap,
                                    "errors": sum(1 for s in sts + [lg] if s.error)})
        finally:
            for _, _, srv in srvs:
                srv.stop()
    print("| server | setup | streams | aggregate tok/s | TTFT mean s | TTFT p95 s | gap mean ms | gap max ms | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if r.get("long"):
            continue
        print("| %s | %s | %d | %.1f | %.2f | %.2f | %.1f | %.0f | %d |" % (
            r["server"], r["setup"], r["streams"], r["agg_tps"], r["ttft_mean"], r["ttft_p95"],
            r["gap_mean"] * 1e3, r["gap_max"] * 1e3, r["errors"]))
    for r in results:
        if r.get("long"):
            print("long prompt (%d tokens) arriving while 7 streams decode, %s: its TTFT %.2f s, the others' "
                  "largest gap %.0f ms, errors %d" % (r["long_prompt_tokens"], r["server"], r["ttft_long"],
                                                       r["max_gap_others"] * 1e3, r["errors"]))
    by = {(r["server"], r["streams"]): r for r in results if not r.get("long")}
    for n in ns:
        a, g = by.get(("ours", n)), by.get(("ours via HTTP gateway", n))
        if a and g and a["agg_tps"] > 0:
            pr = sorted(g.get("pairs", []))
            print("%d streams: gateway / llmc aggregate, best of each = %.3f (gateway cost %.1f%%); per back-to-back "
                  "pair %s, median %.3f; mean TTFT %.3f s vs %.3f s" % (
                      n, g["agg_tps"] / a["agg_tps"], (1 - g["agg_tps"] / a["agg_tps"]) * 100,
                      " ".join("%.3f" % x for x in pr), pct(pr, 50), g["ttft_mean"], a["ttft_mean"]))
            print("%d streams: the gateway process used %.1f%% of one core while its streams ran "
                  "(%.3f ms of CPU per generated token)" % (n, g["gw_cpu_share"] * 100, g["gw_cpu_ms_per_tok"]))
    # ours through llmc (a process per request), and through the gateway: HTTP from the
    # same client threads, as the peers get their requests
    for n in ns:
        for peer in ("llama-server", "ik_llama-server"):
            for ours, label in (("ours", "ours"), ("ours via HTTP gateway", "ours via the gateway")):
                a, b = by.get((ours, n)), by.get((peer, n))
                if a and b and b["agg_tps"] > 0:
                    per = [x / y for x, y in zip(a["reps"], b["reps"]) if y > 0]
                    print("%d streams: %s / %s aggregate = %.2fx, mean TTFT %.2f s vs %.2f s; rep by rep %s" % (
                        n, label, peer, a["agg_tps"] / b["agg_tps"], a["ttft_mean"], b["ttft_mean"],
                        " ".join("%.2fx" % x for x in per)))
    return finish(results, args.json)


def finish(rows, json_path):
    """Names the setups that had errors, writes every figure to json_path (if given);
    the exit status: 1 if any row had errors (bench_prefix.py, bench_structured.py too)."""
    for r in rows:
        if r.get("errors"):
            print("ERRORS in %s %s: %s" % (r["server"], r.get("mode", ""), r.get("first_error", "")),
                  file=sys.stderr)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any(r.get("errors") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
