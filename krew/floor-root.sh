#!/usr/bin/env bash
# The build root of the glibc-floor krew archive (issue 37): a Debian 11 (bullseye, glibc 2.31)
# root made with debootstrap, with CPython 3.11 built --enable-shared inside it from Debian's
# own python3.11 source package and every library it links (OpenSSL, libffi, zlib, ...) from
# bullseye.  krew/binary.py freezes the plugin inside it (chroot), so no file of the archive
# needs a glibc symbol newer than bullseye's.
#
#   krew/floor-root.sh DEST        (as root) builds DEST atomically; krew/build.py --fetch-floor
#                                  runs it with DEST = the cache entry keyed by this file
#
# Everything comes from Debian's package registry, the mirror read from this machine's apt
# sources at run time (hack/kind/mirror.sh; DEBIAN_MIRROR overrides).  bullseye has only
# python3.9, so the python3.11 source package is bookworm's (a deb-src line inside the root,
# apt-get source: the .dsc, the orig tarball and Debian's patches, checked against the signed
# Release file).  The interpreter is built as the host's usually is (pyenv, python.org):
# --enable-shared, -O3, no PGO/LTO (docs/BENCHMARKS.md compares the two), with `make -j2`,
# against bullseye's OpenSSL 1.1.1, libffi, zlib, liblzma, libbz2, libuuid, sqlite and mpdec.
# expat is CPython's own copy (Modules/expat, in the same source package): 3.11.2's setup.py
# does not build pyexpat against a system expat outside Debian's own Setup.local.
set -euo pipefail
dest=${1:?usage: floor-root.sh DEST}
here=$(cd "$(dirname "$0")" && pwd)
SUITE=bullseye
SOURCE_SUITE=bookworm
PREFIX=/opt/python3.11
# the interpreter's build dependencies (Debian's names), all from bullseye
BUILD_DEPS="build-essential binutils dpkg-dev ca-certificates xz-utils libssl-dev libffi-dev
zlib1g-dev libbz2-dev liblzma-dev libsqlite3-dev uuid-dev libmpdec-dev"

if [ "$(id -u)" != 0 ]; then
  echo "error: the floor root is built with debootstrap and chroot: run it as root" >&2
  exit 1
fi
command -v debootstrap >/dev/null 2>&1 || {
  echo "error: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
# shellcheck source=../hack/kind/mirror.sh
. "$here/../hack/kind/mirror.sh"
mirror=$(debian_mirror)

work="$dest.tmp"
rm -rf "$work"
mkdir -p "$work"
log="$dest.log"
: >"$log"
step() { echo "floor root: $(date -u +%T) $*" >&2; }
fail() { tail -n 30 "$log" >&2; echo "error: $1 failed (log above, whole in $log)" >&2; exit 1; }
# in the root: a private mount namespace with /proc and /dev, gone with the process
inroot() {
  unshare -m --propagation private sh -c \
    'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && exec chroot "$0" "$@"' \
    "$work" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@" >>"$log" 2>&1
}

step "debootstrap --variant=minbase $SUITE"
debootstrap --variant=minbase "$SUITE" "$work" "$mirror" >>"$log" 2>&1 || fail "debootstrap $SUITE"
cp /etc/resolv.conf "$work/etc/resolv.conf"
# sources: bullseye for binaries, bookworm's sources for python3.11 only
{
  echo "deb $mirror $SUITE main"
  echo "deb-src [signed-by=/usr/share/keyrings/floor-source.gpg] $mirror $SOURCE_SUITE main"
} >"$work/etc/apt/sources.list"
cp /usr/share/keyrings/debian-archive-keyring.gpg "$work/usr/share/keyrings/floor-source.gpg"

step "apt-get install the interpreter's build dependencies"
# shellcheck disable=SC2086
inroot apt-get update || fail "apt-get update in the root"
# shellcheck disable=SC2086
inroot apt-get install -y --no-install-recommends $BUILD_DEPS || fail "apt-get install"

step "apt-get source python3.11 ($SOURCE_SUITE)"
inroot sh -c 'mkdir -p /src && cd /src && apt-get source python3.11' || fail "apt-get source"
srcdir=$(cd "$work/src" && ls -d python3.11-*/ | head -n1)
srcdir=${srcdir%/}
ls "$work/src"/python3.11_*.dsc | sed 's,.*/,,' >"$work/src/SOURCE"

# Debian's CVE-2026-4224.patch has pyexpat.c include an internal header, which Debian's own
# build allows (it links pyexpat into the interpreter: setup-modules.diff); built as a shared
# module, as here, it needs the define upstream's later pyexpat.c makes itself
sed -i '1i #ifndef Py_BUILD_CORE_BUILTIN\n#  define Py_BUILD_CORE_MODULE 1\n#endif' \
  "$work/src/$srcdir/Modules/pyexpat.c"

step "build CPython $srcdir --enable-shared (make -j2)"
# SOURCE_DATE_EPOCH = the source package's changelog date, as Debian builds it: the build
# date and time compiled into libpython (sys.version) then come from the source, so a root
# built again from the same packages freezes into the same archive bytes
# (and configure's "broken nice()" probe answers "yes" when the build itself runs at nice 19,
# as hack/setup.sh's late stage does, which changes libpython's os.nice: its answer is fixed)
inroot sh -c "cd /src/$srcdir && export SOURCE_DATE_EPOCH=\$(dpkg-parsechangelog -STimestamp) && \
  ./configure --prefix=$PREFIX --enable-shared \
  --with-ensurepip=no --with-system-libmpdec ac_cv_broken_nice=no \
  LDFLAGS='-Wl,-rpath,$PREFIX/lib' && make -j2 && make install" || fail "building CPython"
inroot "$PREFIX/bin/python3.11" -c 'import ssl, ctypes, zlib, lzma, bz2, sqlite3, decimal, pyexpat, _elementtree, sys; print(sys.version, ssl.OPENSSL_VERSION)' \
  || fail "the built interpreter's self-check"
rm -rf "$work/src/$srcdir" "$work/var/cache/apt/archives"/*.deb
rm -rf "$dest"
mv "$work" "$dest"
step "ready: $dest ($(tail -n1 "$log"))"
