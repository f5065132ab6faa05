#include "lib/model/forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/moe/router.h"

namespace moe {
namespace {

class StageTimer {
 public:
  explicit StageTimer(double* sink) : sink_(sink), start_(std::chrono::steady_clock::now()) {}
  ~StageTimer() {
    if (sink_) {
      *sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
  }

 private:
  double* sink_;
  std::chrono::steady_clock::time_point start_;
};

double* Sink(Telemetry* t, double StageTimes::*field) { return t ? &(t->time.*field) : nullptr; }

}  // namespace

absl::Status Transformer::Forward(absl::Span<const int32_t> tokens, KvCache& cache, LogitsFor which,
                                  std::vector<float>* logits, Telemetry* tel) {
  if (logits == nullptr) which = LogitsFor::kNone;
  const SequenceChunk chunk{tokens, cache.size(), &cache, which};
  MOE_RETURN_IF_ERROR(ForwardBatch({&chunk, 1}, logits, tel));
  cache.set_size(cache.size() + static_cast<int64_t>(tokens.size()));
  return absl::OkStatus();
}

absl::Status Transformer::ForwardBatch(absl::Span<const SequenceChunk> batch,
                                       std::vector<float>* logits, Telemetry* tel) {
  const HParams& h = model_->hp();
  std::vector<int32_t>& tokens = s_.tokens;
  std::vector<int32_t>& positions = s_.positions;
  std::vector<int64_t>& logit_rows = s_.logit_rows;
  tokens.clear();
  positions.clear();
  logit_rows.clear();
  for (const SequenceChunk& c : batch) {
    const int64_t m = static_cast<int64_t>(c.tokens.size());
    if (m == 0) return absl::InvalidArgumentError("no tokens to process");
    if (c.kv == nullptr) return absl::InvalidArgumentError("a sequence without a KV cache");
    for (int32_t t : c.tokens) {
      if (t < 0 || t >= h.n_vocab) {
        return absl::OutOfRangeError(
            absl::StrCat("token id ", t, " is outside the vocabulary [0, ", h.n_vocab, ")"));
      }
    }
    if (c.pos0 < 0 || c.pos0 + m > c.kv->capacity()) {
      return absl::ResourceExhaustedError(absl::StrCat("context full: ", c.pos0, " + ", m,
                                                       " tokens exceed the context length ",
                                                       c.kv->capacity()));
    }
    const int64_t row0 = static_cast<int64_t>(tokens.size());
    if (c.logits == LogitsFor::kAll) {
      for (int64_t t = 0; t < m; ++t) logit_rows.push_back(row0 + t);
    } else if (c.logits == LogitsFor::kLast) {
      logit_rows.push_back(row0 + m - 1);
    }
    tokens.insert(tokens.end(), c.tokens.begin(), c.tokens.end());
    for (int64_t t = 0; t < m; ++t) positions.push_back(static_cast<int32_t>(c.pos0 + t));
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return absl::InvalidArgumentError("no tokens to process");

  if (tel != nullptr && tel->expert_counts.empty()) tel->Reset(h.n_layer, h.n_expert);
  std::vector<float>& x = s_.x;
  x.resize(n * h.n_embd);
  {
    StageTimer timer(Sink(tel, &StageTimes::other_s));
    backend_->GetRows(model_->token_embd(), tokens.data(), n, x.data());
  }
  for (int l = 0; l < h.n_layer; ++l) {
    const LayerWeights& L = model_->layers()[l];
    Attention(l, L, batch, n, x.data(), tel);
    // An error (an expert that could not be read) leaves the caches' sizes to the caller: the
    // K/V rows written for these tokens lie past them and are overwritten by the next call.
    MOE_RETURN_IF_ERROR(MoeFfn(l, L, n, x.data(), tel));
  }

  StageTimer timer(Sink(tel, &StageTimes::head_s));
  if (tel) {
    tel->tokens += n;
    tel->weight_bytes_read += model_->output().byte_size() + model_->token_embd().row_bytes() * n;
    for (const auto& L : model_->layers()) tel->weight_bytes_read += L.dense_bytes;
  }
  if (logit_rows.empty() || logits == nullptr) return absl::OkStatus();
  const int64_t rows = static_cast<int64_t>(logit_rows.size());
  std::vector<float>& xn = s_.xn;
  xn.resize(rows * h.n_embd);
  // The rows asked for are gathered first, so the norm and the head run once over all of them.
  for (int64_t r = 0; r < rows; ++r) {
    if (logit_rows[r] != r) {
      std::copy_n(x.data() + logit_rows[r] * h.n_embd, h.n_embd, x.data() + r * h.n_embd);
    }
  }
  backend_->RmsNorm(x.data(), model_->output_norm(), rows, h.n_embd, h.rms_eps, xn.data());
  logits->resize(rows * h.n_vocab);
  backend_->MatMul(model_->output(), xn.data(), rows, logits->data());
  return absl::OkStatus();
}

void Transformer::Attention(int layer, const LayerWeights& L, absl::Span<const SequenceChunk> batch,
                            int64_t n, float* x, Telemetry* tel) {
  StageTimer timer(Sink(tel, &StageTimes::attention_s));
  const HParams& h = model_->hp();
  const int64_t d = h.n_embd, hd = h.head_dim;
  const int64_t q_dim = h.n_head * hd, kv_dim = h.n_head_kv * hd;
  const int32_t* positions = s_.positions.data();
  std::vector<float>&xn = s_.xn, &q = s_.q, &k = s_.k, &v = s_.v, &att = s_.att, &o = s_.o;
  xn.resize(n * d);
  q.resize(n * q_dim);
  k.resize(n * kv_dim);
  v.resize(n * kv_dim);
  att.resize(n * q_dim);
  o.resize(n * d);
  backend_->RmsNorm(x, L.attn_norm, n, d, h.rms_eps, xn.data());
  const WeightView qkv[] = {L.wq, L.wk, L.wv};
  float* const qkv_out[] = {q.data(), k.data(), v.data()};
  backend_->MatMulShared(qkv, xn.data(), n, qkv_out);
  if (L.bq) {
    backend_->AddBias(q.data(), L.bq, n, q_dim);
    backend_->AddBias(k.data(), L.bk, n, kv_dim);
    backend_->AddBias(v.data(), L.bv, n, kv_dim);
  }
  if (h.qk_norm == QkNorm::kFull) {
    backend_->RmsNorm(q.data(), L.q_norm, n, q_dim, h.rms_eps, q.data());
    backend_->RmsNorm(k.data(), L.k_norm, n, kv_dim, h.rms_eps, k.data());
  } else if (h.qk_norm == QkNorm::kPerHead) {
    backend_->RmsNorm(q.data(), L.q_norm, n * h.n_head, hd, h.rms_eps, q.data());
    backend_->RmsNorm(k.data(), L.k_norm, n * h.n_head_kv, hd, h.rms_eps, k.data());
  }
  RopeLayout layout = h.rope_style == RopeStyle::kNeox ? RopeLayout::kNeox : RopeLayout::kNorm;
  backend_->Rope(q.data(), n, h.n_head, hd, positions, layout, h.rope_freq_base);
  backend_->Rope(k.data(), n, h.n_head_kv, hd, positions, layout, h.rope_freq_base);
  // Each sequence writes its rows into its own cache and attends over it alone.
  int64_t row = 0;
  for (const SequenceChunk& c : batch) {
    const int64_t m = static_cast<int64_t>(c.tokens.size());
    const KvLayerView kv = c.kv->layer(layer);
    backend_->StoreKv(k.data() + row * kv_dim, v.data() + row * kv_dim, m, positions + row, kv);
    backend_->Attention(q.data() + row * q_dim, m, h.n_head, positions + row, kv,
                        att.data() + row * q_dim);
    row += m;
  }
  backend_->MatMul(L.wo, att.data(), n, o.data());
  backend_->Axpy(1.0f, o.data(), n * d, x);
}

absl::Status Transformer::MoeFfn(int layer, const LayerWeights& L, int64_t n, float* x,
                                 Telemetry* tel) {
  const HParams& h = model_->hp();
  const int64_t d = h.n_embd;
  std::vector<float>& xn = s_.xn;
  xn.resize(n * d);
  backend_->RmsNorm(x, L.ffn_norm, n, d, h.rms_eps, xn.data());

  Routing& routing = s_.routing;
  {
    StageTimer timer(Sink(tel, &StageTimes::router_s));
    std::vector<float>& router_logits = s_.router_logits;
    router_logits.resize(n * h.n_expert);
    backend_->MatMul(L.router, xn.data(), n, router_logits.data());
    RouterConfig rc{static_cast<int>(h.n_expert), static_cast<int>(h.n_expert_used),
                    h.norm_topk_prob,
                    layer < static_cast<int>(disabled_.size()) ? &disabled_[layer] : nullptr};
    Route(rc, router_logits, n, &routing);
  }

  StageTimer timer(Sink(tel, &StageTimes::experts_s));
  // Dispatch: list each expert's tokens so each expert runs once over all of them; slot[t * k +
  // j] is where token t's j-th choice sits in its expert's list.
  const int64_t k = h.n_expert_used;
  auto& by_expert = s_.by_expert;
  auto& slot = s_.slot;
  by_expert.resize(h.n_expert);
  slot.resize(n * k);
  for (auto& rows : by_expert) {
    rows.clear();
    // Room for every token up front, so an expert's first token in a decode step allocates
    // nothing: any expert may be chosen next.
    if (static_cast<int64_t>(rows.capacity()) < n) rows.reserve(std::max<int64_t>(n, 16));
  }
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      int32_t e = routing.experts[t * k + j];
      if (e < 0) continue;
      slot[t * k + j] = static_cast<int32_t>(by_expert[e].size());
      by_expert[e].push_back(static_cast<int32_t>(t));
    }
  }
  // Run every selected expert (and the shared one) together; each names its tokens in xn.
  auto& jobs = s_.jobs;
  auto& job_of_expert = s_.job_of_expert;
  auto& outs = s_.expert_out;
  jobs.clear();
  job_of_expert.assign(h.n_expert, -1);
  outs.resize(h.n_expert);  // sized before any pointer into them is taken
  auto& selected = s_.selected;
  selected.clear();
  for (int e = 0; e < h.n_expert; ++e) {
    if (!by_expert[e].empty()) selected.push_back(e);
  }
  std::vector<float>& shared_out = s_.shared_out;
  if (L.has_shared) shared_out.resize(n * d);
  // Resident experts run in one call. From the expert store they run in chunks of as many as the
  // cache holds at once besides its pinned experts, each chunk pinned until its jobs have run: a
  // prompt batch may select every expert of the layer, and the smallest budget holds only the
  // top-k. Jobs are independent (the outputs are combined afterwards), so chunking changes no
  // result.
  if (store_ != nullptr) ScorePrediction(layer);
  const size_t chunk = store_ != nullptr ? store_->cache().step_capacity() : selected.size();
  size_t next_out = 0;
  for (size_t begin = 0; begin < selected.size() || (begin == 0 && L.has_shared);
       begin += std::max<size_t>(chunk, 1)) {
    const size_t end = std::min(selected.size(), begin + chunk);
    jobs.clear();
    std::optional<ExpertStore::Step> step;
    if (store_ != nullptr && end > begin) {
      auto requested =
          store_->Request(layer, absl::MakeConstSpan(selected).subspan(begin, end - begin));
      if (!requested.ok()) return requested.status();
      step = *std::move(requested);
      // The misses are queued; the next layer's guesses queue behind them while this one runs.
      if (begin == 0 && prefetch_) PrefetchNextLayer(layer, n, x);
    }
    for (size_t i = begin; i < end; ++i) {
      const int e = selected[i];
      const auto& rows = by_expert[e];
      const int64_t m = static_cast<int64_t>(rows.size());
      ScratchVector<float>& res = outs[next_out];
      res.resize(m * d);
      job_of_expert[e] = static_cast<int>(next_out++);
      const ExpertWeights& w = L.experts[e];
      // From the store, the weights are filled in once the expert is read (RunStoredExperts).
      jobs.push_back({w.gate, w.up, w.down, xn.data(), rows.data(), m, res.data()});
      if (tel) {
        tel->expert_counts[layer][e] += m;
        tel->weight_bytes_read += w.byte_size();
        tel->active_params += m * (w.gate.rows * w.gate.cols * 3);
      }
    }
    const bool with_shared = begin == 0 && L.has_shared;
    if (with_shared) {
      jobs.push_back(
          {L.shared.gate, L.shared.up, L.shared.down, xn.data(), nullptr, n, shared_out.data()});
    }
    if (step) {
      MOE_RETURN_IF_ERROR(RunStoredExperts(*step, with_shared));
    } else {
      backend_->RunExperts(jobs);
    }
  }
  if (tel) {
    for (float ent : routing.entropy) tel->router_entropy_sum += ent;
    if (tel->record_routing) {
      if (static_cast<int>(tel->routing_trace.size()) <= layer)
        tel->routing_trace.resize(h.n_layer);
      std::vector<int32_t>& trace = tel->routing_trace[layer];
      trace.insert(trace.end(), routing.experts.begin(), routing.experts.begin() + n * k);
    }
  }
  // Combine: each token's expert outputs in its router's order, weighted, then the gated shared
  // expert, summed into the residual stream in one pass over the tokens.
  const int64_t terms = k + (L.has_shared ? 1 : 0);
  auto& src = s_.combine_src;
  auto& weight = s_.combine_weight;
  src.resize(n * terms);
  weight.resize(n * terms);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = routing.experts[t * k + j];
      src[t * terms + j] = e < 0 ? nullptr : outs[job_of_expert[e]].data() + slot[t * k + j] * d;
      weight[t * terms + j] = e < 0 ? 0.f : routing.weights[t * k + j];
    }
  }
  if (L.has_shared) {
    std::vector<float>& g = s_.shared_gate;
    g.assign(n, 1.f);
    if (!L.shared_gate.empty()) {
      backend_->MatMul(L.shared_gate, xn.data(), n, g.data());
      for (float& v : g) v = 1.f / (1.f + std::exp(-v));
    }
    for (int64_t t = 0; t < n; ++t) {
      src[t * terms + k] = shared_out.data() + t * d;
      weight[t * terms + k] = g[t];
    }
  }
  backend_->AddWeightedRows(n, terms, d, src.data(), weight.data(), x);
  return absl::OkStatus();
}

absl::Status Transformer::RunStoredExperts(const ExpertStore::Step& step, bool with_shared) {
  // jobs[i] is the step's i-th expert; the shared expert, if any, comes last and runs in the
  // first group, so it computes while the first misses are read.
  std::vector<Backend::ExpertJob>& jobs = s_.jobs;
  std::vector<Backend::ExpertJob>& group = s_.group;
  std::vector<char>& done = s_.job_done;
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
    backend_->RunExperts(group);
  }
  return absl::OkStatus();
}

void Transformer::PrefetchNextLayer(int layer, int64_t n, const float* x) {
  const HParams& h = model_->hp();
  const int next = layer + 1;
  if (next >= h.n_layer) return;
  const LayerWeights& N = model_->layers()[next];
  const int64_t d = h.n_embd;
  // The residual stream entering this layer's experts changes little by the next layer's: its
  // router on it mostly picks what it will pick then.
  s_.guess_xn.resize(n * d);
  backend_->RmsNorm(x, N.ffn_norm, n, d, h.rms_eps, s_.guess_xn.data());
  s_.guess_logits.resize(n * h.n_expert);
  backend_->MatMul(N.router, s_.guess_xn.data(), n, s_.guess_logits.data());
  RouterConfig rc{static_cast<int>(h.n_expert), static_cast<int>(h.n_expert_used), h.norm_topk_prob,
                  next < static_cast<int>(disabled_.size()) ? &disabled_[next] : nullptr};
  Route(rc, s_.guess_logits, n, &s_.guess_routing);
  std::vector<int32_t>& count = s_.guess_count;
  count.assign(h.n_expert, 0);
  for (int32_t e : s_.guess_routing.experts) {
    if (e >= 0) ++count[e];
  }
  if (s_.guessed.size() < static_cast<size_t>(h.n_layer)) s_.guessed.resize(h.n_layer);
  std::vector<int32_t>& guess = s_.guessed[next];
  guess.clear();
  for (int e = 0; e < h.n_expert; ++e) {
    if (count[e] > 0) guess.push_back(e);
  }
  // Most chosen first; a prompt batch may pick every expert, more than is worth reading ahead
  // (half the cache, so the guesses cannot crowd out what the steps between use).
  std::stable_sort(guess.begin(), guess.end(),
                   [&](int32_t a, int32_t b) { return count[a] > count[b]; });
  const size_t most = std::max<size_t>(h.n_expert_used, store_->cache().slot_count() / 2);
  if (guess.size() > most) guess.resize(most);
  store_->Prefetch(next, guess);
}

void Transformer::ScorePrediction(int layer) {
  if (static_cast<size_t>(layer) >= s_.guessed.size() || s_.guessed[layer].empty()) return;
  std::vector<int32_t>& guess = s_.guessed[layer];
  int64_t right = 0;
  for (int32_t e : s_.selected) {
    right += std::find(guess.begin(), guess.end(), e) != guess.end();
  }
  store_->cache().RecordPrediction(layer, static_cast<int64_t>(s_.selected.size()), right);
  guess.clear();
}

}  // namespace moe
