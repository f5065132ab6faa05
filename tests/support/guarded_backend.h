// Test support: a backend whose memory the host cannot touch between operations, as a GPU's
// device memory cannot be. It runs another backend's operations, but what Allocate gives is
// mapped PROT_NONE except while one of its operations (or copies) runs: code that reads or writes
// an activation, K/V row or scratch buffer directly instead of through the backend faults at once.
#pragma once

#include <cstddef>
#include <map>
#include <memory>

#include "lib/backend/backend.h"

namespace moe::testing {

class GuardedBackend final : public Backend {
 public:
  explicit GuardedBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  ~GuardedBackend() override;

  // Operations run so far (each opens the memory once).
  int64_t operations() const { return operations_; }
  size_t live_allocations() const { return regions_.size(); }
  // RunRoutedExperts calls so far (mixture layers run with their routing in place).
  int64_t routed_layer_runs() const { return routed_layer_runs_; }

  absl::string_view name() const override { return "guarded"; }
  int num_threads() const override { return inner_->num_threads(); }
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* p) override;
  void Zero(void* p, size_t bytes) override;
  void CopyToHost(const void* src, size_t bytes, void* host) override;
  void CopyFromHost(const void* host, size_t bytes, void* dst) override;
  void CopyRows(const float* src, int64_t src_stride, int64_t n, int64_t len, float* dst,
                int64_t dst_stride) override;
  void MatMul(const WeightView& w, const float* x, int64_t n, float* y) override;
  void MatMulShared(absl::Span<const WeightView> ws, const float* x, int64_t n,
                    absl::Span<float* const> ys, absl::Span<const float* const> biases) override;
  void RunExperts(absl::Span<const ExpertJob> jobs) override;
  void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
               float* y) override;
  void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            const RopeParams& rope) override;
  void StoreKv(const float* k, const float* v, int64_t n, const int32_t* positions,
               const KvLayerView& kv) override;
  void ShortConv(const float* bcx, int64_t n, const int32_t* positions, const float* kernel,
                 int64_t kernel_len, const KvLayerView& state, float* y) override;
  void SsmConv(const float* xbc, int64_t xbc_stride, int64_t n, const int32_t* positions,
               const float* kernel, const float* bias, int64_t kernel_len, const KvLayerView& state,
               float* out) override;
  void SsmScan(const SsmScanArgs& args, int64_t n, const int32_t* positions,
               const KvLayerView& state, float* y) override;
  void GatedDeltaNet(const GatedDeltaArgs& args, int64_t n, const int32_t* positions,
                     const KvLayerView& state, float* y) override;
  void MultiplyByGate(GateFunction f, const float* gate, int64_t count, float* x) override;
  void GatedGroupRmsNorm(const float* y, const float* z, int64_t z_stride, const float* weight,
                         int64_t n, int64_t dim, int64_t groups, float eps, float* out) override;
  void Attention(const float* q, int64_t n, int64_t n_heads, const int32_t* positions,
                 const KvLayerView& kv, float* out, const AttentionOptions& options) override;
  void AttentionBatch(absl::Span<const AttentionSequence> seqs, int64_t n_heads,
                      const AttentionOptions& options) override;
  // Answers routes_in_place as told (default false, as the CPU): true sends the mixture block
  // down the path a GPU takes, routing kept in this backend's memory.
  void set_routes_in_place(bool on) { routes_in_place_ = on; }
  bool routes_in_place() const override { return routes_in_place_; }
  void RouteTokens(const TokenRouting& c, const float* logits, const int32_t* positions, int64_t n,
                   int32_t* experts, float* weights, float* entropy) override;
  void RunRoutedExperts(const RoutedExperts& r, float* x) override;
  absl::Status TakeError() override { return inner_->TakeError(); }
  void Axpy(float a, const float* x, int64_t count, float* y) override;
  void Scale(float a, float* x, int64_t count) override;
  void ScaleRows(float* x, int64_t n, int64_t dim, const float* scales) override;
  void AddWeightedRows(int64_t n, int64_t k, int64_t dim, const float* const* src, const float* w,
                       float* x) override;
  void GetRows(const WeightView& table, const int32_t* ids, int64_t n, float* dst) override;

 private:
  // Opens every region for the scope of one operation.
  class Open {
   public:
    explicit Open(GuardedBackend* b);
    ~Open();

   private:
    GuardedBackend* b_;
  };
  void Protect(int prot);

  std::unique_ptr<Backend> inner_;
  std::map<void*, size_t> regions_;  // start -> mapped bytes
  int64_t operations_ = 0;
  bool routes_in_place_ = false;
  int64_t routed_layer_runs_ = 0;
};

}  // namespace moe::testing
