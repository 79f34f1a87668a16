#!/bin/bash
# End-to-end: `make install DESTDIR=...` puts exactly the expected files there, with
# the expected modes; the units name the install's BINDIR and SYSCONFDIR, llm-pipeline
# finds its binaries in BINDIR without LLM_BIN; a second install keeps a changed
# llm.env; `make uninstall` removes everything but a changed llm.env. No root needed.
set -u
: "${LLM_BIN:?LLM_BIN not set}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${LLM_BUILD:-$ROOT/build}
T=$(mktemp -d /tmp/llm-e2e-install-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0
say() { echo "05_install: $*"; }
bad() { say "FAIL: $*"; fail=1; }
mk() { make --no-print-directory -C "$ROOT" BUILD="$BUILD" DESTDIR="$T/root" "$@" >"$T/make.log" 2>&1 ||
       { cat "$T/make.log"; bad "make $* failed"; }; }

mk install PREFIX=/opt/llm
want="0755 /etc/llm
0600 /etc/llm/llm.env
0755 /opt/llm/bin
0755 /opt/llm/bin/engined
0755 /opt/llm/bin/llm-pipeline
0755 /opt/llm/bin/llmc
0755 /opt/llm/bin/samplerd
0755 /opt/llm/bin/tokenizerd
0755 /opt/llm/lib/systemd/system
0644 /opt/llm/lib/systemd/system/llm-engined.service
0644 /opt/llm/lib/systemd/system/llm-gateway.service
0644 /opt/llm/lib/systemd/system/llm-samplerd.service
0644 /opt/llm/lib/systemd/system/llm-tokenizerd.service
0755 /opt/llm/share/man/man1
0644 /opt/llm/share/man/man1/llmc.1
0755 /opt/llm/share/man/man8
0644 /opt/llm/share/man/man8/engined.8
0644 /opt/llm/share/man/man8/llm-pipeline.8
0644 /opt/llm/share/man/man8/samplerd.8
0644 /opt/llm/share/man/man8/tokenizerd.8"
# every file and the directories below the top ones install creates
got=$(cd "$T/root" && find . \( -type f -o -type l -o -type d \) ! -name . -printf '%m %P\n' |
      awk '{ printf "%04d /%s\n", $1, $2 }' | grep -Ev '^[0-9]+ /(etc|opt|opt/llm|opt/llm/lib|opt/llm/lib/systemd|opt/llm/share|opt/llm/share/man)$' | sort -k2)
[ "$got" = "$want" ] || { bad "installed files differ from the list:"; diff <(echo "$want") <(echo "$got"); }

# the units run the installed binaries and read the installed llm.env
U="$T/root/opt/llm/lib/systemd/system"
for u in "$U"/*.service; do
    grep -q '^ExecStart=.*/opt/llm/bin/' "$u" || bad "$(basename "$u"): ExecStart does not name /opt/llm/bin"
    grep -q '/usr/local/bin' "$u" && bad "$(basename "$u"): still names /usr/local/bin"
    grep -q '^EnvironmentFile=/etc/llm/llm.env$' "$u" || bad "$(basename "$u"): EnvironmentFile is not /etc/llm/llm.env"
done
grep -q '^BIN=${LLM_BIN:-/opt/llm/bin}$' "$T/root/opt/llm/bin/llm-pipeline" || bad "llm-pipeline does not default to /opt/llm/bin"
out=$(bash "$T/root/opt/llm/bin/llm-pipeline" start --help 2>&1) || bad "llm-pipeline start --help exited $?"
case $out in *"start --model FILE"*) ;; *) bad "llm-pipeline --help: no usage: $out" ;; esac
# the man pages are valid troff with a NAME section
for m in "$T"/root/opt/llm/share/man/man*/*; do
    head -c 4096 "$m" | grep -q '^\.SH NAME' || bad "$(basename "$m"): no NAME section"
done
cmp -s "$T/root/opt/llm/bin/llmc" "$LLM_BIN/llmc" || bad "installed llmc is not the build's"

# a changed configuration survives a second install and uninstall
echo "LLM_WORKERS_N=3" >>"$T/root/etc/llm/llm.env"
mk install PREFIX=/opt/llm
grep -q '^LLM_WORKERS_N=3$' "$T/root/etc/llm/llm.env" || bad "a second install overwrote a changed llm.env"
mk uninstall PREFIX=/opt/llm
left=$(cd "$T/root" && find . -type f -printf '/%P\n')
[ "$left" = "/etc/llm/llm.env" ] || bad "after uninstall (changed llm.env kept) left: $left"

# an unchanged one goes too, and other variables are honoured
rm -rf "$T/root"
mk install PREFIX=/usr BINDIR=/usr/libexec/llm MANDIR=/usr/share/man SYSCONFDIR=/etc/x UNITDIR=/lib/systemd/system
[ -x "$T/root/usr/libexec/llm/engined" ] || bad "BINDIR not honoured"
[ -f "$T/root/usr/share/man/man1/llmc.1" ] || bad "MANDIR not honoured"
grep -q '^EnvironmentFile=/etc/x/llm/llm.env$' "$T/root/lib/systemd/system/llm-engined.service" || bad "SYSCONFDIR not written into the units"
grep -q '^ExecStart=/usr/libexec/llm/engined$' "$T/root/lib/systemd/system/llm-engined.service" || bad "BINDIR not written into the units"
mk uninstall PREFIX=/usr BINDIR=/usr/libexec/llm MANDIR=/usr/share/man SYSCONFDIR=/etc/x UNITDIR=/lib/systemd/system
left=$(cd "$T/root" && find . -type f -printf '/%P\n')
[ -z "$left" ] || bad "after uninstall left: $left"

[ $fail = 0 ] && say "ok (install, modes, paths, reinstall, uninstall)"
exit $fail
