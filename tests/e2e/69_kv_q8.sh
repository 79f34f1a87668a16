#!/usr/bin/env bash
# 69: the q8_0 KV cache (--kv q8_0): refused at start for a model whose head_dim is not
# a multiple of 32 (stories260K: 8), with the reason; on tiny-llama2-Q8_0 (head_dim 64)
# with two workers over a q8_0 KV pool: the greedy text equals llama.cpp's (f32 cache),
# a shared prefix is taken from the pool (a hit in llmc status) with the same text, and a
# private q8_0 cache (no pool) gives the same text too. About 15 s.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
seg=""
kv_cleanup() { [ -n "$seg" ] && "$LLM_BIN/engined" --remove-segment "$seg" >/dev/null 2>&1; e2e_cleanup; }
trap kv_cleanup EXIT

cp "$LLM_SHARED/models/stories260K-f32.gguf" "$RUN/s.gguf"
if timeout 30 "$LLM_BIN/engined" --model "$RUN/s.gguf" --kv q8_0 --workers 1 --run-dir "$RUN" 2>"$RUN/err.txt"; then
    fail "--kv q8_0 accepted for head_dim 8"
fi
grep -q "q8_0 needs a head_dim that is a multiple of 32 (this model's is 8)" "$RUN/err.txt" || fail "refusal: $(cat "$RUN/err.txt")"
[ -f "$RUN/segment" ] && "$LLM_BIN/engined" --remove-segment "$(cat "$RUN/segment")" >/dev/null 2>&1
rm -f "$RUN/segment"
if "$LLM_BIN/engined" --model "$RUN/s.gguf" --kv q4 --run-dir "$RUN" 2>"$RUN/err.txt"; then fail "--kv q4 accepted"; fi
grep -q "^error: --kv must be f16, f32 or q8_0" "$RUN/err.txt" || fail "bad --kv: $(cat "$RUN/err.txt")"

cp "$LLM_SHARED/models/tiny-llama2-Q8_0.gguf" "$RUN/m.gguf"
MODEL=$RUN/m.gguf
ref=$LLM_SHARED/reference/tiny-llama2-Q8_0/story
start_pipeline 2 --kv q8_0 --kv-pool 4096
wait_until 20 '[ "$(status_field workers)" = 2 ]' || fail "2 workers did not register"
seg=$(cat "$RUN/segment")
grep -q -- "--kv q8_0" <(tr '\0' ' ' </proc/"$(sed -n 's/^  worker pid \([0-9]*\).*/\1/p' <("$LLM_BIN/llmc" status --run-dir "$RUN") | head -n 1)"/cmdline) \
    || fail "the worker was not started with --kv q8_0"
llmc -n 32 --temp 0 "$(cat "$ref/prompt.txt")" >"$RUN/greedy.txt" || fail "llmc greedy run failed"
cmp -s "$RUN/greedy.txt" "$ref/greedy_text.txt" || fail "greedy text with a q8_0 cache: '$(cat "$RUN/greedy.txt")'"
long="$(cat "$ref/prompt.txt") $(cat "$ref/prompt.txt") $(cat "$ref/prompt.txt") $(cat "$ref/prompt.txt")"
a=$(llmc -n 16 --temp 0 "$long") && b=$(llmc -n 16 --temp 0 "$long") || fail "shared-prefix runs failed"
[ "$a" = "$b" ] || fail "a run from cached q8_0 blocks gave other text: '$a' vs '$b'"
wait_until 5 '"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q "prefix hits [1-9]"' \
    || fail "no prefix hit reported: $("$LLM_BIN/llmc" status --run-dir "$RUN" | grep kv)"
$PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1

start_pipeline 1 --kv q8_0
c=$(llmc -n 16 --temp 0 "$long") || fail "private q8_0 run failed"
[ "$c" = "$a" ] || fail "private q8_0 cache gave other text than the pool: '$c' vs '$a'"
echo "PASS $E2E_NAME"
