#!/usr/bin/env bash
# 71: the official `openai` npm package (installed by `make e2e` into $LLM_BUILD/node)
# against the gateway: completions and chat completions, streaming and not, greedy; the
# texts must equal llmc's for the same request, with usage and finish_reason; chat
# log-probs with top_logprobs; a wrong API key raises the client's AuthenticationError.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 180
command -v node >/dev/null || fail "node is needed (make deps installs it)"
: "${LLM_BUILD:?set LLM_BUILD (the build directory with node/node_modules/openai)}"
[ -f "$LLM_BUILD/node/node_modules/openai/package.json" ] || fail "the openai npm package is not installed in $LLM_BUILD/node (make e2e installs it)"
PORT=$(free_port)
start_pipeline 1 --http "$PORT" --chat-template llama2
JS="$E2E_ROOT/tests/e2e/http_openai.js"
oa() { timeout 60 node "$JS" "http://127.0.0.1:$PORT/v1" "$@"; }
check() { # FILE PYTHON-ASSERTIONS (d: each JSON line of FILE, want: $WANT)
    WANT=$want python3 -c 'import json, os, sys
want = os.environ["WANT"]
for line in open(sys.argv[1]):
    d = json.loads(line)
'"$2" "$1" || fail "openai client output: $(cat "$1")"
}

ref=$LLM_SHARED/reference/stories260K-f32/story
prompt=$(cat "$ref/prompt.txt")
want=$(llmc -n 32 --temp 0 "$prompt") || fail "llmc failed"
[ "$want" = "$(cat "$ref/greedy_text.txt")" ] || fail "llmc's own greedy text is off"
oa completion "$prompt" 32 >"$RUN/c.json" 2>"$RUN/c.err" || fail "openai completions failed: $(cat "$RUN/c.err")"
check "$RUN/c.json" '    assert d["text"] == want, "text %r" % d["text"]
    assert d["finish"] == "length" and d["usage"]["completion_tokens"] == 32 and d["usage"]["prompt_tokens"] == 20, d'
[ "$(wc -l <"$RUN/c.json")" = 2 ] || fail "expected a plain and a streamed answer"
echo "openai completions.create (plain and stream): the text of llmc -n 32 --temp 0, usage 20 + 32"

want=$(printf 'Tell me a story\n' | llmc chat --system "Be brief" -n 24 --temp 0) || fail "llmc chat failed"
oa chat "Be brief" "Tell me a story" 24 >"$RUN/chat.json" 2>"$RUN/chat.err" || fail "openai chat failed: $(cat "$RUN/chat.err")"
check "$RUN/chat.json" '    assert d["text"] == want, "text %r vs %r" % (d["text"], want)
    assert d["role"] == "assistant" and d["finish"] == "length" and d["usage"]["completion_tokens"] == 24, d
    assert d["stream"] or (d["n_logprobs"] == 24 and d["top_ok"]), d'
echo "openai chat.completions.create (plain with logprobs, and stream): the text of llmc chat"
wait_until 5 '[ "$(status_field sessions)" = 0 ]' || fail "chat sessions left held on the worker"

KPORT=$(free_port)
"$LLM_BIN/llmc" serve --run-dir "$RUN" --port "$KPORT" --api-key secret 2>"$RUN/kgw.log" & E2E_PIDS+=($!)
wait_until 10 'curl -sf -o /dev/null http://127.0.0.1:$KPORT/health' || fail "keyed gateway did not start"
OPENAI_API_KEY=wrong timeout 60 node "$JS" "http://127.0.0.1:$KPORT/v1" badkey >"$RUN/k.json" || fail "badkey run failed"
grep -q '"error":"AuthenticationError","status":401' "$RUN/k.json" || fail "wrong key: $(cat "$RUN/k.json")"
OPENAI_API_KEY=secret timeout 60 node "$JS" "http://127.0.0.1:$KPORT/v1" badkey >"$RUN/k2.json" || fail "keyed run failed"
grep -q '"error":null' "$RUN/k2.json" || fail "right key refused: $(cat "$RUN/k2.json")"
echo "openai client: AuthenticationError (401) with a wrong key, success with the right one"
echo "PASS $E2E_NAME"
