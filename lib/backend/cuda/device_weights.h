// The device's copy of a model's weights (CUDA backend, host side): every uploaded tensor
// by its host address, so an operation handed host weight pointers (WeightView, norms, biases,
// sinks) finds their device copies.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/backend/cuda_backend.h"
#include "lib/backend/weight_view.h"

namespace moe::cuda {

class CudaWeights final : public DeviceWeights {
 public:
  static absl::StatusOr<std::shared_ptr<const CudaWeights>> Upload(
      absl::Span<const HostTensor> tensors, const DeviceWeightsOptions& options);
  ~CudaWeights() override;
  CudaWeights(const CudaWeights&) = delete;
  CudaWeights& operator=(const CudaWeights&) = delete;

  const DeviceWeightsInfo& info() const override { return info_; }
  int device() const { return device_; }

  // The device copy of the rows a view covers (whole rows of one uploaded tensor, possibly a
  // slice of it); nullopt when they are not on the device.
  std::optional<WeightView> Find(const WeightView& w) const;
  // The device copy of F32 values uploaded as they were (norms, biases, sinks); null if none.
  const float* Find(const float* host) const;

 private:
  CudaWeights() = default;
  struct Entry {
    const uint8_t* host = nullptr;
    size_t host_bytes = 0;
    uint8_t* device = nullptr;
    size_t host_row_bytes = 0, device_row_bytes = 0;
    DType host_dtype = DType::kF32, device_dtype = DType::kF32;
  };
  const Entry* EntryOf(const uint8_t* host) const;

  int device_ = 0;
  DeviceWeightsInfo info_;
  std::vector<Entry> entries_;  // ascending host address
};

}  // namespace moe::cuda
