#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job
# end to end on the embedded defaults, printing what happened (logdex demo:
# serve on an in-process Kafka cluster with RocksDB in a temporary directory,
# the bundled Loghub samples and a generated error burst shipped to it,
# example queries, the alerts a local webhook received, a metrics summary).
# Arguments go to `logdex demo` (e.g. --serve to keep it running).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD"
scripts/install-deps.sh
scripts/build.sh release logdex >/dev/null   # the binary alone
exec build/server/logdex demo "$@"
