#!/usr/bin/env bash
# 78: tools (function calling, issue 20) end to end through the official openai npm
# client (tests/e2e/http_tools.js). tiny-qwen2 with the chatml template (Hermes/Qwen
# <tool_call> syntax): tool_choice required and a named function give calls that parse
# and validate against the tool's schema (ajv, and by hand); parallel_tool_calls gives 1 to n valid calls;
# streamed deltas (index, id, type, name first, then the arguments) reassemble to the
# whole answer's calls; auto and none give content; a turn with a tool result in the
# history is accepted; a bad tool schema, an unknown tool_choice name and a bad tool
# name are 400s. Then tiny-llama3 with the llama3 template (Llama 3.1 JSON calls):
# required and named calls parse and validate.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120
command -v node >/dev/null && [ -f "${LLM_BUILD:-/nonexistent}/node/node_modules/openai/package.json" ] \
    && [ -f "$LLM_BUILD/node/node_modules/ajv/package.json" ] \
    || fail "the openai and ajv npm packages are not installed in \$LLM_BUILD/node (make e2e installs them)"
JS="$E2E_ROOT/tests/e2e/http_tools.js"

run_family() { # MODEL TEMPLATE FAMILY
    MODEL=$LLM_SHARED/models/$1
    PORT=$(free_port)
    start_pipeline 1 --http "$PORT" --chat-template "$2"
    timeout $(( 60 * E2E_DEADLINE_SCALE )) node "$JS" "http://127.0.0.1:$PORT/v1" "$3" >"$RUN/$3.out" 2>"$RUN/$3.err" \
        || { cat "$RUN/$3.out"; fail "$3: $(cat "$RUN/$3.err")"; }
    sed "s/^/    $3: /" "$RUN/$3.out"
    $PIPELINE stop --run-dir "$RUN" >/dev/null 2>&1
}

t0=$(date +%s)
run_family tiny-qwen2-Q8_0.gguf chatml hermes
run_family tiny-llama3-Q8_0.gguf llama3 llama3
echo "PASS $E2E_NAME ($(( $(date +%s) - t0 )) s)"
