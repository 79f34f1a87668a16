#!/usr/bin/env bash
# 31: --n-probs reaches the client: samplerd's SAMPLED carries the chosen token's
# log-prob and the top N, the worker copies them into TOKEN, the front door attaches
# them to the PIECE that flushes each token, `llmc --json` prints them as "probs".
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 90
command -v python3 >/dev/null || fail "python3 is needed to read the JSON"
start_pipeline 1

check() { # check FILE N_TOKENS N_TOP: every generated token has an entry with N_TOP alternatives
    python3 - "$@" <<'PY'
import json, sys
path, ntok, ntop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = [json.loads(l) for l in open(path)]
pieces, done = lines[:-1], lines[-1]
assert done.get("done") is True and done["tokens"] == ntok, f"final object {done}"
probs = [e for p in pieces for e in p.get("probs", [])]
assert len(probs) == ntok, f"{len(probs)} entries for {ntok} tokens"
for e in probs:
    top = e["top"]
    assert len(top) == ntop, f"{len(top)} alternatives: {e}"
    assert top[0]["id"] == e["id"], f"greedy token is not the first alternative: {e}"
    assert abs(top[0]["logprob"] - e["logprob"]) < 1e-5, f"logprob differs from the first alternative: {e}"
    lps = [t["logprob"] for t in top]
    assert all(lp <= 0 for lp in lps), f"positive logprob: {e}"
    assert all(a >= b for a, b in zip(lps, lps[1:])), f"not descending: {e}"
    assert len({t["id"] for t in top}) == ntop, f"repeated ids: {e}"
text = "".join(p["text"] for p in pieces)
assert "".join(e["text"] for e in probs) == text, f"token texts {[e['text'] for e in probs]} != {text!r}"
print(f"{ntok} tokens, {ntop} alternatives each, in {len(pieces)} pieces: {text!r}")
PY
}

llmc --json --n-probs 3 -n 5 --temp 0 "Once upon a time" >"$RUN/p3.json" || fail "--n-probs 3 run failed"
check "$RUN/p3.json" 5 3 || fail "--n-probs 3: $(cat "$RUN/p3.json")"
# the cap: the sampler's maximum (100) is accepted, more is refused
llmc --json --n-probs 100 -n 3 --temp 0 "Once upon a time" >"$RUN/p100.json" || fail "--n-probs 100 run failed"
check "$RUN/p100.json" 3 100 || fail "--n-probs 100: $(head -c 600 "$RUN/p100.json")"
if llmc --n-probs 101 -n 3 "x" 2>"$RUN/err.txt"; then fail "--n-probs 101 accepted"; fi
grep -q "^error: bad parameter --n-probs" "$RUN/err.txt" || fail "--n-probs 101: $(cat "$RUN/err.txt")"
# plain text ignores them; without --n-probs no piece has "probs"
a=$(llmc --n-probs 3 -n 12 --temp 0 "Once upon a time") && b=$(llmc -n 12 --temp 0 "Once upon a time") \
    || fail "plain runs failed"
[ "$a" = "$b" ] || fail "--n-probs changed the plain text: '$a' vs '$b'"
llmc --json -n 5 --temp 0 "Once upon a time" >"$RUN/p0.json" || fail "--json run failed"
grep -q '"probs"' "$RUN/p0.json" && fail "probs without --n-probs"
# a stop string: entries come only with text that was sent (the token the stop string
# begins in, " b" here, is dropped with it)
ref=$LLM_SHARED/reference/stories260K-f32/story
check_stop() { # check_stop FILE EXPECTED_TEXT DROPPED_TOKENS
    python3 - "$@" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
pieces, done = lines[:-1], lines[-1]
assert done["reason"] == "stop", done
text = "".join(p["text"] for p in pieces)
probs = [e for p in pieces for e in p.get("probs", [])]
assert text == sys.argv[2], repr(text)
assert text.startswith("".join(e["text"] for e in probs)), [e["text"] for e in probs]
assert len(probs) == done["tokens"] - int(sys.argv[3]), (len(probs), done["tokens"])
assert all(len(e["top"]) == 2 for e in probs)
PY
}
llmc --json --n-probs 2 -n 32 --temp 0 --stop "big" "$(cat "$ref/prompt.txt")" >"$RUN/stop.json" || fail "--stop run failed"
check_stop "$RUN/stop.json" " play outside in the park. One day, she saw a " 1 || fail "--stop: $(cat "$RUN/stop.json")"
# held back over several tokens while "red ball. She" may still match ("ar" of " park"
# waits for "k" too); the 6 tokens of " red ball. She" are dropped
llmc --json --n-probs 2 -n 32 --temp 0 --stop "red ball. She" --stop "zebra" "$(cat "$ref/prompt.txt")" \
    >"$RUN/stop2.json" || fail "multi-token --stop run failed"
check_stop "$RUN/stop2.json" " play outside in the park. One day, she saw a big, " 6 \
    || fail "multi-token --stop: $(cat "$RUN/stop2.json")"

[ "$(status_field active)" = 0 ] || fail "requests still active at the end"
echo "PASS $E2E_NAME"
