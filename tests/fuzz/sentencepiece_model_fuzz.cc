// Fuzz target: a SentencePiece tokenizer.model (protobuf, read by Debian's libsentencepiece)
// through TokenizerDataFromSentencePiece, then Tokenizer::Create and a short Encode/Decode.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lib/import/sentencepiece_tokenizer.h"
#include "lib/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/micro_sentencepiece.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader takes a path (and reads tokenizer_config.json beside it when there is one; the
  // temp directory has none).
  static const std::string path = moe::fuzz::TempPath("tokenizer.model");
  moe::fuzz::WriteFileOrDie(path, data, size);
  auto tokenizer_data = moe::TokenizerDataFromSentencePiece(path);
  if (!tokenizer_data.ok()) return 0;
  moe::fuzz::CountStage("parsed");
  MOE_FUZZ_CHECK(tokenizer_data->tokens.size() == tokenizer_data->token_types.size());
  auto tokenizer = moe::Tokenizer::Create(*tokenizer_data);
  if (!tokenizer.ok()) return 0;
  moe::fuzz::CountStage("tokenizer");
  moe::EncodeOptions options;
  options.add_bos = true;
  const std::vector<int32_t> ids =
      (*tokenizer)->Encode("Hello, world! 123 \xe4\xb8\x96 \xf0\x9f\x91\x8b\xff", options);
  for (int32_t id : ids) MOE_FUZZ_CHECK(id >= 0 && id < (*tokenizer)->vocab_size());
  auto text = (*tokenizer)->Decode(ids);
  MOE_FUZZ_CHECK(text.ok());
  return 0;
}

namespace moe::fuzz {

// Micro models trained here (BPE with byte fallback, user-defined symbols and split digits;
// unigram without a dummy prefix; BPE with a control symbol and whitespace kept), then the
// bundled model's tokenizer.model (a real SentencePiece BPE model, 4,000 pieces).
std::vector<Seed> Seeds() {
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> micro = {
      {"micro-bpe-byte-fallback",
       {{"model_type", "bpe"},
        {"vocab_size", "330"},
        {"byte_fallback", "true"},
        {"normalization_rule_name", "identity"},
        {"user_defined_symbols", "<|im_start|>,<|im_end|>"},
        {"split_digits", "true"}}},
      {"micro-unigram",
       {{"model_type", "unigram"},
        {"vocab_size", "60"},
        {"hard_vocab_limit", "false"},
        {"normalization_rule_name", "identity"},
        {"add_dummy_prefix", "false"}}},
      {"micro-bpe-control",
       {{"model_type", "bpe"},
        {"vocab_size", "80"},
        {"hard_vocab_limit", "false"},
        {"normalization_rule_name", "identity"},
        {"control_symbols", "<ctl>"},
        {"remove_extra_whitespaces", "false"}}},
  };
  std::vector<Seed> seeds;
  for (const auto& [name, options] : micro) {
    std::string error;
    const std::string model = TrainMicroSentencePiece(options, &error);
    if (model.empty()) Fail("training " + name + ": " + error, __FILE__, __LINE__);
    seeds.push_back({name, std::vector<uint8_t>(model.begin(), model.end()), {}, 0});
  }
  seeds.push_back(
      {"tiny-brown-moe",
       ReadFileOrDie(std::string(MOE_SOURCE_DIR) + "/models/tiny-brown-moe/tokenizer.model"),
       {},
       0});
  return seeds;
}

}  // namespace moe::fuzz
