// Models split by llama.cpp's gguf-split into N files "<prefix>-00001-of-0000N.gguf" ... (how
// the large MoE models are published: GLM-4.5-Air, gpt-oss-120b, Qwen3-235B). The first file
// holds the metadata; every file holds some of the tensors and says which split it is
// (split.no, split.count; the first also the total, split.tensors.count).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/import/gguf_file.h"

namespace moe {

struct GgufPart {
  std::string path;
  std::shared_ptr<const GgufFile> file;
};

// The file at `path` and, when it is the first of a split model, the others beside it, in order.
// Errors name the file: a split other than the first, a missing or mismatched split, a tensor
// count that does not add up.
absl::StatusOr<std::vector<GgufPart>> OpenGgufSplits(const std::string& path);

// How many files a GGUF says its model is split into (1: not split).
absl::StatusOr<int> GgufSplitCount(const GgufFile& file);

}  // namespace moe
