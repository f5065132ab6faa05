#include "lib/runtime/engine.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/model_loader.h"

namespace moe {
namespace {

// Copies every tensor into process memory, reporting progress; the mapping is released after.
absl::Status CopyWeights(ModelSpec& spec, const std::function<bool(float)>& progress) {
  size_t total = 0;
  for (const auto& t : spec.tensors) total += t.data.size();
  auto buffer = std::shared_ptr<uint8_t[]>(new (std::nothrow) uint8_t[total + 64]);
  if (!buffer) {
    return absl::UnavailableError(
        absl::StrCat("out of memory: cannot allocate ", total, " bytes for weights"));
  }
  uint8_t* base = buffer.get() + (64 - reinterpret_cast<uintptr_t>(buffer.get()) % 64) % 64;
  size_t pos = 0, done = 0;
  for (auto& t : spec.tensors) {
    pos = (pos + 63) / 64 * 64;
    if (pos + t.data.size() > total + 64 - (base - buffer.get())) {
      return absl::InternalError("weight buffer too small");
    }
    std::memcpy(base + pos, t.data.data(), t.data.size());
    t.data = {base + pos, t.data.size()};
    pos += t.data.size();
    done += t.data.size();
    if (progress && !progress(0.1f + 0.8f * done / std::max<size_t>(1, total))) {
      return absl::CancelledError("model load cancelled");
    }
  }
  spec.owners.clear();
  spec.owners.push_back(buffer);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Engine>> Engine::Load(const std::string& path,
                                                           const LoadOptions& options) {
  auto report = [&](float f) { return !options.progress || options.progress(f); };
  if (!report(0.0f)) return absl::CancelledError("model load cancelled");
  MOE_ASSIGN_OR_RETURN(ModelSpec spec, LoadModelSpec(path));
  if (!report(0.1f)) return absl::CancelledError("model load cancelled");
  if (!options.use_mmap) {
    // The container's tensor spans may overlap padding only; copy packs them tighter.
    MOE_RETURN_IF_ERROR(CopyWeights(spec, options.progress));
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

absl::StatusOr<const Tokenizer*> Engine::RequireTokenizer() const {
  if (tokenizer_) return tokenizer_.get();
  return Annotate(tokenizer_error_, "text input needs a tokenizer");
}

}  // namespace moe
