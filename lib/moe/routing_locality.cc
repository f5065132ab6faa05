#include "lib/moe/routing_locality.h"

#include <algorithm>
#include <functional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe {
namespace {

// Counts over positions 0..n-1 with prefix sums in O(log n): the number of experts whose latest
// use falls in a range of the trace, which is an LRU stack distance.
class FenwickTree {
 public:
  explicit FenwickTree(size_t n) : tree_(n + 1, 0) {}
  void Add(size_t i, int64_t delta) {
    for (++i; i < tree_.size(); i += i & (~i + 1)) tree_[i] += delta;
  }
  int64_t PrefixSum(size_t n) const {  // positions [0, n)
    int64_t s = 0;
    for (; n > 0; n -= n & (~n + 1)) s += tree_[n];
    return s;
  }

 private:
  std::vector<int64_t> tree_;
};

absl::Status CheckTrace(const RoutingTrace& trace) {
  if (trace.n_expert <= 0 || trace.top_k <= 0 || trace.layers.empty()) {
    return absl::InvalidArgumentError("routing trace: no layers, experts or choices per token");
  }
  const size_t per_layer = trace.layers[0].size();
  if (per_layer % trace.top_k != 0) {
    return absl::InvalidArgumentError("routing trace: choices not a multiple of top_k");
  }
  for (size_t l = 0; l < trace.layers.size(); ++l) {
    if (trace.layers[l].size() != per_layer) {
      return absl::InvalidArgumentError(absl::StrCat("routing trace: layer ", l, " has ",
                                                     trace.layers[l].size(),
                                                     " choices, layer 0 has ", per_layer));
    }
    for (int32_t e : trace.layers[l]) {
      if (e < -1 || e >= trace.n_expert) {
        return absl::InvalidArgumentError(
            absl::StrCat("routing trace: layer ", l, " chose expert ", e, " of ", trace.n_expert));
      }
    }
  }
  return absl::OkStatus();
}

int BucketOf(int64_t distance) {
  int b = 0;
  while (b < static_cast<int>(kReuseBucketUpper.size()) && distance > kReuseBucketUpper[b]) ++b;
  return b;
}

void SummarizeReuse(std::vector<int64_t>& distances, LayerLocality* out) {
  if (distances.empty()) return;
  double sum = 0;
  for (int64_t d : distances) sum += static_cast<double>(d);
  out->mean_reuse = sum / static_cast<double>(distances.size());
  auto mid = distances.begin() + distances.size() / 2;
  std::nth_element(distances.begin(), mid, distances.end());
  out->median_reuse = *mid;
}

}  // namespace

int64_t RoutingTrace::tokens() const {
  return layers.empty() || top_k <= 0 ? 0 : static_cast<int64_t>(layers[0].size()) / top_k;
}

absl::StatusOr<RoutingLocality> AnalyzeRoutingLocality(const RoutingTrace& trace) {
  if (absl::Status s = CheckTrace(trace); !s.ok()) return s;
  const int64_t n_layer = static_cast<int64_t>(trace.layers.size());
  const int64_t n_expert = trace.n_expert, k = trace.top_k;
  RoutingLocality r;
  r.tokens = trace.tokens();
  r.experts = n_layer * n_expert;
  r.layers.resize(n_layer);
  r.stack_distance.assign(r.experts, 0);
  r.counts.assign(n_layer, std::vector<int64_t>(n_expert, 0));

  constexpr int64_t kNever = -1;
  std::vector<int64_t> last_token(r.experts, kNever);   // per (layer, expert)
  std::vector<int64_t> last_access(r.experts, kNever);  // position in the decode-order replay
  std::vector<std::vector<int64_t>> reuse(n_layer);
  FenwickTree latest(static_cast<size_t>(r.tokens * n_layer * k));
  int64_t position = 0;
  for (int64_t t = 0; t < r.tokens; ++t) {
    for (int64_t l = 0; l < n_layer; ++l) {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = trace.layers[l][t * k + j];
        if (e < 0) continue;
        const int64_t unit = l * n_expert + e;
        LayerLocality& layer = r.layers[l];
        ++layer.choices;
        ++r.choices;
        ++r.counts[l][e];
        if (last_token[unit] == kNever) {
          ++layer.first_uses;
        } else {
          const int64_t d = t - last_token[unit];
          ++layer.reuse_buckets[BucketOf(d)];
          reuse[l].push_back(d);
        }
        last_token[unit] = t;
        if (last_access[unit] == kNever) {
          ++r.cold;
        } else {
          // Experts whose latest use lies after this one's: the distinct experts used since.
          const int64_t since =
              latest.PrefixSum(position) - latest.PrefixSum(last_access[unit] + 1);
          ++r.stack_distance[since];
          latest.Add(last_access[unit], -1);
        }
        latest.Add(position, 1);
        last_access[unit] = position++;
      }
    }
  }
  for (int64_t l = 0; l < n_layer; ++l) SummarizeReuse(reuse[l], &r.layers[l]);
  return r;
}

double RoutingLocality::LruHitRate(int64_t capacity) const {
  if (choices == 0) return 0;
  int64_t hits = 0;
  for (int64_t d = 0; d < capacity && d < static_cast<int64_t>(stack_distance.size()); ++d) {
    hits += stack_distance[d];
  }
  return static_cast<double>(hits) / static_cast<double>(choices);
}

double RoutingLocality::StaticHitRate(int64_t capacity) const {
  if (choices == 0) return 0;
  std::vector<int64_t> all;
  for (const auto& layer : counts) all.insert(all.end(), layer.begin(), layer.end());
  std::sort(all.begin(), all.end(), std::greater<int64_t>());
  int64_t hits = 0;
  for (int64_t i = 0; i < capacity && i < static_cast<int64_t>(all.size()); ++i) hits += all[i];
  return static_cast<double>(hits) / static_cast<double>(choices);
}

}  // namespace moe
