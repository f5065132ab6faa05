#include "lib/runtime/engine.h"

#include "absl/status/status.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/base/status_macros.h"
#include "lib/import/model_loader.h"
#include "lib/runtime/weight_copy.h"

namespace moe {

absl::StatusOr<std::shared_ptr<const Engine>> Engine::Load(const std::string& path,
                                                           const LoadOptions& options) {
  auto report = [&](float f) { return !options.progress || options.progress(f); };
  if (!report(0.0f)) return absl::CancelledError("model load cancelled");
  MOE_ASSIGN_OR_RETURN(ModelSpec spec, LoadModelSpec(path));
  if (!report(0.1f)) return absl::CancelledError("model load cancelled");
  if (!options.use_mmap) {
    // Rows are re-laid for the kernels of the level this process runs (RepackedType).
    MOE_RETURN_IF_ERROR(CopyWeights(spec, options.repack, ActiveSimdLevel(), options.progress));
  }
  auto engine = FromSpec(std::move(spec));
  if (engine.ok() && !report(1.0f)) return absl::CancelledError("model load cancelled");
  return engine;
}

absl::StatusOr<std::shared_ptr<const Engine>> Engine::FromSpec(ModelSpec spec) {
  auto engine = std::make_shared<Engine>();
  if (!spec.tokenizer.tokens.empty()) {
    auto tok = Tokenizer::Create(spec.tokenizer);
    if (tok.ok()) {
      engine->tokenizer_ = *std::move(tok);
    } else {
      engine->tokenizer_error_ = tok.status();
    }
  } else {
    engine->tokenizer_error_ = absl::UnimplementedError("the model file has no tokenizer");
  }
  engine->params_ = CountParams(spec);
  for (const auto& t : spec.tensors) {
    if (t.expert < 0) engine->dense_params_ += t.num_elements();
  }
  MOE_ASSIGN_OR_RETURN(engine->model_, Model::Create(std::move(spec)));
  return std::shared_ptr<const Engine>(std::move(engine));
}

double Engine::ActiveParamsPerToken(const Telemetry& t) const {
  if (t.tokens == 0) return 0;
  return dense_params_ + static_cast<double>(t.active_params) / t.tokens;
}

absl::StatusOr<const Tokenizer*> Engine::RequireTokenizer() const {
  if (tokenizer_) return tokenizer_.get();
  return Annotate(tokenizer_error_, "text input needs a tokenizer");
}

}  // namespace moe
