// Writes GGUF v3 files that llama.cpp loads: metadata key/values and tensors in ggml layout.
// Used by moe-synth and moe-quantize so that libmoe and llama.cpp can run the very same file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "lib/base/dtype.h"
#include "lib/base/write_progress.h"

namespace moe {

class GgufWriter {
 public:
  void SetString(const std::string& key, const std::string& value);
  void SetU32(const std::string& key, uint32_t value);
  void SetF32(const std::string& key, float value);
  void SetBool(const std::string& key, bool value);
  void SetStringArray(const std::string& key, std::vector<std::string> values);
  void SetF32Array(const std::string& key, std::vector<float> values);
  void SetI32Array(const std::string& key, std::vector<int32_t> values);

  // shape outermost first (as TensorSpec); data must stay valid until Write returns.
  void AddTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                 absl::Span<const uint8_t> data);
  // A tensor of `bytes` bytes that `produce` writes into a buffer as Write reaches it, one at a
  // time (a quantizer's output, which held whole would take as much memory as the model). A
  // producer's error ends the write with the tensor's name, leaving no file.
  using Producer = std::function<absl::Status(absl::Span<uint8_t>)>;
  void AddTensor(const std::string& name, DType dtype, std::vector<int64_t> shape, size_t bytes,
                 Producer produce);

  // Atomically (a temporary file renamed into place). progress (may be empty) is told after
  // each tensor; returning false cancels (CANCELLED, no file).
  absl::Status Write(const std::string& path, const WriteProgress& progress = {}) const;

 private:
  struct KeyValue {
    std::string key;
    std::variant<std::string, uint32_t, float, bool, std::vector<std::string>, std::vector<float>,
                 std::vector<int32_t>>
        value;
  };
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    absl::Span<const uint8_t> data;
    size_t bytes = 0;
    Producer produce;  // set: data is empty, made by it
  };
  void Set(KeyValue kv);
  std::vector<KeyValue> kvs_;
  std::vector<Tensor> tensors_;
};

// ggml's type id for a DType.
uint32_t GgmlTypeOf(DType t);

class GgufFile;
// Copies every metadata key of `from` for which keep(key) is true, with its type.
void CopyMetadata(const GgufFile& from, GgufWriter& to,
                  const std::function<bool(const std::string&)>& keep);

}  // namespace moe
