#!/usr/bin/env bash
# 30: the pipeline end to end on stories260K: llmc's greedy output equals llama.cpp's
# greedy_text.txt for the story prompt; --json and --stats; clear errors for a bad
# parameter, a missing chat template and a pipeline that is not running.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
start_pipeline 1

ref=$LLM_SHARED/reference/stories260K-f32/story
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "llmc greedy run failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || {
    echo "got:      $(cat "$RUN/greedy.txt")" >&2; echo "expected: $(cat "$ref/greedy_text.txt")" >&2
    fail "greedy output differs from llama.cpp's greedy_text.txt"; }
echo "greedy output equals reference/stories260K-f32/story/greedy_text.txt"

# --echo prints the prompt first
llmc -n 32 --temp 0 --echo "$(cat "$ref/prompt.txt")" >"$RUN/echo.txt" || fail "--echo run failed"
[ "$(cat "$RUN/echo.txt")" = "$(cat "$ref/prompt.txt")$(cat "$ref/greedy_text.txt")" ] || fail "--echo output wrong"

# --json: one object per piece, then a final one; pieces concatenate to the same text
llmc -n 32 --temp 0 --json "$(cat "$ref/prompt.txt")" >"$RUN/out.json" || fail "--json run failed"
tail -n 1 "$RUN/out.json" | grep -q '"done":true,"reason":"length","prompt_tokens":20,"tokens":32' \
    || fail "--json final object wrong: $(tail -n 1 "$RUN/out.json")"
[ "$(grep -c '^{"text":' "$RUN/out.json")" -ge 2 ] || fail "--json gave no pieces"

# --stats on stderr
llmc -n 8 --temp 0 --stats "Once" 2>"$RUN/stats.txt" >/dev/null || fail "--stats run failed"
grep -q "prompt tokens: 2, generated tokens: 8, time to first token" "$RUN/stats.txt" || fail "--stats: $(cat "$RUN/stats.txt")"

# stop strings end the text before the stop string
out=$(llmc -n 32 --temp 0 --stop "big" "$(cat "$ref/prompt.txt")") || fail "--stop run failed"
[ "$out" = " play outside in the park. One day, she saw a " ] || fail "--stop gave '$out'"
# a stop string spanning several tokens is held back until it is decided
out=$(llmc -n 32 --temp 0 --stop "red ball. She" --stop "zebra" "$(cat "$ref/prompt.txt")") || fail "--stop run failed"
[ "$out" = " play outside in the park. One day, she saw a big, " ] || fail "multi-token --stop gave '$out'"

# seeded sampling is reproducible
a=$(llmc -n 40 --temp 0.9 --seed 7 "Once upon a time") && b=$(llmc -n 40 --temp 0.9 --seed 7 "Once upon a time") \
    || fail "seeded runs failed"
[ "$a" = "$b" ] || fail "same seed gave different text"

# errors: one line, non-zero exit
if llmc --temp -1 "x" 2>"$RUN/err.txt"; then fail "--temp -1 accepted"; fi
grep -q "^error: bad parameter" "$RUN/err.txt" && [ "$(wc -l <"$RUN/err.txt")" = 1 ] || fail "bad parameter: $(cat "$RUN/err.txt")"
if llmc --top-k nope "x" 2>"$RUN/err.txt"; then fail "--top-k nope accepted"; fi
grep -q "^error: bad parameter --top-k" "$RUN/err.txt" || fail "bad top-k: $(cat "$RUN/err.txt")"
if echo hi | llmc chat 2>"$RUN/err.txt" >/dev/null; then fail "chat without a template succeeded"; fi
grep -q "^error: .*no chat template" "$RUN/err.txt" || fail "chat error: $(cat "$RUN/err.txt")"
other=$(mktemp -d /tmp/llm-e2e-none.XXXXXX)
if "$LLM_BIN/llmc" --run-dir "$other" "x" 2>"$RUN/err.txt"; then rm -rf "$other"; fail "llmc ran without a pipeline"; fi
if "$LLM_BIN/llmc" status --run-dir "$other" 2>/dev/null; then rm -rf "$other"; fail "status without a pipeline"; fi
rm -rf "$other"
grep -q "^error: the pipeline is not running .*pipeline.sh start" "$RUN/err.txt" || fail "not running: $(cat "$RUN/err.txt")"

# one more worker at run time on the running segment
"$LLM_BIN/engined" --attach --run-dir "$RUN" --ctx 2048 2>"$RUN/attach.log" & E2E_PIDS+=($!)
wait_until 20 '[ "$(status_field workers)" = 2 ]' || fail "engined --attach did not register: $(cat "$RUN/attach.log")"
grep -q "attached segment .* (no reload)" "$RUN/attach.log" || fail "--attach did not attach the segment"
grep -q "converted" "$RUN/attach.log" && fail "--attach converted the model"
[ "$("$LLM_BIN/llmc" status --run-dir "$RUN" | grep -c "seg\|segment")" -ge 1 ] || fail "no segment in status"
# the segment's bits per weight, as the workers report it, equal what --list-segments
# computes from the same directory; stories260K's F32 weights are INT8 tiles (8 bits +
# scales + padding of its 172-wide rows), far below the file's 32
sline=$("$LLM_BIN/llmc" status --run-dir "$RUN" | grep "^segment: ")
sname=$(echo "$sline" | awk '{print $2}') sbpw=$(echo "$sline" | sed -n 's/.*(\([0-9.]*\) bits\/weight)$/\1/p')
lbpw=$("$LLM_BIN/engined" --list-segments | awk -v n="$sname" '$1 == n {print $6}')
[ -n "$sbpw" ] && [ "$sbpw" = "$lbpw" ] || fail "status '$sline': bits/weight is not --list-segments' '$lbpw'"
awk -v b="$sbpw" 'BEGIN { exit !(b >= 8 && b <= 9.5) }' || fail "status: $sbpw bits/weight for an INT8 segment"
jbpw=$("$LLM_BIN/llmc" status --json --run-dir "$RUN" | grep -o '"segment":"[^"]*","bpw":[0-9.e+-]*' | sed 's/.*"bpw"://')
awk -v j="$jbpw" -v s="$sbpw" 'BEGIN { exit !(j != "" && j - s <= 0.005 && s - j <= 0.005) }' \
    || fail "status --json: bpw '$jbpw' next to the segment, text says $sbpw"
echo "status: $sline"
pids=()
for i in 1 2 3 4; do llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/g$i.txt" & pids+=($!); done
for p in "${pids[@]}"; do wait "$p" || fail "a request with 2 workers failed"; done
for i in 1 2 3 4; do cmp -s "$RUN/g$i.txt" "$ref/greedy_text.txt" || fail "request $i with 2 workers gave other text"; done
echo "engined --attach added a worker: $(status_field workers) workers serve"

[ "$(status_field active)" = 0 ] || fail "requests still active at the end"

# a front door that takes its vocabulary from the segment (no GGUF parse), serving a
# second pipeline on the same workers' segment
seg=$(cat "$RUN/segment")
R2=$(mktemp -d /tmp/llm-e2e2.XXXXXX); chmod 700 "$R2"
"$LLM_BIN/tokenizerd" --segment "$seg" --run-dir "$R2" 2>"$R2/tok.log" & E2E_PIDS+=($!)
"$LLM_BIN/samplerd" --run-dir "$R2" 2>"$R2/samp.log" & E2E_PIDS+=($!)
"$LLM_BIN/engined" --attach --segment "$seg" --run-dir "$R2" --ctx 2048 2>"$R2/w.log" & E2E_PIDS+=($!)
wait_until 20 '"$LLM_BIN/llmc" status --run-dir "$R2" 2>/dev/null | grep -q "^workers: 1"' || fail "tokenizerd --segment: $(cat "$R2/tok.log")"
timeout 30 "$LLM_BIN/llmc" --run-dir "$R2" -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/seg.txt" || fail "request via tokenizerd --segment failed"
cmp -s "$RUN/seg.txt" "$ref/greedy_text.txt" || fail "tokenizerd --segment gave other text"
echo "tokenizerd --segment serves with the segment's tokenizer tables"
rm -rf "$R2"
echo "PASS $E2E_NAME"
