#include "lib/model/forward.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/moe/router.h"

namespace moe {

absl::Status Transformer::Forward(absl::Span<const int32_t> tokens, KvCache& cache, LogitsFor which,
                                  std::vector<float>* logits, Telemetry* tel,
                                  RoutingHistory* routing_history) {
  if (logits == nullptr) which = LogitsFor::kNone;
  const SequenceChunk chunk{tokens, cache.size(), &cache, which, routing_history};
  MOE_RETURN_IF_ERROR(ForwardBatch({&chunk, 1}, logits, tel));
  cache.set_size(cache.size() + static_cast<int64_t>(tokens.size()));
  return absl::OkStatus();
}

void Transformer::set_disabled_experts(std::vector<std::vector<bool>> disabled) {
  const auto& pruned = model_->pruned_experts();
  for (size_t l = 0; l < pruned.size(); ++l) {
    if (std::find(pruned[l].begin(), pruned[l].end(), true) == pruned[l].end()) continue;
    if (disabled.size() < pruned.size()) disabled.resize(pruned.size());
    if (disabled[l].empty()) {
      disabled[l] = pruned[l];
    } else {
      for (size_t e = 0; e < pruned[l].size(); ++e) disabled[l][e] = disabled[l][e] || pruned[l][e];
    }
  }
  mixture_.set_disabled_experts(std::move(disabled));
}

void Transformer::AddCosts(absl::Span<const SequenceChunk> batch, Telemetry* tel) {
  const HParams& h = model_->hp();
  if (dense_macs_per_token_ < 0) {
    // Every matrix a token multiplies whatever its routing, and the bytes it reads.
    dense_macs_per_token_ = 0;
    dense_bytes_per_token_ = static_cast<int64_t>(model_->token_embd().row_bytes());
    for (const LayerWeights& L : model_->layers()) {
      for (const WeightView* w :
           {&L.wq,          &L.wk,          &L.wv,          &L.wo,          &L.wq_a,
            &L.wq_b,        &L.wkv_a,       &L.wk_b,        &L.wv_b,        &L.conv_in,
            &L.ssm_in,      &L.ssm_z,       &L.ssm_beta,    &L.ssm_alpha,   &L.dense.gate,
            &L.dense.up,    &L.dense.down,  &L.router,      &L.shared.gate, &L.shared.up,
            &L.shared.down, &L.shared_gate, &L.latent_down, &L.latent_up}) {
        if (!w->empty()) dense_macs_per_token_ += w->rows * w->cols;
      }
      dense_bytes_per_token_ += static_cast<int64_t>(L.dense_bytes);
    }
  }
  // Attention: per head, a score (key size) and a weighted value (value size) per position seen.
  const int64_t score_size = h.latent_attention() ? h.kv_lora_rank + h.rope_dim : h.head_dim;
  const int64_t value_size = h.latent_attention() ? h.kv_lora_rank : h.head_dim;
  const std::vector<int64_t>& windows = model_->attention_windows();
  const int64_t head = model_->output().rows * model_->output().cols;
  int64_t row = 0;
  for (const SequenceChunk& c : batch) {
    const int64_t m = static_cast<int64_t>(c.tokens.size());
    SequenceCost cost;
    for (int64_t t = 0; t < m; ++t, ++row) {
      const int64_t pos = c.pos0 + t;
      int64_t macs = dense_macs_per_token_ + row_expert_macs_[row];
      for (size_t l = 0; l < windows.size(); ++l) {
        const int64_t window = windows[l];
        const int64_t seen = window > 0 ? std::min(pos + 1, window) : pos + 1;
        const AttentionPart part = model_->layers()[l].parts.attention;
        // A convolution's kernel over each channel's last positions.
        const int64_t short_kernel = std::min(pos + 1, h.short_conv_kernel);
        const int64_t ssm_kernel = std::min(pos + 1, h.ssm_conv_kernel);
        if (part == AttentionPart::kNone) continue;
        if (part == AttentionPart::kShortConv) {
          macs += h.n_embd * short_kernel;
        } else if (part == AttentionPart::kMamba2) {
          // The kernel, then each head's state: decay, input and output.
          macs += h.ssm_conv_channels() * ssm_kernel + 3 * h.ssm_state_floats();
        } else if (part == AttentionPart::kGatedDeltaNet) {
          // The kernel, then each value head's state: decay, the two products with k and q, the
          // update.
          macs += h.ssm_conv_channels() * ssm_kernel + 4 * h.ssm_state_floats();
        } else {
          macs += h.n_head * (score_size + value_size) * seen;
        }
      }
      int64_t bytes = dense_bytes_per_token_ + row_expert_bytes_[row];
      if (c.logits == LogitsFor::kAll || (c.logits == LogitsFor::kLast && t == m - 1)) {
        macs += head;
        bytes += static_cast<int64_t>(model_->output().byte_size());
      }
      cost.multiply_adds += macs;
      cost.weight_bytes += bytes;
    }
    cost.tokens = m;
    if (c.cost != nullptr) {
      c.cost->tokens += cost.tokens;
      c.cost->weight_bytes += cost.weight_bytes;
      c.cost->multiply_adds += cost.multiply_adds;
    }
    if (tel != nullptr) {
      tel->active_weight_bytes += cost.weight_bytes;
      tel->multiply_adds += cost.multiply_adds;
    }
  }
}

absl::Status CheckTokenIds(absl::Span<const int32_t> tokens, int64_t n_vocab) {
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab) {
      return absl::OutOfRangeError(
          absl::StrCat("token id ", t, " is outside the vocabulary [0, ", n_vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Transformer::ForwardBatch(absl::Span<const SequenceChunk> batch,
                                       std::vector<float>* logits, Telemetry* tel) {
  if (!model_->spec().holds_dense()) {
    return absl::FailedPreconditionError(
        "this model holds routed experts only (its rank's share, the rest on rank 0): it serves "
        "rank 0's layers and cannot run a step itself");
  }
  const HParams& h = model_->hp();
  std::vector<int32_t>& tokens = tokens_;
  std::vector<int32_t>& positions = positions_;
  std::vector<int64_t>& logit_rows = logit_rows_;
  tokens.clear();
  positions.clear();
  logit_rows.clear();
  histories_.clear();
  const bool any_history = std::any_of(batch.begin(), batch.end(), [](const SequenceChunk& c) {
    return c.routing_history != nullptr;
  });
  for (const SequenceChunk& c : batch) {
    const int64_t m = static_cast<int64_t>(c.tokens.size());
    if (m == 0) return absl::InvalidArgumentError("no tokens to process");
    if (c.kv == nullptr) return absl::InvalidArgumentError("a sequence without a KV cache");
    MOE_RETURN_IF_ERROR(CheckTokenIds(c.tokens, h.n_vocab));
    if (const int64_t most = c.kv->max_step_tokens(); most > 0 && m > most) {
      return absl::InvalidArgumentError(
          absl::StrCat("a step of ", m, " tokens is more than the ", most,
                       " this KV cache's sliding-window rings were sized for"));
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
    if (any_history) histories_.insert(histories_.end(), m, c.routing_history);
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return absl::InvalidArgumentError("no tokens to process");

  if (tel != nullptr && tel->expert_counts.empty()) tel->Reset(h.n_layer, h.n_expert);
  Backend& be = *backend_;
  MOE_ASSIGN_OR_RETURN(float* x, x_.Resize(be, n * h.n_embd));
  {
    StageTimer timer(tel, &StageTimes::other_s);
    be.GetRows(model_->token_embd(), tokens.data(), n, x);
    if (h.embedding_scale != 1.f) be.Scale(h.embedding_scale, x, n * h.n_embd);
  }
  // Each token's cost is counted when a sequence or the telemetry wants it.
  const bool costed = tel != nullptr || std::any_of(batch.begin(), batch.end(), [](const auto& c) {
                        return c.cost != nullptr;
                      });
  if (costed) {
    row_expert_bytes_.assign(n, 0);
    row_expert_macs_.assign(n, 0);
  }
  const StepContext ctx{*model_,
                        backend_,
                        positions,
                        histories_,
                        tel,
                        costed ? row_expert_bytes_.data() : nullptr,
                        costed ? row_expert_macs_.data() : nullptr};
  mixture_.BeginStep();
  for (int l = 0; l < h.n_layer; ++l) {
    if (l > 0 && cancel_check_ && cancel_check_()) {
      // What was queued still runs; the rows it writes lie past the caches' sizes.
      be.TakeError().IgnoreError();
      return absl::CancelledError(absl::StrCat("cancelled before layer ", l));
    }
    const LayerWeights& L = model_->layers()[l];
    switch (L.parts.attention) {
      case AttentionPart::kGroupedQuery:
        MOE_RETURN_IF_ERROR(attention_.Run(ctx, l, L, batch, n, x));
        break;
      case AttentionPart::kLatent:
        MOE_RETURN_IF_ERROR(latent_attention_.Run(ctx, l, L, batch, n, x));
        break;
      case AttentionPart::kShortConv:
        MOE_RETURN_IF_ERROR(short_conv_.Run(ctx, l, L, batch, n, x));
        break;
      case AttentionPart::kMamba2:
        MOE_RETURN_IF_ERROR(mamba2_.Run(ctx, l, L, batch, n, x));
        break;
      case AttentionPart::kGatedDeltaNet:
        MOE_RETURN_IF_ERROR(gated_delta_net_.Run(ctx, l, L, batch, n, x));
        break;
      case AttentionPart::kNone:
        break;
    }
    // An error (an expert that could not be read, memory the backend could not give) leaves the
    // caches' sizes to the caller: the K/V rows written for these tokens lie past them and are
    // overwritten next call.
    switch (L.parts.ffn) {
      case FeedForwardPart::kDense:
        MOE_RETURN_IF_ERROR(mixture_.PrefetchAcrossDense(ctx, l, n, x));
        MOE_RETURN_IF_ERROR(dense_.Run(ctx, L, n, x));
        break;
      case FeedForwardPart::kMixture:
        MOE_RETURN_IF_ERROR(mixture_.Run(ctx, l, L, n, x));
        break;
      case FeedForwardPart::kNone:
        break;
    }
  }

  // Routing kept in the backend is read back (and the rows' costs known) once the step has been
  // queued to its end: a device waits here only with the logits.
  auto finish = [&]() -> absl::Status {
    MOE_RETURN_IF_ERROR(mixture_.FinishStep(ctx));
    if (costed) AddCosts(batch, tel);
    return be.TakeError();
  };
  StageTimer timer(tel, &StageTimes::head_s);
  if (tel) {
    tel->tokens += n;
    tel->weight_bytes_read += model_->output().byte_size() + model_->token_embd().row_bytes() * n;
    for (const auto& L : model_->layers()) tel->weight_bytes_read += L.dense_bytes;
  }
  if (logit_rows.empty() || logits == nullptr) return finish();
  const int64_t rows = static_cast<int64_t>(logit_rows.size());
  be.PrefetchProducts({&model_->output(), 1}, rows);
  MOE_ASSIGN_OR_RETURN(float* xn, xn_.Resize(be, rows * h.n_embd));
  // The rows asked for are gathered first, so the norm and the head run once over all of them
  // (logit_rows ascends, so row r never overwrites a row still to be moved).
  for (int64_t r = 0; r < rows; ++r) {
    if (logit_rows[r] != r) {
      be.CopyRows(x + logit_rows[r] * h.n_embd, h.n_embd, 1, h.n_embd, x + r * h.n_embd, h.n_embd);
    }
  }
  be.RmsNorm(x, model_->output_norm(), rows, h.n_embd, h.rms_eps, xn);
  // The head writes the caller's logits where the backend works in host memory (a 1 MB copy a
  // step at 8 sequences of a 32k vocabulary, half of it read from the other core); elsewhere they
  // come back in the step's one copy of any size.
  logits->resize(rows * h.n_vocab);
  const bool in_place = be.works_in_host_memory();
  float* out = logits->data();
  if (!in_place) {
    MOE_ASSIGN_OR_RETURN(out, logits_.Resize(be, rows * h.n_vocab));
  }
  be.MatMul(model_->output(), xn, rows, out);
  if (h.logit_scale != 1.f) be.Scale(1.f / h.logit_scale, out, rows * h.n_vocab);
  if (!in_place) be.CopyToHost(out, logits->size() * sizeof(float), logits->data());
  return finish();
}

}  // namespace moe
