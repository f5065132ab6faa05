// moe-tokenizer-bench -m VOCAB --file TEXT [--repeat N]: tokenization throughput on one core.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "lib/import/tokenizer_loader.h"
#include "lib/tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  std::string model, file;
  int repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "-m") {
      model = argv[i + 1];
    } else if (flag == "--file") {
      file = argv[i + 1];
    } else if (flag == "--repeat") {
      repeat = std::max(1, std::atoi(argv[i + 1]));
    }
  }
  if (model.empty() || file.empty()) {
    std::fprintf(stderr, "usage: moe-tokenizer-bench -m VOCAB --file TEXT [--repeat N]\n");
    return 2;
  }
  std::ifstream in(file, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  auto data = moe::LoadTokenizerData(model);
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
    return 1;
  }
  auto tokenizer = moe::Tokenizer::Create(*data);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  // Best of several runs: the figure is the tokenizer's speed, not the machine's noise.
  double best = 1e30;
  size_t tokens = 0;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    tokens = (*tokenizer)->Encode(text).size();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::printf("%zu bytes -> %zu tokens in %.3f s (best of %d): %.2f MB/s on one core\n",
              text.size(), tokens, best, repeat, mb / best);
  return 0;
}
