#include "lib/runtime/engine.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/repack.h"
#include "lib/base/anonymous_memory.h"
#include "lib/base/status_macros.h"
#include "lib/import/model_loader.h"

namespace moe {
namespace {

// Drops the whole pages of a copied range of a read-only file mapping from this process, so that
// loading does not hold the model twice (the page cache may keep them; that is not ours).
void ReleaseMappedPages(absl::Span<const uint8_t> range) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = (reinterpret_cast<uintptr_t>(range.data()) + page - 1) / page * page;
  uintptr_t end = (reinterpret_cast<uintptr_t>(range.data()) + range.size()) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// Copies every tensor into anonymous memory (huge pages where allowed), reporting progress; the
// mapping of the file is released afterwards.
absl::Status CopyWeights(ModelSpec& spec, bool repack, SimdLevel level,
                         const std::function<bool(float)>& progress) {
  size_t total = 0;
  for (const auto& t : spec.tensors) total += (t.data.size() + 63) / 64 * 64;
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<AnonymousMemory> memory, AnonymousMemory::Allocate(total));
  size_t pos = 0, done = 0;
  for (auto& t : spec.tensors) {
    std::memcpy(memory->data() + pos, t.data.data(), t.data.size());
    ReleaseMappedPages(t.data);
    t.data = {memory->data() + pos, t.data.size()};
    if (repack && t.shape.size() == 2) {
      const DType r = RepackedType(t.dtype, t.shape[0], t.shape[1], level);
      if (r != t.dtype) {
        RepackRows(t.dtype, memory->data() + pos, t.shape[0], t.shape[1], level);
        t.dtype = r;
      }
    }
    pos += (t.data.size() + 63) / 64 * 64;
    done += t.data.size();
    if (progress && !progress(0.1f + 0.8f * done / std::max<size_t>(1, total))) {
      return absl::CancelledError("model load cancelled");
    }
  }
  spec.owners.clear();
  spec.owners.push_back(memory);
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
