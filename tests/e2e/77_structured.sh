#!/usr/bin/env bash
# 77: structured output (issue 20) end to end. (a) llmc --json-schema with a nested
# schema at temperature 1.0, 8 seeds (the 100-sample check is (f)): every output parses
# and validates; (b) llmc --grammar gives exactly one of its alternatives, and with
# --ignore-eos ends where the grammar is complete (reason "grammar"); (c) a bad
# grammar and a bad schema are one-line errors and exit 1 from llmc, HTTP 400 from the
# gateway; (d) kill -9 of samplerd during a constrained generation: the same text as an
# uninterrupted run with the same seed (the matcher state travels with the session), and
# so does kill -9 of the worker (the state is rebuilt by replaying the generated
# tokens); (e) the openai npm client with response_format json_schema gets valid JSON;
# (f) 100 samples at temperature 1.0 against a nested schema all validate with ajv.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 300
PORT=$(free_port)
# Each step is slowed by 5 ms (a test hook) so that (d)'s stream outlasts the kill.
LLM_FAULT_STEP_DELAY_MS=5 start_pipeline 1 --http "$PORT" --chat-template llama2
BASE=http://127.0.0.1:$PORT

SCHEMA='{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":16},
 "age":{"type":"integer","minimum":0,"maximum":120},"pet":{"type":"object","properties":{
 "kind":{"enum":["cat","dog","fish"]},"legs":{"type":"integer"}},"required":["kind","legs"]},
 "tags":{"type":"array","items":{"type":"string","maxLength":8},"maxItems":3}},
 "required":["name","age","pet"]}'
# validate FILE...: each file holds one JSON document valid against SCHEMA
validate() {
    python3 - "$@" <<'PY' || fail "an output does not validate"
import json, sys
def check(d):
    assert isinstance(d, dict) and set(d) <= {"name", "age", "pet", "tags"}, d
    assert isinstance(d["name"], str) and 1 <= len(d["name"]) <= 16, d
    assert type(d["age"]) is int and 0 <= d["age"] <= 120, d
    p = d["pet"]
    assert isinstance(p, dict) and set(p) == {"kind", "legs"} and p["kind"] in ("cat", "dog", "fish"), p
    assert type(p["legs"]) is int, p
    if "tags" in d:
        assert isinstance(d["tags"], list) and len(d["tags"]) <= 3, d
        assert all(isinstance(t, str) and len(t) <= 8 for t in d["tags"]), d
for f in sys.argv[1:]:
    text = open(f).read()
    try:
        check(json.loads(text))
    except Exception as e:
        sys.exit("%s: %r: %s" % (f, text, e))
PY
}

# (a) 8 seeds at temperature 1.0 (at once): random-ish text, always valid JSON of the schema
for s in $(seq 1 8); do
    llmc -n 400 --temp 1.0 --seed "$s" --json-schema "$SCHEMA" "Once upon a time" >"$RUN/a$s.json" 2>"$RUN/a$s.err" &
    E2E_PIDS+=($!)
done
for s in $(seq 1 8); do wait "${E2E_PIDS[$((s - 1))]}" || fail "llmc --json-schema seed $s failed: $(cat "$RUN/a$s.err")"; done
E2E_PIDS=()
validate "$RUN"/a*.json
echo "(a) 8 of 8 samples at temperature 1.0 parse and validate, e.g. $(tr -d '\n' <"$RUN/a1.json" | tr -s ' ' | cut -c1-100)"
llmc -n 400 --temp 1.0 --seed 7 --json-schema "@/dev/stdin" "Once upon a time" <<<"$SCHEMA" >"$RUN/a_file.json" \
    || fail "--json-schema @FILE failed"
cmp -s "$RUN/a_file.json" "$RUN/a7.json" || fail "--json-schema @FILE differs from the same schema inline"

# (b) a GBNF with two alternatives: exactly one of them, whatever the seed
for s in 1 2 3 4 5 6; do
    out=$(llmc -n 20 --temp 1.0 --seed "$s" --grammar 'root ::= "yes" | "no"' "Once upon a time") \
        || fail "llmc --grammar failed"
    case $out in yes|no) ;; *) fail "--grammar yes|no gave '$out'";; esac
done
printf 'root ::= "Once" " upon"? [ a-z]{3,20} "."\n' >"$RUN/g.gbnf"
out=$(llmc -n 40 --temp 1.0 --seed 3 --grammar-file "$RUN/g.gbnf" "Once upon a time") || fail "--grammar-file failed"
python3 -c 'import re, sys; assert re.fullmatch(r"Once( upon)?[ a-z]{3,20}\.", sys.argv[1]), sys.argv[1]' "$out" \
    || fail "--grammar-file output '$out' does not match"
echo "(b) --grammar yes|no: one of the two for 6 seeds; --grammar-file: '$out'"
# a complete grammar with end-of-generation banned: it ends there, finish reason "grammar"
llmc --json -n 20 --temp 1.0 --seed 5 --ignore-eos --grammar 'root ::= "yes" | "no"' "Once" >"$RUN/b.jsonl" \
    || fail "--ignore-eos with a complete grammar failed"
tail -n 1 "$RUN/b.jsonl" | grep -q '"reason":"grammar"' || fail "--ignore-eos, complete grammar: $(tail -n 1 "$RUN/b.jsonl")"
fin=$(curl -s -H 'Content-Type: application/json' "$BASE/v1/completions" \
      -d '{"prompt":"Once","max_tokens":20,"ignore_eos":true,"grammar":"root ::= \"yes\" | \"no\""}' |
      json_get '["choices"][0]["finish_reason"]')
[ "$fin" = stop ] || fail "gateway finish_reason for a complete grammar: '$fin'"
echo "    a complete grammar with ignore_eos ends with reason 'grammar' (llmc), finish_reason 'stop' (HTTP)"

# (c) bad grammar, bad schema: one line, exit 1, before anything is sent; 400 via HTTP
one_line_error() { # WHAT WANT ARGS...: llmc fails with exit 1 and one line naming WANT
    local what=$1 want=$2; shift 2
    llmc -n 4 "$@" "x" >"$RUN/c.out" 2>"$RUN/c.err"; rc=$?
    [ "$rc" = 1 ] || fail "$what: exit $rc, want 1"
    [ "$(wc -l <"$RUN/c.err")" = 1 ] && grep -q "$want" "$RUN/c.err" || fail "$what: error '$(cat "$RUN/c.err")'"
    echo "    llmc $what: $(cat "$RUN/c.err")"
}
one_line_error "bad grammar" "line 1 col" --grammar 'root ::= "yes'
one_line_error "undefined rule" "undefined" --grammar 'root ::= item'
one_line_error "bad schema" "uniqueItems" --json-schema '{"type":"array","uniqueItems":true}'
one_line_error "schema not JSON" "json-schema" --json-schema '{"type":'
http_400() { # WHAT WANT BODY: the gateway answers 400 naming WANT
    code=$(curl -s -o "$RUN/h.json" -w '%{http_code}' -H 'Content-Type: application/json' -d "$3" "$BASE/v1/completions")
    [ "$code" = 400 ] && grep -q "$2" "$RUN/h.json" || fail "$1: HTTP $code $(cat "$RUN/h.json")"
    echo "    HTTP $1: 400 $(json_get '["error"]["message"]' <"$RUN/h.json")"
}
http_400 "bad grammar" "grammar" '{"prompt":"x","max_tokens":4,"grammar":"root ::= \"yes"}'
http_400 "bad json_schema" "uniqueItems" '{"prompt":"x","max_tokens":4,"json_schema":{"type":"array","uniqueItems":true}}'
http_400 "bad response_format" "unknown type" '{"prompt":"x","max_tokens":4,"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"strin"}}}}'
http_400 "unknown response_format" "yaml" '{"prompt":"x","max_tokens":4,"response_format":{"type":"yaml"}}'
echo "(c) bad grammars and schemas: one-line errors (exit 1) and HTTP 400"

# (d) kill -9 of samplerd mid-generation: the same text as an uninterrupted run
G='root ::= ("[" [a-z ]{1,12} "] "){300}'
args=(-n 600 --temp 0.9 --seed 77 --grammar "$G" "Once upon a time")
llmc "${args[@]}" >"$RUN/ref.txt" || fail "reference constrained run failed"
[ "$(wc -c <"$RUN/ref.txt")" -gt 600 ] || fail "reference run too short"
: >"$RUN/out.txt"
llmc "${args[@]}" >"$RUN/out.txt" 2>"$RUN/err.txt" & E2E_PIDS+=($!)
wait_until 30 '[ "$(wc -c <"$RUN/out.txt")" -gt 50 ]' || fail "stream did not start"
old=$(cat "$RUN/samplerd.pid")
kill -9 "$old"
bytes=$(wc -c <"$RUN/out.txt")
wait "${E2E_PIDS[0]}" || fail "stream failed across kill -9 of samplerd: $(cat "$RUN/err.txt")"
E2E_PIDS=()
new=$(cat "$RUN/samplerd.pid")
[ "$old" != "$new" ] || fail "samplerd was not restarted"
[ "$bytes" -lt "$(wc -c <"$RUN/ref.txt")" ] || fail "the stream had finished before the kill"
cmp -s "$RUN/ref.txt" "$RUN/out.txt" || fail "output differs from the uninterrupted run with the same seed"
echo "(d) kill -9 of samplerd (pid $old -> $new) after $bytes of $(wc -c <"$RUN/ref.txt") bytes: the same text"

# and kill -9 of the worker: the session moves, its new worker has no state and samplerd
# rebuilds it by replaying the generated tokens
: >"$RUN/outw.txt"
llmc "${args[@]}" >"$RUN/outw.txt" 2>"$RUN/errw.txt" & E2E_PIDS+=($!)
wait_until 30 '[ "$(wc -c <"$RUN/outw.txt")" -gt 50 ]' || fail "stream did not start"
wpid=$(status_field pids | tr ' ' '\n' | grep . | head -n 1)
[ -n "$wpid" ] && kill -9 "$wpid" || fail "no worker pid"
bytes=$(wc -c <"$RUN/outw.txt")
wait "${E2E_PIDS[0]}" || fail "stream failed across kill -9 of the worker: $(cat "$RUN/errw.txt")"
E2E_PIDS=()
[ "$bytes" -lt "$(wc -c <"$RUN/ref.txt")" ] || fail "the stream had finished before the worker was killed"
cmp -s "$RUN/ref.txt" "$RUN/outw.txt" || fail "output differs after the worker's death (state replay)"
echo "    kill -9 of the worker after $bytes bytes: the same text (state rebuilt from the generated tokens)"

# (e) the openai npm client, response_format json_schema (strict)
if command -v node >/dev/null && [ -f "${LLM_BUILD:-/nonexistent}/node/node_modules/openai/package.json" ]; then
    JS="$E2E_ROOT/tests/e2e/http_structured.js"
    for s in 1 2 3; do
        timeout 60 node "$JS" "$BASE/v1" schema "$SCHEMA" "$s" >"$RUN/e$s.line" 2>"$RUN/e.err" \
            || fail "openai client failed: $(cat "$RUN/e.err")"
        json_get '["text"]' <"$RUN/e$s.line" >"$RUN/e$s.json"
    done
    validate "$RUN"/e*.json
    timeout 60 node "$JS" "$BASE/v1" badschema >"$RUN/eb.line" || fail "openai client (bad schema) failed"
    grep -q '"error":"BadRequestError","status":400' "$RUN/eb.line" && grep -q uniqueItems "$RUN/eb.line" \
        || fail "bad schema through the openai client: $(cat "$RUN/eb.line")"
    echo "(e) openai client: response_format json_schema gives valid JSON (3 seeds); a bad schema is BadRequestError 400"
    # (f) 100 samples at temperature 1.0 from the random-weight model (unconstrained, it
    # writes noise) against a nested schema with $ref, oneOf, anyOf, enum, formats and
    # bounds: every one parses and ajv (with ajv-formats) finds it valid
    NESTED='{"type":"object","properties":{"id":{"type":"string","format":"uuid"},
     "when":{"type":"string","format":"date"},"owner":{"$ref":"#/$defs/person"},
     "pets":{"type":"array","maxItems":3,"items":{"oneOf":[
       {"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer","minimum":1,"maximum":9}},"required":["kind","lives"]},
       {"type":"object","properties":{"kind":{"const":"dog"},"good":{"type":"boolean"}},"required":["kind","good"]}]}},
     "score":{"anyOf":[{"type":"number"},{"type":"null"}]}},
     "required":["id","owner","pets"],
     "$defs":{"person":{"type":"object","additionalProperties":false,"required":["name","age"],"properties":{
       "name":{"type":"string","minLength":1,"maxLength":12},"age":{"type":"integer","minimum":0,"maximum":120},
       "tags":{"type":"array","items":{"enum":["a","b","c"]},"minItems":1,"maxItems":2}}}}}'
    timeout 240 node "$JS" "$BASE/v1" validity "$NESTED" 100 >"$RUN/f.line" 2>"$RUN/f.err" \
        || fail "validity run failed: $(cat "$RUN/f.err")"
    [ "$(json_get '["valid"]' <"$RUN/f.line")" = 100 ] || fail "not all 100 samples validate: $(cat "$RUN/f.line")"
    echo "(f) 100 of 100 samples at temperature 1.0 parse and validate with ajv against a nested schema"
else
    fail "the openai npm package is not installed in \$LLM_BUILD/node (make e2e installs it)"
fi
echo "PASS $E2E_NAME"
