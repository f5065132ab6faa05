// Fuzz target: a SentencePiece tokenizer.model (protobuf, read by Debian's libsentencepiece)
// through TokenizerDataFromSentencePiece, then Tokenizer::Create and a short Encode/Decode.
#include <cstdint>
#include <string>
#include <vector>

#include "lib/import/sentencepiece_tokenizer.h"
#include "lib/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

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

// The bundled model's tokenizer.model (a real SentencePiece BPE model, 8000 pieces).
std::vector<Seed> Seeds() {
  Seed seed{"tiny-brown-moe", ReadFileOrDie(std::string(MOE_SOURCE_DIR) +
                                            "/models/tiny-brown-moe/tokenizer.model"),
            {}, 0};
  return {seed};
}

}  // namespace moe::fuzz
