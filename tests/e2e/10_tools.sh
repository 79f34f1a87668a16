#!/bin/bash
# End-to-end: llmc inspect / quantize / synth on the shared models.
# inspect reads every model (right layer count, valid --json) and refuses corrupt
# files with exit 1 and exactly one "error:" line; synth is deterministic for a seed
# (and independent of the thread count); quantize produces the asked-for type.
set -u
BIN=${LLM_BIN:?LLM_BIN not set}
SH=${LLM_SHARED:-../shared}
L="$BIN/llmc"
V="$SH/reference/tokenizer"
T=$(mktemp -d /tmp/llm-e2e-tools-XXXXXX)
fail=0
say() { echo "10_tools: $*"; }
bad() { say "FAIL: $*"; fail=1; }
trap 'rm -rf "$T"' EXIT

# 1. every model: exit 0, the layer count of models/README.md, parseable JSON
layers_of() {
    case "$1" in
        tiny-llama2-*) echo 4 ;; tiny-llama3-*|tiny-qwen2-*) echo 2 ;; stories260K-*) echo 5 ;; *) echo "?" ;;
    esac
}
n=0
for f in "$SH"/models/*.gguf; do
    b=$(basename "$f")
    out=$("$L" inspect "$f" 2>"$T/err") || { bad "inspect $b exited $?: $(cat "$T/err")"; continue; }
    want=$(layers_of "$b")
    echo "$out" | grep -Eq "^layers +$want\$" || bad "inspect $b: layers is not $want"
    "$L" inspect "$f" --json --tensors >"$T/$b.json" || bad "inspect --json $b failed"
    echo "$T/$b.json $want" >>"$T/json.list"
    n=$((n + 1))
done
if command -v python3 >/dev/null; then # one interpreter for all files: it is slow to start
    python3 - "$T/json.list" <<'PY' || bad "inspect --json output is not valid JSON with the right layers"
import json, sys
for line in open(sys.argv[1]):
    path, want = line.split()
    d = json.load(open(path))
    assert d["layers"] == int(want), path
    assert len(d["tensors"]) == d["tensor_count"], path
PY
fi
say "inspect read $n models"
"$L" inspect "$SH/models/tiny-qwen2-Q8_0.gguf" | grep -q "neox" || bad "qwen2 rope is not reported as neox"
"$L" inspect "$SH/models/tiny-llama2-Q4_0.gguf" | grep -Eq "^  Q4_0 +28 tensors" || bad "tiny-llama2-Q4_0: not 28 Q4_0 tensors"

# 2. corrupt files: exit 1, exactly one line, starting with "error: "
one_error() { # $1 = file, $2 = description
    "$L" inspect "$1" >"$T/out" 2>"$T/err"
    rc=$?
    [ $rc -eq 1 ] || bad "$2: exit $rc, expected 1"
    [ "$(wc -l <"$T/err")" -eq 1 ] || bad "$2: stderr has $(wc -l <"$T/err") lines"
    grep -q "^error: " "$T/err" || bad "$2: stderr does not start with 'error: '"
    [ -s "$T/out" ] && bad "$2: printed something on stdout"
}
src="$SH/models/stories260K-f16.gguf"
head -c 5000 "$src" >"$T/trunc.gguf";     one_error "$T/trunc.gguf" "truncated file"
head -c 600000 "$src" >"$T/trunc2.gguf";  one_error "$T/trunc2.gguf" "truncated data"
{ printf 'GGUX'; tail -c +5 "$src"; } >"$T/magic.gguf"; one_error "$T/magic.gguf" "wrong magic"
{ head -c 4 "$src"; printf '\001\000\000\000'; tail -c +9 "$src"; } >"$T/v1.gguf"; one_error "$T/v1.gguf" "version 1"
: >"$T/empty.gguf";                       one_error "$T/empty.gguf" "empty file"
one_error "$T/missing.gguf" "missing file"
grep -q "magic" <("$L" inspect "$T/magic.gguf" 2>&1) || bad "wrong magic: the error does not name the field"
"$L" inspect >/dev/null 2>&1; [ $? -eq 2 ] || bad "inspect without a file: exit is not 2"
"$L" inspect "$src" --bogus >/dev/null 2>&1; [ $? -eq 2 ] || bad "inspect --bogus: exit is not 2"

# 3. synth: same seed -> same bytes (any thread count), other seed -> different
S() { "$L" synth --shape tiny --type Q8_0 --vocab-from "$V/ggml-vocab-llama-spm.gguf" "$@" 2>>"$T/synth.log"; }
S --seed 7 -o "$T/a.gguf" || bad "synth failed: $(cat "$T/synth.log")"
S --seed 7 -o "$T/b.gguf" --threads 1 || bad "synth (1 thread) failed"
S --seed 8 -o "$T/c.gguf" || bad "synth (seed 8) failed"
cmp -s "$T/a.gguf" "$T/b.gguf" || bad "synth with the same seed gave different files"
cmp -s "$T/a.gguf" "$T/c.gguf" && bad "synth with another seed gave the same file"
out=$("$L" inspect "$T/a.gguf") || bad "inspect cannot read the synth model"
echo "$out" | grep -Eq "^layers +4$" || bad "synth tiny: not 4 layers"
echo "$out" | grep -Eq "^embedding +256$" || bad "synth tiny: not 256 wide"
echo "$out" | grep -Eq "^vocab +32000$" || bad "synth tiny: vocab is not 32000"
echo "$out" | grep -Eq "^  Q8_0 +29 tensors" || bad "synth tiny: not 29 Q8_0 matrices"
say "synth tiny Q8_0: $(stat -c %s "$T/a.gguf") bytes"
"$L" synth --shape tiny --type Q8_0 --vocab-from "$V/ggml-vocab-qwen2.gguf" --seed 1 --arch qwen2 \
    -o "$T/q.gguf" 2>>"$T/synth.log" || bad "synth --arch qwen2 failed"
"$L" inspect "$T/q.gguf" --tensors | grep -q "^blk.3.attn_v.bias " || bad "synth qwen2: no v bias"
"$L" synth --shape nope --type Q8_0 --vocab-from x --seed 1 -o "$T/x" 2>/dev/null; [ $? -eq 2 ] || bad "synth --shape nope: exit is not 2"
# mixture of experts: 3-D expert stacks, an F32 router (quantize keeps it F32 too), inspect's experts line
"$L" synth --shape qwen3moe-tiny --type Q8_0 --vocab-from "$V/ggml-vocab-qwen2.gguf" --seed 1 --arch qwen3moe \
    -o "$T/moe.gguf" 2>>"$T/synth.log" || bad "synth qwen3moe-tiny failed"
"$L" inspect "$T/moe.gguf" | grep -Eq "^experts +8, 2 used per token, expert ffn 64$" || bad "inspect qwen3moe-tiny: no experts line"
"$L" inspect "$T/moe.gguf" --tensors | grep -Eq "^blk.1.ffn_down_exps.weight +Q8_0 +\[64, 64, 8\]" || bad "synth qwen3moe-tiny: no 3-D down experts"
"$L" quantize "$T/moe.gguf" "$T/moe4.gguf" Q4_0 2>/dev/null || bad "quantize qwen3moe-tiny Q4_0 failed"
"$L" inspect "$T/moe4.gguf" --tensors | grep -Eq "^blk.0.ffn_gate_inp.weight +F32 " || bad "quantize: the router is not F32"
"$L" synth --shape qwen3moe-tiny --type Q8_0 --vocab-from x --seed 1 --arch qwen3 -o "$T/x" 2>/dev/null; [ $? -eq 2 ] || bad "synth MoE shape with a dense arch: exit is not 2"
# synth still makes the test models of tests/data byte for byte, with the commands of its
# README (seed 7): a change to what synth draws (such as a router filled with the rope
# factors' ramp, which sent every token to the first or last experts) shows here
D="$(dirname "$0")/../data"
nrep=0
for f in "$D"/*-tiny-*/*.gguf; do
    stem=$(basename "$f" .gguf) shape=${stem%-*} ty=${stem##*-}
    arch=$("$L" inspect "$f" | awk '$1 == "architecture" { print $2 }') # the file's own
    "$L" synth --shape "$shape" --type "$([ "$ty" = f32 ] && echo F32 || echo "$ty")" --arch "$arch" --seed 7 \
        --vocab-from "$SH/models/stories260K-f32.gguf" -o "$T/rep.gguf" 2>>"$T/synth.log" || { bad "synth $stem failed"; continue; }
    cmp -s "$T/rep.gguf" "$f" || bad "synth no longer makes tests/data/$stem/$stem.gguf byte for byte"
    nrep=$((nrep + 1))
done
[ "$nrep" -ge 18 ] || bad "only $nrep test models of tests/data remade"
say "synth remade $nrep test models of tests/data byte for byte"

# 4. quantize: a model to Q4_0 reads back with Q4_0 matrices; fallbacks are said
"$L" quantize "$SH/models/tiny-llama2-Q8_0.gguf" "$T/q4.gguf" Q4_0 2>"$T/q.log" || bad "quantize failed: $(cat "$T/q.log")"
"$L" inspect "$T/q4.gguf" | grep -Eq "^  Q4_0 +29 tensors" || bad "quantize Q4_0: not 29 Q4_0 tensors"
"$L" inspect "$T/q4.gguf" | grep -Eq "^  F32 +9 tensors" || bad "quantize Q4_0: norms are not F32"
"$L" quantize "$src" "$T/k.gguf" Q4_K 2>"$T/k.log" || bad "quantize Q4_K failed"
grep -q "using F16" "$T/k.log" || bad "quantize Q4_K of stories260K did not report the F16 fallback"
# the mixes: every tensor gets the type llama-quantize gave it in the shared files
types_of() { "$L" inspect "$1" --tensors | awk 'NF >= 5 && $1 ~ /\.(weight|bias)$/ { print $1, $2 }' | sort; }
for mix in Q4_K_M:15 Q5_K_M:17; do
    m=${mix%:*} ft=${mix#*:}
    "$L" quantize "$SH/models/tiny-llama2-Q8_0.gguf" "$T/$m.gguf" "$m" 2>"$T/m.log" || bad "quantize $m failed: $(cat "$T/m.log")"
    types_of "$T/$m.gguf" >"$T/$m.ours"
    types_of "$SH/models/tiny-llama2-$m.gguf" >"$T/$m.ref"
    [ "$(wc -l <"$T/$m.ref")" -eq 38 ] || bad "tiny-llama2-$m: not 38 tensors listed"
    cmp -s "$T/$m.ours" "$T/$m.ref" || bad "quantize $m: types differ from llama-quantize's: $(diff "$T/$m.ours" "$T/$m.ref" | head -4 | tr '\n' ' ')"
    "$L" inspect "$T/$m.gguf" | grep -Eq "^file type +$ft\$" || bad "quantize $m: file type is not $ft"
    "$L" quantize "$src" "$T/s$m.gguf" "$m" 2>"$T/m.log" || bad "quantize stories260K $m failed: $(cat "$T/m.log")"
    grep -q "ffn_down.weight: row length 172 .* using F16" "$T/m.log" || bad "quantize stories260K $m: no F16 fallback said"
done
say "quantize Q4_K_M / Q5_K_M: per-tensor types equal llama-quantize's"
# --threads splits a tensor's rows (token_embd's 32000 rows are many chunks): the same bytes
"$L" quantize "$SH/models/tiny-llama2-Q8_0.gguf" "$T/t1.gguf" Q4_K_M --threads 1 2>"$T/t.log" || bad "quantize --threads 1 failed"
"$L" quantize "$SH/models/tiny-llama2-Q8_0.gguf" "$T/t5.gguf" Q4_K_M --threads 5 2>>"$T/t.log" || bad "quantize --threads 5 failed"
grep -q "; 5 threads)" "$T/t.log" || bad "quantize --threads 5: the count is not said"
cmp -s "$T/t1.gguf" "$T/t5.gguf" && cmp -s "$T/t1.gguf" "$T/Q4_K_M.gguf" || bad "quantize: the bytes depend on --threads"
"$L" quantize "$src" "$T/x.gguf" Q4_0 --threads 0 2>"$T/e.log"; [ $? -eq 2 ] || bad "quantize --threads 0: exit is not 2"
grep -q "threads must be 1..64" "$T/e.log" || bad "quantize --threads 0: no clear error"
say "quantize --threads: the same bytes on 1 and 5 threads"
"$L" quantize "$src" "$T/x.gguf" Q4_K_S 2>/dev/null; [ $? -eq 2 ] || bad "quantize to Q4_K_S: exit is not 2"
"$L" quantize "$T/trunc.gguf" "$T/x.gguf" Q4_0 2>"$T/e.log"; [ $? -eq 1 ] || bad "quantize of a bad file: exit is not 1"
[ "$(grep -c '^error: ' "$T/e.log")" -eq 1 ] || bad "quantize of a bad file: not one error line"

[ $fail -eq 0 ] && say "ok"
exit $fail
