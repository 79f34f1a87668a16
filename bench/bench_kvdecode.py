#!/usr/bin/env python3
"""bench_kvdecode.py - decode speed deep in the context, per KV cache type, side by side
with llama.cpp and ik_llama.cpp on the same file, the same KV type and flash attention.

  python3 bench/bench_kvdecode.py --model /tmp/llm-bench/tinyllama-1.1b-Q8_0.gguf \\
      [--depth 3968] [--gen 128] [--types f16,q8_0] [--threads 2] [--reps 2]
  LLAMA_SERVER=.../llama.cpp/build/bin/llama-server \\
  IK_LLAMA_SERVER=.../ik_llama.cpp/build/bin/llama-server python3 bench/bench_kvdecode.py ...

Ours: `engined --eval` of a --depth-token prompt then --gen greedy one-token steps
(`--kv T`; with --kv-pool SIZE the session holds pool blocks, as a pipeline's sessions
with --kv-pool do), its logged decode rate: the tokens decoded between positions depth and
depth + gen (4,096 by default). Peers: llama-server (llama.cpp c392e50's llama-bench has no
depth option) with `-c depth+gen+16 -np 1 -t T -ctk T -ctv T` and flash attention, one
/completion of the same token ids with n_predict gen, ignore_eos, no prompt cache and the
byte tokens banned (below): its timings.predicted_per_second. Each cell is the best of --reps; ours and the peers
alternate rep by rep, so a drifting load weighs on all alike.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_serve as bs  # noqa: E402  (LlamaServer)


def prompt_ids(n):
    # the same spread of ids bench_engine.sh uses, BOS first
    return [1] + [100 + (i * 7919) % 31000 for i in range(1, n)]


def ours(args, kv, ids):
    """(prefill tok/s, decode tok/s) of one engined --eval run."""
    with tempfile.NamedTemporaryFile("w", prefix="kvdecode.", suffix=".txt", delete=False) as f:
        f.write("\n".join(map(str, ids)) + "\n")
    try:
        out = subprocess.run([os.path.join(args.bin, "engined"), "--model", args.model, "--eval", f.name,
                              "-n", str(args.gen + 1), "--threads", str(args.threads), "--kv", kv]
                             + (["--kv-pool", args.kv_pool] if args.kv_pool else []),
                             capture_output=True, text=True, timeout=1800)
    finally:
        os.unlink(f.name)
    pp = re.search(r"prefill: \d+ tokens in [0-9.]+ ms \(([0-9.]+) tok/s", out.stderr)
    tg = re.search(r"decode: \d+ tokens in [0-9.]+ ms \(([0-9.]+) tok/s", out.stderr)
    if out.returncode != 0 or not pp or not tg:
        raise SystemExit("engined --eval failed (--kv %s): %s" % (kv, out.stderr[-400:]))
    return float(pp.group(1)), float(tg.group(1))


def peer(path, flavour, args, kv, ids):
    """(prefill tok/s, decode tok/s) of one llama-server /completion."""
    fa = ["-fa"] if flavour == "llama.cpp" else ["-fa", "on"]
    srv = bs.LlamaServer(path, args, 1, ctx_per_slot=len(ids) + args.gen + 16, extra=["-ctk", kv, "-ctv", kv] + fa)
    try:
        # the byte tokens (<0x00>..<0xFF>, ids 3..258 of the llama vocabulary) are banned: a
        # random-weight model strings them into invalid UTF-8, which ik_llama.cpp's server
        # cannot put in its JSON reply (HTTP 500)
        body = json.dumps({"prompt": ids, "n_predict": args.gen, "ignore_eos": True, "cache_prompt": False,
                           "temperature": 0, "logit_bias": [[t, False] for t in range(3, 259)]}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/completion" % srv.port, body,
                                     {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=1800) as r:
                t = json.load(r)["timings"]
        except urllib.error.HTTPError as e:
            raise SystemExit("%s (--kv %s): HTTP %d: %s" % (flavour, kv, e.code, e.read()[:300]))
        return t["prompt_per_second"], t["predicted_per_second"]
    finally:
        srv.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--depth", type=int, default=3968, help="prompt tokens before decoding starts")
    ap.add_argument("--gen", type=int, default=128, help="tokens decoded after them")
    ap.add_argument("--types", default="f16,q8_0", help="KV cache types, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--kv-pool", default="", help="ours with the session in blocks of a KV pool of this size "
                    "(engined --eval --kv-pool), as a pipeline's sessions with --kv-pool")
    ap.add_argument("--bin", default=os.environ.get("LLM_BIN", os.path.join(ROOT, "build", "bin")))
    args = ap.parse_args()
    peers = [(os.environ.get("LLAMA_SERVER"), "llama.cpp"), (os.environ.get("IK_LLAMA_SERVER"), "ik_llama.cpp")]
    peers = [(p, n) for p, n in peers if p]
    ids = prompt_ids(args.depth)
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print("decode at depth %d..%d, %s, %d threads, load %s, %s%s" % (args.depth, args.depth + args.gen,
          os.path.basename(args.model), args.threads, load, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
          ", ours in a KV pool of %s" % args.kv_pool if args.kv_pool else ""))
    print()
    head = "| KV | tg ours | " + " | ".join("tg " + n for _, n in peers) + " | ratio | pp%d ours | " % args.depth
    head += " | ".join("pp " + n for _, n in peers) + " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for kv in args.types.split(","):
        best = {"ours": (0, 0)}
        for _ in range(args.reps):
            r = ours(args, kv, ids)
            best["ours"] = max(best["ours"], r, key=lambda x: x[1])
            for path, name in peers:
                r = peer(path, name, args, kv, ids)
                best[name] = max(best.get(name, (0, 0)), r, key=lambda x: x[1])
        fastest = max([best[n][1] for _, n in peers] or [0])
        ratio = "%.2f" % (best["ours"][1] / fastest) if fastest else "-"
        row = "| %s | %.1f | " % (kv, best["ours"][1]) + " | ".join("%.1f" % best[n][1] for _, n in peers)
        row += " | %s | %.1f | " % (ratio, best["ours"][0]) + " | ".join("%.1f" % best[n][0] for _, n in peers) + " |"
        print(row.replace("|  |", "|"), flush=True)


if __name__ == "__main__":
    main()
