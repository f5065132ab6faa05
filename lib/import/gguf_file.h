// A GGUF v2/v3 file, parsed and bounds-checked; metadata values and tensor data are views into
// the mapped file, which this object keeps alive.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/base/dtype.h"
#include "lib/base/mapped_file.h"

namespace moe {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// One metadata value. Scalars are decoded; arrays keep their element type, count and raw bytes.
struct GgufValue {
  GgufType type;
  // Scalars (integers and bools widened; floats as double).
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  absl::string_view str;
  // Arrays.
  GgufType elem_type = GgufType::kU8;
  uint64_t count = 0;
  std::vector<absl::string_view> strings;  // string arrays, decoded
  absl::Span<const uint8_t> raw;           // numeric arrays, little-endian elements
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the contiguous dimension
  uint32_t ggml_type;
  uint64_t offset;  // relative to the data section
  absl::Span<const uint8_t> data;
};

class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses bytes owned by the caller (kept alive for the GgufFile's lifetime).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(absl::Span<const uint8_t> bytes,
                                                         std::shared_ptr<const void> owner);

  uint32_t version() const { return version_; }
  // The whole file's bytes (tensor data lies inside them).
  absl::Span<const uint8_t> bytes() const { return bytes_; }
  const std::vector<std::string>& keys() const { return key_order_; }
  const GgufValue* Find(absl::string_view key) const;
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(absl::string_view name) const;

  // Typed getters: NotFound when absent, InvalidArgument when of an incompatible type.
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<uint64_t> GetUint(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(absl::string_view key) const;
  absl::StatusOr<std::vector<float>> GetFloatArray(absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(absl::string_view key) const;

 private:
  GgufFile() = default;
  std::shared_ptr<const void> owner_;
  absl::Span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  std::vector<std::string> key_order_;
  absl::flat_hash_map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  absl::flat_hash_map<std::string, size_t> tensor_index_;
};

// ggml type ids (ggml.h) that the importer understands.
inline constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6,
                          kGgmlQ5_1 = 7, kGgmlQ8_0 = 8, kGgmlQ2_K = 10, kGgmlQ3_K = 11,
                          kGgmlQ4_K = 12, kGgmlQ5_K = 13, kGgmlQ6_K = 14, kGgmlIQ4_NL = 20,
                          kGgmlIQ4_XS = 23, kGgmlBF16 = 30, kGgmlMXFP4 = 39;
std::string GgmlTypeName(uint32_t ggml_type);
// The DType of a ggml type id; Unimplemented (naming the type and the tensor) for others.
absl::StatusOr<DType> DTypeFromGgml(uint32_t ggml_type, absl::string_view tensor);

}  // namespace moe
