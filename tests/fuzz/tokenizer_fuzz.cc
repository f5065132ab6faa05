// Fuzz target: tokenizer input. The first byte picks the vocabulary (SentencePiece llama-spm or
// byte-level gpt-2) and the operation; the rest is text to Encode (with and without
// parse_special) or little-endian int32 ids to Decode and stream through StreamDecoder.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "lib/import/tokenizer_loader.h"
#include "lib/tokenizer/stream_decoder.h"
#include "lib/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

namespace moe::fuzz {
namespace {

constexpr const char* kVocabs[] = {"llama-spm", "gpt-2"};

// Loaded once per process: building a tokenizer from 32k-50k tokens costs far more than one
// input.
const Tokenizer& GetTokenizer(int which) {
  static const std::unique_ptr<Tokenizer>* tokenizers = [] {
    auto* out = new std::unique_ptr<Tokenizer>[2];
    for (int i = 0; i < 2; ++i) {
      const std::string path = TestdataDir() + "/tokenizer/ggml-vocab-" + kVocabs[i] + ".gguf";
      auto data = LoadTokenizerData(path);
      if (!data.ok()) Fail(data.status().ToString(), __FILE__, __LINE__);
      auto tokenizer = Tokenizer::Create(*data);
      if (!tokenizer.ok()) Fail(tokenizer.status().ToString(), __FILE__, __LINE__);
      out[i] = *std::move(tokenizer);
    }
    return out;
  }();
  return *tokenizers[which];
}

// Streams ids through a StreamDecoder; what comes out must be valid UTF-8 whatever goes in.
std::string Stream(const Tokenizer& tokenizer, absl::Span<const int32_t> ids, bool render) {
  StreamDecoder stream(tokenizer, DecodeOptions{render});
  std::string out;
  for (int32_t id : ids) {
    auto piece = stream.Add(id);
    const bool in_range = id >= 0 && id < tokenizer.vocab_size();
    MOE_FUZZ_CHECK(piece.ok() == in_range);
    if (!piece.ok()) continue;
    MOE_FUZZ_CHECK(IsValidUtf8(*piece));
    out += *piece;
  }
  const std::string rest = stream.Flush();
  MOE_FUZZ_CHECK(IsValidUtf8(rest));
  return out + rest;
}

void Encode(const Tokenizer& tokenizer, absl::string_view text, uint8_t op) {
  EncodeOptions options;
  options.parse_special = op & 2;
  options.add_bos = op & 4;
  const std::vector<int32_t> ids = tokenizer.Encode(text, options);
  for (int32_t id : ids) MOE_FUZZ_CHECK(id >= 0 && id < tokenizer.vocab_size());
  auto decoded = tokenizer.Decode(ids, DecodeOptions{/*render_special=*/false});
  MOE_FUZZ_CHECK(decoded.ok());
  // Both vocabularies cover every byte (byte fallback / byte-level), so plain text (no control
  // tokens parsed) must come back exactly; tests/tokenizer/robustness_test.cc pins the same
  // property on fixed inputs.
  // KNOWN ISSUE (reported, not fixed here): Decode drops the SentencePiece prefix space only
  // from token 0, so with a BOS first (even one not rendered) " text" comes back. Tokenizer's
  // header says "from the first text piece". Accept exactly that difference until it is fixed.
  // SentencePiece writes spaces as U+2581 "▁", so a "▁" in the text itself comes back as the space
  // it stands for (SentencePiece and llama.cpp do the same).
  std::string expected(text);
  if (tokenizer.data().model == "llama")
    expected = absl::StrReplaceAll(expected, {{"\xe2\x96\x81", " "}});
  const bool bos_keeps_space = options.add_bos && tokenizer.strips_leading_space() &&
                               !ids.empty() && ids[0] == tokenizer.bos_id() &&
                               *decoded == absl::StrCat(" ", expected);
  if (!options.parse_special && *decoded != expected && !bos_keeps_space) {
    std::fprintf(stderr,
                 "round trip of \"%s\" (add_bos %d) gave \"%s\"; ids:", absl::CEscape(text).c_str(),
                 options.add_bos, absl::CEscape(*decoded).c_str());
    for (int32_t id : ids) {
      std::fprintf(stderr, " %d '%s'", id, absl::CEscape(tokenizer.data().tokens[id]).c_str());
    }
    std::fprintf(stderr, "\n");
    MOE_FUZZ_CHECK(*decoded == expected);
  }
  const std::string streamed = Stream(tokenizer, ids, /*render=*/false);
  // Streaming must produce what Decode does, whenever that is valid UTF-8.
  if (IsValidUtf8(*decoded)) MOE_FUZZ_CHECK(streamed == *decoded);
}

void Decode(const Tokenizer& tokenizer, absl::Span<const uint8_t> payload) {
  std::vector<int32_t> ids(payload.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), payload.data(), ids.size() * 4);
  for (bool render : {true, false}) {
    auto raw = tokenizer.Decode(ids, DecodeOptions{render});
    bool all_in_range = true;
    for (int32_t id : ids) all_in_range &= id >= 0 && id < tokenizer.vocab_size();
    MOE_FUZZ_CHECK(raw.ok() == all_in_range);
    Stream(tokenizer, ids, render);
  }
  // The same ids folded into the vocabulary, so decoding gets past the range check.
  for (int32_t& id : ids) {
    id = static_cast<int32_t>(static_cast<uint32_t>(id) % tokenizer.vocab_size());
  }
  MOE_FUZZ_CHECK(tokenizer.Decode(ids).ok());
  Stream(tokenizer, ids, /*render=*/true);
}

}  // namespace

std::vector<Seed> Seeds() {
  std::vector<Seed> seeds;
  for (int vocab = 0; vocab < 2; ++vocab) {
    const std::string base = TestdataDir() + "/tokenizer/ggml-vocab-" + kVocabs[vocab] + ".gguf";
    std::vector<uint8_t> inp = ReadFileOrDie(base + ".inp");
    const std::vector<std::string> texts =
        absl::StrSplit(absl::string_view(reinterpret_cast<const char*>(inp.data()), inp.size()),
                       "\n__ggml_vocab_test__\n");
    std::vector<uint8_t> out_bytes = ReadFileOrDie(base + ".out");
    std::istringstream out(std::string(out_bytes.begin(), out_bytes.end()));
    std::string line;
    for (size_t i = 0; i < texts.size(); ++i) {
      // Encode seeds rotate through the operation bits; decode seeds are the expected ids.
      const uint8_t op = static_cast<uint8_t>(vocab | ((i % 4) << 1));
      Seed text{"text", {op}, {}, 0};
      text.bytes.insert(text.bytes.end(), texts[i].begin(), texts[i].end());
      seeds.push_back(std::move(text));
      if (!std::getline(out, line)) continue;
      Seed ids{"ids", {static_cast<uint8_t>(vocab | 8)}, {}, 0};
      for (absl::string_view s : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
        int32_t id = 0;
        if (!absl::SimpleAtoi(s, &id)) continue;
        ids.fields.push_back({ids.bytes.size(), 4});
        ids.bytes.resize(ids.bytes.size() + 4);
        std::memcpy(ids.bytes.data() + ids.bytes.size() - 4, &id, 4);
      }
      seeds.push_back(std::move(ids));
    }
  }
  // Special-token markup, parsed and not.
  for (uint8_t op : {0, 1, 2, 3}) {
    const std::string text = "<s>hi</s><|endoftext|><unk> <s";
    Seed seed{"markup", {op}, {}, 0};
    seed.bytes.insert(seed.bytes.end(), text.begin(), text.end());
    seeds.push_back(std::move(seed));
  }
  for (size_t i = 0; i < seeds.size(); ++i) seeds[i].name += "-" + std::to_string(i);
  return seeds;
}

}  // namespace moe::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t op = data[0];
  const moe::Tokenizer& tokenizer = moe::fuzz::GetTokenizer(op & 1);
  const absl::Span<const uint8_t> payload(data + 1, size - 1);
  moe::fuzz::CountStage(op & 8 ? "decode" : "encode");
  if (op & 8) {
    moe::fuzz::Decode(tokenizer, payload);
  } else {
    moe::fuzz::Encode(tokenizer, {reinterpret_cast<const char*>(payload.data()), payload.size()},
                      op);
  }
  return 0;
}
