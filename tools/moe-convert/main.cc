// moe-convert IN OUT.moe: converts a model (GGUF today) into the .moe container.
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "lib/format/moe_writer.h"
#include "lib/import/model_loader.h"

int main(int argc, char** argv) {
  CLI::App app("Converts a model (GGUF) to the .moe container.", "moe-convert");
  std::string in, out;
  app.add_option("IN", in, "input model (.gguf or .moe)")->required();
  app.add_option("OUT", out, "output .moe file")->required();
  CLI11_PARSE(app, argc, argv);
  auto spec = moe::LoadModelSpec(in);
  if (!spec.ok()) {
    std::fprintf(stderr, "moe-convert: %s\n", std::string(spec.status().message()).c_str());
    return 1;
  }
  auto status = moe::WriteMoeFile(*spec, out);
  if (!status.ok()) {
    std::fprintf(stderr, "moe-convert: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "moe-convert: wrote %s (%s, %zu tensors)\n", out.c_str(),
               std::string(moe::ArchName(spec->arch)).c_str(), spec->tensors.size());
  return 0;
}
