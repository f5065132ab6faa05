// moe-quantize IN OUT [TYPE] [--policy uniform|mixed ...]: re-encodes a model's weights.
//  - OUT.gguf: a GGUF model's weights in one scheme (q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_m,
//    q4_k, q4_k_m, q5_k, q6_k, iq4_nl, iq4_xs, f16, bf16, mxfp4_moe), keeping every metadata key,
//    in a file llama.cpp reads.
//  - OUT.moe: any model (.moe, .gguf, Hugging Face directory) into the .moe container, in one
//    scheme, or with --policy mixed: each routed expert in its own type, chosen by measured
//    sensitivity to meet --target-bits (tools/moe-quantize/expert_sensitivity.h).
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "lib/base/status_macros.h"
#include "lib/format/moe_writer.h"
#include "lib/import/gguf_file.h"
#include "lib/import/gguf_split.h"
#include "lib/import/gguf_writer.h"
#include "lib/import/hf_import.h"
#include "lib/import/model_loader.h"
#include "lib/import/quant_scheme.h"
#include "lib/moe/routing_profile.h"
#include "lib/runtime/engine.h"
#include "tools/moe-quantize/expert_sensitivity.h"
#include "tools/moe-quantize/spec_reencoder.h"
#include "tools/text_tokens.h"
#include "tools/write_progress_printer.h"

namespace {

struct Options {
  std::string in, out, scheme;
  std::string policy = "uniform";
  double target_bits = 0;
  std::string calib, profile;
  std::string base = "q8_0";
  std::string candidates = "q8_0,q6_k,q5_k,q4_k,q4_0,mxfp4,q3_k,q2_k";
  int64_t calib_tokens = 4096;
  int64_t calib_rows = 256;
  int threads = moe::DefaultThreadCount();
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "moe-quantize: %s\n", message.c_str());
  return 1;
}

int QuantizeGguf(const std::string& in, const std::string& out, const std::string& scheme,
                 int threads) {
  // A model split by gguf-split is read from all its files and written as one.
  auto parts = moe::OpenGgufSplits(in);
  if (!parts.ok()) return Fail(std::string(parts.status().message()));
  const moe::GgufFile* g = parts->front().file.get();
  auto arch = g->GetString("general.architecture");
  if (!arch.ok()) return Fail(std::string(arch.status().message()));
  const int64_t n_layer = static_cast<int64_t>(g->GetUint(*arch + ".block_count").value_or(0));

  moe::GgufWriter w;
  moe::CopyMetadata(*g, w, [](const std::string& key) {
    return key != "general.file_type" && key != "general.alignment" &&
           !absl::StartsWith(key, "split.");
  });
  w.SetU32("general.file_type", moe::LlamaFileType(scheme));
  w.SetU32("general.quantization_version", 2);

  moe::ThreadPool pool(threads);
  std::vector<const moe::GgufTensorInfo*> tensors;
  for (const moe::GgufPart& part : *parts) {
    for (const moe::GgufTensorInfo& t : part.file->tensors()) tensors.push_back(&t);
  }
  for (const moe::GgufTensorInfo* tensor : tensors) {
    const moe::GgufTensorInfo& t = *tensor;
    auto src_type = moe::DTypeFromGgml(t.ggml_type, t.name);
    if (!src_type.ok()) return Fail(std::string(src_type.status().message()));
    const int64_t cols = t.ne[0];
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    if (!moe::RowSizeValid(*src_type, cols) ||
        t.data.size() < moe::RowBytes(*src_type, cols) * rows) {
      return Fail("tensor '" + t.name + "' is truncated or malformed");
    }
    int64_t layer = -1;
    if (absl::StartsWith(t.name, "blk.")) layer = std::atoll(t.name.c_str() + 4);
    // As ggml_n_dims: trailing dimensions of 1 do not count, so [64, 1] is one-dimensional.
    const moe::DType dst = moe::QuantTypeFor(scheme, t.name, cols, layer, n_layer, rows == 1);
    if (absl::Status fits = moe::CheckEncodable(dst, cols); !fits.ok()) {
      return Fail("tensor '" + t.name + "': " + std::string(fits.message()));
    }
    // Encoded as the file is written, one tensor at a time: the output is never held whole.
    const moe::WeightView from{*src_type, rows, cols, t.data.data()};
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    w.AddTensor(t.name, dst, std::move(shape), moe::RowBytes(dst, cols) * rows,
                [from, dst, &pool](absl::Span<uint8_t> out) {
                  return moe::EncodeMatrixInto(from, dst, out, &pool);
                });
  }
  auto s = w.Write(out, moe::cli::PrintWriteProgress("moe-quantize"));
  if (!s.ok()) return Fail(std::string(s.message()));
  std::fprintf(stderr, "moe-quantize: wrote %s (%s)\n", out.c_str(), scheme.c_str());
  return 0;
}

absl::StatusOr<std::vector<moe::DType>> Candidates(const std::string& list) {
  std::vector<moe::DType> out;
  for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    auto t = moe::DTypeFromName(name);
    if (!t || moe::IsRuntimeLayout(*t) || *t == moe::DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is not a weight type to choose"));
    }
    out.push_back(*t);
  }
  if (out.empty()) return absl::InvalidArgumentError("no candidate types");
  return out;
}

// Each routed expert's type by measured sensitivity within the bit target; the rest by --base.
absl::StatusOr<std::function<moe::DType(const moe::TensorSpec&)>> MixedTypes(
    const Options& o, const moe::ModelSpec& spec) {
  MOE_ASSIGN_OR_RETURN(std::vector<moe::DType> candidates, Candidates(o.candidates));
  MOE_ASSIGN_OR_RETURN(auto engine, moe::Engine::FromSpec(spec));
  const moe::HParams& h = spec.hp;
  MOE_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, moe::cli::ReadTextTokens(*engine, o.calib));
  if (static_cast<int64_t>(tokens.size()) > o.calib_tokens) tokens.resize(o.calib_tokens);
  const int64_t window = std::min<int64_t>(h.n_ctx_train > 0 ? h.n_ctx_train : 512, 512);
  MOE_ASSIGN_OR_RETURN(moe::Calibration cal,
                       moe::Calibrate(engine->model(), tokens, window, o.calib_rows, o.threads));
  std::optional<moe::RoutingProfile> profile;
  if (!o.profile.empty()) {
    MOE_ASSIGN_OR_RETURN(profile,
                         moe::RoutingProfile::ReadFile(o.profile, static_cast<int>(h.n_layer),
                                                       static_cast<int>(h.n_expert)));
  }
  auto backend = moe::CreateCpuBackend(o.threads);
  MOE_ASSIGN_OR_RETURN(auto options,
                       moe::MeasureSensitivity(*engine->model(), cal, candidates,
                                               profile ? &profile->counts : nullptr, *backend));
  int64_t expert_params = 0;
  const auto pruned = spec.PrunedMask();
  for (const moe::TensorSpec& t : spec.tensors) {
    if (t.expert >= 0 && !pruned[t.layer][t.expert]) expert_params += t.num_elements();
  }
  const auto budget = static_cast<size_t>(o.target_bits * static_cast<double>(expert_params) / 8);
  MOE_ASSIGN_OR_RETURN(auto chosen, moe::ChooseTypes(options, budget));

  // The chosen mix: experts and bytes per type, and per layer.
  std::map<std::string, std::pair<int, size_t>> mix;
  size_t bytes = 0;
  for (size_t l = 0; l < chosen.size(); ++l) {
    std::map<std::string, int> in_layer;
    for (size_t e = 0; e < chosen[l].size(); ++e) {
      if (chosen[l][e] < 0) continue;
      const moe::TypeOption& opt = options[l][e][chosen[l][e]];
      const std::string name(moe::DTypeName(opt.type));
      ++mix[name].first;
      mix[name].second += opt.bytes;
      bytes += opt.bytes;
      ++in_layer[name];
    }
    if (in_layer.empty()) continue;
    std::string line;
    for (const auto& [name, n] : in_layer) absl::StrAppend(&line, " ", name, " x", n);
    std::printf("layer %zu:%s\n", l, line.c_str());
  }
  for (const auto& [name, v] : mix) {
    std::printf("%-6s %4d experts  %8.2f MiB\n", name.c_str(), v.first, v.second / 1048576.0);
  }
  std::printf("experts: %.3f bits per weight (target %.3f), calibrated on %lld tokens\n",
              8.0 * static_cast<double>(bytes) / static_cast<double>(expert_params), o.target_bits,
              static_cast<long long>(cal.tokens));
  std::map<std::pair<int, int>, moe::DType> expert_type;
  for (size_t l = 0; l < chosen.size(); ++l) {
    for (size_t e = 0; e < chosen[l].size(); ++e) {
      if (chosen[l][e] >= 0) {
        expert_type[{static_cast<int>(l), static_cast<int>(e)}] = options[l][e][chosen[l][e]].type;
      }
    }
  }
  const std::string base = o.base;
  const int64_t n_layer = h.n_layer;
  return [expert_type, base, n_layer](const moe::TensorSpec& t) {
    if (t.expert >= 0) {
      auto it = expert_type.find({t.layer, t.expert});
      if (it != expert_type.end()) return it->second;
    }
    return moe::SchemeTypeFor(base, t, n_layer);
  };
}

absl::Status QuantizeToMoe(const Options& o) {
  // A checkpoint's conversions wait for the write too, unless calibration runs the model.
  const moe::ConvertAt convert_at =
      o.policy == "mixed" ? moe::ConvertAt::kImport : moe::ConvertAt::kWrite;
  absl::StatusOr<moe::ModelSpec> loaded =
      moe::LooksLikeHfCheckpoint(o.in) ? moe::ImportHfCheckpoint(o.in, std::nullopt, convert_at)
                                       : moe::LoadModelSpec(o.in);
  if (!loaded.ok()) return loaded.status();
  std::function<moe::DType(const moe::TensorSpec&)> type_of;
  if (o.policy == "mixed") {
    MOE_ASSIGN_OR_RETURN(type_of, MixedTypes(o, *loaded));
  } else {
    const std::string scheme = o.scheme;
    const int64_t n_layer = loaded->hp.n_layer;
    type_of = [scheme, n_layer](const moe::TensorSpec& t) {
      return moe::SchemeTypeFor(scheme, t, n_layer);
    };
  }
  moe::ThreadPool pool(o.threads);
  MOE_ASSIGN_OR_RETURN(moe::ModelSpec out, moe::ReencodeSpec(*loaded, type_of, &pool));
  MOE_RETURN_IF_ERROR(moe::WriteMoeFile(out, o.out, moe::cli::PrintWriteProgress("moe-quantize")));
  size_t weights = 0;
  for (const moe::TensorSpec& t : out.tensors) weights += t.byte_size();
  std::printf("wrote %s: %.2f MiB of weights\n", o.out.c_str(), weights / 1048576.0);
  return absl::OkStatus();
}

int Run(const Options& o) {
  const bool to_moe = absl::EndsWith(o.out, ".moe");
  if (o.policy == "mixed") {
    if (!to_moe) return Fail("--policy mixed writes .moe (per-expert types): name OUT *.moe");
    if (!(o.target_bits > 0)) return Fail("--policy mixed needs --target-bits");
    if (o.calib.empty()) return Fail("--policy mixed needs a calibration text (--calib)");
    if (!moe::IsQuantScheme(o.base)) return Fail("--base must be a scheme, e.g. q8_0");
  } else if (o.scheme.empty()) {
    return Fail("name a TYPE, or --policy mixed");
  }
  if (!to_moe) return QuantizeGguf(o.in, o.out, o.scheme, o.threads);
  const absl::Status s = QuantizeToMoe(o);
  return s.ok() ? 0 : Fail(std::string(s.message()));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "Re-encodes a model's weights: to GGUF in one scheme, or to .moe in one scheme or "
      "with per-expert types chosen by measured sensitivity.",
      "moe-quantize");
  Options o;
  app.add_option("IN", o.in,
                 "input: .gguf (to GGUF), or .gguf, .moe or a Hugging Face directory "
                 "(to .moe)")
      ->required();
  app.add_option("OUT", o.out, "output .gguf or .moe")->required();
  app.add_option("TYPE", o.scheme,
                 "q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | q2_k | q3_k_m | q4_k | q4_k_m | q5_k | q6_k | "
                 "iq4_nl | "
                 "iq4_xs | f16 | bf16 | mxfp4_moe")
      ->check(CLI::IsMember(moe::QuantSchemeNames()));
  app.add_option("--policy", o.policy,
                 "uniform: TYPE everywhere; mixed: each routed expert's type chosen by its "
                 "measured output error on --calib text, weighted by how often it is routed, to "
                 "meet --target-bits (OUT .moe)")
      ->check(CLI::IsMember({"uniform", "mixed"}));
  app.add_option("--target-bits", o.target_bits,
                 "mixed: average bits per weight of the routed experts")
      ->check(CLI::Range(1.0, 32.0));
  app.add_option("--calib", o.calib, "mixed: calibration text (the model's tokenizer)");
  app.add_option("--profile", o.profile,
                 "mixed: a routing profile (moe-cli profile) whose counts weight each expert's "
                 "error instead of the calibration text's routing");
  app.add_option("--base", o.base,
                 "mixed: the scheme of everything but the routed experts (routers and norms stay "
                 "F32)")
      ->capture_default_str();
  app.add_option("--candidates", o.candidates, "mixed: the types an expert may take")
      ->capture_default_str();
  app.add_option("--calib-tokens", o.calib_tokens, "mixed: at most this many calibration tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  app.add_option("--calib-rows", o.calib_rows,
                 "mixed: routed rows sampled per expert to measure its error")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("-t,--threads", o.threads, "threads (encoding, calibration)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return Run(o);
}
