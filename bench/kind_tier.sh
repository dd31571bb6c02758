#!/usr/bin/env bash
# Times the kind tier end to end on this machine: the set-up (engine, binaries, images: warm
# when the caches are, cold otherwise) and the tier's own wall time, with the per-phase
# numbers the tests record (cluster create, node Ready, Flux up, project image build+load).
#
#   KIND_ENGINE=start bench/kind_tier.sh        # prints a summary; logs under $OUT (default /tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
timings="$out/kind-tier-timings.jsonl"
rm -f "$timings"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

t=$(now)
if [ "${KIND_ENGINE:-}" = start ]; then
  eval "$(hack/kind/engine.sh start)"
  export FLUX_PLUNGER_KIND_BUILD=${FLUX_PLUNGER_KIND_BUILD:-1}
fi
engine_s=$(since "$t")

t=$(now)
FLUX_PLUNGER_KIND_BUILD=${FLUX_PLUNGER_KIND_BUILD:-} ./hack/setup.sh >"$out/kind-tier-setup.log" 2>&1
setup_s=$(since "$t")

t=$(now)
set +e
FLUX_PLUNGER_KIND_TIMINGS="$timings" .venv/bin/python -m pytest -m kind tests/kind -q \
  -p no:cacheprovider >"$out/kind-tier-pytest.log" 2>&1
rc=$?
set -e
tier_s=$(since "$t")

echo "engine start: ${engine_s}s"
echo "setup (hack/setup.sh incl. binaries + images): ${setup_s}s"
echo "kind tier (pytest -m kind): ${tier_s}s, exit $rc"
tail -n 1 "$out/kind-tier-pytest.log"
[ -f "$timings" ] && cat "$timings"
exit "$rc"
