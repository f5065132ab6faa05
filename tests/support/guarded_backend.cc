#include "tests/support/guarded_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe::testing {
namespace {

size_t PageRounded(size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

}  // namespace

GuardedBackend::~GuardedBackend() {
  for (const auto& [p, size] : regions_) ::munmap(p, size);
}

void GuardedBackend::Protect(int prot) {
  for (const auto& [p, size] : regions_) {
    if (::mprotect(p, size, prot) != 0) {
      std::perror("mprotect");
      std::abort();
    }
  }
}

GuardedBackend::Open::Open(GuardedBackend* b) : b_(b) {
  ++b_->operations_;
  b_->Protect(PROT_READ | PROT_WRITE);
}

GuardedBackend::Open::~Open() { b_->Protect(PROT_NONE); }

absl::StatusOr<void*> GuardedBackend::Allocate(size_t bytes) {
  const size_t size = PageRounded(bytes);
  void* p = ::mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("mmap of ", size, " bytes failed"));
  }
  regions_.emplace(p, size);
  return p;
}

void GuardedBackend::Free(void* p) {
  auto it = regions_.find(p);
  if (it == regions_.end()) return;
  ::munmap(it->first, it->second);
  regions_.erase(it);
}

void GuardedBackend::Zero(void* p, size_t bytes) {
  Open open(this);
  inner_->Zero(p, bytes);
}

void GuardedBackend::CopyToHost(const void* src, size_t bytes, void* host) {
  Open open(this);
  inner_->CopyToHost(src, bytes, host);
}

void GuardedBackend::CopyFromHost(const void* host, size_t bytes, void* dst) {
  Open open(this);
  inner_->CopyFromHost(host, bytes, dst);
}

void GuardedBackend::CopyRows(const float* src, int64_t src_stride, int64_t n, int64_t len,
                              float* dst, int64_t dst_stride) {
  Open open(this);
  inner_->CopyRows(src, src_stride, n, len, dst, dst_stride);
}

void GuardedBackend::MatMul(const WeightView& w, const float* x, int64_t n, float* y) {
  Open open(this);
  inner_->MatMul(w, x, n, y);
}

void GuardedBackend::MatMulShared(absl::Span<const WeightView> ws, const float* x, int64_t n,
                                  absl::Span<float* const> ys,
                                  absl::Span<const float* const> biases) {
  Open open(this);
  inner_->MatMulShared(ws, x, n, ys, biases);
}

void GuardedBackend::RunExperts(absl::Span<const ExpertJob> jobs) {
  Open open(this);
  inner_->RunExperts(jobs);
}

void GuardedBackend::RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                             float* y) {
  Open open(this);
  inner_->RmsNorm(x, weight, n, dim, eps, y);
}

void GuardedBackend::Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
                          const int32_t* positions, const RopeParams& rope) {
  Open open(this);
  inner_->Rope(x, n, n_heads, head_dim, positions, rope);
}

void GuardedBackend::StoreKv(const float* k, const float* v, int64_t n, const int32_t* positions,
                             const KvLayerView& kv) {
  Open open(this);
  inner_->StoreKv(k, v, n, positions, kv);
}

void GuardedBackend::ShortConv(const float* bcx, int64_t n, const int32_t* positions,
                               const float* kernel, int64_t kernel_len, const KvLayerView& state,
                               float* y) {
  Open open(this);
  inner_->ShortConv(bcx, n, positions, kernel, kernel_len, state, y);
}

void GuardedBackend::SsmConv(const float* xbc, int64_t xbc_stride, int64_t n,
                             const int32_t* positions, const float* kernel, const float* bias,
                             int64_t kernel_len, const KvLayerView& state, float* out) {
  Open open(this);
  inner_->SsmConv(xbc, xbc_stride, n, positions, kernel, bias, kernel_len, state, out);
}

void GuardedBackend::SsmScan(const SsmScanArgs& args, int64_t n, const int32_t* positions,
                             const KvLayerView& state, float* y) {
  Open open(this);
  inner_->SsmScan(args, n, positions, state, y);
}

void GuardedBackend::GatedDeltaNet(const GatedDeltaArgs& args, int64_t n, const int32_t* positions,
                                   const KvLayerView& state, float* y) {
  Open open(this);
  inner_->GatedDeltaNet(args, n, positions, state, y);
}

void GuardedBackend::MultiplyByGate(GateFunction f, const float* gate, int64_t count, float* x) {
  Open open(this);
  inner_->MultiplyByGate(f, gate, count, x);
}

void GuardedBackend::GatedGroupRmsNorm(const float* y, const float* z, int64_t z_stride,
                                       const float* weight, int64_t n, int64_t dim, int64_t groups,
                                       float eps, float* out) {
  Open open(this);
  inner_->GatedGroupRmsNorm(y, z, z_stride, weight, n, dim, groups, eps, out);
}

void GuardedBackend::Attention(const float* q, int64_t n, int64_t n_heads, const int32_t* positions,
                               const KvLayerView& kv, float* out, const AttentionOptions& options) {
  Open open(this);
  inner_->Attention(q, n, n_heads, positions, kv, out, options);
}

void GuardedBackend::AttentionBatch(absl::Span<const AttentionSequence> seqs, int64_t n_heads,
                                    const AttentionOptions& options) {
  Open open(this);
  inner_->AttentionBatch(seqs, n_heads, options);
}

void GuardedBackend::Axpy(float a, const float* x, int64_t count, float* y) {
  Open open(this);
  inner_->Axpy(a, x, count, y);
}

void GuardedBackend::Scale(float a, float* x, int64_t count) {
  Open open(this);
  inner_->Scale(a, x, count);
}

void GuardedBackend::ScaleRows(float* x, int64_t n, int64_t dim, const float* scales) {
  Open open(this);
  inner_->ScaleRows(x, n, dim, scales);
}

void GuardedBackend::RouteTokens(const TokenRouting& c, const float* logits,
                                 const int32_t* positions, int64_t n, int32_t* experts,
                                 float* weights, float* entropy) {
  Open open(this);
  inner_->RouteTokens(c, logits, positions, n, experts, weights, entropy);
}

void GuardedBackend::RunRoutedExperts(const RoutedExperts& r, float* x) {
  ++routed_layer_runs_;
  Open open(this);
  inner_->RunRoutedExperts(r, x);
}

void GuardedBackend::AddWeightedRows(int64_t n, int64_t k, int64_t dim, const float* const* src,
                                     const float* w, float* x) {
  Open open(this);
  inner_->AddWeightedRows(n, k, dim, src, w, x);
}

void GuardedBackend::GetRows(const WeightView& table, const int32_t* ids, int64_t n, float* dst) {
  Open open(this);
  inner_->GetRows(table, ids, n, dst);
}

}  // namespace moe::testing
