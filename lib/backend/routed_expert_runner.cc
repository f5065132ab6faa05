#include "lib/backend/routed_expert_runner.h"

#include "absl/strings/str_cat.h"
#include "lib/backend/combine_core.h"

namespace moe {

absl::Status RoutedExpertRunner::Run(Backend& be, const Backend::RoutedExperts& r,
                                     const int32_t* ids, const float* weights,
                                     const float* shared_gate, float* x) {
  const int64_t n = r.n, k = r.k;
  const int32_t n_expert = static_cast<int32_t>(r.experts.size());
  if (n <= 0) return absl::OkStatus();
  for (int64_t s = 0; s < n * k; ++s) {
    if (ids[s] < -1 || ids[s] >= n_expert) {
      return absl::InternalError(
          absl::StrCat("routing chose expert ", ids[s], " of a layer with ", n_expert));
    }
    if (ids[s] >= 0 && r.experts[ids[s]].down.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("expert ", ids[s], " has no weights in this process"));
    }
  }
  lists_.Build(ids, n, k, n_expert);
  if (outs_.size() < static_cast<size_t>(n_expert)) outs_.resize(n_expert);

  // The chosen experts in id order, then the shared expert: the host path's jobs.
  int64_t d = 0;
  jobs_.clear();
  for (int32_t e = 0; e < n_expert; ++e) {
    const absl::Span<const int32_t> tokens = lists_.TokensOf(e);
    const int64_t m = static_cast<int64_t>(tokens.size());
    if (m == 0) continue;
    const Backend::ExpertMatrices& w = r.experts[e];
    d = w.down.rows;
    absl::StatusOr<float*> out = outs_[e].Resize(be, m * d);
    if (!out.ok()) return out.status();
    jobs_.push_back({w.gate, w.up, w.down, r.in, tokens.data(), m, *out, w.gate_bias, w.up_bias,
                     w.down_bias, r.activation});
  }
  if (r.shared != nullptr) {
    const Backend::ExpertMatrices& s = *r.shared;
    d = s.down.rows;
    jobs_.push_back({s.gate, s.up, s.down, r.in, nullptr, n, r.shared_out, s.gate_bias, s.up_bias,
                     s.down_bias, r.activation});
  }
  if (jobs_.empty()) return absl::OkStatus();
  be.RunExperts(jobs_);

  const int64_t terms = k + (r.shared != nullptr ? 1 : 0);
  src_.resize(n * terms);
  weight_.resize(n * terms);
  ListCombineTerms(
      n, k, ids, weights,
      [&](int64_t t, int64_t j) {
        return outs_[ids[t * k + j]].data() + lists_.PlaceOf(t * k + j) * d;
      },
      r.shared != nullptr ? r.shared_out : nullptr, shared_gate, d, src_.data(), weight_.data());
  be.AddWeightedRows(n, terms, d, src_.data(), weight_.data(), x);
  return absl::OkStatus();
}

}  // namespace moe
