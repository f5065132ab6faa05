#include "lib/import/gguf_split.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

constexpr char kSplitNo[] = "split.no";
constexpr char kSplitCount[] = "split.count";
constexpr char kSplitTensors[] = "split.tensors.count";

// gguf-split's names: "%s-%05d-of-%05d.gguf", split numbers from 1.
std::string SplitSuffix(int no, int count) {
  return absl::StrFormat("-%05d-of-%05d.gguf", no, count);
}

absl::StatusOr<int> SplitNo(const GgufFile& file) {
  if (file.Find(kSplitNo) == nullptr) return 0;
  MOE_ASSIGN_OR_RETURN(uint64_t no, file.GetUint(kSplitNo));
  return static_cast<int>(std::min<uint64_t>(no, 1 << 20));
}

}  // namespace

absl::StatusOr<int> GgufSplitCount(const GgufFile& file) {
  if (file.Find(kSplitCount) == nullptr) return 1;
  MOE_ASSIGN_OR_RETURN(uint64_t count, file.GetUint(kSplitCount));
  if (count == 0 || count > 9999) {
    return absl::InvalidArgumentError(absl::StrCat(kSplitCount, " is ", count));
  }
  return static_cast<int>(count);
}

absl::StatusOr<std::vector<GgufPart>> OpenGgufSplits(const std::string& path) {
  std::vector<GgufPart> parts;
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<const GgufFile> first, GgufFile::Open(path));
  MOE_ASSIGN_OR_RETURN(const int count, GgufSplitCount(*first));
  MOE_ASSIGN_OR_RETURN(const int first_no, SplitNo(*first));
  parts.push_back({path, first});
  if (count == 1) return parts;
  const std::string suffix = SplitSuffix(1, count);
  if (first_no != 0 || !absl::EndsWith(path, suffix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is split ", first_no + 1, " of ", count,
                     " of a model split by gguf-split: open the first, named <prefix>", suffix));
  }
  const std::string prefix = path.substr(0, path.size() - suffix.size());
  size_t tensors = first->tensors().size();
  for (int i = 1; i < count; ++i) {
    const std::string part_path = prefix + SplitSuffix(i + 1, count);
    auto file = GgufFile::Open(part_path);
    if (!file.ok()) {
      return Annotate(file.status(), absl::StrCat("split ", i + 1, " of ", count, " of '", path,
                                                  "' ('", part_path, "')"));
    }
    MOE_ASSIGN_OR_RETURN(const int no, SplitNo(**file));
    MOE_ASSIGN_OR_RETURN(const int its_count, GgufSplitCount(**file));
    if (no != i || its_count != count) {
      return absl::InvalidArgumentError(absl::StrCat("'", part_path, "' says it is split ", no + 1,
                                                     " of ", its_count, ", not ", i + 1, " of ",
                                                     count, " (files of another split?)"));
    }
    tensors += (*file)->tensors().size();
    parts.push_back({part_path, *std::move(file)});
  }
  if (first->Find(kSplitTensors) != nullptr) {
    MOE_ASSIGN_OR_RETURN(const uint64_t want, first->GetUint(kSplitTensors));
    if (want != tensors) {
      return absl::DataLossError(absl::StrCat("the ", count, " splits of '", path, "' hold ",
                                              tensors, " tensors; the first says ", want));
    }
  }
  return parts;
}

}  // namespace moe
