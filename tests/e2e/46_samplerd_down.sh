#!/usr/bin/env bash
# 46: a samplerd that stays down is a clear error, not a silent hang (issue 10.7). With
# an unsupervised pipeline and the workers' sampler timeout at 3 s, samplerd is killed:
# `llmc status` says samplerd is not answering, a request fails within a bounded time
# with an error naming samplerd, and once samplerd is back requests work again.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 90
export LLM_SAMPLER_TIMEOUT_MS=3000
start_pipeline 1 --no-supervise
llmc -n 8 --temp 0 "Once upon a time" >/dev/null || fail "request before the kill failed"
"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q '^samplerd: ok' || fail "status does not say samplerd is ok"
kill -9 "$(cat "$RUN/samplerd.pid")"
t0=$(now_ms)
E2E_LLMC_TIMEOUT=30 llmc -n 16 --temp 0 "Once upon a time" >"$RUN/out.txt" 2>"$RUN/err.txt" && fail "a request succeeded without samplerd"
dt=$(( $(now_ms) - t0 ))
grep -q "samplerd has not answered" "$RUN/err.txt" || fail "unclear error without samplerd: $(cat "$RUN/err.txt")"
[ "$dt" -lt 15000 ] || fail "the error took $dt ms"
echo "without samplerd: '$(tr -d '\n' <"$RUN/err.txt")' after $dt ms"
llmc -n 400 --temp 0 "Once upon a time" >/dev/null 2>&1 & E2E_PIDS+=($!) # waits on samplerd
wait_until 10 '"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q "^samplerd: NOT ANSWERING"' ||
    fail "llmc status does not say samplerd is down: $("$LLM_BIN/llmc" status --run-dir "$RUN")"
"$LLM_BIN/llmc" status --run-dir "$RUN" | grep '^samplerd:'
$PIPELINE restart samplerd --run-dir "$RUN" >/dev/null || fail "restart samplerd failed"
llmc -n 8 --temp 0 "Once upon a time" >/dev/null || fail "request after samplerd came back failed"
wait_until 10 '"$LLM_BIN/llmc" status --run-dir "$RUN" | grep -q "^samplerd: ok"' || fail "status does not recover"
echo "samplerd back: requests work, status says ok"
echo "PASS $E2E_NAME"
