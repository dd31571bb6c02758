#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh machine: a virtualenv with the package and its
# test dependencies, and the real test binaries compiled from Go modules (cached outside
# the work tree, keyed by version; rebuilt only when missing).
#
#   ./hack/setup.sh          everything the test suite runs on (./hack/test.sh calls it)
#   ./hack/setup.sh --demo   only what ./hack/demo.sh runs: the venv with the package (and
#                            cryptography, for the control plane's PKI), kube-apiserver,
#                            etcd, the Flux CRDs and helm-controller
set -euo pipefail
cd "$(dirname "$0")/.."

demo=0
case "${1:-}" in
  --demo) demo=1 ;;
  "") ;;
  *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# the lowest click pyproject.toml allows: the CLI tests run on it too (hack/test.sh)
click_lowest=$(sed -n 's/^ *"click>=\([0-9.]*\),.*/\1/p' pyproject.toml)
log=$(mktemp)
if [ "$demo" = 1 ]; then
  # the package and what testplane imports besides it (its pin is the test suite's)
  crypto=$(sed -n 's/^\(cryptography[^ #]*\).*/\1/p' hack/requirements-test.txt)
  if ! .venv/bin/python -m pip install --quiet -e . "$crypto" >"$log" 2>&1; then
    cat "$log" >&2
    echo "error: installing the Python dependencies failed (log above)" >&2
    exit 1
  fi
elif ! { .venv/bin/python -m pip install --quiet --upgrade pip &&
       .venv/bin/python -m pip install --quiet -e '.[serve]' -r hack/requirements-test.txt &&
       { [ -d ".venv/click-$click_lowest" ] ||
         .venv/bin/python -m pip install --quiet --no-deps --target ".venv/click-$click_lowest" \
           "click==$click_lowest"; }; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "error: installing the Python dependencies failed (log above)" >&2
  exit 1
fi
rm -f "$log"

if ! command -v go >/dev/null 2>&1 && [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
  echo "error: Go >= 1.26 is needed to build the real kube-apiserver, etcd and helm-controller" \
       "(or set KUBEBUILDER_ASSETS to envtest binaries)" >&2
  exit 1
fi
if [ "$demo" = 1 ]; then
  # the demo: a control plane and the real helm-controller, nothing of the test matrix
  exec .venv/bin/python -m testplane.binaries kube-apiserver etcd crds helm-controller
fi

# the krew archive's build virtualenv (PyInstaller + the locked dependencies), made once and
# cached under ~/.cache/kubectl-flux-plunger/binary (for build.py --check --offline)
.venv/bin/python krew/build.py --fetch
# kube-apiserver, etcd, CRDs, helm-controller, krew, ..., promtool, cosign, syft (each built
# once, then cached; promtool: the alert-rule tests and hack/lint.sh's `promtool check rules`;
# cosign and syft: the release tier's signatures and SBOMs, issue 31)
.venv/bin/python -m testplane.binaries ${TESTBIN_TARGETS:-kube-apiserver etcd crds helm-controller krew validate-krew-manifest helm notification-controller notification-crds registry crane actionlint promtool cosign syft}
# the release tier (tests/release): the image's locked wheels and the dependencies' wheels, once
.venv/bin/python hack/release.py --fetch
.venv/bin/python hack/release.py --fetch --platforms linux/amd64 --base-python 3.11  # the Debian base

# the older versions hack/test.sh's compatibility stage runs on (issue 19), and the real flux
# CLI (the cli tier's plugin host)
FLUX_PLUNGER_KUBE_VERSION=v1.33.13 .venv/bin/python -m testplane.binaries kube-apiserver
FLUX_PLUNGER_HELM_CONTROLLER_VERSION=v1.4.3 .venv/bin/python -m testplane.binaries helm-controller crds
.venv/bin/python -m testplane.binaries flux

# --- kind tier (issue 11): only when asked ------------------------------------------------
# FLUX_PLUNGER_KIND_BUILD=1 (hack/test.sh sets it with KIND_ENGINE=start) builds what the kind
# tier runs on a machine that cannot pull images: kind, crictl, the Kubernetes node binaries
# and source-controller from Go modules, then the node image, Flux's controller images and
# the Python base (testplane/images.py; Debian rootfs via debootstrap).  All cached by version;
# a warm cache builds nothing.  Needs a running Docker engine (DOCKER_HOST).
if [ "${FLUX_PLUNGER_KIND_BUILD:-}" = 1 ]; then
  nice -n 19 .venv/bin/python -m testplane.binaries kind crictl kubeadm kubelet kubectl \
    kube-controller-manager kube-scheduler kube-proxy source-controller
  nice -n 19 .venv/bin/python -m testplane.images all
fi
# --- end kind tier --------------------------------------------------------------------------
