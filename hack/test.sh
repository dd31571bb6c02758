#!/usr/bin/env bash
# Runs the whole test suite: set-up, the fast checks (./hack/lint.sh, the CLI on the lowest
# click; seconds), then the tiers one by one — unit, cli, apiserver, e2e, kind (kind where a
# Docker engine answers), release (after the krew manifest's check, issue 37) — each with
# branch coverage of the package (CLI runs in subprocesses included) and its wall time,
# printed per tier, and the floors below enforced.  A failing fast check, unit or cli tier
# stops before the slow tiers.
#
#   ./hack/test.sh                 everything, as CI runs it (.ci/run)
#   ./hack/test.sh PYTEST-ARGS...  set-up, lint, then just `pytest PYTEST-ARGS...` (no coverage)
#   KIND_ENGINE=start ...          also start a Docker engine for the kind tier (stopped at
#                                  the end unless KIND_ENGINE_KEEP=1; see below)
set -euo pipefail
cd "$(dirname "$0")/.."
# --- kind tier (issue 11): only when asked ------------------------------------------------
# KIND_ENGINE=start: start (or find) this project's own Docker engine (hack/kind/engine.sh:
# Debian's docker.io, its own socket and data root under ~/.cache) and build the tier's images
# here (FLUX_PLUNGER_KIND_BUILD=1).  Unset: nothing is started; the kind tier uses whatever
# Docker + kind the environment has, or skips saying why.
# An engine this run started is stopped when the run ends, however it ends (dockerd and the
# containerd it runs), and the last lines say so; KIND_ENGINE_KEEP=1 leaves it running for
# the next run (`hack/kind/engine.sh stop` stops it later).  One that was already running
# when the run began is never stopped.
engine_started=0
late_pid=
compat_pids=()
engine_end() {
  local rc=$?
  if [ -n "$late_pid" ] && kill -0 "$late_pid" 2>/dev/null; then
    # the run ends before the background set-up did (a failed unit tier): stop it
    kill -TERM -- "-$late_pid" 2>/dev/null || true   # its process group: the Go builds too
    echo "== stopped the background set-up (its log: $marks/log)"
  fi
  local pid
  for pid in ${budget_pid:-} "${compat_pids[@]}"; do
    # the budget's e2e test or a compatibility run still going when the run ends (a failed
    # tier): stop it and its pytest
    if kill -0 "$pid" 2>/dev/null; then
      pkill -TERM -P "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  if [ "$engine_started" = 1 ]; then
    if [ "${KIND_ENGINE_KEEP:-}" = 1 ]; then
      echo "== the Docker engine this run started is left running (KIND_ENGINE_KEEP=1); hack/kind/engine.sh stop stops it"
    elif hack/kind/engine.sh stop; then
      echo "== stopped the Docker engine this run started (KIND_ENGINE_KEEP=1 keeps it for the next run)"
    else
      echo "error: could not stop the Docker engine this run started (hack/kind/engine.sh stop)" >&2
      [ "$rc" -ne 0 ] || rc=1
    fi
  elif [ "${KIND_ENGINE:-}" = start ]; then
    echo "== the Docker engine was running before this run: left running"
  fi
  exit "$rc"
}
trap engine_end EXIT
if [ "${KIND_ENGINE:-}" = start ]; then
  hack/kind/engine.sh env >/dev/null 2>&1 || engine_started=1
  eval "$(hack/kind/engine.sh start)"
  export FLUX_PLUNGER_KIND_BUILD=${FLUX_PLUNGER_KIND_BUILD:-1}
fi
# --- end kind tier --------------------------------------------------------------------------

# Coverage floors (percent, branch coverage).  The whole package with every tier: 94.4 %
# measured by .ci/run in a fresh clone on 2026-12-01 with all five tiers (89.4 % earlier that
# day, before the unit tests of kube, backup, the verbs' edges and the in-process CLI).  The
# floor sits a little below the measured figure (the aim was 90 %).  Raise it as coverage
# rises; never lower it to get a change in.
TOTAL_FLOOR=93
# The pure core, by the unit tier alone: every line and branch.
CORE="kubectl_flux_plunger/core/plan.py,kubectl_flux_plunger/core/ownership.py,kubectl_flux_plunger/core/storage.py,kubectl_flux_plunger/core/payload.py,kubectl_flux_plunger/core/detect.py,kubectl_flux_plunger/core/writes.py,kubectl_flux_plunger/core/selector.py,kubectl_flux_plunger/core/scope.py,kubectl_flux_plunger/core/claims.py,kubectl_flux_plunger/core/budget.py,kubectl_flux_plunger/core/messages.py"
CORE_FLOOR=100

# Set-up.  With pytest arguments: all of it first.  The whole suite: what lint and the first
# tiers need (--stage early), then the rest (--stage late: the kind, release and compatibility
# tiers' binaries and images) in the background at nice 19 while those tiers run; each later
# tier waits for its part (late_ready).  On a cold machine that overlaps ~20 min of Go builds
# with ~10 min of tests; on a warm one the late stage finds everything cached at once.
marks=
if [ "$#" -gt 0 ]; then
  ./hack/setup.sh
else
  ./hack/setup.sh --stage early
  marks=$(mktemp -d "${TMPDIR:-/tmp}/flux-plunger-setup.XXXXXX")
  set -m   # the background set-up in a process group of its own (stopped as one, above)
  (
    set +e
    late_started=$(date +%s)
    SETUP_MARKS=$marks nice -n 19 ./hack/setup.sh --stage late >"$marks/log" 2>&1
    rc=$?
    echo "the late set-up ended with exit code $rc after $(( $(date +%s) - late_started ))s" >>"$marks/log"
    echo "$rc" >"$marks/rc"
  ) &
  late_pid=$!
  set +m
fi
# late_ready PART: wait until the background set-up has made PART ready (e2e, kind, release,
# floor, compat); 1 (with the log's tail) when it ended without it
late_ready() {
  local part=$1 from=$SECONDS
  [ -z "$marks" ] && return 0
  until [ -e "$marks/$part.done" ]; do
    if [ -e "$marks/rc" ]; then
      tail -25 "$marks/log" >&2
      echo "error: the set-up of the $part tier failed (exit code $(cat "$marks/rc"); log above, whole in $marks/log)" >&2
      return 1
    fi
    sleep 2
  done
  echo "set-up: the $part tier's part ready (waited $(( SECONDS - from ))s for it)"
}
./hack/lint.sh
# the CLI on the lowest click pyproject.toml allows (the venv has the newest pip resolves)
click_lowest=$(sed -n 's/^ *"click>=\([0-9.]*\),.*/\1/p' pyproject.toml)
PYTHONPATH=".venv/click-$click_lowest" .venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/unit/test_cli.py tests/unit/test_cover_cli.py tests/cli/test_completion.py

PY=.venv/bin/python
# The work tree stays clean (issue 24): whatever the suite leaves in the checkout (a tool
# started without HOME writes its cache into the working directory) fails the run.
tree_status() { git status --porcelain --untracked-files=all 2>/dev/null | sort; }
tree_before=$(tree_status)
tree_check() {
  local left
  left=$(comm -13 <(printf '%s\n' "$tree_before") <(tree_status) | sed '/^$/d')
  if [ -n "$left" ]; then
    printf '%s\n' "$left" | head -20 >&2
    echo "error: the test suite left $(printf '%s\n' "$left" | wc -l) new entries in the work tree (git status --porcelain above)" >&2
    return 1
  fi
}
no_tests() {
  echo "error: pytest collected no tests${1:+ for the $1 tier}; that is a broken suite, not a pass" >&2
  exit 1
}

if [ "$#" -gt 0 ]; then
  set +e
  "$PY" -m pytest "$@"
  rc=$?
  set -e
  [ "$rc" -eq 5 ] && no_tests
  tree_check || exit 1
  exit "$rc"
fi

data=$PWD/.coverage-data
rm -rf "$data"
mkdir -p "$data"
report() { "$PY" -m coverage report --data-file="$1" "${@:2}"; }
failed=()
# The budget's e2e test (issue 57) is five minutes of serve and helm-controller waiting on a
# chart that keeps failing: it runs beside the apiserver tier, in a process of its own (its own
# control plane and coverage file), and the e2e tier leaves it out; its log is printed and its
# result counted with the e2e tier's.
BUDGET_E2E=tests/e2e/test_budget_e2e.py
budget_pid=
budget_start() {
  echo "== $BUDGET_E2E, beside the apiserver tier (its log follows the e2e tier)"
  (
    set +e
    # its binaries come from the background set-up: waited for here, not on the tiers' path
    if ! late_ready e2e >"$data/e2e-budget.log" 2>&1; then
      echo 1 >"$data/e2e-budget.rc"
      exit
    fi
    started=${EPOCHREALTIME/,/.}
    COVERAGE_FILE=$data/e2e-budget "$PY" -m pytest "$BUDGET_E2E" -m e2e --cov --cov-report= \
      -p no:cacheprovider -q >>"$data/e2e-budget.log" 2>&1
    echo $? >"$data/e2e-budget.rc"
    echo "$BUDGET_E2E took $(awk -v a="$started" -v b="${EPOCHREALTIME/,/.}" \
      'BEGIN { printf "%.1f", b - a }')s" >>"$data/e2e-budget.log"
  ) &
  budget_pid=$!
}
budget_end() {
  wait "$budget_pid" || true
  cat "$data/e2e-budget.log"
  local rc
  rc=$(cat "$data/e2e-budget.rc" 2>/dev/null || echo 1)
  [ "$rc" -eq 0 ] || failed+=("e2e-budget")
}
# --- compatibility stage (issue 19) -------------------------------------------------------
# The tiers that run real Kubernetes or Flux components, again on the older versions operators
# run (hack/setup.sh builds them): the e2e tier on helm-controller v1.4.3 (the Flux 2.7 line),
# the apiserver and e2e tiers on kube-apiserver v1.33.13 (no watch-lists).  No coverage is
# collected here: the floors above are for the default run.
# Two runs at most at a time, each into a log printed whole at the end.  The first (the e2e
# tier on helm-controller v1.4.3: 11 min, mostly waiting on helm-controller's hook timeouts)
# starts as soon as the default e2e tier has ended — its binaries are the e2e tier's part of
# the set-up — and runs beside the kind and release tiers; the second when those have ended
# (kube-apiserver v1.33.13 is the set-up's last part), the third as soon as either of the
# other two ends.  Every control plane has its own ports, directories and processes.
compat=(
  "e2e FLUX_PLUNGER_HELM_CONTROLLER_VERSION=v1.4.3"
  "apiserver FLUX_PLUNGER_KUBE_VERSION=v1.33.13"
  "e2e FLUX_PLUNGER_KUBE_VERSION=v1.33.13"
)
compat_logs=$(mktemp -d "${TMPDIR:-/tmp}/flux-plunger-compat.XXXXXX")
compat_started=
compat_run() {  # INDEX TIER VERSION: one run into $compat_logs/INDEX.{log,rc}
  local i=$1 tier=$2 version=$3 component started rc
  case $version in
    FLUX_PLUNGER_KUBE_VERSION=*) component=kube-apiserver ;;
    *) component=helm-controller ;;
  esac
  {
    echo "== $tier tier on $component ${version#*=}"
    started=${EPOCHREALTIME/,/.}
    set +e
    env "$version" "$PY" -m pytest "tests/$tier" -m "$tier" -p no:cacheprovider -q
    rc=$?
    echo "compatibility: $tier tier on $component ${version#*=} took $(awk -v a="$started" \
      -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f", b - a }')s"
    echo "$rc" >"$compat_logs/$i.rc"
  } >"$compat_logs/$i.log" 2>&1
}
compat_start() {  # INDEX: that run, in the background
  local tier version
  read -r tier version <<<"${compat[$1]}"
  [ -n "$compat_started" ] || compat_started=$SECONDS
  compat_run "$1" "$tier" "$version" &
  compat_pids[$1]=$!
}
compat_done() {  # INDEX: 0 once that run has ended
  [ -e "$compat_logs/$1.rc" ] || ! kill -0 "${compat_pids[$1]}" 2>/dev/null
}

for tier in unit cli apiserver e2e kind release; do
  if [ "$tier" = apiserver ]; then budget_start; fi
  echo "== $tier tier"
  if { [ "$tier" = e2e ] || [ "$tier" = kind ] || [ "$tier" = release ]; } \
      && ! late_ready "$tier"; then
    failed+=("$tier-setup")
    continue
  fi
  if [ "$tier" = release ]; then
    # the committed krew manifest must carry the sha256 of the linux/amd64 archive this tree
    # builds in the floor root (issue 37), which the late stage builds once per machine beside
    # its other parts.  A freeze, ~1 min; the release tier's own build of the same tree reuses
    # this archive from the cache
    if ! late_ready floor; then
      failed+=("floor-setup")
      continue
    fi
    .venv/bin/python krew/build.py --check --offline || failed+=("krew-manifest")
  fi
  started=${EPOCHREALTIME/,/.}
  set +e
  # an absolute COVERAGE_FILE: CLI subprocesses run in other directories
  extra=()
  if [ "$tier" = e2e ]; then
    extra=(--ignore="$BUDGET_E2E")   # run beside the apiserver tier (above)
  fi
  if [ "$tier" = release ] && [ "${KIND_ENGINE:-}" = off ]; then
    # the release image runs in the Docker engine; told there is none, leave it out, saying so
    echo "release tier: tests/release/test_image_runs.py not run (KIND_ENGINE=off: no Docker engine)"
    extra=(--ignore=tests/release/test_image_runs.py)
  fi
  COVERAGE_FILE=$data/$tier "$PY" -m pytest "tests/$tier" -m "$tier" --cov --cov-report= \
    -p no:cacheprovider "${extra[@]}"
  rc=$?
  set -e
  [ "$rc" -eq 5 ] && no_tests "$tier"
  [ "$rc" -ne 0 ] && failed+=("$tier")
  total=$(report "$data/$tier" --format=total 2>/dev/null) || total=0
  case $total in
    # (a tier that collected nothing has already failed above: rc 5.)  The release tier
    # runs the package only inside the installs it checks (pipx, krew, the image), which
    # coverage does not follow
    0|0.0) total="nothing of the package measured in this process tree" ;;
    *) total="${total}% of the package (branch)" ;;
  esac
  took=$(awk -v a="$started" -v b="${EPOCHREALTIME/,/.}" 'BEGIN { printf "%.1f", b - a }')
  echo "coverage: $tier tier ${total}; the tier took ${took}s"
  if [ "$rc" -ne 0 ] && { [ "$tier" = unit ] || [ "$tier" = cli ]; }; then
    echo "error: the $tier tier failed; the slow tiers were not run" >&2
    exit "$rc"
  fi
  if [ "$tier" = e2e ]; then
    budget_end
    # the first compatibility run (its binaries are the e2e tier's part), beside the next tiers
    compat_start 0
  fi
  if [ "$tier" = unit ]; then
    if ! report "$data/unit" --include="$CORE" --fail-under="$CORE_FLOOR" >"$data/core.txt"; then
      cat "$data/core.txt"
      echo "error: the unit tier covers less than ${CORE_FLOOR}% of the pure core" >&2
      failed+=("core-coverage")
    fi
  fi
done

echo "== coverage of the package, every tier"
tiers=()
for tier in unit cli apiserver e2e e2e-budget kind release; do
  [ -f "$data/$tier" ] && tiers+=("$data/$tier")
done
"$PY" -m coverage combine --keep --quiet --data-file="$data/all" "${tiers[@]}"
if ! report "$data/all" --fail-under="$TOTAL_FLOOR"; then
  echo "error: every tier together covers less than the ${TOTAL_FLOOR}% floor" >&2
  failed+=("total-coverage")
fi

# the compatibility stage (above): the second and third runs, then every log in order
if late_ready compat; then
  [ -n "${compat_pids[0]:-}" ] || compat_start 0   # (the e2e tier's set-up had failed)
  compat_start 1
  until compat_done 0 || compat_done 1; do sleep 2; done   # a slot frees
  compat_start 2
else
  failed+=("compat-setup")
fi
for pid in "${compat_pids[@]}"; do wait "$pid" || true; done
if [ -n "$compat_started" ]; then
  for i in 0 1 2; do
    [ -n "${compat_pids[$i]:-}" ] || continue
    read -r tier version <<<"${compat[$i]}"
    cat "$compat_logs/$i.log"
    rc=$(cat "$compat_logs/$i.rc" 2>/dev/null || echo 1)
    [ "$rc" -eq 5 ] && no_tests "$tier"
    [ "$rc" -ne 0 ] && failed+=("$tier@${version#*=}")
  done
  echo "compatibility: the stage took $((SECONDS - compat_started))s from its first run's start"
fi
rm -rf "$compat_logs"
# --- end compatibility stage ----------------------------------------------------------------

tree_check || failed+=("clean-tree")
if [ -n "$late_pid" ]; then
  wait "$late_pid" || true
  late_rc=$(cat "$marks/rc" 2>/dev/null || echo 1)
  echo "set-up: $(tail -1 "$marks/log")"
  [ "$late_rc" = 0 ] || failed+=("late-setup")
fi

if [ "${#failed[@]}" -gt 0 ]; then
  echo "error: failed: ${failed[*]}" >&2
  exit 1
fi
