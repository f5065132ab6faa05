// moe-quantize IN.gguf OUT.gguf SCHEME: re-encodes a GGUF model's weights (q8_0, q4_0, q4_k,
// q4_k_m, q5_k, q6_k, f16, bf16, mxfp4_moe), keeping every metadata key, in a file llama.cpp reads.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_writer.h"
#include "lib/import/quant_scheme.h"

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "moe-quantize: %s\n", message.c_str());
  return 1;
}

int Run(const std::string& in, const std::string& out, const std::string& scheme) {
  auto g = moe::GgufFile::Open(in);
  if (!g.ok()) return Fail(std::string(g.status().message()));
  auto arch = (*g)->GetString("general.architecture");
  if (!arch.ok()) return Fail(std::string(arch.status().message()));
  const int64_t n_layer = static_cast<int64_t>((*g)->GetUint(*arch + ".block_count").value_or(0));

  moe::GgufWriter w;
  moe::CopyMetadata(**g, w, [](const std::string& key) {
    return key != "general.file_type" && key != "general.alignment";
  });
  w.SetU32("general.file_type", moe::LlamaFileType(scheme));
  w.SetU32("general.quantization_version", 2);

  std::vector<std::unique_ptr<std::vector<uint8_t>>> store;
  std::vector<float> row;
  for (const moe::GgufTensorInfo& t : (*g)->tensors()) {
    auto src_type = moe::DTypeFromGgml(t.ggml_type, t.name);
    if (!src_type.ok()) return Fail(std::string(src_type.status().message()));
    const int64_t cols = t.ne[0];
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    if (!moe::RowSizeValid(*src_type, cols) ||
        t.data.size() < moe::RowBytes(*src_type, cols) * rows) {
      return Fail("tensor '" + t.name + "' is truncated or malformed");
    }
    int64_t layer = -1;
    if (absl::StartsWith(t.name, "blk.")) layer = std::atoll(t.name.c_str() + 4);
    // As ggml_n_dims: trailing dimensions of 1 do not count, so [64, 1] is one-dimensional.
    const moe::DType dst = moe::QuantTypeFor(scheme, t.name, cols, layer, n_layer, rows == 1);
    auto bytes = std::make_unique<std::vector<uint8_t>>(moe::RowBytes(dst, cols) * rows);
    row.resize(cols);
    for (int64_t r = 0; r < rows; ++r) {
      moe::DequantizeRow(*src_type, t.data.data() + r * moe::RowBytes(*src_type, cols), row.data(),
                         cols);
      auto s = moe::QuantizeRow(dst, row.data(), bytes->data() + r * moe::RowBytes(dst, cols), cols);
      if (!s.ok()) return Fail(std::string(s.message()));
    }
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    w.AddTensor(t.name, dst, std::move(shape), *bytes);
    store.push_back(std::move(bytes));
  }
  auto s = w.Write(out);
  if (!s.ok()) return Fail(std::string(s.message()));
  std::fprintf(stderr, "moe-quantize: wrote %s (%s)\n", out.c_str(), scheme.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Re-encodes a GGUF model's weights.", "moe-quantize");
  std::string in, out, scheme;
  app.add_option("IN", in, "input .gguf")->required();
  app.add_option("OUT", out, "output .gguf")->required();
  app.add_option("TYPE", scheme,
                 "q8_0 | q4_0 | q4_k | q4_k_m | q5_k | q6_k | f16 | bf16 | mxfp4_moe")
      ->required()
      ->check(CLI::IsMember(moe::QuantSchemeNames()));
  CLI11_PARSE(app, argc, argv);
  return Run(in, out, scheme);
}
