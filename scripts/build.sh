#!/usr/bin/env bash
# Configures (CMake + Ninja) and builds logdex.
#   scripts/build.sh [release|asan|fuzz|fuzz-fast] [TARGET...]   (default: release, every target)
#   e.g. scripts/build.sh release logdex   # the binary alone, no tests or benchmarks
# Build trees: build/ (release), build-asan/ (ASan + UBSan), build-fuzz/ (clang,
# libFuzzer + ASan + UBSan), build-fuzz-fast/ (clang, libFuzzer + UBSan: long runs).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
shift || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
jobs=${LOGDEX_JOBS:-$(nproc)}
case "$kind" in
  release) dir=build; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan)    dir=build-asan; args=(-DCMAKE_BUILD_TYPE=Debug -DLOGDEX_SANITIZE=ON) ;;
  fuzz)    dir=build-fuzz; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOGDEX_FUZZ=ON
                                 -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;;
  fuzz-fast) dir=build-fuzz-fast; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOGDEX_FUZZ=ON
                                 -DLOGDEX_FUZZ_SANITIZERS=undefined
                                 -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++) ;;
  *) echo "build.sh: unknown build kind '$kind' (release|asan|fuzz|fuzz-fast)" >&2; exit 2 ;;
esac
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja "${args[@]}" "${launcher[@]}"
fi
cmake --build "$dir" -j "$jobs" "${targets[@]}"
