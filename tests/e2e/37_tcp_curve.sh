#!/usr/bin/env bash
# 37: a worker reaching the front door over tcp:// with CURVE: the front door's worker
# socket is a CURVE server (LLM_CURVE_SECRET), the worker a CURVE client that knows the
# server's public key (LLM_CURVE_SERVER). It registers and serves the reference text;
# a worker with the wrong server key never registers.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 90
e2e_check_bins
lib=${LLM_BUILD:-$LLM_BIN/..}/libcommon.a
cc -std=c11 -D_GNU_SOURCE -I"$E2E_ROOT/common" -o "$RUN/hostile" "$E2E_ROOT/tests/e2e/hostile_client.c" "$lib" \
    -lzmq -lmsgpackc -lrt -lm -pthread 2>/dev/null ||
cc -std=c11 -D_GNU_SOURCE -fsanitize=address,undefined -I"$E2E_ROOT/common" -o "$RUN/hostile" \
    "$E2E_ROOT/tests/e2e/hostile_client.c" "$lib" -lzmq -lmsgpackc -lrt -lm -pthread || fail "cannot build the key tool"
keys=$("$RUN/hostile" keygen) || { echo "SKIP $E2E_NAME: libzmq has no CURVE"; exit 0; }
pub=${keys% *} sec=${keys#* }
wrong=$("$RUN/hostile" keygen); wrong=${wrong% *}
port=$((20000 + RANDOM % 30000))
ep="tcp://127.0.0.1:$port"
"$LLM_BIN/samplerd" --run-dir "$RUN" 2>"$RUN/samplerd.log" & E2E_PIDS+=($!)
LLM_CURVE_SECRET=$sec "$LLM_BIN/tokenizerd" --model "$MODEL" --run-dir "$RUN" --workers-bind "$ep" 2>"$RUN/tokenizerd.log" & E2E_PIDS+=($!)
LLM_CURVE_SERVER=$wrong "$LLM_BIN/engined" --model "$MODEL" --workers 1 --run-dir "$RUN" --front "$ep" 2>"$RUN/wrong.log" & E2E_PIDS+=($!)
wait_until 20 '"$LLM_BIN/llmc" status --run-dir "$RUN" >/dev/null 2>&1' || fail "front door did not start"
sleep 2
[ "$(status_field workers)" = 0 ] || fail "a worker with the wrong server key registered"
kill -TERM "${E2E_PIDS[2]}"; wait "${E2E_PIDS[2]}" 2>/dev/null
LLM_CURVE_SERVER=$pub "$LLM_BIN/engined" --model "$MODEL" --workers 1 --run-dir "$RUN" --front "$ep" 2>"$RUN/engined.log" & E2E_PIDS+=($!)
wait_until 20 '[ "$(status_field workers)" = 1 ]' || fail "the CURVE worker did not register over $ep"
ref=$LLM_SHARED/reference/stories260K-f32/story
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "request over tcp+CURVE failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "wrong text over tcp+CURVE"
echo "worker over $ep with CURVE serves; a wrong server key is refused"
echo "PASS $E2E_NAME"
