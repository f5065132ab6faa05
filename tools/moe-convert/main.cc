// moe-convert IN OUT.moe [--dtype T] [--layout file|groups]: converts a model (Hugging Face
// checkpoint directory, GGUF or .moe) into the .moe container.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "lib/format/moe_writer.h"
#include "lib/import/hf_import.h"
#include "lib/import/model_loader.h"
#include "lib/runtime/weight_copy.h"
#include "tools/write_progress_printer.h"

int main(int argc, char** argv) {
  CLI::App app(
      "Converts a model (Hugging Face checkpoint directory, GGUF or .moe) to the .moe "
      "container.",
      "moe-convert");
  std::string in, out, dtype_name, layout = "file";
  app.add_option("IN", in, "input model: a Hugging Face checkpoint directory, .gguf or .moe")
      ->required();
  app.add_option("OUT", out, "output .moe file")->required();
  app.add_option("--dtype", dtype_name,
                 "weight type of a Hugging Face import (default: keep the checkpoint's)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  app.add_option("--layout", layout,
                 "file: the weights' own layout (any reader); groups: quantized matrices stored "
                 "in the 16-row group layouts the CPU kernels run, so `--load mmap` starts "
                 "instantly and runs as fast as `--load ram` (libmoe only)")
      ->check(CLI::IsMember({"file", "groups"}));
  CLI11_PARSE(app, argc, argv);

  std::optional<moe::DType> dtype;
  if (!dtype_name.empty()) dtype = moe::DTypeFromName(dtype_name);
  absl::StatusOr<moe::ModelSpec> spec;
  if (moe::LooksLikeHfCheckpoint(in)) {
    // Each converted tensor is made as it is written (or copied, for --layout groups): the
    // checkpoint's conversions never sit in memory all at once.
    spec = moe::ImportHfCheckpoint(in, dtype, moe::ConvertAt::kWrite);
  } else if (dtype) {
    spec =
        absl::InvalidArgumentError("--dtype applies to Hugging Face checkpoint directories only");
  } else {
    spec = moe::LoadModelSpec(in);
  }
  if (!spec.ok()) {
    std::fprintf(stderr, "moe-convert: %s\n", std::string(spec.status().message()).c_str());
    return 1;
  }
  absl::Status status;
  if (layout == "groups") {
    // Re-laid as for AVX2, which makes only the row-group layouts: every SIMD level runs those.
    status = moe::CopyWeights(*spec, /*repack=*/true, moe::SimdLevel::kAvx2, nullptr);
  }
  if (status.ok())
    status = moe::WriteMoeFile(*spec, out, moe::cli::PrintWriteProgress("moe-convert"));
  if (!status.ok()) {
    std::fprintf(stderr, "moe-convert: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "moe-convert: wrote %s (%s, %zu tensors)\n", out.c_str(),
               std::string(moe::ArchName(spec->arch)).c_str(), spec->tensors.size());
  return 0;
}
