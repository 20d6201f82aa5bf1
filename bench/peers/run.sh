#!/usr/bin/env bash
# The peer benchmark (issue 15): logdex beside VictoriaLogs and ClickHouse, same data, same
# queries, one run. Prints one JSON object, then a markdown table. See bench/README.md, "Peers".
#
#   bench/peers/run.sh [--lines N] [--runs N] [--cold-runs N] [--seed N]
#                      [--systems logdex,logdex-compaction,victorialogs,clickhouse]
#                      [--realtime-streams N] [--realtime-seconds S] [--realtime-time-scale X]
#                      [--logdex-kafka real|embedded] [--dir DIR --keep] [--json-out FILE] [--no-install]
#   (bench/peers/peers.py --help says what each does)
#
# What it fetches or builds when missing:
#   - Debian packages (scripts/install-deps.sh --peers): clickhouse-server/-client 18.16, zstd,
#     curl, python3-snappy, python3-zstandard (skipped with --no-install);
#   - VictoriaLogs v1.52.1, built with the machine's Go from the Go module proxy into
#     ${LOGDEX_ENGINE_CACHE:-$HOME/.cache/logdex-engines}/victorialogs-1.52.1/ (never the repo);
#   - logdex: $LOGDEX_BIN if set, else build/server/logdex, built by
#     `scripts/build.sh release logdex` when missing;
#   - Apache Kafka's jars for logdex's broker (scripts/engines/kafka.sh fetch: Maven, cached;
#     needs Java and Maven: scripts/install-deps.sh --engines).
# A system that cannot be had is reported as skipped with the reason, and the others still run.
# Every process it starts is stopped and its scratch directory removed on exit (trap).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${LOGDEX_ENGINE_CACHE:-$HOME/.cache/logdex-engines}
vl_version=1.52.1
vl_dir=$cache/victorialogs-$vl_version
go=${GO:-/usr/local/go/bin/go}
py=${PYTHON:-/usr/bin/python3}   # Debian's python: the one python3-snappy/-zstandard install into

install=1
args=()
for a in "$@"; do
  case "$a" in
    --no-install) install=0 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) args+=("$a") ;;
  esac
done

driver_pid=""
cleanup() {
  # peers.py stops its servers itself; this catches a driver killed before it could.
  if [ -n "$driver_pid" ] && kill -0 "$driver_pid" 2>/dev/null; then
    kill -TERM "$driver_pid" 2>/dev/null || true
    wait "$driver_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

skip=()
if [ "$install" = 1 ]; then
  if ! "$root/scripts/install-deps.sh" --peers --engines >&2; then
    echo "peers: scripts/install-deps.sh --peers --engines failed; going on with what is installed" >&2
  fi
fi
[ -x "$py" ] || py=python3
command -v curl >/dev/null || { echo "peers: curl is needed (scripts/install-deps.sh --peers)" >&2; exit 1; }

# ClickHouse: Debian's package, started by hand by the driver.
if ! command -v clickhouse-server >/dev/null; then
  skip+=(--clickhouse-skip "clickhouse-server is not installed (scripts/install-deps.sh --peers installs Debian's 18.16)")
fi

# VictoriaLogs: built once into the cache.
vl_bin=$vl_dir/victoria-logs
if [ ! -x "$vl_bin" ]; then
  if [ ! -x "$go" ] && command -v go >/dev/null; then go=$(command -v go); fi
  if [ ! -x "$go" ]; then
    skip+=(--victorialogs-skip "no Go toolchain at $go (GO=...) to build VictoriaLogs v$vl_version")
  else
    mkdir -p "$vl_dir"
    echo "peers: building VictoriaLogs v$vl_version into $vl_dir (Go module proxy; a few minutes)" >&2
    tmp=$(mktemp -d "$vl_dir/build.XXXXXX")
    # go.mod of v1.52.1 asks for Go 1.26.5; a machine with an older Go needs GOTOOLCHAIN=go1.27.3
    # (the one approved way, see the README's "Real engines").
    if (cd "$tmp" && GOBIN="$tmp/bin" CGO_ENABLED=0 GOFLAGS=-buildvcs=false nice -n 19 "$go" install -trimpath \
          -ldflags "-X github.com/VictoriaMetrics/VictoriaMetrics/lib/buildinfo.Version=victoria-logs-v$vl_version" \
          "github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs@v$vl_version") >"$vl_dir/build.log" 2>&1; then
      mv "$tmp/bin/victoria-logs" "$vl_bin"
    else
      skip+=(--victorialogs-skip "building VictoriaLogs v$vl_version failed: $(tail -n 3 "$vl_dir/build.log" | tr '\n' ' ')")
    fi
    rm -rf "$tmp"
  fi
fi

# logdex.
ld_bin=${LOGDEX_BIN:-$root/build/server/logdex}
if [ ! -x "$ld_bin" ] && [ -z "${LOGDEX_BIN:-}" ]; then
  echo "peers: building logdex (scripts/build.sh release logdex)" >&2
  if ! nice -n 19 "$root/scripts/build.sh" release logdex >&2; then
    skip+=(--logdex-skip "scripts/build.sh release logdex failed")
  fi
fi
if [ ! -x "$ld_bin" ]; then
  case " ${skip[*]:-} " in *--logdex-skip*) ;; *) skip+=(--logdex-skip "no logdex binary at $ld_bin") ;; esac
fi

cd "$here"
nice -n 19 "$py" "$here/peers.py" --logdex-bin "$ld_bin" --victorialogs-bin "$vl_bin" "${skip[@]}" "${args[@]}" &
driver_pid=$!
wait "$driver_pid"
