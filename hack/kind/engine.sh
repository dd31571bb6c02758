#!/usr/bin/env bash
# Start (or find) a Docker engine for the kind tier on a machine that has none running.
#
# Only ever run when asked: `.ci/run` runs it when KIND_ENGINE=start (or `.ci/run --kind`),
# people run it by hand.  It never touches an engine it did not start.
#
#   hack/kind/engine.sh start   install Debian's docker.io + debootstrap when missing (root,
#                               apt), start dockerd on its own socket, data root and exec
#                               root, wait until it answers; print `export DOCKER_HOST=...`
#   hack/kind/engine.sh env     print `export DOCKER_HOST=...` if that engine answers
#   hack/kind/engine.sh stop    stop the dockerd this script started (its pid file) and wait
#                               for it and its containerd to be gone
#
# On a host whose capability bounding set lacks capabilities (e.g. CAP_SYS_RESOURCE in some
# microVMs), privileged containers — kind's nodes — fail in runc.  Only there the engine's
# default runtime is hack/kind/runc-capfilter.py (copied next to the data root), which drops
# the missing capabilities from the container's spec and execs the real runc.
#
# Environment: KIND_ENGINE_ROOT (default ~/.cache/kubectl-flux-plunger/docker: data root,
# daemon.json, log, runtime wrapper), KIND_ENGINE_RUN (default /run/kubectl-flux-plunger:
# socket, exec root, pid file).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=${KIND_ENGINE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/kubectl-flux-plunger/docker}
run=${KIND_ENGINE_RUN:-/run/kubectl-flux-plunger}
sock="$run/docker.sock"
pidfile="$run/dockerd.pid"
export DOCKER_HOST="unix://$sock"

answers() { timeout 20 docker info >/dev/null 2>&1; }

case "${1:-}" in
  env)
    if answers; then echo "export DOCKER_HOST=$DOCKER_HOST"; exit 0; fi
    echo "error: no Docker engine answers on $sock (run: hack/kind/engine.sh start)" >&2
    exit 1 ;;
  stop)
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      pid=$(cat "$pidfile")
      # the containerd dockerd runs is its child: it goes with dockerd, waited for too
      kids=$(pgrep -P "$pid" 2>/dev/null | tr '\n' ' ' || true)
      kill "$pid"
      for _ in $(seq 1 60); do
        left=""
        for p in $pid $kids; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
        if [ -z "$left" ]; then echo "stopped dockerd $pid${kids:+ and its children $kids}"; exit 0; fi
        sleep 1
      done
      echo "error: dockerd $pid (or its children:$left) did not stop within 60s" >&2
      exit 1
    fi
    echo "no dockerd started by this script is running"
    exit 0 ;;
  start) ;;
  *) echo "usage: $0 start|env|stop" >&2; exit 2 ;;
esac

if answers; then
  echo "export DOCKER_HOST=$DOCKER_HOST"
  exit 0
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "error: ${need[*]} missing and this is not a root Debian/Ubuntu machine; install Docker yourself" >&2
    exit 1
  fi
  echo "installing ${need[*]} (apt) ..." >&2
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$root/data" "$run"
real_runc=$(command -v runc || true)
runtime_json=""
capbnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
last_cap=$(cat /proc/sys/kernel/cap_last_cap 2>/dev/null || echo 40)
full=$(printf '%x' $(( (1 << (last_cap + 1)) - 1 )))
if [ -n "$real_runc" ] && [ "$(printf '%x' $((16#$capbnd)))" != "$full" ]; then
  sed "s|@REAL_RUNC@|$real_runc|" "$here/runc-capfilter.py" > "$root/runc-capfilter.tmp"
  chmod 755 "$root/runc-capfilter.tmp"
  mv "$root/runc-capfilter.tmp" "$root/runc-capfilter"
  runtime_json=", \"runtimes\": {\"capfilter\": {\"path\": \"$root/runc-capfilter\"}}, \"default-runtime\": \"capfilter\""
  echo "capability bounding set $capbnd lacks capabilities: default runtime is $root/runc-capfilter" >&2
fi
cat > "$root/daemon.json" <<JSON
{"data-root": "$root/data", "exec-root": "$run/exec", "pidfile": "$pidfile",
 "hosts": ["unix://$sock"], "storage-driver": "overlay2", "log-driver": "json-file",
 "log-opts": {"max-size": "10m"}$runtime_json}
JSON

echo "starting dockerd (log $root/dockerd.log) ..." >&2
nohup setsid dockerd --config-file "$root/daemon.json" >>"$root/dockerd.log" 2>&1 </dev/null &
deadline=$(( $(date +%s) + 60 ))
until answers; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "error: dockerd did not answer on $sock within 60s; last log lines:" >&2
    tail -n 15 "$root/dockerd.log" >&2
    exit 1
  fi
  sleep 1
done
echo "export DOCKER_HOST=$DOCKER_HOST"
