#include "lib/runtime/expert_parallel.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"
#include "lib/kv/kv_cache.h"
#include "lib/model/forward.h"
#include "lib/moe/routing_history.h"
#include "lib/runtime/session.h"

namespace moe {
namespace {

// Orders travel between builds of the same library on every rank: plain little-endian fields.
enum class Order : uint8_t {
  kOpen = 1,
  kStep = 2,
  kClose = 3,
  kStop = 4,
  kLayer = MixtureFeedForward::kLayerOrder,  // dense weights on rank 0: one MoE layer's inputs
};
constexpr uint32_t kProtocol = 1;
static_assert(std::is_trivially_copyable_v<RoutingPolicy>, "sent as bytes");

class Writer {
 public:
  explicit Writer(Order order) { Put(static_cast<uint8_t>(order)); }
  template <typename T>
  void Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <typename T>
  void PutAll(absl::Span<const T> values) {
    Put(static_cast<uint64_t>(values.size()));
    for (const T& v : values) Put(v);
  }
  std::vector<uint8_t> Take() const { return std::vector<uint8_t>(bytes_.begin(), bytes_.end()); }

 private:
  std::string bytes_;  // (a string: GCC 12 misreads a growing byte vector as an overflow)
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  template <typename T>
  absl::Status Get(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (at_ + sizeof(T) > bytes_.size()) return Short();
    std::memcpy(v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status GetAll(std::vector<T>* values) {
    uint64_t n = 0;
    MOE_RETURN_IF_ERROR(Get(&n));
    if (n > (bytes_.size() - at_) / sizeof(T)) return Short();
    values->resize(n);
    for (T& v : *values) MOE_RETURN_IF_ERROR(Get(&v));
    return absl::OkStatus();
  }

 private:
  static absl::Status Short() {
    return absl::DataLossError("a truncated order from rank 0 (the ranks run different builds?)");
  }
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
};

// What identifies the model: every rank must run the same one.
struct ModelShape {
  int64_t n_layer, n_expert, n_vocab, n_embd;
  bool operator==(const ModelShape& o) const {
    return n_layer == o.n_layer && n_expert == o.n_expert && n_vocab == o.n_vocab &&
           n_embd == o.n_embd;
  }
};
ModelShape ShapeOf(const Model& model) {
  const HParams& h = model.hp();
  return {h.n_layer, h.n_expert, h.n_vocab, h.n_embd};
}

// Disabled experts as (layer, expert) pairs.
std::vector<int32_t> MaskPairs(const std::vector<std::vector<bool>>& disabled) {
  std::vector<int32_t> pairs;
  for (size_t l = 0; l < disabled.size(); ++l) {
    for (size_t e = 0; e < disabled[l].size(); ++e) {
      if (disabled[l][e]) {
        pairs.push_back(static_cast<int32_t>(l));
        pairs.push_back(static_cast<int32_t>(e));
      }
    }
  }
  return pairs;
}

// A serving rank's mirror of the driving session.
struct MirrorSession {
  MirrorSession(std::unique_ptr<Backend> b, KvCache c)
      : backend(std::move(b)), cache(std::move(c)) {}
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Transformer> transformer;
  KvCache cache;
  RoutingHistory routing_history;
  bool keeps_history = false;
  std::vector<float> no_logits;
};

// The last layer with routed experts (-1: none): after it, a step's layer messages are done.
int LastMixtureLayer(const Model& model) {
  int last = -1;
  for (size_t l = 0; l < model.layers().size(); ++l) {
    if (model.layers()[l].parts.ffn == FeedForwardPart::kMixture) last = static_cast<int>(l);
  }
  return last;
}

class Server {
 public:
  Server(std::shared_ptr<const Engine> engine, Communicator* comm, const ServeOptions& options)
      : engine_(std::move(engine)), comm_(comm), options_(options) {}

  absl::Status Run() {
    const bool experts_only = engine_->expert_ranks()->dense_on_root_only();
    for (;;) {
      std::vector<uint8_t> order;
      // Rank 0 may be idle between steps for as long as it likes, not within one.
      MOE_RETURN_IF_ERROR(
          comm_->Broadcast(0, &order, mid_step_ ? comm_->timeout() : options_.idle_timeout));
      Reader in(order);
      uint8_t kind = 0;
      MOE_RETURN_IF_ERROR(in.Get(&kind));
      const Order what = static_cast<Order>(kind);
      if (what != Order::kStop && (what == Order::kLayer) != experts_only) {
        return absl::FailedPreconditionError(
            experts_only ? "rank 0 runs the dense weights on every rank, but this rank loaded "
                           "only its experts: load every rank alike (dense_on_root_only)"
                         : "rank 0 keeps the dense weights to itself, but this rank loaded them "
                           "too: load every rank alike (dense_on_root_only)");
      }
      switch (what) {
        case Order::kOpen:
          MOE_RETURN_IF_ERROR(Open(in));
          break;
        case Order::kStep:
          MOE_RETURN_IF_ERROR(Step(in));
          break;
        case Order::kClose:
          session_.reset();
          break;
        case Order::kLayer:
          MOE_RETURN_IF_ERROR(ServeLayer(order));
          break;
        case Order::kStop:
          return absl::OkStatus();
        default:
          return absl::DataLossError(absl::StrCat("an unknown order ", kind, " from rank 0"));
      }
    }
  }

 private:
  // Dense weights on rank 0: this rank runs its experts over each MoE layer rank 0 sends.
  absl::Status ServeLayer(const std::vector<uint8_t>& message) {
    if (layer_server_ == nullptr) {
      layer_server_ = std::make_unique<LayerServer>(CreateCpuBackend(options_.threads));
      layer_server_->mixture.set_expert_parallel(comm_, engine_->expert_ranks());
      layer_server_->mixture.set_expert_store(engine_->expert_store());
      layer_server_->mixture.set_expert_prefetch(false);  // the next layer's router is on rank 0
      last_layer_ = LastMixtureLayer(*engine_->model());
    }
    MOE_ASSIGN_OR_RETURN(const int layer, layer_server_->mixture.ServeLayer(
                                              *layer_server_->backend, *engine_->model(), message));
    mid_step_ = layer != last_layer_;
    return absl::OkStatus();
  }

  struct LayerServer {
    explicit LayerServer(std::unique_ptr<Backend> b) : backend(std::move(b)) {}
    std::unique_ptr<Backend> backend;
    MixtureFeedForward mixture;
  };
  std::unique_ptr<LayerServer> layer_server_;
  int last_layer_ = -1;
  bool mid_step_ = false;

  absl::Status Open(Reader& in) {
    uint32_t protocol = 0;
    ModelShape shape{};
    int64_t n_ctx = 0;
    SessionOptions so;
    MOE_RETURN_IF_ERROR(in.Get(&protocol));
    if (protocol != kProtocol) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank 0 speaks protocol ", protocol, ", this rank ", kProtocol));
    }
    MOE_RETURN_IF_ERROR(in.Get(&shape));
    MOE_RETURN_IF_ERROR(in.Get(&n_ctx));
    MOE_RETURN_IF_ERROR(in.Get(&so.kv_type));
    MOE_RETURN_IF_ERROR(in.Get(&so.n_batch));
    MOE_RETURN_IF_ERROR(in.Get(&so.routing));
    const Model& model = *engine_->model();
    if (!(shape == ShapeOf(model))) {
      return absl::FailedPreconditionError(
          "rank 0 runs a model of another shape: every rank must load the same model file");
    }
    so.n_ctx = n_ctx;
    std::unique_ptr<Backend> backend = CreateCpuBackend(options_.threads);
    MOE_ASSIGN_OR_RETURN(KvCache cache, CreateSessionCache(model, so, *backend));
    auto s = std::make_unique<MirrorSession>(std::move(backend), std::move(cache));
    s->transformer = std::make_unique<Transformer>(engine_->model(), s->backend.get());
    engine_->PrepareTransformer(s->transformer.get(), so.routing);
    s->transformer->set_expert_parallel(comm_, engine_->expert_ranks());
    s->keeps_history = so.routing.load_window > 0;
    session_ = std::move(s);
    return absl::OkStatus();
  }

  absl::Status Step(Reader& in) {
    if (session_ == nullptr) return absl::DataLossError("a step from rank 0 without a session");
    MirrorSession& s = *session_;
    int64_t n_keep = 0;
    uint8_t mask_changed = 0;
    std::vector<int32_t> pairs, tokens;
    MOE_RETURN_IF_ERROR(in.Get(&n_keep));
    MOE_RETURN_IF_ERROR(in.Get(&mask_changed));
    if (mask_changed) {
      MOE_RETURN_IF_ERROR(in.GetAll(&pairs));
      const HParams& h = engine_->model()->hp();
      std::vector<std::vector<bool>> disabled(h.n_layer, std::vector<bool>(h.n_expert));
      for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
        if (pairs[i] < 0 || pairs[i] >= h.n_layer || pairs[i + 1] < 0 ||
            pairs[i + 1] >= h.n_expert) {
          return absl::DataLossError("rank 0 switched off an expert the model does not have");
        }
        disabled[pairs[i]][pairs[i + 1]] = true;
      }
      s.transformer->set_disabled_experts(std::move(disabled));
    }
    MOE_RETURN_IF_ERROR(in.GetAll(&tokens));
    if (n_keep < 0 || n_keep > s.cache.size()) {
      return absl::DataLossError(absl::StrCat("rank 0 continues from token ", n_keep,
                                              " of a context holding ", s.cache.size()));
    }
    s.cache.set_size(n_keep);
    if (n_keep == 0) s.routing_history.Clear();
    return s.transformer->Forward(tokens, s.cache, LogitsFor::kNone, &s.no_logits, nullptr,
                                  s.keeps_history ? &s.routing_history : nullptr);
  }

  std::shared_ptr<const Engine> engine_;
  Communicator* comm_;
  ServeOptions options_;
  std::unique_ptr<MirrorSession> session_;
};

}  // namespace

absl::Status StepDriver::Open(const SessionOptions& options, int64_t n_ctx) {
  // With the dense weights on rank 0 alone the others keep no session: the layers tell them.
  if (!mirrored_) return broken_;
  Writer out(Order::kOpen);
  out.Put(kProtocol);
  out.Put(ShapeOf(model_));
  out.Put(n_ctx);
  out.Put(options.kv_type);
  out.Put(options.n_batch);
  out.Put(options.routing);
  sent_disabled_.clear();
  return Send(out.Take());
}

absl::Status StepDriver::Step(int64_t n_keep, absl::Span<const int32_t> tokens,
                              const std::vector<std::vector<bool>>& disabled) {
  if (!mirrored_) return broken_;
  Writer out(Order::kStep);
  out.Put(n_keep);
  const bool mask_changed = disabled != sent_disabled_;
  out.Put(static_cast<uint8_t>(mask_changed));
  if (mask_changed) out.PutAll<int32_t>(MaskPairs(disabled));
  out.PutAll(tokens);
  MOE_RETURN_IF_ERROR(Send(out.Take()));
  sent_disabled_ = disabled;
  return absl::OkStatus();
}

absl::Status StepDriver::Close() {
  if (!mirrored_) return broken_;
  return Send(Writer(Order::kClose).Take());
}

void StepDriver::Break(const absl::Status& why) {
  if (broken_.ok()) {
    broken_ = absl::FailedPreconditionError(
        absl::StrCat("the ranks are out of step after an error: ", why.message()));
  }
}

absl::Status StepDriver::Send(std::vector<uint8_t> order) {
  MOE_RETURN_IF_ERROR(broken_);
  absl::Status s = comm_->Broadcast(0, &order, comm_->timeout());
  if (!s.ok()) Break(s);
  return s;
}

absl::Status ServeExpertParallel(std::shared_ptr<const Engine> engine, Communicator* comm,
                                 const ServeOptions& options) {
  if (engine == nullptr || comm == nullptr) return absl::InvalidArgumentError("no model or world");
  if (comm->rank() == 0) {
    return absl::FailedPreconditionError(
        "rank 0 drives (a Session over the world); it does not serve");
  }
  if (engine->expert_ranks() == nullptr || engine->expert_ranks()->world() != comm->size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the model was not loaded for expert parallelism over ", comm->size(),
                     " ranks (LoadOptions::expert_world)"));
  }
  return Server(std::move(engine), comm, options).Run();
}

absl::Status StopExpertParallelServers(Communicator* comm) {
  if (comm == nullptr || comm->rank() != 0) {
    return absl::FailedPreconditionError("only rank 0 stops the serving ranks");
  }
  std::vector<uint8_t> order = Writer(Order::kStop).Take();
  // Serving ranks wait for orders, so a world in step takes this at once; one a rank left
  // should not hold the process for a whole timeout more as it ends.
  return comm->Broadcast(0, &order, std::min(comm->timeout(), std::chrono::milliseconds(5000)));
}

}  // namespace moe
