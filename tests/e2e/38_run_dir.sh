#!/usr/bin/env bash
# 38: the local launcher's run directory and supervision (issue 10, items 6-8).
# - logs and pid files are 0600 in a 0700 directory; a symlinked run directory is refused
#   and its target's mode left alone;
# - the daemons run under runit's runsv: a samplerd killed with -9 is back within a
#   second or so, with its new pid in samplerd.pid;
# - samplerd does not keep the logits ring of a dead worker mapped;
# - `pipeline.sh stop` stops every worker of the run directory, one added with
#   `engined --attach` (no master supervises it) too.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 120

# a symlink as the run directory: refused, the target's mode unchanged
tgt=$(mktemp -d /tmp/llm-e2e-tgt.XXXXXX); chmod 755 "$tgt"; ln -s "$tgt" "$RUN/link"
out=$($PIPELINE start --model "$MODEL" --run-dir "$RUN/link" 2>&1) && fail "a symlinked run directory was accepted"
mode=$(stat -c %a "$tgt"); rm -rf "$tgt" "$RUN/link"
[ "$mode" = 755 ] || fail "pipeline.sh changed the mode of the symlink's target to $mode"
case $out in *"symbolic link"*) ;; *) fail "unclear refusal of a symlinked run directory: $out" ;; esac
echo "a symlinked run directory is refused: $out"

start_pipeline 1
for f in "$RUN"/*.log "$RUN"/*.pid "$RUN"/pipeline.conf; do
    m=$(stat -c %a "$f"); [ "$m" = 600 ] || fail "$f has mode $m, not 600"
done
[ "$(stat -c %a "$RUN")" = 700 ] || fail "run directory mode $(stat -c %a "$RUN")"
echo "logs and pid files: mode 600 ($(ls "$RUN" | grep -c '\.log$') logs, $(ls "$RUN" | grep -c '\.pid$') pid files)"

# runsv restarts a killed daemon
$PIPELINE status --run-dir "$RUN" | grep -q "samplerd: running.*runsv" || fail "samplerd is not supervised by runsv"
old=$(cat "$RUN/samplerd.pid"); kill -9 "$old"; t0=$(now_ms)
wait_until 5 'p=$(cat "$RUN/samplerd.pid" 2>/dev/null); [ -n "$p" ] && [ "$p" != "$old" ] && kill -0 "$p" 2>/dev/null' \
    || fail "samplerd was not restarted within 5 s"
echo "samplerd killed (-9): back as pid $(cat "$RUN/samplerd.pid") in $(( $(now_ms) - t0 )) ms"
llmc -n 8 --temp 0 "Once upon a time" >/dev/null || fail "request after the samplerd restart failed"

# a dead worker's ring is unmapped by samplerd
sp=$(cat "$RUN/samplerd.pid")
w1=$(status_field pids); w1=${w1%% *}
kill -9 "$w1"
wait_until 20 'p=$(status_field pids); [ -n "$p" ] && [ "${p%% *}" != "$w1" ]' || fail "no replacement worker"
llmc -n 8 --temp 0 "Once upon a time" >/dev/null || fail "request on the replacement worker failed"
wait_until 5 '! grep -q "llm-logits.*(deleted)" /proc/$sp/maps' \
    || fail "samplerd keeps a deleted logits ring mapped: $(grep llm-logits /proc/$sp/maps)"
echo "samplerd unmapped the logits ring of killed worker $w1"

# a worker added with engined --attach is stopped by pipeline.sh stop
"$LLM_BIN/engined" --attach --run-dir "$RUN" --threads 1 2>"$RUN/attached.log" &
ap=$!
wait_until 30 '[ "$(status_field workers)" = 2 ]' || fail "the attached worker did not register"
[ -f "$RUN/worker-$ap.pid" ] || fail "the attached worker left no worker-$ap.pid"
$PIPELINE stop --run-dir "$RUN" >/dev/null
e2e_running "$ap" && { kill -9 "$ap"; fail "pipeline.sh stop left the attached worker $ap running"; }
wait "$ap" 2>/dev/null
left=$(ls "$RUN" | grep -E '^worker-.*\.pid$|^(samplerd|engined|tokenizerd)\.pid$' | tr '\n' ' ')
[ -z "$left" ] || fail "pid files left after stop: $left"
[ -e "/dev/shm/llm-logits-$(id -u)-$ap" ] && fail "the attached worker's ring was left behind"
echo "pipeline.sh stop stopped the attached worker (pid $ap) too"
echo "PASS $E2E_NAME"
