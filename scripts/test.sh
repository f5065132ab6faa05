#!/usr/bin/env bash
# The one test command: installs dependencies, builds libmoe, and runs every test suite, then the
# C ABI tests and the parsers' fuzz targets again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

bash scripts/install-deps.sh
bash scripts/install-test-node-deps.sh

jobs="$(nproc)"
build="${MOE_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOE_BUILD_TESTS=ON
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs"

asan="${MOE_ASAN_BUILD_DIR:-build-asan}"
cmake -S . -B "$asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOE_BUILD_TESTS=ON -DMOE_BUILD_TOOLS=OFF \
  -DMOE_SANITIZE=ON
cmake --build "$asan" -j "$jobs" --target c_api_test header_c99_test example_c_stream \
  moe_file_fuzz gguf_fuzz safetensors_fuzz tokenizer_fuzz hf_tokenizer_json_fuzz
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$asan" --output-on-failure -j "$jobs" -R "^(CApi|header_c99|example_c|fuzz_)"
