// Test support: every reference fixture folder of tests/data (fixtures/: llama.cpp c392e50,
// fixtures-v2/: mainline 3f545be, the newer families), for tests parameterised over all of them.
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace moe::testing {

// Folders holding <folder name>.gguf, by name.
inline std::vector<std::filesystem::path> FixtureDirs() {
  namespace fs = std::filesystem;
  std::vector<fs::path> dirs;
  for (const char* set : {"fixtures", "fixtures-v2"}) {
    const fs::path root = fs::path(MOE_TESTDATA_DIR) / set;
    if (!fs::exists(root)) continue;
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.is_directory() && fs::exists(e.path() / (e.path().filename().string() + ".gguf"))) {
        dirs.push_back(e.path());
      }
    }
  }
  std::sort(dirs.begin(), dirs.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  return dirs;
}

// A fixture's folder by name, from either set (the names do not repeat across them).
inline std::filesystem::path FixtureDir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path first = fs::path(MOE_TESTDATA_DIR) / "fixtures" / name;
  return fs::exists(first) ? first : fs::path(MOE_TESTDATA_DIR) / "fixtures-v2" / name;
}

// The fixture's model file.
inline std::string FixtureGguf(const std::filesystem::path& dir) {
  return (dir / (dir.filename().string() + ".gguf")).string();
}

// A fixture's model file by the fixture's name.
inline std::string FixtureGgufNamed(const std::string& name) {
  return FixtureGguf(FixtureDir(name));
}

// A test-name suffix for a fixture folder (its name, non-alphanumerics as '_').
inline std::string FixtureTestName(const ::testing::TestParamInfo<std::filesystem::path>& info) {
  std::string s = info.param.filename().string();
  std::replace_if(
      s.begin(), s.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return s;
}

}  // namespace moe::testing
