#!/usr/bin/env bash
# 40: 2 workers, 4 concurrent greedy streams; kill -9 a worker that holds sessions
# mid-stream. Every stream must complete with exactly the text of an uninterrupted run
# (no token lost or repeated), the master must start a replacement that attaches the
# segment without reloading it, the front door must see the worker's process end (not
# wait out its heartbeats), and the time from the kill to the replacement serving is
# measured.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 240
# Each step is slowed by 3 ms (a test hook) so the streams outlast the fault on any machine.
export LLM_FAULT_STEP_DELAY_MS=3
start_pipeline 2
N=${E2E_KILL_N:-1500}
prompts=("Once upon a time" "The little dog" "Lily and Tom went to the park" "One day, a big bear")

# uninterrupted reference runs, concurrently like the real ones
for i in 0 1 2 3; do llmc -n "$N" --temp 0 "${prompts[$i]}" >"$RUN/ref$i.txt" & E2E_PIDS+=($!); done
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "reference stream failed"; done
E2E_PIDS=()

for i in 0 1 2 3; do llmc -n "$N" --temp 0 "${prompts[$i]}" >"$RUN/out$i.txt" 2>"$RUN/err$i.txt" & E2E_PIDS+=($!); done
# wait until every stream has started and a worker holds sessions, then kill that worker
victim=""
for t in $(seq 400); do
    started=1
    for i in 0 1 2 3; do [ -s "$RUN/out$i.txt" ] || started=0; done
    if [ $started = 1 ]; then
        victim=$(status_field busy)
        [ -n "$victim" ] && break
    fi
    sleep 0.01
done
[ -n "$victim" ] || fail "no worker held a session while the streams ran (streams too short?)"
before=$(status_field pids)
bytes=$(cat "$RUN"/out*.txt | wc -c)
kill -9 "$victim"
t0=$(now_ms)
echo "killed worker $victim with $bytes bytes streamed so far"
# the replacement: a new pid registered with the front door
wait_until 30 '[ "$(status_field workers)" = 2 ] && ! status_field pids | grep -qw "$victim"' \
    || fail "no replacement worker registered within 30 s"
new_pid=$(status_field pids | tr ' ' '\n' | grep -vw -e "$victim" $(for p in $before; do echo "-e $p"; done) | head -n 1)
t_reg=$(log_ms "$RUN/tokenizerd.log" "worker pid $new_pid on .* registered")
# over ipc the front door watches the worker's process (the kernel's pid of the
# connection) and moves its sessions when it ends, without waiting out its heartbeats
grep -q "worker pid $victim is gone (its process ended" "$RUN/tokenizerd.log" \
    || fail "the front door did not see the worker's process end: $(grep "worker pid $victim" "$RUN/tokenizerd.log" | tail -n 2)"
t_purge=$(log_ms "$RUN/tokenizerd.log" "worker pid $victim is gone")
echo "kill -9 -> replacement worker (pid $new_pid) registered with the front door: $((t_reg - t0)) ms"
echo "kill -9 -> sessions of the dead worker re-dispatched (its process seen gone): $((t_purge - t0)) ms"
for p in "${E2E_PIDS[@]}"; do wait "$p" || fail "a stream failed after the kill: $(cat "$RUN"/err*.txt)"; done
E2E_PIDS=()
for i in 0 1 2 3; do
    cmp -s "$RUN/ref$i.txt" "$RUN/out$i.txt" || fail "stream $i differs from the uninterrupted run ($(wc -c <"$RUN/ref$i.txt") vs $(wc -c <"$RUN/out$i.txt") bytes)"
done
echo "all 4 streams equal their uninterrupted runs"
grep -q "re-dispatching at step" "$RUN/tokenizerd.log" || fail "no session was re-dispatched (the kill did not land mid-stream)"
grep "re-dispatching at step" "$RUN/tokenizerd.log" | sed 's/.*INFO /front door: /'
grep -q "(pid $victim) killed by signal 9; restarting" "$RUN/engined.log" || fail "master did not report the dead worker"
grep -q "converted" "$RUN/engined.log" && fail "the segment was converted again"
new=$(grep -c "attached segment .* read-only in .* ms (no reload)" "$RUN/engined.log")
[ "$new" -ge 3 ] || fail "the replacement did not attach the segment ($new attach lines)"
grep "attached segment" "$RUN/engined.log" | tail -n 1 | sed 's/.*INFO /replacement: /'
[ "$(status_field active)" = 0 ] || fail "requests still active"
echo "PASS $E2E_NAME"
