// Checks the row kernels against blocks packed by hand from the GGUF block definitions, so the
// unpacking code is tested against an independent packing of known values.
#include "lib/backend/cpu/quant_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "lib/backend/cpu/cpu_features.h"
#include "lib/backend/cpu/repack.h"
#include "lib/base/half.h"

namespace moe {
namespace {

void PutHalf(uint8_t* p, float v) {
  uint16_t h = FloatToHalf(v);
  std::memcpy(p, &h, 2);
}

// Packs eight 6-bit (scale, min) pairs the way Q4_K/Q5_K store them: the first four in the low
// 6 bits of bytes 0-3 (scales) and 4-7 (mins); the last four split into nibbles of bytes 8-11 with
// their top two bits in the high bits of bytes 0-7.
void PackScales(const int sc[8], const int mn[8], uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 4; ++j) {
    s[j] = sc[j] & 63;
    s[j + 4] = mn[j] & 63;
  }
  for (int j = 4; j < 8; ++j) {
    s[j + 4] = (sc[j] & 0xf) | ((mn[j] & 0xf) << 4);
    s[j - 4] |= (sc[j] >> 4) << 6;
    s[j] |= (mn[j] >> 4) << 6;
  }
}

TEST(QuantRowsTest, Q4_KMatchesHandPackedBlock) {
  std::mt19937 rng(1);
  uint8_t block[144];
  int sc[8], mn[8], q[256];
  for (int j = 0; j < 8; ++j) {
    sc[j] = rng() % 64;
    mn[j] = rng() % 64;
  }
  for (int& v : q) v = rng() % 16;
  const float d = 0.03125f, dmin = 0.0078125f;
  PutHalf(block, d);
  PutHalf(block + 2, dmin);
  PackScales(sc, mn, block + 4);
  // Sub-block pairs (2k, 2k+1) share 32 bytes: low nibbles for 2k, high nibbles for 2k+1.
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) block[16 + 32 * k + l] = q[64 * k + l] | q[64 * k + 32 + l] << 4;
  }
  float out[256];
  DequantizeRow(DType::kQ4_K, block, out, 256);
  for (int i = 0; i < 256; ++i) {
    int sub = i / 32;
    EXPECT_FLOAT_EQ(out[i], d * sc[sub] * q[i] - dmin * mn[sub]) << i;
  }
}

TEST(QuantRowsTest, Q5_KMatchesHandPackedBlock) {
  std::mt19937 rng(2);
  uint8_t block[176] = {};
  int sc[8], mn[8], q[256];
  for (int j = 0; j < 8; ++j) {
    sc[j] = rng() % 64;
    mn[j] = rng() % 64;
  }
  for (int& v : q) v = rng() % 32;
  const float d = 0.0625f, dmin = 0.015625f;
  PutHalf(block, d);
  PutHalf(block + 2, dmin);
  PackScales(sc, mn, block + 4);
  // The fifth bit of element l of sub-block s lives in bit s of qh[l].
  for (int i = 0; i < 256; ++i) {
    int sub = i / 32, l = i % 32;
    if (q[i] & 16) block[16 + l] |= 1 << sub;
  }
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 32; ++l) {
      block[48 + 32 * k + l] = (q[64 * k + l] & 15) | (q[64 * k + 32 + l] & 15) << 4;
    }
  }
  float out[256];
  DequantizeRow(DType::kQ5_K, block, out, 256);
  for (int i = 0; i < 256; ++i) {
    int sub = i / 32;
    EXPECT_FLOAT_EQ(out[i], d * sc[sub] * q[i] - dmin * mn[sub]) << i;
  }
}

TEST(QuantRowsTest, Q6_KMatchesHandPackedBlock) {
  std::mt19937 rng(3);
  uint8_t block[210] = {};
  int q[256];
  int8_t sc[16];
  for (auto& s : sc) s = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
  for (int& v : q) v = rng() % 64;
  const float d = 0.001953125f;
  // Halves of 128: element n*128 + j*32 + l (j = 0..3) keeps its low 4 bits in ql and its high 2
  // bits in qh[n*32 + l] at bit 2j; j = 0,2 use low nibbles, j = 1,3 high, of ql[n*64 + l (+32)].
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        int v = q[n * 128 + j * 32 + l];
        int ql_index = n * 64 + l + (j % 2 ? 32 : 0);
        block[ql_index] |= (v & 15) << (j >= 2 ? 4 : 0);
        block[128 + n * 32 + l] |= (v >> 4) << (2 * j);
      }
    }
  }
  std::memcpy(block + 192, sc, 16);
  PutHalf(block + 208, d);
  float out[256];
  DequantizeRow(DType::kQ6_K, block, out, 256);
  for (int i = 0; i < 256; ++i) {
    EXPECT_FLOAT_EQ(out[i], d * sc[i / 16] * (q[i] - 32)) << i;
  }
}

// Q2_K and Q3_K share the 2-bit layout: element n*128 + j*32 + l (j = 0..3) sits at bits 2j of
// qs[n*32 + l]. One scale per 16 elements.
void PackTwoBitQuants(const int q[256], uint8_t* qs) {
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) qs[n * 32 + l] |= (q[n * 128 + j * 32 + l] & 3) << (2 * j);
    }
  }
}

TEST(QuantRowsTest, Q2_KMatchesHandPackedBlock) {
  std::mt19937 rng(21);
  uint8_t block[84] = {};
  int sc[16], mn[16], q[256];
  for (int j = 0; j < 16; ++j) {
    sc[j] = rng() % 16;
    mn[j] = rng() % 16;
    block[j] = static_cast<uint8_t>(sc[j] | mn[j] << 4);  // scales[16]: scale low, min high
  }
  for (int& v : q) v = rng() % 4;
  PackTwoBitQuants(q, block + 16);  // qs[64]
  const float d = 0.03125f, dmin = 0.0078125f;
  PutHalf(block + 80, d);
  PutHalf(block + 82, dmin);
  float out[256];
  DequantizeRow(DType::kQ2_K, block, out, 256);
  for (int i = 0; i < 256; ++i) {
    EXPECT_FLOAT_EQ(out[i], d * sc[i / 16] * q[i] - dmin * mn[i / 16]) << i;
  }
}

TEST(QuantRowsTest, Q3_KMatchesHandPackedBlock) {
  std::mt19937 rng(22);
  uint8_t block[110] = {};
  int sc[16], q[256];
  for (int& s : sc) s = static_cast<int>(rng() % 64);  // stored 6-bit, value s - 32
  for (int& v : q) v = rng() % 8;                      // stored 3-bit, value v - 4
  // hmask[32]: the high bit of element i in byte i % 32, bit i / 32.
  for (int i = 0; i < 256; ++i) block[i % 32] |= (q[i] >> 2) << (i / 32);
  PackTwoBitQuants(q, block + 32);  // qs[64]: the low two bits
  // scales[12]: low nibbles of scales 0-7 in the low halves of bytes 0-7, of 8-15 in their high
  // halves; the top two bits of scale i in byte 8 + i % 4 at bit 2 * (i / 4).
  uint8_t* scales = block + 96;
  for (int i = 0; i < 16; ++i) {
    scales[i % 8] |= (sc[i] & 15) << (i < 8 ? 0 : 4);
    scales[8 + i % 4] |= (sc[i] >> 4) << (2 * (i / 4));
  }
  const float d = 0.001953125f;
  PutHalf(block + 108, d);
  float out[256];
  DequantizeRow(DType::kQ3_K, block, out, 256);
  for (int i = 0; i < 256; ++i) {
    EXPECT_FLOAT_EQ(out[i], d * (sc[i / 16] - 32) * (q[i] - 4)) << i;
  }
}

// Blocks packed by hand from the GGUF layouts (ggml-common.h), decoded by the formulas there.
TEST(QuantRowsTest, Q4_1Q5_0Q5_1MatchHandPackedBlocks) {
  // Element j: nibble j % 16 (low half of byte j for j < 16, high half of byte j - 16 after),
  // fifth bit j of the little-endian qh.
  uint8_t qs[16];
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  const uint32_t qh = 0xA5C3F00Fu;
  auto nibble = [&](int j) { return j < 16 ? j : 15 - (j - 16); };
  auto fifth = [&](int j) { return static_cast<int>(qh >> j & 1); };
  float out[32];
  uint8_t q4_1[20];
  PutHalf(q4_1, 0.5f);
  PutHalf(q4_1 + 2, -3.0f);
  std::memcpy(q4_1 + 4, qs, 16);
  DequantizeRow(DType::kQ4_1, q4_1, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 0.5f * nibble(j) - 3.0f) << "Q4_1 " << j;
  uint8_t q5_0[22];
  PutHalf(q5_0, 0.25f);
  std::memcpy(q5_0 + 2, &qh, 4);
  std::memcpy(q5_0 + 6, qs, 16);
  DequantizeRow(DType::kQ5_0, q5_0, out, 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(out[j], 0.25f * (nibble(j) + 16 * fifth(j) - 16)) << "Q5_0 " << j;
  }
  uint8_t q5_1[24];
  PutHalf(q5_1, 0.125f);
  PutHalf(q5_1 + 2, 1.5f);
  std::memcpy(q5_1 + 4, &qh, 4);
  std::memcpy(q5_1 + 8, qs, 16);
  DequantizeRow(DType::kQ5_1, q5_1, out, 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(out[j], 0.125f * (nibble(j) + 16 * fifth(j)) + 1.5f) << "Q5_1 " << j;
  }
}

TEST(QuantRowsTest, Iq4NlAndIq4XsMatchHandPackedBlocks) {
  const int kTable[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  uint8_t nl[18];
  PutHalf(nl, 0.5f);
  for (int j = 0; j < 16; ++j) nl[2 + j] = static_cast<uint8_t>((j * 7) % 16 | j << 4);
  float out[256];
  DequantizeRow(DType::kIQ4_NL, nl, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * kTable[(j * 7) % 16]) << j;
    EXPECT_EQ(out[j + 16], 0.5f * kTable[j]) << j;
  }
  // IQ4_XS: block ib's 6-bit scale is scales_l's nibble ib % 2 of byte ib / 2, plus bits 2 ib..
  // of scales_h above it; the value is d * (scale - 32) * table[index].
  uint8_t xs[136] = {};
  PutHalf(xs, 0.25f);
  const int scale[8] = {0, 63, 32, 31, 17, 48, 5, 40};
  uint16_t scales_h = 0;
  for (int ib = 0; ib < 8; ++ib) {
    scales_h |= static_cast<uint16_t>((scale[ib] >> 4) << (2 * ib));
    xs[4 + ib / 2] |= static_cast<uint8_t>((scale[ib] & 15) << (4 * (ib % 2)));
    for (int j = 0; j < 16; ++j) xs[8 + 16 * ib + j] = static_cast<uint8_t>((j + ib) % 16 | j << 4);
  }
  std::memcpy(xs + 2, &scales_h, 2);
  DequantizeRow(DType::kIQ4_XS, xs, out, 256);
  for (int ib = 0; ib < 8; ++ib) {
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(out[32 * ib + j], 0.25f * (scale[ib] - 32) * kTable[(j + ib) % 16])
          << ib << " " << j;
      EXPECT_EQ(out[32 * ib + 16 + j], 0.25f * (scale[ib] - 32) * kTable[j]) << ib << " " << j;
    }
  }
}

// ggml's reference rules, value by value: Q4_1 / Q5_1 span [min, max] in 15 / 31 steps, rounding
// half up; Q5_0 maps the value of largest magnitude onto -16.
TEST(QuantRowsTest, Block32EncodersFollowTheReferenceRules) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = -1.0f + 0.0625f * j;  // -1 .. 0.9375
  uint8_t b[24];
  ASSERT_TRUE(QuantizeRow(DType::kQ4_1, x, b, 32).ok());
  float out[32];
  DequantizeRow(DType::kQ4_1, b, out, 32);
  const float d41 = HalfToFloat(FloatToHalf(1.9375f / 15));
  EXPECT_EQ(HalfToFloat(LoadU16(b + 2)), -1.0f);
  for (int j = 0; j < 32; ++j) {
    const int q = std::min(15, static_cast<int>((x[j] + 1.0f) * (1.0f / (1.9375f / 15)) + 0.5f));
    EXPECT_EQ(out[j], d41 * q - 1.0f) << "Q4_1 " << j;
  }
  ASSERT_TRUE(QuantizeRow(DType::kQ5_0, x, b, 32).ok());
  DequantizeRow(DType::kQ5_0, b, out, 32);
  EXPECT_EQ(HalfToFloat(LoadU16(b)), 1.0f / 16);  // max magnitude -1 onto -16: d = -1 / -16
  for (int j = 0; j < 32; ++j) {
    const int q = std::min(31, static_cast<int>(x[j] * 16 + 16.5f));
    EXPECT_EQ(out[j], (q - 16) / 16.0f) << "Q5_0 " << j;
  }
  ASSERT_TRUE(QuantizeRow(DType::kQ5_1, x, b, 32).ok());
  DequantizeRow(DType::kQ5_1, b, out, 32);
  for (int j = 0; j < 32; ++j) EXPECT_NEAR(out[j], x[j], 1.9375f / 31 / 2 + 1e-3) << "Q5_1 " << j;
}

TEST(QuantRowsTest, SimpleTypesRoundTripAndDotAgreesWithDequantize) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd;
  const int64_t n = 512;
  std::vector<float> x(n), w(n);
  for (auto& v : x) v = nd(rng);
  for (auto& v : w) v = nd(rng);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                  DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS}) {
    std::vector<uint8_t> row(RowBytes(t, n));
    ASSERT_TRUE(QuantizeRow(t, w.data(), row.data(), n).ok());
    std::vector<float> back(n);
    DequantizeRow(t, row.data(), back.data(), n);
    double max_rel = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      max_rel = std::max(max_rel, static_cast<double>(std::fabs(back[i] - w[i])));
      ref += static_cast<double>(back[i]) * x[i];
    }
    // Per-type rounding bounds for N(0,1) data: half 2^-11, bf16 2^-8 relative; Q8_0 d/2 with
    // d = amax/127; Q4_0 d/2 with d = amax/8 (amax of 32 normals < 4.5).
    // Q4_1 / Q5_1 half a step of a 9-wide range in 15 / 31 steps; Q5_0 d/2 with d = amax/16;
    // IQ4_NL half its widest gap (24 of 254 levels over the amax) and IQ4_XS that again with
    // its 6-bit block scales' rounding.
    double bound = t == DType::kF32      ? 0
                   : t == DType::kF16    ? 4.5 / 2048
                   : t == DType::kBF16   ? 4.5 / 256
                   : t == DType::kQ8_0   ? 4.5 / 127
                   : t == DType::kQ4_1   ? 9.0 / 15 / 2
                   : t == DType::kQ5_0   ? 4.5 / 16 / 2
                   : t == DType::kQ5_1   ? 9.0 / 31 / 2
                   : t == DType::kIQ4_NL ? 4.5 * 24 / 254
                   : t == DType::kIQ4_XS ? 4.5 * 24 / 254 * 1.5
                                         : 4.5 / 8;
    EXPECT_LE(max_rel, bound) << DTypeName(t);
    float dot = DotRow(t, row.data(), x.data(), n);
    EXPECT_NEAR(dot, ref, 1e-4 * (1 + std::fabs(ref))) << DTypeName(t);
  }
}

TEST(QuantRowsTest, KQuantEncodersRoundTripWithinTheirResolution) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t n = 1024;
  std::vector<float> w(n), x(n);
  for (auto& v : w) v = nd(rng);
  for (auto& v : x) v = nd(rng);
  // Worst-case step: a 32-element range of N(0,1) spans < 9 (with the zero included), over
  // 15 / 31 levels, plus the 6-bit scale rounding; Q6_K: |x| < 4.5 over 32 levels.
  for (auto [t, bound] : {std::pair{DType::kQ4_K, 9.0 / 15}, std::pair{DType::kQ5_K, 9.0 / 31},
                          std::pair{DType::kQ6_K, 4.5 / 32}}) {
    std::vector<uint8_t> row(RowBytes(t, n));
    ASSERT_TRUE(QuantizeRow(t, w.data(), row.data(), n).ok());
    std::vector<float> back(n);
    DequantizeRow(t, row.data(), back.data(), n);
    double max_err = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      max_err = std::max(max_err, static_cast<double>(std::fabs(back[i] - w[i])));
      ref += static_cast<double>(back[i]) * x[i];
    }
    EXPECT_LE(max_err, bound) << DTypeName(t);
    EXPECT_GT(max_err, 0) << DTypeName(t);
    EXPECT_NEAR(DotRow(t, row.data(), x.data(), n), ref, 1e-3 * (1 + std::fabs(ref)))
        << DTypeName(t);
  }
}

// The 2- and 3-bit encoders fit each 16-value group by least squares. On Gaussian weights their
// error must beat the plain fit of the same form (Q2_K: the group's range, zero included, over
// levels 0-3; Q3_K: its value of largest magnitude at level -4, levels -4..3) even with their
// scales rounded to 4 or 6 bits, and stay near the optimal uniform quantizer of a unit normal
// (RMS 0.35 with 4 levels, 0.19 with 8).
double PlainFitSquaredError(DType t, const float* x) {
  float lo = 0, hi = 0, extreme = 0;
  for (int l = 0; l < 16; ++l) {
    lo = std::min(lo, x[l]);
    hi = std::max(hi, x[l]);
    if (std::fabs(x[l]) > std::fabs(extreme)) extreme = x[l];
  }
  double err = 0;
  for (int l = 0; l < 16; ++l) {
    float back;
    if (t == DType::kQ2_K) {
      const float step = (hi - lo) / 3;
      back = lo + step * std::clamp(std::round((x[l] - lo) / step), 0.f, 3.f);
    } else {
      const float step = extreme / -4;
      back = step * std::clamp(std::round(x[l] / step), -4.f, 3.f);
    }
    err += std::pow(back - x[l], 2);
  }
  return err;
}

TEST(QuantRowsTest, TwoAndThreeBitEncodersFitBetterThanThePlainFit) {
  std::mt19937 rng(6);
  std::normal_distribution<float> nd;
  const int64_t n = 4096;
  std::vector<float> w(n);
  for (auto& v : w) v = nd(rng);
  for (auto [t, rms_bound] : {std::pair{DType::kQ2_K, 0.35}, std::pair{DType::kQ3_K, 0.19}}) {
    std::vector<uint8_t> row(RowBytes(t, n));
    ASSERT_TRUE(QuantizeRow(t, w.data(), row.data(), n).ok());
    std::vector<float> back(n);
    DequantizeRow(t, row.data(), back.data(), n);
    double err = 0, plain_err = 0;
    for (int64_t i = 0; i < n; ++i) err += std::pow(back[i] - w[i], 2);
    for (int64_t g = 0; g < n / 16; ++g) plain_err += PlainFitSquaredError(t, &w[16 * g]);
    const double rms = std::sqrt(err / n);
    EXPECT_LT(err, plain_err) << DTypeName(t);
    EXPECT_LT(rms, rms_bound) << DTypeName(t);
    EXPECT_GT(rms, 0) << DTypeName(t);
    std::printf("%s: RMS error %.4f, plain fit %.4f\n", std::string(DTypeName(t)).c_str(), rms,
                std::sqrt(plain_err / n));
  }
}

TEST(HalfTest, ConversionsRoundTripEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalf(f), h) << h;
  }
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(1.5f)), 1.5f);
}

}  // namespace
}  // namespace moe

namespace moe {
namespace {

TEST(DequantizeRowTest, SimdPathsAreBitIdenticalToThePortableCode) {
  if (DetectedSimdLevel() < SimdLevel::kAvx512) GTEST_SKIP() << "no AVX-512 dequantizers here";
  std::mt19937 rng(12);
  std::normal_distribution<float> nd;
  const int64_t n = 1024;
  std::vector<float> w(n);
  for (auto& v : w) v = nd(rng);
  const SimdLevel native = ActiveSimdLevel();
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K, DType::kF16, DType::kBF16, DType::kMXFP4,
                  DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS}) {
    for (bool repacked : {false, true}) {
      std::vector<uint8_t> row(RowBytes(t, n));
      ASSERT_TRUE(QuantizeRow(t, w.data(), row.data(), n).ok());
      DType rt = t;
      if (repacked) {
        rt = RepackedType(t, 1, n);
        if (rt == t) continue;
        RepackRows(t, row.data(), 1, n);
      }
      std::vector<float> portable(n), simd(n);
      SetSimdLevelForTesting(SimdLevel::kScalar);
      DequantizeRow(rt, row.data(), portable.data(), n);
      SetSimdLevelForTesting(SimdLevel::kAvx512Vnni);
      DequantizeRow(rt, row.data(), simd.data(), n);
      EXPECT_EQ(portable, simd) << DTypeName(rt);
    }
  }
  SetSimdLevelForTesting(native);
}

TEST(QuantRowsTest, RowsOfPartialBlocksAreRefused) {
  std::vector<float> w(300, 1.f);
  std::vector<uint8_t> row(4096);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K,
                  DType::kQ5_K, DType::kQ6_K, DType::kMXFP4, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS}) {
    const int64_t partial = GetDTypeInfo(t).block_elems == 32 ? 48 : 128;
    const absl::Status s = QuantizeRow(t, w.data(), row.data(), partial);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << DTypeName(t) << ": " << s;
    EXPECT_TRUE(QuantizeRow(t, w.data(), row.data(), 256).ok()) << DTypeName(t);
  }
}

}  // namespace
}  // namespace moe
