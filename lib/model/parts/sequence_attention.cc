#include "lib/model/parts/sequence_attention.h"

namespace moe {

void StoreAndAttend(Backend& be, int layer, absl::Span<const SequenceChunk> batch,
                    const int32_t* positions, const SequenceAttentionRows& rows, int64_t n_heads,
                    const AttentionOptions& options,
                    std::vector<Backend::AttentionSequence>& scratch) {
  scratch.clear();
  int64_t row = 0;
  for (const SequenceChunk& c : batch) {
    const int64_t m = static_cast<int64_t>(c.tokens.size());
    const KvLayerView kv = c.kv->layer(layer);
    be.StoreKv(rows.k + row * rows.kv_row, rows.v + row * rows.kv_row, m, positions + row, kv);
    scratch.push_back(
        {rows.q + row * rows.q_row, m, positions + row, kv, rows.out + row * rows.q_row});
    row += m;
  }
  be.AttentionBatch(scratch, n_heads, options);
}

}  // namespace moe
