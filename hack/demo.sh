#!/usr/bin/env bash
# The demo: a local control plane and the real helm-controller, one healthy and one stuck
# HelmRelease, `status -A`, `recover -A`, and helm-controller bringing the stuck one back.
set -euo pipefail
cd "$(dirname "$0")/.."
TESTBIN_TARGETS="kube-apiserver etcd crds helm-controller" ./hack/setup.sh
exec .venv/bin/python -m testplane.demo "$@"
