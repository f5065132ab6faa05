// Shared pieces of the fuzz targets: the seed description the replay driver mutates, temp files
// for parsers that only take a path, an always-on check that aborts (so a broken invariant fails
// the test even in Release builds), and a GGUF walker that finds the integer fields worth
// overwriting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

// libFuzzer's entry point; each target defines it.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace moe::fuzz {

// An integer field of a seed: overwriting it with 0, -1 or a huge value is the mutation most
// likely to reach a missing bounds check.
struct Field {
  size_t offset;
  int width;  // 1, 2, 4 or 8 bytes, little-endian
};

struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
  std::vector<Field> fields;
  // Bytes [0, header_end) hold the structure; most mutations land there, since flipping bits in
  // tensor data only changes numbers. 0 = the whole input.
  size_t header_end = 0;
};

// The seed corpus of the target, built from the real test files; defined by each target (the
// libFuzzer build ignores it, but `replay --write-seeds DIR` writes it out as a corpus).
std::vector<Seed> Seeds();

// Fails the run (abort) when an invariant of a parser's result is broken: a crash is the only
// failure a fuzz driver sees, so these checks must not compile away under NDEBUG.
[[noreturn]] void Fail(absl::string_view what, const char* file, int line);
#define MOE_FUZZ_CHECK(cond) ((cond) ? (void)0 : ::moe::fuzz::Fail(#cond, __FILE__, __LINE__))

// A per-process temporary path ending in `name`; one file per target is reused for every input,
// and removed when the process exits normally.
std::string TempPath(absl::string_view name);
void WriteFileOrDie(const std::string& path, const uint8_t* data, size_t size);
std::vector<uint8_t> ReadFileOrDie(const std::string& path);

std::string TestdataDir();  // tests/data of the checkout
// The micro models of tests/fuzz/seeds (make-micro-models.sh): every architecture in a few KB,
// as (file name, path).
std::vector<std::pair<std::string, std::string>> MicroModels();
std::string MicroModel(absl::string_view arch);  // the path of micro-<arch>.gguf

// Integer fields of a GGUF file (header counts, string lengths, value types, array counts,
// tensor dims, types and offsets) and the end of its tensor-info section. Stops quietly at the
// first thing it cannot walk.
void AddGgufFields(Seed* seed);

// Counts inputs that reached a stage ("parsed", "model", "forward"); the replay driver prints the
// counts, so a seed corpus that never gets past the first check shows up as such.
void CountStage(const char* stage);
std::string StageCounts();

// True for well-formed UTF-8.
bool IsValidUtf8(absl::string_view text);

}  // namespace moe::fuzz
