// Page-aligned anonymous memory (RAII), backed by transparent huge pages where the kernel allows:
// weights copied here are read at full speed whatever the state of the page cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

namespace moe {

class AnonymousMemory {
 public:
  static absl::StatusOr<std::unique_ptr<AnonymousMemory>> Allocate(size_t bytes);
  ~AnonymousMemory();
  AnonymousMemory(const AnonymousMemory&) = delete;
  AnonymousMemory& operator=(const AnonymousMemory&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  AnonymousMemory(uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t* data_;
  size_t size_;
};

}  // namespace moe
