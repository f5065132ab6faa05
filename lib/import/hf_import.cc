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
    Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
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
bool Rearranged(const WantedTensor& w) { return w.gather || w.col_stride > 0; }

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

// `values` (row-major over t's shape) stored as t.dtype into a buffer `spec` keeps alive.
absl::Status Store(const std::vector<float>& values, TensorSpec* t, ModelSpec* spec) {
  auto buf = std::make_shared<std::vector<uint8_t>>(t->byte_size());
  const int64_t cols = t->shape.back(), rows = t->num_elements() / std::max<int64_t>(1, cols);
  const size_t dst_row = RowBytes(t->dtype, cols);
  for (int64_t r = 0; r < rows; ++r) {
    MOE_RETURN_IF_ERROR(
        QuantizeRow(t->dtype, values.data() + r * cols, buf->data() + r * dst_row, cols));
  }
  t->data = absl::MakeConstSpan(*buf);
  spec->owners.push_back(std::move(buf));
  return absl::OkStatus();
}

// A checkpoint tensor in the canonical layout: carried over (zero copy when the type stays), or
// converted row by row.
absl::StatusOr<TensorSpec> CarryPlain(const WantedTensor& w, const SafetensorsTensor& src,
                                      std::optional<DType> out, ModelSpec* spec) {
  TensorSpec t = Describe(w, TargetType(w, *src.dtype, out));
  MOE_RETURN_IF_ERROR(CheckRows(w, t));
  const size_t elem = RowBytes(*src.dtype, 1);
  // The slice the tensor is (all of it but where first_element cuts it from a stack).
  const size_t count = static_cast<size_t>(t.num_elements());
  if ((static_cast<size_t>(w.first_element) + count) * elem > src.data.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", w.hf_name, "' holds no '", w.name,
                                                   "' at element ", w.first_element));
  }
  const absl::Span<const uint8_t> data = src.data.subspan(w.first_element * elem, count * elem);
  if (t.dtype == *src.dtype && reinterpret_cast<uintptr_t>(data.data()) % elem == 0) {
    t.data = data;  // zero copy: the mapped file stays alive in spec->owners
    return t;
  }
  // Row by row: a converted copy, never a float copy of the whole tensor as well.
  auto buf = std::make_shared<std::vector<uint8_t>>(t.byte_size());
  const int64_t cols = t.shape.back(), rows = t.num_elements() / std::max<int64_t>(1, cols);
  const size_t src_row = RowBytes(*src.dtype, cols), dst_row = RowBytes(t.dtype, cols);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(*src.dtype, data.data() + r * src_row, row.data(), cols);
    MOE_RETURN_IF_ERROR(QuantizeRow(t.dtype, row.data(), buf->data() + r * dst_row, cols));
  }
  t.data = absl::MakeConstSpan(*buf);
  spec->owners.push_back(std::move(buf));
  return t;
}

// A canonical tensor gathered element by element from a checkpoint tensor of another layout, or
// whose values are the checkpoint's through a function (WantedTensor::value).
absl::StatusOr<TensorSpec> CarryGathered(const WantedTensor& w, const SafetensorsTensor& src,
                                         std::optional<DType> out, ModelSpec* spec) {
  TensorSpec t = Describe(w, TargetType(w, *src.dtype, out));
  MOE_RETURN_IF_ERROR(CheckRows(w, t));
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
    const int64_t last = w.first_element + (cols - 1) * w.col_stride + run;
    if (w.first_element < 0 || static_cast<size_t>(last) * elem > src.data.size()) {
      return absl::InternalError(
          absl::StrCat("tensor '", w.name, "' reads past checkpoint tensor '", w.hf_name, "'"));
    }
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
        float* out = values.data() + r * cols + c0;
        for (int64_t k = 0; k < n; ++k) out[k] = in[k * pitch];
      }
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
  MOE_RETURN_IF_ERROR(Store(values, &t, spec));
  return t;
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
                                      const SafetensorsTensor& scales, std::optional<DType> out,
                                      ModelSpec* spec) {
  for (const SafetensorsTensor* s : {&blocks, &scales}) {
    if (s->dtype_name != "U8") {
      return absl::InvalidArgumentError(
          absl::StrCat("MXFP4 tensor '", s->name, "' has dtype ", s->dtype_name, ", not U8"));
    }
  }
  MOE_RETURN_IF_ERROR(CheckShape(w.mx_scales, scales.shape, w.mx_scales_shape));
  const bool to_float = out && GetDTypeInfo(*out).block_elems == 1;
  TensorSpec t = Describe(w, DType::kMXFP4);
  MOE_RETURN_IF_ERROR(CheckRows(w, t));
  const int64_t cols = t.shape.back(), rows = t.shape[0], groups = cols / 32;
  auto buf = std::make_shared<std::vector<uint8_t>>(t.byte_size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = w.mx_row(r);
    for (int64_t g = 0; g < groups; ++g) {
      RepackMxfp4Block(blocks.data.data() + (src * groups + g) * 16, scales.data[src * groups + g],
                       buf->data() + (r * groups + g) * 17);
    }
  }
  if (!to_float) {
    t.data = absl::MakeConstSpan(*buf);
    spec->owners.push_back(std::move(buf));
    return t;
  }
  std::vector<float> values(t.num_elements());
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(DType::kMXFP4, buf->data() + r * groups * 17, values.data() + r * cols, cols);
  }
  t.dtype = *out;
  MOE_RETURN_IF_ERROR(Store(values, &t, spec));
  return t;
}

// FP8 checkpoint tensors dequantized to floats, each once, and freed after the last wanted tensor
// that reads it: a stack of experts is read once for each expert's gate, up or down, and a
// model's floats all at once would take twice its BF16 size besides.
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

absl::StatusOr<TensorSpec> Carry(const WantedTensor& w, const TensorIndex& index,
                                 std::optional<DType> out, ModelSpec* spec,
                                 const std::string& hf_architecture, Fp8Floats& fp8) {
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
    return CarryMxfp4(w, *src, *scales, out, spec);
  }
  if (src->dtype_name == "F8_E4M3" && fp8.blocks()) {
    // Dequantized into floats (the layouts below read them as F32), stored as BF16 unless another
    // type is asked for: FP8 values times their blocks' factors. The spec keeps the floats only
    // where the tensor is them (F32 asked for, carried as it is).
    MOE_RETURN_IF_ERROR(CheckShape(w.hf_name, src->shape, w.hf_shape));
    MOE_ASSIGN_OR_RETURN(const SafetensorsTensor* scale_inv, find(w.hf_name + "_scale_inv"));
    MOE_ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<float>> floats,
                         fp8.Get(*src, *scale_inv));
    const absl::Span<const uint8_t> bytes = absl::MakeConstSpan(
        reinterpret_cast<const uint8_t*>(floats->data()), floats->size() * sizeof(float));
    SafetensorsTensor dequantized{src->name, "F32", DType::kF32, src->shape, bytes};
    const std::optional<DType> target = out ? out : std::optional<DType>(DType::kBF16);
    MOE_ASSIGN_OR_RETURN(TensorSpec t, Rearranged(w) || w.value
                                           ? CarryGathered(w, dequantized, target, spec)
                                           : CarryPlain(w, dequantized, target, spec));
    if (t.data.data() >= bytes.data() && t.data.data() < bytes.data() + bytes.size()) {
      spec->owners.push_back(floats);  // the tensor is a span of them
    }
    return t;
  }
  if (!src->dtype) {
    return absl::UnimplementedError(absl::StrCat("tensor '", w.hf_name, "' has dtype ",
                                                 src->dtype_name,
                                                 ", which is not supported (supported: F32, "
                                                 "F16, BF16, and F8_E4M3 with block scales)"));
  }
  MOE_RETURN_IF_ERROR(CheckShape(w.hf_name, src->shape, w.hf_shape));
  if (Rearranged(w) || w.value) return CarryGathered(w, *src, out, spec);
  return CarryPlain(w, *src, out, spec);
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
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto it = j.is_object() ? j.find("chat_template") : j.end();
  if (j.is_discarded() || !j.is_object() || it == j.end() || !it->is_string()) {
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

absl::StatusOr<ModelSpec> Import(const fs::path& dir, std::optional<DType> out_dtype) {
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
  Fp8Floats fp8(wanted, fp8_blocks);
  for (const WantedTensor& w : wanted) {
    MOE_ASSIGN_OR_RETURN(TensorSpec t,
                         Carry(w, index, out_dtype, &spec, config.hf_architecture, fp8));
    spec.tensors.push_back(std::move(t));
  }
  if (!config.rope_freq_factors.empty()) {
    TensorSpec t;
    t.name = std::string(kRopeFreqsTensor);
    t.dtype = DType::kF32;
    t.shape = {static_cast<int64_t>(config.rope_freq_factors.size())};
    MOE_RETURN_IF_ERROR(Store(config.rope_freq_factors, &t, &spec));
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

absl::StatusOr<ModelSpec> ImportHfCheckpoint(const std::string& dir,
                                             std::optional<DType> out_dtype) {
  if (!fs::is_directory(dir)) {
    return absl::NotFoundError(absl::StrCat("'", dir, "' is not a directory"));
  }
  auto spec = Import(fs::path(dir), out_dtype);
  if (!spec.ok()) return Annotate(spec.status(), absl::StrCat("importing '", dir, "'"));
  return spec;
}

}  // namespace moe
