// Reading reference files in tests: raw little-endian arrays, whitespace-separated integers,
// whole files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace moe::testing {

// A path in the temporary folder for a test's scratch file: `tag` and the process id in its name,
// so that tests running side by side never share one.
inline std::filesystem::path TempFilePath(const std::string& tag) {
  return std::filesystem::temp_directory_path() /
         ("moe_test_" + std::to_string(::getpid()) + "_" + tag);
}

inline std::string ReadFileBytes(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// The file as an array of T (a trailing partial element is ignored).
template <typename T>
std::vector<T> ReadArray(const std::filesystem::path& path) {
  std::string bytes = ReadFileBytes(path);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// Whitespace-separated integers, as the fixtures' *.tokens.txt files hold them.
template <typename T = int32_t>
std::vector<T> ReadIntegers(const std::filesystem::path& path) {
  std::ifstream f(path);
  std::vector<T> out;
  for (T x; f >> x;) out.push_back(x);
  return out;
}

}  // namespace moe::testing
