#!/usr/bin/env bash
# The device check (issue 21): on a machine with an NVIDIA GPU, builds libmoe with the CUDA
# backend, runs the GPU tests (ctest -L gpu: every kernel and every fixture model against the CPU
# backend, the hybrid split, the budget errors), then moe-bench on the device: batch-1 decode and
# a 512-token prompt on the bench models, and 8 parallel sequences, with "% limit" held against
# the GPU's memory bandwidth (GPU_BANDWIDTH_GBPS, default 4800: an H200's HBM3e). Meant to finish
# well inside the few minutes a lent GPU machine gives. Fails if a GPU test skipped (no usable
# device) rather than passing without having run.
#
#   scripts/gpu-check.sh [BUILD_DIR]      default: build-gpu
#   BENCH_MODELS="a.gguf b.gguf"          the models for moe-bench (default: a 1 B Q4_K_M bench
#                                         model written by moe-synth into the build folder)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${1:-build-gpu}"
bandwidth="${GPU_BANDWIDTH_GBPS:-4800}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOE_BUILD_TESTS=ON -DMOE_CUDA=ON \
  -DMOE_BUILD_TOOLS=ON -DMOE_BUILD_JAVA=OFF -DMOE_BUILD_CSHARP=OFF -DMOE_BUILD_GO=OFF
cmake --build "$build" -j "$(nproc)" --target moe_cuda cuda_dequantize_test cuda_quant_matvec_test \
  cuda_route_test cuda_elementwise_ops_test cuda_rows_and_experts_test cuda_attention_test \
  cuda_gemm_test cuda_backend_test engine_device_test block_decode_test dot_kernels_test \
  device_decomposition_test expert_dispatch_test moe-bench moe-synth
log="$(mktemp)"
ctest --test-dir "$build" -L gpu -R "." --output-on-failure -V | tee "$log"
if grep -qE "\*\*\*Skipped|\[  SKIPPED \]" "$log"; then
  echo "gpu-check: a GPU test was skipped: no usable CUDA device here" >&2
  exit 1
fi
echo "gpu-check: every GPU test ran and passed"

models="${BENCH_MODELS:-}"
if [ -z "$models" ]; then
  models="$build/bench-q4_k_m.gguf"
  [ -f "$models" ] || "$build/tools/moe-synth" -o "$models" --type q4_k_m \
    --vocab tests/data/tokenizer/ggml-vocab-deepseek-coder.gguf
fi
for m in $models; do
  echo "== $m on the GPU (limit: ${bandwidth} GB/s)"
  "$build/tools/moe-bench" -m "$m" --device cuda -t 4 -p 512 -n 64 -r 2 \
    --bandwidth-gbps "$bandwidth"
  "$build/tools/moe-bench" -m "$m" --device cuda -t 4 -p 128 -n 32 --parallel 1,8
done
