#include "lib/import/gguf_writer.h"

#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/import/gguf_file.h"

namespace moe {
namespace {

constexpr uint64_t kAlignment = 32;  // GGUF's default general.alignment

class Out {
 public:
  explicit Out(std::ofstream& f) : f_(f) {}
  template <typename T>
  void Put(T v) {
    f_.write(reinterpret_cast<const char*>(&v), sizeof(T));
    pos_ += sizeof(T);
  }
  void Str(const std::string& s) {
    Put<uint64_t>(s.size());
    f_.write(s.data(), s.size());
    pos_ += s.size();
  }
  void Bytes(absl::Span<const uint8_t> b) {
    f_.write(reinterpret_cast<const char*>(b.data()), b.size());
    pos_ += b.size();
  }
  void PadTo(uint64_t align) {
    while (pos_ % align) Put<uint8_t>(0);
  }
  uint64_t pos() const { return pos_; }

 private:
  std::ofstream& f_;
  uint64_t pos_ = 0;
};

}  // namespace

uint32_t GgmlTypeOf(DType t) {
  switch (t) {
    case DType::kF32:
      return kGgmlF32;
    case DType::kF16:
      return kGgmlF16;
    case DType::kBF16:
      return kGgmlBF16;
    case DType::kQ8_0:
      return kGgmlQ8_0;
    case DType::kQ4_0:
      return kGgmlQ4_0;
    case DType::kQ2_K:
      return kGgmlQ2_K;
    case DType::kQ3_K:
      return kGgmlQ3_K;
    case DType::kQ4_K:
      return kGgmlQ4_K;
    case DType::kQ5_K:
      return kGgmlQ5_K;
    case DType::kQ6_K:
      return kGgmlQ6_K;
    case DType::kMXFP4:
      return kGgmlMXFP4;
    case DType::kQ4_1:
      return kGgmlQ4_1;
    case DType::kQ5_0:
      return kGgmlQ5_0;
    case DType::kQ5_1:
      return kGgmlQ5_1;
    case DType::kIQ4_NL:
      return kGgmlIQ4_NL;
    case DType::kIQ4_XS:
      return kGgmlIQ4_XS;
    default:
      break;  // run-time layouts: made at load, never written (callers take file types only)
  }
  return kGgmlF32;
}

void GgufWriter::Set(KeyValue kv) {
  for (auto& existing : kvs_) {
    if (existing.key == kv.key) {
      existing = std::move(kv);
      return;
    }
  }
  kvs_.push_back(std::move(kv));
}

void GgufWriter::SetString(const std::string& k, const std::string& v) { Set({k, v}); }
void GgufWriter::SetU32(const std::string& k, uint32_t v) { Set({k, v}); }
void GgufWriter::SetF32(const std::string& k, float v) { Set({k, v}); }
void GgufWriter::SetBool(const std::string& k, bool v) { Set({k, v}); }
void GgufWriter::SetStringArray(const std::string& k, std::vector<std::string> v) {
  Set({k, std::move(v)});
}
void GgufWriter::SetF32Array(const std::string& k, std::vector<float> v) { Set({k, std::move(v)}); }
void GgufWriter::SetI32Array(const std::string& k, std::vector<int32_t> v) {
  Set({k, std::move(v)});
}

void GgufWriter::AddTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                           absl::Span<const uint8_t> data) {
  tensors_.push_back({name, dtype, std::move(shape), data, data.size(), nullptr});
}

void GgufWriter::AddTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                           size_t bytes, Producer produce) {
  tensors_.push_back({name, dtype, std::move(shape), {}, bytes, std::move(produce)});
}

absl::Status GgufWriter::Write(const std::string& path, const WriteProgress& progress) const {
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write '", tmp, "'"));
  Out o(f);
  o.Put<uint32_t>(0x46554747);  // "GGUF"
  o.Put<uint32_t>(3);
  o.Put<uint64_t>(tensors_.size());
  o.Put<uint64_t>(kvs_.size());
  for (const auto& kv : kvs_) {
    o.Str(kv.key);
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string>) {
            o.Put<uint32_t>(static_cast<uint32_t>(GgufType::kString));
            o.Str(v);
          } else if constexpr (std::is_same_v<T, uint32_t>) {
            o.Put<uint32_t>(static_cast<uint32_t>(GgufType::kU32));
            o.Put(v);
          } else if constexpr (std::is_same_v<T, float>) {
            o.Put<uint32_t>(static_cast<uint32_t>(GgufType::kF32));
            o.Put(v);
          } else if constexpr (std::is_same_v<T, bool>) {
            o.Put<uint32_t>(static_cast<uint32_t>(GgufType::kBool));
            o.Put<uint8_t>(v ? 1 : 0);
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            o.Put<uint32_t>(static_cast<uint32_t>(GgufType::kArray));
            o.Put<uint32_t>(static_cast<uint32_t>(GgufType::kString));
            o.Put<uint64_t>(v.size());
            for (const auto& s : v) o.Str(s);
          } else if constexpr (std::is_same_v<T, std::vector<float>>) {
            o.Put<uint32_t>(static_cast<uint32_t>(GgufType::kArray));
            o.Put<uint32_t>(static_cast<uint32_t>(GgufType::kF32));
            o.Put<uint64_t>(v.size());
            for (float x : v) o.Put(x);
          } else {
            o.Put<uint32_t>(static_cast<uint32_t>(GgufType::kArray));
            o.Put<uint32_t>(static_cast<uint32_t>(GgufType::kI32));
            o.Put<uint64_t>(v.size());
            for (int32_t x : v) o.Put(x);
          }
        },
        kv.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    o.Str(t.name);
    o.Put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) o.Put<uint64_t>(*it);  // ne order
    o.Put<uint32_t>(GgmlTypeOf(t.dtype));
    o.Put<uint64_t>(offset);
    offset = (offset + t.bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  o.PadTo(kAlignment);
  std::vector<uint8_t> made;  // the deferred tensors', one at a time
  uint64_t total = 0, written = 0;
  for (const auto& t : tensors_) total += t.bytes;
  for (const auto& t : tensors_) {
    absl::Span<const uint8_t> data = t.data;
    if (t.produce) {
      made.resize(t.bytes);
      absl::Status status = t.produce(absl::MakeSpan(made));
      if (!status.ok()) {
        f.close();
        std::remove(tmp.c_str());
        return Annotate(status, absl::StrCat("making tensor '", t.name, "'"));
      }
      data = made;
    }
    o.Bytes(data);
    o.PadTo(kAlignment);
    if (!f) break;
    written += t.bytes;
    if (progress && !progress(written, total)) {
      f.close();
      std::remove(tmp.c_str());
      return absl::CancelledError(absl::StrCat("writing '", path, "' cancelled"));
    }
  }
  f.flush();
  if (!f) {
    std::remove(tmp.c_str());
    return absl::DataLossError(absl::StrCat("writing '", tmp, "' failed (disk full?)"));
  }
  f.close();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat("cannot rename '", tmp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

void CopyMetadata(const GgufFile& from, GgufWriter& to,
                  const std::function<bool(const std::string&)>& keep) {
  for (const std::string& key : from.keys()) {
    if (!keep(key)) continue;
    const GgufValue* v = from.Find(key);
    if (v->type == GgufType::kString) {
      to.SetString(key, std::string(v->str));
    } else if (v->type == GgufType::kBool) {
      to.SetBool(key, v->u != 0);
    } else if (v->type == GgufType::kF32 || v->type == GgufType::kF64) {
      to.SetF32(key, static_cast<float>(v->f));
    } else if (v->type == GgufType::kArray && v->elem_type == GgufType::kString) {
      to.SetStringArray(key, *from.GetStringArray(key));
    } else if (v->type == GgufType::kArray &&
               (v->elem_type == GgufType::kF32 || v->elem_type == GgufType::kF64)) {
      to.SetF32Array(key, *from.GetFloatArray(key));
    } else if (v->type == GgufType::kArray) {
      auto ints = *from.GetIntArray(key);
      to.SetI32Array(key, std::vector<int32_t>(ints.begin(), ints.end()));
    } else {
      to.SetU32(key, static_cast<uint32_t>(v->u));
    }
  }
}

}  // namespace moe
