#include "tools/moe-cli/run_command.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "lib/backend/backend.h"
#include "lib/import/model_loader.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"

namespace moe::cli {
namespace {

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  for (absl::string_view piece : absl::StrSplit(s, absl::ByAnyChar(" ,\t\n"), absl::SkipEmpty())) {
    int32_t id;
    if (!absl::SimpleAtoi(piece, &id)) {
      return absl::InvalidArgumentError("'" + std::string(piece) + "' is not a token id");
    }
    ids.push_back(id);
  }
  return ids;
}

absl::Status Run(const RunOptions& o) {
  const std::string path = o.model;
  if (path.empty()) return absl::InvalidArgumentError("no model given (-m MODEL)");
  auto ids = ParseIds(o.prompt_ids);
  if (!ids.ok()) return ids.status();
  if (ids->empty()) return absl::InvalidArgumentError("empty prompt (--prompt-ids \"1 2 3\")");
  if (!o.greedy) {
    return absl::UnimplementedError("only --greedy decoding is available in this build");
  }
  const std::string kv = o.kv_type;
  if (kv != "f32" && kv != "f16") {
    return absl::InvalidArgumentError("--kv-type must be f32 or f16, not '" + kv + "'");
  }
  auto spec = LoadModelSpec(path);
  if (!spec.ok()) return spec.status();
  auto model = Model::Create(*std::move(spec));
  if (!model.ok()) return model.status();
  const HParams& h = (*model)->hp();
  int64_t n_ctx = o.ctx;
  if (n_ctx <= 0) n_ctx = std::min<int64_t>(h.n_ctx_train, 4096);
  const int n_gen = std::max(0, o.n_predict);
  if (static_cast<int64_t>(ids->size()) + n_gen > n_ctx) {
    return absl::OutOfRangeError("prompt of " + std::to_string(ids->size()) + " tokens plus " +
                                 std::to_string(n_gen) + " generated exceeds the context of " +
                                 std::to_string(n_ctx));
  }
  auto cache = KvCache::Create(h.n_layer, n_ctx, h.n_head_kv, h.head_dim,
                               kv == "f16" ? DType::kF16 : DType::kF32);
  if (!cache.ok()) return cache.status();
  auto backend = CreateCpuBackend(o.threads);
  Transformer tf(*model, backend.get());

  const std::string dump = o.dump_logits;
  std::vector<float> logits;
  absl::Status s = tf.Forward(*ids, *cache, dump.empty() ? LogitsFor::kLast : LogitsFor::kAll,
                              &logits);
  if (!s.ok()) return s;
  if (!dump.empty()) {
    std::ofstream f(dump, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
    if (!f) return absl::PermissionDeniedError("cannot write '" + dump + "'");
    logits.erase(logits.begin(), logits.end() - h.n_vocab);
  }
  std::string out;
  for (int i = 0; i < n_gen; ++i) {
    int32_t tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                       logits.begin());
    out += (i ? " " : "") + std::to_string(tok);
    if (i + 1 < n_gen) {
      s = tf.Forward({&tok, 1}, *cache, LogitsFor::kLast, &logits);
      if (!s.ok()) return s;
    }
  }
  std::printf("%s\n", out.c_str());
  return absl::OkStatus();
}

}  // namespace

void AddRunCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App* run = app.add_subcommand("run", "generate a continuation of a prompt");
  run->add_option("-m,--model", opts->model, "model file (.moe or .gguf)")->required();
  run->add_option("--prompt-ids", opts->prompt_ids, "prompt as space-separated token ids");
  run->add_option("-n,--n-predict", opts->n_predict, "tokens to generate")->capture_default_str();
  run->add_flag("--greedy", opts->greedy, "greedy decoding (argmax, lowest id on ties)");
  run->add_option("--dump-logits", opts->dump_logits,
                  "write every prompt position's logits here (float32 LE, [n_prompt x n_vocab])");
  run->add_option("--kv-type", opts->kv_type, "KV cache element type")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  run->add_option("-t,--threads", opts->threads, "threads (0 = one per core)");
  run->add_option("-c,--ctx-size", opts->ctx, "context length (0 = trained length, at most 4096)");
  run->callback([opts, exit_code] {
    absl::Status s = Run(*opts);
    if (!s.ok()) {
      std::fprintf(stderr, "moe-cli run: %s\n", std::string(s.message()).c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace moe::cli
