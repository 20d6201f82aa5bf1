#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and runs the main job
# end to end on the embedded defaults (`logdex demo`).
# Until the demo subcommand lands, it builds and prints `logdex version`.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD"
scripts/install-deps.sh
scripts/build.sh release
if build/server/logdex demo --help >/dev/null 2>&1; then
  exec build/server/logdex demo "$@"
fi
build/server/logdex version
