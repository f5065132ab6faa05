#include "lib/format/moe_writer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/format/moe_format_generated.h"

namespace moe {
namespace {

size_t AlignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

struct Placement {
  const TensorSpec* tensor;
  size_t rel_offset;  // from the start of the data section
};

// Dense tensors first, then the routed experts grouped by (layer, expert), each group starting
// on a page; pruned experts are left out.
std::vector<Placement> PlaceTensors(const ModelSpec& spec, size_t* data_size) {
  std::vector<Placement> out;
  size_t pos = 0;
  std::map<std::pair<int, int>, std::vector<const TensorSpec*>> experts;
  const auto pruned = spec.PrunedMask();
  for (const auto& t : spec.tensors) {
    if (t.expert >= 0) {
      const bool gone = t.layer >= 0 && t.layer < static_cast<int>(pruned.size()) &&
                        t.expert < static_cast<int>(pruned[t.layer].size()) &&
                        pruned[t.layer][t.expert];
      if (!gone) experts[{t.layer, t.expert}].push_back(&t);
      continue;
    }
    pos = AlignUp(pos, kTensorAlignment);
    out.push_back({&t, pos});
    pos += t.byte_size();
  }
  // Within an expert, the order a token reads them: gate, up, down.
  auto rank = [](const TensorSpec* t) {
    for (int i = 0; const char* base : {".ffn_gate.", ".ffn_up.", ".ffn_down."}) {
      if (t->name.find(base) != std::string::npos) return i;
      ++i;
    }
    return 3;
  };
  for (auto& [key, group] : experts) {
    std::stable_sort(group.begin(), group.end(),
                     [&](const TensorSpec* a, const TensorSpec* b) { return rank(a) < rank(b); });
    pos = AlignUp(pos, kExpertAlignment);
    for (const TensorSpec* t : group) {
      pos = AlignUp(pos, kTensorAlignment);
      out.push_back({t, pos});
      pos += t->byte_size();
    }
  }
  *data_size = pos;
  return out;
}

flatbuffers::Offset<fb::Tokenizer> BuildTokenizer(flatbuffers::FlatBufferBuilder& b,
                                                  const TokenizerData& t) {
  auto model = b.CreateString(t.model);
  auto pre = b.CreateString(t.pre);
  auto regexes = b.CreateVectorOfStrings(t.pre_regexes);
  auto tokens = b.CreateVectorOfStrings(t.tokens);
  auto scores = b.CreateVector(t.scores);
  auto types = b.CreateVector(t.token_types);
  auto merges = b.CreateVectorOfStrings(t.merges);
  auto normalizer = b.CreateString(t.normalizer);
  auto tmpl = b.CreateString(t.chat_template);
  // Absent when empty, so files without such tokens keep their bytes.
  auto eog = t.eog_ids.empty() ? 0 : b.CreateVector(t.eog_ids);
  fb::TokenizerBuilder tb(b);
  tb.add_model(model);
  tb.add_pre(pre);
  tb.add_pre_regexes(regexes);
  tb.add_tokens(tokens);
  tb.add_scores(scores);
  tb.add_token_types(types);
  tb.add_merges(merges);
  tb.add_bos_id(t.bos_id);
  tb.add_eos_id(t.eos_id);
  tb.add_eot_id(t.eot_id);
  tb.add_unk_id(t.unk_id);
  tb.add_pad_id(t.pad_id);
  tb.add_add_bos(t.add_bos);
  tb.add_add_eos(t.add_eos);
  tb.add_add_space_prefix(t.add_space_prefix);
  tb.add_ignore_merges(t.ignore_merges);
  tb.add_normalizer(normalizer);
  tb.add_chat_template(tmpl);
  if (!t.eog_ids.empty()) tb.add_eog_ids(eog);
  return tb.Finish();
}

flatbuffers::Offset<fb::HParams> BuildHParams(flatbuffers::FlatBufferBuilder& b, const HParams& h) {
  // Vectors are built before the table that refers to them.
  flatbuffers::Offset<flatbuffers::Vector<int64_t>> sections;
  if (h.multimodal_rope()) {
    sections = b.CreateVector(h.rope_sections.data(), h.rope_sections.size());
  }
  flatbuffers::Offset<flatbuffers::Vector<int64_t>> conv_layers;
  if (!h.short_conv_layers.empty()) conv_layers = b.CreateVector(h.short_conv_layers);
  flatbuffers::Offset<flatbuffers::Vector<int64_t>> ssm_layers;
  if (!h.ssm_layers.empty()) ssm_layers = b.CreateVector(h.ssm_layers);
  flatbuffers::Offset<flatbuffers::Vector<int64_t>> mixer_only_layers, ffn_only_layers;
  if (!h.mixer_only_layers.empty()) mixer_only_layers = b.CreateVector(h.mixer_only_layers);
  if (!h.ffn_only_layers.empty()) ffn_only_layers = b.CreateVector(h.ffn_only_layers);
  fb::HParamsBuilder hb(b);
  hb.add_n_vocab(h.n_vocab);
  hb.add_n_embd(h.n_embd);
  hb.add_n_layer(h.n_layer);
  hb.add_n_head(h.n_head);
  hb.add_n_head_kv(h.n_head_kv);
  hb.add_head_dim(h.head_dim);
  hb.add_n_ctx_train(h.n_ctx_train);
  hb.add_n_expert(h.n_expert);
  hb.add_n_expert_used(h.n_expert_used);
  hb.add_n_ff_expert(h.n_ff_expert);
  hb.add_n_ff_shared(h.n_ff_shared);
  hb.add_rms_eps(h.rms_eps);
  hb.add_rope_freq_base(h.rope_freq_base);
  hb.add_rope_dim(h.rope_dim);
  hb.add_rope_style(static_cast<fb::RopeStyle>(h.rope_style));
  hb.add_qk_norm(static_cast<fb::QkNorm>(h.qk_norm));
  hb.add_norm_topk_prob(h.norm_topk_prob);
  hb.add_has_qkv_bias(h.has_qkv_bias);
  hb.add_shared_expert_gate(h.shared_expert_gate);
  hb.add_tied_output(h.tied_output);
  hb.add_n_layer_dense(h.n_layer_dense);
  hb.add_n_ff_dense(h.n_ff_dense);
  hb.add_moe_layer_step(h.moe_layer_step);
  hb.add_embedding_scale(h.embedding_scale);
  hb.add_residual_scale(h.residual_scale);
  hb.add_logit_scale(h.logit_scale);
  hb.add_gating(static_cast<fb::Gating>(h.gating));
  hb.add_has_selection_bias(h.has_selection_bias);
  hb.add_routed_scale(h.routed_scale);
  hb.add_n_expert_groups(h.n_expert_groups);
  hb.add_n_group_used(h.n_group_used);
  hb.add_n_nextn_layer(h.n_nextn_layer);
  hb.add_yarn_factor(h.yarn_factor);
  hb.add_yarn_orig_ctx(h.yarn_orig_ctx);
  hb.add_yarn_beta_fast(h.yarn_beta_fast);
  hb.add_yarn_beta_slow(h.yarn_beta_slow);
  hb.add_yarn_log_mul(h.yarn_log_mul);
  hb.add_rope_attn_factor(h.rope_attn_factor);
  hb.add_kq_scale(h.kq_scale);
  hb.add_value_dim(h.value_dim);
  hb.add_q_lora_rank(h.q_lora_rank);
  hb.add_kv_lora_rank(h.kv_lora_rank);
  hb.add_qk_nope_dim(h.qk_nope_dim);
  hb.add_v_head_dim(h.v_head_dim);
  hb.add_has_attn_out_bias(h.has_attn_out_bias);
  hb.add_has_attn_sinks(h.has_attn_sinks);
  hb.add_sliding_window(h.sliding_window);
  hb.add_swa_period(h.swa_period);
  hb.add_has_router_bias(h.has_router_bias);
  hb.add_has_expert_bias(h.has_expert_bias);
  hb.add_swiglu_clamped(h.swiglu_clamped);
  hb.add_window_chunked(h.window_chunked);
  hb.add_nope_period(h.nope_period);
  hb.add_attn_temp_scale(h.attn_temp_scale);
  hb.add_attn_temp_floor(h.attn_temp_floor);
  hb.add_attn_temp_offset(h.attn_temp_offset);
  hb.add_expert_input_weighted(h.expert_input_weighted);
  if (!sections.IsNull()) hb.add_rope_sections(sections);
  hb.add_short_conv_kernel(h.short_conv_kernel);
  if (!conv_layers.IsNull()) hb.add_short_conv_layers(conv_layers);
  hb.add_ssm_conv_kernel(h.ssm_conv_kernel);
  hb.add_ssm_inner(h.ssm_inner);
  hb.add_ssm_state(h.ssm_state);
  hb.add_ssm_heads(h.ssm_heads);
  hb.add_ssm_groups(h.ssm_groups);
  if (!ssm_layers.IsNull()) hb.add_ssm_layers(ssm_layers);
  if (!mixer_only_layers.IsNull()) hb.add_mixer_only_layers(mixer_only_layers);
  if (!ffn_only_layers.IsNull()) hb.add_ffn_only_layers(ffn_only_layers);
  hb.add_relu_squared_ffn(h.relu_squared_ffn);
  hb.add_moe_latent_dim(h.moe_latent_dim);
  hb.add_attention_output_gate(h.attention_output_gate);
  hb.add_ssm_grouped_heads(h.ssm_grouped_heads);
  return hb.Finish();
}

void BuildHeader(flatbuffers::FlatBufferBuilder& b, const ModelSpec& spec,
                 const std::vector<Placement>& placed, size_t data_start) {
  b.Clear();
  b.ForceDefaults(true);  // the header's size must not depend on the offset values
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const auto& p : placed) {
    auto name = b.CreateString(p.tensor->name);
    auto shape = b.CreateVector(p.tensor->shape);
    fb::TensorBuilder tb(b);
    tb.add_name(name);
    tb.add_dtype(static_cast<fb::DType>(p.tensor->dtype));
    tb.add_shape(shape);
    tb.add_layer(p.tensor->layer);
    tb.add_expert(p.tensor->expert);
    tb.add_offset(data_start + p.rel_offset);
    tb.add_size(p.tensor->byte_size());
    tensors.push_back(tb.Finish());
  }
  auto tensors_vec = b.CreateVector(tensors);
  auto arch = b.CreateString(ArchName(spec.arch).data(), ArchName(spec.arch).size());
  auto name = b.CreateString(spec.name);
  auto hparams = BuildHParams(b, spec.hp);
  auto tok = BuildTokenizer(b, spec.tokenizer);
  flatbuffers::Offset<flatbuffers::Vector<const fb::ExpertId*>> pruned;
  if (!spec.pruned_experts.empty()) {
    std::vector<fb::ExpertId> ids;
    for (const ExpertId& id : spec.pruned_experts) ids.emplace_back(id.layer, id.expert);
    pruned = b.CreateVectorOfStructs(ids);
  }
  fb::ModelBuilder mb(b);
  mb.add_format_version(spec.pruned_experts.empty() ? 1 : kMoeFormatVersion);
  mb.add_arch(arch);
  mb.add_name(name);
  mb.add_hparams(hparams);
  mb.add_tokenizer(tok);
  mb.add_tensors(tensors_vec);
  if (!pruned.IsNull()) mb.add_pruned_experts(pruned);
  b.FinishSizePrefixed(mb.Finish(), fb::ModelIdentifier());
}

}  // namespace

absl::Status WriteMoeFile(const ModelSpec& spec, const std::string& path,
                          const WriteProgress& progress) {
  if (!spec.absent_experts.empty()) {
    return absl::InvalidArgumentError(
        "this model holds only one rank's experts (expert parallelism): it cannot be written");
  }
  MOE_RETURN_IF_ERROR(ValidateModelSpec(spec));
  for (const auto& t : spec.tensors) {
    if (!IsStorableDType(t.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", t.name, "' is in the run-time layout ", DTypeName(t.dtype),
                       ", which files never hold (write the model as loaded from its file)"));
    }
  }
  size_t data_size = 0;
  std::vector<Placement> placed = PlaceTensors(spec, &data_size);
  flatbuffers::FlatBufferBuilder b(1 << 20);
  BuildHeader(b, spec, placed, 0);
  const size_t data_start = AlignUp(b.GetSize(), kExpertAlignment);
  BuildHeader(b, spec, placed, data_start);
  if (AlignUp(b.GetSize(), kExpertAlignment) != data_start) {
    return absl::InternalError("container header size changed between layout passes");
  }

  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write '", tmp, "'"));
    f.write(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
    std::vector<char> zeros(kExpertAlignment, 0);
    size_t pos = b.GetSize();
    auto pad_to = [&](size_t target) {
      while (pos < target) {
        size_t n = std::min(target - pos, zeros.size());
        f.write(zeros.data(), n);
        pos += n;
      }
    };
    // Write in offset order.
    std::vector<Placement> by_offset = placed;
    std::sort(by_offset.begin(), by_offset.end(),
              [](const Placement& a, const Placement& b) { return a.rel_offset < b.rel_offset; });
    // Deferred tensors are made here, one at a time into one buffer, so that a converted model
    // never sits in memory whole.
    std::vector<uint8_t> made;
    uint64_t total = 0, written = 0;
    for (const auto& p : by_offset) total += p.tensor->byte_size();
    for (const auto& p : by_offset) {
      pad_to(data_start + p.rel_offset);
      const size_t bytes = p.tensor->byte_size();
      const uint8_t* from = p.tensor->data.data();
      if (p.tensor->deferred()) {
        made.resize(bytes);
        absl::Status status = MakeDeferredTensor(*p.tensor, absl::MakeSpan(made.data(), bytes));
        if (!status.ok()) {
          f.close();
          std::remove(tmp.c_str());
          return status;
        }
        from = made.data();
      }
      f.write(reinterpret_cast<const char*>(from), bytes);
      pos += bytes;
      if (!f) break;
      written += bytes;
      if (progress && !progress(written, total)) {
        f.close();
        std::remove(tmp.c_str());
        return absl::CancelledError(absl::StrCat("writing '", path, "' cancelled"));
      }
    }
    pad_to(AlignUp(pos, kTensorAlignment));
    f.flush();
    if (!f) {
      std::remove(tmp.c_str());
      return absl::DataLossError(absl::StrCat("writing '", tmp, "' failed (disk full?)"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat("cannot rename '", tmp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace moe
