#include "lib/model/parts/mixture_feed_forward.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "lib/backend/combine_core.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

// A layer message (MixtureFeedForward::kLayerOrder) after its kind byte: this header, then the
// routing ([rows x k] int32 experts, -1 for none) and the inputs ([rows x d] floats). Ranks run
// builds of the same library: plain memory layout.
struct LayerHeader {
  int32_t layer;
  int32_t k;
  int64_t rows;
  int64_t d;
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Each token's chosen experts' bytes and work into the step's per-row costs (when it keeps
// them), whichever path ran them.
void AddChoiceCosts(const StepContext& ctx, const LayerWeights& L, const int32_t* ids, int64_t n,
                    int64_t k) {
  if (ctx.expert_bytes == nullptr) return;
  const int32_t n_expert = static_cast<int32_t>(L.experts.size());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      if (e < 0 || e >= n_expert) continue;
      ctx.expert_bytes[t] += L.experts[e].cost_bytes();
      ctx.expert_macs[t] += L.experts[e].params();
    }
  }
}

// What running expert e of a layer over m rows in this process adds to the telemetry: its rows,
// its bytes once, its work per row.
void CountExpertRun(Telemetry* tel, int layer, int e, const ExpertWeights& w, int64_t m) {
  if (tel == nullptr) return;
  tel->expert_counts[layer][e] += m;
  tel->weight_bytes_read += w.byte_size();
  tel->active_params += m * w.params();
}

// A layer's router entropies and, when the telemetry records routing, its choices.
void RecordRouting(Telemetry* tel, int layer, int64_t n_layer, const int32_t* ids,
                   const float* entropy, int64_t n, int64_t k) {
  if (tel == nullptr) return;
  for (int64_t t = 0; t < n; ++t) tel->router_entropy_sum += entropy[t];
  if (!tel->record_routing) return;
  if (static_cast<int64_t>(tel->routing_trace.size()) <= layer) tel->routing_trace.resize(n_layer);
  tel->routing_trace[layer].insert(tel->routing_trace[layer].end(), ids, ids + n * k);
}

}  // namespace

RouterConfig MixtureFeedForward::ConfigFor(const HParams& h, const LayerWeights& L,
                                           int layer) const {
  RouterConfig rc;
  rc.n_expert = static_cast<int>(h.n_expert);
  rc.top_k = static_cast<int>(h.n_expert_used);
  rc.gating = h.gating;
  rc.selection_bias = L.selection_bias;
  rc.n_groups = static_cast<int>(h.n_expert_groups);
  rc.n_groups_used = static_cast<int>(h.n_group_used);
  rc.renormalize = h.norm_topk_prob;
  // Granite's residual multiplier rides on the routed experts' weights (and is applied to the
  // shared expert's output rows before the combine).
  rc.scale = h.routed_scale * h.residual_scale;
  rc.disabled = layer < static_cast<int>(disabled_.size()) ? &disabled_[layer] : nullptr;
  rc.policy = policy_;
  rc.layer = layer;
  return rc;
}

absl::Status MixtureFeedForward::Run(const StepContext& ctx, int layer, const LayerWeights& L,
                                     int64_t n, float* x) {
  Telemetry* tel = ctx.telemetry;
  Backend& be = *ctx.backend;
  const HParams& h = ctx.model.hp();
  const int64_t d = h.n_embd;
  MOE_ASSIGN_OR_RETURN(float* xn, xn_.Resize(be, n * d));
  be.PrefetchProducts({&L.router, 1}, n);
  be.RmsNorm(x, L.ffn_norm, n, d, h.rms_eps, xn);

  Routing& routing = routing_;
  const bool gated_shared = L.has_shared && !L.shared_gate.empty();
  float* logits = nullptr;
  float* gate = nullptr;
  {
    StageTimer timer(tel, &StageTimes::router_s);
    MOE_ASSIGN_OR_RETURN(logits, router_logits_.Resize(be, n * h.n_expert));
    if (gated_shared) {
      MOE_ASSIGN_OR_RETURN(gate, shared_gate_.Resize(be, n));
    }
    // The router and the shared expert's gate read the same input: one pass for both.
    const size_t products = gated_shared ? 2 : 1;
    const WeightView weights[] = {L.router, L.shared_gate};
    float* const outs[] = {logits, gate};
    const float* const biases[] = {L.router_bias, nullptr};
    be.MatMulShared(absl::MakeConstSpan(weights, products), xn, n,
                    absl::MakeConstSpan(outs, products), biases);
  }
  if (RoutesInPlace(ctx)) return RunInPlace(ctx, layer, L, n, logits, gate, x);
  const int64_t xd = h.expert_dim();
  const bool latent = h.moe_latent_dim > 0;
  if (latent && comm_ != nullptr) {
    return absl::UnimplementedError("latent experts (moe_latent_size) with expert parallelism");
  }
  // The experts' input: the normalised rows, or their latent projection.
  const float* expert_in = xn;
  if (latent) {
    MOE_ASSIGN_OR_RETURN(float* in, latent_in_.Resize(be, n * xd));
    be.MatMul(L.latent_down, xn, n, in);
    expert_in = in;
  }
  {
    StageTimer timer(tel, &StageTimes::router_s);
    // The shared expert's gate logits come back with the router's, in the same wait.
    host_logits_.resize(n * h.n_expert);
    be.CopyToHost(logits, host_logits_.size() * sizeof(float), host_logits_.data());
    if (gated_shared) {
      host_gate_.resize(n);
      be.CopyToHost(gate, n * sizeof(float), host_gate_.data());
    }
    // Routing on what a failed operation left would be routing on garbage.
    MOE_RETURN_IF_ERROR(be.TakeError());
    RouterConfig rc = ConfigFor(h, L, layer);
    rc.positions = ctx.positions.data();
    Route(rc, host_logits_, n, &routing);
    if (policy_.load_window > 0 && !ctx.histories.empty()) Reweigh(ctx, layer, n, tel);
    AddChoiceCosts(ctx, L, routing.experts.data(), n, h.n_expert_used);
    if (tel) {
      tel->rerouted_choices += routing.rerouted;
      tel->dropped_choices += routing.dropped;
    }
  }
  if (observer_) {
    host_xn_.resize(n * xd);
    be.CopyToHost(expert_in, host_xn_.size() * sizeof(float), host_xn_.data());
    observer_(layer, n, static_cast<int>(h.n_expert_used), routing.experts.data(),
              routing.weights.data(), host_xn_.data());
  }

  StageTimer timer(tel, &StageTimes::experts_s);
  // With the dense weights on rank 0 alone, the other ranks learn the layer's inputs and routing
  // from it; otherwise each computed them itself.
  const bool root_only = comm_ != nullptr && ranks_->dense_on_root_only();
  if (root_only) MOE_RETURN_IF_ERROR(SendLayer(be, layer, n, d, tel));
  Dispatch(h, layer, n);
  if (h.expert_input_weighted) MOE_RETURN_IF_ERROR(WeighExpertInputs(be, h, n));
  HintExperts(be, L, n);
  float* shared_out = nullptr;
  if (L.has_shared) {
    MOE_ASSIGN_OR_RETURN(shared_out, shared_out_.Resize(be, n * d));
  }
  size_t next_out = 0;
  // With the dense weights on rank 0 alone, rank 0 sends no outputs of its own: it takes the
  // others' as they come while it runs its own experts and the shared expert. Otherwise each
  // rank's outputs go out once its experts have run, and the shared expert runs while they
  // travel.
  std::unique_ptr<PendingGather> exchange;
  if (root_only) {
    MOE_ASSIGN_OR_RETURN(exchange, StartExchange(be, layer, d, tel));
  }
  MOE_RETURN_IF_ERROR(RunLocalExperts(be, h, layer, L, n, L.has_shared && comm_ == nullptr, tel,
                                      prefetch_ ? &ctx : nullptr, x, &next_out));
  const int64_t k = h.n_expert_used;
  auto& outs = expert_out_;
  auto& job_of_expert = job_of_expert_;
  if (comm_ != nullptr) {
    if (exchange == nullptr) {
      MOE_ASSIGN_OR_RETURN(exchange, StartExchange(be, layer, d, tel));
    }
    if (L.has_shared) {
      be.RunExperts({{L.shared.gate, L.shared.up, L.shared.down, xn, nullptr, n, shared_out,
                      nullptr, nullptr, nullptr, FeedForwardActivation(h)}});
    }
    MOE_RETURN_IF_ERROR(FinishExchange(be, *exchange, L, layer, d, next_out, tel));
  }
  RecordRouting(tel, layer, h.n_layer, routing.experts.data(), routing.entropy.data(), n, k);
  if (latent) return CombineLatent(be, L, n, k, shared_out, x);
  if (L.has_shared && h.residual_scale != 1.f) be.Scale(h.residual_scale, shared_out, n * d);
  // Combine: each token's expert outputs in its router's order, weighted, then the gated shared
  // expert, summed into the residual stream in one pass over the tokens.
  const int64_t terms = k + (L.has_shared ? 1 : 0);
  auto& src = combine_src_;
  auto& weight = combine_weight_;
  src.resize(n * terms);
  weight.resize(n * terms);
  // With the weights on the experts' inputs, their outputs join as they are.
  if (h.expert_input_weighted) unit_weights_.assign(n * k, 1.f);
  ListCombineTerms(
      n, k, routing.experts.data(),
      h.expert_input_weighted ? unit_weights_.data() : routing.weights.data(),
      [&](int64_t t, int64_t j) {
        return outs[job_of_expert[routing.experts[t * k + j]]].data() +
               lists_.PlaceOf(t * k + j) * d;
      },
      L.has_shared ? shared_out : nullptr, gated_shared ? host_gate_.data() : nullptr, d,
      src.data(), weight.data());
  be.AddWeightedRows(n, terms, d, src.data(), weight.data(), x);
  return absl::OkStatus();
}

absl::Status MixtureFeedForward::CombineLatent(Backend& be, const LayerWeights& L, int64_t n,
                                               int64_t k, const float* shared_out, float* x) {
  const int64_t xd = L.latent_down.rows, d = L.latent_up.rows;
  // Each token's expert outputs in its router's order, weighted, in the latent space; projected
  // up, then the shared expert's output, into the residual stream.
  MOE_ASSIGN_OR_RETURN(float* sum, latent_sum_.Resize(be, n * xd));
  MOE_ASSIGN_OR_RETURN(float* out, latent_out_.Resize(be, n * d));
  combine_src_.resize(n * k);
  combine_weight_.resize(n * k);
  ListCombineTerms(
      n, k, routing_.experts.data(), routing_.weights.data(),
      [&](int64_t t, int64_t j) {
        return expert_out_[job_of_expert_[routing_.experts[t * k + j]]].data() +
               lists_.PlaceOf(t * k + j) * xd;
      },
      nullptr, nullptr, xd, combine_src_.data(), combine_weight_.data());
  be.Zero(sum, static_cast<size_t>(n * xd) * sizeof(float));
  be.AddWeightedRows(n, k, xd, combine_src_.data(), combine_weight_.data(), sum);
  be.MatMul(L.latent_up, sum, n, out);
  be.Axpy(1.f, out, n * d, x);
  if (L.has_shared) be.Axpy(1.f, shared_out, n * d, x);
  return absl::OkStatus();
}

absl::Status MixtureFeedForward::WeighExpertInputs(Backend& be, const HParams& h, int64_t n) {
  const int64_t k = h.n_expert_used, d = h.n_embd;
  // Row t * k + j is token t's input times its j-th weight; each expert's rows are listed in its
  // token order (where lists_ puts choice t * k + j), so its tokens' rows start at first[e].
  MOE_ASSIGN_OR_RETURN(float* weighted, weighted_in_.Resize(be, n * k * d));
  weighted_first_.assign(h.n_expert + 1, 0);
  for (int e = 0; e < h.n_expert; ++e) {
    weighted_first_[e + 1] = weighted_first_[e] + lists_.CountOf(e);
  }
  weighted_rows_.resize(n * k);
  combine_src_.resize(n * k);
  for (int64_t s = 0; s < n * k; ++s) {
    const int32_t e = routing_.experts[s];
    combine_src_[s] = e >= 0 ? xn_.data() + (s / k) * d : nullptr;
    if (e >= 0) weighted_rows_[weighted_first_[e] + lists_.PlaceOf(s)] = static_cast<int32_t>(s);
  }
  be.Zero(weighted, static_cast<size_t>(n * k * d) * sizeof(float));
  be.AddWeightedRows(n * k, 1, d, combine_src_.data(), routing_.weights.data(), weighted);
  return absl::OkStatus();
}

void MixtureFeedForward::HintExperts(Backend& be, const LayerWeights& L, int64_t n) {
  // Resident experts only: the store's are not read yet, and another rank's are not here.
  if (store_ != nullptr || comm_ != nullptr) return;
  auto& gate_up = hint_weights_;
  gate_up.clear();
  // Pairs of the first two matrices each block reads: gate and up, or an ungated block's up and
  // down.
  auto pair = [&](const WeightView& gate, const WeightView& up, const WeightView& down) {
    gate_up.push_back(gate.empty() ? up : gate);
    gate_up.push_back(gate.empty() ? down : up);
  };
  for (int32_t e : selected_) pair(L.experts[e].gate, L.experts[e].up, L.experts[e].down);
  if (L.has_shared) pair(L.shared.gate, L.shared.up, L.shared.down);
  be.PrefetchExperts(gate_up, n);
}

bool MixtureFeedForward::RoutesInPlace(const StepContext& ctx) const {
  // Everything that needs the choices on the host before the experts run keeps the host path.
  return ctx.backend->routes_in_place() && store_ == nullptr && comm_ == nullptr && !observer_ &&
         !ctx.model.hp().expert_input_weighted && ctx.model.hp().moe_latent_dim == 0 &&
         policy_.capacity_factor == 0.f && (policy_.load_window == 0 || ctx.histories.empty());
}

absl::Span<const Backend::ExpertMatrices> MixtureFeedForward::MatricesOf(int layer,
                                                                         const LayerWeights& L) {
  if (static_cast<int>(layer_matrices_.size()) <= layer) layer_matrices_.resize(layer + 1);
  std::vector<Backend::ExpertMatrices>& m = layer_matrices_[layer];
  if (m.size() != L.experts.size()) {
    m.clear();
    for (const ExpertWeights& w : L.experts) {
      m.push_back({w.gate, w.up, w.down, w.gate_bias, w.up_bias, w.down_bias});
    }
  }
  return m;
}

absl::Status MixtureFeedForward::RunInPlace(const StepContext& ctx, int layer,
                                            const LayerWeights& L, int64_t n, const float* logits,
                                            const float* gate, float* x) {
  Backend& be = *ctx.backend;
  const HParams& h = ctx.model.hp();
  if (L.has_shared && h.residual_scale != 1.f) {
    return absl::UnimplementedError(
        "a shared expert under Granite's residual multiplier on a device that routes in place");
  }
  const int64_t k = h.n_expert_used, layers = h.n_layer;
  // The step's choices and entropies stay in the backend, one slice per layer, until FinishStep
  // reads them all back at once.
  if (in_place_layers_.empty()) {
    step_rows_ = n;
    MOE_RETURN_IF_ERROR(step_ids_.Resize(be, layers * n * k).status());
    MOE_RETURN_IF_ERROR(step_entropy_.Resize(be, layers * n).status());
  } else if (step_rows_ != n) {
    return absl::InternalError("a mixture layer saw another number of rows within one step");
  }
  MOE_ASSIGN_OR_RETURN(float* weights, step_weights_.Resize(be, n * k));
  int32_t* ids = step_ids_.data() + layer * n * k;
  {
    StageTimer timer(ctx.telemetry, &StageTimes::router_s);
    const TokenRouting tr = TokenRoutingOf(ConfigFor(h, L, layer), &disabled_bytes_);
    be.RouteTokens(tr, logits, ctx.positions.data(), n, ids, weights,
                   step_entropy_.data() + layer * n);
  }
  StageTimer timer(ctx.telemetry, &StageTimes::experts_s);
  Backend::RoutedExperts r;
  r.experts = MatricesOf(layer, L);
  r.in = xn_.data();
  r.n = n;
  r.k = k;
  r.ids = ids;
  r.weights = weights;
  r.activation = FeedForwardActivation(h);
  const Backend::ExpertMatrices shared{L.shared.gate, L.shared.up, L.shared.down};
  if (L.has_shared) {
    MOE_ASSIGN_OR_RETURN(r.shared_out, shared_out_.Resize(be, n * h.n_embd));
    r.shared = &shared;
    r.shared_gate = gate;
  }
  be.RunRoutedExperts(r, x);
  in_place_layers_.push_back(layer);
  return absl::OkStatus();
}

absl::Status MixtureFeedForward::FinishStep(const StepContext& ctx) {
  if (in_place_layers_.empty()) return absl::OkStatus();
  const HParams& h = ctx.model.hp();
  const int64_t n = step_rows_, k = h.n_expert_used, layers = h.n_layer;
  host_step_ids_.resize(layers * n * k);
  host_step_entropy_.resize(layers * n);
  Backend& be = *ctx.backend;
  be.CopyToHost(step_ids_.data(), host_step_ids_.size() * sizeof(int32_t), host_step_ids_.data());
  be.CopyToHost(step_entropy_.data(), host_step_entropy_.size() * sizeof(float),
                host_step_entropy_.data());
  absl::Status copied = be.TakeError();
  if (!copied.ok()) {
    in_place_layers_.clear();
    return copied;
  }
  Telemetry* tel = ctx.telemetry;
  for (int layer : in_place_layers_) {
    const LayerWeights& L = ctx.model.layers()[layer];
    const int32_t* ids = host_step_ids_.data() + layer * n * k;
    const float* entropy = host_step_entropy_.data() + layer * n;
    AddChoiceCosts(ctx, L, ids, n, k);
    RecordRouting(tel, layer, layers, ids, entropy, n, k);
    if (tel == nullptr) continue;
    // Each chosen expert counted as the host path counts it as it runs (RunLocalExperts).
    expert_rows_.assign(h.n_expert, 0);
    for (int64_t s = 0; s < n * k; ++s) {
      if (ids[s] >= 0 && ids[s] < h.n_expert) ++expert_rows_[ids[s]];
    }
    for (int e = 0; e < h.n_expert; ++e) {
      if (expert_rows_[e] > 0) CountExpertRun(tel, layer, e, L.experts[e], expert_rows_[e]);
    }
  }
  in_place_layers_.clear();
  return absl::OkStatus();
}

void MixtureFeedForward::Dispatch(const HParams& h, int layer, int64_t n) {
  // Each expert's tokens, so that each expert runs once over all of them.
  lists_.Build(routing_.experts.data(), n, h.n_expert_used, h.n_expert);
  job_of_expert_.assign(h.n_expert, -1);
  expert_out_.resize(h.n_expert);  // sized before any pointer into them is taken
  auto& selected = selected_;
  selected.clear();
  for (int e = 0; e < h.n_expert; ++e) {
    if (lists_.CountOf(e) > 0) selected.push_back(e);
  }
  if (comm_ != nullptr) {
    // Every rank routed the same tokens alike; each runs its share of its own experts' tokens.
    all_selected_ = selected;
    std::erase_if(selected, [&](int32_t e) {
      const auto [first, end] = RowsOf(layer, e, comm_->rank());
      return first == end;
    });
  }
}

absl::Status MixtureFeedForward::RunLocalExperts(Backend& be, const HParams& h, int layer,
                                                 const LayerWeights& L, int64_t n, bool shared_here,
                                                 Telemetry* tel, const StepContext* prefetch_ctx,
                                                 const float* x, size_t* next_out) {
  const int64_t d = h.expert_dim();  // the experts' output rows (latent ones: the latent size)
  const GatedActivation activation = FeedForwardActivation(h);
  for (int32_t e : selected_) {
    if (!L.experts[e].has_weights() && store_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("expert ", e, " of layer ", layer,
                       " has no weights on this rank (its placement gives it to another)"));
    }
  }
  // Resident experts run in one call. From the expert store they run in chunks of as many as the
  // cache holds at once besides its pinned experts, each chunk pinned until its jobs have run: a
  // prompt batch may select every expert of the layer, and the smallest budget holds only the
  // top-k. Jobs are independent (the outputs are combined afterwards), so chunking changes no
  // result.
  if (store_ != nullptr) ScorePrediction(layer);
  const size_t chunk = store_ != nullptr ? store_->cache().step_capacity() : selected_.size();
  for (size_t begin = 0; begin < selected_.size() || (begin == 0 && shared_here);
       begin += std::max<size_t>(chunk, 1)) {
    const size_t end = std::min(selected_.size(), begin + chunk);
    jobs_.clear();
    std::optional<ExpertStore::Step> step;
    if (store_ != nullptr && end > begin) {
      auto requested =
          store_->Request(layer, absl::MakeConstSpan(selected_).subspan(begin, end - begin));
      if (!requested.ok()) return requested.status();
      step = *std::move(requested);
      // The misses are queued; the next layer's guesses queue behind them while this one runs.
      if (begin == 0 && prefetch_ctx != nullptr) {
        MOE_RETURN_IF_ERROR(PrefetchNextLayer(*prefetch_ctx, layer, n, x));
      }
    }
    for (size_t i = begin; i < end; ++i) {
      const int e = selected_[i];
      const absl::Span<const int32_t> rows = lists_.TokensOf(e);
      MOE_ASSIGN_OR_RETURN(
          float* res, expert_out_[*next_out].Resize(be, static_cast<int64_t>(rows.size()) * d));
      job_of_expert_[e] = static_cast<int>((*next_out)++);
      // Over ranks, this rank's share of the expert's tokens; the others fill in the rest.
      const auto [first, end] =
          comm_ != nullptr ? RowsOf(layer, e, comm_->rank())
                           : std::pair<int64_t, int64_t>{0, static_cast<int64_t>(rows.size())};
      const int64_t m = end - first;
      const ExpertWeights& w = L.experts[e];
      // Weighted inputs (llama4): the expert's own rows of weighted_in_ instead of its tokens'.
      const float* in = h.expert_input_weighted ? weighted_in_.data()
                        : h.moe_latent_dim > 0  ? latent_in_.data()
                                                : xn_.data();
      const int32_t* in_rows = h.expert_input_weighted
                                   ? weighted_rows_.data() + weighted_first_[e] + first
                                   : rows.data() + first;
      // From the store, the weights are filled in once the expert is read (RunStoredExperts).
      jobs_.push_back({w.gate, w.up, w.down, in, in_rows, m, res + first * d, w.gate_bias,
                       w.up_bias, w.down_bias, activation});
      CountExpertRun(tel, layer, e, w, m);
    }
    const bool with_shared = begin == 0 && shared_here;
    if (with_shared) {
      jobs_.push_back({L.shared.gate, L.shared.up, L.shared.down, xn_.data(), nullptr, n,
                       shared_out_.data(), nullptr, nullptr, nullptr, activation});
    }
    if (step) {
      MOE_RETURN_IF_ERROR(RunStoredExperts(be, *step, with_shared));
    } else {
      be.RunExperts(jobs_);
    }
  }
  return absl::OkStatus();
}

absl::Status MixtureFeedForward::SendLayer(Backend& be, int layer, int64_t n, int64_t d,
                                           Telemetry* tel) {
  const auto start = std::chrono::steady_clock::now();
  const int32_t k = static_cast<int32_t>(routing_.experts.size() / std::max<int64_t>(n, 1));
  const LayerHeader header{layer, k, n, d};
  const size_t expert_bytes = static_cast<size_t>(n * k) * sizeof(int32_t);
  const size_t input_bytes = static_cast<size_t>(n * d) * sizeof(float);
  Bytes& message = layer_message_;
  message.resize(1 + sizeof(header) + expert_bytes + input_bytes);
  message[0] = kLayerOrder;
  std::memcpy(message.data() + 1, &header, sizeof(header));
  std::memcpy(message.data() + 1 + sizeof(header), routing_.experts.data(), expert_bytes);
  be.CopyToHost(xn_.data(), input_bytes, message.data() + 1 + sizeof(header) + expert_bytes);
  MOE_RETURN_IF_ERROR(comm_->Broadcast(0, &message, comm_->timeout()));
  if (tel) {
    tel->exchange_s += SecondsSince(start);
    tel->exchange_bytes += message.size() * (comm_->size() - 1);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> MixtureFeedForward::ServeLayer(Backend& be, const Model& model,
                                                   absl::Span<const uint8_t> message) {
  if (comm_ == nullptr || comm_->rank() == 0 || !ranks_->dense_on_root_only()) {
    return absl::FailedPreconditionError(
        "a layer's inputs from rank 0 are served by the other ranks of a world that keeps the "
        "dense weights on rank 0");
  }
  const HParams& h = model.hp();
  LayerHeader m{};
  if (message.size() < 1 + sizeof(m) || message[0] != kLayerOrder) {
    return absl::DataLossError("a truncated layer message from rank 0");
  }
  std::memcpy(&m, message.data() + 1, sizeof(m));
  if (m.layer < 0 || m.layer >= h.n_layer ||
      model.layers()[m.layer].parts.ffn != FeedForwardPart::kMixture || m.k != h.n_expert_used ||
      m.d != h.n_embd || m.rows < 0 || m.rows > (1 << 24)) {
    return absl::DataLossError(absl::StrCat(
        "rank 0 sent layer ", m.layer, " with ", m.rows, " rows of ", m.d, " values and ", m.k,
        " experts each, which this rank's model does not have: every rank must load the same "
        "model file"));
  }
  const size_t expert_bytes = static_cast<size_t>(m.rows * m.k) * sizeof(int32_t);
  const size_t input_bytes = static_cast<size_t>(m.rows * m.d) * sizeof(float);
  if (message.size() != 1 + sizeof(m) + expert_bytes + input_bytes) {
    return absl::DataLossError("a layer message from rank 0 of the wrong size");
  }
  routing_.experts.resize(m.rows * m.k);
  std::memcpy(routing_.experts.data(), message.data() + 1 + sizeof(m), expert_bytes);
  for (int32_t e : routing_.experts) {
    if (e < -1 || e >= h.n_expert) {
      return absl::DataLossError(
          absl::StrCat("rank 0 routed a token to expert ", e, " of ", h.n_expert));
    }
  }
  MOE_ASSIGN_OR_RETURN(float* xn, xn_.Resize(be, m.rows * m.d));
  be.CopyFromHost(message.data() + 1 + sizeof(m) + expert_bytes, input_bytes, xn);
  Dispatch(h, m.layer, m.rows);
  size_t next_out = 0;
  MOE_RETURN_IF_ERROR(RunLocalExperts(be, h, m.layer, model.layers()[m.layer], m.rows,
                                      /*shared_here=*/false, nullptr, nullptr, nullptr, &next_out));
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<PendingGather> exchange,
                       StartExchange(be, m.layer, m.d, nullptr));
  std::vector<Bytes> all;
  MOE_RETURN_IF_ERROR(exchange->Wait(&all));
  return m.layer;
}

absl::Status MixtureFeedForward::RunStoredExperts(Backend& backend, const ExpertStore::Step& step,
                                                  bool with_shared) {
  // jobs[i] is the step's i-th expert; the shared expert, if any, comes last and runs in the
  // first group, so it computes while the first misses are read.
  std::vector<Backend::ExpertJob>& jobs = jobs_;
  std::vector<Backend::ExpertJob>& group = group_;
  std::vector<char>& done = job_done_;
  done.assign(step.size(), 0);
  size_t left = step.size();
  bool shared_left = with_shared;
  while (left > 0 || shared_left) {
    group.clear();
    for (size_t i = 0; i < step.size(); ++i) {
      if (done[i] || !step.ready(i)) continue;
      MOE_RETURN_IF_ERROR(step.Wait(i));  // its read failed: this call's error
      const ExpertViews& v = step.views(i);
      Backend::ExpertJob job = jobs[i];
      job.gate = v.gate;
      job.up = v.up;
      job.down = v.down;
      group.push_back(job);
      done[i] = 1;
      --left;
    }
    if (shared_left) {
      group.push_back(jobs.back());
      shared_left = false;
    }
    if (group.empty()) {
      // Nothing is ready: block on the first expert still being read, only on it.
      for (size_t i = 0; i < step.size(); ++i) {
        if (!done[i]) {
          MOE_RETURN_IF_ERROR(step.Wait(i));
          break;
        }
      }
      continue;
    }
    backend.RunExperts(group);
  }
  return absl::OkStatus();
}

std::pair<int64_t, int64_t> MixtureFeedForward::RowsOf(int layer, int expert, int rank) const {
  const absl::Span<const int32_t> holders = ranks_->holders(layer, expert);
  const auto at = std::find(holders.begin(), holders.end(), rank);
  if (at == holders.end()) return {0, 0};
  const int64_t i = at - holders.begin(), h = static_cast<int64_t>(holders.size());
  const int64_t m = lists_.CountOf(expert);
  return {m * i / h, m * (i + 1) / h};
}

absl::StatusOr<std::unique_ptr<PendingGather>> MixtureFeedForward::StartExchange(Backend& be,
                                                                                 int layer,
                                                                                 int64_t d,
                                                                                 Telemetry* tel) {
  const auto start = std::chrono::steady_clock::now();
  // This rank's payload: its experts' outputs, ascending by expert (selected_ is). Every rank
  // routed the same tokens, so each knows what every other sends.
  // With the dense weights on rank 0 only, the outputs go to rank 0 alone (a gather, so no
  // serving rank receives the others'), which sends none: it may start before its experts run.
  const bool root_only = ranks_->dense_on_root_only();
  std::vector<size_t>& sizes = exchange_sizes_;
  sizes.assign(comm_->size(), 0);
  for (int32_t e : all_selected_) {
    const absl::Span<const int32_t> holders = ranks_->holders(layer, e);
    if (holders.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("expert ", e, " of layer ", layer, " has no rank"));
    }
    for (int32_t r : holders) {
      if (r < 0 || r >= comm_->size()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "expert ", e, " of layer ", layer, " is placed on rank ", r, " of ", comm_->size()));
      }
      if (r == 0 && root_only) continue;  // rank 0 keeps its outputs
      const auto [first, end] = RowsOf(layer, e, r);
      sizes[r] += static_cast<size_t>((end - first) * d) * sizeof(float);
    }
  }
  Bytes& mine = exchange_out_;
  mine.resize(sizes[comm_->rank()]);
  size_t at = 0;
  for (int32_t e : selected_) {
    if (sizes[comm_->rank()] == 0) break;
    const BackendBuffer<float>& out = expert_out_[job_of_expert_[e]];
    const auto [first, end] = RowsOf(layer, e, comm_->rank());
    const size_t bytes = static_cast<size_t>((end - first) * d) * sizeof(float);
    be.CopyToHost(out.data() + first * d, bytes, mine.data() + at);
    at += bytes;
  }
  auto pending =
      root_only ? comm_->StartGather(0, mine, sizes) : comm_->StartAllGather(mine, sizes);
  if (tel) tel->exchange_s += SecondsSince(start);
  return pending;
}

absl::Status MixtureFeedForward::FinishExchange(Backend& be, PendingGather& exchange,
                                                const LayerWeights& L, int layer, int64_t d,
                                                size_t next_out, Telemetry* tel) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Bytes> all;
  MOE_RETURN_IF_ERROR(exchange.Wait(&all));
  if (tel) {
    tel->exchange_s += SecondsSince(start);
    for (size_t r = 0; r < all.size(); ++r) {
      if (static_cast<int>(r) != comm_->rank()) {
        tel->exchange_bytes += exchange_out_.size() + all[r].size();
      }
    }
  }
  // The others' shares, read in the same order they were written (experts ascending).
  std::vector<size_t> read(all.size(), 0);
  for (int32_t e : all_selected_) {
    const int64_t m = lists_.CountOf(e);
    if (job_of_expert_[e] < 0) {  // none of its tokens ran here
      MOE_RETURN_IF_ERROR(expert_out_[next_out].Resize(be, m * d).status());
      job_of_expert_[e] = static_cast<int>(next_out++);
    }
    BackendBuffer<float>& res = expert_out_[job_of_expert_[e]];
    for (int32_t r : ranks_->holders(layer, e)) {
      if (r == comm_->rank()) continue;
      const auto [first, end] = RowsOf(layer, e, r);
      const size_t bytes = static_cast<size_t>((end - first) * d) * sizeof(float);
      if (read[r] + bytes > all[r].size()) {
        return absl::DataLossError(absl::StrCat("rank ", r, " sent fewer expert outputs for ",
                                                "layer ", layer, " than its routing asks for"));
      }
      be.CopyFromHost(all[r].data() + read[r], bytes, res.data() + first * d);
      read[r] += bytes;
      if (tel) {
        tel->expert_counts[layer][e] += end - first;
        tel->active_params += (end - first) * L.experts[e].params();
      }
    }
  }
  for (size_t r = 0; r < all.size(); ++r) {
    if (read[r] != all[r].size() && static_cast<int>(r) != comm_->rank()) {
      return absl::DataLossError(
          absl::StrCat("rank ", r, " sent other expert outputs for layer ", layer,
                       " than its routing asks for: the ranks do not run the same step"));
    }
  }
  return absl::OkStatus();
}

void MixtureFeedForward::Reweigh(const StepContext& ctx, int layer, int64_t n, Telemetry* tel) {
  const int n_expert = static_cast<int>(ctx.model.hp().n_expert);
  const int k = static_cast<int>(ctx.model.hp().n_expert_used);
  // Token by token in batch order, so a token sees the choices of its sequence's tokens before it
  // in this very step: any split of a prompt into steps weighs the same.
  for (int64_t t = 0; t < n; ++t) {
    RoutingHistory* history = ctx.histories[t];
    if (history == nullptr) continue;
    const int scaled =
        history->Reweight(policy_, n_expert, layer, ctx.positions[t],
                          routing_.experts.data() + t * k, routing_.weights.data() + t * k, k);
    history->Record(layer, ctx.positions[t], routing_.experts.data() + t * k, k);
    if (tel) tel->reweighted_choices += scaled;
  }
}

absl::Status MixtureFeedForward::PrefetchAcrossDense(const StepContext& ctx, int layer, int64_t n,
                                                     const float* x) {
  if (store_ == nullptr || !prefetch_) return absl::OkStatus();
  return PrefetchNextLayer(ctx, layer, n, x);
}

absl::Status MixtureFeedForward::PrefetchNextLayer(const StepContext& ctx, int layer, int64_t n,
                                                   const float* x) {
  const HParams& h = ctx.model.hp();
  const int next = layer + 1;
  if (next >= h.n_layer) return absl::OkStatus();
  const LayerWeights& N = ctx.model.layers()[next];
  if (N.parts.ffn != FeedForwardPart::kMixture) return absl::OkStatus();
  Backend& be = *ctx.backend;
  const int64_t d = h.n_embd;
  // The residual stream entering this layer's experts changes little by the next layer's: its
  // router on it mostly picks what it will pick then.
  MOE_ASSIGN_OR_RETURN(float* guess_xn, guess_xn_.Resize(be, n * d));
  be.RmsNorm(x, N.ffn_norm, n, d, h.rms_eps, guess_xn);
  MOE_ASSIGN_OR_RETURN(float* logits, guess_logits_.Resize(be, n * h.n_expert));
  be.MatMulShared({&N.router, 1}, guess_xn, n, {&logits, 1}, {&N.router_bias, 1});
  host_guess_logits_.resize(n * h.n_expert);
  be.CopyToHost(logits, host_guess_logits_.size() * sizeof(float), host_guess_logits_.data());
  Route(ConfigFor(h, N, next), host_guess_logits_, n, &guess_routing_);
  std::vector<int32_t>& count = guess_count_;
  count.assign(h.n_expert, 0);
  for (int32_t e : guess_routing_.experts) {
    if (e >= 0) ++count[e];
  }
  if (guessed_.size() < static_cast<size_t>(h.n_layer)) guessed_.resize(h.n_layer);
  std::vector<int32_t>& guess = guessed_[next];
  guess.clear();
  for (int e = 0; e < h.n_expert; ++e) {
    // Other ranks read their own experts.
    if (count[e] > 0 && (comm_ == nullptr || ranks_->holds(comm_->rank(), next, e))) {
      guess.push_back(e);
    }
  }
  // Most chosen first; a prompt batch may pick every expert, more than is worth reading ahead
  // (half the cache, so the guesses cannot crowd out what the steps between use).
  std::stable_sort(guess.begin(), guess.end(),
                   [&](int32_t a, int32_t b) { return count[a] > count[b]; });
  const size_t most = std::max<size_t>(h.n_expert_used, store_->cache().slot_count() / 2);
  if (guess.size() > most) guess.resize(most);
  store_->Prefetch(next, guess);
  return absl::OkStatus();
}

void MixtureFeedForward::ScorePrediction(int layer) {
  if (static_cast<size_t>(layer) >= guessed_.size() || guessed_[layer].empty()) return;
  std::vector<int32_t>& guess = guessed_[layer];
  int64_t right = 0;
  for (int32_t e : selected_) {
    right += std::find(guess.begin(), guess.end(), e) != guess.end();
  }
  store_->cache().RecordPrediction(layer, static_cast<int64_t>(selected_.size()), right);
  guess.clear();
}

}  // namespace moe
