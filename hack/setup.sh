#!/usr/bin/env bash
# One-time (idempotent) set-up on a fresh machine: a virtualenv with the package and its
# test dependencies, and the real test binaries compiled from Go modules (cached outside
# the work tree, keyed by version; rebuilt only when missing).
#
#   ./hack/setup.sh                everything the test suite runs on: --stage early, then late
#   ./hack/setup.sh --demo         only what ./hack/demo.sh runs: the venv with the package (and
#                                  cryptography, for the control plane's PKI), kube-apiserver,
#                                  etcd, the Flux CRDs and helm-controller
#   ./hack/setup.sh --stage early  the venv and what lint and the unit, cli, apiserver and e2e
#                                  tiers run on (less the e2e tier's older helm-controller)
#   ./hack/setup.sh --stage late   the rest, in the order hack/test.sh's later tiers need it:
#                                  the e2e tier's older helm-controller ("e2e"), the kind
#                                  tier's ("kind"), the release tier's ("release",
#                                  and "floor": the krew archive's floor root, built beside the
#                                  rest), the compatibility stage's ("compat"); with SETUP_MARKS=DIR
#                                  each part writes DIR/PART.done when it is ready.
#                                  hack/test.sh runs it in the background, at nice 19, while
#                                  the first tiers run (a cold machine builds for ~30 min)
#
# Binaries are built two at a time (testplane.binaries --jobs 2): one Go build leaves a core
# idle while it downloads modules or links; a second one fills it.
set -euo pipefail
cd "$(dirname "$0")/.."

demo=0
stage=all
case "${1:-}" in
  --demo) demo=1 ;;
  --stage)
    case "${2:-}" in
      early|late) stage=$2 ;;
      *) echo "usage: $0 [--demo | --stage early|late]" >&2; exit 2 ;;
    esac ;;
  "") ;;
  *) echo "usage: $0 [--demo | --stage early|late]" >&2; exit 2 ;;
esac
bins() { .venv/bin/python -m testplane.binaries --jobs 2 "$@"; }
mark() { if [ -n "${SETUP_MARKS:-}" ]; then mkdir -p "$SETUP_MARKS" && touch "$SETUP_MARKS/$1.done"; fi; }

late() {
  # --- the e2e tier's ("e2e") -------------------------------------------------------------
  # the verdict table (issue 56) runs its upgrade path from helm-controller v1.4.3 on every
  # version: built first, so it is ready (a cold build, ~3 min) long before the unit, cli and
  # apiserver tiers are done and the e2e tier waits for it; with its CRDs, it is also all
  # that the compatibility stage's first run (the e2e tier on v1.4.3) adds, and hack/test.sh
  # starts that run as soon as the e2e tier has ended
  FLUX_PLUNGER_HELM_CONTROLLER_VERSION=v1.4.3 bins helm-controller crds >/dev/null
  mark e2e
  # --- the krew archive's floor root ("floor", issue 37) --------------------------------------
  # A Debian 11 root with CPython 3.11 built inside it, and the krew build virtualenv in it:
  # the committed manifest's sha256 is the archive frozen there (krew/build.py --check, which
  # hack/test.sh runs before the release tier).  ~16 min once per machine (half of it
  # debootstrap and apt waiting on the network, half the CPython build), then cached by its
  # inputs under ~/.cache/kubectl-flux-plunger/binary/floor.  It runs beside the parts below
  # from the start, so its network waits overlap their Go builds; only the release tier
  # waits for it.  Only where it can be built: linux/amd64, as root (not, e.g., on a release
  # runner, where tests/release/test_floor.py skips saying so).
  local floor_pid= floor_log
  floor_log=${SETUP_MARKS:-$(mktemp -d)}/floor.log
  if [ "$(uname -sm)" = "Linux x86_64" ] && [ "$(id -u)" = 0 ]; then
    # debootstrap from Debian's packages where the machine lacks it (a fresh machine may)
    if ! command -v debootstrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >"${floor_log%.log}-apt.log" 2>&1 \
        || echo "warning: could not install debootstrap (log: ${floor_log%.log}-apt.log)" >&2
    fi
    { .venv/bin/python krew/build.py --fetch-floor && mark floor; } >"$floor_log" 2>&1 &
    floor_pid=$!
  else
    mark floor
  fi
  # --- the kind tier's ("kind") -----------------------------------------------------------
  # The kind tier installs the release of the work tree (hack/release.py: its image, chart
  # and SBOMs), so it needs what the release needs: cosign (the chart is installed only
  # through a verified signature), syft (the SBOMs, issue 31), crane and the registry (the
  # image and chart are pulled from it), and the image's locked wheels and the dependencies'
  # wheels (hack/release.py --fetch; a cold machine has none: the release is built --offline).
  # FLUX_PLUNGER_KIND_BUILD=1 (hack/test.sh sets it with KIND_ENGINE=start) also builds what
  # the kind tier runs on a machine that cannot pull images: kind, crictl, the Kubernetes node
  # binaries and source-controller from Go modules, then the node image, Flux's controller
  # images and the Python base (testplane/images.py; Debian rootfs via debootstrap).  All
  # cached by version; a warm cache builds nothing.  Needs a running Docker engine (DOCKER_HOST).
  bins cosign crane registry syft >/dev/null
  .venv/bin/python hack/release.py --fetch
  .venv/bin/python hack/release.py --fetch --platforms linux/amd64 --base-python 3.11  # the Debian base
  if [ "${FLUX_PLUNGER_KIND_BUILD:-}" = 1 ]; then
    bins kind crictl kubeadm kubelet kubectl kube-controller-manager kube-scheduler \
      kube-proxy source-controller >/dev/null
    .venv/bin/python -m testplane.images all
  fi
  mark kind
  # --- the release tier's ("release"; it also waits for "floor") ---------------------------
  # what only the release tier adds: actionlint (the workflows)
  bins actionlint >/dev/null
  mark release
  # --- the compatibility stage's ("compat") ------------------------------------------------
  # the older versions hack/test.sh's compatibility stage runs on (issue 19)
  # (helm-controller v1.4.3 and its CRDs are the e2e tier's part, above)
  FLUX_PLUNGER_KUBE_VERSION=v1.33.13 bins kube-apiserver >/dev/null
  mark compat
  if [ -n "$floor_pid" ] && ! wait "$floor_pid"; then
    tail -n 25 "$floor_log" >&2
    echo "error: building the floor root failed (krew/build.py --fetch-floor; log above, whole in $floor_log)" >&2
    exit 1
  fi
}
if [ "$stage" = late ]; then
  late
  exit 0
fi

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
  exec .venv/bin/python -m testplane.binaries --jobs 2 kube-apiserver etcd crds helm-controller
fi

# the krew archive's build virtualenv (PyInstaller + the locked dependencies), made once and
# cached under ~/.cache/kubectl-flux-plunger/binary (for build.py --check --offline)
.venv/bin/python krew/build.py --fetch
# what lint and the first tiers run on (each built once, then cached): kube-apiserver, etcd,
# the CRDs, helm-controller, notification-controller (the e2e tier's Flux notifications),
# krew, helm, promtool (the alert-rule tests and hack/lint.sh's `promtool check rules`) and
# the real flux CLI (the cli tier's plugin host).  TESTBIN_TARGETS names another set.
bins ${TESTBIN_TARGETS:-kube-apiserver etcd crds helm-controller krew validate-krew-manifest helm notification-controller notification-crds promtool flux}
if [ "$stage" = all ]; then
  late
fi
