#include "lib/import/gguf_file.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace moe {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF"
constexpr uint64_t kMaxDims = 4;
constexpr uint64_t kMaxStringLen = 1ull << 30;

// Bounds-checked little-endian reader over the file.
class Cursor {
 public:
  explicit Cursor(absl::Span<const uint8_t> b) : b_(b) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return b_.size() - pos_; }

  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    if (remaining() < sizeof(T)) return Truncated(what);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  absl::StatusOr<absl::string_view> ReadString(absl::string_view what) {
    MOE_ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
    if (len > kMaxStringLen || len > remaining()) return Truncated(what);
    absl::string_view s(reinterpret_cast<const char*>(b_.data() + pos_), len);
    pos_ += len;
    return s;
  }
  absl::StatusOr<absl::Span<const uint8_t>> Take(uint64_t n, absl::string_view what) {
    if (n > remaining()) return Truncated(what);
    auto s = b_.subspan(pos_, n);
    pos_ += n;
    return s;
  }
  absl::Status Truncated(absl::string_view what) const {
    return absl::DataLossError(
        absl::StrCat("GGUF file truncated or corrupt while reading ", what, " at byte ", pos_));
  }

 private:
  absl::Span<const uint8_t> b_;
  size_t pos_ = 0;
};

size_t ScalarSize(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

// Decodes one numeric scalar at p into v's integer/float fields.
// The integer view of a float value: truncated when it fits an int64, else 0 (converting NaN,
// infinities or values past 2^63 is undefined behaviour).
int64_t IntegerPart(double f) { return f > -9.2e18 && f < 9.2e18 ? static_cast<int64_t>(f) : 0; }

void DecodeScalar(GgufType t, const uint8_t* p, GgufValue& v) {
  auto load = [&](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (t) {
    case GgufType::kU8:
      v.u = load(uint8_t{});
      v.i = v.u;
      v.f = v.u;
      break;
    case GgufType::kBool:
      v.u = load(uint8_t{}) != 0;
      v.i = v.u;
      v.f = v.u;
      break;
    case GgufType::kI8:
      v.i = load(int8_t{});
      v.u = v.i;
      v.f = v.i;
      break;
    case GgufType::kU16:
      v.u = load(uint16_t{});
      v.i = v.u;
      v.f = v.u;
      break;
    case GgufType::kI16:
      v.i = load(int16_t{});
      v.u = v.i;
      v.f = v.i;
      break;
    case GgufType::kU32:
      v.u = load(uint32_t{});
      v.i = v.u;
      v.f = v.u;
      break;
    case GgufType::kI32:
      v.i = load(int32_t{});
      v.u = v.i;
      v.f = v.i;
      break;
    case GgufType::kU64:
      v.u = load(uint64_t{});
      v.i = v.u;
      v.f = v.u;
      break;
    case GgufType::kI64:
      v.i = load(int64_t{});
      v.u = v.i;
      v.f = v.i;
      break;
    case GgufType::kF32:
      v.f = load(float{});
      v.i = IntegerPart(v.f);
      v.u = v.i;
      break;
    case GgufType::kF64:
      v.f = load(double{});
      v.i = IntegerPart(v.f);
      v.u = v.i;
      break;
    default:
      break;
  }
}

bool IsInteger(GgufType t) {
  return t != GgufType::kF32 && t != GgufType::kF64 && ScalarSize(t) != 0;
}

absl::StatusOr<GgufValue> ReadValue(Cursor& c, GgufType type, const std::string& key) {
  GgufValue v;
  v.type = type;
  std::string what = absl::StrCat("value of '", key, "'");
  if (type == GgufType::kString) {
    MOE_ASSIGN_OR_RETURN(v.str, c.ReadString(what));
    return v;
  }
  if (type == GgufType::kArray) {
    MOE_ASSIGN_OR_RETURN(uint32_t et, c.Read<uint32_t>(what));
    MOE_ASSIGN_OR_RETURN(v.count, c.Read<uint64_t>(what));
    v.elem_type = static_cast<GgufType>(et);
    if (v.elem_type == GgufType::kString) {
      // Each string takes at least 8 bytes: reject counts the file cannot hold before reserving.
      if (v.count > c.remaining() / 8) return c.Truncated(what);
      v.strings.reserve(v.count);
      for (uint64_t k = 0; k < v.count; ++k) {
        MOE_ASSIGN_OR_RETURN(auto s, c.ReadString(what));
        v.strings.push_back(s);
      }
      return v;
    }
    size_t es = ScalarSize(v.elem_type);
    if (es == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF key '", key, "' has unsupported array element type ", et));
    }
    if (v.count > c.remaining() / es) return c.Truncated(what);
    MOE_ASSIGN_OR_RETURN(v.raw, c.Take(v.count * es, what));
    return v;
  }
  size_t size = ScalarSize(type);
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF key '", key, "' has unknown type ", static_cast<uint32_t>(type)));
  }
  MOE_ASSIGN_OR_RETURN(auto bytes, c.Take(size, what));
  DecodeScalar(type, bytes.data(), v);
  return v;
}

}  // namespace

std::string GgmlTypeName(uint32_t t) {
  switch (t) {
    case 0:
      return "F32";
    case 1:
      return "F16";
    case 2:
      return "Q4_0";
    case 3:
      return "Q4_1";
    case 6:
      return "Q5_0";
    case 7:
      return "Q5_1";
    case 8:
      return "Q8_0";
    case 9:
      return "Q8_1";
    case 10:
      return "Q2_K";
    case 11:
      return "Q3_K";
    case 12:
      return "Q4_K";
    case 13:
      return "Q5_K";
    case 14:
      return "Q6_K";
    case 15:
      return "Q8_K";
    case 16:
      return "IQ2_XXS";
    case 17:
      return "IQ2_XS";
    case 18:
      return "IQ3_XXS";
    case 19:
      return "IQ1_S";
    case 20:
      return "IQ4_NL";
    case 21:
      return "IQ3_S";
    case 22:
      return "IQ2_S";
    case 23:
      return "IQ4_XS";
    case 24:
      return "I8";
    case 25:
      return "I16";
    case 26:
      return "I32";
    case 27:
      return "I64";
    case 28:
      return "F64";
    case 29:
      return "IQ1_M";
    case 30:
      return "BF16";
    default:
      return absl::StrCat("ggml type ", t);
  }
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  auto parsed = Parse(file->bytes(), file);
  if (!parsed.ok()) return Annotate(parsed.status(), absl::StrCat("reading '", path, "'"));
  return parsed;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(absl::Span<const uint8_t> bytes,
                                                          std::shared_ptr<const void> owner) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->owner_ = std::move(owner);
  g->bytes_ = bytes;
  Cursor c(bytes);
  MOE_ASSIGN_OR_RETURN(uint32_t magic, c.Read<uint32_t>("magic"));
  if (magic != kGgufMagic) return absl::InvalidArgumentError("not a GGUF file (bad magic)");
  MOE_ASSIGN_OR_RETURN(g->version_, c.Read<uint32_t>("version"));
  if (g->version_ < 2 || g->version_ > 3) {
    return absl::UnimplementedError(
        absl::StrCat("unsupported GGUF version ", g->version_, " (supported: 2, 3)"));
  }
  MOE_ASSIGN_OR_RETURN(uint64_t n_tensors, c.Read<uint64_t>("tensor count"));
  MOE_ASSIGN_OR_RETURN(uint64_t n_kv, c.Read<uint64_t>("metadata count"));
  // Every entry takes at least a few bytes; a count larger than the file is corrupt.
  if (n_kv > c.remaining() / 12 || n_tensors > c.remaining() / 24) {
    return c.Truncated("header counts");
  }
  for (uint64_t k = 0; k < n_kv; ++k) {
    MOE_ASSIGN_OR_RETURN(auto key_view, c.ReadString("metadata key"));
    std::string key(key_view);
    MOE_ASSIGN_OR_RETURN(uint32_t type, c.Read<uint32_t>("metadata type"));
    MOE_ASSIGN_OR_RETURN(GgufValue v, ReadValue(c, static_cast<GgufType>(type), key));
    if (!g->kv_.emplace(key, std::move(v)).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate GGUF key '", key, "'"));
    }
    g->key_order_.push_back(key);
  }
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensorInfo info;
    MOE_ASSIGN_OR_RETURN(auto name, c.ReadString("tensor name"));
    info.name = std::string(name);
    MOE_ASSIGN_OR_RETURN(uint32_t n_dims, c.Read<uint32_t>("tensor dims"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", info.name, "' has ", n_dims, " dimensions"));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      MOE_ASSIGN_OR_RETURN(uint64_t ne, c.Read<uint64_t>("tensor shape"));
      if (ne == 0 || ne > (1ull << 40)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", info.name, "' has invalid dimension ", ne));
      }
      info.ne.push_back(static_cast<int64_t>(ne));
    }
    // The importer multiplies the dimensions out (2^32 x 2^35 once overflowed there).
    if (!ElementCountFits(info.ne)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", info.name, "' has more than 2^50 elements: no file holds that"));
    }
    MOE_ASSIGN_OR_RETURN(info.ggml_type, c.Read<uint32_t>("tensor type"));
    MOE_ASSIGN_OR_RETURN(info.offset, c.Read<uint64_t>("tensor offset"));
    if (!g->tensor_index_.emplace(info.name, g->tensors_.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate tensor '", info.name, "'"));
    }
    g->tensors_.push_back(std::move(info));
  }
  uint64_t alignment = 32;
  if (const GgufValue* a = g->Find("general.alignment")) {
    if (!IsInteger(a->type) || a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return absl::InvalidArgumentError("general.alignment is not a power of two");
    }
    alignment = a->u;
  }
  uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  if (data_start > bytes.size() && !g->tensors_.empty()) return c.Truncated("tensor data");
  // Tensor byte sizes depend on the type; the importer computes and checks them (it knows the
  // block layouts). Here each tensor's data is bounded by the file end; the importer narrows it.
  for (auto& t : g->tensors_) {
    if (t.offset % alignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' data offset is not aligned"));
    }
    if (data_start + t.offset > bytes.size()) {
      return absl::DataLossError(
          absl::StrCat("tensor '", t.name, "' data lies beyond the end of the file (truncated?)"));
    }
    t.data = bytes.subspan(data_start + t.offset);
  }
  return g;
}

const GgufValue* GgufFile::Find(absl::string_view key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
absl::Status Missing(absl::string_view key) {
  return absl::NotFoundError(absl::StrCat("GGUF key '", key, "' not found"));
}
absl::Status WrongType(absl::string_view key, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat("GGUF key '", key, "' is not ", want));
}
}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kString) return WrongType(key, "a string");
  return std::string(v->str);
}

absl::StatusOr<uint64_t> GgufFile::GetUint(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (!IsInteger(v->type) || v->type == GgufType::kBool || v->i < 0) {
    return WrongType(key, "a non-negative integer");
  }
  return v->u;
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (ScalarSize(v->type) == 0 || v->type == GgufType::kBool) return WrongType(key, "a number");
  return v->f;
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (!IsInteger(v->type)) return WrongType(key, "a bool");
  return v->u != 0;
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type != GgufType::kArray || v->elem_type != GgufType::kString) {
    return WrongType(key, "an array of strings");
  }
  return std::vector<std::string>(v->strings.begin(), v->strings.end());
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  size_t es = ScalarSize(v->elem_type);
  if (v->type != GgufType::kArray || es == 0) return WrongType(key, "a numeric array");
  std::vector<float> out(v->count);
  for (uint64_t k = 0; k < v->count; ++k) {
    GgufValue tmp;
    DecodeScalar(v->elem_type, v->raw.data() + k * es, tmp);
    out[k] = static_cast<float>(tmp.f);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(absl::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  size_t es = ScalarSize(v->elem_type);
  if (v->type != GgufType::kArray || es == 0 || !IsInteger(v->elem_type)) {
    return WrongType(key, "an integer array");
  }
  std::vector<int64_t> out(v->count);
  for (uint64_t k = 0; k < v->count; ++k) {
    GgufValue tmp;
    DecodeScalar(v->elem_type, v->raw.data() + k * es, tmp);
    out[k] = tmp.i;
  }
  return out;
}

absl::StatusOr<DType> DTypeFromGgml(uint32_t t, absl::string_view tensor) {
  switch (t) {
    case kGgmlF32:
      return DType::kF32;
    case kGgmlF16:
      return DType::kF16;
    case kGgmlBF16:
      return DType::kBF16;
    case kGgmlQ8_0:
      return DType::kQ8_0;
    case kGgmlQ4_0:
      return DType::kQ4_0;
    case kGgmlQ2_K:
      return DType::kQ2_K;
    case kGgmlQ3_K:
      return DType::kQ3_K;
    case kGgmlQ4_K:
      return DType::kQ4_K;
    case kGgmlQ5_K:
      return DType::kQ5_K;
    case kGgmlQ6_K:
      return DType::kQ6_K;
    case kGgmlMXFP4:
      return DType::kMXFP4;
    case kGgmlQ4_1:
      return DType::kQ4_1;
    case kGgmlQ5_0:
      return DType::kQ5_0;
    case kGgmlQ5_1:
      return DType::kQ5_1;
    case kGgmlIQ4_NL:
      return DType::kIQ4_NL;
    case kGgmlIQ4_XS:
      return DType::kIQ4_XS;
  }
  return absl::UnimplementedError(absl::StrCat(
      "tensor '", tensor, "' has type ", GgmlTypeName(t),
      ", which is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, "
      "Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4)"));
}

}  // namespace moe
