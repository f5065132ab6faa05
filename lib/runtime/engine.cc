#include "lib/runtime/engine.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/repack.h"
#include "lib/base/available_memory.h"
#include "lib/base/status_macros.h"
#include "lib/import/model_loader.h"
#include "lib/model/arch/architecture.h"
#include "lib/model/forward.h"
#include "lib/runtime/device_placement.h"
#include "lib/runtime/weight_copy.h"

namespace moe {
namespace {

bool IsRoutedExpert(const TensorSpec& t) { return t.expert >= 0; }

// Where each routed expert's matrices lie in the files the spec was mapped from.
absl::StatusOr<std::vector<std::vector<ExpertSource>>> ExpertSources(const ModelSpec& spec) {
  if (spec.source_files.empty()) {
    return absl::UnimplementedError(
        "the expert cache reads experts from the model's files, and these weights come from "
        "none (converted in memory)");
  }
  // The file a tensor's bytes lie in, and where; -1 if none (converted at load).
  auto locate = [&](const TensorSpec& t) -> std::pair<int32_t, uint64_t> {
    for (size_t f = 0; f < spec.source_files.size(); ++f) {
      const ModelSpec::SourceFile& src = spec.source_files[f];
      if (t.data.data() >= src.base && t.data.data() + t.data.size() <= src.base + src.size) {
        return {static_cast<int32_t>(f), static_cast<uint64_t>(t.data.data() - src.base)};
      }
    }
    return {-1, 0};
  };
  const HParams& h = spec.hp;
  std::vector<std::vector<ExpertSource>> sources(h.n_layer, std::vector<ExpertSource>(h.n_expert));
  // Pruned experts are never routed to, other ranks run theirs, and the dense layers that lead
  // DeepSeek- and GLM-style models have none: nothing to read there (an empty source).
  const auto weightless = spec.WeightlessMask();
  const Architecture& arch = ArchitectureOf(spec.arch);
  for (int l = 0; l < h.n_layer; ++l) {
    if (arch.Layer(h, l).ffn != FeedForwardPart::kMixture) continue;
    for (int e = 0; e < h.n_expert; ++e) {
      if (weightless[l][e]) continue;
      ExpertSource& src = sources[l][e];
      for (auto [base, part] : {std::pair{"ffn_gate", &src.gate}, std::pair{"ffn_up", &src.up},
                                std::pair{"ffn_down", &src.down}}) {
        if (part == &src.gate && h.relu_squared_ffn) continue;  // ungated: no gate to read
        const TensorSpec* t = spec.Find(ExpertTensorName(l, e, base));
        if (t == nullptr || t->shape.size() != 2) {
          return absl::InvalidArgumentError(
              absl::StrCat("expert tensor ", ExpertTensorName(l, e, base), " is missing"));
        }
        const auto [file, offset] = locate(*t);
        if (file < 0) {
          return absl::UnimplementedError(absl::StrCat(
              "expert tensor ", t->name,
              " is not stored in the model's files as it is run ("
              "converted at load, e.g. to another type): the expert cache cannot read it from "
              "there; convert the model with moe-convert (or load it without a type) first"));
        }
        *part = ExpertPart{offset, t->dtype, t->shape[0], t->shape[1], file};
      }
    }
  }
  return sources;
}

absl::StatusOr<std::unique_ptr<ExpertStore>> MakeExpertStore(const ModelSpec& spec,
                                                             const LoadOptions& options) {
  MOE_ASSIGN_OR_RETURN(auto sources, ExpertSources(spec));
  // Experts are re-laid on arrival exactly as resident weights are at load.
  const SimdLevel level = ActiveSimdLevel();
  const bool repack = options.repack;
  ExpertLayout layout;
  layout.type = [=](DType t, int64_t rows, int64_t cols) {
    return repack ? RepackedType(t, rows, cols, level) : t;
  };
  layout.relayout = [=](DType t, uint8_t* data, int64_t rows, int64_t cols) {
    if (repack && RepackedType(t, rows, cols, level) != t) RepackRows(t, data, rows, cols, level);
  };
  ExpertStoreOptions so;
  std::optional<ExpertPlacement> placement;
  if (!options.expert_placement_path.empty()) {
    MOE_ASSIGN_OR_RETURN(placement, ExpertPlacement::ReadFile(options.expert_placement_path,
                                                              spec.hp.n_layer, spec.hp.n_expert));
    so.placement = &*placement;
  }
  so.policy = options.expert_eviction;
  so.prefer_direct_io = options.expert_direct_io;
  so.io_threads = options.expert_io_threads;
  so.prefetch = options.expert_prefetch;
  so.experts_per_step = static_cast<size_t>(spec.hp.n_expert_used);
  so.budget_bytes = options.expert_cache_bytes;
  if (options.expert_cache_fraction > 0) {
    if (!(options.expert_cache_fraction <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expert cache fraction ", options.expert_cache_fraction, " is not in (0, 1]"));
    }
    // That fraction of the slots all experts take, in whole slots.
    const size_t slot = ExpertStore::SlotBytes(sources);
    size_t all = 0;  // experts with weights here
    for (const auto& layer : sources) {
      for (const ExpertSource& src : layer) all += src.has_weights();
    }
    so.budget_bytes =
        std::max<size_t>(1, static_cast<size_t>(options.expert_cache_fraction * all)) * slot;
  }
  std::vector<std::string> paths;
  for (const ModelSpec::SourceFile& f : spec.source_files) paths.push_back(f.path);
  return ExpertStore::Create(paths, std::move(sources), layout, so);
}

double MiB(size_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

// Copied weights need room for the KV cache, activations and the allocator besides: a tenth more.
size_t WithHeadroom(size_t bytes) { return bytes + bytes / 10; }

// The expert cache budget that makes copied weights fit the memory the model may take; nullopt
// when they fit resident (or the memory cannot be read). *note says what was decided and why.
absl::StatusOr<std::optional<size_t>> FitToMemory(const ModelSpec& spec, const LoadOptions& o,
                                                  std::string* note) {
  size_t available = o.memory_limit_bytes;
  const char* source = "allowed";
  if (available == 0) {
    std::optional<size_t> system = AvailableMemoryBytes();
    if (!system) return std::nullopt;
    available = *system;
    source = "available";
  }
  size_t weights = 0, dense = 0;
  for (const TensorSpec& t : spec.tensors) {
    weights += t.data.size();
    if (!IsRoutedExpert(t)) dense += t.data.size();
  }
  if (WithHeadroom(weights) <= available) return std::nullopt;
  const std::string need = absl::StrFormat(
      "the weights take %.1f MiB in memory (%.1f MiB with a tenth for the KV cache and "
      "activations), %.1f MiB %s",
      MiB(weights), MiB(WithHeadroom(weights)), MiB(available), source);
  if (o.memory_fit == MemoryFit::kError) {
    return absl::ResourceExhaustedError(absl::StrCat(
        need, ": load it with an expert cache (expert_cache_bytes, --expert-cache) or mapped"));
  }
  if (WithHeadroom(dense) >= available) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s, and even without the routed experts the rest takes %.1f MiB", need,
                        MiB(WithHeadroom(dense))));
  }
  const size_t budget = available / 11 * 10 - dense;  // (dense + budget) * 1.1 <= available
  *note = absl::StrFormat(
      "%s: the routed experts stay in the file, read through an expert cache of %.1f MiB", need,
      MiB(budget));
  return budget;
}

// With expert parallelism: which rank holds each expert, and `spec` cut to this rank's share.
absl::StatusOr<std::unique_ptr<ExpertRanks>> PlaceOnRanks(const LoadOptions& o, ModelSpec* spec) {
  if (o.expert_world == 1 && o.expert_rank == 0) return nullptr;
  if (o.expert_world < 1 || o.expert_rank < 0 || o.expert_rank >= o.expert_world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.expert_rank, " of a world of ", o.expert_world));
  }
  const HParams& h = spec->hp;
  std::vector<bool> routed(h.n_layer);
  for (const TensorSpec& t : spec->tensors) {
    if (t.expert >= 0 && t.layer >= 0 && t.layer < h.n_layer) routed[t.layer] = true;
  }
  std::optional<ExpertRanks> ranks;
  if (o.expert_replicas != 0 && o.expert_rank_profile.empty()) {
    return absl::InvalidArgumentError(
        "replicas of hot experts need a routing profile that says which are hot");
  }
  if (o.expert_rank_profile.empty()) {
    MOE_ASSIGN_OR_RETURN(
        ranks, ExpertRanks::RoundRobin(static_cast<int>(h.n_layer), static_cast<int>(h.n_expert),
                                       o.expert_world, routed));
  } else {
    MOE_ASSIGN_OR_RETURN(
        RoutingProfile profile,
        RoutingProfile::ReadFile(o.expert_rank_profile, static_cast<int>(h.n_layer),
                                 static_cast<int>(h.n_expert)));
    MOE_ASSIGN_OR_RETURN(ranks, ExpertRanks::Balanced(profile, o.expert_world, routed));
    MOE_RETURN_IF_ERROR(ranks->AddReplicas(profile, o.expert_replicas));
  }
  ranks->set_dense_on_root_only(o.dense_on_root_only);
  MOE_RETURN_IF_ERROR(ranks->KeepOwnExperts(o.expert_rank, spec));
  return std::make_unique<ExpertRanks>(*std::move(ranks));
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Engine>> Engine::Load(const std::string& path,
                                                           const LoadOptions& options) {
  auto report = [&](float f) { return !options.progress || options.progress(f); };
  if (!report(0.0f)) return absl::CancelledError("model load cancelled");
  MOE_ASSIGN_OR_RETURN(ModelSpec spec, LoadModelSpec(path));
  if (!report(0.1f)) return absl::CancelledError("model load cancelled");
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<ExpertRanks> ranks, PlaceOnRanks(options, &spec));
  bool expert_cache = options.expert_cache_bytes > 0 || options.expert_cache_fraction > 0 ||
                      !options.expert_placement_path.empty();
  LoadOptions fitted = options;
  // The device first: on a GPU the file is mapped and its blocks kept as stored.
  bool on_device = false;
  std::string device_note = "cpu";
  if (options.device != ComputeDevice::kCpu) {
    const absl::Status available = CudaDeviceAvailable();
    if (available.ok()) {
      on_device = true;
      fitted.use_mmap = true;
      fitted.repack = false;
    } else if (options.device == ComputeDevice::kCuda) {
      // What this machine or build cannot do: UNSUPPORTED through the C ABI.
      return absl::UnimplementedError(
          absl::StrCat("a CUDA device was asked for: ", available.message()));
    } else {
      device_note = absl::StrCat("cpu (", available.message(), ")");
    }
  }
  std::string memory_note;
  if (!fitted.use_mmap && !expert_cache) {
    MOE_ASSIGN_OR_RETURN(std::optional<size_t> budget, FitToMemory(spec, options, &memory_note));
    if (budget) {
      fitted.expert_cache_bytes = *budget;
      expert_cache = true;
    }
  }
  std::unique_ptr<ExpertStore> store;
  if (expert_cache) {
    auto made = MakeExpertStore(spec, fitted);
    if (!made.ok() && !memory_note.empty()) {
      // The cache was the way to fit; without it the model cannot load here.
      return absl::ResourceExhaustedError(
          absl::StrCat(memory_note, ", but ", made.status().message()));
    }
    MOE_ASSIGN_OR_RETURN(store, std::move(made));
  }
  if (!fitted.use_mmap) {
    // Rows are re-laid for the kernels of the level this process runs (RepackedType). With the
    // expert cache, experts stay in the file: the cache reads them from there.
    MOE_RETURN_IF_ERROR(
        CopyWeights(spec, fitted.repack, ActiveSimdLevel(), options.progress,
                    expert_cache ? IsRoutedExpert : std::function<bool(const TensorSpec&)>()));
  }
  MOE_ASSIGN_OR_RETURN(
      std::shared_ptr<Engine> engine,
      Build(std::move(spec), std::move(store), std::move(memory_note), std::move(ranks)));
  engine->device_note_ = std::move(device_note);
  if (on_device) MOE_RETURN_IF_ERROR(engine->UploadToDevice(options));
  if (!options.expert_warmup_path.empty()) {
    MOE_RETURN_IF_ERROR(engine->Warm(options.expert_warmup_path).status());
  }
  if (!report(1.0f)) return absl::CancelledError("model load cancelled");
  return std::shared_ptr<const Engine>(std::move(engine));
}

absl::Status Engine::UploadToDevice(const LoadOptions& options) {
  std::vector<HostTensor> tensors;
  for (const TensorSpec& t : model_->spec().tensors) {
    if (t.shape.size() < 2) continue;  // 1-D tensors run from the model's F32 copies (below)
    // Experts behind the expert cache are read into host memory as steps need them and run on
    // the CPU; their bytes in the mapped file are not the ones the kernels are handed.
    if (expert_store_ != nullptr && t.expert >= 0) continue;
    HostTensor h;
    h.data = t.data.data();
    h.bytes = t.data.size();
    h.dtype = t.dtype;
    h.cols = t.shape.back();
    h.rows = t.num_elements() / std::max<int64_t>(h.cols, 1);
    h.routed_expert = t.expert >= 0;
    h.layer = t.layer;
    h.expert = t.expert;
    tensors.push_back(h);
  }
  // With a routing profile, the experts that take the most tokens take the device first.
  if (!options.expert_warmup_path.empty()) {
    const HParams& hp = model_->hp();
    MOE_ASSIGN_OR_RETURN(
        RoutingProfile profile,
        RoutingProfile::ReadFile(options.expert_warmup_path, static_cast<int>(hp.n_layer),
                                 static_cast<int>(hp.n_expert)));
    OrderExpertsForDevice(profile, &tensors);
  }
  for (const std::vector<float>& v : model_->vectors()) {
    tensors.push_back({reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float),
                       DType::kF32, 1, static_cast<int64_t>(v.size()), false});
  }
  DeviceWeightsOptions o;
  o.device = options.device_index;
  o.budget_bytes = options.device_memory_bytes;
  MOE_ASSIGN_OR_RETURN(device_weights_, UploadWeights(tensors, o));
  const DeviceWeightsInfo& info = device_weights_->info();
  device_note_ = absl::StrFormat("cuda:%d %s (%.1f MiB of weights", options.device_index,
                                 info.device_name, MiB(info.bytes));
  if (info.expert_matrices_on_host > 0) {
    absl::StrAppendFormat(&device_note_, "; %d of %d routed expert matrices on the CPU",
                          info.expert_matrices_on_host,
                          info.expert_matrices_on_host + info.expert_matrices_on_device);
  }
  if (expert_store_ != nullptr) absl::StrAppend(&device_note_, "; cached experts on the CPU");
  absl::StrAppend(&device_note_, ")");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> Engine::CreateBackend(int cpu_threads) const {
  if (device_weights_ != nullptr) return CreateCudaBackend(device_weights_, cpu_threads);
  return CreateCpuBackend(cpu_threads);
}

absl::StatusOr<std::shared_ptr<const Engine>> Engine::FromSpec(
    ModelSpec spec, std::unique_ptr<ExpertStore> expert_store, std::string memory_note,
    std::unique_ptr<ExpertRanks> expert_ranks) {
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine,
                       Build(std::move(spec), std::move(expert_store), std::move(memory_note),
                             std::move(expert_ranks)));
  return std::shared_ptr<const Engine>(std::move(engine));
}

absl::StatusOr<std::shared_ptr<Engine>> Engine::Build(ModelSpec spec,
                                                      std::unique_ptr<ExpertStore> expert_store,
                                                      std::string memory_note,
                                                      std::unique_ptr<ExpertRanks> expert_ranks) {
  MOE_RETURN_IF_ERROR(MaterializeTensors(spec));  // a converter's deferred tensors, if any
  if (expert_ranks != nullptr && expert_ranks->dense_on_root_only() &&
      spec.hp.expert_input_weighted) {
    // Rank 0 would send each layer's inputs and choices, not the weights these experts' inputs
    // carry (Llama 4); every rank builds its engine here, so every rank refuses.
    return absl::UnimplementedError(
        "dense weights on rank 0 alone (dense_on_root_only) for a model whose router weights "
        "scale the experts' inputs (llama4): load every rank alike");
  }
  auto engine = std::make_shared<Engine>();
  engine->expert_store_ = std::move(expert_store);
  engine->expert_ranks_ = std::move(expert_ranks);
  engine->memory_note_ = std::move(memory_note);
  if (!spec.tokenizer.tokens.empty()) {
    // Checked now: the vocabulary is released below, before Model::Create checks it again.
    MOE_RETURN_IF_ERROR(ValidateModelSpec(spec));
    auto tok = Tokenizer::Create(spec.tokenizer);
    if (tok.ok()) {
      engine->tokenizer_ = *std::move(tok);
    } else {
      engine->tokenizer_error_ = tok.status();
    }
    // The tokenizer keeps its own tables; the spec's copy of every token and merge would hold
    // the same strings a second time for the model's life (megabytes for a large vocabulary).
    ReleaseVocabulary(spec.tokenizer);
  } else {
    engine->tokenizer_error_ = absl::UnimplementedError("the model file has no tokenizer");
  }
  engine->params_ = CountParams(spec);
  for (const auto& t : spec.tensors) {
    if (t.expert < 0) engine->dense_params_ += t.num_elements();
  }
  for (const auto& t : spec.absent_dense) engine->dense_params_ += t.num_elements();
  MOE_ASSIGN_OR_RETURN(engine->model_, Model::Create(std::move(spec)));
  return engine;
}

absl::StatusOr<size_t> Engine::Warm(const std::string& path) const {
  const HParams& h = model_->hp();
  MOE_ASSIGN_OR_RETURN(
      RoutingProfile profile,
      RoutingProfile::ReadFile(path, static_cast<int>(h.n_layer), static_cast<int>(h.n_expert)));
  if (expert_store_ == nullptr) return 0;
  return expert_store_->Warm(profile);
}

void Engine::PrepareTransformer(Transformer* transformer, const RoutingPolicy& routing) const {
  transformer->set_routing_policy(routing);
  transformer->set_expert_store(expert_store_.get());
  transformer->set_expert_prefetch(expert_store_ != nullptr && expert_store_->prefetch());
}

double Engine::ActiveParamsPerToken(const Telemetry& t) const {
  if (t.tokens == 0) return 0;
  return dense_params_ + static_cast<double>(t.active_params) / t.tokens;
}

absl::StatusOr<const Tokenizer*> Engine::RequireTokenizer() const {
  if (tokenizer_) return tokenizer_.get();
  return Annotate(tokenizer_error_, "text input needs a tokenizer");
}

}  // namespace moe
