// moe-inspect FILE: metadata, tensor table and parameter counts of a .moe or GGUF model.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "lib/import/model_loader.h"
#include "lib/model/arch/architecture.h"

namespace {

std::string Human(double n) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (n >= 1000 && u < 4) {
    n /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.2f%s" : "%.0f%s", n, units[u]);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Prints a model's metadata, tensor table and parameter counts.", "moe-inspect");
  std::string file;
  bool no_tensors = false;
  app.add_option("FILE", file, "model file (.moe or .gguf)")->required();
  app.add_flag("--no-tensors", no_tensors, "omit the tensor table");
  CLI11_PARSE(app, argc, argv);
  auto spec = moe::LoadModelSpec(file);
  if (!spec.ok()) {
    std::fprintf(stderr, "moe-inspect: %s\n", std::string(spec.status().message()).c_str());
    return 1;
  }
  const moe::HParams& h = spec->hp;
  std::printf("file          %s\n", file.c_str());
  std::printf("name          %s\n", spec->name.c_str());
  std::printf("architecture  %s\n", std::string(moe::ArchName(spec->arch)).c_str());
  std::printf("vocabulary    %lld (tokenizer: %s%s%s)\n", (long long)h.n_vocab,
              spec->tokenizer.model.empty() ? "none" : spec->tokenizer.model.c_str(),
              spec->tokenizer.pre.empty() ? "" : ", pre ", spec->tokenizer.pre.c_str());
  std::printf("embedding     %lld\nlayers        %lld\n", (long long)h.n_embd,
              (long long)h.n_layer);
  if (h.latent_attention()) {
    std::printf(
        "heads         %lld, latent attention (q_lora %lld, kv_lora %lld, nope %lld, rope %lld, "
        "v %lld)\n",
        (long long)h.n_head, (long long)h.q_lora_rank, (long long)h.kv_lora_rank,
        (long long)h.qk_nope_dim, (long long)h.rope_dim, (long long)h.v_head_dim);
  } else {
    std::printf("heads         %lld (kv %lld, head_dim %lld)\n", (long long)h.n_head,
                (long long)h.n_head_kv, (long long)h.head_dim);
  }
  std::printf("kv cache      %zu bytes/token in F16 (%zu in F32)\n",
              moe::KvBytesPerToken(h, moe::DType::kF16), moe::KvBytesPerToken(h, moe::DType::kF32));
  if (h.n_layer_dense > 0) {
    std::printf("dense layers  first %lld (ffn %lld)\n", (long long)h.n_layer_dense,
                (long long)h.n_ff_dense);
  }
  if (h.moe_layer_step > 1) {
    std::printf("expert layers every %lld after the dense ones (the others dense, ffn %lld)\n",
                (long long)h.moe_layer_step, (long long)h.n_ff_dense);
  }
  if (h.n_nextn_layer > 0) {
    std::printf("mtp layers    %lld (carried by the file, not run)\n", (long long)h.n_nextn_layer);
  }
  std::printf("experts       %lld, top-%lld, expert ffn %lld%s\n", (long long)h.n_expert,
              (long long)h.n_expert_used, (long long)h.n_ff_expert,
              h.norm_topk_prob ? ", renormalised" : ", raw weights");
  if (!spec->pruned_experts.empty()) {
    std::printf("pruned        %zu experts (moe-cli prune: never routed to, not in the file)\n",
                spec->pruned_experts.size());
  }
  std::printf("routing       %s%s", h.gating == moe::Gating::kSigmoid ? "sigmoid" : "softmax",
              h.has_selection_bias ? ", selection bias" : "");
  if (h.n_expert_groups > 1) {
    std::printf(", %lld groups, best %lld", (long long)h.n_expert_groups,
                (long long)h.n_group_used);
  }
  if (h.routed_scale != 1.f) std::printf(", scale %g", h.routed_scale);
  if (h.expert_input_weighted) std::printf(", weights applied to the experts' inputs");
  std::printf("\n");
  if (h.n_ff_shared > 0) {
    std::printf("shared expert ffn %lld%s\n", (long long)h.n_ff_shared,
                h.shared_expert_gate ? " (sigmoid-gated)" : "");
  }
  if (h.embedding_scale != 1.f || h.residual_scale != 1.f || h.logit_scale != 1.f) {
    std::printf("multipliers   embeddings x %g, layer outputs x %g, logits / %g\n",
                h.embedding_scale, h.residual_scale, h.logit_scale);
  }
  std::printf("context       %lld (trained)\n", (long long)h.n_ctx_train);
  std::printf("rope          %s, base %g", h.rope_style == moe::RopeStyle::kNeox ? "neox" : "norm",
              h.rope_freq_base);
  if (h.rope_dim != h.head_dim && !h.latent_attention()) {
    std::printf(", %lld of %lld dims", (long long)h.rope_dim, (long long)h.head_dim);
  }
  if (h.yarn_factor > 1) {
    std::printf(", yarn factor %g (original context %lld)", h.yarn_factor,
                (long long)h.yarn_orig_ctx);
  }
  std::printf("\n");
  if (h.sliding_window > 0 && h.swa_period > 0) {
    std::printf("attention     %s of %lld in %lld of every %lld layers\n",
                h.window_chunked ? "chunks" : "sliding window", (long long)h.sliding_window,
                (long long)h.swa_period - 1, (long long)h.swa_period);
  }
  if (!h.short_conv_layers.empty()) {
    std::printf("short conv    %zu of %lld layers, kernel %lld (no KV; a few F32 rows a sequence):",
                h.short_conv_layers.size(), (long long)h.n_layer, (long long)h.short_conv_kernel);
    for (int64_t l : h.short_conv_layers) std::printf(" %lld", (long long)l);
    std::printf("\n");
  }
  const double carried_kib =
      (h.ssm_state_floats() + std::max<int64_t>(0, h.ssm_conv_kernel - 1) * h.ssm_conv_channels()) *
      4.0 / 1024;
  const bool delta_nets = !h.ssm_layers.empty() &&
                          moe::ArchitectureOf(spec->arch).Layer(h, h.ssm_layers[0]).attention ==
                              moe::AttentionPart::kGatedDeltaNet;
  if (delta_nets) {
    // What a sequence carries in each gated delta net: a size x size matrix per value head and
    // the convolution's last kernel - 1 input rows.
    std::printf(
        "delta net     %zu of %lld layers: conv kernel %lld, %lld value heads over %lld key "
        "heads of %lld (no KV; state and conv rows %.1f KiB a sequence a layer, F32):",
        h.ssm_layers.size(), (long long)h.n_layer, (long long)h.ssm_conv_kernel,
        (long long)h.ssm_heads, (long long)h.ssm_groups, (long long)h.ssm_state, carried_kib);
    for (int64_t l : h.ssm_layers) std::printf(" %lld", (long long)l);
    std::printf("\n");
  }
  if (h.attention_output_gate)
    std::printf("attention     output gated by sigmoid (attn_q's second half)\n");
  if (!h.ssm_layers.empty() && !delta_nets) {
    // What a sequence carries in each Mamba-2 layer, whatever its length (the engine keeps a
    // live one per running sequence and snapshots at block ends, for prefix sharing).
    std::printf(
        "mamba-2       %zu of %lld layers: conv kernel %lld, inner %lld, state %lld, %lld heads, "
        "%lld groups (no KV; state and conv rows %.1f KiB a sequence a layer, F32):",
        h.ssm_layers.size(), (long long)h.n_layer, (long long)h.ssm_conv_kernel,
        (long long)h.ssm_inner, (long long)h.ssm_state, (long long)h.ssm_heads,
        (long long)h.ssm_groups, carried_kib);
    for (int64_t l : h.ssm_layers) std::printf(" %lld", (long long)l);
    std::printf("\n");
  }
  if (!h.ffn_only_layers.empty() || !h.mixer_only_layers.empty()) {
    // Nemotron-H's layers of one part, spelt as its configs' hybrid_override_pattern.
    std::string pattern;
    for (int l = 0; l < h.n_layer; ++l) {
      pattern += h.layer_ffn_only(l)     ? 'E'
                 : h.layer_mixer_only(l) ? (h.layer_ssm(l) ? 'M' : '*')
                                         : '+';
    }
    std::printf("layer parts   one each (M Mamba-2, * attention, E experts): %s\n",
                pattern.c_str());
  }
  if (h.relu_squared_ffn) std::printf("experts       ungated, relu(up x)^2\n");
  if (h.moe_latent_dim > 0) {
    std::printf("latent        routed experts on a %lld-value projection of the input\n",
                (long long)h.moe_latent_dim);
  }
  if (h.nope_period > 0) {
    if (h.nope_period == 1) {
      std::printf("no rope       on any layer (no position encoding in attention)");
    } else {
      std::printf("no rope       every %lld-th layer", (long long)h.nope_period);
    }
    if (h.attn_temp_scale != 0.f) {
      std::printf(", queries x 1 + %g ln(floor((p + %g) / %lld) + 1)", h.attn_temp_scale,
                  h.attn_temp_offset, (long long)h.attn_temp_floor);
    }
    std::printf("\n");
  }
  const char* qk[] = {"none", "full vector", "per head", "per head, unweighted, after rope",
                      "per head, after rope"};
  std::printf("qk-norm       %s\noutput head   %s\n", qk[static_cast<int>(h.qk_norm)],
              h.tied_output ? "tied to embedding" : "separate");
  if (!spec->tokenizer.chat_template.empty()) {
    std::printf("chat template %zu bytes\n", spec->tokenizer.chat_template.size());
  }

  if (!no_tensors) {
    std::printf("\n%-40s %-6s %-20s %6s %6s %12s\n", "tensor", "dtype", "shape", "layer", "expert",
                "bytes");
    for (const auto& t : spec->tensors) {
      std::printf("%-40s %-6s %-20s %6d %6d %12zu\n", t.name.c_str(),
                  std::string(moe::DTypeName(t.dtype)).c_str(), absl::StrJoin(t.shape, "x").c_str(),
                  t.layer, t.expert, t.byte_size());
    }
  }
  std::map<std::string, size_t> by_dtype;
  for (const auto& t : spec->tensors)
    by_dtype[std::string(moe::DTypeName(t.dtype))] += t.byte_size();
  moe::ParamCounts c = moe::CountParams(*spec);
  std::printf("\nparameters    %s total (%lld)\n", Human(c.total).c_str(), (long long)c.total);
  std::printf("active/token  %s (%lld) = %.2f%% of all parameters (top-%lld of %lld experts)\n",
              Human(c.active_per_token).c_str(), (long long)c.active_per_token,
              100.0 * c.active_per_token / c.total, (long long)h.n_expert_used,
              (long long)h.n_expert);
  std::printf("weight bytes  %s total, %s read per decoded token\n", Human(c.total_bytes).c_str(),
              Human(c.active_bytes_per_token).c_str());
  for (const auto& [dt, bytes] : by_dtype)
    std::printf("  %-6s %s bytes\n", dt.c_str(), Human(bytes).c_str());
  return 0;
}
