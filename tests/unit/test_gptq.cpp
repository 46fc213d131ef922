// GPTQ rounding (converter/src/quantize/gptq.h) against its definition:
//   - two small matrices worked by hand (the numbers in the comments):
//     error feedback in column order, int8's per-row scale from the original
//     row, int4's group scale chosen from the updated weights when the group
//     is reached (the candidate whose pass over the group loses least), f16
//     scales;
//   - a straightforward scalar re-implementation in long double (Gauss-Jordan
//     inverse, scalar Cholesky, one column at a time, no blocks) on random
//     correlated data, for int8 and int4, across groups, partial groups,
//     blocks and an input the calibration never drove: the same integers and
//     the same scales;
//   - with no correlation to exploit (diagonal H) nothing is fed forward:
//     int8 is rounding to nearest byte for byte after storing
//     (shared/weight_quant.h), int4 rounds to nearest on scales that lose no
//     more than nearest's;
//   - on correlated inputs its output error tr((W - Q) H (W - Q)^T) is well
//     below rounding to nearest's;
//   - the stored layouts: store_i8_panel8x4 / store_i4_panel8x8q4 put each
//     integer and scale where the runtime reads it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "error.h"
#include "quantize/gptq.h"
#include "weight_layout.h"
#include "weight_quant.h"

namespace {

using namespace ferry;
using namespace ferry::conv;

Eigen::MatrixXd identity_with(uint32_t k, uint32_t a, uint32_t b, double v) {
  Eigen::MatrixXd h = Eigen::MatrixXd::Identity(k, k);
  h(a, b) = h(b, a) = v;
  return h;
}

TEST(Gptq, Int8ByHand) {
  // One row [0.304, -0.4975, 1.27]; inputs 0 and 1 correlated:
  // H = [[1, .8, 0], [.8, 1, 0], [0, 0, 1]], mean diag 1 -> lambda 0.01.
  // s = 1.27f / 127 = 0.0099999998f (the original row's max, as nearest).
  // Column 0: 0.304 / s = 30.4 -> q 30, error e0 = 0.304 - 30 s = 0.0040000.
  // Column 1 absorbs it: w1 += e0 * H'01 / H'11 = -0.4975 + 0.004 * 0.8 / 1.01
  //   = -0.49433169 -> / s = -49.43 -> q -49 (to nearest: -49.75 -> -50).
  // Column 2: 127 (no coupling).
  const float w[3] = {0.304f, -0.4975f, 1.27f};
  Eigen::MatrixXd h = identity_with(3, 0, 1, 0.8);
  const RoundedMatrix r = round_gptq("w", w, 1, 3, DType::I8, h);
  ASSERT_EQ(r.q.size(), 3u);
  EXPECT_EQ(r.q[0], 30);
  EXPECT_EQ(r.q[1], -49);
  EXPECT_EQ(r.q[2], 127);
  ASSERT_EQ(r.row_scales.size(), 1u);
  EXPECT_EQ(r.row_scales[0], 1.27f / 127.0f);
  // Column order: the same row reversed (1.27 first) has nothing to feed
  // forward into -0.4975 and gets nearest's -50 there.
  const float rev[3] = {1.27f, -0.4975f, 0.304f};
  const RoundedMatrix b = round_gptq("w", rev, 1, 3, DType::I8, identity_with(3, 1, 2, 0.8));
  EXPECT_EQ(b.q[0], 127);
  EXPECT_EQ(b.q[1], -50);
}

TEST(Gptq, Int4GroupScaleChosenWhenReached) {
  // One row of 33: group 0 = k 0..31, group 1 = k 32 alone. H = I except
  // H[31][32] = 0.5 (mean diag 1, lambda 0.01), so U is diagonal but for
  // U[31][32] / U[31][31] = -H'[31][32] / H'[32][32] = -0.5 / 1.01.
  // Group 0 (m = -0.8): candidate scales f16(-0.8 (1 - a/50) / -8), each run
  // over the group, loss sum ((w - q d) / U_kk)^2 with U_00^2 = 1/1.01 and
  // U_31,31^2 = 1.01 / (1.01^2 - 0.25) = 1.31152:
  //   a = 0: d = 0.0999755859375: k 0 -> -8 (error -0.000195), k 31: 0.26 / d
  //          = 2.60 -> 3 (error -0.0399268); loss 3.8e-8 + 0.0012155 = 0.0012155
  //   a = 1: d = 0.0980224609375 (0x2e46): k 0: -8.16 -> -8 (error -0.0158203),
  //          k 31: 2.65 -> 3 (error -0.0340674); loss 0.0002528 + 0.0008849
  //          = 0.0011377  <- the least (a = 2: 0.0016288, larger a: more)
  // Column 32 absorbs k 31's error: 0.5 + (-0.0340674) * 0.5 / 1.01 = 0.48313496.
  // Group 1 reached (m = 0.48313496): a = 0, d = f16(m / -8) = -0.060394287109375
  //   (0xabbb; to nearest would take f16(0.5 / -8) = -0.0625, 0xac00), q = m / d
  //   = -7.9997 -> -8 (error 2e-5; every a > 0 clips m by 1% or more).
  std::vector<float> w(33, 0.0f);
  w[0] = -0.8f;
  w[31] = 0.26f;
  w[32] = 0.5f;
  const RoundedMatrix r = round_gptq("w", w.data(), 1, 33, DType::I4, identity_with(33, 31, 32, 0.5));
  ASSERT_EQ(r.group_scales.size(), 2u);
  EXPECT_EQ(r.group_scales[0], 0x2e46);
  EXPECT_EQ(r.group_scales[1], 0xabbb);
  EXPECT_EQ(r.q[0], -8);
  EXPECT_EQ(r.q[31], 3);
  EXPECT_EQ(r.q[32], -8);
  for (int k = 1; k < 31; ++k) EXPECT_EQ(r.q[k], 0) << k;
  EXPECT_FLOAT_EQ(r.value(0, 32), -8 * -0.060394287109375f);
}

// ------------------------------------------------ the scalar definition --
using Real = long double;

struct Reference {
  std::vector<int> q;
  std::vector<float> row_scales;
  std::vector<uint16_t> group_scales;
};

// round half to even of w / d (in float), clamped.
int to_grid(Real w, float d, int lo, int hi) {
  const int q = static_cast<int>(std::nearbyint(static_cast<float>(w) / d));
  return std::min(hi, std::max(lo, q));
}

// GPTQ as the header defines it, one column at a time.
Reference reference_gptq(const std::vector<float>& w, uint32_t rows, uint32_t K, DType dtype,
                         const std::vector<std::vector<Real>>& H) {
  // Damped H; dead inputs get diag 1 first.
  std::vector<std::vector<Real>> a = H;
  Real mean = 0;
  for (uint32_t k = 0; k < K; ++k) {
    if (a[k][k] == 0) a[k][k] = 1;
    mean += a[k][k];
  }
  mean /= K;
  for (uint32_t k = 0; k < K; ++k) a[k][k] += 0.01L * mean;
  // Inverse by Gauss-Jordan with partial pivoting.
  std::vector<std::vector<Real>> inv(K, std::vector<Real>(K, 0));
  for (uint32_t k = 0; k < K; ++k) inv[k][k] = 1;
  for (uint32_t c = 0; c < K; ++c) {
    uint32_t p = c;
    for (uint32_t r = c + 1; r < K; ++r)
      if (std::fabs(a[r][c]) > std::fabs(a[p][c])) p = r;
    std::swap(a[p], a[c]);
    std::swap(inv[p], inv[c]);
    const Real d = a[c][c];
    for (uint32_t j = 0; j < K; ++j) {
      a[c][j] /= d;
      inv[c][j] /= d;
    }
    for (uint32_t r = 0; r < K; ++r) {
      if (r == c || a[r][c] == 0) continue;
      const Real f = a[r][c];
      for (uint32_t j = 0; j < K; ++j) {
        a[r][j] -= f * a[c][j];
        inv[r][j] -= f * inv[c][j];
      }
    }
  }
  // Upper Cholesky factor: inv = U^T U.
  std::vector<std::vector<Real>> U(K, std::vector<Real>(K, 0));
  for (uint32_t i = 0; i < K; ++i) {
    Real s = inv[i][i];
    for (uint32_t p = 0; p < i; ++p) s -= U[p][i] * U[p][i];
    U[i][i] = std::sqrt(s);
    for (uint32_t j = i + 1; j < K; ++j) {
      Real t = inv[i][j];
      for (uint32_t p = 0; p < i; ++p) t -= U[p][i] * U[p][j];
      U[i][j] = t / U[i][i];
    }
  }
  Reference out;
  out.q.assign(size_t{rows} * K, 0);
  const uint32_t groups = (K + 31) / 32;
  std::vector<Real> W(w.begin(), w.end());
  std::vector<float> scale(rows, 1.0f);
  std::vector<bool> zero(rows, false);
  if (dtype == DType::I8) {
    for (uint32_t r = 0; r < rows; ++r) {
      float m = 0;
      for (uint32_t k = 0; k < K; ++k) m = std::max(m, std::fabs(w[size_t{r} * K + k]));
      scale[r] = m > 0 ? m / 127.0f : 1.0f;
      out.row_scales.push_back(scale[r]);
    }
  } else {
    out.group_scales.assign(size_t{rows} * groups, 0);
  }
  const int lo = dtype == DType::I8 ? -127 : -8, hi = dtype == DType::I8 ? 127 : 7;
  for (uint32_t k = 0; k < K; ++k) {
    for (uint32_t r = 0; r < rows; ++r) {
      Real* row = W.data() + size_t{r} * K;
      if (dtype == DType::I4 && k % 32 == 0) {
        const uint32_t k1 = std::min(K, k + 32);
        float m = 0;
        for (uint32_t j = k; j < k1; ++j)
          if (std::fabs(static_cast<float>(row[j])) > std::fabs(m)) m = static_cast<float>(row[j]);
        zero[r] = layout::float_from_half(layout::half_from_float(m / -8.0f)) == 0.0f;
        uint16_t best = 0x3c00;
        Real best_loss = INFINITY;
        for (int a = 0; a < 20 && !zero[r]; ++a) {  // the candidates, each run over the group
          const uint16_t dh = layout::half_from_float(m * (1.0f - 0.02f * a) / -8.0f);
          const float d = layout::float_from_half(dh);
          if (d == 0.0f) continue;
          std::vector<Real> g(row + k, row + k1);
          Real loss = 0;
          for (uint32_t j = k; j < k1; ++j) {
            const Real e = (g[j - k] - to_grid(g[j - k], d, -8, 7) * static_cast<Real>(d)) / U[j][j];
            loss += e * e;
            for (uint32_t i = j + 1; i < k1; ++i) g[i - k] -= e * U[j][i];
          }
          if (loss < best_loss) {
            best_loss = loss;
            best = dh;
          }
        }
        out.group_scales[size_t{r} * groups + k / 32] = best;
        scale[r] = layout::float_from_half(best);
      }
      const int q = zero[r] ? 0 : to_grid(row[k], scale[r], lo, hi);
      out.q[size_t{r} * K + k] = q;
      const Real e = (row[k] - q * static_cast<Real>(scale[r])) / U[k][k];
      for (uint32_t j = k + 1; j < K; ++j) row[j] -= e * U[k][j];
    }
  }
  return out;
}

struct Problem {
  std::vector<float> w;
  Eigen::MatrixXd h;
  std::vector<std::vector<Real>> h_ref;
};

// Inputs x = A z (correlated), one input never driven (column `dead`).
Problem random_problem(uint32_t rows, uint32_t K, uint32_t dead, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  Problem p;
  p.w.resize(size_t{rows} * K);
  for (float& v : p.w) v = static_cast<float>(0.3 * n(rng));
  const uint32_t N = 4 * K;
  Eigen::MatrixXd A(K, K), Z(K, N);
  for (Eigen::Index i = 0; i < A.size(); ++i) A.data()[i] = n(rng) / std::sqrt(K);
  A += Eigen::MatrixXd::Identity(K, K) * 0.3;
  for (Eigen::Index i = 0; i < Z.size(); ++i) Z.data()[i] = n(rng);
  Eigen::MatrixXd X = A * Z;
  X.row(dead).setZero();
  p.h = X * X.transpose();
  p.h_ref.assign(K, std::vector<Real>(K));
  for (uint32_t i = 0; i < K; ++i)
    for (uint32_t j = 0; j < K; ++j) p.h_ref[i][j] = p.h(i, j);
  return p;
}

void expect_matches_reference(DType dtype, uint32_t rows, uint32_t K, uint32_t seed) {
  const Problem p = random_problem(rows, K, K / 3, seed);
  const RoundedMatrix got = round_gptq("w", p.w.data(), rows, K, dtype, p.h);
  const Reference want = reference_gptq(p.w, rows, K, dtype, p.h_ref);
  ASSERT_EQ(got.q.size(), want.q.size());
  size_t differ = 0;
  for (size_t i = 0; i < got.q.size(); ++i) differ += got.q[i] != want.q[i];
  EXPECT_EQ(differ, 0u) << "of " << got.q.size() << " integers";
  if (dtype == DType::I8) {
    EXPECT_EQ(got.row_scales, want.row_scales);
  } else {
    EXPECT_EQ(got.group_scales, want.group_scales);
  }
}

TEST(Gptq, Int8MatchesTheScalarDefinition) {
  expect_matches_reference(DType::I8, 5, 70, 1);
  expect_matches_reference(DType::I8, 3, 300, 2);  // three blocks of 128
}

TEST(Gptq, Int4MatchesTheScalarDefinition) {
  expect_matches_reference(DType::I4, 5, 70, 3);   // groups 32, 32, 6
  expect_matches_reference(DType::I4, 3, 300, 4);  // 10 groups over three blocks
}

// tr((W - Q) H (W - Q)^T): the output error over the calibration inputs.
double output_error(const std::vector<float>& w, const std::vector<float>& q, uint32_t rows, uint32_t K,
                    const Eigen::MatrixXd& h) {
  Eigen::MatrixXd d(rows, K);
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t k = 0; k < K; ++k) d(r, k) = double{w[size_t{r} * K + k]} - q[size_t{r} * K + k];
  return (d * h * d.transpose()).trace();
}

// Rounding to nearest (shared/weight_quant.h) of [rows, K], read back.
std::vector<float> nearest_values(const std::vector<float>& w, uint32_t rows, uint32_t K, DType dtype) {
  std::vector<float> out(w.size());
  if (dtype == DType::I8) {
    std::vector<int8_t> b(layout::panel8x4_bytes(1, rows, K));
    std::vector<float> s(layout::row_scale_elements(1, rows));
    EXPECT_TRUE(quant::quantize_i8_panel8x4(w.data(), 1, rows, K, b.data(), s.data()));
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t k = 0; k < K; ++k)
        out[size_t{r} * K + k] = b[layout::panel8x4_index(1, K, 0, r, k)] * s[layout::gate_column(1, 0, r)];
  } else {
    std::vector<uint8_t> b(layout::panel8x8q4_bytes(1, rows, K));
    std::vector<uint16_t> s(layout::group_scale_elements(1, rows, K));
    EXPECT_TRUE(quant::quantize_i4_panel8x8q4(w.data(), 1, rows, K, b.data(), s.data()));
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t k = 0; k < K; ++k)
        out[size_t{r} * K + k] = layout::panel8x8q4_load(b.data(), 1, K, 0, r, k) *
                                 layout::float_from_half(s[layout::group_scale_index(1, K, 0, r, k / 32)]);
  }
  return out;
}

TEST(Gptq, DiagonalMomentsFeedNothingForward) {
  // No correlation to exploit: int8 is rounding to nearest byte for byte
  // (gate-packed LSTM matrix [4*10, 70], stored); int4 rounds each weight to
  // nearest on its group's chosen scale, a scale that loses no more than
  // nearest's own (d_0) would.
  const uint32_t G = 4, units = 10, K = 70;
  const Problem p = random_problem(G * units, K, 0, 5);
  const Eigen::MatrixXd diag = p.h.diagonal().asDiagonal();
  const RoundedMatrix r8 = round_gptq("w", p.w.data(), G * units, K, DType::I8, diag);
  std::vector<int8_t> a(layout::panel8x4_bytes(G, units, K)), b(a.size());
  std::vector<float> sa(layout::row_scale_elements(G, units)), sb(sa.size());
  ASSERT_TRUE(quant::quantize_i8_panel8x4(p.w.data(), G, units, K, a.data(), sa.data()));
  ASSERT_TRUE(quant::store_i8_panel8x4(r8.q.data(), r8.row_scales.data(), G, units, K, b.data(), sb.data()));
  EXPECT_EQ(a, b);
  EXPECT_EQ(sa, sb);

  const RoundedMatrix r4 = round_gptq("w", p.w.data(), G * units, K, DType::I4, diag);
  const std::vector<float> near = nearest_values(p.w, G * units, K, DType::I4);
  // Input 0 is dead (never driven): its diagonal counts as 1.
  Eigen::VectorXd h = diag.diagonal();
  h(0) = 1.0;
  const double lambda = 0.01 * h.mean();
  for (uint32_t r = 0; r < G * units; ++r) {
    for (uint32_t g0 = 0; g0 < K; g0 += 32) {
      const float d = layout::float_from_half(r4.group_scales[size_t{r} * 3 + g0 / 32]);
      double loss = 0, loss_near = 0;
      for (uint32_t k = g0; k < std::min(K, g0 + 32); ++k) {
        const float w = p.w[size_t{r} * K + k];
        const int q = std::min(7, std::max(-8, static_cast<int>(std::nearbyint(w / d))));
        ASSERT_EQ(r4.q[size_t{r} * K + k], q) << r << " " << k;
        const double hk = h(k) + lambda;  // 1 / U_kk^2 for a diagonal H
        loss += (w - q * double{d}) * (w - q * double{d}) * hk;
        const double en = double{w} - near[size_t{r} * K + k];
        loss_near += en * en * hk;
      }
      EXPECT_LE(loss, loss_near * (1 + 1e-12)) << r << " " << g0;
    }
  }
}

TEST(Gptq, CorrelatedInputsLoseLessThanRoundingToNearest) {
  const uint32_t rows = 64, K = 96;
  const Problem p = random_problem(rows, K, 7, 6);
  for (DType dtype : {DType::I8, DType::I4}) {
    const RoundedMatrix g = round_gptq("w", p.w.data(), rows, K, dtype, p.h);
    std::vector<float> qg(p.w.size());
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t k = 0; k < K; ++k) qg[size_t{r} * K + k] = g.value(r, k);
    const double eg = output_error(p.w, qg, rows, K, p.h);
    const double en = output_error(p.w, nearest_values(p.w, rows, K, dtype), rows, K, p.h);
    std::printf("%s: output error gptq %.4g, nearest %.4g (%.2fx)\n", dtype_name(dtype), eg, en, en / eg);
    EXPECT_LT(eg, 0.7 * en) << dtype_name(dtype);
  }
}

TEST(Gptq, StoresWhereTheRuntimeReads) {
  const uint32_t G = 3, units = 11, K = 40;
  std::mt19937 rng(7);
  std::vector<int8_t> q(size_t{G} * units * K);
  std::vector<uint16_t> gs(size_t{G} * units * layout::group_count(K));
  std::vector<float> rs(size_t{G} * units);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>(static_cast<int>(rng() % 16) - 8);
  for (size_t i = 0; i < gs.size(); ++i) gs[i] = layout::half_from_float(0.01f * (1 + i % 7));
  for (size_t i = 0; i < rs.size(); ++i) rs[i] = 0.02f * (1 + i % 5);
  std::vector<uint8_t> b4(layout::panel8x8q4_bytes(G, units, K));
  std::vector<uint16_t> s4(layout::group_scale_elements(G, units, K));
  ASSERT_TRUE(quant::store_i4_panel8x8q4(q.data(), gs.data(), G, units, K, b4.data(), s4.data()));
  std::vector<int8_t> b8(layout::panel8x4_bytes(G, units, K));
  std::vector<float> s8(layout::row_scale_elements(G, units));
  ASSERT_TRUE(quant::store_i8_panel8x4(q.data(), rs.data(), G, units, K, b8.data(), s8.data()));
  for (uint32_t g = 0; g < G; ++g) {
    for (uint32_t u = 0; u < units; ++u) {
      const size_t r = size_t{g} * units + u;
      EXPECT_EQ(s8[layout::gate_column(G, g, u)], rs[r]);
      for (uint32_t k = 0; k < K; ++k) {
        EXPECT_EQ(layout::panel8x8q4_load(b4.data(), G, K, g, u, k), q[r * K + k]);
        EXPECT_EQ(b8[layout::panel8x4_index(G, K, g, u, k)], q[r * K + k]);
        EXPECT_EQ(s4[layout::group_scale_index(G, K, g, u, k / 32)], gs[r * layout::group_count(K) + k / 32]);
      }
    }
  }
  // Off the grid: refused.
  q[5] = 8;
  EXPECT_FALSE(quant::store_i4_panel8x8q4(q.data(), gs.data(), G, units, K, b4.data(), s4.data()));
  rs[2] = 0.0f;
  EXPECT_FALSE(quant::store_i8_panel8x4(q.data(), rs.data(), G, units, K, b8.data(), s8.data()));
}

TEST(Gptq, NonFiniteWeightsAreRefusedByName) {
  std::vector<float> w(64, 0.1f);
  w[9] = NAN;
  try {
    round_gptq("lstm.l0.w_hh", w.data(), 2, 32, DType::I4, Eigen::MatrixXd::Identity(32, 32));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lstm.l0.w_hh"), std::string::npos) << e.what();
  }
}

}  // namespace
