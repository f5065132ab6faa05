#include "lib/format/moe_reader.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/mapped_file.h"
#include "lib/base/status_macros.h"
#include "lib/format/moe_format_generated.h"
#include "lib/format/moe_writer.h"

namespace moe {
namespace {

absl::Status Corrupt(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("corrupt .moe file: ", what));
}

std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

std::vector<std::string> Strings(
    const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v) {
    out.reserve(v->size());
    for (const auto* s : *v) out.push_back(s->str());
  }
  return out;
}

TokenizerData ReadTokenizer(const fb::Tokenizer* t) {
  TokenizerData d;
  if (t == nullptr) return d;
  d.model = Str(t->model());
  d.pre = Str(t->pre());
  d.pre_regexes = Strings(t->pre_regexes());
  d.tokens = Strings(t->tokens());
  if (t->scores()) d.scores.assign(t->scores()->begin(), t->scores()->end());
  if (t->token_types()) d.token_types.assign(t->token_types()->begin(), t->token_types()->end());
  d.merges = Strings(t->merges());
  d.bos_id = t->bos_id();
  d.eos_id = t->eos_id();
  d.eot_id = t->eot_id();
  d.unk_id = t->unk_id();
  d.pad_id = t->pad_id();
  d.add_bos = t->add_bos();
  d.add_eos = t->add_eos();
  d.add_space_prefix = t->add_space_prefix();
  d.ignore_merges = t->ignore_merges();
  d.normalizer = Str(t->normalizer());
  d.chat_template = Str(t->chat_template());
  if (t->eog_ids()) d.eog_ids.assign(t->eog_ids()->begin(), t->eog_ids()->end());
  return d;
}

absl::StatusOr<HParams> ReadHParams(const fb::HParams* p) {
  HParams h;
  h.n_vocab = p->n_vocab();
  h.n_embd = p->n_embd();
  h.n_layer = p->n_layer();
  h.n_head = p->n_head();
  h.n_head_kv = p->n_head_kv();
  h.head_dim = p->head_dim();
  h.n_ctx_train = p->n_ctx_train();
  h.n_expert = p->n_expert();
  h.n_expert_used = p->n_expert_used();
  h.n_ff_expert = p->n_ff_expert();
  h.n_ff_shared = p->n_ff_shared();
  h.rms_eps = p->rms_eps();
  h.rope_freq_base = p->rope_freq_base();
  h.rope_dim = p->rope_dim();
  if (p->rope_style() > fb::RopeStyle::MAX || p->qk_norm() > fb::QkNorm::MAX) {
    return Corrupt("unknown RoPE style or QK-norm kind");
  }
  h.rope_style = static_cast<RopeStyle>(p->rope_style());
  h.qk_norm = static_cast<QkNorm>(p->qk_norm());
  h.norm_topk_prob = p->norm_topk_prob();
  h.has_qkv_bias = p->has_qkv_bias();
  h.shared_expert_gate = p->shared_expert_gate();
  h.tied_output = p->tied_output();
  if (p->gating() > fb::Gating::MAX) return Corrupt("unknown expert gating function");
  h.n_layer_dense = p->n_layer_dense();
  h.n_ff_dense = p->n_ff_dense();
  h.moe_layer_step = p->moe_layer_step();
  h.embedding_scale = p->embedding_scale();
  h.residual_scale = p->residual_scale();
  h.logit_scale = p->logit_scale();
  h.gating = static_cast<Gating>(p->gating());
  h.has_selection_bias = p->has_selection_bias();
  h.routed_scale = p->routed_scale();
  h.n_expert_groups = p->n_expert_groups();
  h.n_group_used = p->n_group_used();
  h.n_nextn_layer = p->n_nextn_layer();
  h.yarn_factor = p->yarn_factor();
  h.yarn_orig_ctx = p->yarn_orig_ctx();
  h.yarn_beta_fast = p->yarn_beta_fast();
  h.yarn_beta_slow = p->yarn_beta_slow();
  h.yarn_log_mul = p->yarn_log_mul();
  h.rope_attn_factor = p->rope_attn_factor();
  h.kq_scale = p->kq_scale();
  h.value_dim = p->value_dim();
  h.q_lora_rank = p->q_lora_rank();
  h.kv_lora_rank = p->kv_lora_rank();
  h.qk_nope_dim = p->qk_nope_dim();
  h.v_head_dim = p->v_head_dim();
  h.has_attn_out_bias = p->has_attn_out_bias();
  h.has_attn_sinks = p->has_attn_sinks();
  h.sliding_window = p->sliding_window();
  h.swa_period = p->swa_period();
  h.has_router_bias = p->has_router_bias();
  h.has_expert_bias = p->has_expert_bias();
  h.swiglu_clamped = p->swiglu_clamped();
  h.window_chunked = p->window_chunked();
  h.nope_period = p->nope_period();
  h.attn_temp_scale = p->attn_temp_scale();
  h.attn_temp_floor = p->attn_temp_floor();
  h.attn_temp_offset = p->attn_temp_offset();
  h.expert_input_weighted = p->expert_input_weighted();
  if (const auto* sections = p->rope_sections()) {
    if (sections->size() != h.rope_sections.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope_sections has ", sections->size(), " values, not 4"));
    }
    for (size_t i = 0; i < h.rope_sections.size(); ++i) h.rope_sections[i] = sections->Get(i);
  }
  h.short_conv_kernel = p->short_conv_kernel();
  if (const auto* conv = p->short_conv_layers()) {
    h.short_conv_layers.assign(conv->begin(), conv->end());
  }
  h.ssm_conv_kernel = p->ssm_conv_kernel();
  h.ssm_inner = p->ssm_inner();
  h.ssm_state = p->ssm_state();
  h.ssm_heads = p->ssm_heads();
  h.ssm_groups = p->ssm_groups();
  if (const auto* ssm = p->ssm_layers()) h.ssm_layers.assign(ssm->begin(), ssm->end());
  if (const auto* m = p->mixer_only_layers()) h.mixer_only_layers.assign(m->begin(), m->end());
  if (const auto* f = p->ffn_only_layers()) h.ffn_only_layers.assign(f->begin(), f->end());
  h.relu_squared_ffn = p->relu_squared_ffn();
  h.moe_latent_dim = p->moe_latent_dim();
  h.attention_output_gate = p->attention_output_gate();
  h.ssm_grouped_heads = p->ssm_grouped_heads();
  return h;
}

}  // namespace

bool LooksLikeMoeFile(absl::Span<const uint8_t> head) {
  return head.size() >= 12 && std::memcmp(head.data() + 8, fb::ModelIdentifier(), 4) == 0;
}

bool MayBeCutMoeFile(absl::Span<const uint8_t> head) {
  if (head.size() >= 12) return false;
  if (head.size() <= 8) return true;  // the first 8 bytes are sizes and offsets: anything goes
  return std::memcmp(head.data() + 8, fb::ModelIdentifier(), head.size() - 8) == 0;
}

absl::StatusOr<ModelSpec> ReadMoeFile(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  absl::Span<const uint8_t> bytes = file->bytes();
  auto fail = [&](absl::Status s) { return Annotate(s, absl::StrCat("reading '", path, "'")); };
  if (bytes.size() < 12) return fail(Corrupt("file too short for a header"));
  if (std::memcmp(bytes.data() + 8, fb::ModelIdentifier(), 4) != 0) {
    return fail(absl::InvalidArgumentError("not a .moe file (identifier 'MOE1' missing)"));
  }
  uint32_t header_size;
  std::memcpy(&header_size, bytes.data(), 4);
  if (header_size > bytes.size() - 4) return fail(Corrupt("header runs past the end of the file"));
  flatbuffers::Verifier::Options opts;
  opts.max_tables = 100'000'000;
  opts.max_depth = 64;
  flatbuffers::Verifier verifier(bytes.data(), header_size + 4, opts);
  if (!fb::VerifySizePrefixedModelBuffer(verifier)) {
    return fail(Corrupt("header failed FlatBuffers verification"));
  }
  const fb::Model* m = fb::GetSizePrefixedModel(bytes.data());
  if (m->format_version() == 0 || m->format_version() > kMoeFormatVersion) {
    return fail(absl::UnimplementedError(absl::StrCat(
        "format version ", m->format_version(), " is not supported (this build reads up to ",
        kMoeFormatVersion, "); a newer libmoe wrote it")));
  }
  ModelSpec spec;
  spec.owners.push_back(file);
  spec.source_files.push_back({path, bytes.data(), bytes.size()});
  auto arch = ArchFromName(m->arch()->str());
  if (!arch.ok()) return fail(arch.status());
  spec.arch = *arch;
  spec.name = Str(m->name());
  auto hp = ReadHParams(m->hparams());
  if (!hp.ok()) return fail(hp.status());
  spec.hp = *hp;
  spec.tokenizer = ReadTokenizer(m->tokenizer());
  if (m->pruned_experts() != nullptr) {
    for (const fb::ExpertId* id : *m->pruned_experts()) {
      spec.pruned_experts.push_back({id->layer(), id->expert()});
    }
  }

  const uint64_t header_end = static_cast<uint64_t>(header_size) + 4;
  std::vector<std::pair<uint64_t, uint64_t>> extents;
  for (const fb::Tensor* t : *m->tensors()) {
    TensorSpec ts;
    ts.name = t->name()->str();
    if (t->dtype() > fb::DType::MAX || !IsStorableDType(static_cast<DType>(t->dtype())))
      return fail(Corrupt(absl::StrCat("tensor '", ts.name, "' has an unknown dtype")));
    ts.dtype = static_cast<DType>(t->dtype());
    // Copied byte-wise: the verifier does not check that the int64 elements are aligned.
    ts.shape.resize(t->shape()->size());
    if (!ts.shape.empty()) {
      std::memcpy(ts.shape.data(), t->shape()->Data(), ts.shape.size() * sizeof(int64_t));
    }
    ts.layer = t->layer();
    ts.expert = t->expert();
    if (ts.shape.empty() || ts.shape.size() > 4) {
      return fail(
          Corrupt(absl::StrCat("tensor '", ts.name, "' has ", ts.shape.size(), " dimensions")));
    }
    for (int64_t d : ts.shape) {
      if (d <= 0 || d > (int64_t{1} << 40)) {
        return fail(Corrupt(absl::StrCat("tensor '", ts.name, "' has dimension ", d)));
      }
    }
    if (!ElementCountFits(ts.shape)) {  // before byte_size() multiplies them out
      return fail(Corrupt(absl::StrCat("tensor '", ts.name, "' has more than 2^50 elements")));
    }
    if (!RowSizeValid(ts.dtype, ts.shape.back())) {
      return fail(Corrupt(
          absl::StrCat("tensor '", ts.name, "' rows do not fit ", DTypeName(ts.dtype), " blocks")));
    }
    if (ts.byte_size() != t->size()) {
      return fail(
          Corrupt(absl::StrCat("tensor '", ts.name, "' size ", t->size(),
                               " does not match its shape and dtype (", ts.byte_size(), ")")));
    }
    if (t->offset() % kTensorAlignment != 0 || t->offset() < header_end ||
        t->offset() > bytes.size() || t->size() > bytes.size() - t->offset()) {
      return fail(Corrupt(absl::StrCat("tensor '", ts.name, "' data [", t->offset(), ", +",
                                       t->size(), ") lies outside the file of ", bytes.size(),
                                       " bytes (truncated?)")));
    }
    ts.data = bytes.subspan(t->offset(), t->size());
    extents.push_back({t->offset(), t->offset() + t->size()});
    spec.tensors.push_back(std::move(ts));
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].first < extents[i - 1].second) return fail(Corrupt("tensor data overlaps"));
  }
  absl::Status valid = ValidateModelSpec(spec);
  if (!valid.ok()) return fail(valid);
  return spec;
}

}  // namespace moe
