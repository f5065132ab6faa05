// Fuzz target: Hugging Face tokenizer.json parsing (JSON -> TokenizerData), then Tokenizer::Create
// (which compiles the pre-tokenizer regexes) and a short Encode/Decode for whatever loads.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/import/hf_tokenizer.h"
#include "lib/tokenizer/byte_unicode.h"
#include "lib/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader takes a path (and looks for tokenizer_config.json beside it, which the temp
  // directory does not have).
  static const std::string path = moe::fuzz::TempPath("tokenizer.json");
  moe::fuzz::WriteFileOrDie(path, data, size);
  // Any JSON, of any shape or size of ids, must come back as a status: an exception escaping
  // the reader ends the process and fails the run.
  absl::StatusOr<moe::TokenizerData> tokenizer_data = moe::TokenizerDataFromHfJson(path);
  if (!tokenizer_data.ok()) return 0;
  moe::fuzz::CountStage("parsed");
  MOE_FUZZ_CHECK(tokenizer_data->tokens.size() == tokenizer_data->token_types.size());
  auto tokenizer = moe::Tokenizer::Create(*tokenizer_data);
  if (!tokenizer.ok()) return 0;
  moe::fuzz::CountStage("tokenizer");
  for (bool special : {false, true}) {
    moe::EncodeOptions options;
    options.parse_special = special;
    options.add_bos = true;
    const std::vector<int32_t> ids =
        (*tokenizer)->Encode("Hello, world! 123 \xe4\xb8\x96 <|endoftext|>\xff", options);
    for (int32_t id : ids) MOE_FUZZ_CHECK(id >= 0 && id < (*tokenizer)->vocab_size());
    MOE_FUZZ_CHECK((*tokenizer)->Decode(ids).ok());
  }
  return 0;
}

namespace moe::fuzz {
namespace {

// A small but complete byte-level BPE tokenizer.json: every byte's character, a few merges,
// added tokens, a Sequence of Split + ByteLevel pre-tokenizers, an NFC normalizer and a
// TemplateProcessing post-processor.
std::string TinyByteLevelJson(bool array_merges, bool digits) {
  std::string vocab;
  int id = 0;
  for (int b = 0; b < 256; ++b) {
    std::string piece = ByteToUnicodeTable()[b];
    if (piece == "\"" || piece == "\\") piece = "\\" + piece;
    absl::StrAppend(&vocab, id ? "," : "", "\"", piece, "\":", id);
    ++id;
  }
  // 256 byte tokens (ids 0-255), then the merged ones.
  absl::StrAppend(&vocab, ",\"he\":256,\"ll\":257,\"hell\":258,\"\xc4\xa0w\":259");
  id = 260;
  const std::string merges = array_merges ? R"([["h","e"],["l","l"],["he","ll"],["Ġ","w"]])"
                                          : R"(["h e","l l","he ll","Ġ w"])";
  const std::string pre =
      digits ? R"({"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},)"
               R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":true}]})"
             : R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":)"
               R"("\\s+|\\w+|[^\\s\\w]+"},"behavior":"Isolated","invert":false},)"
               R"({"type":"ByteLevel","add_prefix_space":false,"use_regex":false}]})";
  return absl::StrCat(
      R"({"version":"1.0","added_tokens":[{"id":)", id, R"(,"content":"<|endoftext|>",)",
      R"("special":true},{"id":)", id + 1, R"(,"content":"<|user|>","special":false}],)",
      R"("normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"}]},)", R"("pre_tokenizer":)",
      pre, ",", R"("post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":)",
      R"("<|endoftext|>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}]},)",
      R"("model":{"type":"BPE","unk_token":null,"ignore_merges":false,"vocab":{)", vocab,
      R"(},"merges":)", merges, "}}");
}

Seed TextSeed(std::string name, const std::string& text) {
  return Seed{std::move(name), std::vector<uint8_t>(text.begin(), text.end()), {}, 0};
}

}  // namespace

std::vector<Seed> Seeds() {
  std::vector<Seed> seeds;
  seeds.push_back(TextSeed("bytelevel-split", TinyByteLevelJson(false, false)));
  seeds.push_back(TextSeed("bytelevel-digits", TinyByteLevelJson(true, true)));
  // The shapes the importer rejects with an error: other models, Metaspace, bad merges.
  seeds.push_back(TextSeed("unigram", R"({"model":{"type":"Unigram","vocab":[]},)"
                                      R"("pre_tokenizer":{"type":"Metaspace"}})"));
  seeds.push_back(TextSeed("bad-merge", R"({"model":{"type":"BPE","vocab":{"a":0},)"
                                        R"("merges":[1]},"pre_tokenizer":{"type":"ByteLevel"}})"));
  seeds.push_back(TextSeed("holes", R"({"model":{"type":"BPE","vocab":{"a":5}},)"
                                    R"("added_tokens":[{"id":9,"content":"<x>"}],)"
                                    R"("pre_tokenizer":{"type":"ByteLevel"}})"));
  return seeds;
}

}  // namespace moe::fuzz
