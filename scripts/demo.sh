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
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target moe-cli bundled_model >/dev/null

prompt="${1:-The old man looked at the}"
shift || true
model="$build/models/tiny-brown-moe.moe"
printf '%s' "$prompt"
exec "$build/tools/moe-cli" run -m "$model" -p "$prompt" -n 80 --temp 0.7 --top-k 40 --seed 1 \
  --stats "$@"
