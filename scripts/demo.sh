#!/usr/bin/env bash
# The main job: build libmoe and stream a continuation from the bundled model, with the
# telemetry table (active-parameter fraction, expert use per layer, tokens/s) on stderr.
#
# Usage: scripts/demo.sh ["prompt text"] [extra moe-cli run flags...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

bash scripts/install-deps.sh >/dev/null
build="${MOE_BUILD_DIR:-build}"
# The build's own output (and the bundled model's conversion) goes to a log, shown only when the
# build fails, so the terminal holds the continuation and its telemetry.
mkdir -p "$build"
log="$build/demo-build.log"
echo "building moe-cli and the bundled model (the first time takes minutes; log: $log)" >&2
if ! { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release &&
  cmake --build "$build" -j "$(nproc)" --target moe-cli bundled_model; } >"$log" 2>&1; then
  { grep -i -m 20 -E "error|failed" "$log" || true; echo "..."; tail -n 20 "$log"; } >&2
  echo "demo: the build failed; the whole log is $log" >&2
  exit 1
fi

prompt="${1:-The old man looked at the}"
shift || true
model="$build/models/tiny-brown-moe.moe"
exec "$build/tools/moe-cli" run -m "$model" -p "$prompt" --echo -n 80 --temp 0.7 --top-k 40 \
  --seed 1 --stats "$@"
