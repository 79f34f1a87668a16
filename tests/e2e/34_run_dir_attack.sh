#!/usr/bin/env bash
# 34: another local user cannot redirect the run directory (security audit, defect 4).
# Needs root: it makes two throwaway users, a victim and an attacker, and removes them
# at the end; fs.protected_symlinks is set to 0 (where the attack works) and restored.
# - the attacker makes the victim's default run directory, /tmp/llm-UID, a symlink to a
#   0700 directory of the victim's (which passed a stat of the name, so that a swap
#   afterwards moved the sockets to the attacker): tokenizerd and samplerd refuse it,
#   naming it, and bind nothing in the directory it points to;
# - the attacker makes /tmp/llm-UID their own 0700 directory: refused (its owner);
# - the victim's own /tmp/llm-UID with mode 0755: refused (others may enter);
# - started outside pipeline.sh with umask 022, the daemons' sockets are 0600.
. "$(dirname "$0")/pipeline.inc"
e2e_deadline 90
[ "$(id -u)" = 0 ] || { echo "SKIP $E2E_NAME: needs root to make throwaway users"; exit 0; }
e2e_check_bins

V=llmvic$$ A=llmatk$$
PS=$(cat /proc/sys/fs/protected_symlinks)
attack_cleanup() {
    local u
    [ -n "${VUID:-}" ] && rm -rf "/tmp/llm-$VUID"
    [ -n "${VDIR:-}" ] && rm -rf "$VDIR"
    for u in "$V" "$A"; do
        id "$u" >/dev/null 2>&1 && { userdel "$u" || echo "$E2E_NAME: cannot remove throwaway user $u" >&2; }
    done
    echo "$PS" >/proc/sys/fs/protected_symlinks 2>/dev/null
}
# the daemons are stopped first: userdel refuses a user who still has processes
trap 'e2e_cleanup; attack_cleanup' EXIT
# a machine where root cannot add users (a read-only /etc, no useradd) cannot run this test
if ! { command -v useradd >/dev/null && useradd -M "$V" && useradd -M "$A"; }; then
    echo "SKIP $E2E_NAME: cannot make the throwaway users here"
    exit 0
fi
VUID=$(id -u "$V") AUID=$(id -u "$A")
echo 0 >/proc/sys/fs/protected_symlinks 2>/dev/null || echo "note: fs.protected_symlinks stays $PS"
rm -rf "/tmp/llm-$VUID"
VDIR=$(mktemp -d /tmp/llm-e2e-victim.XXXXXX) && chown "$V" "$VDIR" && chmod 700 "$VDIR"

# as_user USER CMD...: CMD run as USER (exec, so $! is CMD), with the environment of a
# plain login: the default run directory
as_user() {
    local u=$1; shift
    exec setpriv --reuid="$u" --regid="$(id -g "$u")" --clear-groups -- \
        env -u LLM_RUN_DIR -u XDG_RUNTIME_DIR "$@"
}
# refused WHAT PATTERN: each daemon, started by the victim, exits at once with an error
# naming /tmp/llm-VUID and matching PATTERN
refused() {
    local d out rc
    for d in "tokenizerd --model $MODEL" samplerd; do
        out=$( (as_user "$V" timeout 10 $LLM_BIN/$d) 2>&1); rc=$?
        [ "$rc" = 1 ] || fail "$1: ${d%% *} was not refused (exit code $rc): $out"
        case $out in *"/tmp/llm-$VUID"*$2*) ;; *) fail "$1: unclear refusal by ${d%% *}: $out" ;; esac
    done
    echo "$1: refused: ${out##*ERROR }"
}

# where the checkout is closed to other users (a 0700 home), the throwaway users cannot run
# the daemons: nothing can be tested here
if ! (as_user "$V" test -x "$LLM_BIN/tokenizerd" -a -r "$MODEL"); then
    echo "SKIP $E2E_NAME: a throwaway user cannot run $LLM_BIN/tokenizerd or read $MODEL"
    exit 0
fi
(as_user "$A" ln -s "$VDIR" "/tmp/llm-$VUID") || fail "the attacker cannot make the symlink"
refused "a symlink to the victim's 0700 directory" "is a symbolic link"
left=$(ls "$VDIR"); [ -z "$left" ] || fail "the daemons made $left in the directory the symlink points to"
rm "/tmp/llm-$VUID"

(as_user "$A" mkdir -m 700 "/tmp/llm-$VUID") || fail "the attacker cannot make the directory"
refused "the attacker's own 0700 directory" "belongs to uid $AUID"
rm -rf "/tmp/llm-$VUID"

(as_user "$V" mkdir -m 755 "/tmp/llm-$VUID") || fail "the victim cannot make the directory"
refused "the victim's directory with mode 0755" "has mode 755; it must be 0700"
rm -rf "/tmp/llm-$VUID"

# sockets made outside pipeline.sh, with umask 022
(umask 022; as_user "$V" "$LLM_BIN/tokenizerd" --model "$MODEL" --run-dir "$VDIR") 2>"$RUN/tokenizerd.log" &
E2E_PIDS+=($!)
(umask 022; as_user "$V" "$LLM_BIN/samplerd" --run-dir "$VDIR") 2>"$RUN/samplerd.log" & E2E_PIDS+=($!)
wait_until 20 '[ -S "$VDIR/front.sock" ] && [ -S "$VDIR/workers.sock" ] && [ -S "$VDIR/sampler.sock" ]' \
    || fail "the daemons did not bind their sockets in $VDIR"
for s in front workers sampler; do
    m=$(stat -c %a "$VDIR/$s.sock"); [ "$m" = 600 ] || fail "$s.sock has mode $m with umask 022, not 600"
done
echo "with umask 022: front.sock, workers.sock and sampler.sock are 0600"
echo "PASS $E2E_NAME"
