// An array in a backend's memory (MemorySpace::Allocate), freed with the buffer. The forward pass
// keeps its activations and scratch in these, so a device backend runs a step without host copies
// between operations.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "lib/backend/memory_space.h"

namespace moe {

template <typename T>
class BackendBuffer {
 public:
  BackendBuffer() = default;
  ~BackendBuffer() { Release(); }
  BackendBuffer(BackendBuffer&& o) noexcept
      : memory_(std::exchange(o.memory_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        capacity_(std::exchange(o.capacity_, 0)),
        size_(std::exchange(o.size_, 0)) {}
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      Release();
      memory_ = std::exchange(o.memory_, nullptr);
      data_ = std::exchange(o.data_, nullptr);
      capacity_ = std::exchange(o.capacity_, 0);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;

  // Room for count elements in `memory`; what the buffer held is not kept (it is
  // scratch, always written before it is read). Grows geometrically, so that steps of changing
  // sizes settle without allocating.
  absl::StatusOr<T*> Resize(MemorySpace& memory, int64_t count) {
    const int64_t want = std::max<int64_t>(count, 1);
    if (&memory != memory_ || want > capacity_) {
      const int64_t grown = &memory == memory_ ? std::max(want, 2 * capacity_) : want;
      Release();
      absl::StatusOr<void*> p = memory.Allocate(static_cast<size_t>(grown) * sizeof(T));
      if (!p.ok()) return p.status();
      memory_ = &memory;
      data_ = static_cast<T*>(*p);
      capacity_ = grown;
    }
    size_ = count;
    return data_;
  }

  T* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  void Release() {
    if (memory_ != nullptr) memory_->Free(data_);
    memory_ = nullptr;
    data_ = nullptr;
    capacity_ = size_ = 0;
  }

  MemorySpace* memory_ = nullptr;
  T* data_ = nullptr;
  int64_t capacity_ = 0;
  int64_t size_ = 0;
};

}  // namespace moe
