#include "tools/moe-cli/perplexity_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/backend/backend.h"
#include "lib/base/status_macros.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/model/kv_cache_for.h"
#include "lib/model/telemetry.h"
#include "lib/runtime/engine.h"
#include "tools/flag_checks.h"
#include "tools/moe-cli/command_status.h"
#include "tools/moe-cli/token_ids.h"
#include "tools/routing_flags.h"
#include "tools/text_tokens.h"

namespace moe::cli {
namespace {

struct PerplexityOptions {
  std::string model;
  std::string file;
  std::string ids_file;
  int ctx = 0;
  int stride = 0;
  bool no_bos = false;
  int threads = 0;
  RoutingPolicy routing;
  std::string kv_type = "f32";
  std::string kl_base;  // a reference model: also report the KL divergence from its predictions
};

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text, int64_t n_vocab) {
  auto ids = ParseTokenIds(text);
  if (!ids.ok()) return ids.status();
  for (int32_t id : *ids) {
    if (id < 0 || id >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(id, " is not a token id of this model (0..", n_vocab - 1, ")"));
    }
  }
  return ids;
}

// log p(next) for every row of a window's logits, in double so long texts sum exactly enough.
double LogProb(const float* row, int64_t n_vocab, int32_t target) {
  const float max = *std::max_element(row, row + n_vocab);
  double sum = 0;
  for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
  return static_cast<double>(row[target]) - max - std::log(sum);
}

// log-softmax of a row, in double.
void LogSoftmax(const float* row, int64_t n, std::vector<double>* out) {
  out->resize(n);
  const float max = *std::max_element(row, row + n);
  double sum = 0;
  for (int64_t v = 0; v < n; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
  const double log_sum = std::log(sum);
  for (int64_t v = 0; v < n; ++v) (*out)[v] = static_cast<double>(row[v]) - max - log_sum;
}

// How far a model's next-token distributions lie from a reference's over the same positions:
// the mean KL(reference || model) and how often both rank the same token first (llama.cpp's
// --kl-divergence figures), far more sensitive to quantization than perplexity.
struct Divergence {
  double kl_sum = 0;
  int64_t same_top = 0, positions = 0;
  std::vector<double> ref, got;
  void Add(const float* reference, const float* model, int64_t n_vocab) {
    LogSoftmax(reference, n_vocab, &ref);
    LogSoftmax(model, n_vocab, &got);
    double kl = 0;
    for (int64_t v = 0; v < n_vocab; ++v) kl += std::exp(ref[v]) * (ref[v] - got[v]);
    kl_sum += kl;
    same_top += std::max_element(reference, reference + n_vocab) - reference ==
                std::max_element(model, model + n_vocab) - model;
    ++positions;
  }
};

// Windows of `ctx` tokens start every `stride` tokens; each scores only the positions no earlier
// window scored, so every token after the first is predicted once, with at least ctx - stride
// tokens of context once the text is longer than one window (models/train.py does the same).
absl::Status Run(const PerplexityOptions& o) {
  if (o.file.empty() == o.ids_file.empty()) {
    return absl::InvalidArgumentError("give exactly one of --file TEXT and --ids-file IDS");
  }
  auto engine = Engine::Load(o.model, {});
  if (!engine.ok()) return engine.status();
  const std::shared_ptr<const Model>& model = (*engine)->model();
  const HParams& h = model->hp();
  std::vector<int32_t> ids;
  if (!o.file.empty()) {
    auto tok = (*engine)->RequireTokenizer();
    if (!tok.ok()) return tok.status();
    auto text = ReadWholeFile(o.file);
    if (!text.ok()) return text.status();
    ids = (*tok)->Encode(*text);
    if (!o.no_bos && (*tok)->bos_id() >= 0) ids.insert(ids.begin(), (*tok)->bos_id());
  } else {
    auto text = ReadWholeFile(o.ids_file);
    if (!text.ok()) return text.status();
    auto parsed = ParseIds(*text, h.n_vocab);
    if (!parsed.ok()) return parsed.status();
    ids = *std::move(parsed);
  }
  if (ids.size() < 2) return absl::InvalidArgumentError("the text has fewer than two tokens");
  const int64_t ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(h.n_ctx_train, 4096);
  if (ctx > h.n_ctx_train) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ctx ", ctx, " exceeds the model's context of ", h.n_ctx_train));
  }
  const int64_t stride = o.stride > 0 ? o.stride : std::max<int64_t>(1, ctx / 2);
  if (stride > ctx) return absl::InvalidArgumentError("--stride must not exceed --ctx");

  auto backend = CreateCpuBackend(o.threads);
  Transformer tf(model, backend.get());
  tf.set_routing_policy(o.routing);
  std::shared_ptr<const Engine> base;
  std::unique_ptr<Transformer> base_tf;
  if (!o.kl_base.empty()) {
    auto loaded = Engine::Load(o.kl_base, {});
    if (!loaded.ok()) return loaded.status();
    base = *loaded;
    if (base->model()->hp().n_vocab != h.n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--kl-base has a vocabulary of ", base->model()->hp().n_vocab, ", not ", h.n_vocab));
    }
    base_tf = std::make_unique<Transformer>(base->model(), backend.get());
  }
  Divergence divergence;
  std::vector<float> base_logits;
  Telemetry tel;
  const int64_t n = static_cast<int64_t>(ids.size());
  double nll = 0;
  int64_t scored = 0, scored_upto = 1;  // position 0 has nothing to predict it
  std::vector<float> logits;
  RoutingHistory history;  // each window's own, for load-aware re-weighting
  for (int64_t start = 0;; start += stride) {
    const int64_t end = std::min(start + ctx, n);
    const DType kv = o.kv_type == "f16"    ? DType::kF16
                     : o.kv_type == "q8_0" ? DType::kQ8_0
                                           : DType::kF32;
    auto cache = KvCacheFor(tf.model(), ctx, kv);
    if (!cache.ok()) return cache.status();
    absl::Span<const int32_t> window(ids.data() + start, end - start);
    history.Clear();
    absl::Status s = tf.Forward(window, *cache, LogitsFor::kAll, &logits, &tel,
                                o.routing.load_window > 0 ? &history : nullptr);
    if (!s.ok()) return s;
    if (base_tf) {
      auto base_cache = KvCacheFor(*base->model(), ctx, kv);
      if (!base_cache.ok()) return base_cache.status();
      MOE_RETURN_IF_ERROR(base_tf->Forward(window, *base_cache, LogitsFor::kAll, &base_logits));
    }
    for (int64_t pos = std::max(scored_upto, start + 1); pos < end; ++pos) {
      nll -= LogProb(logits.data() + (pos - start - 1) * h.n_vocab, h.n_vocab, ids[pos]);
      ++scored;
      if (base_tf) {
        divergence.Add(base_logits.data() + (pos - start - 1) * h.n_vocab,
                       logits.data() + (pos - start - 1) * h.n_vocab, h.n_vocab);
      }
    }
    scored_upto = end;
    if (end == n) break;
  }
  std::printf("perplexity %.6f over %lld tokens (window %lld, stride %lld)\n",
              std::exp(nll / scored), static_cast<long long>(scored), static_cast<long long>(ctx),
              static_cast<long long>(stride));
  if (o.routing.confidence > 0) {
    std::printf("experts per token %.3f of %lld (mean over layers and positions run)\n",
                tel.MeanExpertsPerToken(), static_cast<long long>(h.n_expert_used));
  }
  if (base_tf) {
    std::printf("KL divergence from %s: mean %.6f nats; same top token %.2f%% of %lld positions\n",
                o.kl_base.c_str(), divergence.kl_sum / divergence.positions,
                100.0 * divergence.same_top / divergence.positions,
                static_cast<long long>(divergence.positions));
  }
  if (o.routing.capacity_factor > 0 || o.routing.load_window > 0) {
    // Each window runs as one step, so a capacity caps the experts over its tokens.
    std::printf("routing policy: %lld choices rerouted, %lld dropped, %lld weighted down\n",
                static_cast<long long>(tel.rerouted_choices),
                static_cast<long long>(tel.dropped_choices),
                static_cast<long long>(tel.reweighted_choices));
  }
  return absl::OkStatus();
}

}  // namespace

void AddPerplexityCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand("perplexity", "perplexity of a text under the model");
  cmd->add_option("-m,--model", opts->model, "model (.moe, .gguf or Hugging Face directory)")
      ->required();
  cmd->add_option("-f,--file", opts->file, "text file, tokenized with the model's tokenizer");
  cmd->add_option("--ids-file", opts->ids_file, "token ids (whitespace separated) instead of text");
  cmd->add_option("-c,--ctx", opts->ctx, "window length (0 = the model's context, at most 4096)")
      ->check(AtLeast(0, "0 = the model's context"));
  cmd->add_option("--stride", opts->stride, "tokens between window starts (0 = half the window)")
      ->check(AtLeast(0, "0 = half the window"));
  cmd->add_flag("--no-bos", opts->no_bos, "do not put BOS before the text");
  cmd->add_option("-t,--threads", opts->threads, "threads (0 = one per core)")
      ->check(ThreadCount());
  AddRoutingFlags(cmd, &opts->routing);
  cmd->add_option("--kl-base", opts->kl_base,
                  "a reference model (e.g. the unquantized one): also print the mean KL "
                  "divergence of this model's predictions from its, and how often both rank the "
                  "same token first");
  cmd->add_option("--kv-type", opts->kv_type, "KV cache element type")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}))
      ->capture_default_str();
  cmd->callback([opts, exit_code] { ReportStatus("perplexity", Run(*opts), exit_code); });
}

}  // namespace moe::cli
