#!/usr/bin/env bash
# 37: a worker reaching the front door over tcp:// with CURVE: the front door's worker
# socket is a CURVE server (LLM_CURVE_SECRET) that admits only the public keys of
# LLM_CURVE_ALLOW_WORKERS (a ZAP handler); the worker is a CURVE client that knows the
# server's public key (LLM_CURVE_SERVER) and has its own key pair. Checked: a front door
# with CURVE but no allow-list refuses to start; a worker with the wrong server key, and
# one with the right server key but a key pair not on the list (issue 10.5: it used to
# register and receive other users' prompts), never register; the listed worker
# registers and serves the reference text.
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
wkeys=$("$RUN/hostile" keygen); wpub=${wkeys% *} wsec=${wkeys#* }      # the listed worker's pair
other=$("$RUN/hostile" keygen); other=${other% *}                       # listed too: a list of two
wrong=$("$RUN/hostile" keygen); wrong=${wrong% *}
port=$((20000 + RANDOM % 30000))
ep="tcp://127.0.0.1:$port"

# CURVE without an allow-list: refused at start, with the variable named
out=$(LLM_CURVE_SECRET=$sec timeout 10 "$LLM_BIN/tokenizerd" --model "$MODEL" --run-dir "$RUN" --workers-bind "$ep" 2>&1) &&
    fail "tokenizerd served CURVE without an allow-list"
case $out in *LLM_CURVE_ALLOW_WORKERS*) ;; *) fail "unclear refusal without an allow-list: $out" ;; esac
echo "CURVE without LLM_CURVE_ALLOW_WORKERS: $(printf '%s\n' "$out" | grep -o 'tcp://.*' | head -n 1)"

"$LLM_BIN/samplerd" --run-dir "$RUN" 2>"$RUN/samplerd.log" & E2E_PIDS+=($!)
LLM_CURVE_SECRET=$sec LLM_CURVE_ALLOW_WORKERS="$other, $wpub" \
    "$LLM_BIN/tokenizerd" --model "$MODEL" --run-dir "$RUN" --workers-bind "$ep" 2>"$RUN/tokenizerd.log" & E2E_PIDS+=($!)
wait_until 20 '"$LLM_BIN/llmc" status --run-dir "$RUN" >/dev/null 2>&1' || fail "front door did not start"
LLM_CURVE_SERVER=$wrong LLM_CURVE_CLIENT_PUBLIC=$wpub LLM_CURVE_CLIENT_SECRET=$wsec \
    "$LLM_BIN/engined" --model "$MODEL" --workers 1 --run-dir "$RUN" --front "$ep" 2>"$RUN/wrong.log" & wrongpid=$!
LLM_CURVE_SERVER=$pub "$LLM_BIN/engined" --model "$MODEL" --workers 1 --run-dir "$RUN" --front "$ep" \
    2>"$RUN/unlisted.log" & unlisted=$!                   # a fresh key pair of its own: not listed
E2E_PIDS+=($wrongpid $unlisted)
wait_until 20 'grep -q "refused a CURVE connection" "$RUN/tokenizerd.log"' || fail "the unlisted key was not refused"
sleep 2
[ "$(status_field workers)" = 0 ] || fail "a worker with the wrong server key or an unlisted key pair registered"
grep -m 1 "refused a CURVE connection" "$RUN/tokenizerd.log" | sed 's/.*WARN /front door: /'
kill -TERM $wrongpid $unlisted; wait $wrongpid $unlisted 2>/dev/null
LLM_CURVE_SERVER=$pub LLM_CURVE_CLIENT_PUBLIC=$wpub LLM_CURVE_CLIENT_SECRET=$wsec \
    "$LLM_BIN/engined" --model "$MODEL" --workers 1 --run-dir "$RUN" --front "$ep" 2>"$RUN/engined.log" & E2E_PIDS+=($!)
wait_until 20 '[ "$(status_field workers)" = 1 ]' || fail "the listed CURVE worker did not register over $ep"
ref=$LLM_SHARED/reference/stories260K-f32/story
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "request over tcp+CURVE failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "wrong text over tcp+CURVE"
echo "worker over $ep with a listed CURVE key serves; a wrong server key and an unlisted key pair are refused"
echo "PASS $E2E_NAME"
