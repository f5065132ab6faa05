#include "lib/backend/cpu/group_products.h"

#include <vector>

#include "lib/backend/cpu/dot_kernels.h"
#include "lib/backend/cpu/repack.h"

namespace moe {
namespace {

// Unpacks each row to its source layout and uses that type's row kernel.
template <SimdLevel kLevel>
void PortableGroupProducts(DType t, const uint8_t* group, int64_t cols, const Q8Block* x, int64_t n,
                           float* y, int64_t ldy) {
  const DType source = GroupSourceType(t);
  const QuantDotFn dot = GetQuantDot(source, kLevel);
  thread_local std::vector<uint8_t> row;
  row.resize(RowBytes(source, cols));
  for (int r = 0; r < kGroupRows; ++r) {
    UngroupRow(t, group, r, row.data(), cols);
    for (int64_t tok = 0; tok < n; ++tok)
      y[tok * ldy + r] = dot(row.data(), x + tok * (cols / 32), cols);
  }
}

template <DType kType, SimdLevel kLevel>
void Portable(const uint8_t* group, int64_t cols, const Q8Block* x, const SplitSums* /*xs*/,
              int64_t n, float* y, int64_t ldy, const uint8_t* /*next*/) {
  PortableGroupProducts<kLevel>(kType, group, cols, x, n, y, ldy);
}

template <SimdLevel kLevel>
GroupProductsFn PortableFor(DType t) {
  switch (t) {
    case DType::kQ8_0X16:
      return Portable<DType::kQ8_0X16, kLevel>;
    case DType::kQ4_0X16:
      return Portable<DType::kQ4_0X16, kLevel>;
    case DType::kQ4_KX16:
      return Portable<DType::kQ4_KX16, kLevel>;
    case DType::kQ6_KX16:
      return Portable<DType::kQ6_KX16, kLevel>;
    case DType::kQ5_KX16:
      return Portable<DType::kQ5_KX16, kLevel>;
    case DType::kMXFP4X16:
      return Portable<DType::kMXFP4X16, kLevel>;
    case DType::kQ2_KX16:
      return Portable<DType::kQ2_KX16, kLevel>;
    case DType::kQ3_KX16:
      return Portable<DType::kQ3_KX16, kLevel>;
    case DType::kQ5_0X16:
      return Portable<DType::kQ5_0X16, kLevel>;
    case DType::kIQ4_NLX16:
      return Portable<DType::kIQ4_NLX16, kLevel>;
    case DType::kIQ4_XSX16:
      return Portable<DType::kIQ4_XSX16, kLevel>;
    case DType::kQ4_1X16:
      return Portable<DType::kQ4_1X16, kLevel>;
    case DType::kQ5_1X16:
      return Portable<DType::kQ5_1X16, kLevel>;
    default:
      return nullptr;
  }
}

}  // namespace

GroupProductsFn GetGroupProducts(DType t, SimdLevel level, ActivationScales scales) {
  switch (level) {
    case SimdLevel::kAvx512Vnni:
      return kernels::Avx512VnniGroupProducts(t, scales);
    case SimdLevel::kAvxVnni:
      if (GroupProductsFn f = kernels::AvxVnniGroupProducts(t)) return f;
      return PortableFor<SimdLevel::kAvx2>(t);
    case SimdLevel::kAvx512:
    case SimdLevel::kAvx2:
      if (GroupProductsFn f = kernels::Avx2GroupProducts(t)) return f;
      return PortableFor<SimdLevel::kAvx2>(t);
    case SimdLevel::kScalar:
      break;
  }
  return PortableFor<SimdLevel::kScalar>(t);
}

}  // namespace moe
