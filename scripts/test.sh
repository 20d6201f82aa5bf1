#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite:
#   1. release build + every ctest test, the `load` label included (about a minute more),
#      and `real-engine`: logdex against a real Apache Kafka broker (scripts/engines/kafka.sh;
#      its jars come from Maven once, then from a cache; skipped when Maven is unreachable,
#      a failure with LOGDEX_REQUIRE_ENGINES=1 as .ci/run sets it), and `browser`: the web UI
#      in Debian's chromium driven by playwright-core (tests/ui/; npm fetches it once);
#   2. ASan + UBSan build + the same tests but `load`, `real-engine` and `browser` (skip with
#      LOGDEX_SKIP_ASAN=1);
#   3. a short libFuzzer run of the chunk, JSON-lines and text-lines decoders
#      (LOGDEX_FUZZ_SECONDS in all, default 30; 0 skips).
# Exits non-zero on the first failure. .ci/run runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD"

scripts/install-deps.sh --servers --fuzz --engines --browser

step() { printf '\n=== %s ===\n' "$*"; }

# The real engines' jars, before any test runs: a download is not paid inside a test's
# timeout. Unreachable (77): the real-engine tests report skipped, unless
# LOGDEX_REQUIRE_ENGINES=1 (.ci/run sets it) makes that a failure here.
step "real engines: Apache Kafka $(scripts/engines/kafka.sh version), HBase $(scripts/engines/hbase.sh version)"
for engine in kafka hbase; do
  rc=0
  scripts/engines/$engine.sh fetch || rc=$?
  case $rc in
    0) ;;
    77|78)
      [ "${LOGDEX_REQUIRE_ENGINES:-0}" = 1 ] && { echo "test.sh: LOGDEX_REQUIRE_ENGINES=1 and $engine cannot be had" >&2; exit 1; }
      echo "test.sh: the $engine real-engine tests will be skipped (exit $rc: see above)" ;;
    *) exit "$rc" ;;
  esac
done
# The browser test's playwright-core (npm), likewise before any test runs.
rc=0
scripts/ui-deps.sh || rc=$?
[ -x /usr/bin/chromium ] && command -v node > /dev/null || rc=78
if [ "$rc" != 0 ]; then
  [ "${LOGDEX_REQUIRE_ENGINES:-0}" = 1 ] && { echo "test.sh: LOGDEX_REQUIRE_ENGINES=1 and chromium, node or playwright-core cannot be had (exit $rc)" >&2; exit 1; }
  echo "test.sh: the browser test will be skipped (exit $rc)"
fi

step "release build"
scripts/build.sh release
step "release tests"
(cd build && ctest --output-on-failure --timeout 1500 -j "$(nproc)")

if [ "${LOGDEX_SKIP_ASAN:-0}" != 1 ]; then
  step "ASan + UBSan build"
  scripts/build.sh asan
  step "ASan + UBSan tests"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure --timeout 1500 --label-exclude '^(load|real-engine|browser)$' -j "$(nproc)")
fi

fuzz_seconds=${LOGDEX_FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" != 0 ]; then
  step "fuzz the chunk, JSON-lines and text-lines decoders, ship's chunker and the query inputs for ${fuzz_seconds}s in all"
  scripts/fuzz.sh "$fuzz_seconds"
fi
step "all tests passed"
