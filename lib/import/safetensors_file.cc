#include "lib/import/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/json_text.h"
#include "lib/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

using Json = nlohmann::json;

// The safetensors reference implementation refuses headers over 100 MB; so do we, before
// allocating anything on the word of the file.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Bytes per element of every dtype the format defines; a name not here is not safetensors.
std::optional<int> ElementBytes(absl::string_view dtype) {
  static const std::map<std::string, int, std::less<>> kSizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = kSizes.find(dtype);
  if (it == kSizes.end()) return std::nullopt;
  return it->second;
}

std::optional<DType> ComputeDType(absl::string_view dtype) {
  if (dtype == "F32") return DType::kF32;
  if (dtype == "F16") return DType::kF16;
  if (dtype == "BF16") return DType::kBF16;
  return std::nullopt;
}

// Reads a JSON number that must be a non-negative integer.
std::optional<uint64_t> NonNegative(const Json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0)
    return static_cast<uint64_t>(j.get<int64_t>());
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped, MappedFile::Open(path));
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->file_ = std::move(mapped);
  MOE_RETURN_IF_ERROR(
      Annotate(f->Parse(f->file_->bytes()), absl::StrCat("safetensors '", path, "'")));
  return std::shared_ptr<const SafetensorsFile>(std::move(f));
}

absl::StatusOr<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::FromBytes(
    absl::Span<const uint8_t> bytes, std::string what) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = std::move(what);
  MOE_RETURN_IF_ERROR(Annotate(f->Parse(bytes), absl::StrCat("safetensors '", f->path_, "'")));
  return std::shared_ptr<const SafetensorsFile>(std::move(f));
}

absl::Span<const uint8_t> SafetensorsFile::bytes() const {
  return file_ ? file_->bytes() : absl::Span<const uint8_t>();
}

const SafetensorsTensor* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status SafetensorsFile::Parse(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < 8) {
    return absl::DataLossError(absl::StrCat("file is ", bytes.size(),
                                            " bytes, too short for the 8-byte header length "
                                            "(truncated?)"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "header length ", header_len, " exceeds the 100 MiB limit (not safetensors?)"));
  }
  if (header_len > bytes.size() - 8) {
    return absl::DataLossError(absl::StrCat("header of ", header_len,
                                            " bytes runs past the end of "
                                            "the ",
                                            bytes.size(), "-byte file (truncated?)"));
  }
  const char* text = reinterpret_cast<const char*>(bytes.data() + 8);
  auto parsed = ParseJsonText(absl::string_view(text, header_len));
  if (!parsed.ok()) return Annotate(parsed.status(), "header");
  Json header = *std::move(parsed);
  if (!header.is_object()) return absl::InvalidArgumentError("header is not a JSON object");
  const absl::Span<const uint8_t> data = bytes.subspan(8 + header_len);

  struct Range {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Range> ranges;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return absl::InvalidArgumentError("__metadata__ is not an object");
      for (const auto& [k, v] : info.items()) {
        if (!v.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("__metadata__ value '", k, "' is not a string"));
        }
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    // A named copy: lambdas may not capture structured bindings before C++20 compilers
    // implement P1091 (clang 16).
    const std::string& tensor_name = name;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", tensor_name, "': ", why));
    };
    if (!info.is_object()) return bad("entry is not an object");
    auto dt = info.find("dtype");
    auto sh = info.find("shape");
    auto off = info.find("data_offsets");
    if (dt == info.end() || !dt->is_string()) return bad("missing string 'dtype'");
    if (sh == info.end() || !sh->is_array()) return bad("missing array 'shape'");
    if (off == info.end() || !off->is_array() || off->size() != 2) {
      return bad("'data_offsets' is not [begin, end]");
    }
    SafetensorsTensor t;
    t.name = name;
    t.dtype_name = dt->get<std::string>();
    std::optional<int> elem = ElementBytes(t.dtype_name);
    if (!elem) return bad(absl::StrCat("unknown dtype '", t.dtype_name, "'"));
    t.dtype = ComputeDType(t.dtype_name);
    // Element count with overflow checks: a hostile shape must not wrap around to a small size.
    uint64_t count = 1;
    for (const Json& d : *sh) {
      std::optional<uint64_t> v = NonNegative(d);
      if (!v || *v > (1ull << 40)) return bad("shape holds something other than a sane dimension");
      if (*v != 0 && count > std::numeric_limits<uint64_t>::max() / 8 / *v) {
        return bad("shape overflows");
      }
      count *= *v;
      t.shape.push_back(static_cast<int64_t>(*v));
    }
    std::optional<uint64_t> begin = NonNegative((*off)[0]), end = NonNegative((*off)[1]);
    if (!begin || !end || *begin > *end) return bad("'data_offsets' are not 0 <= begin <= end");
    if (*end > data.size()) {
      return absl::DataLossError(absl::StrCat("tensor '", name, "' ends at byte ", *end,
                                              " of the data section, which has only ", data.size(),
                                              " bytes (truncated?)"));
    }
    if (*end - *begin != count * *elem) {
      return bad(absl::StrCat("shape [", absl::StrJoin(t.shape, ", "), "] of ", t.dtype_name,
                              " needs ", count * *elem, " bytes but data_offsets span ",
                              *end - *begin));
    }
    t.data = data.subspan(*begin, *end - *begin);
    ranges.push_back({*begin, *end, tensors_.size()});
    index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return absl::InvalidArgumentError(absl::StrCat("tensors '",
                                                     tensors_[ranges[i - 1].tensor].name, "' and '",
                                                     tensors_[ranges[i].tensor].name, "' overlap"));
    }
  }
  return absl::OkStatus();
}

}  // namespace moe
