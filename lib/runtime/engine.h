// An Engine is a loaded model plus its tokenizer: immutable once loaded, shared by any number of
// Sessions on any threads.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/backend/backend.h"
#include "lib/backend/cuda_backend.h"
#include "lib/dist/expert_ranks.h"
#include "lib/model/model.h"
#include "lib/model/telemetry.h"
#include "lib/moe/expert_store.h"
#include "lib/moe/router.h"
#include "lib/tokenizer/tokenizer.h"

namespace moe {

class Transformer;

// What a load does when the weights copied into memory would not fit in the memory available.
enum class MemoryFit {
  kCacheExperts,  // experts stay in the file, read through an expert cache sized to what fits
  kError,         // the load fails (ResourceExhausted), naming the bytes
};

// Where a model's forward passes run (issue 21).
enum class ComputeDevice {
  kCpu,
  kCuda,  // a CUDA device; the load fails, saying why, when none can be used
  kAuto,  // a CUDA device when one can be used, the CPU otherwise (Engine::device_note says which)
};

struct LoadOptions {
  // false: weights are copied once into anonymous memory (huge pages where allowed): steady full
  // speed. true: they stay in the mapped file: instant start, shared page cache.
  bool use_mmap = false;
  // With copied weights: re-lay Q8_0/Q4_0 rows for the AVX-512 decode kernels (repack.h) when
  // this CPU runs them. Same bytes, same results.
  bool repack = true;
  // Called with progress in [0, 1]; returning false cancels the load (Cancelled).
  std::function<bool(float)> progress;
  // The expert cache (issue 16's disk tier): when either is set, routed experts are not loaded
  // with the rest but read from the model file into a cache of this many bytes, or of this
  // fraction of all expert bytes (0 < f <= 1), as steps need them. .moe and GGUF files, and
  // Hugging Face checkpoints whose experts are stored as they run (one matrix per expert, read
  // from whichever shard holds it; gpt-oss's stacked experts are converted, so refused).
  size_t expert_cache_bytes = 0;
  double expert_cache_fraction = 0;
  EvictionPolicy expert_eviction = EvictionPolicy::kLru;
  bool expert_direct_io = true;  // false: buffered reads even where direct I/O works
  int expert_io_threads = 2;     // threads reading experts (ExpertStoreOptions::io_threads)
  // While a layer runs, read the next layer's likely experts (its router on the current hidden
  // state) ahead of need. Changes no result.
  bool expert_prefetch = true;
  // A placement file (lib/moe/expert_placement.h): experts resident (outside the budget) or
  // pinned (inside it), read at load; the others cached. Turns the expert cache on by itself.
  std::string expert_placement_path;
  // A routing profile (lib/moe/routing_profile.h): with the expert cache, its hottest experts are
  // read at load into the cache's free slots (Engine::Warm). Checked, and nothing more, when
  // every expert is resident.
  std::string expert_warmup_path;
  // The memory the model may take; 0: what the system has available at load (MemAvailable, or
  // the cgroup's limit if lower). Checked for copied weights only (not use_mmap), and only when
  // no expert cache is asked for.
  size_t memory_limit_bytes = 0;
  MemoryFit memory_fit = MemoryFit::kCacheExperts;
  // Expert parallelism (lib/runtime/expert_parallel.h): this process is rank expert_rank of
  // expert_world and holds the non-expert weights and only the routed experts placed on it
  // (ExpertRanks: round robin, or balanced by the routing profile at expert_rank_profile). The
  // memory checks and the expert cache then concern those experts only.
  int expert_world = 1;
  int expert_rank = 0;
  std::string expert_rank_profile;
  // With expert_rank_profile: each routed layer's this many most chosen experts get a second
  // holder, which takes half of their tokens (ExpertRanks::AddReplicas).
  int expert_replicas = 0;
  // The non-expert weights on rank 0 only (ExpertRanks::dense_on_root_only): the other ranks
  // hold their experts and nothing else, and each MoE layer's inputs travel to them.
  bool dense_on_root_only = false;
  // The device (issue 21). On a CUDA device the weights are uploaded once, in the blocks they are
  // stored in (no re-laying for the CPU), and the file is mapped rather than copied: the host
  // keeps only what the device does not hold. device_memory_bytes bounds the device memory the
  // weights take (0: its free memory less a reserve for activations and K/V); the routed experts
  // that do not fit stay in host memory and run on the CPU, on their tokens' rows copied over.
  ComputeDevice device = ComputeDevice::kCpu;
  int device_index = 0;
  size_t device_memory_bytes = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::shared_ptr<const Engine>> Load(const std::string& path,
                                                            const LoadOptions& options);
  // expert_store: where the routed experts come from instead of the spec's resident copies;
  // memory_note: what the load decided for lack of memory (memory_note()); expert_ranks: which
  // rank holds each expert when `spec` is one rank's share (expert_ranks()).
  static absl::StatusOr<std::shared_ptr<const Engine>> FromSpec(
      ModelSpec spec, std::unique_ptr<ExpertStore> expert_store = nullptr,
      std::string memory_note = "", std::unique_ptr<ExpertRanks> expert_ranks = nullptr);

  const std::shared_ptr<const Model>& model() const { return model_; }
  // Null when the model file carries no (supported) tokenizer.
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  absl::StatusOr<const Tokenizer*> RequireTokenizer() const;
  const ParamCounts& params() const { return params_; }
  // The expert store when experts come from the disk tier; null when they are all resident.
  ExpertStore* expert_store() const { return expert_store_.get(); }
  // Parameters every token reads whatever the routing (everything but the routed experts).
  int64_t dense_params() const { return dense_params_; }
  // Mean parameters a token of `t` actually touched: everything dense plus the routed experts
  // it chose (0 before any token).
  double ActiveParamsPerToken(const Telemetry& t) const;
  // Reads the routing profile at `path` and fills the expert cache's free slots with its hottest
  // experts; returns how many were read (0 when every expert is resident: nothing to warm).
  absl::StatusOr<size_t> Warm(const std::string& path) const;

  // What the load decided because of the memory available (empty when the model simply fit).
  const std::string& memory_note() const { return memory_note_; }
  // Sets up a forward pass over this engine's model: the routing policy, and the routed experts
  // from the engine's expert store (with its read-ahead) when it has one.
  void PrepareTransformer(Transformer* transformer, const RoutingPolicy& routing) const;

  // Which rank holds each routed expert when loaded for expert parallelism; null otherwise.
  const ExpertRanks* expert_ranks() const { return expert_ranks_.get(); }

  // A backend for a session over this model: the CUDA backend when the weights are on a device,
  // the CPU backend (cpu_threads threads; <= 0: one per core) otherwise.
  absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(int cpu_threads) const;
  // The device's copy of the weights; null on the CPU.
  const DeviceWeights* device_weights() const { return device_weights_.get(); }
  // Where the forward passes run and why ("cpu", or the device with what it holds, or why the
  // device asked for was not used).
  const std::string& device_note() const { return device_note_; }

 private:
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  absl::Status tokenizer_error_;
  ParamCounts params_;
  int64_t dense_params_ = 0;
  std::string memory_note_;
  std::unique_ptr<ExpertStore> expert_store_;  // internally synchronized: shared by sessions
  std::unique_ptr<ExpertRanks> expert_ranks_;
  std::shared_ptr<const DeviceWeights> device_weights_;
  static absl::StatusOr<std::shared_ptr<Engine>> Build(ModelSpec spec,
                                                       std::unique_ptr<ExpertStore> expert_store,
                                                       std::string memory_note,
                                                       std::unique_ptr<ExpertRanks> expert_ranks);
  // Uploads the model's weights to the device options name.
  absl::Status UploadToDevice(const LoadOptions& options);
  std::string device_note_ = "cpu";
};

}  // namespace moe
