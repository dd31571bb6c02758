#!/usr/bin/env bash
# Runs the whole test suite (unit, apiserver, e2e; kind where a Docker engine answers).
set -euo pipefail
cd "$(dirname "$0")/.."
# --- kind tier (issue 11): only when asked ------------------------------------------------
# KIND_ENGINE=start: start (or find) this project's own Docker engine (hack/kind/engine.sh:
# Debian's docker.io, its own socket and data root under ~/.cache) and build the tier's images
# here (FLUX_PLUNGER_KIND_BUILD=1).  Unset: nothing is started; the kind tier uses whatever
# Docker + kind the environment has, or skips saying why.
if [ "${KIND_ENGINE:-}" = start ]; then
  eval "$(hack/kind/engine.sh start)"
  export FLUX_PLUNGER_KIND_BUILD=${FLUX_PLUNGER_KIND_BUILD:-1}
fi
# --- end kind tier --------------------------------------------------------------------------
./hack/setup.sh
./hack/lint.sh
# the committed krew manifest must carry the sha256 of the archive this tree builds
.venv/bin/python krew/build.py --check --offline
# the CLI on the lowest click pyproject.toml allows (the venv has the newest pip resolves)
click_lowest=$(sed -n 's/^ *"click>=\([0-9.]*\),.*/\1/p' pyproject.toml)
PYTHONPATH=".venv/click-$click_lowest" .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/unit/test_cli.py tests/unit/test_completion.py
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests; that is a broken suite, not a pass" >&2
  exit 1
fi
exit "$rc"
