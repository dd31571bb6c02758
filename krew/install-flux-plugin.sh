#!/bin/sh
# install-flux-plugin.sh: make `flux plunger ...` run flux-plunger (Flux CLI >= 2.9).
#
# flux looks for executables named flux-<name> in $FLUXCD_PLUGINS, else in
# ~/.fluxcd/plugins/ (it does not search PATH).  This links the installed flux-plunger
# there: the one pip/pipx installed (`flux-plunger` on PATH), else the krew binary
# (`kubectl-flux_plunger` on PATH; invoked through a link named flux-plunger it behaves as
# `flux plunger`).  An explicit path may be given as the only argument.
#
#   sh install-flux-plugin.sh [PATH-TO-EXECUTABLE]
set -eu

src=${1:-}
if [ -z "$src" ]; then
    src=$(command -v flux-plunger 2>/dev/null || command -v kubectl-flux_plunger 2>/dev/null || true)
fi
if [ -z "$src" ]; then
    echo "error: neither flux-plunger nor kubectl-flux_plunger is on PATH; install kubectl-flux-plunger first (pipx install . in a checkout, or kubectl krew install flux-plunger; see docs/INSTALL.md)" >&2
    exit 1
fi
case $src in
    /*) ;;
    *) src=$(cd "$(dirname "$src")" && pwd -P)/$(basename "$src") ;;
esac
if [ ! -x "$src" ] || [ -d "$src" ]; then
    echo "error: $src is not an executable file" >&2
    exit 1
fi

dir=${FLUXCD_PLUGINS:-${HOME:?HOME is not set}/.fluxcd/plugins}
if [ "$src" = "$dir/flux-plunger" ]; then
    echo "error: $src is the plugin link itself; pass the installed executable's path" >&2
    exit 1
fi
mkdir -p "$dir"
ln -sfn "$src" "$dir/flux-plunger"
echo "linked $dir/flux-plunger -> $src"
echo "try: flux plunger status -A"
