#!/usr/bin/env bash
# The quality gates, fast and before any test tier: ruff (lint + format check), mypy (strict,
# per pyproject.toml), import-linter (the layering contracts), `promtool check rules` of the
# chart's alert rules and dashboard queries (testplane/promrules.py; helm and promtool as
# ./hack/setup.sh built them).  Config: pyproject.toml [tool.*].
#   ./hack/lint.sh          check only (what CI runs)
#   ./hack/lint.sh --fix    rewrite: ruff format, ruff check --fix, the prerendered help; then
#                           check everything
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
if [ ! -x "$PY" ]; then
  echo "error: no .venv here; run ./hack/setup.sh (or ./hack/test.sh) first" >&2
  exit 1
fi

case "${1:-}" in
  "") ;;
  --fix)
    "$PY" -m ruff format --quiet . && "$PY" -m ruff check --fix --quiet . || true
    # the prerendered help carries a fingerprint of the CLI sources just rewritten
    "$PY" -m kubectl_flux_plunger.cli.prerender >/dev/null
    ;;
  *) echo "error: unknown argument ${1}; use --fix or nothing" >&2; exit 2 ;;
esac

failed=()
step() {
  local name=$1; shift
  local started=$SECONDS
  if "$@"; then
    echo "lint: ${name} ok ($((SECONDS - started))s)"
  else
    echo "lint: ${name} FAILED" >&2
    failed+=("$name")
  fi
}
step "ruff check" "$PY" -m ruff check --quiet .
step "ruff format" "$PY" -m ruff format --check --quiet .
step "mypy" "$PY" -m mypy --no-error-summary
quiet() {  # the tool's output only when it fails
  local out
  if out=$("$@" 2>&1); then return 0; fi
  printf '%s\n' "$out" >&2
  return 1
}
step "import-linter" quiet .venv/bin/lint-imports --no-cache
step "promtool check rules" quiet "$PY" -m testplane.promrules
if [ "${#failed[@]}" -gt 0 ]; then
  echo "error: lint failed: ${failed[*]}" >&2
  exit 1
fi
