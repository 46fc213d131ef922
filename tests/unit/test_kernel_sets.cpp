// Every kernel set this CPU can run, against the reference set, kernel by
// kernel, on random shapes (odd unit counts, odd K, every gate count): the
// GEMM (bias, initial rows, compact and panel-order outputs, row and vector
// ranges), the fused single-sample steps of LSTM, GRU and RNN tanh/relu,
// the batched path (GEMM then update), and the element-wise kernels. Each SIMD set is tested on its
// own: on an AVX-512 machine the AVX2 set runs too, and the two must agree
// bit for bit (kernels/kernel_set.h, numeric contract), as must a fused step
// and the GEMM + update it replaces.
//
// The sets come from kernels/registry.h, the same place the CPU backend
// takes them from; sets this CPU cannot run are reported as skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernel_set.h"
#include "kernels/registry.h"
#include "shared/weight_layout.h"

namespace {

using namespace ferry;
using kernels::KernelSet;

// A logical [G*units, K] matrix and its Panel8 copy, 64-byte aligned.
struct PackedMatrix {
  std::vector<float> logical;  // row-major
  std::vector<float> storage;
  float* packed = nullptr;
  Weight w;

  PackedMatrix(std::mt19937& rng, uint32_t gates, uint32_t units, uint32_t cols, float scale = 0.5f) {
    std::uniform_real_distribution<float> dist(-scale, scale);
    logical.resize(size_t{gates} * units * cols);
    for (float& v : logical) v = dist(rng);
    const uint64_t n = layout::panel8_elements(gates, units, cols);
    storage.assign(n + 16, 0.0f);
    packed = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) / 4 % 16) % 16;
    for (uint32_t g = 0; g < gates; ++g)
      for (uint32_t u = 0; u < units; ++u)
        for (uint32_t k = 0; k < cols; ++k)
          packed[layout::panel8_index(gates, cols, g, u, k)] = logical[(size_t{g} * units + u) * cols + k];
    w.data = packed;
    w.gates = static_cast<uint8_t>(gates);
    w.units = units;
    w.cols = cols;
    w.dtype = DType::kF32;
    w.layout = WeightLayout::kPanel8;
  }
};

std::vector<float> random_vector(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<const KernelSet*> simd_sets() {
  const KernelSet* sets[8];
  const size_t n = kernels::runnable_simd_kernel_sets(DType::kF32, sets, 8);
  return std::vector<const KernelSet*>(sets, sets + n);
}

const KernelSet& reference() { return *kernels::reference_kernel_set(DType::kF32); }

// Bound on |fma chain - separate sum| for a dot product of length K whose
// terms are at most `term` in magnitude.
float sum_tolerance(uint32_t k, float term) { return 4e-7f * k * term + 1e-6f; }

TEST(KernelSets, RegistryHasTheReferenceAndReportsTheSimdSets) {
  ASSERT_NE(kernels::reference_kernel_set(DType::kF32), nullptr);
  EXPECT_STREQ(reference().name, "f32_reference");
  EXPECT_EQ(reference().strategy, kernels::StepStrategy::kPerSample);
  const std::vector<const KernelSet*> sets = simd_sets();
  for (const KernelSet* s : sets) {
    EXPECT_EQ(s->dtype, DType::kF32);
    EXPECT_EQ(s->strategy, kernels::StepStrategy::kPanels);
    std::printf("[ INFO     ] runnable SIMD set: %s\n", s->name);
  }
  if (!sets.empty()) EXPECT_EQ(kernels::best_simd_kernel_set(DType::kF32), sets.back());
  // The quantized sets (f16, i8, i4) have their own suite: test_quant_kernels.cpp.
}

TEST(KernelSets, GemmMatchesTheReference) {
  const std::vector<const KernelSet*> sets = simd_sets();
  if (sets.empty()) GTEST_SKIP() << "this CPU runs no SIMD kernel set of this build";
  std::mt19937 rng(7);
  struct Shape {
    uint32_t gates, units, k;
    size_t rows;
  };
  // Three gates in calls of 4 to 8 rows (the halves below): f32_avx512's
  // panel tiles of 4 to 8 rows, vectors split off a panel's edge on either
  // side.
  const Shape shapes[] = {{1, 1, 1, 1},   {1, 7, 5, 3},    {4, 9, 13, 7},  {3, 17, 8, 13}, {4, 64, 33, 6},
                          {1, 130, 19, 2}, {3, 24, 64, 12}, {4, 5, 100, 1}, {1, 16, 16, 25}, {3, 40, 50, 16},
                          {3, 9, 30, 10},  {3, 61, 7, 8}};
  for (const Shape& sh : shapes) {
    PackedMatrix w(rng, sh.gates, sh.units, sh.k);
    PackedMatrix bias(rng, sh.gates, sh.units, 1);
    const std::vector<float> a = random_vector(rng, sh.rows * sh.k);
    const uint32_t cols = layout::gate_row_floats(sh.gates, sh.units);
    const uint32_t vectors = cols / layout::kPanel;
    const std::vector<float> init = random_vector(rng, sh.rows * cols);
    for (int mode = 0; mode < 3; ++mode) {  // bias, initial rows, nothing
      kernels::GemmArgs args{&w.w, a.data(), sh.k, mode == 0 ? &bias.w : nullptr, mode == 1 ? init.data() : nullptr,
                             nullptr, cols, cols};
      std::vector<float> want(sh.rows * cols, 0.0f);
      args.c = want.data();
      reference().gemm(args, 0, sh.rows, 0, vectors);
      std::vector<float> first;
      for (const KernelSet* set : sets) {
        std::vector<float> got(sh.rows * cols, 0.0f);
        args.c = got.data();
        // In two row ranges and two vector ranges, as threads would split it.
        const size_t m_half = sh.rows / 2;
        const uint32_t q_half = vectors / 2;
        set->gemm(args, 0, m_half, 0, vectors);
        set->gemm(args, m_half, sh.rows, 0, q_half);
        set->gemm(args, m_half, sh.rows, q_half, vectors);
        for (size_t m = 0; m < sh.rows; ++m) {
          for (uint32_t g = 0; g < sh.gates; ++g) {
            for (uint32_t u = 0; u < sh.units; ++u) {
              const size_t col = m * cols + layout::gate_column(sh.gates, g, u);
              EXPECT_NEAR(got[col], want[col], sum_tolerance(sh.k, 0.5f))
                  << set->name << " G" << sh.gates << " units " << sh.units << " K " << sh.k << " mode " << mode;
            }
          }
        }
        if (first.empty()) {
          first = got;
        } else {
          EXPECT_EQ(std::memcmp(first.data(), got.data(), got.size() * sizeof(float)), 0)
              << set->name << " differs from " << sets.front()->name << " (must be bit-identical)";
        }
      }
    }
  }
}

TEST(KernelSets, CompactGemmWritesOnlyTheTrueWidth) {
  const std::vector<const KernelSet*> sets = simd_sets();
  if (sets.empty()) GTEST_SKIP() << "this CPU runs no SIMD kernel set of this build";
  std::mt19937 rng(11);
  for (uint32_t out : {1u, 5u, 12u, 17u}) {
    PackedMatrix w(rng, 1, out, 9);
    PackedMatrix bias(rng, 1, out, 1);
    const std::vector<float> a = random_vector(rng, 3 * 9);
    for (const KernelSet* set : {&reference(), sets.back()}) {
      std::vector<float> c(3 * out + 8, 42.0f);
      const kernels::GemmArgs args{&w.w, a.data(), 9, &bias.w, nullptr, c.data(), out, out};
      set->gemm(args, 0, 3, 0, layout::panels_of(out));
      for (size_t i = 3 * out; i < c.size(); ++i) EXPECT_EQ(c[i], 42.0f) << set->name << " wrote past the row";
    }
  }
}

// One fused step of one sample on `set`, and the reference step, from the
// same state; h and c compared.
void compare_step(const KernelSet* set, layout::CellKind kind, bool relu, uint32_t in, uint32_t hidden, uint32_t seed) {
  std::mt19937 rng(seed);
  const uint32_t G = layout::gate_count(kind);
  PackedMatrix w_ih(rng, G, hidden, in), w_hh(rng, G, hidden, hidden), bias(rng, G, hidden, 1),
      b_hn(rng, 1, hidden, 1);
  Cell cell;
  cell.w_ih = w_ih.w;
  cell.w_hh = w_hh.w;
  cell.bias = bias.w;
  if (kind == layout::CellKind::kGru) cell.b_hn = b_hn.w;
  cell.in = in;
  const std::vector<float> x = random_vector(rng, in), h0 = random_vector(rng, hidden), c0 = random_vector(rng, hidden);

  std::vector<float> h_ref = h0, c_ref = c0, scratch(2 * G * hidden + hidden);
  const kernels::SampleStepArgs ra{&cell, hidden, x.data(), h_ref.data(), c_ref.data(), scratch.data(), relu ? 1 : 0};
  reference().sample_step[kernels::kind_index(kind)](ra);

  std::vector<float> c_got = c0, h_new(hidden);
  const kernels::StepArgs sa{&cell.w_ih, x.data(), nullptr, &cell.bias, &cell.w_hh, h0.data(),
                             kind == layout::CellKind::kGru ? &cell.b_hn : nullptr, c_got.data(), h_new.data(),
                             hidden, relu ? 1 : 0};
  set->step[kernels::kind_index(kind)](sa, 0, layout::panels_of(hidden));
  for (uint32_t j = 0; j < hidden; ++j) {
    EXPECT_NEAR(h_new[j], h_ref[j], 2e-5) << set->name << " kind " << int(kind) << " H " << hidden << " unit " << j;
    if (kind == layout::CellKind::kLstm) EXPECT_NEAR(c_got[j], c_ref[j], 2e-5) << set->name << " c " << j;
  }

  // The batched path (input GEMM, recurrent GEMM continuing it, update) must
  // give the fused step's bits: the numeric contract.
  const uint32_t cols = layout::gate_row_floats(G, hidden);
  std::vector<float> pre(cols), rec(cols), h_batched(hidden), c_batched = c0;
  set->gemm(kernels::GemmArgs{&cell.w_ih, x.data(), in, &cell.bias, nullptr, pre.data(), cols, cols}, 0, 1, 0,
            cols / layout::kPanel);
  rec = pre;
  if (kind == layout::CellKind::kGru) {
    for (uint32_t p = 0; p < layout::panels_of(hidden); ++p)
      for (uint32_t j = 0; j < layout::kPanel; ++j) rec[(p * 3 + 2) * layout::kPanel + j] = b_hn.packed[p * layout::kPanel + j];
  }
  set->gemm(kernels::GemmArgs{&cell.w_hh, h0.data(), hidden, nullptr, rec.data(), rec.data(), cols, cols}, 0, 1, 0,
            cols / layout::kPanel);
  const kernels::UpdateArgs ua{rec.data(), pre.data(), c_batched.data(), h0.data(), h_batched.data(), hidden,
                               relu ? 1 : 0};
  set->update[kernels::kind_index(kind)](ua, 0, layout::panels_of(hidden));
  EXPECT_EQ(std::memcmp(h_batched.data(), h_new.data(), hidden * sizeof(float)), 0)
      << set->name << ": fused step and GEMM + update differ, kind " << int(kind) << " H " << hidden;
  if (kind == layout::CellKind::kLstm) {
    EXPECT_EQ(std::memcmp(c_batched.data(), c_got.data(), hidden * sizeof(float)), 0) << set->name << " c";
  }
}

TEST(KernelSets, FusedStepsMatchTheReferenceAndTheBatchedPath) {
  const std::vector<const KernelSet*> sets = simd_sets();
  if (sets.empty()) GTEST_SKIP() << "this CPU runs no SIMD kernel set of this build";
  uint32_t seed = 1;
  for (const KernelSet* set : sets) {
    // 61 and 72: the pipelined LSTM step (from 8 panels) with a partial
    // last panel, and with an odd panel after its pairs; 13 and 49: the
    // AVX-512 GRU step's lone panel pair with a partial second panel, and
    // a pair between its group of 4 and a last odd panel. Inputs of even
    // width take that step's aligned loads, odd ones its unaligned loads.
    for (uint32_t hidden : {1u, 7u, 8u, 13u, 16u, 23u, 40u, 49u, 61u, 64u, 72u}) {
      for (uint32_t in : {1u, 5u, 16u, 33u}) {
        compare_step(set, layout::CellKind::kLstm, false, in, hidden, seed++);
        compare_step(set, layout::CellKind::kGru, false, in, hidden, seed++);
        compare_step(set, layout::CellKind::kRnn, false, in, hidden, seed++);
        compare_step(set, layout::CellKind::kRnn, true, in, hidden, seed++);
      }
    }
  }
}

// The batched step in one kernel (batch_step, where a set has it: LSTM,
// GRU) against the input gemm, the recurrent gemm continuing it and
// update[] it replaces, bit for bit: rows 1 to 13 and 64 (every tile
// remainder, the narrow-batch tiles below 4 rows) and 70 (a second block of
// rows in f32_avx2's step), hidden sizes with a partial last panel, input
// widths below, at and across f32_avx2's k pass (160; its passes split the
// step's K = in + h_in in equal parts: one pass, or 2 or 3 with the
// boundaries inside W_ih, on its end or inside W_hh), with and without a
// bias (GRU: and b_hn), rows and panels
// split as threads split them, and rows that have ended (no update: their c
// and h_new untouched), and every row running (the AVX-512 set updates two
// rows a vector).
TEST(KernelSets, BatchStepsAreGemmPlusUpdate) {
  const std::vector<const KernelSet*> sets = simd_sets();
  if (sets.empty()) GTEST_SKIP() << "this CPU runs no SIMD kernel set of this build";
  std::mt19937 rng(29);
  size_t checked = 0;
  struct Shape {
    uint32_t hidden, k, in;
  };
  // k = h_in (the recurrent product's width; h_out with a projection).
  const Shape shapes[] = {{1, 4, 3},    {7, 10, 4},   {8, 11, 5},    {23, 26, 5},  {40, 43, 2},
                          {64, 67, 6},  {9, 130, 7},  {16, 100, 100}, {17, 64, 192}, {24, 150, 129},
                          {8, 128, 128}, {13, 200, 56}, {10, 300, 100}, {12, 150, 250}};
  for (const KernelSet* set : sets) {
    for (int kind = 0; kind < kernels::kCellKinds; ++kind) {
      const auto fused = set->batch_step[kind];
      if (!fused) continue;
      const bool gru = kind == kernels::kind_index(layout::CellKind::kGru);
      ASSERT_TRUE(gru || kind == kernels::kind_index(layout::CellKind::kLstm)) << set->name << ": LSTM and GRU only";
      const uint32_t G = gru ? 3 : 4;
      for (const Shape& sh : shapes) {
        for (size_t rows : {1u, 2u, 3u, 4u, 5u, 8u, 9u, 13u, 64u, 70u}) {
          if (rows >= 64 && sh.hidden > 24) continue;  // (time)
          for (bool some_ended : {true, false}) {
            const uint32_t hidden = sh.hidden, k = sh.k, in = sh.in, cols = layout::gate_row_floats(G, hidden);
            const uint32_t panels = layout::panels_of(hidden);
            // h rows hold at least the units the GRU update reads (k >= hidden here).
            const size_t ldh = k + 1, ldx = in + 2, ldh_new = hidden + 5, ldg = cols + 8;
            PackedMatrix w_hh(rng, G, hidden, k), w_ih(rng, G, hidden, in), bias(rng, G, hidden, 1),
                b_hn(rng, 1, hidden, 1);
            const std::vector<float> h = random_vector(rng, rows * ldh), x = random_vector(rng, rows * ldx),
                                     c0 = random_vector(rng, rows * hidden);
            std::vector<int32_t> lengths(rows);
            for (size_t b = 0; b < rows; ++b) {  // at t = 2: some rows ended, or none
              lengths[b] = some_ended ? static_cast<int32_t>((b * 7 + 3) % 5) : 3;
            }
            const size_t t = 2;
            const Weight* b_or_null = (hidden + rows) % 2 ? &bias.w : nullptr;
            const Weight* bhn_or_null = gru && (hidden + rows) % 3 != 1 ? &b_hn.w : nullptr;
            // Expected: the two gemms into gate rows (GRU: the recurrent one into
            // a copy whose n slot starts from b_hn), then update[] on the
            // active rows.
            std::vector<float> pre(rows * ldg), c_want = c0, h_want(rows * ldh_new, -7.0f);
            set->gemm(kernels::GemmArgs{&w_ih.w, x.data(), ldx, b_or_null, nullptr, pre.data(), ldg, cols}, 0, rows, 0,
                      cols / layout::kPanel);
            std::vector<float> rec = pre;
            if (gru) {
              for (size_t b = 0; b < rows; ++b)
                for (uint32_t p = 0; p < panels; ++p)
                  for (uint32_t j = 0; j < layout::kPanel; ++j)
                    rec[b * ldg + (p * 3 + 2) * layout::kPanel + j] = bhn_or_null ? b_hn.packed[p * layout::kPanel + j] : 0.0f;
            }
            set->gemm(kernels::GemmArgs{&w_hh.w, h.data(), ldh, nullptr, rec.data(), rec.data(), ldg, cols}, 0, rows, 0,
                      cols / layout::kPanel);
            for (size_t b = 0; b < rows; ++b) {
              if (!(t < static_cast<size_t>(lengths[b]))) continue;
              const kernels::UpdateArgs u{rec.data() + b * ldg,
                                          pre.data() + b * ldg,
                                          gru ? nullptr : c_want.data() + b * hidden,
                                          h.data() + b * ldh,
                                          h_want.data() + b * ldh_new,
                                          hidden,
                                          0};
              set->update[kind](u, 0, panels);
            }
            for (int split = 0; split < 2; ++split) {
              std::vector<float> c_got = c0, h_got(rows * ldh_new, -7.0f);
              const kernels::BatchStepArgs args{&w_ih.w,        x.data(),    ldx,          b_or_null,
                                                &w_hh.w,        h.data(),    ldh,          gru ? nullptr : c_got.data(),
                                                hidden,         h_got.data(), ldh_new,     lengths.data(),
                                                t,              hidden,      bhn_or_null};
              if (split == 0) {
                fused(args, 0, rows, 0, panels);
              } else {  // rows and panels in two parts each, as two threads and two tasks would
                const size_t mh = rows / 2;
                const uint32_t ph = panels / 2;
                fused(args, 0, mh, 0, panels);
                fused(args, mh, rows, 0, ph);
                fused(args, mh, rows, ph, panels);
              }
              const std::string what = std::string(set->name) + (gru ? " GRU" : " LSTM") + " H " +
                                       std::to_string(hidden) + " k " + std::to_string(k) + " in " +
                                       std::to_string(in) + " rows " + std::to_string(rows) + " split " +
                                       std::to_string(split) + (some_ended ? " some ended" : " all running");
              EXPECT_EQ(std::memcmp(c_got.data(), c_want.data(), c_got.size() * sizeof(float)), 0) << what << ": c";
              EXPECT_EQ(std::memcmp(h_got.data(), h_want.data(), h_got.size() * sizeof(float)), 0) << what << ": h";
              ++checked;
            }
          }
        }
      }
    }
  }
  if (!checked) GTEST_SKIP() << "no set runnable here has a batch_step";
}

// A one-sample step with a share of a projection (step_project, where a set
// has it: LSTM, GRU with b_hn where it has a bias) against step[] and the
// projection's gemm it stands for, bit for bit: hidden sizes below the
// fused path (AVX2 step, tiles alone), at 16 panels, with a tail group
// (GRU: of 1 and 2 panels) and with more; projection K below, equal to and
// above the step's; rows with every remainder of 8 (GRU: 4); shares 1 to
// more than there are tiles (shares with no tile, groups with several);
// both panel orders; with and without a bias, with `pre` and with the
// step's own input part.
TEST(KernelSets, StepsWithAProjectionShareAreStepPlusGemm) {
  const std::vector<const KernelSet*> sets = simd_sets();
  if (sets.empty()) GTEST_SKIP() << "this CPU runs no SIMD kernel set of this build";
  std::mt19937 rng(31);
  size_t checked = 0;
  for (const KernelSet* set : sets) {
    for (int kind = 0; kind < kernels::kCellKinds; ++kind) {
      const auto fused = set->step_project[kind];
      if (!fused) continue;
      const bool lstm = kind == kernels::kind_index(layout::CellKind::kLstm);
      ASSERT_TRUE(lstm || kind == kernels::kind_index(layout::CellKind::kGru)) << set->name << ": LSTM and GRU only";
      const uint32_t G = lstm ? 4 : 3;
      int variant = 0;
      for (uint32_t hidden : {40u, 128u, 136u, 160u}) {
        for (uint32_t kx : {hidden / 4 + 1, hidden + 3}) {
          for (size_t rows : {1u, 7u, 13u, 64u}) {
            for (uint32_t shares : {1u, 5u, 64u, 700u}) {
              ++variant;
              const bool reverse = variant % 2, with_bias = variant % 3 != 0, with_pre = variant % 5 != 0;
              const uint32_t kh = hidden, in = hidden % 7 + 3, cols = layout::gate_row_floats(G, hidden);
              const uint32_t panels = layout::panels_of(hidden);
              const size_t lda = kx + 2, ldc = cols + 16;
              PackedMatrix w_hh(rng, G, hidden, kh), w_ih(rng, G, hidden, in), w_px(rng, G, hidden, kx),
                  bias(rng, G, hidden, 1), b_hn(rng, 1, hidden, 1);
              const std::vector<float> h = random_vector(rng, kh), x = random_vector(rng, in),
                                       c0 = random_vector(rng, hidden), a = random_vector(rng, rows * lda),
                                       pre = random_vector(rng, cols);
              const Weight* b = with_bias ? &bias.w : nullptr;
              const kernels::StepArgs step{with_pre ? nullptr : &w_ih.w,
                                           x.data(),
                                           with_pre ? pre.data() : nullptr,
                                           b,
                                           &w_hh.w,
                                           h.data(),
                                           lstm || !with_bias ? nullptr : &b_hn.w,
                                           nullptr,
                                           nullptr,
                                           hidden,
                                           0};
              // Expected: step[] over every panel, and the projection's gemm.
              std::vector<float> c_want = c0, h_want(hidden), p_want(rows * ldc, -7.0f);
              kernels::StepArgs s1 = step;
              s1.c = lstm ? c_want.data() : nullptr;
              s1.h_new = h_want.data();
              set->step[kind](s1, 0, panels);
              set->gemm(kernels::GemmArgs{&w_px.w, a.data(), lda, b, nullptr, p_want.data(), ldc, cols}, 0, rows, 0,
                        cols / layout::kPanel);
              std::vector<float> c_got = c0, h_got(hidden), p_got(rows * ldc, -7.0f);
              kernels::StepArgs s2 = step;
              s2.c = c_got.data();
              s2.h_new = h_got.data();
              for (uint32_t i = 0; i < shares; ++i) {
                const uint32_t share = (i * 3 + 1) % shares;  // every share once (3 is prime to each count), out of order
                std::vector<float> c_step = c0;
                s2.c = lstm ? c_step.data() : nullptr;
                fused(s2, kernels::ProjectShare{&w_px.w, a.data(), lda, b, p_got.data(), ldc, rows, share, shares},
                      panels, reverse);
                if (i == 0) c_got = c_step;
              }
              const std::string what = std::string(set->name) + (lstm ? " LSTM" : " GRU") + " H " +
                                       std::to_string(hidden) + " K " + std::to_string(kx) + " rows " +
                                       std::to_string(rows) + " shares " +
                                       std::to_string(shares) + (reverse ? " reverse" : "") +
                                       (with_pre ? " pre" : " w_ih") + (with_bias ? " bias" : "");
              EXPECT_EQ(std::memcmp(c_got.data(), c_want.data(), hidden * sizeof(float)), 0) << what << ": c";
              EXPECT_EQ(std::memcmp(h_got.data(), h_want.data(), hidden * sizeof(float)), 0) << what << ": h";
              EXPECT_EQ(std::memcmp(p_got.data(), p_want.data(), p_got.size() * sizeof(float)), 0)
                  << what << ": projection";
              ++checked;
            }
          }
        }
      }
    }
  }
  if (!checked) GTEST_SKIP() << "no set runnable here has a step_project";
}

TEST(KernelSets, ElementwiseKernelsMatchTheReference) {
  std::mt19937 rng(3);
  std::vector<float> x = random_vector(rng, 1001, 12.0f);
  x[5] = 0.0f;
  x[6] = -0.0f;
  for (const KernelSet* set : simd_sets()) {
    for (int op = 0; op < 3; ++op) {
      std::vector<float> want = x, got = x;
      auto fn = op == 0 ? &KernelSet::tanh : op == 1 ? &KernelSet::sigmoid : &KernelSet::relu;
      (reference().*fn)(want.data(), want.size());
      (set->*fn)(got.data(), got.size());
      for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << set->name << " op " << op << " x " << x[i];
    }
  }
}

}  // namespace
