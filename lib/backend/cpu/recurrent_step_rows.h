// The vector kernels of recurrent_steps.h, written once over a lane type that each SIMD level's
// source (recurrent_steps_avx2.cc, _avx512.cc, compiled with its own flags) supplies: a struct
// with `using V` (the vector), `kCount` (its lanes), and static Zero(), Set1(float),
// Load(const float*), Store(float*, V), Mul(V, V), Fmadd(V a, V b, V c) (a * b + c) and
// Sum(V). Include it only there: it instantiates intrinsics of that level. Sizes that are not a
// whole number of vectors take the portable kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "lib/backend/cpu/recurrent_steps.h"

namespace moe::kernels::recurrent {

// R rows of a delta net's state (stored transposed: a row is one value channel over the key):
// the rows' dot products with k (decayed), then each row's update and its dot product with q.
template <typename L, int R>
inline void DeltaRows(float* s, const float* q, const float* k, const float* v, float decay,
                      float beta, int64_t size, float scale, float* y) {
  using V = typename L::V;
  V acc[R];
  for (int r = 0; r < R; ++r) acc[r] = L::Zero();
  for (int64_t i = 0; i < size; i += L::kCount) {
    const V kk = L::Load(k + i);
    for (int r = 0; r < R; ++r) acc[r] = L::Fmadd(L::Load(s + r * size + i), kk, acc[r]);
  }
  V delta[R];
  for (int r = 0; r < R; ++r) {
    delta[r] = L::Set1((v[r] - L::Sum(acc[r]) * decay) * beta);
    acc[r] = L::Zero();
  }
  const V d = L::Set1(decay);
  for (int64_t i = 0; i < size; i += L::kCount) {
    const V kk = L::Load(k + i), qq = L::Load(q + i);
    for (int r = 0; r < R; ++r) {
      float* row = s + r * size + i;
      const V x = L::Fmadd(L::Load(row), d, L::Mul(kk, delta[r]));
      L::Store(row, x);
      acc[r] = L::Fmadd(x, qq, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = L::Sum(acc[r]) * scale;
}

template <typename L>
void GatedDeltaStep(float* state, const float* q, const float* k, const float* v, float decay,
                    float beta, int64_t size, float scale, float* y) {
  if (size % L::kCount != 0)
    return GatedDeltaStepPortable(state, q, k, v, decay, beta, size, scale, y);
  int64_t j = 0;
  for (; j + 4 <= size; j += 4) {
    DeltaRows<L, 4>(state + j * size, q, k, v + j, decay, beta, size, scale, y + j);
  }
  for (; j < size; ++j)
    DeltaRows<L, 1>(state + j * size, q, k, v + j, decay, beta, size, scale, y + j);
}

// R rows of a Mamba-2 head's state (one per channel of x): decay, x dt B, and the sum with C.
template <typename L, int R>
inline void ScanRows(float* s, const float* x, const float* b, const float* c, float dt,
                     float decay, float d, int64_t state_size, float* y) {
  using V = typename L::V;
  V acc[R], xdt[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = L::Zero();
    xdt[r] = L::Set1(x[r] * dt);
  }
  const V dv = L::Set1(decay);
  for (int64_t j = 0; j < state_size; j += L::kCount) {
    const V bb = L::Load(b + j), cc = L::Load(c + j);
    for (int r = 0; r < R; ++r) {
      float* row = s + r * state_size + j;
      const V sv = L::Fmadd(L::Load(row), dv, L::Mul(bb, xdt[r]));
      L::Store(row, sv);
      acc[r] = L::Fmadd(sv, cc, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = L::Sum(acc[r]) + x[r] * d;
}

template <typename L>
void SsmScanStep(float* state, const float* x, const float* b, const float* c, float dt, float a,
                 float d, int64_t head_dim, int64_t state_size, float* y) {
  if (state_size % L::kCount != 0) {
    return SsmScanStepPortable(state, x, b, c, dt, a, d, head_dim, state_size, y);
  }
  const float decay = std::exp(dt * a);
  int64_t i = 0;
  for (; i + 4 <= head_dim; i += 4) {
    ScanRows<L, 4>(state + i * state_size, x + i, b, c, dt, decay, d, state_size, y + i);
  }
  for (; i < head_dim; ++i) {
    ScanRows<L, 1>(state + i * state_size, x + i, b, c, dt, decay, d, state_size, y + i);
  }
}

}  // namespace moe::kernels::recurrent
