#!/usr/bin/env bash
# Installs the Debian 12 packages logdex needs, only those that are missing.
# Idempotent and quick when everything is present (one dpkg-query, no apt).
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --servers  also Prometheus and Alertmanager (integration tests)
#   scripts/install-deps.sh --fuzz     also clang and its runtime (libFuzzer, sanitizers)
#   scripts/install-deps.sh --engines  also Java 17 and Maven (real engines: scripts/engines/)
#   scripts/install-deps.sh --peers    also ClickHouse 18.16, zstd and Python's snappy/zstandard (bench/peers/run.sh)
#   scripts/install-deps.sh --browser  also Chromium and Node.js/npm when missing (the web UI's browser test, tests/ui/)
set -euo pipefail

pkgs=(
  cmake ninja-build g++ pkg-config ccache
  librdkafka-dev libthrift-dev thrift-compiler libboost-dev
  libsnappy-dev libzstd-dev libprotobuf-dev protobuf-compiler
  libgtest-dev libgmock-dev libbenchmark-dev
  librocksdb-dev prometheus-cpp-dev libcpp-httplib-dev libcurl4-openssl-dev libssl-dev
  nlohmann-json3-dev libutfcpp-dev libsimdjson-dev libabsl-dev libcli11-dev libspdlog-dev libyaml-cpp-dev libxxhash-dev libre2-dev
  kcat python3 python3-yaml iproute2
  rsyslog rsyslog-kafka
)
for arg in "$@"; do
  case "$arg" in
    --servers) pkgs+=(prometheus prometheus-alertmanager) ;;
    --fuzz) pkgs+=(clang libclang-rt-14-dev) ;;
    --engines) pkgs+=(openjdk-17-jre-headless openjdk-17-jdk-headless maven) ;;  # javac: HBase's bridge
    --peers) pkgs+=(clickhouse-server clickhouse-client zstd curl python3-snappy python3-zstandard) ;;
    --browser)
      pkgs+=(chromium)
      command -v node > /dev/null || pkgs+=(nodejs)  # a preinstalled Node.js (with its npm) is kept
      command -v npm > /dev/null || pkgs+=(npm) ;;
    *) echo "install-deps: unknown option $arg" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
