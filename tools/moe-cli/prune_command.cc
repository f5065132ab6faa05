#include "tools/moe-cli/prune_command.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/format/moe_writer.h"
#include "lib/import/hf_import.h"
#include "lib/import/model_loader.h"
#include "lib/model/arch/architecture.h"
#include "lib/moe/expert_pruning.h"
#include "lib/moe/routing_profile.h"
#include "tools/moe-cli/command_status.h"
#include "tools/write_progress_printer.h"

namespace moe::cli {
namespace {

struct PruneOptions {
  std::string model, profile, output;
  double keep = 0.9;
};

absl::Status Run(const PruneOptions& o) {
  absl::StatusOr<ModelSpec> loaded =
      LooksLikeHfCheckpoint(o.model) ? ImportHfCheckpoint(o.model, std::nullopt, ConvertAt::kWrite)
                                     : LoadModelSpec(o.model);
  if (!loaded.ok()) return loaded.status();
  ModelSpec spec = *std::move(loaded);
  const HParams& h = spec.hp;
  MOE_ASSIGN_OR_RETURN(RoutingProfile profile,
                       RoutingProfile::ReadFile(o.profile, static_cast<int>(h.n_layer),
                                                static_cast<int>(h.n_expert)));
  const Architecture& arch = ArchitectureOf(spec.arch);
  std::vector<bool> routed(h.n_layer);
  for (int l = 0; l < h.n_layer; ++l) {
    routed[l] = arch.Layer(h, l).ffn == FeedForwardPart::kMixture;
  }
  MOE_ASSIGN_OR_RETURN(PruningPlan plan,
                       PlanPruning(profile, o.keep, static_cast<int>(h.n_expert_used), routed));
  // CountParams leaves pruned experts out.
  const auto before = static_cast<size_t>(CountParams(spec).total_bytes);
  // Experts the input already lacked stay pruned.
  const auto already = spec.PrunedMask();
  for (const ExpertKey& k : plan.pruned) {
    if (!already[k.layer][k.expert]) spec.pruned_experts.push_back({k.layer, k.expert});
  }
  MOE_RETURN_IF_ERROR(WriteMoeFile(spec, o.output, PrintWriteProgress("moe-cli prune")));
  const auto pruned = spec.PrunedMask();
  for (int l = 0; l < h.n_layer; ++l) {
    if (!routed[l]) continue;
    int gone = 0;
    for (bool p : pruned[l]) gone += p;
    std::printf("layer %d: %lld of %lld experts kept, carrying %.1f%% of the profile's choices\n",
                l, static_cast<long long>(h.n_expert - gone), static_cast<long long>(h.n_expert),
                100.0 * plan.kept_traffic[l]);
  }
  const auto after = static_cast<size_t>(CountParams(spec).total_bytes);
  std::printf("pruned %zu experts: weights %.2f MiB -> %.2f MiB (%.1f%%); wrote %s\n",
              spec.pruned_experts.size(), before / 1048576.0, after / 1048576.0,
              before > 0 ? 100.0 * after / before : 0.0, o.output.c_str());
  return absl::OkStatus();
}

}  // namespace

void AddPruneCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<PruneOptions>();
  CLI::App* cmd = app.add_subcommand(
      "prune", "drop the experts a routing profile shows carry little traffic, writing a .moe");
  cmd->add_option("-m,--model", opts->model, "model (.moe, .gguf or Hugging Face directory)")
      ->required();
  cmd->add_option("--profile", opts->profile, "routing profile (moe-cli profile) to judge by")
      ->required();
  cmd->add_option("--keep", opts->keep,
                  "per layer, keep the most chosen experts until they carry this share of its "
                  "choices (at least the model's experts per token)")
      ->check(CLI::Range(1e-6, 1.0));
  cmd->add_option("-o,--output", opts->output, "the pruned .moe to write")->required();
  cmd->callback([opts, exit_code] { ReportStatus("prune", Run(*opts), exit_code); });
}

}  // namespace moe::cli
