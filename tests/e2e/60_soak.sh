#!/usr/bin/env bash
# 60: 8 concurrent clients for 60 seconds against 2 workers, with mixed parameters:
# no client error, and no leaked session at the end (0 active requests, 0 worker
# sessions). SOAK_SECONDS overrides the duration.
. "$(dirname "$0")/pipeline.inc"
secs=${SOAK_SECONDS:-60}
e2e_deadline $((secs + 90))
start_pipeline 2
end=$(( $(date +%s) + secs ))
client() {
    local k=$1 n=0 rc
    while [ "$(date +%s)" -lt "$end" ]; do
        case $(( (k + n) % 4 )) in
            0) llmc -n 64 --temp 0 "Once upon a time" >/dev/null ;;
            1) llmc -n 48 --temp 0.8 --seed $((k * 100 + n)) --top-k 20 "The cat" >/dev/null ;;
            2) llmc -n 40 --temp 1.0 --mirostat 2 --seed $n --stop "." "Lily went" >/dev/null &&
               llmc -n 40 --temp 0.9 --dry-multiplier 0.8 --seed $n "Tom" >/dev/null ;;
            3) llmc -n 80 --temp 0.7 --min-p 0.1 --repeat-penalty 1.2 --json "One day" >/dev/null ;;
        esac
        rc=$?
        [ $rc = 0 ] || { echo "client $k request $n failed with $rc" >>"$RUN/errors.txt"; }
        n=$((n + 1))
    done
    echo "$n" >"$RUN/count$k.txt"
}
for k in 1 2 3 4 5 6 7 8; do client "$k" 2>>"$RUN/errors.txt" & E2E_PIDS+=($!); done
for p in "${E2E_PIDS[@]}"; do wait "$p"; done
E2E_PIDS=()
total=$(cat "$RUN"/count*.txt | awk '{s+=$1} END {print s+0}')
[ -s "$RUN/errors.txt" ] && fail "errors during the soak: $(head -n 5 "$RUN/errors.txt")"
wait_until 10 '[ "$(status_field active)" = 0 ] && [ "$(status_field sessions)" = 0 ] && [ "$(status_field queued)" = 0 ]' \
    || fail "sessions leaked: $("$LLM_BIN/llmc" status --run-dir "$RUN")"
echo "soak: 8 clients x ${secs} s, $total requests, no errors, 0 active sessions at the end"
"$LLM_BIN/llmc" status --run-dir "$RUN" | sed -n 's/^requests: /front door: /p'
echo "PASS $E2E_NAME"
