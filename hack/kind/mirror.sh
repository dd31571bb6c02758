# Sourced: debian_mirror prints the Debian mirror this machine's apt sources name (the first
# one that is not -security), or DEBIAN_MIRROR when set; fails saying so when there is none.
# Used by hack/kind/rootfs.sh and krew/floor-root.sh: no mirror is written into the project.
debian_mirror() {
  local mirror=${DEBIAN_MIRROR:-}
  if [ -z "$mirror" ]; then
    mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
             | awk '/^URIs:/ {print $2}' | grep -v -- '-security' | head -n1 || true)
  fi
  if [ -z "$mirror" ]; then
    mirror=$(grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -n1 || true)
  fi
  if [ -z "$mirror" ]; then
    echo "error: no Debian mirror found in the apt sources; set DEBIAN_MIRROR" >&2
    return 1
  fi
  printf '%s\n' "$mirror"
}
