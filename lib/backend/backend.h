// The compute backend interface. The forward pass is written once against it; the CPU backend
// (lib/backend/cpu) implements it today, a CUDA backend (lib/backend/cuda + kernels/) will
// implement the same calls over device memory.
//
// Activations are F32 matrices [n x dim], row-major. Data pointers (activations, K/V, outputs)
// are in the backend's memory space: memory from Allocate, or host memory for the CPU backend.
// Index and bookkeeping arguments (positions, token ids, row lists, the combine's source pointers
// and weights) are host memory, read by the backend as it queues the operation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "lib/backend/kv_core.h"
#include "lib/backend/memory_space.h"
#include "lib/backend/rope_core.h"
#include "lib/backend/weight_view.h"
#include "lib/moe/route_token.h"

namespace moe {

// The activation of a feed-forward block: SwiGLU's silu(g) * u, gpt-oss's clamped form
// min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1), or Nemotron-H's ungated
// relu(u)^2 (the block has no gate matrix).
enum class GatedActivation { kSilu, kSwigluClamped, kReluSquared };

struct AttentionOptions {
  float scale = 0.f;  // of the scores; 0: 1 / sqrt(head_dim)
  // Sliding window: a query at position p sees keys p - window < p' <= p; 0: all before it.
  int64_t window = 0;
  // Attention sinks: per query head one logit (not scaled) that joins each softmax's
  // normalisation without a value; null: none.
  const float* sinks = nullptr;
  // The window is a chunk instead: a query at p sees keys p - p % window <= p' <= p (Llama 4).
  bool chunked = false;
};

// One layer's K/V storage as attention sees it: [n_ctx x n_kv_heads x head_dim] each.
struct KvLayerView {
  DType dtype;  // F32, F16 or Q8_0 (a row of each KV head starts on a block)
  uint8_t* k;
  uint8_t* v;
  int64_t n_kv_heads;
  int64_t head_dim;
  KvPaging paging;  // where each KV head's row of a position is (kv_core.h)
  // A convolution layer's carried slots (KvLayerRows::Convolution), F32, slot_floats each: the
  // block of the paging holding position p names in state_table[p >> paging.block_shift] the
  // slot that ends holding what follows that block's last position written so far: first the
  // recurrent state (state_floats values; Mamba-2, a gated delta net), then a ring of the last
  // conv_rows rows of the convolution's input (head_dim values each, position p's at p mod
  // conv_rows). Null: the layer carries nothing.
  uint8_t* state = nullptr;
  const int32_t* state_table = nullptr;
  int64_t state_floats = 0;
  int64_t conv_rows = 0;
  int64_t slot_floats = 0;

  float* StateOfBlock(int64_t block) const {
    return reinterpret_cast<float*>(state) + state_table[block] * slot_floats;
  }
  // Row p of the ring in the slot of `block`.
  float* ConvRow(int64_t block, int64_t p) const {
    return StateOfBlock(block) + state_floats + (p % conv_rows) * head_dim;
  }
};

class Backend : public MemorySpace {
 public:
  virtual ~Backend() = default;
  virtual absl::string_view name() const = 0;
  virtual int num_threads() const = 0;

  // Allocate, Free and Zero (MemorySpace) give memory in the backend's space: host memory on the
  // CPU, device memory on a GPU. BackendBuffer (backend_buffer.h) holds it for RAII.
  // Whether operations may also take host memory as their inputs and outputs (the CPU backend,
  // whose space is the host's): then a result the host reads is written where it reads it, not
  // copied there (the logits: 0.8 MB a token with gpt-oss's 201k vocabulary).
  virtual bool works_in_host_memory() const { return false; }
  // Between host memory and the backend's; both return once the bytes are in place, after every
  // operation queued before them.
  virtual void CopyToHost(const void* src, size_t bytes, void* host) = 0;
  virtual void CopyFromHost(const void* host, size_t bytes, void* dst) = 0;
  // The first failure of an operation since the last call (OK: none). A device backend queues
  // operations and learns of a failed one later; the forward pass asks at the end of each step,
  // so a failure is an error of that step, never a silent wrong result.
  virtual absl::Status TakeError() { return absl::OkStatus(); }
  // dst[t * dst_stride + i] = src[t * src_stride + i] for t < n, i < len (floats; the two ranges
  // do not overlap): a column slice of rows, or a row moved within a matrix.
  virtual void CopyRows(const float* src, int64_t src_stride, int64_t n, int64_t len, float* dst,
                        int64_t dst_stride) = 0;

  // y[t, r] = sum_c w[r, c] * x[t, c], t < n. Rows of w are read once for all n tokens.
  virtual void MatMul(const WeightView& w, const float* x, int64_t n, float* y) = 0;

  // Several products of one input (Q, K and V; a router and a shared expert's gate) in one
  // parallel pass: ys[i][t, r] = ws[i] row r . x[t], plus biases[i][r] where biases names one
  // (an empty span: none). The bias is added to each row as it is made, not in a pass of its own.
  virtual void MatMulShared(absl::Span<const WeightView> ws, const float* x, int64_t n,
                            absl::Span<float* const> ys, absl::Span<const float* const> biases) = 0;

  // Hints, with no effect on any result: the next product (MatMul, MatMulShared) reads ws for n
  // tokens, or the next RunExperts the gate and up matrices of gate_up (gate, up of each expert
  // in turn) for a step of n tokens. A backend whose threads wait while the caller works
  // between operations may have them start reading their shares of those weights, so that a
  // product bound by the memory does not start on a cold one. Every product clears the hints
  // before it runs.
  virtual void PrefetchProducts(absl::Span<const WeightView> /*ws*/, int64_t /*n*/) {}
  virtual void PrefetchExperts(absl::Span<const WeightView> /*gate_up*/, int64_t /*n*/) {}

  // SwiGLU feed-forward blocks over groups of token rows: for each job,
  // out[i] = down(silu(gate x_i) * up x_i) for its m rows x_i (or the job's other activation).
  // All jobs run together, so the experts a batch selected cost two parallel passes, not three
  // per expert.
  struct ExpertJob {
    // [ff x d], [ff x d], [d x ff]; gate empty for an ungated activation (kReluSquared).
    WeightView gate, up, down;
    // x_i = in[i] ([m x d]), or where rows is set, in[rows[i]]: the routed experts of a batch
    // name their tokens in the batch's input, which they all share, so the backend prepares
    // that input once (CPU: quantizes each token once, not once per expert that took it).
    const float* in;
    const int32_t* rows = nullptr;
    int64_t m;
    float* out;  // [m x d]
    // Optional biases of the three products ([ff], [ff], [d]) and the gated activation.
    const float* gate_bias = nullptr;
    const float* up_bias = nullptr;
    const float* down_bias = nullptr;
    GatedActivation activation = GatedActivation::kSilu;
  };
  virtual void RunExperts(absl::Span<const ExpertJob> jobs) = 0;

  // y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, for n rows of length dim (in place allowed);
  // weight null: none (Llama 4's QK L2 norm).
  virtual void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                       float* y) = 0;

  // Rotates n rows of n_heads x head_dim in place; row t is at position positions[t].
  virtual void Rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim,
                    const int32_t* positions, const RopeParams& rope) = 0;

  // Writes n rows of K and V (n_kv_heads x head_dim each) at positions into the cache.
  virtual void StoreKv(const float* k, const float* v, int64_t n, const int32_t* positions,
                       const KvLayerView& kv) = 0;

  // A short convolution (LFM2) over one sequence's n consecutive positions from positions[0]:
  // bcx holds each row's B, C and X parts (in that order, dim = state.head_dim values each), and
  // row(p) = B * X of position p. y[t, c] = C[t, c] * sum_k kernel[c * kernel_len + k] *
  // row(positions[t] - kernel_len + 1 + k)[c], rows before position 0 being zero and those before
  // the step read from the ring `state` carries (KvLayerView::ConvRow, kernel_len - 1 rows); the
  // step's rows are then carried in the ring of each block's slot.
  virtual void ShortConv(const float* bcx, int64_t n, const int32_t* positions, const float* kernel,
                         int64_t kernel_len, const KvLayerView& state, float* y) = 0;

  // Mamba-2's causal convolution (and a gated delta net's, without bias: null) over one
  // sequence's n consecutive positions: row(p) is row t of xbc for the step's positions
  // (state.head_dim floats, rows xbc_stride apart), else the carried ring's, as ShortConv's;
  // out[t, c] = silu(bias[c] + sum_k kernel[c * kernel_len + k] * row(positions[t] - kernel_len
  // + 1 + k)[c]), rows before position 0 being zero (ssm_core.h).
  virtual void SsmConv(const float* xbc, int64_t xbc_stride, int64_t n, const int32_t* positions,
                       const float* kernel, const float* bias, int64_t kernel_len,
                       const KvLayerView& state, float* out) = 0;

  // Mamba-2's selective scan over one sequence's n consecutive positions, each head's state
  // carried in `state` (KvLayerView::state; zero at position 0, taken over from the block
  // before at a block's first position). Per token t and head h (group g = h / (heads /
  // groups)): dt = softplus(dt[t * dt_stride + h] + dt_bias[h]); the state decays by
  // e^(dt a[h]) and takes x dt B_g; y = C_g . state + d[h] x (ssm_core.h). xbc rows hold x
  // [inner], B [groups x state_size] and C [groups x state_size] after the convolution.
  struct SsmScanArgs {
    const float* xbc = nullptr;
    const float* dt = nullptr;
    int64_t dt_stride = 0;
    const float* dt_bias = nullptr;
    const float* a = nullptr;
    const float* d = nullptr;
    int64_t heads = 0, head_dim = 0, state_size = 0, groups = 0;
  };
  virtual void SsmScan(const SsmScanArgs& args, int64_t n, const int32_t* positions,
                       const KvLayerView& state, float* y) = 0;

  // A gated delta net's recurrence (qwen35moe) over one sequence's n consecutive positions,
  // each value head's state [size x size] carried in `state` as SsmScan carries its own. Rows of
  // qkv (qkv_stride apart) hold q [key_heads x size], k [key_heads x size] and v [heads x size]
  // after the convolution; value head h reads key head h % key_heads. Per token and value head
  // (delta_net_core.h): q and k are L2-normalised (eps); the state S decays by e^g, g =
  // softplus(alpha[h] + dt_bias[h]) a[h]; S += k (sigmoid(beta[h]) (v - S^T k))^T; y = S^T q /
  // sqrt(size). beta and alpha rows are ab_stride apart. grouped_heads (Qwen3-Next): value head
  // h reads key head h / r instead (r = heads / key_heads), and its beta and alpha are at
  // (h / r) 2r + h mod r and that + r of their rows.
  struct GatedDeltaArgs {
    const float* qkv = nullptr;
    int64_t qkv_stride = 0;
    const float* beta = nullptr;
    const float* alpha = nullptr;
    int64_t ab_stride = 0;
    const float* dt_bias = nullptr;
    const float* a = nullptr;
    int64_t heads = 0, key_heads = 0, size = 0;
    float eps = 0.f;
    bool grouped_heads = false;
  };
  virtual void GatedDeltaNet(const GatedDeltaArgs& args, int64_t n, const int32_t* positions,
                             const KvLayerView& state, float* y) = 0;

  // x[i] *= f(gate[i]) for count values: an output gate (Qwen3.5's attention, sigmoid; its
  // gated delta net, silu).
  enum class GateFunction { kSigmoid, kSilu };
  virtual void MultiplyByGate(GateFunction f, const float* gate, int64_t count, float* x) = 0;

  // out = RMSNorm over each of `groups` equal parts of every row of y * silu(z), times weight
  // [dim]: Mamba-2's gated norm. z rows are z_stride floats apart.
  virtual void GatedGroupRmsNorm(const float* y, const float* z, int64_t z_stride,
                                 const float* weight, int64_t n, int64_t dim, int64_t groups,
                                 float eps, float* out) = 0;

  // Causal attention: query row t (n_heads x head_dim) attends to cache positions
  // [0, positions[t]] (within the window, when there is one); grouped-query: head h reads KV
  // head h / (n_heads / n_kv_heads).
  virtual void Attention(const float* q, int64_t n, int64_t n_heads, const int32_t* positions,
                         const KvLayerView& kv, float* out,
                         const AttentionOptions& options = {}) = 0;

  // One sequence's part of a batched attention call: Attention's arguments but the head count
  // and options, which a layer's sequences share.
  struct AttentionSequence {
    const float* q;
    int64_t n;
    const int32_t* positions;
    KvLayerView kv;
    float* out;
  };
  // Attention for each sequence over its own cache, as calls of Attention in turn would give. A
  // decode step of many sequences makes one such call per layer: the CPU backend runs it as one
  // parallel loop, where a loop per sequence would pay the threads' start and wait for every
  // sequence of every layer on a few microseconds of work each.
  virtual void AttentionBatch(absl::Span<const AttentionSequence> seqs, int64_t n_heads,
                              const AttentionOptions& options) {
    for (const AttentionSequence& s : seqs)
      Attention(s.q, s.n, n_heads, s.positions, s.kv, s.out, options);
  }

  // Routing kept in the backend's memory. A device backend that answers true routes a step's
  // tokens and runs their experts without the host waiting to learn the choices (RouteTokens,
  // then RunRoutedExperts); the mixture block uses the pair whenever the step needs no routing on
  // the host (no expert store, routing observer, capacity, load window or expert parallelism)
  // and reads the choices back once, after the step, for the telemetry. Every backend implements
  // the pair; false (the CPU's answer) keeps the host path, which is the faster one there.
  virtual bool routes_in_place() const { return false; }

  // Routes n tokens by route_token.h's core, as Route does without a capacity: logits
  // [n x c.n_expert] (backend memory; with the router's bias already added) to experts and
  // weights [n x c.top_k] (best first; -1 and 0 in slots left empty) and entropy [n], all in the
  // backend's memory. c's selection bias is the model's weight vector, c's disabled mask and the
  // positions (for the noise) are host memory.
  virtual void RouteTokens(const TokenRouting& c, const float* logits, const int32_t* positions,
                           int64_t n, int32_t* experts, float* weights, float* entropy) = 0;

  // One expert's matrices as RunRoutedExperts finds them by id (host views of the model's
  // weights, as ExpertJob's; an empty down: the expert has no weights here).
  struct ExpertMatrices {
    WeightView gate, up, down;
    const float* gate_bias = nullptr;
    const float* up_bias = nullptr;
    const float* down_bias = nullptr;
  };
  // A mixture layer's routed experts over routing in the backend's memory.
  struct RoutedExperts {
    absl::Span<const ExpertMatrices> experts;  // by expert id
    const float* in;                           // [n x d]: the normalised residual stream
    int64_t n, k;
    const int32_t* ids;    // [n x k] (backend memory), as RouteTokens writes them
    const float* weights;  // [n x k] (backend memory)
    GatedActivation activation = GatedActivation::kSilu;
    // The shared expert, run over every row (null: none), into shared_out ([n x d], backend
    // memory); its gate logits [n] (backend memory; null: ungated) weigh it by their sigmoid.
    const ExpertMatrices* shared = nullptr;
    float* shared_out = nullptr;
    const float* shared_gate = nullptr;
  };
  // x[t] += sum over j < k of weights[t, j] * FFN_{ids[t, j]}(in[t]), the terms in choice order,
  // then the shared expert's term last, as the host path's RunExperts + AddWeightedRows.
  virtual void RunRoutedExperts(const RoutedExperts& r, float* x) = 0;

  // y[i] += a * x[i].
  virtual void Axpy(float a, const float* x, int64_t count, float* y) = 0;

  // x[i] *= a (Granite's embedding and logit multipliers).
  virtual void Scale(float a, float* x, int64_t count) = 0;

  // x[t * dim + i] *= scales[t] for n rows; scales in host memory, as positions are (Llama 4's
  // query temperature).
  virtual void ScaleRows(float* x, int64_t n, int64_t dim, const float* scales) = 0;

  // x[t] += sum over j < k of w[t * k + j] * src[t * k + j][0..dim), for n rows; null sources
  // are skipped. Each row's terms are summed in order j, then added to x[t]: the outputs of the
  // experts a token chose, weighted by its router, back into the residual stream.
  virtual void AddWeightedRows(int64_t n, int64_t k, int64_t dim, const float* const* src,
                               const float* w, float* x) = 0;

  // dst row t = dequantized row ids[t] of table.
  virtual void GetRows(const WeightView& table, const int32_t* ids, int64_t n, float* dst) = 0;
};

struct CpuBackendOptions {
  int threads = 0;  // <= 0: one per core
  // true: activations meet quantized weights as 8-bit blocks with integer dot products (what
  // llama.cpp does; fast). false: weights are dequantized and multiplied in F32 (exact to the
  // dequantized model; slower). Float weights always use F32 activations.
  bool quantize_activations = true;
};

std::unique_ptr<Backend> CreateCpuBackend(const CpuBackendOptions& options);
// The CPU backend with `threads` threads (<= 0: one per core), default options otherwise.
std::unique_ptr<Backend> CreateCpuBackend(int threads);

}  // namespace moe
