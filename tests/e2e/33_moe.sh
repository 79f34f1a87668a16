#!/usr/bin/env bash
# 33: a mixture-of-experts model through the whole pipeline (tokenizerd, 2 engined workers,
# samplerd, llmc): the tiny Mixtral of tests/data (Q8_0, native path, llama.cpp's logits to
# 1e-7) gives llama.cpp's greedy text for the story prompt, and 3 concurrent streams (steps
# that group their tokens by expert) each give the same text as alone.
E2E_MODEL=${E2E_MODEL:-$(cd "$(dirname "$0")/../.." && pwd)/tests/data/mixtral-tiny-Q8_0/mixtral-tiny-Q8_0.gguf}
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
start_pipeline 2

ref=$(dirname "$MODEL")/story
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "llmc greedy run failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || {
    echo "got:      $(cat "$RUN/greedy.txt")" >&2; echo "expected: $(cat "$ref/greedy_text.txt")" >&2
    fail "mixtral-tiny greedy output differs from llama.cpp's greedy_text.txt"; }
echo "greedy output equals tests/data/mixtral-tiny-Q8_0/story/greedy_text.txt"

for p in "Once upon a time" "The little dog" "Lily and Tom"; do llmc -n 24 --temp 0 "$p" >"$RUN/alone-${p// /_}.txt" || fail "llmc '$p' failed"; done
pids=()
for p in "Once upon a time" "The little dog" "Lily and Tom"; do llmc -n 24 --temp 0 "$p" >"$RUN/batch-${p// /_}.txt" & pids+=($!); done
wait "${pids[@]}" # not a bare wait: the watchdog is a child too
for p in "Once upon a time" "The little dog" "Lily and Tom"; do
    cmp -s "$RUN/alone-${p// /_}.txt" "$RUN/batch-${p// /_}.txt" || fail "'$p': batched text differs from alone"
done
echo "3 concurrent streams equal their runs alone"
echo "PASS $E2E_NAME"
