#!/usr/bin/env bash
# 68: three "hosts", each a network namespace: the front door alone in one; in each of the
# other two an engine master with one worker, building its own weight segment in the
# host's own /dev/shm (a private tmpfs in a mount namespace), and a samplerd beside it
# (samplerd reads its workers' logits rings, so it runs on their host). Workers reach the
# front door over tcp:// with CURVE (each host's key pair allow-listed); each worker host
# is pinned to its own core. Checked: both hosts build a segment and register, every
# stream gets the same greedy text whichever host ran it, both hosts serve; 8 streams over
# two hosts against 4 streams over one (best of 3 each) is printed, and under make soak
# (E2E_PERF=1) must reach 1.5x (the throughput adds up). Needs root (ip netns, mount):
# skipped, saying so, without it.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 240
probe="llmp$$"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v unshare >/dev/null ||
   ! command -v taskset >/dev/null || ! ip netns add "$probe" 2>/dev/null; then
    echo "SKIP $E2E_NAME: needs root, iproute2 (ip netns), unshare and taskset for its namespaces"
    exit 0
fi
ip netns del "$probe"
e2e_check_bins
[ "$(nproc)" -ge 2 ] || { echo "SKIP $E2E_NAME: needs 2 cores (one per worker host)"; exit 0; }
MODEL=$(synth_model stories110m Q8_0)
lib=${LLM_BUILD:-$LLM_BIN/..}/libcommon.a
cc -std=c11 -D_GNU_SOURCE -I"$E2E_ROOT/common" -o "$RUN/keys" "$E2E_ROOT/tests/e2e/hostile_client.c" "$lib" \
    -lzmq -lmsgpackc -lrt -lm -pthread 2>/dev/null || fail "cannot build the key tool"
keys=$("$RUN/keys" keygen) || { echo "SKIP $E2E_NAME: libzmq has no CURVE"; exit 0; }
pub=${keys% *} sec=${keys#* }
h1=$("$RUN/keys" keygen); h2=$("$RUN/keys" keygen)

NSF=llmf$$ NS1=llm1$$ NS2=llm2$$
net=$((100 + RANDOM % 150))
mh_cleanup() {
    local f
    for f in "$RUN"/h?/*.pid; do [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null; done
    sleep 0.5
    for f in "$RUN"/h?/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
    ip netns del "$NSF" 2>/dev/null; ip netns del "$NS1" 2>/dev/null; ip netns del "$NS2" 2>/dev/null
}
trap 'mh_cleanup; e2e_cleanup' EXIT
for ns in "$NSF" "$NS1" "$NS2"; do ip netns add "$ns" && ip -n "$ns" link set lo up || fail "ip netns add $ns"; done
for i in 1 2; do # a cable between the front door's host and worker host i: 10.NET.i.1 <-> 10.NET.i.2
    ns=$([ $i = 1 ] && echo "$NS1" || echo "$NS2")
    ip link add "lf$i$$" type veth peer name "lh$i$$" &&
    ip link set "lf$i$$" netns "$NSF" && ip link set "lh$i$$" netns "$ns" &&
    ip -n "$NSF" addr add "10.$net.$i.1/24" dev "lf$i$$" && ip -n "$NSF" link set "lf$i$$" up &&
    ip -n "$ns" addr add "10.$net.$i.2/24" dev "lh$i$$" && ip -n "$ns" link set "lh$i$$" up || fail "veth $i"
done
port=$((20000 + RANDOM % 30000))
ip netns exec "$NSF" env LLM_CURVE_SECRET="$sec" LLM_CURVE_ALLOW_WORKERS="${h1% *}, ${h2% *}" \
    "$LLM_BIN/tokenizerd" --model "$MODEL" --run-dir "$RUN" --workers-bind "tcp://0.0.0.0:$port" \
    2>"$RUN/tokenizerd.log" & E2E_PIDS+=($!)
wait_until 20 '"$LLM_BIN/llmc" status --run-dir "$RUN" >/dev/null 2>&1' || fail "front door did not start"

# host_start I: worker host I on core I-1, in its namespace with its own /dev/shm
host_start() {
    local i=$1 ns kp d=$RUN/h$1
    ns=$([ "$i" = 1 ] && echo "$NS1" || echo "$NS2")
    kp=$([ "$i" = 1 ] && echo "$h1" || echo "$h2")
    mkdir -m 700 "$d"
    ip netns exec "$ns" unshare --mount --propagation private env D="$d" BIN="$LLM_BIN" M="$MODEL" \
        CORE=$((i - 1)) FRONT="tcp://10.$net.$i.1:$port" LLM_CURVE_SERVER="$pub" \
        LLM_CURVE_CLIENT_PUBLIC="${kp% *}" LLM_CURVE_CLIENT_SECRET="${kp#* }" LLM_LOG_LEVEL=debug sh -c '
        mount -t tmpfs -o mode=1777,size=1g tmpfs /dev/shm || exit 1
        taskset -c $CORE "$BIN/samplerd" --run-dir "$D" 2>"$D/samplerd.log" & echo $! >"$D/samplerd.pid"
        taskset -c $CORE "$BIN/engined" --model "$M" --workers 1 --threads 1 --run-dir "$D" --front "$FRONT" \
            --ctx 512 2>"$D/engined.log" & echo $! >"$D/engined.pid"
        wait' & E2E_PIDS+=($!)
}
# streams N: N concurrent greedy streams of 64 tokens; prints the aggregate tok/s
streams() {
    local n=$1 i t0 t1 p=()
    t0=$(now_ms)
    for i in $(seq "$n"); do
        llmc -n 64 --temp 0 --ignore-eos "Once upon a time, in a quiet harbour town," >"$RUN/s$n.$i.txt" & p+=($!)
    done
    for i in "${p[@]}"; do wait "$i" || fail "a stream failed"; done
    t1=$(now_ms)
    awk -v n="$n" -v ms=$((t1 - t0)) 'BEGIN { printf "%.1f", n * 64 * 1000 / ms }'
}

host_start 1
wait_until 60 '[ "$(status_field workers)" = 1 ]' || fail "host 1's worker did not register over tcp+CURVE"
grep -q "built segment" "$RUN/h1/engined.log" || fail "host 1 did not build its own segment"
llmc -n 4 --temp 0 "warm up" >/dev/null || fail "first request failed"
best() { # N: the best of 3 runs of streams N (the machine may be busy with other work)
    local a b c
    a=$(streams "$1"); b=$(streams "$1"); c=$(streams "$1")
    printf '%s\n' "$a" "$b" "$c" | sort -g | tail -n 1
}
one=$(best 4)
host_start 2
wait_until 60 '[ "$(status_field workers)" = 2 ]' || fail "host 2's worker did not register"
grep -q "built segment" "$RUN/h2/engined.log" || fail "host 2 did not build its own segment"
llmc -n 4 --temp 0 "warm up" >/dev/null || fail "request after host 2 joined failed"
two=$(best 8)
for f in "$RUN"/s8.*.txt "$RUN"/s4.*.txt; do
    cmp -s "$f" "$RUN/s8.1.txt" || fail "$(basename "$f") differs from another stream: the hosts disagree"
done
r1=$(grep -c "DEBUG session .*: run" "$RUN/h1/engined.log"); r2=$(grep -c "DEBUG session .*: run" "$RUN/h2/engined.log")
[ "$r2" -ge 2 ] || fail "host 2 ran $r2 sessions of the 8 (host 1: $r1)"
echo "each worker host built its own segment in its own /dev/shm and registered over tcp+CURVE from its namespace"
echo "aggregate (best of 3), 4 streams on host 1: $one tok/s; 8 streams on hosts 1 and 2: $two tok/s" \
     "(host 2 ran $r2 sessions)"
echo "two hosts / one host = $(awk -v a="$one" -v b="$two" 'BEGIN { printf "%.2f", b / a }')x"
# The ratio is asserted where nothing else runs (make soak sets E2E_PERF=1): in make test
# the fuzz harnesses build beside the e2e scripts on the same two cores, and the ratio
# then ranges from 1.2x to 2x.
if [ "${E2E_PERF:-0}" = 1 ]; then
    awk -v a="$one" -v b="$two" 'BEGIN { exit !(b >= 1.5 * a) }' ||
        fail "two hosts ($two tok/s) are not clearly faster than one ($one tok/s)"
fi
echo "PASS $E2E_NAME"
