#include "lib/model/arch/architecture.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/model/arch/families.h"

namespace moe {
namespace {

// The registry: one entry per file of this folder.
const Architecture* const* All(size_t* count) {
  static const Architecture* const kAll[] = {
      &LlamaArchitecture(),        &Qwen2MoeArchitecture(),      &OlmoeArchitecture(),
      &Qwen3MoeArchitecture(),     &Glm4MoeArchitecture(),       &Deepseek2Architecture(),
      &GptOssArchitecture(),       &Qwen3VlMoeArchitecture(),    &Ernie45MoeArchitecture(),
      &GraniteMoeArchitecture(),   &Llama4Architecture(),        &BailingMoe2Architecture(),
      &MinimaxM2Architecture(),    &Dots1Architecture(),         &Lfm2MoeArchitecture(),
      &HunyuanMoeArchitecture(),   &GraniteHybridArchitecture(), &DeepseekArchitecture(),
      &NemotronHMoeArchitecture(), &Qwen35MoeArchitecture(),     &Qwen3NextArchitecture()};
  *count = sizeof(kAll) / sizeof(kAll[0]);
  return kAll;
}

}  // namespace

const Architecture& ArchitectureOf(Arch a) {
  size_t n = 0;
  const Architecture* const* all = All(&n);
  for (size_t i = 0; i < n; ++i) {
    if (all[i]->id() == a) return *all[i];
  }
  return *all[0];  // unreachable: every Arch has a file
}

absl::StatusOr<const Architecture*> FindArchitecture(absl::string_view name) {
  size_t n = 0;
  const Architecture* const* all = All(&n);
  for (size_t i = 0; i < n; ++i) {
    if (all[i]->name() == name) return all[i];
  }
  return absl::UnimplementedError(absl::StrCat(
      "unsupported architecture '", name, "' (supported: ", SupportedArchitectureNames(), ")"));
}

std::string SupportedArchitectureNames() {
  size_t n = 0;
  const Architecture* const* all = All(&n);
  std::vector<absl::string_view> names;
  for (size_t i = 0; i < n; ++i) names.push_back(all[i]->name());
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<int64_t> NoMetadata::Int(absl::string_view key, std::optional<int64_t> def) const {
  if (def) return *def;
  return absl::NotFoundError(absl::StrCat("no value for required key '", key, "'"));
}

LayerParts MixtureLayer(absl::string_view ffn_norm) {
  LayerParts p;
  p.ffn_norm = ffn_norm;
  return p;
}

}  // namespace moe
