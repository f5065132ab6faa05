// Fuzz target: the C ABI's string and id inputs, as an application would pass them, on a micro
// model. Byte 0 picks the call; the rest is its input: text to tokenize (with any flag
// bits), ids to detokenize or stream, chat messages and template names, prompts as ids or text
// with stop strings, raw sampling and context params (NaN, huge, negative). Every call must return
// a documented status, and what it returns must hold up (ids in range, whole UTF-8 pieces).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "moe_c.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

struct Fixture {
  moe_model* model = nullptr;
  moe_context* ctx = nullptr;
  int32_t n_vocab = 0;
};

const Fixture& Get() {
  static const Fixture f = [] {
    Fixture f;
    // The micro qwen2moe (tests/fuzz/seeds): a call that generates costs microseconds, so the
    // runs reach the C ABI's paths millions of times; its SentencePiece vocabulary is made up and
    // small (the tokenizers are fuzzed on real ones by their own targets).
    const std::string path = moe::fuzz::MicroModel("qwen2moe");
    if (moe_model_load(path.c_str(), nullptr, &f.model) != MOE_OK) {
      moe::fuzz::Fail(moe_last_error(), __FILE__, __LINE__);
    }
    moe_context_params p = moe_context_default_params();
    p.n_ctx = 64;
    p.n_threads = 1;
    if (moe_context_create(f.model, &p, &f.ctx) != MOE_OK) {
      moe::fuzz::Fail(moe_last_error(), __FILE__, __LINE__);
    }
    moe_model_info info = moe_model_default_info();
    moe_model_get_info(f.model, &info);
    f.n_vocab = info.n_vocab;
    return f;
  }();
  return f;
}

// A status the header defines, other than INTERNAL (a bug by the header's own words).
bool Documented(moe_status s) { return s >= MOE_OK && s < MOE_ERROR_INTERNAL; }

template <typename T>
T Read(const uint8_t*& p, const uint8_t* end) {
  T v{};
  if (end - p >= static_cast<ptrdiff_t>(sizeof(T))) {
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
  } else {
    p = end;
  }
  return v;
}

std::vector<int32_t> Ids(const uint8_t* p, const uint8_t* end, size_t max) {
  std::vector<int32_t> ids;
  while (end - p >= 4 && ids.size() < max) ids.push_back(Read<int32_t>(p, end));
  return ids;
}

// NUL-separated strings.
std::vector<std::string> Strings(const uint8_t* p, const uint8_t* end) {
  std::vector<std::string> out(1);
  for (; p < end; ++p) {
    if (*p == 0) {
      out.emplace_back();
    } else {
      out.back() += static_cast<char>(*p);
    }
  }
  return out;
}

struct Pieces {
  std::string text;
};
int CheckPiece(int32_t token, const char* piece, size_t len, void* ud) {
  MOE_FUZZ_CHECK(moe::fuzz::IsValidUtf8({piece, len}));
  static_cast<Pieces*>(ud)->text.append(piece, len);
  return 1;
}

moe_sampling_params RawSampling(const uint8_t*& p, const uint8_t* end) {
  moe_sampling_params s = moe_sampling_default_params();
  s.temperature = Read<float>(p, end);
  s.top_k = Read<int32_t>(p, end);
  s.top_p = Read<float>(p, end);
  s.min_p = Read<float>(p, end);
  s.repeat_penalty = Read<float>(p, end);
  s.frequency_penalty = Read<float>(p, end);
  s.presence_penalty = Read<float>(p, end);
  s.penalty_last_n = Read<int32_t>(p, end);
  s.seed = Read<uint64_t>(p, end);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const Fixture& f = Get();
  const uint8_t* p = data + 2;
  const uint8_t* end = data + size;
  const uint8_t arg = data[1];
  moe_status s = MOE_OK;
  switch (data[0] % 8) {
    case 0: {  // tokenize any bytes with any flag bits
      std::vector<int32_t> ids(256);
      size_t n = 0;
      s = moe_tokenize(f.model, reinterpret_cast<const char*>(p), end - p, arg, ids.data(),
                       ids.size(), &n);
      if (s == MOE_OK) {
        for (size_t i = 0; i < n; ++i) MOE_FUZZ_CHECK(ids[i] >= 0 && ids[i] < f.n_vocab);
      }
      break;
    }
    case 1: {  // detokenize any ids, into a buffer of any size
      const std::vector<int32_t> ids = Ids(p, end, 512);
      std::vector<char> buf(arg);
      size_t len = 0;
      s = moe_detokenize(f.model, ids.data(), ids.size(), buf.data(), buf.size(), &len);
      if (s == MOE_ERROR_BUFFER_TOO_SMALL) MOE_FUZZ_CHECK(len > buf.size());
      break;
    }
    case 2: {  // stream ids through a detokenizer: only whole UTF-8 comes out
      moe_detokenizer* d = nullptr;
      MOE_FUZZ_CHECK(moe_detokenizer_create(f.model, &d) == MOE_OK);
      for (int32_t id : Ids(p, end, 512)) {
        char buf[64];
        size_t len = 0;
        moe_status ps = moe_detokenizer_push(d, id, buf, sizeof(buf), &len);
        MOE_FUZZ_CHECK(Documented(ps));
        if (ps == MOE_OK) MOE_FUZZ_CHECK(moe::fuzz::IsValidUtf8({buf, len}));
        if (ps == MOE_ERROR_BUFFER_TOO_SMALL) break;
      }
      moe_detokenizer_free(d);
      break;
    }
    case 3: {  // chat templates: any name, roles and contents
      std::vector<std::string> parts = Strings(p, end);
      const char* name = (arg & 1) ? parts[0].c_str() : nullptr;
      std::vector<moe_chat_message> messages;
      for (size_t i = 1; i + 1 < parts.size(); i += 2) {
        messages.push_back({parts[i].c_str(), parts[i + 1].c_str()});
      }
      std::vector<char> buf(4096);
      size_t len = 0;
      s = moe_chat_apply_template(f.model, name, messages.data(), messages.size(), arg & 2,
                                  buf.data(), buf.size(), &len);
      break;
    }
    case 4: {  // generate from any ids with any sampling numbers
      moe_sampling_params sp = RawSampling(p, end);
      const std::vector<int32_t> ids = Ids(p, end, 16);
      moe_generate_params gp = moe_generate_default_params();
      gp.sampling = &sp;
      gp.max_tokens = arg % 4;
      moe_context_reset(f.ctx);
      Pieces pieces;
      s = moe_generate_tokens(f.ctx, ids.data(), ids.size(), &gp, CheckPiece, &pieces);
      MOE_FUZZ_CHECK(moe_context_n_past(f.ctx) <= moe_context_n_ctx(f.ctx));
      break;
    }
    case 5: {  // generate from text with stop strings and special-token parsing
      std::vector<std::string> parts = Strings(p, end);
      std::vector<const char*> stops;
      for (size_t i = 1; i < parts.size(); ++i) stops.push_back(parts[i].c_str());
      moe_sampling_params sp = moe_sampling_default_params();
      sp.temperature = 0;
      moe_generate_params gp = moe_generate_default_params();
      gp.sampling = &sp;
      gp.max_tokens = arg % 4;
      gp.parse_special = arg & 4;
      gp.stop = stops.data();
      gp.n_stop = stops.size();
      moe_context_reset(f.ctx);
      Pieces pieces;
      s = moe_generate(f.ctx, parts[0].c_str(), &gp, CheckPiece, &pieces);
      break;
    }
    case 6: {  // context params from raw bytes (the length kept small: it is memory)
      moe_context_params cp = moe_context_default_params();
      cp.n_ctx = Read<int32_t>(p, end);
      if (cp.n_ctx > 256) cp.n_ctx %= 256;
      cp.n_threads = Read<int32_t>(p, end);
      if (cp.n_threads > 4) cp.n_threads = 4 + (cp.n_threads & 1) * 2000;  // 4, or > the limit
      cp.kv_type = Read<int32_t>(p, end);
      cp.seed = Read<uint64_t>(p, end);
      cp.struct_size = (arg & 1) ? cp.struct_size : arg;
      moe_context* c = nullptr;
      s = moe_context_create(f.model, &cp, &c);
      MOE_FUZZ_CHECK((s == MOE_OK) == (c != nullptr));
      moe_context_free(c);
      break;
    }
    case 7: {  // decode any ids, then sample with any numbers and logit biases
      const std::vector<int32_t> ids = Ids(p, end, 8);
      moe_context_reset(f.ctx);
      s = moe_decode(f.ctx, ids.data(), ids.size());
      moe_sampling_params sp = RawSampling(p, end);
      std::vector<moe_logit_bias> bias;
      while (end - p >= 8 && bias.size() < 8) {
        bias.push_back({Read<int32_t>(p, end), Read<float>(p, end)});
      }
      sp.logit_bias = bias.data();
      sp.n_logit_bias = bias.size();
      int32_t token = -1;
      moe_status ss = moe_sample(f.ctx, &sp, &token);
      MOE_FUZZ_CHECK(Documented(ss));
      if (ss == MOE_OK) MOE_FUZZ_CHECK(token >= 0 && token < f.n_vocab);
      break;
    }
  }
  MOE_FUZZ_CHECK(Documented(s));
  return 0;
}

namespace moe::fuzz {

std::vector<Seed> Seeds() {
  auto seed = [](std::string name, std::vector<uint8_t> bytes) {
    return Seed{std::move(name), std::move(bytes), {}, 0};
  };
  auto text = [](const std::string& t) { return std::vector<uint8_t>(t.begin(), t.end()); };
  auto with = [](std::vector<uint8_t> head, const std::vector<uint8_t>& tail) {
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  auto ids = [](std::vector<int32_t> v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  auto floats = [](std::vector<float> v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  const std::vector<uint8_t> sampling =
      with(floats({0.8f, 0, 0.95f, 0.05f, 1.0f, 0, 0}), ids({64, 7, 0}));
  std::vector<Seed> seeds;
  seeds.push_back(seed("tokenize", with({0, 3}, text("Hello <|im_start|>world \xe4\xb8\x96\xff"))));
  seeds.push_back(seed("detokenize", with({1, 200}, ids({1, 15043, 3186, 29871, 13, 32000}))));
  seeds.push_back(seed("stream", with({2, 0}, ids({1, 15043, 0xe4 + 3, 0xb8 + 3, 0x96 + 3}))));
  using namespace std::string_literals;
  seeds.push_back(seed("chat", with({3, 3}, text("chatml\0user\0hi <|im_end|>\0assistant\0yo"s))));
  seeds.push_back(seed("chat-model", with({3, 2}, text("\0system\0be\0user\0q"s))));
  seeds.push_back(seed("generate-ids", with(with({4, 3}, sampling), ids({1, 100, 200}))));
  seeds.push_back(seed("generate-text", with({5, 6}, text("Once upon\0upon\0a"s))));
  seeds.push_back(seed("context", with({6, 1}, ids({32, 1, 1, 0, 0}))));
  seeds.push_back(seed("sample", with(with({7, 0}, ids({1, 5})), sampling)));
  return seeds;
}

}  // namespace moe::fuzz
