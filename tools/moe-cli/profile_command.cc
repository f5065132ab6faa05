#include "tools/moe-cli/profile_command.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/backend/backend.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/model/kv_cache_for.h"
#include "lib/moe/routing_locality.h"
#include "lib/moe/routing_profile.h"
#include "lib/runtime/engine.h"
#include "tools/flag_checks.h"
#include "tools/moe-cli/command_status.h"
#include "tools/text_tokens.h"

namespace moe::cli {
namespace {

struct ProfileOptions {
  std::string model;
  std::string file;
  std::string output;
  int ctx = 0;
  int threads = 0;
};

// The share of a layer's routed tokens that its hottest `fraction` of experts took.
double HottestShare(std::vector<int64_t> counts, double fraction) {
  std::sort(counts.begin(), counts.end(), std::greater<int64_t>());
  const size_t n = std::max<size_t>(1, static_cast<size_t>(fraction * counts.size()));
  int64_t all = 0, top = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    all += counts[i];
    if (i < n) top += counts[i];
  }
  return all > 0 ? static_cast<double>(top) / all : 0;
}

// Reuse distances per layer, then the hit rate caches of 50 / 25 / 12.5% of the experts would
// reach on this text: LRU, the best static placement (an oracle), and uniform routing's.
void PrintLocality(const RoutingLocality& r) {
  std::printf(
      "routing locality, in decode order (reuse distance: tokens since the layer last chose "
      "the expert)\n"
      "  layer  choices  first   d=1   2-4  5-16 17-64   >64  median   mean\n");
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const LayerLocality& x = r.layers[l];
    const double c = x.choices > 0 ? 100.0 / x.choices : 0;
    std::printf("  %-5zu %8lld %5.1f%% %4.1f%% %4.1f%% %4.1f%% %4.1f%% %4.1f%% %7lld %6.1f\n", l,
                static_cast<long long>(x.choices), c * x.first_uses, c * x.reuse_buckets[0],
                c * x.reuse_buckets[1], c * x.reuse_buckets[2], c * x.reuse_buckets[3],
                c * x.reuse_buckets[4], static_cast<long long>(x.median_reuse), x.mean_reuse);
  }
  std::printf("hit rate of a cache holding a share of all %lld experts (first uses miss)\n",
              static_cast<long long>(r.experts));
  for (double share : {0.5, 0.25, 0.125}) {
    const int64_t capacity = std::max<int64_t>(1, static_cast<int64_t>(share * r.experts));
    std::printf(
        "  %5.1f%% (%lld experts): LRU %5.1f%%, best static placement %5.1f%%, "
        "uniform routing %5.1f%%\n",
        100 * share, static_cast<long long>(capacity), 100 * r.LruHitRate(capacity),
        100 * r.StaticHitRate(capacity), 100.0 * capacity / r.experts);
  }
}

absl::Status Run(const ProfileOptions& o) {
  auto engine = Engine::Load(o.model, {});
  if (!engine.ok()) return engine.status();
  auto text_ids = ReadTextTokens(**engine, o.file);
  if (!text_ids.ok()) return text_ids.status();
  const std::vector<int32_t>& ids = *text_ids;
  const std::shared_ptr<const Model>& model = (*engine)->model();
  const HParams& h = model->hp();
  const int64_t ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(h.n_ctx_train, 2048);
  auto backend = CreateCpuBackend(o.threads);
  Transformer tf(model, backend.get());
  Telemetry tel;
  tel.record_routing = true;
  // The text in windows of ctx tokens, each from an empty context: routing as generation sees it.
  for (size_t start = 0; start < ids.size(); start += ctx) {
    const size_t end = std::min(ids.size(), start + static_cast<size_t>(ctx));
    auto cache = KvCacheFor(tf.model(), ctx, DType::kF16);
    if (!cache.ok()) return cache.status();
    absl::Span<const int32_t> window(ids.data() + start, end - start);
    if (absl::Status s = tf.Forward(window, *cache, LogitsFor::kNone, nullptr, &tel); !s.ok()) {
      return s;
    }
  }
  RoutingProfile profile{tel.expert_counts};
  if (absl::Status s = profile.WriteFile(o.output); !s.ok()) return s;
  std::printf("wrote %s: %lld tokens, %lld layers of %lld experts (top-%lld)\n", o.output.c_str(),
              static_cast<long long>(ids.size()), static_cast<long long>(h.n_layer),
              static_cast<long long>(h.n_expert), static_cast<long long>(h.n_expert_used));
  std::printf(
      "share of routed tokens taken by each layer's hottest 12.5%% / 25%% / 50%% of "
      "experts\n");
  for (size_t l = 0; l < profile.counts.size(); ++l) {
    std::printf(
        "  layer %-3zu %5.1f%% %5.1f%% %5.1f%%\n", l, 100 * HottestShare(profile.counts[l], 0.125),
        100 * HottestShare(profile.counts[l], 0.25), 100 * HottestShare(profile.counts[l], 0.5));
  }
  auto locality = AnalyzeRoutingLocality(
      RoutingTrace{h.n_expert, h.n_expert_used, std::move(tel.routing_trace)});
  if (!locality.ok()) return locality.status();
  PrintLocality(*locality);
  return absl::OkStatus();
}

}  // namespace

void AddProfileCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<ProfileOptions>();
  CLI::App* cmd = app.add_subcommand(
      "profile", "count the experts a text routes to: a routing profile that warms the cache");
  cmd->add_option("-m,--model", opts->model, "model (.moe, .gguf or Hugging Face directory)")
      ->required();
  cmd->add_option("-f,--file", opts->file, "text file, tokenized with the model's tokenizer")
      ->required();
  cmd->add_option("-o,--output", opts->output, "the routing profile to write (JSON)")->required();
  cmd->add_option("-c,--ctx", opts->ctx, "window length (0 = the model's context, at most 2048)")
      ->check(AtLeast(0, "0 = the model's context"));
  cmd->add_option("-t,--threads", opts->threads, "threads (0 = one per core)")
      ->check(ThreadCount());
  cmd->callback([opts, exit_code] { ReportStatus("profile", Run(*opts), exit_code); });
}

}  // namespace moe::cli
