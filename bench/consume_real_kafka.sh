#!/usr/bin/env bash
# `logdex bench consume` with its end-to-end rounds run twice: on the mock cluster inside the
# process (as always) and through a real Apache Kafka broker (scripts/engines/kafka.sh, one
# KRaft node with Kafka's own JVM flags) started here in a temporary folder and stopped in
# every case. The broker's CPU counts with logdex's, as the mock's does.
#
#   bench/consume_real_kafka.sh [LOGDEX_BINARY] [--scale F]
#
# Prints the benchmark's JSON; its `real_broker` object holds the real broker's figures and
# their ratios to the mock's.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
logdex=${1:-$root/build/server/logdex}
shift || true
[ -x "$logdex" ] || { echo "consume_real_kafka.sh: no logdex binary at $logdex (scripts/build.sh release)" >&2; exit 2; }
kafka="$root/scripts/engines/kafka.sh"

dir=$(mktemp -d "${TMPDIR:-/tmp}/logdex-consume-kafka.XXXXXX")
cleanup() { "$kafka" stop "$dir/broker" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# Kafka's own start-script flags (kafka-server-start.sh, kafka-run-class.sh), not the test
# node's small heap and C1-only JIT.
export KAFKA_ENGINE_JVM_OPTS="-Xmx1G -Xms1G -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent"
KAFKA_ENGINE_OWNER_PID=$$ "$kafka" start "$dir/broker" >&2
"$kafka" create-topic "$dir/broker" bench-real 32 >&2
"$kafka" create-topic "$dir/broker" bench-real.dlq 1 >&2
echo "consume_real_kafka.sh: Apache Kafka $("$kafka" version) at $(cat "$dir/broker/bootstrap"), pid $(cat "$dir/broker/pid")" >&2
"$logdex" bench consume --brokers "$(cat "$dir/broker/bootstrap")" --broker-pid "$(cat "$dir/broker/pid")" "$@"
