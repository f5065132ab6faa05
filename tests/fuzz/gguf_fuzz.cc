// Fuzz target: the GGUF parser, the GGUF importer (metadata -> hyper-parameters, tokenizer,
// stacked experts split per expert), then Model::Create and one forward step.
#include <cstdint>
#include <memory>
#include <string>

#include "lib/import/gguf_file.h"
#include "lib/import/gguf_import.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::Span<const uint8_t> bytes(data, size);
  auto gguf = moe::GgufFile::Parse(bytes, nullptr);
  if (!gguf.ok()) return 0;
  moe::fuzz::CountStage("parsed");
  for (const moe::GgufTensorInfo& t : (*gguf)->tensors()) {
    // A tensor's data view must lie inside the input whatever its offset and shape claim.
    MOE_FUZZ_CHECK(t.data.empty() ||
                   (t.data.data() >= data && t.data.data() + t.data.size() <= data + size));
  }
  auto spec = moe::ImportGguf(std::shared_ptr<const moe::GgufFile>(*std::move(gguf)));
  if (spec.ok()) moe::fuzz::CheckSpecAndRun(*std::move(spec), bytes);
  return 0;
}

namespace moe::fuzz {

std::vector<Seed> Seeds() {
  std::vector<Seed> seeds;
  const std::string dir = TestdataDir();
  // The smaller fixtures (3-6 MB): one per architecture, quantized, so each iteration's copy
  // and forward step stay cheap; plus a vocabulary-only file with merges.
  for (const char* path :
       {"/fixtures/tiny-llama-moe-q8_0/tiny-llama-moe-q8_0.gguf",
        "/fixtures/tiny-qwen2moe-q4_0/tiny-qwen2moe-q4_0.gguf",
        "/fixtures/tiny-olmoe-q8_0/tiny-olmoe-q8_0.gguf", "/tokenizer/ggml-vocab-gpt-2.gguf"}) {
    Seed seed{path, ReadFileOrDie(dir + path), {}, 0};
    seed.name = seed.name.substr(seed.name.rfind('/') + 1);
    AddGgufFields(&seed);
    seeds.push_back(std::move(seed));
  }
  // Every architecture in a few KB (made-up vocabulary): most iterations reach the forward step
  // for microseconds each.
  for (const auto& [name, path] : MicroModels()) {
    Seed seed{name, ReadFileOrDie(path), {}, 0};
    AddGgufFields(&seed);
    seeds.push_back(std::move(seed));
  }
  return seeds;
}

}  // namespace moe::fuzz
