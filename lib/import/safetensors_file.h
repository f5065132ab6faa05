// Reader for the safetensors format: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the tensor bytes.
// Trusts nothing: the header length, the JSON, every dtype, shape and offset are checked against
// the file before a tensor is handed out, and tensors may not overlap.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/base/dtype.h"
#include "lib/base/mapped_file.h"

namespace moe {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;      // as the file spells it: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;  // set for the types libmoe computes with (F32, F16, BF16)
  std::vector<int64_t> shape;  // outermost first, as in the file
  absl::Span<const uint8_t> data;
};

class SafetensorsFile {
 public:
  // Maps and validates `path`.
  static absl::StatusOr<std::shared_ptr<const SafetensorsFile>> Open(const std::string& path);
  // Validates bytes that the caller keeps alive (fuzzing, tests); `what` names them in errors.
  static absl::StatusOr<std::shared_ptr<const SafetensorsFile>> FromBytes(
      absl::Span<const uint8_t> bytes, std::string what);

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(absl::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  // The whole file as mapped (empty for FromBytes).
  absl::Span<const uint8_t> bytes() const;

 private:
  SafetensorsFile() = default;
  absl::Status Parse(absl::Span<const uint8_t> bytes);

  std::string path_;
  std::unique_ptr<MappedFile> file_;  // null for FromBytes
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace moe
