// Embedding rows on the GPU: one thread per (token, block) for quantized tables, decoded by the
// CPU's block decoders (lib/backend/block_decode.h, --fmad=false), and one per (token, value) for
// float tables, converted as the CPU converts (lib/base/half.h): the CPU's rows bit for bit.
#include <cuda_runtime.h>

#include "kernels/cuda_buffer.h"
#include "kernels/get_rows.h"
#include "lib/backend/block_decode.h"
#include "lib/base/half.h"

namespace moe::cuda {
namespace {

constexpr int kThreads = 128;

// Values per unit of work and bytes per unit: a block of a quantized type, or one float value.
struct Unit {
  int64_t elems = 0, bytes = 0;
};

Unit UnitOf(DType t) {
  const BlockShape s = QuantBlockShape(t);
  if (s.elems != 0) return {s.elems, s.bytes};
  switch (t) {
    case DType::kF32:
      return {1, 4};
    case DType::kF16:
    case DType::kBF16:
      return {1, 2};
    default:
      return {};
  }
}

__global__ void GetRowsKernel(DType t, const uint8_t* table, int64_t rows, int64_t cols,
                              const int32_t* ids, int64_t n, Unit unit, float* dst) {
  const int64_t per_row = cols / unit.elems;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= n * per_row) return;
  const int64_t token = index / per_row, u = index % per_row;
  float* out = dst + token * cols + u * unit.elems;
  const int32_t id = ids[token];
  if (id < 0 || id >= rows) {
    for (int64_t i = 0; i < unit.elems; ++i) out[i] = 0.f;
    return;
  }
  const uint8_t* src = table + (id * per_row + u) * unit.bytes;
  switch (t) {
    case DType::kF32:
      *out = LoadF32(src);
      break;
    case DType::kF16:
      *out = HalfToFloat(LoadU16(src));
      break;
    case DType::kBF16:
      *out = Bf16ToFloat(LoadU16(src));
      break;
    default:
      DecodeQuantBlock(t, src, out);
  }
}

std::string CheckShape(DType t, int64_t rows, int64_t cols, int64_t n) {
  const Unit unit = UnitOf(t);
  if (unit.elems == 0) return "not a table type (F32, F16, BF16 or a quantized block type)";
  if (rows < 0 || n < 0 || cols <= 0 || cols % unit.elems != 0)
    return "rows of whole blocks needed";
  return {};
}

}  // namespace

std::string GetRows(DType t, const void* table, int64_t rows, int64_t cols, const int32_t* ids,
                    int64_t n, float* dst, void* stream) {
  if (std::string e = CheckShape(t, rows, cols, n); !e.empty()) return e;
  const Unit unit = UnitOf(t);
  const int64_t work = n * (cols / unit.elems);
  if (work == 0) return {};
  const int64_t grid = (work + kThreads - 1) / kThreads;
  if (grid > 0x7fffffff) return "too many rows for one launch";
  GetRowsKernel<<<static_cast<unsigned>(grid), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      t, static_cast<const uint8_t*>(table), rows, cols, ids, n, unit, dst);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return CudaError("launch", e);
  return {};
}

std::string GetRowsFromHost(DType t, const void* table, size_t table_bytes, int64_t rows,
                            int64_t cols, const int32_t* ids, int64_t n, float* dst) {
  if (std::string e = CheckShape(t, rows, cols, n); !e.empty()) return e;
  if (n == 0) return {};
  const size_t out_bytes = static_cast<size_t>(n * cols) * sizeof(float);
  DeviceBuffer dt, di, dd;
  if (std::string e = dt.CopyIn(table, table_bytes); !e.empty()) return e;
  if (std::string e = di.CopyIn(ids, static_cast<size_t>(n) * sizeof(int32_t)); !e.empty()) {
    return e;
  }
  if (std::string e = dd.Allocate(out_bytes); !e.empty()) return e;
  if (std::string e = GetRows(t, dt.p, rows, cols, static_cast<const int32_t*>(di.p), n,
                              static_cast<float*>(dd.p), nullptr);
      !e.empty()) {
    return e;
  }
  if (std::string e = Synchronize(); !e.empty()) return e;
  return dd.CopyOut(dst, out_bytes);
}

}  // namespace moe::cuda
