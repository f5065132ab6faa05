#!/usr/bin/env bash
# The device check (issue 21): on a machine with an NVIDIA GPU, builds libmoe with the CUDA
# kernels and runs the GPU tests (ctest -L gpu), which compare every kernel with the CPU backend.
# Meant to finish well inside the few minutes a lent GPU machine gives. Fails if a GPU test
# skipped (no usable device) rather than passing without having run.
#
#   scripts/gpu-check.sh [BUILD_DIR]      default: build-gpu
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${1:-build-gpu}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOE_BUILD_TESTS=ON -DMOE_CUDA=ON \
  -DMOE_BUILD_TOOLS=OFF -DMOE_BUILD_JAVA=OFF -DMOE_BUILD_CSHARP=OFF -DMOE_BUILD_GO=OFF
cmake --build "$build" -j "$(nproc)" --target cuda_dequantize_test cuda_quant_matvec_test \
  cuda_route_test cuda_elementwise_ops_test cuda_rows_and_experts_test cuda_attention_test \
  cuda_gemm_test block_decode_test dot_kernels_test device_decomposition_test expert_dispatch_test
log="$(mktemp)"
ctest --test-dir "$build" -L gpu -R "." --output-on-failure -V | tee "$log"
if grep -qE "\*\*\*Skipped|\[  SKIPPED \]" "$log"; then
  echo "gpu-check: a GPU test was skipped: no usable CUDA device here" >&2
  exit 1
fi
echo "gpu-check: every GPU test ran and passed"
