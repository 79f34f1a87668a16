#!/usr/bin/env bash
# make test-deploy: the deployment run for real, in podman containers (minutes; not
# part of make test).
#
#  1. a Debian 12 base image made with mmdebstrap from Debian's archive (systemd, the
#     runtime libraries), cached in $BUILD/deploy/ and as a podman image, both keyed
#     by the package list;
#  2. the package (make deb, already built) installed with apt in a container that
#     boots systemd as PID 1 (runc: crun fails on these hosts' hybrid cgroups; with
#     runc, setrlimit needs the two --ulimit flags); systemd-analyze verify and
#     security on the installed units; the model from ../shared mounted read-only,
#     the units enabled and started, a greedy completion streamed through llmc inside
#     and through the gateway from the host (its port published);
#  3. each daemon (samplerd, tokenizerd, engined, one engine worker, the gateway)
#     killed with SIGKILL while a stream is in flight: systemd (or the master) brings
#     it back and the stream finishes with the reference text;
#  4. apt-get purge: no file, unit, segment or user of the package left;
#  5. deploy/Containerfile's image built on the same base from the .deb and run with
#     --shm-size and the model read-only: the gateway answers the host with the same
#     text.
# Prints "SKIP" and exits 0 when podman cannot run containers here.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${LLM_BUILD:-$ROOT/build}
SHARED=${LLM_SHARED:-$ROOT/../shared}
MODEL_NAME=${DEPLOY_MODEL:-stories260K-f32.gguf}
PORT=${DEPLOY_PORT:-$((18000 + $$ % 1000))}
PORT2=$((PORT + 1000))
PKGS="systemd systemd-sysv dbus adduser man-db procps curl runit libzmq5 libmsgpackc2 libmicrohttpd12 libjansson4"
PODMAN="podman --runtime runc"
T0=$(date +%s)
SYS="" IMG_CT="" WORK=""
say() { echo "test-deploy [$(( $(date +%s) - T0 ))s]: $*"; }
skip() { echo "test-deploy: SKIP: $*"; exit 0; }
fail() {
    echo "test-deploy: FAIL: $*" >&2
    if [ -n "$SYS" ]; then
        $PODMAN exec "$SYS" bash -c 'systemctl --no-pager status "llm-*"; journalctl --no-pager -n 60 -u "llm-*"' >&2 2>&1
    fi
    exit 1
}
cleanup() {
    [ -n "$SYS" ] && $PODMAN rm -f -t 2 "$SYS" >/dev/null 2>&1
    [ -n "$IMG_CT" ] && $PODMAN rm -f -t 2 "$IMG_CT" >/dev/null 2>&1
    [ -n "$WORK" ] && rm -rf "$WORK"
    $PODMAN rmi -f localhost/llm-deploy-app:test >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# 0. the tools: installed from Debian when missing and we may; else a skip
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v mmdebstrap >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing podman runc mmdebstrap"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap; } >/dev/null 2>&1
    fi
    command -v podman >/dev/null && command -v runc >/dev/null && command -v mmdebstrap >/dev/null ||
        skip "podman, runc or mmdebstrap missing (apt-get install podman runc mmdebstrap)"
fi
$PODMAN info >/dev/null 2>&1 || skip "podman cannot run here ($PODMAN info failed)"
[ -f "$SHARED/models/$MODEL_NAME" ] || fail "no model $SHARED/models/$MODEL_NAME"
DEB=$(ls "$BUILD"/deb/llm-pipeline_*.deb 2>/dev/null | head -n 1)
[ -n "$DEB" ] || fail "no package in $BUILD/deb (make deb)"
WORK=$(mktemp -d /tmp/llm-deploy-XXXXXX)
cp "$DEB" "$WORK/" && DEBN=$(basename "$DEB")

# 1. the base image, cached by its package list
KEY=$(echo "bookworm minbase $PKGS" | sha256sum | cut -c1-12)
BASE=localhost/llm-deploy-base:$KEY
TAR=$BUILD/deploy/base-$KEY.tar
if ! $PODMAN image exists "$BASE"; then
    if [ ! -s "$TAR" ]; then
        say "building the base with mmdebstrap ($PKGS)"
        mkdir -p "$BUILD/deploy"
        nice -n 10 mmdebstrap --variant=minbase --include="$(echo $PKGS | tr ' ' ,)" bookworm "$TAR.part.tar" \
            >"$BUILD/deploy/mmdebstrap.log" 2>&1 || { rm -f "$TAR.part.tar"; fail "mmdebstrap failed (log: $BUILD/deploy/mmdebstrap.log)"; }
        mv "$TAR.part.tar" "$TAR"
    fi
    $PODMAN import -q "$TAR" "$BASE" >/dev/null || fail "podman import failed"
fi
say "base image $BASE"

# 2. systemd as PID 1, the package installed with apt
SYS=$($PODMAN run -d --systemd=always --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
      --shm-size=256m -v "$SHARED/models:/models:ro" -v "$WORK:/pkg:ro" -p "127.0.0.1:$PORT:8080" \
      "$BASE" /sbin/init) || fail "the systemd container did not start"
inside() { $PODMAN exec "$SYS" bash -c "$1"; }
for i in $(seq 1 60); do
    st=$(inside 'systemctl is-system-running' 2>/dev/null); case $st in running|degraded) break ;; esac; sleep 0.5
done
[ "$st" = running ] || fail "systemd in the container is '$st'"
say "systemd is running in the container"
inside "DEBIAN_FRONTEND=noninteractive apt-get install -y -q /pkg/$DEBN" >"$WORK/apt.log" 2>&1 ||
    { cat "$WORK/apt.log"; fail "apt-get install of the package failed"; }
inside 'id llm >/dev/null' || fail "no user llm after install"
for u in samplerd tokenizerd engined gateway; do
    st=$(inside "systemctl is-enabled llm-$u.service" 2>/dev/null)
    [ "$st" = disabled ] || fail "llm-$u.service is '$st' after install, not disabled"
done
inside 'systemd-analyze verify /lib/systemd/system/llm-*.service' >"$WORK/verify.log" 2>&1 ||
    { cat "$WORK/verify.log"; fail "systemd-analyze verify"; }
say "installed: user llm, 4 units disabled; systemd-analyze verify: clean"
for u in samplerd tokenizerd engined gateway; do
    inside "systemd-analyze security --no-pager llm-$u.service" | tail -n 1 | sed 's/^→ /  /'
done
# the model, the gateway on every address (the port is published), and each step of the
# engine slowed by 100 ms (a test hook) so that the streams (the model's 128 positions, about
# 13 s) outlast the kills and the restarts, even on a loaded machine
inside "sed -i -e 's|^LLM_MODEL=.*|LLM_MODEL=/models/$MODEL_NAME|' -e 's|^LLM_HTTP_HOST=.*|LLM_HTTP_HOST=0.0.0.0|' \
        /etc/llm/llm.env && echo LLM_FAULT_STEP_DELAY_MS=100 >>/etc/llm/llm.env" || fail "editing llm.env"
inside 'systemctl enable --now llm-samplerd.service llm-tokenizerd.service llm-engined.service llm-gateway.service' \
    >/dev/null 2>&1 || fail "systemctl enable --now failed"
LLMC='runuser -u llm -- env LLM_RUN_DIR=/run/llm llmc'
for i in $(seq 1 60); do inside "$LLMC -n 1 --temp 0 Hi" >/dev/null 2>&1 && break; sleep 0.5; done
PROMPT="Once upon a time"
inside "$LLMC -n 1500 --temp 0 '$PROMPT'" >"$WORK/ref.txt" 2>"$WORK/ref.err" || fail "llmc inside: $(cat "$WORK/ref.err")"
[ -s "$WORK/ref.txt" ] || fail "llmc inside gave no text"
say "llmc inside: $(wc -c <"$WORK/ref.txt") bytes, greedy: \"$(head -c 60 "$WORK/ref.txt")...\""

# the gateway from the host: a streamed completion, its pieces joined, against llmc's
gw_stream() { # N_TOKENS OUT
    curl -sS -N -m 120 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"$PROMPT\",\"max_tokens\":$1,\"temperature\":0,\"stream\":true}" |
    python3 -c '
import json, sys
out = []
for line in sys.stdin:
    line = line.strip()
    if line.startswith("data: ") and line != "data: [DONE]":
        out.append(json.loads(line[6:])["choices"][0]["text"])
sys.stdout.write("".join(out))' >"$2"
}
for i in $(seq 1 40); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.5; done
gw_stream 1500 "$WORK/gw.txt" || fail "gateway stream from the host failed"
cmp -s "$WORK/gw.txt" "$WORK/ref.txt" || fail "the gateway's text differs from llmc's ($(wc -c <"$WORK/gw.txt") bytes)"
say "gateway from the host (127.0.0.1:$PORT): the same $(wc -c <"$WORK/gw.txt") bytes, streamed"

# 3. SIGKILL each daemon under a stream in flight
main_pid() { inside "systemctl show -p MainPID --value llm-$1.service"; }
wait_back() { # UNIT OLD_PID: a new main pid and the unit active
    local i p
    for i in $(seq 1 60); do
        p=$(main_pid "$1"); [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != "$2" ] &&
            [ "$(inside "systemctl is-active llm-$1.service")" = active ] && { echo "$p"; return 0; }
        sleep 0.25
    done
    return 1
}
for d in samplerd tokenizerd engined worker; do
    rm -f "$WORK/out.txt"
    inside "$LLMC -n 1500 --temp 0 '$PROMPT'" >"$WORK/out.txt" 2>"$WORK/out.err" & spid=$!
    gpid=""
    if [ $d = tokenizerd ]; then gw_stream 1500 "$WORK/gwk.txt" & gpid=$!; fi
    for i in $(seq 1 80); do [ -s "$WORK/out.txt" ] && break; sleep 0.05; done
    [ -s "$WORK/out.txt" ] || fail "the stream before killing $d did not start"
    if [ $d = worker ]; then
        old=$(inside 'cat /run/llm/worker-*.pid | head -n 1')
        inside "kill -KILL $old" || fail "kill -9 of worker $old"
        for i in $(seq 1 40); do
            n=$(inside 'cat /run/llm/worker-*.pid 2>/dev/null' | grep -vx "$old" | wc -l); [ "$n" -ge 2 ] && break; sleep 0.25
        done
        [ "$n" -ge 2 ] || fail "the master did not replace worker $old"
        how="the master started a new worker"
    else
        old=$(main_pid $d)
        inside "kill -KILL $old" || fail "kill -9 of $d ($old)"
        new=$(wait_back $d "$old") || fail "systemd did not bring llm-$d back after kill -9"
        how="systemd restarted it (pid $old -> $new)"
    fi
    at=$(wc -c <"$WORK/out.txt")
    [ "$at" -lt "$(wc -c <"$WORK/ref.txt")" ] || fail "the stream had ended before $d came back: no test"
    wait $spid || fail "the stream across kill -9 of $d failed: $(cat "$WORK/out.err")"
    cmp -s "$WORK/out.txt" "$WORK/ref.txt" || fail "the stream across kill -9 of $d differs from the reference"
    extra=""
    if [ -n "$gpid" ]; then
        wait $gpid || fail "the gateway stream across kill -9 of $d failed"
        cmp -s "$WORK/gwk.txt" "$WORK/ref.txt" || fail "the gateway stream across kill -9 of $d differs"
        extra=", and the gateway's stream to the host too"
    fi
    say "kill -9 $d: $how; the stream in flight ($at bytes when $d was back) finished with the reference text$extra"
done
old=$(main_pid gateway)
inside "kill -KILL $old"
new=$(wait_back gateway "$old") || fail "systemd did not bring llm-gateway back after kill -9"
for i in $(seq 1 40); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.25; done
gw_stream 1500 "$WORK/gw2.txt" && cmp -s "$WORK/gw2.txt" "$WORK/ref.txt" || fail "the gateway after its restart"
say "kill -9 gateway: systemd restarted it (pid $old -> $new); it streams the reference text again (a kill cuts only its own HTTP streams)"
inside 'journalctl --no-pager -u "llm-*" | grep -c "Scheduled restart job"' | sed 's/^/  journal: restarts scheduled by systemd: /'

# 4. purge: nothing of the package left (man-db's page cache, /var/cache/man, is
# man-db's: systemd-analyze verify ran man on the units' Documentation=)
inside 'DEBIAN_FRONTEND=noninteractive apt-get purge -y -q llm-pipeline' >"$WORK/purge.log" 2>&1 ||
    { cat "$WORK/purge.log"; fail "apt-get purge failed"; }
left=$(inside 'find / /run /dev/shm -xdev \( -name "*llm*" -o -nouser -o -nogroup \) ! -path "/models*" ! -path "/pkg*" ! -path "/var/cache/man/*" 2>/dev/null;
               id llm 2>/dev/null; getent group llm; dpkg -l llm-pipeline 2>/dev/null | grep "^[a-z][a-z] "
               systemctl list-units --all --plain --no-legend "llm-*" | grep -v "not-found"')
[ -z "$left" ] || fail "after purge, left: $left"
say "purged: no file, unit, segment, user or group of the package left"
$PODMAN rm -f -t 2 "$SYS" >/dev/null; SYS=""

# 5. deploy/Containerfile's image, on the same base, from the .deb
$PODMAN build -q --runtime runc --build-arg BASE="$BASE" -t localhost/llm-deploy-app:test \
    -f "$ROOT/deploy/Containerfile" "$WORK" >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; fail "podman build of deploy/Containerfile"; }
say "image built from deploy/Containerfile"
IMG_CT=$($PODMAN run -d --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 --shm-size=256m \
         -v "$SHARED/models:/models:ro" -e MODEL="/models/$MODEL_NAME" -e WORKERS=2 -e HTTP=8080 \
         -p "127.0.0.1:$PORT2:8080" localhost/llm-deploy-app:test) || fail "podman run of the image"
for i in $(seq 1 60); do curl -sf "http://127.0.0.1:$PORT2/health" >/dev/null && break; sleep 0.5; done
PORT_SAVE=$PORT; PORT=$PORT2
gw_stream 64 "$WORK/img.txt" || { $PODMAN logs "$IMG_CT" | tail -n 20; fail "the image's gateway"; }
PORT=$PORT_SAVE
[ -s "$WORK/img.txt" ] && [ "$(head -c "$(wc -c <"$WORK/img.txt")" "$WORK/ref.txt")" = "$(cat "$WORK/img.txt")" ] ||
    fail "the image's gateway gave other text: $(head -c 80 "$WORK/img.txt")"
out=$($PODMAN exec "$IMG_CT" llmc -n 16 --temp 0 "$PROMPT") || fail "llmc in the image"
say "image: gateway from the host (127.0.0.1:$PORT2) and llmc inside give the reference text (\"${out:0:40}...\")"
$PODMAN stop -t 10 "$IMG_CT" >/dev/null || fail "the image did not stop on SIGTERM"
say "PASS in $(( $(date +%s) - T0 )) s"
