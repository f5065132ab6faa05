// Which rank holds each routed expert when the experts are spread over ranks (expert
// parallelism): placement as data, one more tier of the expert store's placement. Every rank
// holds the non-expert weights and the experts assigned to it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "lib/model/model_spec.h"
#include "lib/moe/expert_cache.h"
#include "lib/moe/routing_profile.h"

namespace moe {

class ExpertRanks {
 public:
  // Round robin within each layer, shifted by the layer (expert e of layer l on rank
  // (e + l) % world): every rank holds n_expert / world experts of each layer, give or take one.
  // routed[l]: whether layer l has routed experts (the others assign nothing).
  static absl::StatusOr<ExpertRanks> RoundRobin(int n_layer, int n_expert, int world,
                                                const std::vector<bool>& routed);
  // Balanced by a routing profile's measured load: per layer, the most chosen experts first, each
  // to the rank with the least load so far among those holding fewer than ceil(n_expert / world)
  // of the layer's experts (so memory stays even too); ties go to the lower rank.
  static absl::StatusOr<ExpertRanks> Balanced(const RoutingProfile& profile, int world,
                                              const std::vector<bool>& routed);

  // Gives each routed layer's `n` most chosen experts (by `profile`'s counts) one more holder:
  // the rank with the least load among those not holding it yet, a token's share of an expert's
  // load going to each of its holders alike. A step then splits an expert's tokens between its
  // holders (in holder order, the first rows to the owner), so no one rank takes all of a hot
  // expert; each replica costs its holder the expert's memory. With one rank, nothing to do.
  absl::Status AddReplicas(const RoutingProfile& profile, int n);

  int world() const { return world_; }
  // The rank holding the expert (its first holder); -1 for a layer without routed experts.
  int owner(int layer, int expert) const {
    const std::vector<int32_t>& h = holders_[layer][expert];
    return h.empty() ? -1 : h.front();
  }
  // Every rank holding the expert, the owner first (empty for a layer without routed experts).
  absl::Span<const int32_t> holders(int layer, int expert) const { return holders_[layer][expert]; }
  bool holds(int rank, int layer, int expert) const;
  // The experts a rank holds, layer by layer.
  std::vector<ExpertKey> OwnedBy(int rank) const;
  // Per rank: the choices of `counts` ([layer][expert]) its experts would serve (an expert's
  // split evenly between its holders).
  std::vector<int64_t> LoadOf(const std::vector<std::vector<int64_t>>& counts) const;
  // Drops from `spec` the tensors of the experts other ranks hold (ModelSpec::absent_experts), so
  // that `rank` loads the non-expert weights and its own experts only (with dense_on_root_only,
  // a rank other than 0 loads its experts only: the rest goes to ModelSpec::absent_dense). An
  // error unless the placement fits the spec's layers and experts.
  absl::Status KeepOwnExperts(int rank, ModelSpec* spec) const;

  // Where the non-expert weights (attention, norms, routers, shared experts, embedding, head)
  // live. By default on every rank: each runs the whole step on the same tokens and only the
  // routed experts' outputs travel. With dense_on_root_only, on rank 0 alone: rank 0 runs the
  // step and sends each MoE layer's inputs and routing to the others, which run their experts
  // and send the outputs back; the others hold their experts and nothing else.
  void set_dense_on_root_only(bool on) { dense_on_root_only_ = on; }
  bool dense_on_root_only() const { return dense_on_root_only_; }

 private:
  // owner: [layer][expert] -> rank, -1 for a layer without routed experts.
  ExpertRanks(int world, const std::vector<std::vector<int32_t>>& owner);
  int n_layer() const { return static_cast<int>(holders_.size()); }
  int n_expert() const { return holders_.empty() ? 0 : static_cast<int>(holders_[0].size()); }
  int world_ = 1;
  bool dense_on_root_only_ = false;
  // [layer][expert] -> the ranks holding it, the owner first (AddReplicas adds the others); empty
  // for a layer without routed experts.
  std::vector<std::vector<std::vector<int32_t>>> holders_;
};

}  // namespace moe
