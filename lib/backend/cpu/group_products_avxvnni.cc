// The row-group kernels for AVX2 with AVX-VNNI (vpdpbusd on 256 bits): group_products_avx2.inc.
#define MOE_GROUP_VNNI 1
#include "lib/backend/cpu/group_products_avx2.inc"

namespace moe::kernels {
GroupProductsFn AvxVnniGroupProducts(DType t) { return GroupProductsOf(t); }
}  // namespace moe::kernels
