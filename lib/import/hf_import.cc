#include "lib/import/hf_import.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/half.h"
#include "lib/base/status_macros.h"
#include "lib/import/hf_config.h"
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

// One tensor the architecture needs: its checkpoint name, its canonical name, and its shape in
// both (they differ only for the shared-expert gate, a [1, n_embd] Linear stored as a vector).
struct Wanted {
  std::string hf_name;
  std::string name;
  std::vector<int64_t> hf_shape;
  std::vector<int64_t> shape;
  int layer = -1;
  int expert = -1;
  bool router = false;
};

std::vector<Wanted> WantedTensors(const HfConfig& c) {
  const HParams& h = c.hp;
  const int64_t d = h.n_embd, q_dim = h.n_head * h.head_dim, kv_dim = h.n_head_kv * h.head_dim;
  std::vector<Wanted> w;
  auto add = [&](std::string hf, std::string name, std::vector<int64_t> shape, int layer = -1,
                 int expert = -1) {
    w.push_back({std::move(hf), std::move(name), shape, shape, layer, expert});
  };
  add("model.embed_tokens.weight", "token_embd.weight", {h.n_vocab, d});
  add("model.norm.weight", "output_norm.weight", {d});
  if (!h.tied_output) add("lm_head.weight", "output.weight", {h.n_vocab, d});
  const bool mixtral = c.arch == Arch::kLlama;
  for (int l = 0; l < h.n_layer; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    auto name = [&](const char* base) { return LayerTensorName(l, base); };
    add(p + "input_layernorm.weight", name("attn_norm"), {d}, l);
    add(p + "self_attn.q_proj.weight", name("attn_q"), {q_dim, d}, l);
    add(p + "self_attn.k_proj.weight", name("attn_k"), {kv_dim, d}, l);
    add(p + "self_attn.v_proj.weight", name("attn_v"), {kv_dim, d}, l);
    add(p + "self_attn.o_proj.weight", name("attn_output"), {d, q_dim}, l);
    if (h.has_qkv_bias) {
      add(p + "self_attn.q_proj.bias", absl::StrCat("blk.", l, ".attn_q.bias"), {q_dim}, l);
      add(p + "self_attn.k_proj.bias", absl::StrCat("blk.", l, ".attn_k.bias"), {kv_dim}, l);
      add(p + "self_attn.v_proj.bias", absl::StrCat("blk.", l, ".attn_v.bias"), {kv_dim}, l);
    }
    if (h.qk_norm != QkNorm::kNone) {
      const bool full = h.qk_norm == QkNorm::kFull;  // OLMoE: whole projection; Qwen3: per head
      add(p + "self_attn.q_norm.weight", name("attn_q_norm"), {full ? q_dim : h.head_dim}, l);
      add(p + "self_attn.k_norm.weight", name("attn_k_norm"), {full ? kv_dim : h.head_dim}, l);
    }
    add(p + "post_attention_layernorm.weight", name("ffn_norm"), {d}, l);
    const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
    add(moe + "gate.weight", name("ffn_gate_inp"), {h.n_expert, d}, l);
    w.back().router = true;
    for (int e = 0; e < h.n_expert; ++e) {
      const std::string x = absl::StrCat(moe, "experts.", e, ".");
      // Mixtral's MixtralBlockSparseTop2MLP: w1 = gate, w3 = up, w2 = down.
      add(x + (mixtral ? "w1.weight" : "gate_proj.weight"), ExpertTensorName(l, e, "ffn_gate"),
          {h.n_ff_expert, d}, l, e);
      add(x + (mixtral ? "w3.weight" : "up_proj.weight"), ExpertTensorName(l, e, "ffn_up"),
          {h.n_ff_expert, d}, l, e);
      add(x + (mixtral ? "w2.weight" : "down_proj.weight"), ExpertTensorName(l, e, "ffn_down"),
          {d, h.n_ff_expert}, l, e);
    }
    if (h.n_ff_shared > 0) {
      add(moe + "shared_expert.gate_proj.weight", name("ffn_gate_shexp"), {h.n_ff_shared, d}, l);
      add(moe + "shared_expert.up_proj.weight", name("ffn_up_shexp"), {h.n_ff_shared, d}, l);
      add(moe + "shared_expert.down_proj.weight", name("ffn_down_shexp"), {d, h.n_ff_shared}, l);
      if (h.shared_expert_gate) {
        add(moe + "shared_expert_gate.weight", name("ffn_gate_inp_shexp"), {d}, l);
        w.back().hf_shape = {1, d};
      }
    }
  }
  return w;
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

void RowToFloat(DType t, const uint8_t* src, float* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, src + 2 * i, 2);
        dst[i] = t == DType::kF16 ? HalfToFloat(v) : Bf16ToFloat(v);
      }
      return;
    default:
      return;  // safetensors tensors are only ever F32/F16/BF16 here
  }
}

// The type a tensor is stored as, given the requested one (see ImportHfCheckpoint).
DType TargetType(const Wanted& w, DType source, std::optional<DType> out) {
  if (!out) return source;
  if (w.shape.size() == 1) return DType::kF32;
  const bool quantized = GetDTypeInfo(*out).block_elems > 1;
  if (w.router && quantized) return DType::kF32;
  return *out;
}

absl::StatusOr<TensorSpec> Carry(const Wanted& w, const SafetensorsTensor& src,
                                 std::optional<DType> out, ModelSpec* spec) {
  if (!src.dtype) {
    return absl::UnimplementedError(absl::StrCat("tensor '", w.hf_name, "' has dtype ",
                                                 src.dtype_name,
                                                 ", which is not supported (supported: F32, "
                                                 "F16, BF16)"));
  }
  if (src.shape != w.hf_shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", w.hf_name, "' has shape ",
                                                   ShapeString(src.shape),
                                                   " but config.json "
                                                   "implies ",
                                                   ShapeString(w.hf_shape)));
  }
  TensorSpec t;
  t.name = w.name;
  t.shape = w.shape;
  t.layer = w.layer;
  t.expert = w.expert;
  t.dtype = TargetType(w, *src.dtype, out);
  const int64_t cols = t.shape.back();
  if (!RowSizeValid(t.dtype, cols)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", w.hf_name, "' rows of ", cols, " elements do not fit ", DTypeName(t.dtype),
        " blocks of ", GetDTypeInfo(t.dtype).block_elems, "; choose a float type"));
  }
  const size_t elem = RowBytes(*src.dtype, 1);
  if (t.dtype == *src.dtype && reinterpret_cast<uintptr_t>(src.data.data()) % elem == 0) {
    t.data = src.data;  // zero copy: the mapped file stays alive in spec->owners
    return t;
  }
  auto buf = std::make_shared<std::vector<uint8_t>>(t.byte_size());
  const int64_t rows = t.num_elements() / std::max<int64_t>(1, cols);
  const size_t src_row = RowBytes(*src.dtype, cols), dst_row = RowBytes(t.dtype, cols);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    RowToFloat(*src.dtype, src.data.data() + r * src_row, row.data(), cols);
    MOE_RETURN_IF_ERROR(QuantizeRow(t.dtype, row.data(), buf->data() + r * dst_row, cols));
  }
  t.data = absl::MakeConstSpan(*buf);
  spec->owners.push_back(std::move(buf));
  return t;
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
  for (auto& f : index.files) spec.owners.push_back(f);
  for (const Wanted& w : WantedTensors(config)) {
    auto it = index.by_name.find(w.hf_name);
    if (it == index.by_name.end()) {
      return absl::NotFoundError(absl::StrCat("checkpoint is missing tensor '", w.hf_name, "' (",
                                              config.hf_architecture, " needs it)"));
    }
    MOE_ASSIGN_OR_RETURN(TensorSpec t, Carry(w, *it->second, out_dtype, &spec));
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
