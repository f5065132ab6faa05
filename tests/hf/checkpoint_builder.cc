#include "tests/hf/checkpoint_builder.h"

#include <cstring>
#include <fstream>

#include "lib/import/hf_import.h"

namespace moe::testing {

using Json = nlohmann::json;

void WriteSafetensors(const std::filesystem::path& path,
                      const std::map<std::string, RawTensor>& tensors) {
  Json header = Json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << h;
  for (const auto& [name, t] : tensors) {
    f.write(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
}

Json TinyConfig(const std::string& hf_arch) {
  Json c = {
      {"architectures", {hf_arch}},     {"vocab_size", 40},         {"hidden_size", 32},
      {"num_hidden_layers", 2},         {"num_attention_heads", 4}, {"num_key_value_heads", 2},
      {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-6},     {"num_experts_per_tok", 2},
      {"rope_theta", 10000.0},          {"rope_scaling", nullptr},  {"sliding_window", nullptr},
      {"tie_word_embeddings", false}};
  if (hf_arch == "MixtralForCausalLM") {
    c["intermediate_size"] = 16;
    c["num_local_experts"] = 4;
  } else if (hf_arch == "Qwen2MoeForCausalLM") {
    c["num_experts"] = 4;
    c["moe_intermediate_size"] = 16;
    c["shared_expert_intermediate_size"] = 24;
    c["intermediate_size"] = 64;
  } else if (hf_arch == "OlmoeForCausalLM") {
    c["num_experts"] = 4;
    c["intermediate_size"] = 16;
    c["clip_qkv"] = nullptr;
  } else {  // Qwen3MoeForCausalLM
    c["num_experts"] = 4;
    c["moe_intermediate_size"] = 16;
    c["head_dim"] = 16;  // q_dim 64 != hidden_size 32
    c["norm_topk_prob"] = true;
  }
  return c;
}

std::map<std::string, RawTensor> TinyTensors(const Json& c, uint32_t seed) {
  const std::string arch = c["architectures"][0];
  const int64_t d = c["hidden_size"], v = c["vocab_size"], heads = c["num_attention_heads"],
                kv_heads = c["num_key_value_heads"];
  const int64_t hd = c.contains("head_dim") ? c["head_dim"].get<int64_t>() : d / heads;
  const int64_t q = heads * hd, kv = kv_heads * hd;
  const bool mixtral = arch == "MixtralForCausalLM";
  const int64_t n_exp =
      mixtral ? c["num_local_experts"].get<int64_t>() : c["num_experts"].get<int64_t>();
  const int64_t ff = c.contains("moe_intermediate_size") ? c["moe_intermediate_size"].get<int64_t>()
                                                         : c["intermediate_size"].get<int64_t>();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 0.2f);
  std::map<std::string, RawTensor> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    RawTensor t;
    t.shape = shape;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> values(n);
    for (float& x : values) x = normal(rng);
    t.bytes.resize(n * 4);
    std::memcpy(t.bytes.data(), values.data(), n * 4);
    out[name] = std::move(t);
  };
  add("model.embed_tokens.weight", {v, d});
  add("model.norm.weight", {d});
  if (!c.value("tie_word_embeddings", false)) add("lm_head.weight", {v, d});
  for (int l = 0; l < c["num_hidden_layers"].get<int>(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {d});
    add(p + "post_attention_layernorm.weight", {d});
    add(p + "self_attn.q_proj.weight", {q, d});
    add(p + "self_attn.k_proj.weight", {kv, d});
    add(p + "self_attn.v_proj.weight", {kv, d});
    add(p + "self_attn.o_proj.weight", {d, q});
    if (arch == "Qwen2MoeForCausalLM") {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
      const int64_t s = c["shared_expert_intermediate_size"];
      add(p + "mlp.shared_expert.gate_proj.weight", {s, d});
      add(p + "mlp.shared_expert.up_proj.weight", {s, d});
      add(p + "mlp.shared_expert.down_proj.weight", {d, s});
      add(p + "mlp.shared_expert_gate.weight", {1, d});
    }
    if (arch == "OlmoeForCausalLM") {
      add(p + "self_attn.q_norm.weight", {q});
      add(p + "self_attn.k_norm.weight", {kv});
    }
    if (arch == "Qwen3MoeForCausalLM") {
      add(p + "self_attn.q_norm.weight", {hd});
      add(p + "self_attn.k_norm.weight", {hd});
    }
    const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
    add(moe + "gate.weight", {n_exp, d});
    for (int e = 0; e < n_exp; ++e) {
      const std::string x = moe + "experts." + std::to_string(e) + ".";
      add(x + (mixtral ? "w1" : "gate_proj") + ".weight", {ff, d});
      add(x + (mixtral ? "w3" : "up_proj") + ".weight", {ff, d});
      add(x + (mixtral ? "w2" : "down_proj") + ".weight", {d, ff});
    }
  }
  return out;
}

void WriteCheckpoint(const std::filesystem::path& dir, const Json& config,
                     const std::map<std::string, RawTensor>& tensors) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump(2);
  WriteSafetensors(dir / "model.safetensors", tensors);
}

std::string RefusalOf(const std::filesystem::path& dir, const Json& config,
                      const std::map<std::string, RawTensor>& tensors) {
  WriteCheckpoint(dir, config, tensors);
  return std::string(ImportHfCheckpoint(dir.string()).status().message());
}

}  // namespace moe::testing
