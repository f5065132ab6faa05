// Fuzz target: the .moe container reader (mmap + FlatBuffers verifier + semantic checks), then
// Model::Create and one forward step for whatever it accepts.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "lib/format/moe_format_generated.h"
#include "lib/format/moe_reader.h"
#include "lib/format/moe_writer.h"
#include "lib/import/gguf_import.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_check.h"
#include "tests/model/reference_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // ReadMoeFile takes a path (it maps the file), so the input goes through one reused temp file.
  static const std::string path = moe::fuzz::TempPath("input.moe");
  moe::fuzz::WriteFileOrDie(path, data, size);
  auto spec = moe::ReadMoeFile(path);
  if (spec.ok()) {
    moe::fuzz::CountStage("parsed");
    moe::fuzz::CheckSpecAndRun(*std::move(spec), {});
  }
  return 0;
}

namespace moe::fuzz {
namespace {

// The structure of a .moe file is its size-prefixed FlatBuffer; tensor data follows it.
size_t FlatBufferEnd(const std::vector<uint8_t>& b) {
  if (b.size() < 4) return 0;
  uint32_t size;
  std::memcpy(&size, b.data(), 4);
  return size_t{4} + size <= b.size() ? size_t{4} + size : 0;
}

Seed SeedFromSpec(const std::string& name, const ModelSpec& spec) {
  const std::string path = TempPath("seed.moe");
  if (absl::Status s = WriteMoeFile(spec, path); !s.ok()) Fail(s.ToString(), __FILE__, __LINE__);
  Seed seed{name, ReadFileOrDie(path), {}, 0};
  std::remove(path.c_str());
  seed.header_end = FlatBufferEnd(seed.bytes);
  return seed;
}

}  // namespace

std::vector<Seed> Seeds() {
  std::vector<Seed> seeds;
  // A random model small enough that most of the file is FlatBuffer structure.
  testing::RandomModelOptions tiny;
  tiny.n_vocab = 32, tiny.n_embd = 32, tiny.n_head = 2, tiny.n_head_kv = 1, tiny.head_dim = 16;
  tiny.n_expert = 3, tiny.n_expert_used = 2, tiny.n_ff_expert = 32;
  seeds.push_back(SeedFromSpec("random-qwen3moe", testing::MakeRandomModel(tiny)));
  tiny.arch = Arch::kQwen2Moe, tiny.n_ff_shared = 32, tiny.dtype = DType::kQ8_0;
  seeds.push_back(SeedFromSpec("random-qwen2moe-q8_0", testing::MakeRandomModel(tiny)));
  // A real fixture converted, with its 32000-token SentencePiece vocabulary in the header.
  auto gguf = ImportGguf(TestdataDir() + "/fixtures/tiny-llama-moe-q8_0/tiny-llama-moe-q8_0.gguf");
  if (!gguf.ok()) Fail(gguf.status().ToString(), __FILE__, __LINE__);
  seeds.push_back(SeedFromSpec("tiny-llama-moe-q8_0", *gguf));
  // Every architecture's micro model (tests/fuzz/seeds), converted.
  for (const auto& [name, path] : MicroModels()) {
    auto micro = ImportGguf(path);
    if (!micro.ok()) Fail(micro.status().ToString(), __FILE__, __LINE__);
    seeds.push_back(SeedFromSpec(name.substr(0, name.rfind('.')) + ".moe", *micro));
  }
  return seeds;
}

}  // namespace moe::fuzz
