#include "tools/moe-cli/profile_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/backend/backend.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/moe/routing_profile.h"
#include "lib/runtime/engine.h"
#include "tools/flag_checks.h"
#include "tools/moe-cli/command_status.h"

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

absl::Status Run(const ProfileOptions& o) {
  auto engine = Engine::Load(o.model, {});
  if (!engine.ok()) return engine.status();
  auto tok = (*engine)->RequireTokenizer();
  if (!tok.ok()) return tok.status();
  std::ifstream f(o.file, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open '", o.file, "'"));
  std::stringstream text;
  text << f.rdbuf();
  std::vector<int32_t> ids = (*tok)->Encode(text.str());
  if ((*tok)->bos_id() >= 0) ids.insert(ids.begin(), (*tok)->bos_id());
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat("'", o.file, "' is empty"));
  const std::shared_ptr<const Model>& model = (*engine)->model();
  const HParams& h = model->hp();
  const int64_t ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(h.n_ctx_train, 2048);
  auto backend = CreateCpuBackend(o.threads);
  Transformer tf(model, backend.get());
  Telemetry tel;
  // The text in windows of ctx tokens, each from an empty context: routing as generation sees it.
  for (size_t start = 0; start < ids.size(); start += ctx) {
    const size_t end = std::min(ids.size(), start + static_cast<size_t>(ctx));
    auto cache = KvCache::Create(h.n_layer, ctx, h.n_head_kv, h.head_dim, DType::kF16);
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
