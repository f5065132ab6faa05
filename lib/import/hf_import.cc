#include "lib/import/hf_import.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/json_text.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_config.h"
#include "lib/import/hf_fp8.h"
#include "lib/import/hf_tensors.h"
#include "lib/import/hf_tokenizer.h"
#include "lib/import/safetensors_file.h"
#include "lib/import/sentencepiece_tokenizer.h"
#include "nlohmann/json.hpp"

namespace moe {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

absl::StatusOr<std::string> ReadText(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open '", p.string(), "'"));
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string ShapeString(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// Every tensor of the checkpoint by name, with the file that holds it.
struct TensorIndex {
  std::vector<std::shared_ptr<const SafetensorsFile>> files;
  std::map<std::string, const SafetensorsTensor*, std::less<>> by_name;
};

absl::Status AddFile(std::shared_ptr<const SafetensorsFile> f, TensorIndex* index) {
  for (const SafetensorsTensor& t : f->tensors()) {
    if (!index->by_name.emplace(t.name, &t).second) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name,
                                                     "' appears in more than "
                                                     "one safetensors file"));
    }
  }
  index->files.push_back(std::move(f));
  return absl::OkStatus();
}

absl::StatusOr<TensorIndex> OpenTensors(const fs::path& dir) {
  TensorIndex index;
  std::vector<std::string> shards;
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    MOE_ASSIGN_OR_RETURN(std::string text, ReadText(index_path));
    auto parsed = ParseJsonText(text);
    if (!parsed.ok()) return Annotate(parsed.status(), "model.safetensors.index.json");
    Json j = *std::move(parsed);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError("model.safetensors.index.json has no 'weight_map' object");
    }
    std::map<std::string, std::string> expected;  // tensor -> shard, checked after opening
    for (const auto& [tensor, file] : j["weight_map"].items()) {
      if (!file.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat("model.safetensors.index.json maps '",
                                                       tensor,
                                                       "' to something other than a file name"));
      }
      const std::string name = file.get<std::string>();
      // Shards live beside the index: a path elsewhere is refused, not followed.
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        return absl::InvalidArgumentError(absl::StrCat("model.safetensors.index.json names shard '",
                                                       name, "', which is not a plain file name"));
      }
      if (std::find(shards.begin(), shards.end(), name) == shards.end()) shards.push_back(name);
      expected[tensor] = name;
    }
    for (const std::string& s : shards) {
      MOE_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open((dir / s).string()));
      MOE_RETURN_IF_ERROR(AddFile(std::move(f), &index));
    }
    for (const auto& [tensor, shard] : expected) {
      auto it = index.by_name.find(tensor);
      if (it == index.by_name.end()) {
        return absl::NotFoundError(absl::StrCat("model.safetensors.index.json places tensor '",
                                                tensor, "' in '", shard, "', which lacks it"));
      }
    }
    return index;
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".safetensors") shards.push_back(entry.path().filename());
  }
  if (shards.empty()) {
    return absl::NotFoundError(absl::StrCat("no *.safetensors weights in '", dir.string(), "'"));
  }
  std::sort(shards.begin(), shards.end());
  for (const std::string& s : shards) {
    MOE_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open((dir / s).string()));
    MOE_RETURN_IF_ERROR(AddFile(std::move(f), &index));
  }
  return index;
}

// The type a tensor is stored as, given the requested one (see ImportHfCheckpoint).
DType TargetType(const WantedTensor& w, DType source, std::optional<DType> out) {
  if (!out) return source;
  if (w.keep_f32 || w.shape.size() == 1) return DType::kF32;
  const bool quantized = GetDTypeInfo(*out).block_elems > 1;
  if (w.router && quantized) return DType::kF32;
  return *out;
}

absl::Status CheckShape(const std::string& name, const std::vector<int64_t>& got,
                        const std::vector<int64_t>& want) {
  if (got == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has shape ", ShapeString(got),
                                                 " but config.json implies ", ShapeString(want)));
}

TensorSpec Describe(const WantedTensor& w, DType type) {
  TensorSpec t;
  t.name = w.name;
  t.shape = w.shape;
  t.layer = w.layer;
  t.expert = w.expert;
  t.dtype = type;
  return t;
}

// Whether the tensor's elements are laid out anew rather than carried in the checkpoint's order.
bool Rearranged(const WantedTensor& w) { return w.gather || w.source_row || w.col_stride > 0; }

absl::Status CheckRows(const WantedTensor& w, const TensorSpec& t) {
  const int64_t cols = t.shape.back();
  if (RowSizeValid(t.dtype, cols)) return absl::OkStatus();
  // A tensor laid out anew (DeepSeek's attn_k_b) is named as the runtime knows it too.
  const std::string as = Rearranged(w) ? absl::StrCat(" (as '", w.name, "')") : "";
  return absl::InvalidArgumentError(absl::StrCat("tensor '", w.hf_name, "'", as, " rows of ", cols,
                                                 " elements do not fit ", DTypeName(t.dtype),
                                                 " blocks of ", GetDTypeInfo(t.dtype).block_elems,
                                                 "; choose a float type"));
}

// How the tensors of one import are made.
struct CarryContext {
  std::optional<DType> out;  // the type asked for (unset: each tensor's own)
  ConvertAt convert_at = ConvertAt::kImport;
  // Keeps the mapped shards alive for producers run after the import (ConvertAt::kWrite).
  std::shared_ptr<const void> files;
  ModelSpec* spec = nullptr;
};

// Writes a converted tensor's bytes into a span of exactly its size.
using Fill = std::function<absl::Status(absl::Span<uint8_t>)>;

// t with its bytes: made now into a buffer the spec keeps, or, with ConvertAt::kWrite, by its
// producer when they are needed.
absl::StatusOr<TensorSpec> WithBytes(TensorSpec t, Fill fill, const CarryContext& c) {
  if (c.convert_at == ConvertAt::kWrite) {
    t.produce = [fill = std::move(fill), files = c.files](absl::Span<uint8_t> out) {
      return fill(out);
    };
    return t;
  }
  auto buf = std::make_shared<std::vector<uint8_t>>(t.byte_size());
  MOE_RETURN_IF_ERROR(fill(absl::MakeSpan(*buf)));
  t.data = absl::MakeConstSpan(*buf);
  c.spec->owners.push_back(std::move(buf));
  return t;
}

// `values` (row-major over t's shape) stored as t.dtype into out.
absl::Status Encode(const std::vector<float>& values, const TensorSpec& t,
                    absl::Span<uint8_t> out) {
  const int64_t cols = t.shape.back(), rows = t.num_elements() / std::max<int64_t>(1, cols);
  const size_t dst_row = RowBytes(t.dtype, cols);
  for (int64_t r = 0; r < rows; ++r) {
    MOE_RETURN_IF_ERROR(
        QuantizeRow(t.dtype, values.data() + r * cols, out.data() + r * dst_row, cols));
  }
  return absl::OkStatus();
}

int64_t ElementCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Whether the tensor reads past its checkpoint tensor (of src_elements elements).
absl::Status CheckSpan(const WantedTensor& w, const TensorSpec& t, int64_t src_elements) {
  if (w.gather) return absl::OkStatus();  // its indices are the architecture's own
  if (w.source_row) {
    const int64_t cols = t.shape.back(), rows = t.num_elements() / cols;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t from = w.source_row(r);
      if (from < 0 || (from + 1) * cols > src_elements) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", w.hf_name, "' has no row ", from,
                                                       " for row ", r, " of '", w.name, "'"));
      }
    }
    return absl::OkStatus();
  }
  int64_t last = w.first_element + t.num_elements();  // one past the last element read
  if (w.col_stride > 0) {
    const int64_t cols = t.shape.back(), rows = t.num_elements() / cols;
    last = w.first_element + (cols - 1) * w.col_stride + (rows - 1) * w.row_stride + 1;
  }
  if (w.first_element < 0 || last > src_elements) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", w.hf_name, "' holds no '", w.name,
                                                   "' at element ", w.first_element));
  }
  return absl::OkStatus();
}

// The slice of src that t is, converted row by row to t's type (never a float copy of the whole
// tensor as well).
absl::Status FillPlain(const WantedTensor& w, const SafetensorsTensor& src, const TensorSpec& t,
                       absl::Span<uint8_t> out) {
  const size_t elem = RowBytes(*src.dtype, 1);
  const uint8_t* data = src.data.data() + w.first_element * elem;
  const int64_t cols = t.shape.back(), rows = t.num_elements() / std::max<int64_t>(1, cols);
  const size_t src_row = RowBytes(*src.dtype, cols), dst_row = RowBytes(t.dtype, cols);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(*src.dtype, data + r * src_row, row.data(), cols);
    MOE_RETURN_IF_ERROR(QuantizeRow(t.dtype, row.data(), out.data() + r * dst_row, cols));
  }
  return absl::OkStatus();
}

// A canonical tensor gathered from a checkpoint tensor of another layout, or whose values are
// the checkpoint's through a function (WantedTensor::value).
absl::Status FillGathered(const WantedTensor& w, const SafetensorsTensor& src, const TensorSpec& t,
                          absl::Span<uint8_t> out) {
  const size_t elem = RowBytes(*src.dtype, 1);
  std::vector<float> values(t.num_elements());
  if (w.col_stride > 0) {
    // Column c is a run of the checkpoint's elements, row_stride apart. Tiles of kTile columns:
    // their runs dequantized at once, then written a row of the tile at a time. (Column by
    // column, the writes kCols apart, a power of two for most models, fall into a few cache
    // sets and miss every time; so do element-by-element reads down the checkpoint's columns.)
    constexpr int64_t kTile = 64;
    const int64_t cols = t.shape.back(), rows = t.num_elements() / cols;
    const int64_t run = (rows - 1) * w.row_stride + 1;
    const int64_t pitch = run + 16;  // the tile's runs apart by other than a power of two
    std::vector<float> tile(kTile * pitch);
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t n = std::min(kTile, cols - c0);
      for (int64_t k = 0; k < n; ++k) {
        DequantizeRow(*src.dtype,
                      src.data.data() + (w.first_element + (c0 + k) * w.col_stride) * elem,
                      tile.data() + k * pitch, run);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const float* in = tile.data() + r * w.row_stride;
        float* row = values.data() + r * cols + c0;
        for (int64_t k = 0; k < n; ++k) row[k] = in[k * pitch];
      }
    }
  } else if (w.source_row) {
    const int64_t cols = t.shape.back(), rows = t.num_elements() / cols;
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(*src.dtype, src.data.data() + w.source_row(r) * cols * elem,
                    values.data() + r * cols, cols);
    }
  } else {
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      const int64_t at = w.gather ? w.gather(i) : w.first_element + i;
      DequantizeRow(*src.dtype, src.data.data() + at * elem, &values[i], 1);
    }
  }
  if (w.value) {
    for (float& v : values) v = w.value(v);
  }
  return Encode(values, t, out);
}

// Whether the tensor's elements are laid out anew, or changed, rather than carried over.
bool NeedsGather(const WantedTensor& w) { return Rearranged(w) || w.value; }

absl::Status FillFrom(const WantedTensor& w, const SafetensorsTensor& src, const TensorSpec& t,
                      absl::Span<uint8_t> out) {
  return NeedsGather(w) ? FillGathered(w, src, t, out) : FillPlain(w, src, t, out);
}

// A checkpoint tensor in the canonical layout or another: carried over (zero copy when the type
// stays and nothing is rearranged), or converted.
absl::StatusOr<TensorSpec> CarryTensor(const WantedTensor& w, const SafetensorsTensor& src,
                                       const CarryContext& c) {
  TensorSpec t = Describe(w, TargetType(w, *src.dtype, c.out));
  MOE_RETURN_IF_ERROR(CheckRows(w, t));
  MOE_RETURN_IF_ERROR(CheckSpan(w, t, ElementCount(src.shape)));
  const size_t elem = RowBytes(*src.dtype, 1);
  const absl::Span<const uint8_t> data =
      src.data.subspan(w.first_element * elem, t.num_elements() * elem);
  if (!NeedsGather(w) && t.dtype == *src.dtype &&
      reinterpret_cast<uintptr_t>(data.data()) % elem == 0) {
    t.data = data;  // zero copy: the mapped file stays alive in spec->owners
    return t;
  }
  return WithBytes(
      t, [w, src, t](absl::Span<uint8_t> out) { return FillFrom(w, src, t, out); }, c);
}

// MXFP4 as transformers' checkpoints store it: per 32 values of a row, 16 bytes with values 2j
// and 2j + 1 in the low and high nibble of byte j, and an E8M0 scale (2^(e - 127)) kept apart.
// The runtime's blocks (GGUF's): the scale byte, then 16 bytes with values j and j + 16 in the
// low and high nibble of byte j. Both scale the same E2M1 codes by the same power of two, so
// the repacking is exact.
void RepackMxfp4Block(const uint8_t* hf, uint8_t scale, uint8_t* block) {
  uint8_t codes[32];
  for (int j = 0; j < 16; ++j) {
    codes[2 * j] = hf[j] & 0x0f;
    codes[2 * j + 1] = hf[j] >> 4;
  }
  block[0] = scale;
  for (int j = 0; j < 16; ++j) block[1 + j] = codes[j] | (codes[j + 16] << 4);
}

// MXFP4 experts stay MXFP4 (requantizing 4-bit codes would only lose), unless a float type is
// asked for, which they are dequantized to.
absl::StatusOr<TensorSpec> CarryMxfp4(const WantedTensor& w, const SafetensorsTensor& blocks,
                                      const SafetensorsTensor& scales, const CarryContext& c) {
  for (const SafetensorsTensor* s : {&blocks, &scales}) {
    if (s->dtype_name != "U8") {
      return absl::InvalidArgumentError(
          absl::StrCat("MXFP4 tensor '", s->name, "' has dtype ", s->dtype_name, ", not U8"));
    }
  }
  MOE_RETURN_IF_ERROR(CheckShape(w.mx_scales, scales.shape, w.mx_scales_shape));
  TensorSpec t = Describe(w, DType::kMXFP4);
  MOE_RETURN_IF_ERROR(CheckRows(w, t));
  const TensorSpec packed = t;
  if (c.out && GetDTypeInfo(*c.out).block_elems == 1) t.dtype = *c.out;
  auto fill = [w, blocks, scales, packed, t](absl::Span<uint8_t> out) -> absl::Status {
    const int64_t cols = t.shape.back(), rows = t.shape[0], groups = cols / 32;
    std::vector<uint8_t> repacked;
    uint8_t* dst = out.data();
    if (t.dtype != DType::kMXFP4) {
      repacked.resize(packed.byte_size());
      dst = repacked.data();
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t src = w.mx_row(r);
      for (int64_t g = 0; g < groups; ++g) {
        RepackMxfp4Block(blocks.data.data() + (src * groups + g) * 16,
                         scales.data[src * groups + g], dst + (r * groups + g) * 17);
      }
    }
    if (t.dtype == DType::kMXFP4) return absl::OkStatus();
    std::vector<float> values(t.num_elements());
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(DType::kMXFP4, dst + r * groups * 17, values.data() + r * cols, cols);
    }
    return Encode(values, t, out);
  };
  return WithBytes(t, std::move(fill), c);
}

// FP8 checkpoint tensors dequantized to floats, each once, and freed after the last wanted tensor
// that reads it: a stack of experts is read once for each expert's gate, up or down, and a
// model's floats all at once would take twice its BF16 size besides. Shared by the producers of
// a deferred import, which run one after another.
class Fp8Floats {
 public:
  Fp8Floats(const std::vector<WantedTensor>& wanted, std::optional<Fp8Blocks> blocks)
      : blocks_(blocks) {
    for (const WantedTensor& w : wanted) ++uses_[w.hf_name];
  }
  std::optional<Fp8Blocks> blocks() const { return blocks_; }

  // `weight`'s floats; the caller keeps them as long as it needs them.
  absl::StatusOr<std::shared_ptr<const std::vector<float>>> Get(
      const SafetensorsTensor& weight, const SafetensorsTensor& scale_inv) {
    std::shared_ptr<const std::vector<float>>& kept = kept_[weight.name];
    std::shared_ptr<const std::vector<float>> floats = kept;
    if (floats == nullptr) {
      MOE_ASSIGN_OR_RETURN(std::vector<float> values, DequantizeFp8(weight, scale_inv, *blocks_));
      floats = std::make_shared<const std::vector<float>>(std::move(values));
      kept = floats;
    }
    if (--uses_[weight.name] <= 0) kept_.erase(weight.name);
    return floats;
  }

 private:
  std::optional<Fp8Blocks> blocks_;
  absl::flat_hash_map<std::string, int> uses_;
  absl::flat_hash_map<std::string, std::shared_ptr<const std::vector<float>>> kept_;
};

// An FP8 tensor with block scales: dequantized into floats (the layouts read them as F32), stored
// as BF16 unless another type is asked for.
absl::StatusOr<TensorSpec> CarryFp8(const WantedTensor& w, const SafetensorsTensor& src,
                                    const SafetensorsTensor& scale_inv,
                                    std::shared_ptr<Fp8Floats> fp8, const CarryContext& c) {
  const std::optional<DType> target = c.out ? c.out : std::optional<DType>(DType::kBF16);
  TensorSpec t = Describe(w, TargetType(w, DType::kF32, target));
  MOE_RETURN_IF_ERROR(CheckRows(w, t));
  MOE_RETURN_IF_ERROR(CheckSpan(w, t, ElementCount(src.shape)));
  auto fill = [w, src, scale_inv, fp8 = std::move(fp8), t](absl::Span<uint8_t> out) {
    MOE_ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<float>> floats,
                         fp8->Get(src, scale_inv));
    const SafetensorsTensor dequantized{
        src.name, "F32", DType::kF32, src.shape,
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(floats->data()),
                            floats->size() * sizeof(float))};
    return FillFrom(w, dequantized, t, out);
  };
  return WithBytes(t, std::move(fill), c);
}

absl::StatusOr<TensorSpec> Carry(const WantedTensor& w, const TensorIndex& index,
                                 const CarryContext& c, const std::string& hf_architecture,
                                 const std::shared_ptr<Fp8Floats>& fp8) {
  auto find = [&](const std::string& name) -> absl::StatusOr<const SafetensorsTensor*> {
    auto it = index.by_name.find(name);
    if (it == index.by_name.end()) {
      return absl::NotFoundError(absl::StrCat("checkpoint is missing tensor '", name, "' (",
                                              hf_architecture, " needs it)"));
    }
    return it->second;
  };
  MOE_ASSIGN_OR_RETURN(const SafetensorsTensor* src, find(w.hf_name));
  if (!w.mx_scales.empty()) {
    MOE_RETURN_IF_ERROR(CheckShape(w.hf_name, src->shape, w.hf_shape));
    MOE_ASSIGN_OR_RETURN(const SafetensorsTensor* scales, find(w.mx_scales));
    return CarryMxfp4(w, *src, *scales, c);
  }
  if (src->dtype_name == "F8_E4M3" && fp8->blocks()) {
    MOE_RETURN_IF_ERROR(CheckShape(w.hf_name, src->shape, w.hf_shape));
    MOE_ASSIGN_OR_RETURN(const SafetensorsTensor* scale_inv, find(w.hf_name + "_scale_inv"));
    return CarryFp8(w, *src, *scale_inv, fp8, c);
  }
  if (!src->dtype) {
    return absl::UnimplementedError(absl::StrCat("tensor '", w.hf_name, "' has dtype ",
                                                 src->dtype_name,
                                                 ", which is not supported (supported: F32, "
                                                 "F16, BF16, and F8_E4M3 with block scales)"));
  }
  MOE_RETURN_IF_ERROR(CheckShape(w.hf_name, src->shape, w.hf_shape));
  return CarryTensor(w, *src, c);
}

// The chat template of checkpoints that keep it in its own file: chat_template.jinja, which
// transformers takes over tokenizer_config.json's, else a processor's chat_template.json when
// tokenizer_config.json had none (Llama 4's repositories).
absl::Status ReadChatTemplateFile(const fs::path& dir, TokenizerData* data) {
  if (fs::exists(dir / "chat_template.jinja")) {
    MOE_ASSIGN_OR_RETURN(data->chat_template, ReadText(dir / "chat_template.jinja"));
    return absl::OkStatus();
  }
  if (!data->chat_template.empty() || !fs::exists(dir / "chat_template.json")) {
    return absl::OkStatus();
  }
  MOE_ASSIGN_OR_RETURN(std::string text, ReadText(dir / "chat_template.json"));
  auto parsed = ParseJsonText(text);
  if (!parsed.ok()) return Annotate(parsed.status(), "chat_template.json");
  const Json j = *std::move(parsed);
  auto it = j.is_object() ? j.find("chat_template") : j.end();
  if (!j.is_object() || it == j.end() || !it->is_string()) {
    return absl::InvalidArgumentError("chat_template.json holds no 'chat_template' string");
  }
  data->chat_template = it->get<std::string>();
  return absl::OkStatus();
}

// tokenizer.json when it is one the library reads; else a SentencePiece tokenizer.model; a
// checkpoint with neither imports without a tokenizer.
absl::StatusOr<TokenizerData> LoadTokenizer(const fs::path& dir, int64_t n_vocab) {
  TokenizerData data;
  const fs::path json = dir / "tokenizer.json", spm = dir / "tokenizer.model";
  if (fs::exists(json)) {
    absl::StatusOr<TokenizerData> t = TokenizerDataFromHfJson(json.string());
    if (t.ok()) {
      data = *std::move(t);
    } else if (fs::exists(spm)) {
      MOE_ASSIGN_OR_RETURN(data, TokenizerDataFromSentencePiece(spm.string()));
    } else {
      return t.status();
    }
  } else if (fs::exists(spm)) {
    MOE_ASSIGN_OR_RETURN(data, TokenizerDataFromSentencePiece(spm.string()));
  } else {
    return data;
  }
  MOE_RETURN_IF_ERROR(ReadChatTemplateFile(dir, &data));
  const int64_t n = static_cast<int64_t>(data.tokens.size());
  if (n > n_vocab) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer has ", n,
                                                   " tokens but config.json "
                                                   "vocab_size is ",
                                                   n_vocab));
  }
  // Embedding matrices are often padded past the tokenizer (Qwen: 151936 rows for 151665
  // tokens); the padding rows become unused tokens that never match text.
  for (int64_t i = n; i < n_vocab; ++i) {
    data.tokens.push_back(absl::StrCat("[PAD", i, "]"));
    if (!data.scores.empty()) data.scores.push_back(0.f);
    if (!data.token_types.empty())
      data.token_types.push_back(static_cast<int32_t>(TokenType::kUnused));
  }
  return data;
}

absl::StatusOr<ModelSpec> Import(const fs::path& dir, std::optional<DType> out_dtype,
                                 ConvertAt convert_at) {
  MOE_ASSIGN_OR_RETURN(std::string config_text, ReadText(dir / "config.json"));
  MOE_ASSIGN_OR_RETURN(HfConfig config, ParseHfConfig(config_text));
  ModelSpec spec;
  spec.arch = config.arch;
  spec.hp = config.hp;
  spec.name =
      dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  MOE_ASSIGN_OR_RETURN(TensorIndex index, OpenTensors(dir));
  for (auto& f : index.files) {
    spec.owners.push_back(f);
    // Tensors carried over unconverted lie in their shard: the expert cache may read them there.
    spec.source_files.push_back({f->path(), f->bytes().data(), f->bytes().size()});
  }
  const Json config_json = Json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  MOE_ASSIGN_OR_RETURN(std::optional<Fp8Blocks> fp8_blocks, Fp8BlocksOf(config_json));
  auto has = [&](const std::string& name) { return index.by_name.count(name) > 0; };
  const std::vector<WantedTensor> wanted = WantedTensors(config, has);
  auto fp8 = std::make_shared<Fp8Floats>(wanted, fp8_blocks);
  const CarryContext context{
      out_dtype, convert_at,
      std::make_shared<std::vector<std::shared_ptr<const SafetensorsFile>>>(index.files), &spec};
  for (const WantedTensor& w : wanted) {
    MOE_ASSIGN_OR_RETURN(TensorSpec t, Carry(w, index, context, config.hf_architecture, fp8));
    spec.tensors.push_back(std::move(t));
  }
  if (!config.rope_freq_factors.empty()) {
    TensorSpec t;
    t.name = std::string(kRopeFreqsTensor);
    t.dtype = DType::kF32;
    t.shape = {static_cast<int64_t>(config.rope_freq_factors.size())};
    const std::vector<float>& factors = config.rope_freq_factors;
    MOE_ASSIGN_OR_RETURN(
        t,
        WithBytes(
            t, [factors, t](absl::Span<uint8_t> out) { return Encode(factors, t, out); }, context));
    spec.tensors.push_back(std::move(t));
  }
  MOE_ASSIGN_OR_RETURN(spec.tokenizer, LoadTokenizer(dir, spec.hp.n_vocab));
  MOE_RETURN_IF_ERROR(ValidateModelSpec(spec));
  return spec;
}

}  // namespace

bool LooksLikeHfCheckpoint(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "config.json", ec);
}

absl::StatusOr<ModelSpec> ImportHfCheckpoint(const std::string& dir, std::optional<DType> out_dtype,
                                             ConvertAt convert_at) {
  if (!fs::is_directory(dir)) {
    return absl::NotFoundError(absl::StrCat("'", dir, "' is not a directory"));
  }
  auto spec = Import(fs::path(dir), out_dtype, convert_at);
  if (!spec.ok()) return Annotate(spec.status(), absl::StrCat("importing '", dir, "'"));
  return spec;
}

}  // namespace moe
