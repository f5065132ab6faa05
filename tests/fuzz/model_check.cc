#include "tests/fuzz/model_check.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "lib/base/half.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/model/model.h"
#include "tests/fuzz/fuzz_support.h"

namespace moe::fuzz {
namespace {

// Reads every byte, so a tensor reaching past its mapping faults here (or under ASan for heap
// buffers) rather than somewhere deep in a kernel.
uint8_t Touch(absl::Span<const uint8_t> data) {
  uint8_t x = 0;
  for (uint8_t b : data) x ^= b;
  return x;
}

}  // namespace

void CheckSpecAndRun(ModelSpec spec, absl::Span<const uint8_t> file) {
  volatile uint8_t sink = 0;
  for (const TensorSpec& t : spec.tensors) {
    MOE_FUZZ_CHECK(t.data.size() == t.byte_size());
    if (!file.empty() && !t.data.empty()) {
      // Converted tensors (e.g. dequantized or split copies) live in buffers the spec owns; a
      // view into the file must lie wholly inside it.
      const uint8_t* begin = file.data();
      const uint8_t* end = begin + file.size();
      const bool inside = t.data.data() >= begin && t.data.data() < end;
      if (inside) MOE_FUZZ_CHECK(t.data.data() + t.data.size() <= end);
    }
    sink = sink ^ Touch(t.data);
  }

  CountStage("spec");
  auto model = Model::Create(std::move(spec));
  if (!model.ok()) return;
  CountStage("model");
  // Damaged numbers (NaN or huge weights) may make the logits meaningless, never the run unsafe.
  const HParams& h = (*model)->hp();
  MOE_FUZZ_CHECK(h.n_vocab > 0 && h.n_layer > 0 && h.n_head_kv > 0 && h.head_dim > 0);
  // The KV cache is sized from hyper-parameters the tensors were validated against, so it is
  // small for any file that fits in a few MB; the bound only keeps a surprise from eating RAM.
  constexpr int64_t kCtx = 4;
  if (h.n_layer * h.n_head_kv * h.head_dim * kCtx > (int64_t{16} << 20)) return;
  auto cache = KvCache::Create(h.n_layer, kCtx, h.n_head_kv, h.head_dim, DType::kF32);
  MOE_FUZZ_CHECK(cache.ok());
  auto backend = CreateCpuBackend(1);
  Transformer transformer(*model, backend.get());
  const std::vector<int32_t> tokens = {0, static_cast<int32_t>((h.n_vocab - 1) % 7)};
  std::vector<float> logits;
  const absl::Status status = transformer.Forward(tokens, *cache, LogitsFor::kLast, &logits);
  if (status.ok()) CountStage("forward");
  if (status.ok()) MOE_FUZZ_CHECK(logits.size() == static_cast<size_t>(h.n_vocab));
}

}  // namespace moe::fuzz
