#include "lib/kv/kv_cache.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/kv/kv_type.h"

namespace moe {

absl::StatusOr<KvCache> KvCache::Create(int64_t n_layer, int64_t n_ctx, int64_t n_kv_heads,
                                        int64_t head_dim, DType dtype, bool values_in_keys,
                                        SlidingWindows sliding,
                                        absl::Span<const int64_t> conv_width,
                                        absl::Span<const int64_t> conv_rows,
                                        absl::Span<const int64_t> state_floats,
                                        MemorySpace& memory) {
  if (absl::Status s = CheckKvType(dtype, head_dim); !s.ok()) return s;
  if (n_ctx <= 0 || n_ctx > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid context length ", n_ctx));
  }
  if (!sliding.window.empty() && static_cast<int64_t>(sliding.window.size()) != n_layer) {
    return absl::InvalidArgumentError(
        absl::StrCat("sliding windows for ", sliding.window.size(), " layers of ", n_layer));
  }
  if (!conv_width.empty() && static_cast<int64_t>(conv_width.size()) != n_layer) {
    return absl::InvalidArgumentError(
        absl::StrCat("convolution widths for ", conv_width.size(), " layers of ", n_layer));
  }
  for (absl::Span<const int64_t> list : {conv_rows, state_floats}) {
    if (!list.empty() && (static_cast<int64_t>(list.size()) != n_layer ||
                          static_cast<int64_t>(conv_width.size()) != n_layer)) {
      return absl::InvalidArgumentError(
          absl::StrCat("convolution rows or states for ", list.size(), " layers of ", n_layer));
    }
  }
  KvCache c;
  const KvLayerRows attention = KvLayerRows::Attention(dtype, n_kv_heads, head_dim, values_in_keys);
  for (int64_t l = 0; l < n_layer; ++l) {
    c.rows_.push_back(KvLayerRows::Of(conv_width, conv_rows, state_floats, l, attention));
    c.recurrent_ |= c.rows_.back().carried;
  }
  c.dtype_ = dtype;
  c.n_ctx_ = n_ctx;
  c.ring_table_.resize(n_layer);
  c.ring_window_.assign(n_layer, 0);
  const int64_t block = int64_t{1} << kRingBlockShift;
  const int64_t context_blocks = (n_ctx + block - 1) / block;
  for (int64_t l = 0; sliding.max_step_tokens > 0 && l < n_layer && !sliding.window.empty(); ++l) {
    if (sliding.window[l] <= 0 || c.rows_[l].planes == 0) continue;
    // A step's first query reads the window's keys after the step has written all of its own:
    // the ring needs room for both, window + step - 1 rows, without a slot shared.
    const int64_t ring_blocks =
        (sliding.window[l] + sliding.max_step_tokens - 1 + block - 1) / block;
    if (ring_blocks >= context_blocks) continue;
    c.ring_table_[l].resize(context_blocks);
    for (int64_t i = 0; i < context_blocks; ++i) {
      c.ring_table_[l][i] = static_cast<int32_t>(i % ring_blocks);
    }
    c.ring_window_[l] = sliding.window[l];
    c.max_step_tokens_ = sliding.max_step_tokens;
  }
  c.state_.resize(n_layer);
  if (c.recurrent_) c.checkpoints_.resize(kCheckpoints);
  for (int64_t l = 0; l < n_layer; ++l) {
    // The live slot, then the checkpoints'.
    const size_t bytes = c.rows_[l].slot_bytes() * (1 + c.checkpoints_.size());
    if (bytes == 0) continue;
    absl::StatusOr<uint8_t*> p = c.state_[l].Resize(memory, static_cast<int64_t>(bytes));
    if (!p.ok()) return p.status();
    memory.Zero(*p, bytes);
  }
  if (c.recurrent_) c.state_table_.assign(context_blocks, 0);
  c.k_.resize(n_layer);
  c.v_.resize(n_layer);
  for (int64_t l = 0; l < n_layer; ++l) {
    const size_t bytes = static_cast<size_t>(c.rows(l)) * c.rows_[l].row_bytes();
    for (auto* rows : {&c.k_, &c.v_}) {
      if (rows == &c.k_ && c.rows_[l].planes == 0) continue;  // no rows: a slot, or nothing
      if (rows == &c.v_ && c.rows_[l].planes <= 1) continue;  // values in keys, or none
      absl::StatusOr<uint8_t*> p = (*rows)[l].Resize(memory, static_cast<int64_t>(bytes));
      if (!p.ok()) return p.status();
      memory.Zero(*p, bytes);
    }
  }
  return c;
}

void KvCache::SaveCheckpoint(Backend& be, absl::Span<const float> logits) {
  if (checkpoints_.empty() || size_ == 0) return;
  // The one at this position already, else the oldest.
  Checkpoint* target = &checkpoints_[0];
  for (Checkpoint& c : checkpoints_) {
    if (c.position == size_) {
      target = &c;
      break;
    }
    if (c.saved < target->saved) target = &c;
  }
  CopySlots(be, 0, 1 + (target - checkpoints_.data()));
  target->position = size_;
  target->saved = ++saves_;
  target->logits.assign(logits.begin(), logits.end());
}

int64_t KvCache::RestoreCheckpoint(Backend& be, int64_t n, std::vector<float>* logits) {
  const Checkpoint* best = nullptr;
  for (const Checkpoint& c : checkpoints_) {
    if (c.position > 0 && c.position <= n && (!best || c.position > best->position)) best = &c;
  }
  if (best == nullptr) return 0;
  CopySlots(be, 1 + (best - checkpoints_.data()), 0);
  size_ = best->position;
  *logits = best->logits;
  return size_;
}

void KvCache::CopySlots(Backend& be, int64_t from, int64_t to) {
  for (size_t l = 0; l < rows_.size(); ++l) {
    const int64_t floats = rows_[l].slot_floats();
    if (floats == 0) continue;
    float* slots = reinterpret_cast<float*>(state_[l].data());
    be.CopyRows(slots + from * floats, 0, 1, floats, slots + to * floats, 0);
  }
}

void KvCache::DropCheckpointsAfter(int64_t n) {
  for (Checkpoint& c : checkpoints_) {
    if (c.position > n) c = Checkpoint();
  }
}

bool KvCache::RingsHoldWindowAt(int64_t n) const {
  if (n >= size_) return true;
  if (recurrent_) return false;
  for (size_t l = 0; l < ring_table_.size(); ++l) {
    if (ring_table_[l].empty()) continue;
    // The oldest row position n reads, n - window + 1, survives while no later position up to
    // size - 1 has taken its slot.
    const int64_t oldest = std::max<int64_t>(0, n - ring_window_[l] + 1);
    if (size_ - 1 - oldest >= rows(static_cast<int64_t>(l))) return false;
  }
  return true;
}

int64_t KvCache::rows(int64_t l) const {
  if (rows_[l].planes == 0) return 0;
  if (ring_table_[l].empty()) return n_ctx_;
  int32_t ring_blocks = 0;
  for (int32_t b : ring_table_[l]) ring_blocks = std::max(ring_blocks, b + 1);
  return int64_t{ring_blocks} << kRingBlockShift;
}

size_t KvCache::byte_size() const {
  size_t s = 0;
  for (const auto& k : k_) s += k.size();
  for (const auto& v : v_) s += v.size();
  for (const auto& state : state_) s += state.size();
  return s;
}

}  // namespace moe
