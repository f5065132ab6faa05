// Reads llama.cpp's tokenizer test vectors (ggml-vocab-*.gguf.inp / .out, format described in
// testdata/tokenizer/README.md).
#pragma once

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace moe::testing {

struct TokenizerVector {
  std::string text;
  std::vector<int32_t> ids;
};

inline std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Empty when the files are missing or disagree in count.
inline std::vector<TokenizerVector> ReadTokenizerVectors(const std::string& inp_path,
                                                         const std::string& out_path) {
  const std::string inp = ReadFileOrEmpty(inp_path);
  const std::string out = ReadFileOrEmpty(out_path);
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<TokenizerVector> vectors;
  size_t pos = 0;
  for (size_t next; (next = inp.find(separator, pos)) != std::string::npos;
       pos = next + separator.size()) {
    vectors.push_back({inp.substr(pos, next - pos), {}});
  }
  std::istringstream lines(out);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    if (i >= vectors.size()) return {};
    std::istringstream ids(line);
    int32_t id;
    while (ids >> id) vectors[i].ids.push_back(id);
    ++i;
  }
  if (i != vectors.size()) return {};
  return vectors;
}

}  // namespace moe::testing
