#!/usr/bin/env bash
# `logdex bench query` with its query shapes run twice: on RocksDB (as always) and on a real
# HBase 2.6 through its Thrift2 gateway (scripts/engines/hbase.sh: standalone HBase started
# here in a temporary folder, framed transport, binary protocol; stopped in every case). The
# HBase tables hold the same rows as the RocksDB store, copied from it.
#
#   bench/query_real_hbase.sh [LOGDEX_BINARY] [--scale F]     (default --scale 0.01)
#
# Prints the benchmark's JSON; its `hbase` object holds each shape's latency on HBase and its
# ratio to RocksDB's.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
logdex=$root/build/server/logdex
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then logdex=$1; shift; fi
[ -x "$logdex" ] || { echo "query_real_hbase.sh: no logdex binary at $logdex (scripts/build.sh release)" >&2; exit 2; }
[ $# -gt 0 ] || set -- --scale 0.01
hbase="$root/scripts/engines/hbase.sh"

dir=$(mktemp -d "${TMPDIR:-/tmp}/logdex-query-hbase.XXXXXX")
cleanup() { "$hbase" stop "$dir/hbase" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

HBASE_ENGINE_OWNER_PID=$$ "$hbase" start "$dir/hbase" framed binary >&2
echo "query_real_hbase.sh: HBase $("$hbase" version) with its Thrift2 gateway at $(cat "$dir/hbase/thrift")" >&2
"$logdex" bench query --dir "$dir" --hbase "$(cat "$dir/hbase/thrift")" "$@"
