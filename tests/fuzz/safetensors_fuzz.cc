// Fuzz target: the safetensors reader (8-byte header length, JSON header, dtype / shape /
// data_offsets checks, no overlapping tensors).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/import/safetensors_file.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Element sizes as the safetensors format defines them, written out independently of the
// reader so the check below does not trust the code under test.
int ElementBytes(const std::string& dtype) {
  static const std::map<std::string, int> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = moe::SafetensorsFile::FromBytes({data, size}, "fuzz input");
  if (!file.ok()) return 0;
  moe::fuzz::CountStage("parsed");
  std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges;
  for (const moe::SafetensorsTensor& t : (*file)->tensors()) {
    const int elem = ElementBytes(t.dtype_name);
    MOE_FUZZ_CHECK(elem > 0);
    uint64_t n = 1;
    for (int64_t d : t.shape) {
      MOE_FUZZ_CHECK(d >= 0);
      n *= static_cast<uint64_t>(d);
    }
    MOE_FUZZ_CHECK(n * elem == t.data.size());
    if (t.data.empty()) continue;
    MOE_FUZZ_CHECK(t.data.data() >= data + 8 && t.data.data() + t.data.size() <= data + size);
    MOE_FUZZ_CHECK((*file)->Find(t.name) != nullptr);
    ranges.push_back({t.data.data(), t.data.data() + t.data.size()});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    MOE_FUZZ_CHECK(ranges[i - 1].second <= ranges[i].first);
  return 0;
}

namespace moe::fuzz {
namespace {

// header length (u64 LE) + JSON header + data.
Seed Build(const std::string& name, const std::string& json, size_t data_bytes) {
  Seed seed{name, std::vector<uint8_t>(8), {}, 0};
  const uint64_t n = json.size();
  std::memcpy(seed.bytes.data(), &n, 8);
  seed.bytes.insert(seed.bytes.end(), json.begin(), json.end());
  for (size_t i = 0; i < data_bytes; ++i) seed.bytes.push_back(static_cast<uint8_t>(i * 37));
  seed.fields.push_back({0, 8});
  seed.header_end = 8 + json.size();
  return seed;
}

Seed FromFile(const std::string& path) {
  Seed seed{path.substr(path.rfind("hf/") + 3), ReadFileOrDie(path), {{0, 8}}, 0};
  for (char& c : seed.name) {
    if (c == '/') c = '-';
  }
  uint64_t n = 0;
  if (seed.bytes.size() >= 8) std::memcpy(&n, seed.bytes.data(), 8);
  seed.header_end = n <= seed.bytes.size() - 8 ? 8 + n : 0;
  return seed;
}

}  // namespace

std::vector<Seed> Seeds() {
  std::vector<Seed> seeds;
  seeds.push_back(Build("empty", "{}", 0));
  seeds.push_back(Build("mixed",
                        R"({"__metadata__":{"format":"pt","note":"x"},)"
                        R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                        R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]},)"
                        R"("c":{"dtype":"I64","shape":[],"data_offsets":[32,40]},)"
                        R"("d":{"dtype":"BOOL","shape":[0,5],"data_offsets":[40,40]},)"
                        R"("e":{"dtype":"F16","shape":[1,1,2],"data_offsets":[40,44]}})",
                        44));
  // Padded with spaces to 8 bytes, as the reference writer does.
  seeds.push_back(
      Build("padded", R"({"w":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}   )", 3));
  // Real checkpoints written by PyTorch (tests/data/hf), a few hundred KB each.
  const std::string hf = std::string(MOE_SOURCE_DIR) + "/tests/data/hf/";
  seeds.push_back(FromFile(hf + "qwen2_moe/model.safetensors"));
  seeds.push_back(FromFile(hf + "mixtral/model-00002-of-00002.safetensors"));
  return seeds;
}

}  // namespace moe::fuzz
