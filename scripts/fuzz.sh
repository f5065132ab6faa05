#!/usr/bin/env bash
# Coverage-guided fuzzing with libFuzzer (clang from Debian; not part of the test command).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 60 seconds for each of every target
#
# MOE_FUZZ_TIMEOUT (seconds, default 30): an input running longer is a finding (and one running
# that long is reported slow). libFuzzer counts wall-clock time, so raise it when the run may be
# paused (SIGSTOP beside a benchmark).
#
# Builds every fuzz target with -fsanitize=fuzzer,address,undefined (build-fuzz/), then runs each
# for SECONDS from its seeds (built from the test data), the corpus kept in the repository
# (tests/fuzz/corpus/<target>/) and the working corpus of earlier runs (build-fuzz/corpus/).
# Afterwards the repository corpus is the minimal set of small inputs (<= 16 KiB) that covers
# what all of them cover. An input that crashes, hangs or runs out of memory is written into the
# repository corpus as crash-*/timeout-*/oom-*, and so is replayed by every test run from then
# on (fuzz_<target> in CTest) until the bug is fixed. Each run appends its executions, edges
# covered and findings to tests/fuzz/runs.tsv; tests/fuzz/README.md sums them up.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

seconds="${1:-60}"
shift || true
all_targets=(moe_file_fuzz gguf_fuzz safetensors_fuzz hf_checkpoint_fuzz tokenizer_fuzz
             hf_tokenizer_json_fuzz sentencepiece_model_fuzz chat_template_fuzz c_api_fuzz)
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")

bash scripts/install-deps.sh >/dev/null
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a \
    >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends clang \
    libclang-rt-dev
fi

build="${MOE_FUZZ_BUILD_DIR:-build-fuzz}"
# The libraries get coverage instrumentation too (fuzzer-no-link); the targets link libFuzzer.
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOE_FUZZ=ON \
  -DMOE_SANITIZE=ON -DMOE_BUILD_TOOLS=OFF -DMOE_BUILD_JAVA=OFF -DMOE_BUILD_CSHARP=OFF \
  -DMOE_BUILD_GO=OFF -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link \
  -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
  >/dev/null
build_targets=()
for t in "${targets[@]}"; do build_targets+=("$t" "${t}_libfuzzer"); done
cmake --build "$build" -j "$(nproc)" --target "${build_targets[@]}"

log=tests/fuzz/runs.tsv
[ -f "$log" ] || printf 'date\ttarget\tseconds\texecutions\tedges\tfindings\n' >"$log"
# The file-taking targets write each input to a file; on a RAM-backed directory that costs
# nothing, on a disk it halves the executions per second.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1"
for t in "${targets[@]}"; do
  repo_corpus="tests/fuzz/corpus/$t"
  work="$build/corpus/$t"
  seeds="$build/seeds/$t"
  mkdir -p "$repo_corpus" "$work" "$seeds"
  "$build/tests/fuzz/$t" --write-seeds "$seeds" >/dev/null
  before="$(ls "$repo_corpus" | grep -cE '^(crash|timeout|oom|leak)-' || true)"
  # Inputs up to 64 KiB: the model-file targets start from the micro models (tests/fuzz/seeds),
  # their megabyte fixture seeds taking part truncated; the micro Hugging Face checkpoints take up
  # to 128 KiB (the PyTorch-written ones, 200-500 KB, take part truncated).
  max_len=65536
  case "$t" in hf_checkpoint_fuzz) max_len=131072 ;; esac
  out="$build/$t.log"
  set +e
  started=$SECONDS
  "$build/tests/fuzz/${t}_libfuzzer" "$work" "$repo_corpus" "$seeds" -max_total_time="$seconds" \
    -max_len="$max_len" -timeout="${MOE_FUZZ_TIMEOUT:-30}" \
    -report_slow_units="${MOE_FUZZ_TIMEOUT:-30}" -rss_limit_mb=6144 -artifact_prefix="$repo_corpus/" \
    -print_final_stats=1 >"$out" 2>&1
  rc=$?
  ran=$((SECONDS - started))  # less than asked when libFuzzer stopped at a finding
  set -e
  execs="$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$out" | grep -oE '[0-9]+$' || echo 0)"
  edges="$(grep -oE 'cov: [0-9]+' "$out" | tail -1 | grep -oE '[0-9]+' || echo 0)"
  after="$(ls "$repo_corpus" | grep -cE '^(crash|timeout|oom|leak)-' || true)"
  findings=$((after - before))
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%F)" "$t" "$ran" "${execs:-0}" "${edges:-0}" \
    "$findings" >>"$log"
  echo "$t: ${execs:-0} executions, ${edges:-0} edges, $findings new finding(s) (exit $rc; log $out)"
  # Keep the repository corpus minimal: the small inputs (<= 16 KiB) that cover what everything
  # covers; the large seeds are rebuilt from the test data each run.
  merged="$build/merged/$t"
  rm -rf "$merged" && mkdir -p "$merged"
  "$build/tests/fuzz/${t}_libfuzzer" -merge=1 -max_len=65536 -artifact_prefix="$repo_corpus/" \
    "$merged" "$repo_corpus" "$work" \
    >"$build/$t.merge.log" 2>&1 || true
  find "$repo_corpus" -maxdepth 1 -type f ! -name 'crash-*' ! -name 'timeout-*' ! -name 'oom-*' \
    ! -name 'leak-*' -delete
  find "$merged" -maxdepth 1 -type f -size -16385c -exec cp {} "$repo_corpus/" \;
done

# Executions per target over every run so far.
awk -F'\t' 'NR > 1 { runs[$2]++; execs[$2] += $4; if ($5 > edges[$2]) edges[$2] = $5;
                     found[$2] += $6 }
            END { printf "%-26s %6s %14s %8s %9s\n", "target", "runs", "executions", "edges", "findings"
                  for (t in runs) printf "%-26s %6d %14d %8d %9d\n", t, runs[t], execs[t], edges[t], found[t] }' \
  "$log"
