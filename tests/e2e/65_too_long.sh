#!/usr/bin/env bash
# 65: a prompt longer than the context is refused at the front door with one clear error
# before any message is built for a worker, also a 2.9 MB one (about 1.45 M tokens,
# which once made a RUN over the 4 MiB message limit and cut every worker off), and
# every worker keeps serving: same pids, same count, a normal request works after.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
ref=$LLM_SHARED/reference/stories260K-f32/story
E2E_CTX=128 start_pipeline 2
pids=$(status_field pids)
check_refused() { # label file
    if llmc -n 8 --temp 0 --file "$2" >"$RUN/out.txt" 2>"$RUN/err.txt"; then fail "$1: a prompt over the context was accepted"; fi
    [ "$(grep -c . "$RUN/err.txt")" = 1 ] || fail "$1: not one error line: $(head -c 300 "$RUN/err.txt")"
    grep -q "context holds 128" "$RUN/err.txt" || fail "$1: error does not say what holds: $(cat "$RUN/err.txt")"
    echo "$1: $(cat "$RUN/err.txt")"
}
words 400 >"$RUN/p400.txt"
check_refused "long prompt" "$RUN/p400.txt"
python3 -c 'import sys; sys.stdout.write("ab " * 980000)' >"$RUN/huge.txt"
check_refused "$(wc -c <"$RUN/huge.txt")-byte prompt" "$RUN/huge.txt"
grep -q "refusing to send" "$RUN"/*.log && fail "a daemon tried to send an oversized message"
[ "$(status_field pids)" = "$pids" ] || fail "workers changed: $pids -> $(status_field pids)"
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "a normal request failed afterwards"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "a normal request gave the wrong text afterwards"
echo "workers $pids kept serving"
echo "PASS $E2E_NAME"
