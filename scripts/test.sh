#!/usr/bin/env bash
# The one test command: installs dependencies, builds libmoe, and runs every test suite, then the
# C ABI tests and the parsers' fuzz targets again under AddressSanitizer + UndefinedBehaviorSanitizer,
# and the concurrency tests (C ABI threads, the bindings' glue, the thread pool, the expert cache,
# the engine, batching engine and backend tests that use threads, the loopback communicator's
# ranks and expert parallelism over them) under ThreadSanitizer.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

bash scripts/install-deps.sh
bash scripts/install-test-node-deps.sh

# Tests write their scratch files (converted models, checkpoints, logs) under TMPDIR: one directory
# per run, removed when it ends, so that runs neither litter /tmp nor see each other's files. It
# stays short: Open MPI keeps its session's sockets there.
test_tmp="$(mktemp -d "${TMPDIR:-/tmp}/moe-test.XXXXXX")"
trap 'rm -rf "$test_tmp"' EXIT
export TMPDIR="$test_tmp" TEST_TMPDIR="$test_tmp"

jobs="$(nproc)"
build="${MOE_BUILD_DIR:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOE_BUILD_TESTS=ON
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" --output-on-failure -j "$jobs"

asan="${MOE_ASAN_BUILD_DIR:-build-asan}"
# The sanitizer builds compile at -O1 with line tables only (-g1): enough for the sanitizers'
# stack traces with file and line, and much less to compile and link than -O2 -g.
san_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
           "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
cmake -S . -B "$asan" "${san_flags[@]}" -DMOE_BUILD_TESTS=ON -DMOE_BUILD_TOOLS=OFF \
  -DMOE_SANITIZE=ON
cmake --build "$asan" -j "$jobs" --target c_api_test c_api_engine_test swig_glue_test header_c99_test example_c_stream \
  moe_file_fuzz gguf_fuzz safetensors_fuzz hf_checkpoint_fuzz tokenizer_fuzz hf_tokenizer_json_fuzz \
  sentencepiece_model_fuzz chat_template_fuzz c_api_fuzz
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$asan" --output-on-failure -j "$jobs" -R "^(CApi|SwigGlue|header_c99|example_c|fuzz_)"

tsan="${MOE_TSAN_BUILD_DIR:-build-tsan}"
# Tests are listed when they run, not at build time: the listing is a run under ThreadSanitizer too.
cmake -S . -B "$tsan" "${san_flags[@]}" -DMOE_BUILD_TESTS=ON -DMOE_BUILD_TOOLS=OFF \
  -DMOE_TSAN=ON -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST
cmake --build "$tsan" -j "$jobs" --target c_api_test c_api_engine_test swig_glue_test thread_pool_test engine_test \
  cpu_backend_test expert_cache_test engine_expert_cache_test batch_engine_test \
  loopback_communicator_test expert_parallel_test expert_parallel_session_test \
  batch_engine_expert_parallel_test
# The expert cache's I/O threads with the forward pass: prefetching and read errors (the
# exactness sweep over every budget and level stays in the plain run: minutes under TSan).
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir "$tsan" --output-on-failure -j "$jobs" \
  -R "^(CApi|SwigGlue|ThreadPool|Engine|BatchEngine|CpuBackend|ExpertCacheTest|ExpertCacheEngineFaultTest|Fixtures/ExpertCacheEngineTest.Prefetch|LoopbackCommunicator|ExpertParallel)"
