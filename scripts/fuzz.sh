#!/usr/bin/env bash
# Builds the libFuzzer targets (clang) and fuzzes the chunk decoder.
#   scripts/fuzz.sh [SECONDS]   (default 60)
# The corpus starts from seeds made by the real encoder and grows in .fuzz-corpus/.
# A crash leaves its input in .fuzz-corpus/crashes/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
scripts/install-deps.sh --fuzz >/dev/null
scripts/build.sh fuzz >/dev/null
corpus=.fuzz-corpus/chunk_decoder
mkdir -p "$corpus" .fuzz-corpus/crashes
LOGDEX_FUZZ_SEED_DIR="$corpus" build-fuzz/tests/fuzz/chunk_decoder_fuzz -runs=0 "$corpus" >/dev/null 2>&1
build-fuzz/tests/fuzz/chunk_decoder_fuzz "$corpus" -max_total_time="$seconds" -max_len=65536 \
  -artifact_prefix=.fuzz-corpus/crashes/ -print_final_stats=1 2>&1 | tail -n 25
