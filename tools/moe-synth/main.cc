// moe-synth: writes a random-weight MoE model of a given shape as a GGUF file that llama.cpp
// loads too, so that both engines can be measured on the very same file.
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_writer.h"
#include "lib/import/quant_scheme.h"

namespace {

struct Options {
  std::string arch = "qwen2moe";
  int64_t embd = 1024, layers = 16, heads = 16, kv_heads = 4, experts = 32, top_k = 4;
  int64_t ff = 512, shared_ff = 2048, ctx = 4096;
  std::string type = "q8_0";
  std::string vocab;  // required: a default would be a path of the machine that built the tool
  uint64_t seed = 1;
  std::string out;
};

// A fast normal generator: weights need to look like weights, not be cryptographic.
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  void Fill(float* x, int64_t n, float std, float mean) {
    std::normal_distribution<float> nd(mean, std);
    for (int64_t i = 0; i < n; ++i) x[i] = nd(rng_);
  }

 private:
  std::mt19937_64 rng_;
};

int Run(const Options& o) {
  auto vocab = moe::GgufFile::Open(o.vocab);
  if (!vocab.ok()) {
    std::fprintf(stderr, "moe-synth: %s\n", std::string(vocab.status().message()).c_str());
    return 1;
  }
  moe::GgufWriter w;
  const std::string& a = o.arch;
  moe::CopyMetadata(**vocab, w, [](const std::string& key) {
    return absl::StartsWith(key, "tokenizer.");
  });
  auto tokens = (*vocab)->GetStringArray("tokenizer.ggml.tokens");
  const int64_t n_vocab = tokens.ok() ? static_cast<int64_t>(tokens->size()) : 0;
  if (n_vocab == 0) {
    std::fprintf(stderr, "moe-synth: %s has no tokenizer.ggml.tokens\n", o.vocab.c_str());
    return 1;
  }
  w.SetString("general.architecture", a);
  w.SetString("general.name", absl::StrCat("synthetic-", a, "-", o.type));
  w.SetString("general.description",
              absl::StrCat("random-weight benchmark model written by moe-synth, seed ", o.seed));
  w.SetU32("general.file_type", moe::LlamaFileType(o.type));
  w.SetU32("general.quantization_version", 2);
  w.SetU32(a + ".context_length", o.ctx);
  w.SetU32(a + ".embedding_length", o.embd);
  w.SetU32(a + ".block_count", o.layers);
  w.SetU32(a + ".feed_forward_length", o.shared_ff > 0 ? o.shared_ff : o.ff);
  w.SetU32(a + ".attention.head_count", o.heads);
  w.SetU32(a + ".attention.head_count_kv", o.kv_heads);
  w.SetF32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.SetF32(a + ".rope.freq_base", 1e6f);
  w.SetU32(a + ".expert_count", o.experts);
  w.SetU32(a + ".expert_used_count", o.top_k);
  w.SetU32(a + ".expert_feed_forward_length", o.ff);
  if (o.shared_ff > 0) w.SetU32(a + ".expert_shared_feed_forward_length", o.shared_ff);

  std::vector<std::unique_ptr<std::vector<uint8_t>>> store;
  Normal rng(o.seed);
  std::vector<float> buf;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float std, float mean,
                 int64_t layer) -> bool {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    moe::DType t = moe::QuantTypeFor(o.type, name, shape.back(), layer, o.layers, shape.size() == 1);
    const int64_t cols = shape.back();
    if (!moe::RowSizeValid(t, cols)) {
      std::fprintf(stderr, "moe-synth: %s rows of %lld do not fit %s blocks\n", name.c_str(),
                   static_cast<long long>(cols), std::string(moe::DTypeName(t)).c_str());
      return false;
    }
    buf.resize(cols);
    auto bytes = std::make_unique<std::vector<uint8_t>>(moe::RowBytes(t, cols) * (n / cols));
    for (int64_t r = 0; r < n / cols; ++r) {
      rng.Fill(buf.data(), cols, std, mean);
      (void)moe::QuantizeRow(t, buf.data(), bytes->data() + r * moe::RowBytes(t, cols), cols);
    }
    w.AddTensor(name, t, std::move(shape), *bytes);
    store.push_back(std::move(bytes));
    return true;
  };
  const int64_t E = o.embd, hd = o.embd / o.heads;
  const float s_in = 1.0f / std::sqrt(static_cast<float>(E));
  bool ok = add("token_embd.weight", {n_vocab, E}, 1.0f, 0, -1) &&
            add("output_norm.weight", {E}, 0.05f, 1.0f, -1) &&
            add("output.weight", {n_vocab, E}, 2 * s_in, 0, -1);
  for (int64_t l = 0; ok && l < o.layers; ++l) {
    auto n = [&](const char* base) { return absl::StrCat("blk.", l, ".", base); };
    ok = add(n("attn_norm.weight"), {E}, 0.05f, 1.0f, l) &&
         add(n("attn_q.weight"), {o.heads * hd, E}, s_in, 0, l) &&
         add(n("attn_k.weight"), {o.kv_heads * hd, E}, s_in, 0, l) &&
         add(n("attn_v.weight"), {o.kv_heads * hd, E}, s_in, 0, l) &&
         add(n("attn_output.weight"), {E, o.heads * hd}, 0.5f * s_in, 0, l) &&
         add(n("ffn_norm.weight"), {E}, 0.05f, 1.0f, l) &&
         add(n("ffn_gate_inp.weight"), {o.experts, E}, 2 * s_in, 0, l) &&
         add(n("ffn_gate_exps.weight"), {o.experts, o.ff, E}, s_in, 0, l) &&
         add(n("ffn_up_exps.weight"), {o.experts, o.ff, E}, s_in, 0, l) &&
         add(n("ffn_down_exps.weight"), {o.experts, E, o.ff},
             0.5f / std::sqrt(static_cast<float>(o.ff)), 0, l);
    if (ok && a == "qwen2moe") {
      ok = add(n("attn_q.bias"), {o.heads * hd}, 0.1f, 0, l) &&
           add(n("attn_k.bias"), {o.kv_heads * hd}, 0.1f, 0, l) &&
           add(n("attn_v.bias"), {o.kv_heads * hd}, 0.1f, 0, l) &&
           add(n("ffn_gate_inp_shexp.weight"), {E}, s_in, 0, l) &&
           add(n("ffn_gate_shexp.weight"), {o.shared_ff, E}, s_in, 0, l) &&
           add(n("ffn_up_shexp.weight"), {o.shared_ff, E}, s_in, 0, l) &&
           add(n("ffn_down_shexp.weight"), {E, o.shared_ff},
               0.5f / std::sqrt(static_cast<float>(o.shared_ff)), 0, l);
    }
    if (ok && (a == "olmoe" || a == "qwen3moe")) {
      int64_t qn = a == "olmoe" ? o.heads * hd : hd, kn = a == "olmoe" ? o.kv_heads * hd : hd;
      ok = add(n("attn_q_norm.weight"), {qn}, 0.05f, 1.0f, l) &&
           add(n("attn_k_norm.weight"), {kn}, 0.05f, 1.0f, l);
    }
  }
  if (!ok) return 1;
  absl::Status s = w.Write(o.out);
  if (!s.ok()) {
    std::fprintf(stderr, "moe-synth: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "moe-synth: wrote %s\n", o.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Writes a random-weight MoE model (GGUF) of a given shape.", "moe-synth");
  app.add_option("-o,--out", o.out, "output .gguf")->required();
  app.add_option("--arch", o.arch, "llama | qwen2moe | olmoe | qwen3moe")
      ->check(CLI::IsMember({"llama", "qwen2moe", "olmoe", "qwen3moe"}))
      ->capture_default_str();
  app.add_option("--type", o.type, "weight type")
      ->check(CLI::IsMember({"f16", "bf16", "q8_0", "q4_0", "q4_k", "q4_k_m", "q5_k", "q6_k"}))
      ->capture_default_str();
  app.add_option("--embd", o.embd)->capture_default_str();
  app.add_option("--layers", o.layers)->capture_default_str();
  app.add_option("--heads", o.heads)->capture_default_str();
  app.add_option("--kv-heads", o.kv_heads)->capture_default_str();
  app.add_option("--experts", o.experts)->capture_default_str();
  app.add_option("--top-k", o.top_k)->capture_default_str();
  app.add_option("--ff", o.ff, "expert FFN size")->capture_default_str();
  app.add_option("--shared-ff", o.shared_ff, "shared-expert FFN size (qwen2moe; 0 = none)")
      ->capture_default_str();
  app.add_option("--vocab", o.vocab,
                 "GGUF whose tokenizer keys are copied (any llama.cpp vocabulary file, e.g. "
                 "tests/data/tokenizer/ggml-vocab-deepseek-coder.gguf in the source tree)")
      ->required();
  app.add_option("--seed", o.seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.arch != "qwen2moe") o.shared_ff = 0;
  return Run(o);
}
