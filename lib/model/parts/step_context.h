// What every part of a layer needs during one forward step.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/backend/backend.h"
#include "lib/model/model.h"
#include "lib/model/telemetry.h"
#include "lib/moe/routing_history.h"

namespace moe {

// The activation of the model's feed-forward blocks, routed and shared alike.
inline GatedActivation FeedForwardActivation(const HParams& h) {
  if (h.relu_squared_ffn) return GatedActivation::kReluSquared;
  return h.swiglu_clamped ? GatedActivation::kSwigluClamped : GatedActivation::kSilu;
}

// A convolution layer reads its input's last rows (and a recurrent one, Mamba-2 or a gated delta
// net, its state) from the slot its cache carries; one shaped for attention alone would be read
// as a slot it does not have.
inline absl::Status CheckCarriedSlot(const KvLayerView& v, int64_t width, int64_t kernel,
                                     int64_t state_floats, int layer, absl::string_view what) {
  if (v.dtype == DType::kF32 && v.n_kv_heads == 1 && v.head_dim == width && v.state != nullptr &&
      v.state_floats == state_floats && v.conv_rows == std::max<int64_t>(0, kernel - 1)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "layer ", layer, " is a ", what,
      " layer, but the KV cache was not made with its rows and state (KvCacheFor makes caches "
      "for any model)"));
}

inline absl::Status CheckRecurrentRows(const KvLayerView& v, const HParams& h, int layer,
                                       absl::string_view what) {
  return CheckCarriedSlot(v, h.ssm_conv_channels(), h.ssm_conv_kernel, h.ssm_state_floats(), layer,
                          what);
}

struct StepContext {
  const Model& model;
  Backend* backend;
  absl::Span<const int32_t> positions;  // of the step's tokens, in batch order
  // Each token's sequence's routing history (RoutingHistory), or empty when no sequence has one.
  absl::Span<RoutingHistory* const> histories;
  Telemetry* telemetry;  // null: not measured
  // Per row of the step: the routed experts' weight bytes and multiply-adds, added to by the
  // mixture blocks (each token's cost; null: not counted).
  int64_t* expert_bytes = nullptr;
  int64_t* expert_macs = nullptr;
};

// Adds the seconds of its scope to a telemetry field (nothing without telemetry).
class StageTimer {
 public:
  StageTimer(Telemetry* t, double StageTimes::*field)
      : sink_(t ? &(t->time.*field) : nullptr), start_(std::chrono::steady_clock::now()) {}
  ~StageTimer() {
    if (sink_) {
      *sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  double* sink_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace moe
