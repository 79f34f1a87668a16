#!/usr/bin/env bash
# 63: continuous batching is invisible in the tokens. On a model of real shape
# (stories110m, llmc synth), 8 greedy streams run concurrently (one worker batching them
# into shared steps) must each produce exactly the text it produces alone, with the
# default step budget and with --batch-tokens 5 (prompts cut into odd chunks that share
# steps with other sessions' decode tokens).
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 300
MODEL=$(synth_model stories110m Q8_0)
N=24
prompt() { echo "Story $1: $(words $((8 + 9 * $1)))"; }
start_pipeline 1
for i in $(seq 0 7); do llmc -n $N --temp 0 "$(prompt $i)" >"$RUN/solo$i.txt" || fail "solo run $i failed"; done
for bt in default 5; do
    if [ $bt != default ]; then
        $PIPELINE stop --run-dir "$RUN" >/dev/null
        start_pipeline 1 --batch-tokens $bt --idle-batch-tokens $bt
    fi
    for i in $(seq 0 7); do llmc -n $N --temp 0 "$(prompt $i)" >"$RUN/par$i.txt" 2>"$RUN/err$i.txt" & E2E_PIDS+=($!); done
    for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "a concurrent stream failed: $(cat "$RUN"/err*.txt)"; done
    E2E_PIDS=()
    for i in $(seq 0 7); do
        [ -s "$RUN/solo$i.txt" ] || fail "solo run $i is empty"
        cmp -s "$RUN/solo$i.txt" "$RUN/par$i.txt" || fail "stream $i (batch tokens $bt) differs from its solo run"
    done
    echo "8 concurrent streams (batch tokens $bt) equal their solo runs"
done
echo "PASS $E2E_NAME"
