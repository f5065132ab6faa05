// A pointer the compiler cannot see through, for kernels whose weights GCC would otherwise keep
// in registers (or spill to the stack) between two loads of the same address.
#pragma once

namespace moe::kernels {

// p, as a value the compiler cannot see through: a load from it is not taken to equal an
// earlier load from the same address, so it is not kept in a register from one to the other.
template <typename P>
inline P Opaque(P p) {
  asm volatile("" : "+r"(p));
  return p;
}

}  // namespace moe::kernels
