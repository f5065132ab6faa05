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
#include "tests/hf/checkpoint_builder.h"
#include "tests/hf/gguf_as_hf.h"

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
namespace {

// The input layout of LLVMFuzzerTestOneInput for one checkpoint directory.
Seed CheckpointSeed(const std::string& name, const fs::path& config_path,
                    const fs::path& weights_path) {
  const std::vector<uint8_t> config = ReadFileOrDie(config_path.string());
  const std::vector<uint8_t> tensors = ReadFileOrDie(weights_path.string());
  Seed seed{name, {}, {}, 0};
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
  return seed;
}

}  // namespace

// Micro checkpoints of every family the importer reads (a few KB to a few tens of KB, so that an
// iteration costs well under a millisecond): the import tests' tiny configs at one layer for
// Mixtral, Qwen2-MoE, OLMoE and Qwen3-MoE, and the micro GGUF models written back out as
// checkpoints for GLM-4.5, DeepSeek-V3 and gpt-oss (MXFP4 experts). Then the PyTorch-written
// checkpoints of tests/data/hf (single-file ones; Mixtral's is sharded, so its first shard holds
// only some tensors and exercises the missing-tensor errors); scripts/fuzz.sh caps the input
// length, so libFuzzer mostly works from the micro ones.
std::vector<Seed> Seeds() {
  std::vector<Seed> seeds;
  const fs::path scratch = TempPath("hf_checkpoint_seeds");
  for (const char* hf_arch :
       {"MixtralForCausalLM", "Qwen2MoeForCausalLM", "OlmoeForCausalLM", "Qwen3MoeForCausalLM"}) {
    nlohmann::json config = moe::testing::TinyConfig(hf_arch);
    config["num_hidden_layers"] = 1;
    const fs::path dir = scratch / hf_arch;
    moe::testing::WriteCheckpoint(dir, config, moe::testing::TinyTensors(config, 1));
    seeds.push_back(CheckpointSeed(std::string("micro-") + hf_arch, dir / "config.json",
                                   dir / "model.safetensors"));
  }
  for (const char* arch : {"glm4moe", "deepseek2", "gpt-oss"}) {
    const fs::path dir = scratch / arch;
    const nlohmann::json config = moe::testing::WriteGgufAsHfCheckpoint(MicroModel(arch), dir);
    MOE_FUZZ_CHECK(!config.empty());
    seeds.push_back(CheckpointSeed(std::string("micro-") + arch, dir / "config.json",
                                   dir / "model.safetensors"));
  }
  fs::remove_all(scratch);
  for (const char* arch : {"olmoe", "qwen2_moe", "qwen3_moe", "mixtral"}) {
    const fs::path dir = fs::path(TestdataDir()) / "hf" / arch;
    const fs::path weights = fs::exists(dir / "model.safetensors")
                                 ? dir / "model.safetensors"
                                 : dir / "model-00001-of-00002.safetensors";
    seeds.push_back(CheckpointSeed(arch, dir / "config.json", weights));
  }
  return seeds;
}

}  // namespace moe::fuzz
