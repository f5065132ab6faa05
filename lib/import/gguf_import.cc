#include "lib/import/gguf_import.h"

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "lib/base/status_macros.h"
#include "lib/import/gguf_split.h"
#include "lib/import/gguf_tokenizer.h"
#include "lib/import/hparams_from_keys.h"
#include "lib/import/legacy_latent_kv.h"
#include "lib/model/arch/architecture.h"

namespace moe {
namespace {

// A family's GGUF keys: `arch.key`.
class HParamReader final : public MetadataKeys {
 public:
  HParamReader(const GgufFile& g, std::string arch) : g_(g), arch_(std::move(arch)) {}
  absl::StatusOr<int64_t> Int(absl::string_view key,
                              std::optional<int64_t> def = {}) const override {
    std::string full = absl::StrCat(arch_, ".", key);
    if (g_.Find(full) == nullptr) {
      if (def) return *def;
      return absl::NotFoundError(absl::StrCat("GGUF is missing required key '", full, "'"));
    }
    MOE_ASSIGN_OR_RETURN(uint64_t v, g_.GetUint(full));
    if (v > (1ull << 40)) return absl::InvalidArgumentError(absl::StrCat("'", full, "' too large"));
    return static_cast<int64_t>(v);
  }
  absl::StatusOr<float> Float(absl::string_view key, float def) const override {
    std::string full = absl::StrCat(arch_, ".", key);
    if (g_.Find(full) == nullptr) return def;
    MOE_ASSIGN_OR_RETURN(double v, g_.GetFloat(full));
    return static_cast<float>(v);
  }
  absl::StatusOr<bool> Bool(absl::string_view key, bool def) const override {
    std::string full = absl::StrCat(arch_, ".", key);
    if (g_.Find(full) == nullptr) return def;
    return g_.GetBool(full);
  }
  bool Has(absl::string_view key) const override {
    return g_.Find(absl::StrCat(arch_, ".", key)) != nullptr;
  }
  absl::StatusOr<std::vector<int64_t>> IntArray(absl::string_view key) const override {
    return g_.GetIntArray(absl::StrCat(arch_, ".", key));
  }
  absl::StatusOr<std::string> String(absl::string_view key) const {
    return g_.GetString(absl::StrCat(arch_, ".", key));
  }

 private:
  const GgufFile& g_;
  std::string arch_;
};

// The keys every family shares and the family's own (lib/model/arch/), read from `arch.key`.
absl::StatusOr<HParams> ReadHParams(const GgufFile& g, const Architecture& arch) {
  HParamReader r(g, std::string(arch.name()));
  std::string rope_scaling;  // none stated: llama.cpp's linear (HParamsFromKeys)
  if (r.Has("rope.scaling.type")) {
    MOE_ASSIGN_OR_RETURN(rope_scaling, r.String("rope.scaling.type"));
  }
  return HParamsFromKeys(r, rope_scaling, arch);
}

// Carries one GGUF tensor over (shape reversed to outermost-first), checking its byte size.
absl::StatusOr<TensorSpec> CarryTensor(const GgufTensorInfo& info) {
  TensorSpec t;
  t.name = info.name;
  MOE_ASSIGN_OR_RETURN(t.dtype, DTypeFromGgml(info.ggml_type, info.name));
  t.shape.assign(info.ne.rbegin(), info.ne.rend());
  if (!RowSizeValid(t.dtype, t.shape.back())) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' row length ",
                                                   t.shape.back(), " is not a multiple of the ",
                                                   DTypeName(t.dtype), " block size"));
  }
  size_t size = t.byte_size();
  if (info.data.size() < size) {
    return absl::DataLossError(absl::StrCat("tensor '", t.name, "' needs ", size,
                                            " bytes but only ", info.data.size(),
                                            " remain in the file (truncated?)"));
  }
  t.data = info.data.subspan(0, size);
  return t;
}

// Parses "blk.L.rest" into L and rest.
bool SplitLayer(absl::string_view name, int* layer, absl::string_view* rest) {
  if (!absl::ConsumePrefix(&name, "blk.")) return false;
  size_t dot = name.find('.');
  if (dot == absl::string_view::npos || dot == 0) return false;
  int l = 0;
  for (char c : name.substr(0, dot)) {
    if (c < '0' || c > '9' || l > 100000) return false;
    l = l * 10 + (c - '0');
  }
  *layer = l;
  *rest = name.substr(dot + 1);
  return true;
}

// The model in `files` (one, or a split model's in order): metadata from the first, tensors from
// all.
absl::StatusOr<ModelSpec> ImportGgufFiles(std::vector<std::shared_ptr<const GgufFile>> files);

}  // namespace

absl::StatusOr<ModelSpec> ImportGguf(const std::string& path) {
  auto parts = OpenGgufSplits(path);
  if (!parts.ok()) return parts.status();  // names the file already
  std::vector<std::shared_ptr<const GgufFile>> files;
  for (const GgufPart& part : *parts) files.push_back(part.file);
  auto spec = ImportGgufFiles(files);
  if (!spec.ok()) return Annotate(spec.status(), absl::StrCat("importing '", path, "'"));
  for (const GgufPart& part : *parts) {
    spec->source_files.push_back({part.path, part.file->bytes().data(), part.file->bytes().size()});
  }
  return spec;
}

absl::StatusOr<ModelSpec> ImportGguf(std::shared_ptr<const GgufFile> gguf) {
  MOE_ASSIGN_OR_RETURN(const int splits, GgufSplitCount(*gguf));
  if (splits > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("this GGUF is one of ", splits,
                     " splits of a model: import the model by the first's path"));
  }
  return ImportGgufFiles({std::move(gguf)});
}

namespace {

absl::Status SplitFusedQkv(const TensorSpec& t, const HParams& h, bool bias, ModelSpec* spec) {
  const int64_t q = h.n_head * h.head_dim, k = h.n_head_kv * h.head_dim,
                v = h.n_head_kv * h.value_dim;
  if (t.shape.size() != (bias ? 1u : 2u) || t.shape[0] != q + k + v) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' should hold ", q, " + ", k, " + ", v, " q/k/v rows"));
  }
  const size_t row = t.byte_size() / t.shape[0];
  int64_t first = 0;
  for (const auto& [part, rows] : {std::pair{"attn_q", q}, {"attn_k", k}, {"attn_v", v}}) {
    TensorSpec x = t;
    x.name = bias ? LayerBiasName(t.layer, part) : LayerTensorName(t.layer, part);
    x.shape[0] = rows;
    x.data = t.data.subspan(first * row, rows * row);
    first += rows;
    spec->tensors.push_back(std::move(x));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelSpec> ImportGgufFiles(std::vector<std::shared_ptr<const GgufFile>> files) {
  const GgufFile& g = *files.front();  // the metadata's
  ModelSpec spec;
  spec.owners.assign(files.begin(), files.end());
  MOE_ASSIGN_OR_RETURN(std::string arch_name, g.GetString("general.architecture"));
  MOE_ASSIGN_OR_RETURN(const Architecture* arch, FindArchitecture(arch_name));
  spec.arch = arch->id();
  if (g.Find("general.name")) spec.name = g.GetString("general.name").value_or("");
  MOE_ASSIGN_OR_RETURN(spec.hp, ReadHParams(g, *arch));
  if (g.Find("tokenizer.ggml.model") != nullptr) {
    auto tok = TokenizerDataFromGguf(g);
    if (!tok.ok()) return Annotate(tok.status(), "reading the tokenizer");
    spec.tokenizer = *std::move(tok);
  }
  HParams& h = spec.hp;

  // Across split files a name must not repeat (within one, the reader checks).
  absl::flat_hash_set<absl::string_view> names;
  std::vector<const GgufTensorInfo*> infos;
  for (const auto& file : files) {
    for (const GgufTensorInfo& info : file->tensors()) {
      if (files.size() > 1 && !names.insert(info.name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", info.name, "' is in more than one split"));
      }
      infos.push_back(&info);
    }
  }
  for (const GgufTensorInfo* info_ptr : infos) {
    const GgufTensorInfo& info = *info_ptr;
    MOE_ASSIGN_OR_RETURN(TensorSpec t, CarryTensor(info));
    int layer = -1;
    absl::string_view rest;
    if (SplitLayer(t.name, &layer, &rest)) {
      // Multi-token-prediction blocks follow the layers that run; nothing reads them.
      if (h.n_nextn_layer > 0 && layer >= h.n_layer) continue;
      t.layer = layer;
      // A fused attention input projection (attn_qkv, as llama.cpp's build_qkv reads it: the q
      // rows, then k's, then v's) -> three tensors over its rows, zero copy. (A gated delta net's
      // attn_qkv is one matrix: its q, k and v are convolved together.)
      if ((rest == "attn_qkv.weight" || rest == "attn_qkv.bias") &&
          ArchitectureOf(spec.arch).Layer(h, layer).attention != AttentionPart::kGatedDeltaNet) {
        MOE_RETURN_IF_ERROR(SplitFusedQkv(t, h, absl::EndsWith(rest, ".bias"), &spec));
        continue;
      }
      // Stacked experts [n_expert, rows, cols] -> one tensor per expert.
      if (absl::ConsumeSuffix(&rest, "_exps.weight")) {
        if (t.shape.size() != 3 || t.shape[0] != h.n_expert) {
          return absl::InvalidArgumentError(
              absl::StrCat("tensor '", t.name, "' should stack ", h.n_expert, " experts as 3-D"));
        }
        // Newer converters may store each expert's gate and up rows as one matrix, gate first
        // (ffn_gate_up_exps, as llama.cpp reads it): two tensors of half the rows each.
        const bool fused = rest == "ffn_gate_up";
        if (fused && t.shape[1] % 2 != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "tensor '", t.name, "' should hold gate and up rows alike, has ", t.shape[1]));
        }
        const int parts = fused ? 2 : 1;
        const size_t slab = t.byte_size() / h.n_expert, part = slab / parts;
        for (int e = 0; e < h.n_expert; ++e) {
          for (int i = 0; i < parts; ++i) {
            TensorSpec x;
            x.name = ExpertTensorName(layer, e, fused ? (i == 0 ? "ffn_gate" : "ffn_up") : rest);
            x.dtype = t.dtype;
            x.shape = {t.shape[1] / parts, t.shape[2]};
            x.layer = layer;
            x.expert = e;
            x.data = t.data.subspan(e * slab + i * part, part);
            spec.tensors.push_back(std::move(x));
          }
        }
        continue;
      }
      // Older Mixtral files store experts separately: blk.L.ffn_gate.E.weight.
      for (absl::string_view base : {"ffn_gate.", "ffn_up.", "ffn_down."}) {
        absl::string_view r = rest;
        if (absl::ConsumePrefix(&r, base) && absl::ConsumeSuffix(&r, ".weight") && !r.empty() &&
            r.find_first_not_of("0123456789") == absl::string_view::npos) {
          t.expert = std::stoi(std::string(r));
        }
      }
    }
    spec.tensors.push_back(std::move(t));
  }
  h.n_vocab = 0;
  if (const TensorSpec* emb = spec.Find("token_embd.weight"); emb && emb->shape.size() == 2) {
    h.n_vocab = emb->shape[0];
  }
  MOE_RETURN_IF_ERROR(SplitLegacyLatentKv(&spec));
  h.tied_output = spec.Find("output.weight") == nullptr;
  // Every MoE layer has the selection bias or none does (the first one tells).
  int64_t first_mixture = h.n_layer_dense;
  while (first_mixture < h.n_layer && !h.layer_has_experts(first_mixture)) ++first_mixture;
  h.has_selection_bias =
      spec.Find(absl::StrCat("blk.", first_mixture, ".exp_probs_b.bias")) != nullptr;
  arch->FromTensors(spec, &h);
  MOE_RETURN_IF_ERROR(ValidateModelSpec(spec));
  return spec;
}

}  // namespace
}  // namespace moe
