#!/usr/bin/env bash
# Fetches the browser tests' one npm package (playwright-core, pinned by
# tests/ui/package-lock.json) into tests/ui/node_modules, once; later runs
# reuse it. Chromium itself is Debian's (scripts/install-deps.sh --browser).
# Exit 77 when the npm registry cannot be reached (the browser test then
# reports skipped, or test.sh fails with LOGDEX_REQUIRE_ENGINES=1).
set -uo pipefail
cd "$(dirname "$0")/../tests/ui" || exit 2
want=$(python3 -c 'import json; print(json.load(open("package-lock.json"))["packages"]["node_modules/playwright-core"]["version"])')
have=$(python3 -c 'import json; print(json.load(open("node_modules/playwright-core/package.json"))["version"])' 2>/dev/null || true)
if [ -z "$want" ]; then
  echo "ui-deps: cannot read the pinned version from tests/ui/package-lock.json" >&2
  exit 2
fi
if [ "$have" = "$want" ]; then
  echo "ui-deps: playwright-core $have present"
  exit 0
fi
if ! command -v npm > /dev/null; then
  echo "ui-deps: npm is missing (scripts/install-deps.sh --browser installs it)" >&2
  exit 77
fi
if ! npm ci --no-audit --no-fund --loglevel=error; then
  echo "ui-deps: npm ci failed (is the npm registry reachable?)" >&2
  exit 77
fi
echo "ui-deps: playwright-core $want installed in tests/ui/node_modules"
