#!/usr/bin/env bash
# 33: a mixture-of-experts model through the whole pipeline (tokenizerd, 2 engined workers,
# samplerd, llmc): the tiny Mixtral of tests/data (Q8_0, native path, llama.cpp's logits to
# 1e-7) gives llama.cpp's greedy text for the story prompt, and 3 concurrent streams (steps
# that group their tokens by expert) each give the same text as alone. Then a qwen3moe file
# with the Qwen tokenizer and Qwen3 chat template: detected, a chat renders it, ids as Qwen2.
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
$PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1

# a qwen3moe file with the Qwen tokenizer (gpt2, pre-tokenizer qwen2, 151k tokens) and the
# Qwen3 chat template (thinking) that ../shared's qwen2 vocabulary carries, as real Qwen3
# MoE files do: the template is detected as qwen3, a two-turn chat through the pipeline
# renders it (<|im_start|> per message), and the tokenizer gives Qwen2's ids
"$LLM_BIN/llmc" synth --shape qwen3moe-tiny --arch qwen3moe --type Q8_0 --seed 7 \
    --vocab-from "$LLM_SHARED/reference/tokenizer/ggml-vocab-qwen2.gguf" -o "$RUN/q3moe.gguf" >/dev/null \
    || fail "llmc synth qwen3moe-tiny with the qwen2 vocabulary failed"
MODEL=$RUN/q3moe.gguf
export LLM_TRACE_TOKENS=1
start_pipeline 1
"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q "chat template qwen3" \
    || fail "qwen3moe + qwen2 vocabulary: template not detected: $("$LLM_BIN/llmc" status --run-dir "$RUN" | head -n 3)"
printf 'Hello there\nAnd again\n' | llmc chat --system "Be brief" -n 6 --temp 0 >"$RUN/chat.txt" 2>"$RUN/err.txt" \
    || fail "qwen3moe chat failed: $(cat "$RUN/err.txt")"
starts=$(grep "INFO session .* tokens:" "$RUN/tokenizerd.log" | tail -n 1 | tr ' ' '\n' | grep -c '^151644$')
[ "$starts" -ge 4 ] || fail "qwen3moe chat: $starts <|im_start|> tokens in the second turn's prompt (5 expected)"
ids=$(printf 'Hello, world! 123' | "$LLM_BIN/tokenizerd" --model "$MODEL" --tokenize | tr '\n' ' ')
[ "$ids" = "9707 11 1879 0 220 16 17 18 " ] || fail "qwen2 pre-tokenizer on the qwen3moe file: ids $ids"
echo "qwen3moe with the Qwen tokenizer: Qwen3 chat of 2 turns ($starts <|im_start|> in the last prompt), ids as Qwen2's"
echo "PASS $E2E_NAME"
