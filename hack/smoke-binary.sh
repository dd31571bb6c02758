#!/usr/bin/env bash
# Smoke-test one platform's krew archive on the machine it was built for (release.yml runs it
# on every runner; tests/release/test_binary.py runs it here on linux/amd64):
#
#   hack/smoke-binary.sh ARCHIVE VERSION      e.g. dist/kubectl-flux_plunger-v0.1.0-linux-amd64.tar.gz 0.1.0
#
# Unpacks the archive into a temporary directory and runs the binary with an empty PATH and
# HOME (nothing but itself): `--help`, `version --client` (must say VERSION and what the binary
# needs of the system, `Runs On: ...`), a usage error
# (exit 2, `error:` first), `status -A` against an unreachable server (exactly one line,
# `error: ...`, exit 1).  Prints one `ok:` line per check; the first failure exits 1.
set -euo pipefail
archive=$1
want=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$archive" -C "$tmp"
exe="$tmp/kubectl-flux_plunger"
[ -f "$exe.exe" ] && exe="$exe.exe"
home="$tmp/home"
mkdir "$home"

fail() { echo "error: $*" >&2; exit 1; }
run() {  # run ARGS...: sets rc, out, err
  set +e
  env -i PATH= HOME="$home" USERPROFILE="$home" SYSTEMROOT="${SYSTEMROOT:-}" \
    "$exe" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  set -e
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
}
clean() {
  case $err in *Traceback*|*PYI-*|*"Failed to execute script"*) fail "$1: $err" ;; esac
}

run --help
[ "$rc" = 0 ] && [[ $out == "Usage: kubectl flux-plunger "* ]] || fail "--help: exit $rc: $out $err"
echo "ok: --help"
run version --client
first=$(printf '%s\n' "$out" | head -n1 | tr -d '\r')
runs_on=$(printf '%s\n' "$out" | sed -n 's/^Runs On: //p' | tr -d '\r')
[ "$rc" = 0 ] && [ "$first" = "Client Version: $want" ] && [ -n "$runs_on" ] ||
  fail "version --client: exit $rc (want 0, Client Version: $want, a Runs On: line): $out $err"
echo "ok: version --client says $want, runs on: $runs_on"
run status --no-such-flag
[ "$rc" = 2 ] && [[ $err == "error: "* ]] || fail "a usage error: exit $rc (want 2): $err"
clean "a usage error"
echo "ok: a usage error exits 2"
run status -A --server https://127.0.0.1:1 --request-timeout 10s
lines=$(printf '%s\n' "$err" | wc -l | tr -d ' ')
[ "$rc" = 1 ] && [ "$lines" = 1 ] && [[ $err == "error: "* ]] ||
  fail "status against an unreachable server: exit $rc (want 1), $lines lines (want 1): $err"
clean "status against an unreachable server"
echo "ok: status against an unreachable server: one error line, exit 1"
