#!/usr/bin/env python3
"""bench_kvmem.py - sessions per GiB of KV cache at one context, for this project's KV
types (f32, f16, q8_0) side by side with llama-server's (issue 19's "sessions per GB").

    python3 bench/bench_kvmem.py --model FILE [--ctx 2048] [--pool-mib 1024]
                                 [--peer-types q8_0,f16] [--json OUT.json]
    LLAMA_SERVER=/path/to/llama-server python3 bench/bench_kvmem.py ...   # + the peer

Ours: build/bench/bench_kvmem (the bytes kv_init allocates for a private session of CTX
positions, sliding-window layers as rings of window - 1 + 512 positions as sessions
keep them, and real pools of POOL_MIB MiB in all, planned as engined --kv-pool plans
them (a ring pool for the sliding-window layers), made with kvp_create, their geometry
read and removed: metadata and 16-token blocks included; no weights are converted).
llama-server: started once per peer type with -c CTX -np 1 -ctk T -ctv T (-fa for a
quantized V, which it needs) and stopped as soon as it has logged its KV buffer size
("KV self size = X MiB" or "llama_kv_cache: size = X MiB", else the sum of its "KV
buffer size" lines); a session of CTX tokens costs that (it grows linearly with -c). Nothing is generated, so this takes seconds.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = float(1 << 30)


def ours(args):
    tool = os.path.join(os.environ.get("LLM_BUILD", os.path.join(ROOT, "build")), "bench", "bench_kvmem")
    out = subprocess.run([tool, args.model, str(args.ctx), str(args.pool_mib)], check=True, capture_output=True,
                         text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TOTAL_LINE = re.compile(r"(?:KV self size|llama_kv_cache: +size)\s*=\s*([0-9.]+) MiB")  # the whole cache
BUF_LINE = re.compile(r"KV buffer size\s*=\s*([0-9.]+) MiB")  # one per backend buffer


def kv_mib(text):
    """The KV cache size a llama-server log states: its total line, else the sum of its
    buffers (None: not logged yet)."""
    total = TOTAL_LINE.search(text)
    if total:
        return float(total.group(1))
    bufs = [float(m.group(1)) for m in BUF_LINE.finditer(text)]
    return sum(bufs) if bufs else None


def peer(path, args, kv_type, timeout=90):
    """llama-server's KV buffer for one session of --ctx tokens, in bytes (None: not seen)."""
    cmd = [path, "-m", args.model, "-c", str(args.ctx), "-np", "1", "-t", "1", "-ctk", kv_type, "-ctv", kv_type,
           "--port", str(free_port()), "--host", "127.0.0.1"]
    if kv_type not in ("f16", "f32"):
        cmd.append("-fa")
    log = tempfile.NamedTemporaryFile("w+", prefix="llama-server-kvmem.", suffix=".log", delete=False)
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    total, t0 = None, time.monotonic()
    try:
        while time.monotonic() - t0 < timeout and p.poll() is None:
            time.sleep(0.2)
            with open(log.name, errors="replace") as f:
                seen = kv_mib(f.read())
            if seen is not None:
                time.sleep(0.5)  # the buffer lines and the total come together
                with open(log.name, errors="replace") as f:
                    total = kv_mib(f.read()) * (1 << 20)
                break
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
    if total is None:
        print("llama-server %s: no KV size line (log %s)" % (kv_type, log.name), file=sys.stderr)
    else:
        os.unlink(log.name)
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--pool-mib", type=int, default=1024)
    ap.add_argument("--peer-types", default="q8_0", help="comma-separated llama-server -ctk/-ctv types")
    ap.add_argument("--json", help="write the rows here too")
    args = ap.parse_args()
    rows = []
    for r in ours(args):
        if "error" in r:
            print("ours %-5s  n/a: %s" % (r["type"], r["error"]))
            continue
        rows.append({"who": "ours", "type": r["type"], "session_bytes": r["session_bytes"],
                     "sessions_per_gib": r["sessions_per_gib"], "pool_sessions_per_gib": r["pool_sessions_per_gib"],
                     "session_bytes_full": r["session_bytes_full"], "swa_layers": r["swa_layers"]})
    server = os.environ.get("LLAMA_SERVER")
    for t in filter(None, args.peer_types.split(",")) if server else []:
        b = peer(server, args, t)
        if b:
            rows.append({"who": "llama-server", "type": t, "session_bytes": int(b), "sessions_per_gib": GIB / b,
                         "pool_sessions_per_gib": None})
    ref = next((r for r in rows if r["who"] == "ours" and r["type"] == "f32"), None)
    print("model %s, context %d tokens (GiB = 2^30 bytes)" % (os.path.basename(args.model), args.ctx))
    swa = next((r for r in rows if r.get("swa_layers")), None)
    if swa:  # private rings; pooled sessions hold ring blocks of the second pool instead
        print("ours: %d sliding-window layers kept as rings in a private session (%s: %.2f MiB, %.2f MiB if whole; "
              "pooled sessions hold ring blocks of about a window)" % (swa["swa_layers"], swa["type"],
                                                                      swa["session_bytes"] / 2**20,
                                                                      swa["session_bytes_full"] / 2**20))
    print("%-13s %-5s %12s %14s %16s %9s" % ("", "KV", "MiB/session", "sessions/GiB", "pooled/GiB", "vs f32"))
    for r in rows:
        pooled = "%.2f" % r["pool_sessions_per_gib"] if r["pool_sessions_per_gib"] is not None else "-"
        vs = "%.2fx" % (r["sessions_per_gib"] / ref["sessions_per_gib"]) if ref else "-"
        print("%-13s %-5s %12.2f %14.2f %16s %9s" % (r["who"], r["type"], r["session_bytes"] / 2**20,
                                                      r["sessions_per_gib"], pooled, vs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "ctx": args.ctx, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
