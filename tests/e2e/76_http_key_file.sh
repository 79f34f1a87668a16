#!/usr/bin/env bash
# 76: API keys kept out of ps. --api-key-file reads one key a line (surrounding blanks
# trimmed; blank lines and # lines skipped) from a file private to its owner: from a
# 0600 file its keys are accepted and others refused (401); a 0644 file, a file owned by
# another user, a file without a key and a missing file stop the gateway at start with
# an error naming the file (and the mode). A key given with --api-key works but logs a
# warning that local users see it in ps; LLM_API_KEY and --api-key-file log none, and
# `llmc serve --help` recommends them. No pipeline: /v1/models answers from --alias.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 60
command -v curl >/dev/null || fail "curl is needed"
WARNING='visible to local users in ps; use --api-key-file or LLM_API_KEY'

# start_gateway LOG [llmc serve options...]: sets URL once the gateway answers
start_gateway() {
    local log=$1 port; shift
    port=$(free_port)
    "$LLM_BIN/llmc" serve --run-dir "$RUN" --port "$port" --alias m "$@" 2>"$RUN/$log" & E2E_PIDS+=($!)
    URL=http://127.0.0.1:$port
    wait_until 10 '[ "$(curl -s -o /dev/null -w "%{http_code}" "$URL/health")" != 000 ]' \
        || fail "gateway $* did not start: $(cat "$RUN/$log")"
}
models() { curl -s -o /dev/null -w '%{http_code}' ${1:+-H "Authorization: Bearer $1"} "$URL/v1/models"; }
expect() { # STATUS [KEY]
    local s; s=$(models "${2:-}")
    [ "$s" = "$1" ] || fail "/v1/models with key '${2:-}': status $s, expected $1"
}

keys=$RUN/keys
printf '# keys of the gateway\n\n  k-file-one  \r\nk-file-two\n   # k-commented\n\n' >"$keys"
chmod 600 "$keys"
start_gateway file.log --api-key-file "$keys"
expect 200 k-file-one
expect 200 k-file-two
expect 401 k-commented
expect 401
grep -q "$WARNING" "$RUN/file.log" && fail "--api-key-file logged the warning for keys on the command line"
echo "--api-key-file (0600): its two keys accepted, a commented one and none refused, no warning"

# refused_file WHAT PATTERN...: llmc serve --api-key-file $keys exits non-zero with an error matching each PATTERN
refused_file() {
    local what=$1 out p; shift
    out=$(timeout 10 "$LLM_BIN/llmc" serve --run-dir "$RUN" --port "$(free_port)" --api-key-file "$keys" 2>&1) \
        && fail "a key file $what was accepted"
    for p in "$@"; do grep -qF -- "$p" <<<"$out" || fail "a key file $what: the error lacks '$p': $out"; done
    echo "a key file $what: $out"
}
chmod 644 "$keys"
refused_file "of mode 0644" "error: --api-key-file: $keys: mode 0644 is too open" "chmod 600 $keys"
chmod 640 "$keys"
refused_file "of mode 0640" "$keys: mode 0640"
chmod 600 "$keys"
if [ "$(id -u)" = 0 ]; then
    chown 65534 "$keys"
    refused_file "owned by another user" "$keys: owned by uid 65534"
    chown 0 "$keys"
fi
printf '# no key yet\n\n' >"$keys"
refused_file "without a key" "$keys: no API key in it"
rm -f "$keys"
refused_file "that does not exist" "$keys: No such file or directory"

start_gateway argv.log --api-key k-argv
expect 200 k-argv
expect 401
grep -q "WARN .*$WARNING" "$RUN/argv.log" || fail "--api-key logged no warning: $(cat "$RUN/argv.log")"
echo "--api-key: works, and warns: $(grep -o "WARN .*" "$RUN/argv.log")"

LLM_API_KEY=k-env-one,k-env-two start_gateway env.log
expect 200 k-env-two
expect 401 k-argv
grep -q "$WARNING" "$RUN/env.log" && fail "LLM_API_KEY logged the warning for keys on the command line"
echo "LLM_API_KEY: works, no warning"

help=$("$LLM_BIN/llmc" serve --help)
for w in LLM_API_KEY --api-key-file 'chmod 600' 'every local user sees it in ps'; do
    grep -qF -- "$w" <<<"$help" || fail "llmc serve --help does not mention $w"
done
echo "PASS $E2E_NAME"
