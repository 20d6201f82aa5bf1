#!/usr/bin/env bash
# Builds the libFuzzer targets once (clang, build-fuzz/) and fuzzes each in turn:
#   chunk_decoder_fuzz  the chunk decoder (tests/fuzz/chunk_decoder_fuzz.cc)
#   json_lines_fuzz     a `logdex-format: json` message through serve's batch path
#   text_lines_fuzz     a `logdex-format: text` message through serve's batch path
#   ship_chunk_fuzz     any records through ship's Chunker; serve's checks on every chunk
#   query_input_fuzz    WebSocket frames, LogQL and the text filters (tests/fuzz/query_input_fuzz.cc)
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# SECONDS (default $LOGDEX_FUZZ_SECONDS, else 30) is the total, split evenly
# between the targets (at least 1 s each). Each corpus starts from seeds the
# target writes itself (real encoder output, Loghub lines) and grows in
# .fuzz-corpus/<target>/. A crash leaves its input in .fuzz-corpus/crashes/
# (named <target>-crash-<sha1>), the other targets still run, and the script
# exits 1. LOGDEX_FUZZ_MAX_LEN overrides the line targets' -max_len (default
# 300000: deep enough for a 100,000-level JSON nesting).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${LOGDEX_FUZZ_SECONDS:-30}}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(chunk_decoder_fuzz json_lines_fuzz text_lines_fuzz ship_chunk_fuzz query_input_fuzz)
scripts/install-deps.sh --fuzz >/dev/null
mkdir -p .fuzz-corpus/crashes
# The build's output is kept, and its end shown when it fails (a compile or
# link error would otherwise leave only this step's title in CI's log).
if ! scripts/build.sh fuzz >.fuzz-corpus/build.log 2>&1; then
  tail -n 40 .fuzz-corpus/build.log >&2
  echo "fuzz: the fuzz build failed (whole output in .fuzz-corpus/build.log)" >&2
  exit 1
fi
per=$(( seconds / ${#targets[@]} ))
[ "$per" -ge 1 ] || per=1
failed=()
for t in "${targets[@]}"; do
  corpus=.fuzz-corpus/$t
  mkdir -p "$corpus"
  args=(-max_total_time="$per" -artifact_prefix=".fuzz-corpus/crashes/$t-" -print_final_stats=1)
  case "$t" in
    chunk_decoder_fuzz|ship_chunk_fuzz) args+=(-max_len=65536) ;;
    json_lines_fuzz) args+=(-max_len="${LOGDEX_FUZZ_MAX_LEN:-300000}" -dict=tests/fuzz/json.dict) ;;
    text_lines_fuzz) args+=(-max_len="${LOGDEX_FUZZ_MAX_LEN:-300000}") ;;
    query_input_fuzz) args+=(-max_len=70000) ;;
  esac
  LOGDEX_FUZZ_SEED_DIR="$corpus" "build-fuzz/tests/fuzz/$t" -runs=0 "$corpus" >/dev/null 2>&1 || true
  echo "== $t: ${per}s"
  if ! "build-fuzz/tests/fuzz/$t" "$corpus" "${args[@]}" >".fuzz-corpus/$t.log" 2>&1; then
    failed+=("$t")
  fi
  tail -n 25 ".fuzz-corpus/$t.log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crash in ${failed[*]}; inputs in .fuzz-corpus/crashes/" >&2
  exit 1
fi
