// The constants both vector exps (exp_avx512.h, exp_avx2.h) use: e^x = 2^n e^r with
// n = round(x / ln 2) and |r| <= ln 2 / 2, e^r by its Taylor series to r^7 (truncation below
// 2^-26). ln 2 is split in two so r = x - n ln 2 keeps its low bits.
#pragma once

namespace moe::kernels {

inline constexpr float kLog2E = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.4286068203094172e-6f;
// Horner's order: highest power first, 1/7! down to 1/0!.
inline constexpr float kExpTaylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                                        1.0f / 6,    0.5f,       1.0f,       1.0f};

}  // namespace moe::kernels
