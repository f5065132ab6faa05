// The row-group kernels for AVX2 (vpmaddubsw + vpmaddwd): group_products_avx2.inc.
#define MOE_GROUP_VNNI 0
#include "lib/backend/cpu/group_products_avx2.inc"

namespace moe::kernels {
GroupProductsFn Avx2GroupProducts(DType t) { return GroupProductsOf(t); }
}  // namespace moe::kernels
