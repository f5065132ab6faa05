// Fuzz target: a Hugging Face checkpoint directory (config.json + model.safetensors) through
// ImportHfCheckpoint, then the model checks and one forward step. The input is the config's
// length (4 bytes, little-endian), the config.json text, then the safetensors file.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "lib/import/hf_import.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_check.h"

namespace {

namespace fs = std::filesystem;

// One directory per process, its two files rewritten for every input.
const std::string& Dir() {
  static const std::string dir = [] {
    std::string d = moe::fuzz::TempPath("hf_checkpoint");
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t config_size;
  std::memcpy(&config_size, data, 4);
  if (config_size > size - 4) return 0;
  const std::string dir = Dir();
  moe::fuzz::WriteFileOrDie(dir + "/config.json", data + 4, config_size);
  moe::fuzz::WriteFileOrDie(dir + "/model.safetensors", data + 4 + config_size,
                            size - 4 - config_size);
  auto spec = moe::ImportHfCheckpoint(dir);
  if (!spec.ok()) return 0;
  moe::fuzz::CountStage("parsed");
  moe::fuzz::CheckSpecAndRun(*std::move(spec), {});
  return 0;
}

namespace moe::fuzz {

// The four architectures' PyTorch checkpoints from tests/data/hf (single-file ones; Mixtral's is
// sharded, so its first shard holds only some tensors and exercises the missing-tensor errors).
std::vector<Seed> Seeds() {
  std::vector<Seed> seeds;
  for (const char* arch : {"olmoe", "qwen2_moe", "qwen3_moe", "mixtral"}) {
    const fs::path dir = fs::path(TestdataDir()) / "hf" / arch;
    const std::vector<uint8_t> config = ReadFileOrDie((dir / "config.json").string());
    const fs::path weights = fs::exists(dir / "model.safetensors")
                                 ? dir / "model.safetensors"
                                 : dir / "model-00001-of-00002.safetensors";
    const std::vector<uint8_t> tensors = ReadFileOrDie(weights.string());
    Seed seed{arch, {}, {}, 0};
    const uint32_t n = static_cast<uint32_t>(config.size());
    seed.bytes.resize(4);
    std::memcpy(seed.bytes.data(), &n, 4);
    seed.bytes.insert(seed.bytes.end(), config.begin(), config.end());
    seed.bytes.insert(seed.bytes.end(), tensors.begin(), tensors.end());
    // The config and the safetensors header are the structure; tensor data is only numbers.
    uint64_t header = 0;
    if (tensors.size() >= 8) std::memcpy(&header, tensors.data(), 8);
    seed.header_end = 4 + config.size() + 8 + std::min<uint64_t>(header, tensors.size());
    seed.fields.push_back({4 + config.size(), 8});  // the safetensors header length
    seeds.push_back(std::move(seed));
  }
  return seeds;
}

}  // namespace moe::fuzz
