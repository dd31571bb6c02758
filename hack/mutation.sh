#!/usr/bin/env bash
# Mutation testing of the modules that decide what is written (issue 40): hack/mutation.py
# with mutmut (hack/requirements-mutation.txt), niced, on the project's venv.  Not part of
# .ci/run (.github/workflows/mutation.yml runs it weekly).  From a fresh clone it creates .venv
# with the package and the test requirements when there is none, then adds mutmut.
#
#   ./hack/mutation.sh                  every target: the pure core against the unit tier,
#                                       the executor, survey, drain and sweep against theirs
#                                       (with one real control plane; ./hack/setup.sh caches
#                                       its binaries)
#   ./hack/mutation.sh --tier core      the pure core only
#   ./hack/mutation.sh --module plan    one module (see --list)
#   MUTATION_JOBS=1 ./hack/mutation.sh  one worker (default 2); MUTATION_NICE (default 19)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv (the package and hack/requirements-test.txt)"
  "$PY" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[serve]' -r hack/requirements-test.txt
fi
want=$(sed -n 's/^mutmut==\([^ ]*\).*/\1/p' hack/requirements-mutation.txt)
have=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("mutmut"))' 2>/dev/null || true)
if [ "$have" != "$want" ]; then
  echo "== installing hack/requirements-mutation.txt (mutmut $want) into .venv"
  .venv/bin/python -m pip install --quiet -r hack/requirements-mutation.txt
fi
exec nice -n "${MUTATION_NICE:-19}" .venv/bin/python hack/mutation.py "$@"
