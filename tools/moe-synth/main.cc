// moe-synth: writes a random-weight MoE model of a given shape and architecture as a GGUF file
// that llama.cpp loads too, so that both engines can be measured on the very same file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/backend/cpu/quant_rows.h"
#include "lib/base/thread_pool.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_writer.h"
#include "lib/import/quant_scheme.h"
#include "tools/moe-synth/synth_plan.h"

namespace {

struct Options {
  moe::synth::Shape shape;
  std::string type = "q8_0";
  // One of the two is required (a default vocabulary file would be a path of the machine that
  // built the tool): a GGUF to copy the tokenizer from, or the size of a made-up one.
  std::string vocab;
  int64_t synthetic_vocab = 0;
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

// A SentencePiece-style vocabulary of n pieces (n >= 4): <unk>, <s>, </s>, the word-start mark,
// then printable ASCII characters with and without it. For the smallest models — fuzzing seeds,
// tests — where a real vocabulary's embedding rows would be most of the file.
void WriteSyntheticVocabulary(int64_t n, moe::GgufWriter& w) {
  const std::string mark = "\xe2\x96\x81";  // U+2581, SentencePiece's word start
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", mark};
  std::vector<int32_t> types = {2, 3, 3, 1};  // unknown, control, control, normal
  for (int prefixed = 0; prefixed < 2 && static_cast<int64_t>(tokens.size()) < n; ++prefixed) {
    for (char c = 33; c < 127 && static_cast<int64_t>(tokens.size()) < n; ++c) {
      tokens.push_back((prefixed ? mark : std::string()) + c);
      types.push_back(1);
    }
  }
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < n; ++i) {  // unused filler pieces
    tokens.push_back(absl::StrCat("<piece", i, ">"));
    types.push_back(1);
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens", std::move(tokens));
  w.SetF32Array("tokenizer.ggml.scores", std::move(scores));
  w.SetI32Array("tokenizer.ggml.token_type", std::move(types));
  w.SetU32("tokenizer.ggml.bos_token_id", 1);
  w.SetU32("tokenizer.ggml.eos_token_id", 2);
  w.SetU32("tokenizer.ggml.unknown_token_id", 0);
}

int Run(const Options& o) {
  moe::GgufWriter w;
  const std::string& a = o.shape.arch;
  int64_t n_vocab = o.synthetic_vocab;
  if (n_vocab > 0) {
    WriteSyntheticVocabulary(n_vocab, w);
  } else {
    auto vocab = moe::GgufFile::Open(o.vocab);
    if (!vocab.ok()) {
      std::fprintf(stderr, "moe-synth: %s\n", std::string(vocab.status().message()).c_str());
      return 1;
    }
    moe::CopyMetadata(**vocab, w,
                      [](const std::string& key) { return absl::StartsWith(key, "tokenizer."); });
    auto tokens = (*vocab)->GetStringArray("tokenizer.ggml.tokens");
    n_vocab = tokens.ok() ? static_cast<int64_t>(tokens->size()) : 0;
    if (n_vocab == 0) {
      std::fprintf(stderr, "moe-synth: %s has no tokenizer.ggml.tokens\n", o.vocab.c_str());
      return 1;
    }
  }
  w.SetString("general.architecture", a);
  w.SetString("general.name", absl::StrCat("synthetic-", a, "-", o.type));
  w.SetString("general.description",
              absl::StrCat("random-weight benchmark model written by moe-synth, seed ", o.seed));
  w.SetU32("general.file_type", moe::LlamaFileType(o.type));
  w.SetU32("general.quantization_version", 2);
  auto plan = moe::synth::Plan(o.shape, w);
  if (!plan.ok()) {
    std::fprintf(stderr, "moe-synth: %s\n", std::string(plan.status().message()).c_str());
    return 1;
  }

  std::vector<std::unique_ptr<std::vector<uint8_t>>> store;
  Normal rng(o.seed);
  moe::ThreadPool pool(moe::DefaultThreadCount());
  std::vector<float> buf;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float std, float mean,
                 int64_t layer) -> bool {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    moe::DType t =
        moe::QuantTypeFor(o.type, name, shape.back(), layer, o.shape.layers, shape.size() == 1);
    const int64_t cols = shape.back();
    if (!moe::RowSizeValid(t, cols)) {
      std::fprintf(stderr, "moe-synth: %s rows of %lld do not fit %s blocks\n", name.c_str(),
                   static_cast<long long>(cols), std::string(moe::DTypeName(t)).c_str());
      return false;
    }
    // Drawn in order from one generator (the file depends on the seed alone), encoded a chunk
    // of rows at a time on every core.
    const int64_t rows = n / cols, chunk = 256;
    const size_t row_bytes = moe::RowBytes(t, cols);
    auto bytes = std::make_unique<std::vector<uint8_t>>(row_bytes * rows);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
      const int64_t m = std::min(chunk, rows - r0);
      buf.resize(m * cols);
      rng.Fill(buf.data(), m * cols, std, mean);
      pool.ParallelFor(m, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          (void)moe::QuantizeRow(t, buf.data() + r * cols, bytes->data() + (r0 + r) * row_bytes,
                                 cols);
        }
      });
    }
    w.AddTensor(name, t, std::move(shape), *bytes);
    store.push_back(std::move(bytes));
    return true;
  };
  const int64_t E = o.shape.embd;
  const float s_in = 1.0f / std::sqrt(static_cast<float>(E));
  bool ok = add("token_embd.weight", {n_vocab, E}, 1.0f, 0, -1) &&
            add(moe::synth::OutputNormName(o.shape), {E}, 0.05f, 1.0f, -1) &&
            add("output.weight", {n_vocab, E}, 2 * s_in, 0, -1);
  for (const moe::synth::Tensor& t : *plan) {
    if (!ok) break;
    ok = add(t.name, t.shape, t.std, t.mean, t.layer);
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
  moe::synth::Shape& sh = o.shape;
  app.add_option("--arch", sh.arch, absl::StrJoin(moe::synth::Architectures(), " | "))
      ->check(CLI::IsMember(moe::synth::Architectures()))
      ->capture_default_str();
  app.add_option("--type", o.type, "weight type (mxfp4_moe: MXFP4 experts, Q8_0 elsewhere)")
      ->check(CLI::IsMember(moe::QuantSchemeNames()))
      ->capture_default_str();
  app.add_option("--embd", sh.embd)->capture_default_str();
  app.add_option("--layers", sh.layers)->capture_default_str();
  app.add_option("--heads", sh.heads)->capture_default_str();
  app.add_option("--kv-heads", sh.kv_heads)->capture_default_str();
  app.add_option("--head-dim", sh.head_dim, "0: embd / heads")->capture_default_str();
  app.add_option("--experts", sh.experts)->capture_default_str();
  app.add_option("--top-k", sh.top_k)->capture_default_str();
  app.add_option("--ff", sh.ff, "expert FFN size")->capture_default_str();
  app.add_option("--shared-ff", sh.shared_ff,
                 "shared-expert FFN size (qwen2moe, 0 = none; hunyuan-moe, nemotron_h_moe, "
                 "qwen35moe, qwen3next)")
      ->capture_default_str();
  app.add_option(
         "--shared-experts", sh.shared_experts,
         "shared experts of --ff each (glm4moe, deepseek2, deepseek, ernie4_5-moe, bailingmoe2)")
      ->capture_default_str();
  app.add_option("--dense-layers", sh.dense_layers,
                 "leading dense layers (glm4moe, deepseek2, deepseek, ernie4_5-moe, bailingmoe2)")
      ->capture_default_str();
  app.add_option("--moe-layer-step", sh.moe_layer_step,
                 "ernie4_5-moe, llama4: experts in every this-many-th layer (after the dense "
                 "ones)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--dense-ff", sh.dense_ff, "their FFN size; 0: 4 x --ff")->capture_default_str();
  app.add_option("--ctx", sh.ctx, "context length (the original one under YaRN)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  app.add_option("--rope-base", sh.rope_base,
                 "RoPE frequency base (deepseek2 and gpt-oss keep their own)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--q-lora", sh.q_lora, "deepseek2: q low-rank size, 0 = none (V2-Lite)")
      ->capture_default_str();
  app.add_option("--kv-lora", sh.kv_lora, "deepseek2: KV latent size")->capture_default_str();
  app.add_option("--qk-nope", sh.qk_nope, "deepseek2")->capture_default_str();
  app.add_option("--qk-rope", sh.qk_rope, "deepseek2")->capture_default_str();
  app.add_option("--v-head", sh.v_head, "deepseek2")->capture_default_str();
  app.add_flag("--sigmoid-routing", sh.sigmoid_routing,
               "deepseek2: V3's sigmoid routing with a selection bias, renormalised, x 2.5");
  app.add_option("--expert-groups", sh.expert_groups, "deepseek2, bailingmoe2: expert groups")
      ->capture_default_str();
  app.add_option("--expert-groups-used", sh.expert_groups_used,
                 "deepseek2, bailingmoe2: groups chosen")
      ->capture_default_str();
  app.add_option("--sliding-window", sh.sliding_window, "gpt-oss")->capture_default_str();
  app.add_flag("--qk-norm", sh.qk_norm, "glm4moe: an RMSNorm over each q and k head");
  app.add_option("--attention-layers", sh.attention_layers,
                 "lfm2moe, granitehybrid: the layers that attend (default every fourth from "
                 "layer 2); the others convolve or run Mamba-2")
      ->delimiter(',');
  app.add_option("--conv-kernel", sh.conv_kernel,
                 "lfm2moe, granitehybrid, nemotron_h_moe, qwen35moe, qwen3next: the convolution's "
                 "length (0: 3 for lfm2moe, else 4)")
      ->capture_default_str();
  app.add_option("--ssm-state", sh.ssm_state,
                 "granitehybrid, nemotron_h_moe: Mamba-2 state size; qwen35moe, qwen3next: a "
                 "delta-net head's size")
      ->capture_default_str();
  app.add_option("--ssm-head-dim", sh.ssm_head_dim,
                 "granitehybrid, nemotron_h_moe: Mamba-2 head size")
      ->capture_default_str();
  app.add_option("--ssm-groups", sh.ssm_groups,
                 "granitehybrid, nemotron_h_moe: Mamba-2 groups of B and C; qwen35moe, qwen3next: "
                 "delta-net key heads")
      ->capture_default_str();
  app.add_option("--moe-latent", sh.moe_latent,
                 "nemotron_h_moe: the routed experts' latent size (Nemotron 3 Super; 0: none)")
      ->capture_default_str();
  app.add_option(
         "--ssm-heads", sh.ssm_heads,
         "qwen35moe, qwen3next: the gated delta nets' value heads (0: twice --ssm-groups, its key "
         "heads; --ssm-state is a head's size)")
      ->capture_default_str();
  app.add_option(
         "--full-attention-interval", sh.full_attention_interval,
         "qwen35moe, qwen3next: every this many layers attend, the others are gated delta nets")
      ->capture_default_str();
  app.add_option("--layer-pattern", sh.layer_pattern,
                 "nemotron_h_moe: one of M (Mamba-2), * (attention), E (experts) per layer "
                 "(default: Nemotron-3-Nano's, cut to --layers)");
  auto* vocab = app.add_option("--vocab", o.vocab,
                               "GGUF whose tokenizer keys are copied (any llama.cpp vocabulary "
                               "file, e.g. tests/data/tokenizer/ggml-vocab-deepseek-coder.gguf in "
                               "the source tree)");
  auto* synthetic = app.add_option("--synthetic-vocab", o.synthetic_vocab,
                                   "instead of --vocab: a made-up SentencePiece vocabulary of this "
                                   "many pieces (for the smallest test and fuzzing models)")
                        ->check(CLI::Range(int64_t{4}, int64_t{1} << 20));
  vocab->excludes(synthetic);
  synthetic->excludes(vocab);
  app.add_option("--seed", o.seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.vocab.empty() && o.synthetic_vocab == 0) {
    std::fprintf(stderr, "moe-synth: --vocab FILE or --synthetic-vocab N is required\n");
    return 2;
  }
  const bool has_shared = sh.arch == "hunyuan-moe" || sh.arch == "nemotron_h_moe" ||
                          sh.arch == "qwen35moe" || sh.arch == "qwen3next";
  if (sh.arch != "qwen2moe" && !has_shared) sh.shared_ff = 0;
  if (has_shared && sh.shared_ff <= 0) {
    std::fprintf(stderr, "moe-synth: %s has a shared expert: --shared-ff must be positive\n",
                 sh.arch.c_str());
    return 2;
  }
  return Run(o);
}
