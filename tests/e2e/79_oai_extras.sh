#!/usr/bin/env bash
# 79: what an OpenAI-style server's clients expect besides completions (issue 20, item 5),
# through the official openai npm client and curl, on stories260K:
# (a) /v1/embeddings: 3 inputs, float and base64 (the client's default) equal, each
#     L2-normalized, identical inputs identical, different ones different, last pooling
#     differs from mean, dimensions != n_embd is a 400; llama-server's /embedding;
# (b) /tokenize and /detokenize (llama-server's shapes): a round trip, pieces, a bad id is
#     a 400 naming it; and on a second gateway with the Llama-3 and Llama-2 reference
#     vocabularies, the reference token ids of ../shared/reference/tokenizer;
# (c) n = 3 on chat (streamed and not) and completions: three choices, seed + i, usage sums;
#     n = 9 is a 400;
# (d) chat logprobs / top_logprobs, streamed and not.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
PORT=$(free_port)
start_pipeline 1 --http "$PORT" --chat-template llama2
BASE=http://127.0.0.1:$PORT
JS="$E2E_ROOT/tests/e2e/http_extras.js"
[ -f "${LLM_BUILD:-/nonexistent}/node/node_modules/openai/package.json" ] && command -v node >/dev/null \
    || fail "the openai npm package is not installed in \$LLM_BUILD/node (make e2e installs it)"
wait_until 20 'curl -sf "$BASE/health" >/dev/null' || fail "the gateway is not healthy"
js() { timeout 60 node "$JS" "$BASE/v1" "$1" >"$RUN/$1.line" 2>"$RUN/$1.err" || fail "openai client ($1): $(cat "$RUN/$1.err")"; }
check() { # MODE PYTHON-CONDITION-ON-d: the JSON line of MODE satisfies it
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert eval(sys.argv[2]), d' "$RUN/$1.line" "$2" \
        || fail "$1: $2: $(cut -c1-400 "$RUN/$1.line")"
}

# (a) embeddings
js embed
check embed 'd["dim"] == 64 and all(abs(x - 1) < 1e-5 for x in d["norms"]) and abs(d["last_norm"] - 1) < 1e-5'
check embed 'd["same"] and d["differ"] and d["b64_equal"] and d["last_differs"]'
check embed 'd["bad"]["status"] == 400 and "dimensions" in d["bad"]["message"]'
code=$(curl -s -o "$RUN/llama.json" -w '%{http_code}' -d '{"content":"Once upon a time"}' "$BASE/embedding")
[ "$code" = 200 ] && python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert len(d[0]["embedding"][0]) == 64' \
    "$RUN/llama.json" || fail "/embedding: HTTP $code $(cut -c1-200 "$RUN/llama.json")"
echo "(a) embeddings: 3 inputs of dim 64, normalized, float == base64, deterministic; last != mean; dimensions 65 -> 400"

# (b) tokenize / detokenize
post() { curl -s -o "$RUN/p.json" -w '%{http_code}' -d "$2" "$1"; }
[ "$(post "$BASE/tokenize" '{"content":"Once upon a time, there was a cat."}')" = 200 ] || fail "/tokenize: $(cat "$RUN/p.json")"
ids=$(json_get '["tokens"]' <"$RUN/p.json" | tr -d ' \n')
[ "$(post "$BASE/detokenize" "{\"tokens\":$ids}")" = 200 ] || fail "/detokenize: $(cat "$RUN/p.json")"
[ "$(json_get '["content"]' <"$RUN/p.json")" = "Once upon a time, there was a cat." ] || fail "round trip: $(cat "$RUN/p.json")"
post "$BASE/tokenize" '{"content":"Once","add_special":true,"with_pieces":true}' >/dev/null
python3 -c 'import json, sys; t = json.load(open(sys.argv[1]))["tokens"]; assert t[0]["id"] == 1 and t[1]["piece"] == " Once", t' \
    "$RUN/p.json" || fail "with_pieces: $(cat "$RUN/p.json")"
[ "$(post "$BASE/detokenize" '{"tokens":[1,70000]}')" = 400 ] && grep -q 70000 "$RUN/p.json" || fail "bad id: $(cat "$RUN/p.json")"
# the reference vocabularies, on a second gateway that tokenizes with them
P2=$(free_port)
for v in llama-bpe llama-spm; do
    "$LLM_BIN/llmc" serve --port "$P2" --run-dir "$RUN" --model "$LLM_SHARED/reference/tokenizer/ggml-vocab-$v.gguf" \
        >"$RUN/gw2.log" 2>&1 & E2E_PIDS+=($!)
    wait_until 10 'curl -s -o /dev/null "http://127.0.0.1:$P2/health"' || fail "second gateway did not start"
    python3 - "$LLM_SHARED/reference/tokenizer/ggml-vocab-$v.gguf" "http://127.0.0.1:$P2" <<'PY' || fail "reference ids ($v)"
import json, sys, urllib.request
vocab, base = sys.argv[1:]
texts = open(vocab + ".inp", encoding="utf-8", newline="").read().split("\n__ggml_vocab_test__\n")[:-1]
want = open(vocab + ".out").read().split("\n")
def post(path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))
for i, t in enumerate(texts):
    ids = post("/tokenize", {"content": t, "add_special": False, "parse_special": False})["tokens"]
    assert ids == [int(x) for x in want[i].split()], (i, t, ids, want[i])
    if ids:
        assert post("/detokenize", {"tokens": ids})["content"] == t, (i, t)
print("    %s: %d reference texts tokenize to the reference ids and detokenize back" % (vocab.split("/")[-1], len(texts)))
PY
    kill "${E2E_PIDS[-1]}"; wait "${E2E_PIDS[-1]}" 2>/dev/null; unset 'E2E_PIDS[-1]'
done
echo "(b) /tokenize and /detokenize: round trip, pieces, a bad id is a 400 naming it, reference ids"

# (c) n = 3
js n
check n 'len(d["texts"]) == 3 and len(set(d["texts"])) > 1 and d["texts"] == d["stream_texts"]'
check n 'd["usage"]["completion_tokens"] == d["stream_usage"]["completion_tokens"] > 24 and len(set(d["completions"])) > 1'
check n 'd["bad"]["status"] == 400 and "n must be" in d["bad"]["message"]'
echo "(c) n=3: three choices, streamed == whole with the same seed, usage $(json_get '["usage"]["completion_tokens"]' <"$RUN/n.line") tokens; n=9 -> 400"

# (d) chat log-probabilities
js logprobs
check logprobs 'd["n"] == d["stream_n"] > 0 and d["top"] == 3'
echo "(d) chat logprobs: $(json_get '["n"]' <"$RUN/logprobs.line") tokens with 3 alternatives each, streamed the same"
echo "PASS $E2E_NAME"
