// Test support: writing a GGUF as llama.cpp's gguf-split writes a split model (the metadata and
// the split keys in the first file, the split keys alone in the others, the tensors dealt out in
// order), with faults to order.
#pragma once

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_writer.h"
#include "tests/support/gguf_tensor.h"

namespace moe::testing {

struct SplitOptions {
  int count = 3;
  bool tensors_in_first = true;     // gguf-split --no-tensor-first-split leaves the first without
  int tensor_count_change = 0;      // states a wrong split.tensors.count
  bool duplicate_a_tensor = false;  // the first tensor again in the last split (and counted)
};

inline std::string SplitPath(const std::string& prefix, int no, int count) {
  return prefix + absl::StrFormat("-%05d-of-%05d.gguf", no, count);
}

// `src` written as gguf-split writes it: the metadata and the split keys in the first file, the
// split keys alone in the others, the tensors dealt out in order.
inline absl::Status WriteSplits(const std::string& src, const std::string& prefix,
                                const SplitOptions& o = {}) {
  MOE_ASSIGN_OR_RETURN(auto g, GgufFile::Open(src));
  const std::vector<GgufTensorInfo>& infos = g->tensors();
  const int holders = o.tensors_in_first ? o.count : o.count - 1;
  const size_t per = (infos.size() + holders - 1) / holders;
  for (int s = 0; s < o.count; ++s) {
    GgufWriter w;
    if (s == 0) CopyMetadata(*g, w, [](const std::string&) { return true; });
    w.SetU32("split.no", s);
    w.SetU32("split.count", o.count);
    if (s == 0) {
      w.SetU32("split.tensors.count",
               infos.size() + (o.duplicate_a_tensor ? 1 : 0) + o.tensor_count_change);
    }
    const int holder = o.tensors_in_first ? s : s - 1;
    for (size_t i = holder * per; holder >= 0 && i < std::min(infos.size(), (holder + 1) * per);
         ++i) {
      MOE_ASSIGN_OR_RETURN(const TensorSpec t, FileTensor(infos[i]));
      w.AddTensor(t.name, t.dtype, t.shape, t.data);
    }
    if (o.duplicate_a_tensor && s == o.count - 1) {
      MOE_ASSIGN_OR_RETURN(const TensorSpec t, FileTensor(infos[0]));
      w.AddTensor(t.name, t.dtype, t.shape, t.data);
    }
    MOE_RETURN_IF_ERROR(w.Write(SplitPath(prefix, s + 1, o.count)));
  }
  return absl::OkStatus();
}

inline void RemoveSplits(const std::string& prefix, int count) {
  for (int s = 1; s <= count; ++s) std::filesystem::remove(SplitPath(prefix, s, count));
}

}  // namespace moe::testing
