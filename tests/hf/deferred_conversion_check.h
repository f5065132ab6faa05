// Checks that an import whose conversions wait for the write (ConvertAt::kWrite) writes the very
// file the import that converts at once writes, and defers exactly the tensors that the other
// holds converted copies of.
#pragma once

#include <filesystem>
#include <optional>

#include "lib/base/dtype.h"

namespace moe::testing {

// Imports the checkpoint at `dir` both ways with `out` asked for, writes each as .moe beside it
// and expects equal bytes (gtest failures otherwise). Returns how many tensors were deferred.
int ExpectDeferredConversionWritesTheSameFile(const std::filesystem::path& dir,
                                              std::optional<DType> out);

}  // namespace moe::testing
