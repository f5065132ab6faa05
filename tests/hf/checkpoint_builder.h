// Builds tiny Hugging Face checkpoints on disk for the import tests: config.json and a
// safetensors file written here, independently of the importer, with random weights.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace moe::testing {

struct RawTensor {
  std::string dtype = "F32";  // safetensors spelling
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Writes `tensors` as one safetensors file (header padded to 8 bytes, like the reference writer).
void WriteSafetensors(const std::filesystem::path& path,
                      const std::map<std::string, RawTensor>& tensors);

// A tiny config.json of `hf_arch` ("MixtralForCausalLM", ...).
nlohmann::json TinyConfig(const std::string& hf_arch);

// Every tensor `config` needs, under its Hugging Face name, with random F32 values.
std::map<std::string, RawTensor> TinyTensors(const nlohmann::json& config, uint32_t seed);

// config.json + model.safetensors in `dir` (created).
void WriteCheckpoint(const std::filesystem::path& dir, const nlohmann::json& config,
                     const std::map<std::string, RawTensor>& tensors);

// Writes the checkpoint and returns why importing it fails ("" when it imports): what a test of a
// refused config or tensor holds against the key it must name.
std::string RefusalOf(const std::filesystem::path& dir, const nlohmann::json& config,
                      const std::map<std::string, RawTensor>& tensors);

}  // namespace moe::testing
