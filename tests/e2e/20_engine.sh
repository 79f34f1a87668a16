#!/bin/bash
# End-to-end: engined's one-shot commands on a private copy of stories260K.
# Build then attach (log says so), greedy ids equal llama.cpp's greedy.txt on both
# paths, --logits-out size (and its bytes after --warmup passes, and with --kv-pool), --list-segments / --remove-segment / --verify-segment (a
# flipped bit, a flipped header byte, mode 0644), a changed file gets a new segment, and
# bad input gives "error:" lines and exit status 1.
set -u
BIN=${LLM_BIN:?LLM_BIN not set}
SH=${LLM_SHARED:-../shared}
E="$BIN/engined"
REF="$SH/reference/stories260K-f32"
T=$(mktemp -d /tmp/llm-e2e-engine-XXXXXX)
fail=0
say() { echo "20_engine: $*"; }
bad() { say "FAIL: $*"; fail=1; }
cleanup() {
    for s in $("$E" --list-segments 2>/dev/null | awk -v t="$T" 'index($0, t) {print $1}'); do
        "$E" --remove-segment "$s" >/dev/null 2>&1
    done
    rm -rf "$T"
}
trap cleanup EXIT

cp "$SH/models/stories260K-f32.gguf" "$T/m.gguf"

# 1. first run converts, second attaches; both give llama.cpp's greedy continuation
"$E" --model "$T/m.gguf" --eval "$REF/story/tokens.txt" -n 32 >"$T/g1" 2>"$T/log1" || bad "first eval failed: $(cat "$T/log1")"
grep -q "built segment" "$T/log1" || bad "first run did not build a segment"
"$E" --model "$T/m.gguf" --eval "$REF/story/tokens.txt" -n 32 >"$T/g2" 2>"$T/log2" || bad "second eval failed"
grep -q "attached READY segment .* in [0-9.]* ms" "$T/log2" || bad "second run did not attach: $(cat "$T/log2")"
say "$(grep -o 'attached READY segment .*' "$T/log2")"
cmp -s "$T/g1" "$REF/story/greedy.txt" || bad "int8 greedy differs from greedy.txt"
cmp -s "$T/g2" "$REF/story/greedy.txt" || bad "int8 greedy (attached) differs from greedy.txt"

# 2. float path, every case, both KV types
for c in hello story unicode; do
    for kv in f32 f16; do
        "$E" --model "$T/m.gguf" --eval "$REF/$c/tokens.txt" -n 32 --precision float --kv $kv --threads 1 \
            >"$T/gf" 2>/dev/null || bad "float eval $c failed"
        cmp -s "$T/gf" "$REF/$c/greedy.txt" || bad "float greedy ($c, kv $kv) differs from greedy.txt"
    done
done

# 3. --logits-out writes n_tokens x n_vocab floats
"$E" --model "$T/m.gguf" --eval "$REF/unicode/tokens.txt" --logits-out "$T/l.f32" 2>/dev/null || bad "logits-out failed"
want=$(( $(grep -c . "$REF/unicode/tokens.txt") * 512 * 4 ))
[ "$(stat -c %s "$T/l.f32" 2>/dev/null)" = "$want" ] || bad "logits file is not $want bytes"
# a warm-up pass first (--warmup) leaves the timed pass's logits as they were
"$E" --model "$T/m.gguf" --eval "$REF/unicode/tokens.txt" --logits-out "$T/lw.f32" --warmup 2 2>"$T/logw" \
    || bad "--warmup 2 failed: $(cat "$T/logw")"
cmp -s "$T/l.f32" "$T/lw.f32" || bad "logits after --warmup 2 differ from a cold pass's"
# --kv-pool: the session holds blocks of pools of the process's own (the logits the same
# bits as the private cache's), removed at exit; a pipeline's pools are never touched
"$E" --model "$T/m.gguf" --eval "$REF/unicode/tokens.txt" --logits-out "$T/lp.f32" --kv-pool 1024 2>"$T/logp" \
    || bad "--kv-pool 1024 failed: $(cat "$T/logp")"
cmp -s "$T/l.f32" "$T/lp.f32" || bad "logits with --kv-pool differ from the private cache's"
"$E" --model "$T/m.gguf" --eval "$REF/story/tokens.txt" -n 32 --kv-pool 1M >"$T/gp" 2>/dev/null || bad "--kv-pool 1M greedy failed"
cmp -s "$T/gp" "$T/g1" || bad "greedy with --kv-pool differs"
ls /dev/shm | grep -q -- '-eval[0-9]' && bad "pools left behind: $(ls /dev/shm | grep -- '-eval[0-9]')"
# a run killed before its exit leaves its pools: the next --kv-pool run of the segment,
# and --remove-segment, remove those whose process is gone
stale() { ls /dev/shm | grep -q -- "-eval$1\$"; }
leave_pool() { # sets vp
    "$E" --model "$T/m.gguf" --eval "$REF/story/tokens.txt" --kv-pool 1M --warmup 1000000000 >/dev/null 2>&1 &
    vp=$!
    local i
    for i in $(seq 200); do stale $vp && break; sleep 0.05; done
    kill -9 $vp; wait $vp 2>/dev/null
    stale $vp || bad "a killed --kv-pool run left no pool to remove (the sweep is not tested)"
}
leave_pool
"$E" --model "$T/m.gguf" --eval "$REF/story/tokens.txt" --kv-pool 1M >/dev/null 2>"$T/logs" || bad "--kv-pool after a kill failed"
stale $vp && bad "the pool of killed run $vp outlived the next --kv-pool run"
grep -q "removed KV pool .*-eval$vp: process $vp is gone" "$T/logs" || bad "no log of removing $vp's pool: $(cat "$T/logs")"
leave_pool # for --remove-segment (section 4)
"$E" --model "$T/m.gguf" --eval "$REF/story/tokens.txt" --kv-pool lots 2>"$T/logb" && bad "--kv-pool lots accepted"
grep -q "^error: .*lots" "$T/logb" || bad "--kv-pool lots: no error naming it: $(cat "$T/logb")"

# 4. listing and removal
"$E" --list-segments >"$T/list" || bad "--list-segments failed"
grep -q "READY .*$T/m.gguf" "$T/list" || bad "segment not listed: $(cat "$T/list")"
seg=$(awk -v t="$T/m.gguf" '$NF == t && $1 !~ /f32$/ {print $1}' "$T/list" | head -1)
[ -n "$seg" ] || bad "no int8 segment for the model in the list"
"$E" --verify-segment "$seg" | grep -q "^$seg OK (llama)" || bad "--verify-segment $seg"
# bits per weight (column 6): F32 weights become INT8 tiles (8 bits + scales + padding);
# the float segment holds f32 (32); a Q8_0 file's segment holds what the file holds
bpw_of() { awk -v n="$1" '$1 == n {print $6}' "$T/list"; }
fseg=$(awk -v t="$T/m.gguf" '$NF == t && $1 ~ /f32$/ {print $1}' "$T/list" | head -1)
awk -v b="$(bpw_of "$seg")" 'BEGIN { exit !(b >= 8.0 && b <= 9.5) }' || bad "int8 segment: bits/weight '$(bpw_of "$seg")' not in [8, 9.5]"
awk -v b="$(bpw_of "$fseg")" 'BEGIN { exit !(b >= 31.9 && b <= 33) }' || bad "float segment $fseg: bits/weight '$(bpw_of "$fseg")' is not 32"
cp "$SH/models/tiny-llama2-Q8_0.gguf" "$T/q8.gguf"
"$E" --model "$T/q8.gguf" --eval "$REF/hello/tokens.txt" -n 1 >/dev/null 2>"$T/logq" || bad "Q8_0 eval failed: $(cat "$T/logq")"
"$E" --list-segments >"$T/list"
qseg=$(awk -v t="$T/q8.gguf" '$NF == t {print $1}' "$T/list" | head -1)
file_bpw=$("$BIN/llmc" inspect "$T/q8.gguf" | awk '/^parameters/ {p = $2} /^total size/ {b = $3} END {printf "%.3f", 8 * b / p}')
awk -v b="$(bpw_of "$qseg")" -v f="$file_bpw" 'BEGIN { exit !(b >= 0.97 * f && b <= 1.1 * f) }' \
    || bad "Q8_0 segment $qseg: bits/weight '$(bpw_of "$qseg")' not within [0.97, 1.1] x the file's $file_bpw"
say "bits/weight: int8 $(bpw_of "$seg"), float $(bpw_of "$fseg"), Q8_0 file $file_bpw -> segment $(bpw_of "$qseg")"
"$E" --verify-segment /llm-0000000000000000 >/dev/null 2>&1 && bad "verify of a missing segment succeeded"
case "$seg" in "/llm-$(id -u)-"*) ;; *) bad "segment name $seg does not carry uid $(id -u)";; esac

# 4b. corruption and foreign modes (issue 10): a flipped bit in the weights is found by
# --verify-segment; a flipped header byte is refused at attach; mode 0644 is refused
flip() { # flip(file, offset): xor one byte with 0x20
    python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); b=f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0]^0x20]))" "$1" "$2"
}
shm="/dev/shm$seg"
mid=$(( $(stat -c %s "$shm") / 2 ))   # inside the tensor data
flip "$shm" $mid
"$E" --verify-segment "$seg" >"$T/v1"; rc=$?
[ $rc = 1 ] && grep -q "^$seg BAD: .*1 of [0-9]* tensors fail their checksum" "$T/v1" || bad "flipped weight not found: rc $rc, $(cat "$T/v1")"
flip "$shm" $mid
"$E" --verify-segment "$seg" | grep -q "^$seg OK" || bad "restored segment does not verify"
flip "$shm" 200                        # inside src_path in the header
"$E" --verify-segment "$seg" | grep -q "^$seg BAD: .*header checksum mismatch" || bad "flipped header byte not refused"
flip "$shm" 200
chmod 0644 "$shm"
"$E" --model "$T/m.gguf" --eval "$REF/hello/tokens.txt" -n 2 >/dev/null 2>"$T/e0" && bad "a mode 0644 segment was used"
grep -q "error: segment $seg is owned by uid $(id -u) with mode 0644, expected uid $(id -u) and mode 0600" "$T/e0" || bad "mode 0644: $(cat "$T/e0")"
[ -e "$shm" ] || bad "the refused segment was removed"
chmod 0600 "$shm"
"$E" --verify-segment "$seg" | grep -q "^$seg OK" || bad "segment back at 0600 does not verify"
"$E" --remove-segment "$seg" >/dev/null || bad "--remove-segment $seg failed"
stale $vp && bad "--remove-segment $seg left the pool of killed run $vp"
"$E" --list-segments | grep -q "^$seg " && bad "$seg still listed after removal"
"$E" --remove-segment "$seg" 2>/dev/null && bad "removing twice should fail"

# 5. a changed file is not served from the old segment
"$E" --model "$T/m.gguf" --eval "$REF/hello/tokens.txt" -n 2 >/dev/null 2>"$T/log3"
old=$(grep -o '/llm-[0-9]*-[0-9a-f]*' "$T/log3" | head -1)
touch -d '2001-01-01' "$T/m.gguf"
"$E" --model "$T/m.gguf" --eval "$REF/hello/tokens.txt" -n 2 >/dev/null 2>"$T/log4"
grep -q "built segment" "$T/log4" || bad "changed file reused a segment: $(cat "$T/log4")"
new=$(grep -o '/llm-[0-9]*-[0-9a-f]*' "$T/log4" | head -1)
[ "$old" != "$new" ] || bad "changed file got the same segment name $old"
grep -q "segment $old holds an older version" "$T/log4" || bad "no hint about the old segment $old"

# 6. bad input: clear errors, exit status 1 (2 for usage)
"$E" --model "$T/none.gguf" --eval "$REF/hello/tokens.txt" 2>"$T/e1"; rc=$?
[ $rc = 1 ] && grep -q "error: .*none.gguf" "$T/e1" || bad "missing model: rc $rc, $(cat "$T/e1")"
printf '1\nabc\n' >"$T/bad.txt"
"$E" --model "$T/m.gguf" --eval "$T/bad.txt" 2>"$T/e2"; rc=$?
[ $rc = 1 ] && grep -q "bad.txt:2" "$T/e2" || bad "bad token file: rc $rc, $(cat "$T/e2")"
printf '1\n99999\n' >"$T/oov.txt"
"$E" --model "$T/m.gguf" --eval "$T/oov.txt" 2>"$T/e3"; rc=$?
[ $rc = 1 ] && grep -q "outside the vocabulary" "$T/e3" || bad "out-of-vocab token: rc $rc, $(cat "$T/e3")"
printf 'not a gguf' >"$T/junk.gguf"
"$E" --model "$T/junk.gguf" --eval "$REF/hello/tokens.txt" 2>"$T/e4"; rc=$?
[ $rc = 1 ] && grep -q "error:" "$T/e4" || bad "junk model: rc $rc, $(cat "$T/e4")"
"$E" --model "$T/m.gguf" --eval "$REF/hello/tokens.txt" --precision int4 2>/dev/null; rc=$?
[ $rc = 2 ] || bad "bad --precision: rc $rc"
"$E" --model "$T/m.gguf" --eval "$REF/hello/tokens.txt" --warmup -1 2>"$T/e5"; rc=$?
[ $rc = 2 ] && grep -q -- "--warmup" "$T/e5" || bad "--warmup -1: rc $rc, $(cat "$T/e5")"
"$E" --help | grep -q -- "--list-segments" || bad "--help"

[ $fail = 0 ] && say "ok"
exit $fail
