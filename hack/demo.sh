#!/usr/bin/env bash
# The demo: a local control plane and the real helm-controller, one healthy and one stuck
# HelmRelease, `status -A`, `recover -A`, and helm-controller bringing the stuck one back.
set -euo pipefail
cd "$(dirname "$0")/.."
# only what the demo runs (not the test suite's matrix): hack/setup.sh --demo
./hack/setup.sh --demo
exec .venv/bin/python -m testplane.demo "$@"
