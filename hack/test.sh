#!/usr/bin/env bash
# Runs the whole test suite (unit, apiserver, e2e; kind only where Docker + kind exist).
set -euo pipefail
cd "$(dirname "$0")/.."
./hack/setup.sh
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
