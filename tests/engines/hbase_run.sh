#!/usr/bin/env bash
# Runs test commands against a real HBase and its Thrift2 gateway started for them in a
# temporary directory (scripts/engines/hbase.sh), then stops it whatever happened.
#
#   tests/engines/hbase_run.sh TRANSPORT PROTOCOL -- COMMAND... [-- COMMAND...]
#
# TRANSPORT framed|buffered, PROTOCOL binary|compact. Each command runs with
# LOGDEX_HBASE_THRIFT=host:port, LOGDEX_HBASE_TRANSPORT and LOGDEX_HBASE_PROTOCOL set.
# Exit 77 (ctest SKIP_RETURN_CODE) when no real HBase gateway can be had here (Maven
# Central unreachable, or the registry serves no hbase-thrift jar), with the reason (exit 1
# under LOGDEX_REQUIRE_ENGINES=1);
# on a failure, HBase's and the gateway's logs are printed.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
engine="$root/scripts/engines/hbase.sh"
[ $# -ge 4 ] && [ "$3" = "--" ] || { sed -n 5,6p "$0" >&2; exit 2; }
transport=$1 protocol=$2; shift 3

t0=$SECONDS
"$engine" fetch
rc=$?
skip() { # REASON: skipped (ctest's 77), or a failure under LOGDEX_REQUIRE_ENGINES=1 (.ci/run)
  if [ "${LOGDEX_REQUIRE_ENGINES:-0}" = 1 ]; then
    echo "FAILED: $1 (LOGDEX_REQUIRE_ENGINES=1: the real-engine tests must run)"; exit 1
  fi
  echo "SKIPPED: $1"; exit 77
}
case $rc in
  0) ;;
  77) skip "Maven Central could not be reached: no real HBase here" ;;
  78) skip "the registry serves no org.apache.hbase:hbase-thrift jar: HBase $("$engine" version) runs here but its Thrift2 gateway cannot" ;;
  *) echo "hbase_run.sh: fetch failed (exit $rc)" >&2; exit 1 ;;
esac
echo "hbase_run.sh: HBase $("$engine" version) jars ready in $((SECONDS - t0)) s"

dir=$(mktemp -d "${TMPDIR:-/tmp}/logdex-hbase.XXXXXX")
failed=1
cleanup() {
  "$engine" stop "$dir" || true
  if [ "$failed" -ne 0 ]; then
    for f in "$dir"/logs/*.log; do [ -f "$f" ] && { echo "==> $f (last 200 lines) <=="; tail -n 200 "$f"; }; done
    # Last, where a cut log still shows it: what failed, with the lines that said why.
    if [ -s "$dir/failures" ]; then echo "==> hbase_run.sh: what failed <=="; tail -n 60 "$dir/failures"; fi
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
HBASE_ENGINE_OWNER_PID=$$ "$engine" start "$dir" "$transport" "$protocol" || exit 1
echo "hbase_run.sh: HBase and gateway ($transport, $protocol) up in $((SECONDS - t0)) s at $(cat "$dir/thrift")"
export LOGDEX_HBASE_THRIFT="$(cat "$dir/thrift")" LOGDEX_HBASE_TRANSPORT="$transport" LOGDEX_HBASE_PROTOCOL="$protocol"

status=0
while [ $# -gt 0 ]; do
  cmd=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmd+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  t0=$SECONDS
  "${cmd[@]}" 2>&1 | tee "$dir/output"; rc=${PIPESTATUS[0]}
  echo "hbase_run.sh: '${cmd[*]}' exited $rc in $((SECONDS - t0)) s"
  if [ "$rc" -ne 0 ]; then
    status=1
    # gtest's "file:line: Failure" with what follows it, and its FAILED lines; else the end.
    { echo "'${cmd[*]}' exited $rc:"
      if grep -qE ': Failure$|^\[  FAILED  \]' "$dir/output"; then
        grep -E -A10 ': Failure$|^\[  FAILED  \]' "$dir/output" | head -n 200
      else
        tail -n 40 "$dir/output"
      fi
    } >> "$dir/failures"
  fi
done
failed=$status
exit "$status"
