#!/usr/bin/env bash
# 50: nothing is lost when the front door dies. With the daemons supervised
# (pipeline.sh --supervise), tokenizerd is killed (-9) mid-stream: 4 greedy and 2 seeded
# sampled streams each end byte for byte equal to an uninterrupted run (the workers report
# their sessions to the new front door, llmc resumes from the bytes it has). The same when
# the front door dies holding text back for a half-matched stop string, and in the middle
# of a multi-byte character (a test hook makes it die at that moment); a chat continues
# across a restart; and the time from kill to serving again is measured.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 300
# Each step is slowed by 3 ms (a test hook) so the streams outlast the fault on any machine.
export LLM_FAULT_STEP_DELAY_MS=3
start_pipeline 2 --supervise
N=1200
prompts=("Once upon a time" "The little dog" "Lily and Tom went to the park" "One day, a big bear" "Sam had a red ball" "The sun was hot")
args() { if [ "$1" -lt 4 ]; then echo "--temp 0"; else echo "--temp 0.9 --seed $((40 + $1))"; fi; }
for i in 0 1 2 3 4 5; do llmc -n $N $(args $i) "${prompts[$i]}" >"$RUN/ref$i.txt" & E2E_PIDS+=($!); done
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "reference stream failed"; done
E2E_PIDS=()
kill_front() { # kills tokenizerd, waits for the supervisor's new one to serve; prints ms
    local old t0 t1
    old=$(cat "$RUN/tokenizerd.pid")
    kill -9 "$old"; t0=$(now_ms)
    for _ in $(seq 400); do
        [ "$(cat "$RUN/tokenizerd.pid")" != "$old" ] && "$LLM_BIN/llmc" status --run-dir "$RUN" >/dev/null 2>&1 && break
        sleep 0.01
    done
    t1=$(now_ms)
    echo $((t1 - t0))
}

# 1. six streams across a kill -9
for i in 0 1 2 3 4 5; do llmc -n $N $(args $i) --stats "${prompts[$i]}" >"$RUN/out$i.txt" 2>"$RUN/err$i.txt" & E2E_PIDS+=($!); done
wait_until 30 '(for i in 0 1 2 3 4 5; do [ -s "$RUN/out$i.txt" ] || exit 1; done)' || fail "streams did not start"
ms=$(kill_front)
echo "kill -9 tokenizerd -> the new front door answers: $ms ms"
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "a stream failed across the restart: $(cat "$RUN"/err*.txt)"; done
E2E_PIDS=()
for i in 0 1 2 3 4 5; do
    cmp -s "$RUN/ref$i.txt" "$RUN/out$i.txt" || fail "stream $i differs from its uninterrupted run"
done
resumed=$(grep -l "resumed [1-9]" "$RUN"/err*.txt | wc -l)
[ "$resumed" -ge 1 ] || fail "no stream was resumed (did the kill land mid-stream?)"
grep -q "adopted from worker" "$RUN/tokenizerd.log" || fail "the new front door adopted no session"
echo "6 streams (4 greedy, 2 sampled) equal their uninterrupted runs; $resumed resumed"

# 2. the front door dies holding a half-matched stop string back
ref=$LLM_SHARED/reference/stories260K-f32/story
llmc -n 60 --temp 0 --json "$(cat "$ref/prompt.txt")" >"$RUN/pieces.json" || fail "reference for the stop string failed"
# a stop string that starts with the text of tokens 20-21 and never completes
stop=$(python3 -c 'import json,sys; p=[json.loads(l) for l in open(sys.argv[1])][:-1]; print(p[19]["text"]+p[20]["text"]+"@@")' "$RUN/pieces.json")
llmc -n 60 --temp 0 --stop "$stop" "$(cat "$ref/prompt.txt")" >"$RUN/stopref.txt" || fail "stop reference failed"
echo "20 held" >"$RUN/fault-front-exit"
kill_front >/dev/null # a restart so that the new front door reads the hook file
llmc -n 60 --temp 0 --stop "$stop" --stats "$(cat "$ref/prompt.txt")" >"$RUN/stopout.txt" 2>"$RUN/stoperr.txt" \
    || fail "the stream with a half-matched stop string failed: $(cat "$RUN/stoperr.txt")"
line=$(grep "test hook: exiting" "$RUN/tokenizerd.log" | tail -n 1)
case $line in *" 0 bytes held for a stop string"*|"") fail "the front door did not die holding text back: $line" ;; esac
echo "${line#*WARN }"
cmp -s "$RUN/stopref.txt" "$RUN/stopout.txt" || fail "text across a death with a half-matched stop string differs"
echo "half-matched stop string: text equal to the uninterrupted run"

# 3. the front door dies with part of a character held back (byte-level BPE, random weights)
$PIPELINE stop --run-dir "$RUN" >/dev/null
MODEL=$LLM_SHARED/models/tiny-qwen2-Q8_0.gguf start_pipeline 1 --supervise
# seeded sampling over the whole vocabulary: random tokens, some of them parts of characters
mb="-n 300 --temp 1.5 --seed 3 --top-k 0 --top-p 1 --min-p 0"
llmc $mb "Hello" >"$RUN/mbref.txt" || fail "multi-byte reference failed"
echo "5 partial" >"$RUN/fault-front-exit"
kill_front >/dev/null
llmc $mb --stats "Hello" >"$RUN/mbout.txt" 2>"$RUN/mberr.txt" || fail "multi-byte stream failed: $(cat "$RUN/mberr.txt")"
line=$(grep "test hook: exiting" "$RUN/tokenizerd.log" | tail -n 1)
case $line in *" 0 bytes of a partial character"*|"") fail "the front door did not die inside a character: $line" ;; esac
echo "${line#*WARN }"
cmp -s "$RUN/mbref.txt" "$RUN/mbout.txt" || fail "text across a death inside a character differs"
echo "inside a multi-byte character: text equal to the uninterrupted run"

# 4. a chat continues across a restart (its session adopted between turns)
chat() { # turn1 turn2 out [kill]
    local fifo=$RUN/chat.in
    rm -f "$fifo"; mkfifo "$fifo"
    chat_out=$3
    timeout 120 "$LLM_BIN/llmc" chat --run-dir "$RUN" -n 24 --temp 0 <"$fifo" >"$3" 2>"$3.err" & local pid=$!
    exec 7>"$fifo"
    echo "$1" >&7
    wait_until 30 '[ "$(grep -c . "$chat_out")" -ge 1 ] && [ "$(status_field active)" = 0 ]' || fail "chat turn 1 did not finish"
    [ "${4:-}" = kill ] && kill_front >/dev/null
    echo "$2" >&7
    exec 7>&-
    wait "$pid" || fail "chat failed: $(cat "$3.err")"
}
chat "Hi there" "Tell me more" "$RUN/chatref.txt"
chat "Hi there" "Tell me more" "$RUN/chatout.txt" kill
cmp -s "$RUN/chatref.txt" "$RUN/chatout.txt" || fail "the chat across a restart differs from an uninterrupted one"
grep -q "(chat between turns)" "$RUN/tokenizerd.log" || fail "the chat session was not adopted between turns"
echo "a chat continued across a restart of the front door"
echo "PASS $E2E_NAME"
