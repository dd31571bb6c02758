#!/usr/bin/env bash
# Build a Debian root file system tarball with debootstrap (for `docker import`).
#
#   hack/kind/rootfs.sh OUT.tar SUITE PACKAGE[,PACKAGE...]
#
# The mirror is the first Debian mirror of this machine's apt sources (override with
# DEBIAN_MIRROR).  Writes OUT.tar atomically; apt lists and caches are left out.
set -euo pipefail
out=${1:?usage: rootfs.sh OUT.tar SUITE PACKAGES}
suite=${2:?usage: rootfs.sh OUT.tar SUITE PACKAGES}
pkgs=${3:?usage: rootfs.sh OUT.tar SUITE PACKAGES}

. "$(dirname "$0")/mirror.sh"
mirror=$(debian_mirror)
if ! command -v debootstrap >/dev/null 2>&1; then
  echo "error: debootstrap is not installed (apt-get install debootstrap)" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kfp-rootfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
debootstrap --variant=minbase --include="$pkgs" "$suite" "$work/root" "$mirror" >"$work/log" 2>&1 || {
  tail -n 25 "$work/log" >&2
  echo "error: debootstrap $suite failed (log above)" >&2
  exit 1
}
rm -rf "$work/root"/var/lib/apt/lists/* "$work/root"/var/cache/apt/archives/*.deb \
       "$work/root"/var/cache/apt/*.bin "$work/root"/usr/share/doc/* "$work/root"/usr/share/man/*
mkdir -p "$(dirname "$out")"
tar -C "$work/root" --numeric-owner -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "rootfs $out"
