#!/usr/bin/env bash
# 90: chaos. 10 clients stream requests back to back (greedy, seeded sampling, mirostat,
# a stop string, and two, greedy and seeded, whose generations run into the end of the
# 256-token context) through a supervised pipeline (pipeline.sh --supervise, 2 workers)
# while a killer sends kill -9 to a random daemon every 1 to 3 s: a worker, the engine
# master (its workers go with it), samplerd or tokenizerd. Every request must end with
# exactly the text of its uninterrupted reference run: 0 errors, 0 hangs. CHAOS_SECONDS
# sets the duration (40 in make test; make soak runs 600). CHAOS_KV_POOL=SIZE runs the
# workers on the shared KV block pool (make soak does, after the run without it): kill -9
# must leave the pool consistent and prefixes reused from it (the prompts then share a
# preamble) must give the same text; a pool of 272 tokens (17 blocks, the context and one
# block) keeps admission, preemption and cross-worker waits busy all along.
. "$(dirname "$0")/pipeline.inc"
secs=${CHAOS_SECONDS:-40}
e2e_deadline $((secs + 240))
export E2E_LLMC_TIMEOUT=120
E2E_CTX=256 start_pipeline 2 --supervise ${CHAOS_KV_POOL:+--kv-pool "$CHAOS_KV_POOL"}
if [ -n "${CHAOS_KV_POOL:-}" ] && grep -q "KV pool /llm-kv-.* reused:" "$RUN/engined.log"; then
    # an earlier run's pool has its own size (and cached blocks): remove it with its segment
    $PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1
    "$LLM_BIN/engined" --remove-segment "$(cat "$RUN/segment")" >/dev/null
    E2E_CTX=256 start_pipeline 2 --supervise --kv-pool "$CHAOS_KV_POOL"
fi
prompts=("Once upon a time" "The little dog" "Lily and Tom went to the park" "One day, a big bear"
         "Sam had a red ball" "The sun was hot" "Mom said" "The bird sang" "A cat" "The boy ran")
if [ -n "${CHAOS_KV_POOL:-}" ]; then
    # a shared preamble of more than two 16-token blocks: requests reuse it from the pool
    for i in "${!prompts[@]}"; do
        prompts[$i]="Once upon a time, in a small town by the sea, there lived a girl who loved to read books about the stars. ${prompts[$i]}"
    done
fi
clients="0 1 2 3 4 5 6 7 8 9"
args() {
    case $1 in
        8) echo "-n 400 --temp 0" ; return ;;                  # ends at the context
        9) echo "-n 400 --temp 0.8 --seed 90 --top-k 40" ; return ;;
    esac
    case $(( $1 % 4 )) in
        0) echo "-n 160 --temp 0" ;;
        1) echo "-n 160 --temp 0.8 --seed $((50 + $1)) --top-k 20" ;;
        2) echo "-n 120 --temp 1.0 --mirostat 2 --seed $((60 + $1))" ;;
        3) echo "-n 160 --temp 0.7 --seed $((70 + $1)) --stop Lily" ;;
    esac
}
for k in $clients; do llmc $(args $k) --stats "${prompts[$k]}" >"$RUN/ref$k.txt" 2>"$RUN/referr$k.txt" || fail "reference $k failed"; done
for k in 8 9; do grep -q "(context;" "$RUN/referr$k.txt" || fail "reference $k did not end at the context: $(cat "$RUN/referr$k.txt")"; done
end=$(( $(date +%s) + secs ))
client() {
    local k=$1 n=0 rc
    while [ "$(date +%s)" -lt "$end" ]; do
        llmc $(args $k) "${prompts[$k]}" >"$RUN/out$k.txt" 2>"$RUN/err$k.txt"; rc=$?
        n=$((n + 1))
        if [ $rc = 124 ]; then echo "client $k request $n hung" >>"$RUN/errors.txt"
        elif [ $rc != 0 ]; then echo "client $k request $n failed ($rc): $(tail -n 1 "$RUN/err$k.txt")" >>"$RUN/errors.txt"
        elif ! cmp -s "$RUN/ref$k.txt" "$RUN/out$k.txt"; then
            cp "$RUN/out$k.txt" "$RUN/bad$k-$n.txt"; echo "client $k request $n differs from its reference" >>"$RUN/errors.txt"
        fi
    done
    echo "$n" >"$RUN/count$k.txt"
}
killer() {
    local victim pid
    while [ "$(date +%s)" -lt "$end" ]; do
        sleep "$(( RANDOM % 3 + 1 )).$(( RANDOM % 10 ))"
        case $(( RANDOM % 4 )) in
            0) victim=worker; pid=$(status_field pids | tr ' ' '\n' | grep . | shuf -n 1) ;;
            1) victim=master; pid=$(cat "$RUN/engined.pid") ;;
            2) victim=samplerd; pid=$(cat "$RUN/samplerd.pid") ;;
            3) victim=tokenizerd; pid=$(cat "$RUN/tokenizerd.pid") ;;
        esac
        [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null && echo "$victim" >>"$RUN/kills.txt"
    done
}
for k in $clients; do client "$k" & E2E_PIDS+=($!); done
killer & E2E_PIDS+=($!)
for p in "${E2E_PIDS[@]}"; do wait "$p"; done
E2E_PIDS=()
total=$(cat "$RUN"/count*.txt | awk '{s+=$1} END {print s+0}')
kills=$(sort "$RUN/kills.txt" 2>/dev/null | uniq -c | awk '{printf "%s %s, ", $1, $2}')
echo "chaos: $secs s, $total requests by 10 clients, kill -9: ${kills:-none}"
[ -s "$RUN/errors.txt" ] && fail "$(wc -l <"$RUN/errors.txt") bad requests: $(head -n 5 "$RUN/errors.txt")"
[ "$(wc -l <"$RUN/kills.txt")" -ge $((secs / 4)) ] || fail "too few kills ($(wc -l <"$RUN/kills.txt"))"
if [ -n "${CHAOS_KV_POOL:-}" ]; then
    # after the kills the pool still serves: a prompt run twice reuses its blocks
    # (kvrt: prompt tokens reused, per live worker)
    wait_until 20 '[ "$(status_field workers)" = 2 ]' || fail "the workers did not come back"
    for i in 1 2; do llmc -n 8 --temp 0 "${prompts[0]}" >"$RUN/after$i.txt" || fail "request after the chaos failed"; done
    cmp -s "$RUN/after1.txt" "$RUN/after2.txt" || fail "a prompt from cached blocks gave other text"
    kvrt() { "$LLM_BIN/llmc" status --json --run-dir "$RUN" | grep -o '"kvrt":[0-9]*' | cut -d: -f2 | awk '{s+=$1} END {print s+0}'; }
    wait_until 5 '[ "$(kvrt)" -gt 0 ]' || fail "the KV pool reused no prompt tokens after the chaos"
    echo "KV pool on: $(kvrt) prompt tokens reused since the last kill"
fi
echo "all $total requests equal their references: 0 errors, 0 hangs"
echo "PASS $E2E_NAME"
