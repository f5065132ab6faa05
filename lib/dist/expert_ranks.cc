#include "lib/dist/expert_ranks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace moe {
namespace {

absl::Status CheckShape(int n_layer, int n_expert, int world, const std::vector<bool>& routed) {
  if (world < 1) return absl::InvalidArgumentError(absl::StrCat("a world of ", world, " ranks"));
  if (n_layer < 0 || n_expert < 1 || static_cast<int>(routed.size()) != n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(n_layer, " layers of ", n_expert, " experts, ",
                                                   routed.size(), " layers marked routed or not"));
  }
  return absl::OkStatus();
}

}  // namespace

ExpertRanks::ExpertRanks(int world, const std::vector<std::vector<int32_t>>& owner)
    : world_(world) {
  holders_.resize(owner.size());
  for (size_t l = 0; l < owner.size(); ++l) {
    holders_[l].resize(owner[l].size());
    for (size_t e = 0; e < owner[l].size(); ++e) {
      if (owner[l][e] >= 0) holders_[l][e] = {owner[l][e]};
    }
  }
}

absl::StatusOr<ExpertRanks> ExpertRanks::RoundRobin(int n_layer, int n_expert, int world,
                                                    const std::vector<bool>& routed) {
  if (absl::Status s = CheckShape(n_layer, n_expert, world, routed); !s.ok()) return s;
  std::vector<std::vector<int32_t>> owner(n_layer, std::vector<int32_t>(n_expert, -1));
  for (int l = 0; l < n_layer; ++l) {
    if (!routed[l]) continue;
    for (int e = 0; e < n_expert; ++e) owner[l][e] = (e + l) % world;
  }
  return ExpertRanks(world, std::move(owner));
}

absl::StatusOr<ExpertRanks> ExpertRanks::Balanced(const RoutingProfile& profile, int world,
                                                  const std::vector<bool>& routed) {
  const int n_layer = static_cast<int>(profile.counts.size());
  const int n_expert = n_layer > 0 ? static_cast<int>(profile.counts[0].size()) : 0;
  if (absl::Status s = CheckShape(n_layer, n_expert, world, routed); !s.ok()) return s;
  const int most = (n_expert + world - 1) / world;
  std::vector<std::vector<int32_t>> owner(n_layer, std::vector<int32_t>(n_expert, -1));
  for (int l = 0; l < n_layer; ++l) {
    if (!routed[l]) continue;
    const std::vector<int64_t>& counts = profile.counts[l];
    std::vector<int32_t> order(n_expert);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return counts[a] > counts[b]; });
    std::vector<int64_t> load(world, 0);
    std::vector<int> held(world, 0);
    for (int32_t e : order) {
      int best = -1;
      for (int r = 0; r < world; ++r) {
        if (held[r] >= most) continue;
        if (best < 0 || load[r] < load[best]) best = r;
      }
      owner[l][e] = best;
      load[best] += counts[e];
      ++held[best];
    }
  }
  return ExpertRanks(world, std::move(owner));
}

absl::Status ExpertRanks::AddReplicas(const RoutingProfile& profile, int n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(n, " replicas"));
  if (static_cast<int>(profile.counts.size()) != n_layer() ||
      (n_layer() > 0 && static_cast<int>(profile.counts[0].size()) != n_expert())) {
    return absl::InvalidArgumentError("the routing profile is for another model");
  }
  if (world_ == 1 || n == 0) return absl::OkStatus();
  for (int l = 0; l < n_layer(); ++l) {
    if (owner(l, 0) < 0) continue;  // no routed experts
    const std::vector<int64_t>& counts = profile.counts[l];
    const int n_expert = static_cast<int>(counts.size());
    auto load = [&] {
      std::vector<double> per_rank(world_, 0.0);
      for (int e = 0; e < n_expert; ++e) {
        const auto h = holders(l, e);
        for (int32_t r : h) per_rank[r] += static_cast<double>(counts[e]) / h.size();
      }
      return per_rank;
    };
    std::vector<int32_t> order(n_expert);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return counts[a] > counts[b]; });
    for (int i = 0; i < std::min(n, n_expert); ++i) {
      const int e = order[i];
      const std::vector<double> per_rank = load();
      int best = -1;
      for (int r = 0; r < world_; ++r) {
        if (holds(r, l, e)) continue;
        if (best < 0 || per_rank[r] < per_rank[best]) best = r;
      }
      if (best >= 0) holders_[l][e].push_back(best);
    }
  }
  return absl::OkStatus();
}

bool ExpertRanks::holds(int rank, int layer, int expert) const {
  const auto h = holders(layer, expert);
  return std::find(h.begin(), h.end(), rank) != h.end();
}

std::vector<ExpertKey> ExpertRanks::OwnedBy(int rank) const {
  std::vector<ExpertKey> out;
  for (int l = 0; l < n_layer(); ++l) {
    for (int e = 0; e < n_expert(); ++e) {
      if (holds(rank, l, e)) out.push_back({l, e});
    }
  }
  return out;
}

absl::Status ExpertRanks::KeepOwnExperts(int rank, ModelSpec* spec) const {
  if (rank < 0 || rank >= world_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of a world of ", world_));
  }
  if (spec == nullptr) return absl::InvalidArgumentError("no model");
  const HParams& h = spec->hp;
  if (n_layer() != h.n_layer || (n_layer() > 0 && n_expert() != h.n_expert)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the placement is for ", n_layer(), " layers of ", n_expert(),
                     " experts, the model has ", h.n_layer, " of ", h.n_expert));
  }
  auto elsewhere = [&](int layer, int expert) {
    return layer >= 0 && layer < h.n_layer && expert >= 0 && expert < h.n_expert &&
           owner(layer, expert) >= 0 && !holds(rank, layer, expert);
  };
  // What each absent expert costs, before its tensors go.
  std::vector<std::vector<AbsentExpert>> absent(h.n_layer, std::vector<AbsentExpert>(h.n_expert));
  for (const TensorSpec& t : spec->tensors) {
    if (t.expert < 0 || !elsewhere(t.layer, t.expert)) continue;
    AbsentExpert& a = absent[t.layer][t.expert];
    a.bytes += static_cast<int64_t>(t.byte_size());
    a.params += t.num_elements();
  }
  std::erase_if(spec->tensors,
                [&](const TensorSpec& t) { return t.expert >= 0 && elsewhere(t.layer, t.expert); });
  spec->absent_dense.clear();
  if (dense_on_root_only_ && rank != 0) {
    // Everything but the experts' own tensors stays on rank 0; the stacked expert biases
    // ([n_expert x rows] per layer) go with the experts.
    auto dense = [](const TensorSpec& t) {
      return t.expert < 0 && !absl::EndsWith(t.name, "_exps.bias");
    };
    std::vector<TensorSpec> kept;
    for (TensorSpec& t : spec->tensors) {
      if (dense(t)) {
        t.data = {};
        spec->absent_dense.push_back(std::move(t));
      } else {
        kept.push_back(std::move(t));
      }
    }
    spec->tensors = std::move(kept);
  }
  spec->absent_experts.clear();
  for (int l = 0; l < h.n_layer; ++l) {
    for (int e = 0; e < h.n_expert; ++e) {
      if (!elsewhere(l, e)) continue;
      absent[l][e].id = {l, e};
      spec->absent_experts.push_back(absent[l][e]);
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> ExpertRanks::LoadOf(const std::vector<std::vector<int64_t>>& counts) const {
  std::vector<double> load(world_, 0.0);
  for (int l = 0; l < n_layer() && l < static_cast<int>(counts.size()); ++l) {
    for (int e = 0; e < n_expert() && e < static_cast<int>(counts[l].size()); ++e) {
      const auto h = holders(l, e);
      for (int32_t r : h) load[r] += static_cast<double>(counts[l][e]) / h.size();
    }
  }
  std::vector<int64_t> out(world_);
  for (int r = 0; r < world_; ++r) out[r] = static_cast<int64_t>(std::llround(load[r]));
  return out;
}

}  // namespace moe
