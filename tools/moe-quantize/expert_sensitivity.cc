#include "tools/moe-quantize/expert_sensitivity.h"

#include <algorithm>
#include <queue>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/model/kv_cache_for.h"
#include "tools/moe-quantize/spec_reencoder.h"

namespace moe {
namespace {

// sum_i weight_i^2 |a_i - b_i|^2 over m rows of d: the squared error the combine step adds.
double WeightedSquaredError(const std::vector<float>& a, const std::vector<float>& b,
                            const std::vector<float>& weights, int64_t d) {
  double sum = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    double row = 0;
    for (int64_t j = 0; j < d; ++j) {
      const double diff = static_cast<double>(a[i * d + j]) - b[i * d + j];
      row += diff * diff;
    }
    sum += static_cast<double>(weights[i]) * weights[i] * row;
  }
  return sum;
}

}  // namespace

absl::StatusOr<Calibration> Calibrate(std::shared_ptr<const Model> model,
                                      absl::Span<const int32_t> tokens, int64_t window,
                                      int64_t max_rows, int threads) {
  const HParams& h = model->hp();
  if (tokens.empty()) return absl::InvalidArgumentError("no calibration tokens");
  if (window <= 0 || max_rows <= 0) {
    return absl::InvalidArgumentError("the calibration window and rows must be positive");
  }
  Calibration cal;
  cal.experts.resize(h.n_layer);
  for (int l = 0; l < h.n_layer; ++l) {
    if (model->layers()[l].parts.ffn == FeedForwardPart::kMixture) {
      cal.experts[l].resize(h.n_expert);
    }
  }
  const int64_t d = h.expert_dim();  // the experts' input rows
  std::mt19937_64 rng(0x6d6f652d63616cULL);
  auto backend = CreateCpuBackend(threads);
  Transformer tf(model, backend.get());
  tf.set_routing_observer([&](int layer, int64_t rows, int k, const int32_t* experts,
                              const float* weights, const float* inputs) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int j = 0; j < k; ++j) {
        const int32_t e = experts[r * k + j];
        if (e < 0) continue;
        ExpertSamples& s = cal.experts[layer][e];
        ++s.routed;
        int64_t slot = static_cast<int64_t>(s.weights.size());
        if (slot < max_rows) {
          s.weights.push_back(0);
          s.inputs.resize((slot + 1) * d);
        } else {
          // Reservoir sampling: every routed row is kept with the same chance.
          slot = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.routed));
          if (slot >= max_rows) continue;
        }
        std::copy_n(inputs + r * d, d, s.inputs.begin() + slot * d);
        s.weights[slot] = weights[r * k + j];
      }
    }
  });
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t start = 0; start < n; start += window) {
    const int64_t len = std::min(window, n - start);
    MOE_ASSIGN_OR_RETURN(KvCache cache, KvCacheFor(tf.model(), len, DType::kF32));
    MOE_RETURN_IF_ERROR(tf.Forward(tokens.subspan(start, len), cache, LogitsFor::kNone, nullptr));
  }
  cal.tokens = n;
  return cal;
}

absl::StatusOr<std::vector<std::vector<std::vector<TypeOption>>>> MeasureSensitivity(
    const Model& model, const Calibration& cal, absl::Span<const DType> candidates,
    const std::vector<std::vector<int64_t>>* routed_counts, Backend& backend) {
  const HParams& h = model.hp();
  const int64_t d = h.expert_dim();
  const GatedActivation activation = FeedForwardActivation(h);
  std::vector<std::vector<std::vector<TypeOption>>> options(h.n_layer);
  for (int l = 0; l < h.n_layer && l < static_cast<int>(cal.experts.size()); ++l) {
    if (cal.experts[l].empty()) continue;
    options[l].resize(h.n_expert);
    // Per candidate: error per routed row summed over the layer's sampled experts, and rows.
    std::vector<double> layer_error(candidates.size(), 0);
    int64_t layer_rows = 0;
    std::vector<std::vector<double>> per_row(h.n_expert,
                                             std::vector<double>(candidates.size(), -1));
    for (int e = 0; e < h.n_expert; ++e) {
      const ExpertWeights& w = model.layers()[l].experts[e];
      if (!w.has_weights()) continue;  // pruned: never routed to
      const ExpertSamples& s = cal.experts[l][e];
      const int64_t m = static_cast<int64_t>(s.weights.size());
      std::vector<float> want(m * d), got(m * d);
      Backend::ExpertJob job{w.gate,      w.up,        w.down,    s.inputs.data(), nullptr,   m,
                             want.data(), w.gate_bias, w.up_bias, w.down_bias,     activation};
      if (m > 0) backend.RunExperts({&job, 1});
      for (size_t c = 0; c < candidates.size(); ++c) {
        const DType t = candidates[c];
        if (!RowSizeValid(t, w.up.cols) || !RowSizeValid(t, w.down.cols)) continue;
        TypeOption opt;
        opt.type = t;
        opt.bytes = RowBytes(t, w.gate.cols) * w.gate.rows + RowBytes(t, w.up.cols) * w.up.rows +
                    RowBytes(t, w.down.cols) * w.down.rows;
        if (m > 0) {
          std::vector<uint8_t> gate;  // none for an ungated block
          if (!w.gate.empty()) {
            MOE_ASSIGN_OR_RETURN(gate, EncodeMatrix(w.gate, t));
          }
          MOE_ASSIGN_OR_RETURN(auto up, EncodeMatrix(w.up, t));
          MOE_ASSIGN_OR_RETURN(auto down, EncodeMatrix(w.down, t));
          Backend::ExpertJob q = job;
          if (!w.gate.empty()) q.gate = {t, w.gate.rows, w.gate.cols, gate.data()};
          q.up = {t, w.up.rows, w.up.cols, up.data()};
          q.down = {t, w.down.rows, w.down.cols, down.data()};
          q.out = got.data();
          backend.RunExperts({&q, 1});
          const double err = WeightedSquaredError(got, want, s.weights, d);
          per_row[e][c] = err / static_cast<double>(m);
          layer_error[c] += err;
        }
        options[l][e].push_back(opt);
      }
      if (options[l][e].empty()) {
        return absl::InvalidArgumentError(absl::StrCat("no candidate type fits the rows of expert ",
                                                       e, " of layer ", l, " (", w.up.cols, " and ",
                                                       w.down.cols, " values)"));
      }
      layer_rows += m;
    }
    // Expected error over every token that chooses the expert.
    for (int e = 0; e < h.n_expert; ++e) {
      const int64_t routed =
          routed_counts != nullptr ? (*routed_counts)[l][e] : cal.experts[l][e].routed;
      for (TypeOption& opt : options[l][e]) {
        const size_t c =
            std::find(candidates.begin(), candidates.end(), opt.type) - candidates.begin();
        const double row_error = per_row[e][c] >= 0
                                     ? per_row[e][c]
                                     : (layer_rows > 0 ? layer_error[c] / layer_rows : 0.0);
        opt.error = row_error * static_cast<double>(routed);
      }
    }
  }
  return options;
}

absl::StatusOr<std::vector<std::vector<int>>> ChooseTypes(
    const std::vector<std::vector<std::vector<TypeOption>>>& options, size_t budget_bytes) {
  // Each expert's useful options: cheapest first, each one strictly better than the last, and on
  // the lower convex hull, so that the error drop per byte only falls along it.
  std::vector<std::vector<std::vector<int>>> hull(options.size());
  std::vector<std::vector<int>> chosen(options.size());
  std::vector<std::vector<size_t>> at(options.size());
  size_t total = 0, most = 0;
  for (size_t l = 0; l < options.size(); ++l) {
    hull[l].resize(options[l].size());
    chosen[l].assign(options[l].size(), -1);
    at[l].assign(options[l].size(), 0);
    for (size_t e = 0; e < options[l].size(); ++e) {
      const auto& opts = options[l][e];
      if (opts.empty()) continue;
      std::vector<int> order(opts.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      std::sort(order.begin(), order.end(), [&](int a, int b) {
        return opts[a].bytes < opts[b].bytes ||
               (opts[a].bytes == opts[b].bytes && opts[a].error < opts[b].error);
      });
      std::vector<int>& hl = hull[l][e];
      for (int i : order) {
        if (!hl.empty() && opts[i].error >= opts[hl.back()].error) continue;  // dominated
        // Pop points above the segment from the one before to this one.
        while (hl.size() >= 2) {
          const TypeOption& a = opts[hl[hl.size() - 2]];
          const TypeOption& b = opts[hl.back()];
          const TypeOption& c = opts[i];
          const double slope_ab = (a.error - b.error) / static_cast<double>(b.bytes - a.bytes);
          const double slope_ac = (a.error - c.error) / static_cast<double>(c.bytes - a.bytes);
          if (slope_ac < slope_ab) break;
          hl.pop_back();
        }
        hl.push_back(i);
      }
      chosen[l][e] = hl.front();
      total += opts[hl.front()].bytes;
      size_t biggest = 0;
      for (const TypeOption& o : opts) biggest = std::max(biggest, o.bytes);
      most += biggest;
    }
  }
  if (total > budget_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the experts take at least %zu bytes in the cheapest candidate type, more than the "
        "target's %zu (at most %zu in the dearest)",
        total, budget_bytes, most));
  }
  struct Step {
    double gain;  // error drop per byte
    size_t layer, expert;
    bool operator<(const Step& o) const { return gain < o.gain; }
  };
  std::priority_queue<Step> steps;
  auto push_next = [&](size_t l, size_t e) {
    const auto& hl = hull[l][e];
    if (at[l][e] + 1 >= hl.size()) return;
    const TypeOption& now = options[l][e][hl[at[l][e]]];
    const TypeOption& next = options[l][e][hl[at[l][e] + 1]];
    steps.push({(now.error - next.error) / static_cast<double>(next.bytes - now.bytes), l, e});
  };
  for (size_t l = 0; l < options.size(); ++l) {
    for (size_t e = 0; e < options[l].size(); ++e) push_next(l, e);
  }
  while (!steps.empty()) {
    const Step s = steps.top();
    steps.pop();
    const auto& hl = hull[s.layer][s.expert];
    const TypeOption& now = options[s.layer][s.expert][hl[at[s.layer][s.expert]]];
    const TypeOption& next = options[s.layer][s.expert][hl[at[s.layer][s.expert] + 1]];
    if (total - now.bytes + next.bytes > budget_bytes) continue;  // this expert stays
    total = total - now.bytes + next.bytes;
    ++at[s.layer][s.expert];
    chosen[s.layer][s.expert] = hl[at[s.layer][s.expert]];
    push_next(s.layer, s.expert);
  }
  return chosen;
}

}  // namespace moe
