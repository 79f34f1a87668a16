#!/usr/bin/env bash
# 66: a stream moved by kill -9 of its worker continues identically, on a model of real
# shape (stories110m, llmc synth), 2 workers x 1 thread, prompts prefilled in chunks of
# 64 tokens: killed mid-prefill (the worker holds the session, no token out yet) and
# mid-decode (tokens are streaming). The replacement re-prefills in other chunks than
# the first worker used; the text must still equal an uninterrupted run.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 300
MODEL=$(synth_model stories110m Q8_0)
# Every step is slowed by 100 ms (a test hook) so that a fast machine still has a
# prefill of many steps to catch (15 chunks: 1.5 s): without it a 900-token prefill can
# end before llmc status has shown who holds the session.
LLM_FAULT_STEP_DELAY_MS=100 start_pipeline 2 --threads 1 --batch-tokens 64 --idle-batch-tokens 64
words 700 >"$RUN/long.txt"
holder() { status_field busy; }

run_case() { # label n_predict when(prefill|decode)
    llmc -n "$2" --temp 0 --file "$RUN/long.txt" >"$RUN/ref.txt" || fail "$1: reference run failed"
    llmc -n "$2" --temp 0 --file "$RUN/long.txt" >"$RUN/out.txt" 2>"$RUN/err.txt" & E2E_PIDS+=($!)
    local victim=""
    for t in $(seq 600); do
        victim=$(holder)
        if [ -n "$victim" ]; then
            if [ "$3" = prefill ] && [ ! -s "$RUN/out.txt" ]; then sleep 0.3; [ -s "$RUN/out.txt" ] || break; fi
            if [ "$3" = decode ] && [ -s "$RUN/out.txt" ]; then break; fi
        fi
        victim=""
        sleep 0.02
    done
    [ -n "$victim" ] || fail "$1: never caught the worker at the right moment"
    local bytes; bytes=$(wc -c <"$RUN/out.txt")
    kill -9 "$victim"
    echo "$1: killed worker $victim with $bytes bytes streamed"
    wait "${E2E_PIDS[0]}" || fail "$1: the stream failed after the kill: $(cat "$RUN/err.txt")"
    E2E_PIDS=()
    cmp -s "$RUN/ref.txt" "$RUN/out.txt" || fail "$1: text differs from the uninterrupted run"
    [ "$3" = decode ] || [ "$bytes" = 0 ] || fail "$1: the kill came after the first token"
    wait_until 30 '[ "$(status_field workers)" = 2 ]' || fail "$1: no replacement worker"
}
run_case "mid-prefill" 8 prefill
run_case "mid-decode" 32 decode
[ "$(grep -c "re-dispatching at step" "$RUN/tokenizerd.log")" -ge 2 ] || fail "sessions were not re-dispatched twice"
grep "re-dispatching at step" "$RUN/tokenizerd.log" | sed 's/.*INFO /front door: /'
echo "PASS $E2E_NAME"
