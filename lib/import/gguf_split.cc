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

absl::Status Reading(const absl::Status& status, const std::string& path) {
  return Annotate(status, absl::StrCat("reading '", path, "'"));
}

struct SplitKeys {
  int no;     // from 0
  int count;  // 1: not split
};

// The split keys of the file at `path`; an error names the file.
absl::StatusOr<SplitKeys> ReadSplitKeys(const GgufFile& file, const std::string& path) {
  const absl::StatusOr<int> no = SplitNo(file);
  if (!no.ok()) return Reading(no.status(), path);
  const absl::StatusOr<int> count = GgufSplitCount(file);
  if (!count.ok()) return Reading(count.status(), path);
  return SplitKeys{*no, *count};
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

// Every error names its file (GgufFile::Open's do), so the importer adds no name of its own.
absl::StatusOr<std::vector<GgufPart>> OpenGgufSplits(const std::string& path) {
  std::vector<GgufPart> parts;
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<const GgufFile> first, GgufFile::Open(path));
  MOE_ASSIGN_OR_RETURN(const SplitKeys first_keys, ReadSplitKeys(*first, path));
  const int count = first_keys.count, first_no = first_keys.no;
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
    MOE_ASSIGN_OR_RETURN(const SplitKeys keys, ReadSplitKeys(**file, part_path));
    if (keys.no != i || keys.count != count) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", part_path, "' says it is split ", keys.no + 1, " of ", keys.count,
                       ", not ", i + 1, " of ", count, " (files of another split?)"));
    }
    tensors += (*file)->tensors().size();
    parts.push_back({part_path, *std::move(file)});
  }
  if (first->Find(kSplitTensors) != nullptr) {
    const absl::StatusOr<uint64_t> want_or = first->GetUint(kSplitTensors);
    if (!want_or.ok()) return Reading(want_or.status(), path);
    const uint64_t want = *want_or;
    if (want != tensors) {
      return absl::DataLossError(absl::StrCat("the ", count, " splits of '", path, "' hold ",
                                              tensors, " tensors; the first says ", want));
    }
  }
  return parts;
}

}  // namespace moe
