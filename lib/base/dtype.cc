#include "lib/base/dtype.h"

#include "absl/strings/match.h"

namespace moe {
namespace {
// Block sizes as GGUF defines them (ggml-common.h): Q8_0 = f16 d + 32 int8; Q4_0 = f16 d + 16 bytes
// of nibbles; K-quants use super-blocks of 256.
constexpr DTypeInfo kInfos[kNumDTypes] = {
    {"F32", 1, 4},           {"F16", 1, 2},         {"BF16", 1, 2},        {"Q8_0", 32, 34},
    {"Q4_0", 32, 18},        {"Q4_K", 256, 144},    {"Q5_K", 256, 176},    {"Q6_K", 256, 210},
    {"Q8_0R", 32, 34},       {"Q4_0R", 32, 18},     {"Q8_0X16", 32, 34},   {"Q4_0X16", 32, 18},
    {"Q4_KX16", 256, 144},   {"Q6_KX16", 256, 210}, {"Q5_KX16", 256, 176}, {"MXFP4", 32, 17},
    {"MXFP4X16", 32, 17},    {"Q2_K", 256, 84},     {"Q3_K", 256, 110},    {"Q2_KX16", 256, 84},
    {"Q3_KX16", 256, 110},   {"Q4_1", 32, 20},      {"Q5_0", 32, 22},      {"Q5_1", 32, 24},
    {"IQ4_NL", 32, 18},      {"IQ4_XS", 256, 136},  {"Q5_0X16", 32, 22},   {"IQ4_NLX16", 32, 18},
    {"IQ4_XSX16", 256, 136}, {"Q4_1X16", 32, 20},   {"Q5_1X16", 32, 24},
};
}  // namespace

const DTypeInfo& GetDTypeInfo(DType t) { return kInfos[static_cast<int>(t)]; }

std::optional<DType> DTypeFromName(absl::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (IsRuntimeLayout(static_cast<DType>(i))) continue;
    if (absl::EqualsIgnoreCase(kInfos[i].name, name)) return static_cast<DType>(i);
  }
  return std::nullopt;
}

}  // namespace moe
