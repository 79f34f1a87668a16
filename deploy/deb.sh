#!/usr/bin/env bash
# deb.sh - the Debian package llm-pipeline, built from this tree with dpkg-deb (no
# network, no debian/ directory to keep in step): `make deb`.
#
# The programs are compiled again in $BUILD-deb with Debian's hardening flags
# (dpkg-buildflags: fortify, stack protector, relro + bindnow), installed with
# `make install DESTDIR=...` under /usr (units in /lib/systemd/system, llm.env in
# /etc/llm as a conffile), stripped, and packed with maintainer scripts that create
# the system user llm and install the units without enabling them. The dependencies
# are the runtime libraries the binaries link, found by dpkg-shlibdeps (libc6,
# libzmq5, libmsgpackc2, libmicrohttpd12, libjansson4), and adduser.
# Result: $BUILD/deb/llm-pipeline_<version>_<arch>.deb (its path is the last line).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
PKG=llm-pipeline
ARCH=$(dpkg --print-architecture)
# a version that grows with the commits: 0.1.0~git<commit date>.<short hash>
VERSION=${DEB_VERSION:-0.1.0~git$(git log -1 --format=%cd --date=format:%Y%m%d%H%M 2>/dev/null || date +%Y%m%d).$(git rev-parse --short=8 HEAD 2>/dev/null || echo tree)}
# the maintainer: DEB_MAINTAINER, else the author of the tree's first commit
FIRST=$(git rev-list --max-parents=0 HEAD 2>/dev/null | tail -n 1)
MAINTAINER=${DEB_MAINTAINER:-$(git log -1 --format='%an <%ae>' "$FIRST" 2>/dev/null)}
MAINTAINER=${MAINTAINER:-llm-pipeline maintainers <llm-pipeline@users.noreply.github.com>}
OUT=$BUILD/deb
ROOT=$OUT/root
UNITS="llm-samplerd.service llm-tokenizerd.service llm-engined.service llm-gateway.service"
rm -rf "$ROOT" && mkdir -p "$ROOT/DEBIAN"

export DEB_BUILD_MAINT_OPTIONS=hardening=+all
make --no-print-directory -j"$(nproc)" BUILD="$BUILD-deb" \
    OPT="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)" \
    LDFLAGS="$(dpkg-buildflags --get LDFLAGS)" \
    DESTDIR="$PWD/$ROOT" PREFIX=/usr SYSCONFDIR=/etc UNITDIR=/lib/systemd/system install >"$OUT.log" 2>&1 ||
    { tail -n 30 "$OUT.log"; echo "deb.sh: build failed (log: $OUT.log)" >&2; exit 1; }

for b in engined tokenizerd samplerd llmc; do
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$ROOT/usr/bin/$b"
done
gzip -9n "$ROOT"/usr/share/man/man*/*
DOC=$ROOT/usr/share/doc/$PKG
install -d -m 0755 "$DOC"
cat >"$DOC/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: llm-pipeline
Comment: built from the project's own tree by deploy/deb.sh. The tree has no
 license file: no license has been granted yet, all rights are the authors'.

Files: *
Copyright: $(git log -1 --format=%ad --date=format:%Y "$FIRST" 2>/dev/null)-$(git log -1 --format=%ad --date=format:%Y 2>/dev/null || date -u +%Y) the llm-pipeline authors
License: none
 No license has been granted yet.
COPY
{
    echo "$PKG ($VERSION) unstable; urgency=medium"
    echo
    echo "  * Built from the source tree, commit $(git rev-parse HEAD 2>/dev/null || echo unknown)."
    echo
    echo " -- $MAINTAINER  $(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")"
} | gzip -9n >"$DOC/changelog.gz" # a native package: changelog, not changelog.Debian
chmod 0644 "$DOC"/*
find "$ROOT" -type d -exec chmod 0755 {} +

# dependencies: the shared libraries the binaries link (dpkg-shlibdeps wants a
# debian/control beside it: a stub in a scratch directory)
S=$OUT/shlibs && rm -rf "$S" && mkdir -p "$S/debian"
printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$PKG" "$PKG" >"$S/debian/control"
deps=$(cd "$S" && dpkg-shlibdeps -O $(for b in engined tokenizerd samplerd llmc; do echo "-e$PWD/../root/usr/bin/$b"; done) 2>/dev/null |
       sed -n 's/^shlibs:Depends=//p')
[ -n "$deps" ] || { echo "deb.sh: dpkg-shlibdeps found no dependencies" >&2; exit 1; }

cat >"$ROOT/DEBIAN/control" <<CTL
Package: $PKG
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINTAINER
Installed-Size: $(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
Depends: $deps, adduser
Suggests: runit
Section: misc
Priority: optional
Description: CPU inference of Llama-family GGUF models as a multi-process pipeline
 Daemons that scale and restart independently: engined (the weights in a
 shared-memory segment and the engine workers), tokenizerd (the front door:
 chat templates, tokenization, queue, streaming), samplerd (llama.cpp's
 sampling chain, stateless), and llmc, the client, model tools and an
 OpenAI-compatible HTTP gateway.
 .
 The systemd units llm-samplerd, llm-tokenizerd, llm-engined and llm-gateway
 run as the system user llm and read /etc/llm/llm.env; they are installed but
 not enabled: set LLM_MODEL there, then systemctl enable --now them.
CTL
echo /etc/llm/llm.env >"$ROOT/DEBIAN/conffiles"

cat >"$ROOT/DEBIAN/postinst" <<'SH'
#!/bin/sh
# the system user the units run as; the units are not enabled (the model must be
# set in /etc/llm/llm.env first); running ones are restarted on upgrade
set -e
if [ "$1" = configure ]; then
    if ! getent passwd llm >/dev/null; then
        adduser --system --group --quiet --no-create-home --home /nonexistent \
            --gecos "LLM pipeline daemons" llm
    fi
    if [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload >/dev/null || true
        if [ -n "$2" ]; then
            deb-systemd-invoke try-restart UNITS >/dev/null || true
        fi
    fi
fi
exit 0
SH
cat >"$ROOT/DEBIAN/prerm" <<'SH'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    deb-systemd-invoke stop UNITS >/dev/null || true
fi
exit 0
SH
cat >"$ROOT/DEBIAN/postrm" <<'SH'
#!/bin/sh
# remove: the llm user's shared-memory segments (the weights, kept across restarts
# on purpose, would hold their RAM until the next boot). purge: the units' enable
# links, the configuration directory and the system user.
set -e
if [ "$1" = remove ] || [ "$1" = purge ]; then
    uid=$(getent passwd llm | cut -d: -f3) || true
    if [ -n "$uid" ]; then
        rm -f /dev/shm/llm-"$uid"-* /dev/shm/llm-logits-"$uid"-*
    fi
    if [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload >/dev/null || true
    fi
fi
if [ "$1" = purge ]; then
    for u in UNITS; do
        if command -v deb-systemd-helper >/dev/null; then deb-systemd-helper purge "$u" >/dev/null || true; fi
        find /etc/systemd/system -name "$u" -type l -delete 2>/dev/null || true
    done
    rm -rf /run/llm
    rmdir /etc/llm 2>/dev/null || true
    if getent passwd llm >/dev/null; then
        deluser --system --quiet llm >/dev/null 2>&1 || true
    fi
    if getent group llm >/dev/null; then
        delgroup --system --quiet llm >/dev/null 2>&1 || true
    fi
fi
exit 0
SH
sed -i "s/UNITS/$UNITS/" "$ROOT/DEBIAN/postinst" "$ROOT/DEBIAN/prerm" "$ROOT/DEBIAN/postrm"
chmod 0755 "$ROOT/DEBIAN/postinst" "$ROOT/DEBIAN/prerm" "$ROOT/DEBIAN/postrm"
chmod 0644 "$ROOT/DEBIAN/control" "$ROOT/DEBIAN/conffiles"
(cd "$ROOT" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | sort -z | xargs -0 md5sum) >"$ROOT/DEBIAN/md5sums"
chmod 0644 "$ROOT/DEBIAN/md5sums"

DEB=$OUT/${PKG}_${VERSION}_${ARCH}.deb
rm -f "$OUT"/*.deb
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
echo "$DEB"
