// The quantized kernel sets (f16, i8, i4: kernels/kernel_set.h, "quantized
// sets"), every one this CPU can run, kernel by kernel:
//   - the formats: index functions, the quantizers of shared/weight_quant.h
//     (round trips, error bounds), half <-> float (all 65536 halves, and
//     against F16C where the CPU has it);
//   - quantize_rows: every set writes the reference's bytes and scales, the
//     definition holds (ties to even, |q| <= 127, zero / subnormal / NaN /
//     Inf rows, padding, int4 group corrections);
//   - GEMM: every set's outputs equal the reference's bit for bit (the
//     contract is exact), in any split of rows and vectors, and the
//     reference is within a derived bound of a float64 evaluation of the
//     dequantized math;
//   - fused steps (LSTM, GRU, RNN tanh/relu): bit-identical to the same
//     set's GEMM + update and to its own panel splits, SIMD sets of a dtype
//     bit-identical to each other, within float tolerance of the
//     reference, the reference within a derived bound of float64;
//   - f16 sets give exactly the f32 set of the same ISA on the converted
//     weights (the f16 contract is the f32 one);
//   - NaN in, NaN out; zero rows give the initial values.
// Sets built here that this CPU cannot run are reported as skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/kernel_set.h"
#include "kernels/quant/quant.h"
#include "kernels/registry.h"
#include "platform/cpu_features.h"
#include "shared/weight_layout.h"
#include "shared/weight_quant.h"

namespace {

using namespace ferry;
using kernels::KernelSet;
using layout::CellKind;

constexpr double kU = 5.9604644775390625e-08;  // 2^-24, the unit roundoff of float

const char* dtype_name(DType d) {
  return d == DType::kF16 ? "f16" : d == DType::kI8 ? "i8" : d == DType::kI4 ? "i4" : "f32";
}

bool quantizes(DType d) { return d == DType::kI8 || d == DType::kI4; }

std::vector<const KernelSet*> simd_sets(DType d) {
  const KernelSet* sets[16];
  const size_t n = kernels::runnable_simd_kernel_sets(d, sets, 16);
  return std::vector<const KernelSet*>(sets, sets + n);
}

const KernelSet* reference(DType d) { return kernels::reference_kernel_set(d); }

// The reference first, then every SIMD set this CPU runs.
std::vector<const KernelSet*> all_sets(DType d) {
  std::vector<const KernelSet*> sets;
  if (reference(d)) sets.push_back(reference(d));
  for (const KernelSet* s : simd_sets(d)) sets.push_back(s);
  return sets;
}

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// A 64-byte aligned byte buffer. Built with FERRY_TEST_TIGHT_BUFFERS (a
// sanitizer run), exactly n bytes from the allocator instead, so that
// AddressSanitizer sees any read past a tensor, a row or a scale vector.
struct Aligned {
  std::vector<uint8_t> storage;
  uint8_t* p = nullptr;
  size_t size = 0;
  explicit Aligned(size_t n = 0, uint8_t fill = 0) { resize(n, fill); }
  Aligned(const Aligned& o) { *this = o; }
  Aligned& operator=(const Aligned& o) {
    if (this != &o) {
      resize(o.size);
      if (o.size) std::memcpy(p, o.p, o.size);
    }
    return *this;
  }
  void resize(size_t n, uint8_t fill = 0) {
    size = n;
#if defined(FERRY_TEST_TIGHT_BUFFERS)
    storage.assign(n, fill);
    storage.shrink_to_fit();
    p = storage.data();
#else
    storage.assign(n + 64, fill);
    p = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
#endif
  }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(p);
  }
};

std::vector<float> random_vector(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ------------------------------------------------------------- weights --

// A logical [G*units, K] float matrix quantized into `dtype`'s layout
// (shared/weight_quant.h), with its dequantized values (row-major, double).
struct QWeight {
  DType dtype;
  uint32_t gates, units, cols;
  std::vector<float> logical;
  std::vector<double> deq;
  Aligned data, scales;
  Weight w;

  QWeight(std::mt19937& rng, DType d, uint32_t g, uint32_t u, uint32_t k, float scale = 0.5f)
      : dtype(d), gates(g), units(u), cols(k) {
    logical = random_vector(rng, size_t{g} * u * k, scale);
    // Some structure the quantizers must handle: an all-zero row, a row
    // with one large value (its others quantize coarsely), tiny values.
    if (g * u > 2) {
      for (uint32_t c = 0; c < k; ++c) logical[size_t{1} * k + c] = 0.0f;
      logical[size_t{2} * k] = 4.0f * scale;
    }
    if (g * u > 3) logical[size_t{3} * k + k / 2] = 1e-6f;
    pack();
  }

  void pack() {
    w = Weight();
    w.gates = static_cast<uint8_t>(gates);
    w.units = units;
    w.cols = cols;
    w.dtype = dtype;
    deq.assign(logical.size(), 0.0);
    switch (dtype) {
      case DType::kF16: {
        data.resize(layout::panel8_elements(gates, units, cols) * 2);
        EXPECT_TRUE(quant::pack_f16_panel8(logical.data(), gates, units, cols, data.as<uint16_t>()));
        w.layout = WeightLayout::kPanel8;
        for (uint32_t g = 0; g < gates; ++g)
          for (uint32_t u = 0; u < units; ++u)
            for (uint32_t k = 0; k < cols; ++k)
              deq[(size_t{g} * units + u) * cols + k] =
                  layout::float_from_half(data.as<uint16_t>()[layout::panel8_index(gates, cols, g, u, k)]);
        break;
      }
      case DType::kI8: {
        data.resize(layout::panel8x4_bytes(gates, units, cols));
        scales.resize(layout::row_scale_elements(gates, units) * 4);
        EXPECT_TRUE(quant::quantize_i8_panel8x4(logical.data(), gates, units, cols, data.as<int8_t>(), scales.as<float>()));
        w.layout = WeightLayout::kPanel8x4;
        w.scales = scales.as<float>();
        for (uint32_t g = 0; g < gates; ++g)
          for (uint32_t u = 0; u < units; ++u)
            for (uint32_t k = 0; k < cols; ++k)
              deq[(size_t{g} * units + u) * cols + k] =
                  double{scales.as<float>()[layout::gate_column(gates, g, u)]} *
                  data.as<int8_t>()[layout::panel8x4_index(gates, cols, g, u, k)];
        break;
      }
      case DType::kI4: {
        data.resize(layout::panel8x8q4_bytes(gates, units, cols));
        scales.resize(layout::group_scale_elements(gates, units, cols) * 2);
        EXPECT_TRUE(quant::quantize_i4_panel8x8q4(logical.data(), gates, units, cols, data.as<uint8_t>(),
                                                  scales.as<uint16_t>()));
        w.layout = WeightLayout::kPanel8x8q4;
        w.group_scales = scales.as<uint16_t>();
        for (uint32_t g = 0; g < gates; ++g)
          for (uint32_t u = 0; u < units; ++u)
            for (uint32_t k = 0; k < cols; ++k)
              deq[(size_t{g} * units + u) * cols + k] =
                  double{layout::float_from_half(
                      scales.as<uint16_t>()[layout::group_scale_index(gates, cols, g, u, k / layout::kGroup)])} *
                  layout::panel8x8q4_load(data.as<uint8_t>(), gates, cols, g, u, k);
        break;
      }
      case DType::kF32: break;
    }
    w.data = data.p;
  }

  QWeight(const QWeight& o)
      : dtype(o.dtype), gates(o.gates), units(o.units), cols(o.cols), logical(o.logical), deq(o.deq), data(o.data),
        scales(o.scales), w(o.w) {
    w.data = data.p;
    if (dtype == DType::kI8) w.scales = scales.as<float>();
    if (dtype == DType::kI4) w.group_scales = scales.as<uint16_t>();
  }

  double at(uint32_t r, uint32_t k) const { return deq[size_t{r} * cols + k]; }
};

// An fp32 Panel8 vector of G*units (a folded bias, b_hn), padding 0.
struct Bias {
  std::vector<float> logical;
  Aligned storage;
  Weight w;
  Bias(std::mt19937& rng, uint32_t gates, uint32_t units, float scale = 0.5f) {
    logical = random_vector(rng, size_t{gates} * units, scale);
    storage.resize(layout::panel8_elements(gates, units, 1) * 4);
    for (uint32_t g = 0; g < gates; ++g)
      for (uint32_t u = 0; u < units; ++u)
        storage.as<float>()[layout::gate_column(gates, g, u)] = logical[size_t{g} * units + u];
    w.data = storage.p;
    w.gates = static_cast<uint8_t>(gates);
    w.units = units;
    w.cols = 1;
    w.layout = WeightLayout::kPanel8;
  }
  Bias(const Bias& o) : logical(o.logical), storage(o.storage), w(o.w) { w.data = storage.p; }
  float at(uint32_t r) const { return logical[r]; }
};

// ---------------------------------------------------------- activations --

// A-rows for one set: the floats, and (i8, i4) quantized by the set.
struct Rows {
  size_t rows;
  uint32_t k;
  std::vector<float> x;
  Aligned q;
  size_t ldq = 0;
  std::vector<float> scales;

  Rows(std::vector<float> values, size_t n_rows, uint32_t cols) : rows(n_rows), k(cols), x(std::move(values)) {}

  void quantize(const KernelSet* set) {
    if (!set->quantize_rows) return;
    ldq = (set->activation_bytes(k) + 63) / 64 * 64;
    q.resize(rows * ldq, 0xa5);  // garbage: every byte the kernels read must be written
    scales.assign(rows, -1.0f);
    set->quantize_rows(x.data(), rows, k, k, q.as<int8_t>(), ldq, scales.data());
  }
  const int8_t* qrow(size_t m) { return q.as<int8_t>() + m * ldq; }
  // The dequantized activation the product uses (the float itself for f16).
  double at(DType d, size_t m, uint32_t c) {
    return quantizes(d) ? double{scales[m]} * qrow(m)[c] : double{x[m * k + c]};
  }
};

// ------------------------------------------------- float64 products --

// y = init + sum_k W[r][k] a[k] in float64 on the dequantized values, and
// the bound kernel_set.h's formulas keep to it (derivation beside each).
struct Exact {
  double y, bound;
};

Exact exact_output(const QWeight& w, uint32_t r, Rows& a, size_t m, double init) {
  const DType d = w.dtype;
  double sum = 0, abs_sum = 0;
  if (d == DType::kI4) {
    // acc = sum over n groups of fma(d_g, dot_g, acc): each fma rounds once,
    // |error| <= u |acc_g| <= u sum |t_g|, so <= n u sum|t_g|; then
    // y = fma(acc, s, init): s * acc error + u |y|.
    const uint32_t groups = static_cast<uint32_t>(layout::group_count(w.cols));
    for (uint32_t g = 0; g < groups; ++g) {
      double t = 0;
      for (uint32_t k = g * layout::kGroup; k < w.cols && k < (g + 1) * layout::kGroup; ++k) t += w.at(r, k) * a.at(d, m, k);
      sum += t;
      abs_sum += std::fabs(t);
    }
    return {init + sum, 1.01 * kU * ((groups + 2) * abs_sum + std::fabs(init)) + 1e-37};
  }
  for (uint32_t k = 0; k < w.cols; ++k) {
    sum += w.at(r, k) * a.at(d, m, k);
    abs_sum += std::fabs(w.at(r, k) * a.at(d, m, k));
  }
  if (d == DType::kI8) {
    // p = w_scale * a_scale rounds (u |T|), float(dot) is exact (|dot| <
    // 2^24 here), the fma rounds once (u |y|, |y| <= |T| + |init|).
    return {init + sum, 2.01 * kU * (abs_sum + std::fabs(init)) + 1e-37};
  }
  // f16: K fused steps from init, each rounding once: gamma_K bound.
  return {init + sum, 1.01 * kU * w.cols * (abs_sum + std::fabs(init)) + 1e-37};
}

// ------------------------------------------------------------- registry --

TEST(QuantKernelSets, RegistryHasTheReferencesAndReportsTheSimdSets) {
  for (DType d : {DType::kF16, DType::kI8, DType::kI4}) {
    const KernelSet* ref = reference(d);
    if (!ref) GTEST_SKIP() << "built with FERRY_QUANT_REFERENCE=OFF: no quantized reference sets";
    EXPECT_EQ(ref->dtype, d);
    EXPECT_EQ(ref->strategy, kernels::StepStrategy::kPanels);
    EXPECT_EQ(std::string(ref->name), std::string(dtype_name(d)) + "_reference");
    EXPECT_EQ(ref->quantize_rows != nullptr, quantizes(d));
    EXPECT_EQ(ref->activation_bytes != nullptr, quantizes(d));
    const std::vector<const KernelSet*> sets = simd_sets(d);
    for (const KernelSet* s : sets) {
      EXPECT_EQ(s->dtype, d) << s->name;
      EXPECT_EQ(s->strategy, kernels::StepStrategy::kPanels) << s->name;
      EXPECT_EQ(s->quantize_rows != nullptr, quantizes(d)) << s->name;
      std::printf("[ INFO     ] runnable %s set: %s\n", dtype_name(d), s->name);
    }
    if (!sets.empty()) EXPECT_EQ(kernels::best_simd_kernel_set(d), sets.back());
  }
  // The f32 sets are untouched by the quantized entries.
  for (const KernelSet* s : all_sets(DType::kF32)) {
    EXPECT_EQ(s->quantize_rows, nullptr) << s->name;
    EXPECT_EQ(s->activation_bytes, nullptr) << s->name;
  }
}

// Every quantized SIMD set compiled into this build that the CPU cannot run.
TEST(QuantKernelSets, EverySetBuiltHereRunsOnThisCpu) {
  struct Built {
    const KernelSet* set;
    const char* needs;
  };
  const Built built[] = {
      {kernels::f16_avx2_kernel_set(), "AVX2, FMA and F16C"},
      {kernels::i8_avx2_kernel_set(), "AVX2, FMA and F16C"},
      {kernels::i4_avx2_kernel_set(), "AVX2, FMA and F16C"},
      {kernels::i8_avxvnni_kernel_set(), "AVX-VNNI"},
      {kernels::i4_avxvnni_kernel_set(), "AVX-VNNI"},
      {kernels::i8_avx512vnni_kernel_set(), "AVX-512 F/BW/VL/VNNI"},
      {kernels::i4_avx512vnni_kernel_set(), "AVX-512 F/BW/VL/VNNI"},
      {kernels::f16_neon_kernel_set(), "NEON"},
      {kernels::i8_neon_kernel_set(), "NEON (ARMv7: and VFPv4)"},
      {kernels::i4_neon_kernel_set(), "NEON (ARMv7: and VFPv4)"},
      {kernels::i8_neondot_kernel_set(), "the dot-product extension (HWCAP_ASIMDDP)"},
      {kernels::i4_neondot_kernel_set(), "the dot-product extension (HWCAP_ASIMDDP)"},
  };
  std::string not_run;
  for (const Built& b : built) {
    if (!b.set) continue;  // not built for this architecture
    const std::vector<const KernelSet*> sets = simd_sets(b.set->dtype);
    if (std::find(sets.begin(), sets.end(), b.set) == sets.end()) {
      not_run += std::string(not_run.empty() ? "" : "; ") + b.set->name + " (needs " + b.needs + ")";
    }
  }
  if (!not_run.empty()) GTEST_SKIP() << "built but not run, this CPU lacks the ISA: " << not_run;
}

// -------------------------------------------------------------- formats --

TEST(QuantFormats, HalfConversionIsExactAndRoundsToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = layout::float_from_half(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    if (nan) {
      EXPECT_TRUE(std::isnan(f)) << h;
      continue;
    }
    // The exact value: (-1)^s 2^(e-15) (1 + m/1024), or subnormal m 2^-24.
    const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double mag = e == 0x1f ? std::numeric_limits<double>::infinity()
                       : e == 0  ? std::ldexp(double(m), -24)
                                 : std::ldexp(1.0 + m / 1024.0, int(e) - 15);
    EXPECT_EQ(double(f), (h & 0x8000) ? -mag : mag) << h;
    EXPECT_EQ(layout::half_from_float(f), h) << h;  // round trip
  }
  // Ties to even, overflow, underflow.
  EXPECT_EQ(layout::half_from_float(1.0f + 1.0f / 2048), 0x3c00);              // tie, even down
  EXPECT_EQ(layout::half_from_float(1.0f + 3.0f / 2048), 0x3c02);              // tie, even up
  EXPECT_EQ(layout::half_from_float(65519.0f), 0x7bff);                        // below the tie
  EXPECT_EQ(layout::half_from_float(65520.0f), 0x7c00);                        // tie to Inf
  EXPECT_EQ(layout::half_from_float(std::ldexp(1.0f, -25)), 0x0000);          // tie to 0
  EXPECT_EQ(layout::half_from_float(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(layout::half_from_float(std::ldexp(3.0f, -25)), 0x0002);          // 1.5 ulp: tie, even up
  EXPECT_EQ(layout::half_from_float(std::ldexp(1023.5f, -24)), 0x0400);       // subnormal rounds to normal
  EXPECT_EQ(layout::half_from_float(-0.0f), 0x8000);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t f16c_from_float(float f) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), 0), 0));
}
__attribute__((target("f16c"))) float f16c_to_float(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
#endif

TEST(QuantFormats, HalfConversionAgreesWithF16c) {
#if defined(__x86_64__)
  if (!ferry::platform::x86_has_f16c()) GTEST_SKIP() << "this CPU has no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = layout::float_from_half(static_cast<uint16_t>(h)), b = f16c_to_float(static_cast<uint16_t>(h));
    if (std::isnan(a)) {
      EXPECT_TRUE(std::isnan(b));
    } else {
      EXPECT_EQ(bits(a), bits(b)) << h;
    }
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 1000000; ++i) {
    uint32_t b = any(rng);
    if (i % 2) b = (b & 0x87ffffffu) | 0x30000000u;  // half the draws near the half range
    float f;
    std::memcpy(&f, &b, sizeof f);
    if (std::isnan(f)) continue;
    ASSERT_EQ(layout::half_from_float(f), f16c_from_float(f)) << std::hexfloat << f;
  }
#else
  GTEST_SKIP() << "F16C is x86";
#endif
}

TEST(QuantFormats, IndexFunctionsCoverEveryByteOnce) {
  for (uint32_t G : {1u, 3u, 4u}) {
    for (uint32_t units : {1u, 8u, 13u}) {
      for (uint32_t K : {1u, 4u, 5u, 31u, 32u, 33u, 70u}) {
        // Panel8x4: each logical element its own byte, all inside the tensor.
        std::vector<int> hits(layout::panel8x4_bytes(G, units, K), 0);
        for (uint32_t g = 0; g < G; ++g)
          for (uint32_t u = 0; u < units; ++u)
            for (uint32_t k = 0; k < K; ++k) ++hits.at(layout::panel8x4_index(G, K, g, u, k));
        EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), long(G) * units * K);
        EXPECT_EQ(std::count_if(hits.begin(), hits.end(), [](int h) { return h > 1; }), 0);
        EXPECT_EQ(hits.size(), layout::padded_units(units) * G * layout::k4_of(K));
        // Vector q, quad c starts where the index function puts unit 8p, k 4c.
        for (uint32_t q = 0; q < G * layout::panels_of(units); ++q)
          EXPECT_EQ(layout::panel8x4_vector_index(G, K, q) + layout::panel8x4_quad_stride(G),
                    layout::panel8x4_index(G, K, q % G, (q / G) * 8, 4));
        // Panel8x8q4: each logical element its own nibble.
        std::vector<int> nibbles(2 * layout::panel8x8q4_bytes(G, units, K), 0);
        for (uint32_t g = 0; g < G; ++g)
          for (uint32_t u = 0; u < units; ++u)
            for (uint32_t k = 0; k < K; ++k)
              ++nibbles.at(2 * layout::panel8x8q4_index(G, K, g, u, k) + layout::panel8x8q4_high_nibble(k));
        EXPECT_EQ(std::count(nibbles.begin(), nibbles.end(), 1), long(G) * units * K);
        EXPECT_EQ(std::count_if(nibbles.begin(), nibbles.end(), [](int h) { return h > 1; }), 0);
        // The low (high) nibbles of a block are quad 2b (2b + 1) in Panel8x4 order.
        for (uint32_t k = 0; k < K; ++k) {
          const uint64_t byte = layout::panel8x8q4_index(G, K, G - 1, units - 1, k);
          const uint64_t block = byte / 32, lane_byte = byte % 32;
          EXPECT_EQ(lane_byte, ((units - 1) % 8) * 4 + k % 4);
          EXPECT_EQ(block, ((units - 1) / 8 * (layout::k32_of(K) / 8) + k / 8) * G + G - 1);
        }
        // Group scales: one per (row, group), all inside.
        std::vector<int> scale_hits(layout::group_scale_elements(G, units, K), 0);
        for (uint32_t g = 0; g < G; ++g)
          for (uint32_t u = 0; u < units; ++u)
            for (uint32_t gi = 0; gi < layout::group_count(K); ++gi)
              ++scale_hits.at(layout::group_scale_index(G, K, g, u, gi));
        EXPECT_EQ(std::count(scale_hits.begin(), scale_hits.end(), 1), long(G) * units * layout::group_count(K));
      }
    }
  }
  // Every int4 value through a nibble and back, in either half of a byte.
  uint8_t byte[32] = {};
  for (int q = -8; q <= 7; ++q) {
    for (uint32_t k : {0u, 4u}) {
      layout::panel8x8q4_store(byte, 1, 8, 0, 0, k, q);
      EXPECT_EQ(layout::panel8x8q4_load(byte, 1, 8, 0, 0, k), q);
    }
    EXPECT_EQ(byte[0], static_cast<uint8_t>((q + 8) | ((q + 8) << 4)));
  }
}

// The quantizers round-trip: every stored value dequantizes within its
// step of the original, padding holds zeros and the documented scales.
TEST(QuantFormats, QuantizersRoundTripWithinTheirStep) {
  std::mt19937 rng(17);
  for (uint32_t G : {1u, 3u, 4u}) {
    for (uint32_t K : {1u, 5u, 32u, 45u, 96u}) {
      const uint32_t units = 11;
      QWeight f16(rng, DType::kF16, G, units, K), i8(rng, DType::kI8, G, units, K), i4(rng, DType::kI4, G, units, K);
      for (uint32_t r = 0; r < G * units; ++r) {
        float row_max = 0;
        for (uint32_t k = 0; k < K; ++k) row_max = std::max(row_max, std::fabs(i8.logical[size_t{r} * K + k]));
        for (uint32_t k = 0; k < K; ++k) {
          const size_t i = size_t{r} * K + k;
          // f16: half an ulp of the half (relative 2^-11), or 2^-25 absolute.
          EXPECT_LE(std::fabs(f16.deq[i] - f16.logical[i]), std::max(std::fabs(f16.logical[i]) * 0x1p-11, 0x1p-25));
          // int8: |w - s q| <= s / 2, s = max|w| / 127 (plus the rounding of s).
          EXPECT_LE(std::fabs(i8.deq[i] - i8.logical[i]), row_max / 127 * 0.5001 + 1e-30);
          EXPECT_LE(std::fabs(i8.data.as<int8_t>()[layout::panel8x4_index(G, K, r / units, r % units, k)]), 127);
          // int4: |w - d q| <= |d| (the clamp of +8 to 7), d = m / -8 in f16.
          const double d = layout::float_from_half(
              i4.scales.as<uint16_t>()[layout::group_scale_index(G, K, r / units, r % units, k / 32)]);
          EXPECT_LE(std::fabs(i4.deq[i] - i4.logical[i]), std::fabs(d) * 1.001 + 1e-30);
        }
      }
      // Padding: int8 rows past `units` have scale 1.0 and zero bytes.
      for (uint32_t g = 0; g < G; ++g) {
        for (uint32_t u = units; u < layout::padded_units(units); ++u) {
          EXPECT_EQ(i8.scales.as<float>()[layout::gate_column(G, g, u)], 1.0f);
          for (uint32_t k = 0; k < layout::k4_of(K); ++k)
            EXPECT_EQ(i8.data.as<int8_t>()[layout::panel8x4_index(G, K, g, u, k)], 0);
          EXPECT_EQ(i4.scales.as<uint16_t>()[layout::group_scale_index(G, K, g, u, 0)], 0x3c00);
        }
        for (uint32_t u = 0; u < units; ++u)
          for (uint32_t k = K; k < layout::k32_of(K); ++k) {
            EXPECT_EQ(layout::panel8x8q4_load(i4.data.as<uint8_t>(), G, K, g, u, k), 0);
            if (k < layout::k4_of(K)) EXPECT_EQ(i8.data.as<int8_t>()[layout::panel8x4_index(G, K, g, u, k)], 0);
          }
      }
    }
  }
  // Errors, never a silent Inf: non-finite weights, f16 overflow.
  std::vector<float> bad = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  std::vector<uint16_t> h(64);
  std::vector<int8_t> q8(64);
  std::vector<uint8_t> q4(256);
  std::vector<float> s(8);
  EXPECT_FALSE(quant::pack_f16_panel8(bad.data(), 1, 1, 2, h.data()));
  EXPECT_FALSE(quant::quantize_i8_panel8x4(bad.data(), 1, 1, 2, q8.data(), s.data()));
  EXPECT_FALSE(quant::quantize_i4_panel8x8q4(bad.data(), 1, 1, 2, q4.data(), h.data()));
  const std::vector<float> huge = {70000.0f};
  EXPECT_FALSE(quant::pack_f16_panel8(huge.data(), 1, 1, 1, h.data()));
  EXPECT_FALSE(quant::quantize_i8_panel8x4(huge.data(), 1, 1, layout::kMaxI8Cols + 1, q8.data(), s.data()));
  // The widest int8 row cannot overflow the int32 sums.
  EXPECT_LE(int64_t{layout::kMaxI8Cols} * 127 * 127, int64_t{INT32_MAX});
  EXPECT_GT(int64_t{layout::kMaxI8Cols + 1} * 127 * 127, int64_t{INT32_MAX});
}

// ------------------------------------------------------- quantize_rows --

// The definition (kernel_set.h), written out again in the plainest way.
void expected_quantization(const float* x, uint32_t k, uint32_t kp, std::vector<int8_t>* q, float* scale) {
  q->assign(kp, 0);
  float m = 0;
  bool special = false;
  for (uint32_t i = 0; i < k; ++i) {
    if (!std::isfinite(x[i])) special = true;
    m = std::max(m, std::fabs(x[i]));
  }
  if (special) {
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  if (m < std::ldexp(1.0f, -120)) {  // 127 / m would overflow below
    *scale = 0.0f;
    return;
  }
  *scale = m / 127.0f;
  const volatile float inv = 127.0f / m;
  for (uint32_t i = 0; i < k; ++i) (*q)[i] = static_cast<int8_t>(std::nearbyint(x[i] * inv));
}

TEST(QuantKernelSets, QuantizeRowsFollowsTheDefinitionOnEverySet) {
  std::mt19937 rng(23);
  for (DType d : {DType::kI8, DType::kI4}) {
    const std::vector<const KernelSet*> sets = all_sets(d);
    if (sets.empty()) GTEST_SKIP() << "no " << dtype_name(d) << " set in this build";
    for (uint32_t k : {1u, 3u, 4u, 7u, 8u, 15u, 31u, 32u, 33u, 64u, 100u, 257u}) {
      const size_t rows = 13;
      std::vector<float> x = random_vector(rng, rows * k, 3.0f);
      // Row 1: zeros; 2: subnormals only; 3: a NaN; 4: +Inf; 5: -Inf;
      // 6: ties (m = 127, so x * inv = x); 7: one huge value; 8: tiny but
      // normal; 9: m just below 2^-120 (a zero row); 10: m = 2^-120 (127 / m
      // still finite: quantized); 12: m ~ 1e-37 (127 / m is Inf: a zero row).
      const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
      for (uint32_t i = 0; i < k; ++i) {
        x[1 * k + i] = i % 2 ? -0.0f : 0.0f;
        x[2 * k + i] = std::ldexp(float(i % 5) - 2.0f, -130);
        x[8 * k + i] *= 1e-30f;
        x[9 * k + i] = std::ldexp(float(i % 7) - 3.0f, -123);
        x[10 * k + i] = std::ldexp(float(i % 7) - 3.0f, -123);
      }
      for (uint32_t i = 0; i < k; ++i) x[12 * k + i] *= 1e-37f;
      x[9 * k] = std::nextafter(std::ldexp(1.0f, -120), 0.0f);
      x[10 * k] = -std::ldexp(1.0f, -120);
      x[3 * k + k / 2] = nan;
      x[4 * k + k - 1] = inf;
      x[5 * k] = -inf;
      const float ties[] = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, -126.5f};
      for (uint32_t i = 0; i < k; ++i) x[6 * k + i] = i < 8 ? ties[i] : 0.25f;
      if (k == 1) x[6 * k] = -127.0f;
      x[7 * k] = 3e38f;
      Rows want(x, rows, k);
      want.quantize(sets.front());
      const uint32_t kp = static_cast<uint32_t>(d == DType::kI8 ? layout::k4_of(k) : layout::k32_of(k));
      EXPECT_EQ(sets.front()->activation_bytes(k), d == DType::kI8 ? kp : kp + kp / 8);
      for (size_t m = 0; m < rows; ++m) {
        std::vector<int8_t> q;
        float scale;
        expected_quantization(x.data() + m * k, k, kp, &q, &scale);
        if (std::isnan(scale)) {
          EXPECT_TRUE(std::isnan(want.scales[m])) << "row " << m;
        } else {
          EXPECT_EQ(bits(want.scales[m]), bits(scale)) << "k " << k << " row " << m;
        }
        EXPECT_EQ(std::memcmp(want.qrow(m), q.data(), kp), 0) << sets.front()->name << " k " << k << " row " << m;
        for (uint32_t i = 0; i < kp; ++i) EXPECT_GE(want.qrow(m)[i], -127);
        if (d == DType::kI4) {
          for (uint32_t g = 0; g < kp / 32; ++g) {
            int32_t sum = 0, got;
            for (uint32_t i = 0; i < 32; ++i) sum += q[g * 32 + i];
            std::memcpy(&got, want.qrow(m) + kp + 4 * g, 4);
            EXPECT_EQ(got, 8 * sum) << "group " << g;
          }
        }
      }
      if (k >= 8) {  // the ties row: round half to even
        const int8_t expect_ties[] = {127, 2, 4, -2, 0, 0, 2, -126};
        EXPECT_EQ(std::memcmp(want.qrow(6), expect_ties, 8), 0);
      }
      EXPECT_EQ(want.scales[1], 0.0f);
      EXPECT_EQ(want.scales[2], 0.0f);
      EXPECT_EQ(want.scales[9], 0.0f);
      EXPECT_EQ(want.scales[12], 0.0f);
      EXPECT_GT(want.scales[10], 0.0f);
      EXPECT_EQ(want.qrow(10)[0], -127);
      EXPECT_TRUE(std::isnan(want.scales[3]) && std::isnan(want.scales[4]) && std::isnan(want.scales[5]));
      // Every other set writes the same bytes (padding and corrections
      // included) and the same scales.
      for (size_t s = 1; s < sets.size(); ++s) {
        Rows got(x, rows, k);
        got.quantize(sets[s]);
        ASSERT_EQ(got.ldq, want.ldq);
        for (size_t m = 0; m < rows; ++m) {
          EXPECT_EQ(std::memcmp(got.qrow(m), want.qrow(m), sets[s]->activation_bytes(k)), 0)
              << sets[s]->name << " k " << k << " row " << m;
          EXPECT_EQ(bits(got.scales[m]), bits(want.scales[m])) << sets[s]->name << " k " << k << " row " << m;
        }
      }
    }
  }
}

// ---------------------------------------------------------------- GEMM --

struct GemmShape {
  uint32_t gates, units, k;
  size_t rows;
};

const GemmShape kGemmShapes[] = {{1, 1, 1, 1},   {1, 7, 5, 3},     {4, 9, 13, 7},   {3, 17, 8, 13},
                                 {4, 64, 33, 6}, {1, 130, 19, 2},  {3, 24, 64, 12}, {4, 5, 100, 1},
                                 {1, 16, 31, 5}, {3, 11, 32, 4},   {4, 3, 130, 9},  {1, 33, 65, 10},
                                 // even gate counts with 6 rows and more: the 512-bit int8 tiles
                                 // (pairs of vectors) and their row and pair leftovers
                                 {2, 17, 45, 13}, {4, 24, 70, 12}};

// Runs `set`'s GEMM over rows x vectors of `w` split as threads would
// (rows in two, the second half's vectors in two) into `c` (panel order or
// compact: n_store).
void run_gemm(const KernelSet* set, const QWeight& w, Rows& a, const Weight* bias, const float* c_init,
              std::vector<float>* c, uint32_t ldc, uint32_t n_store, bool split) {
  a.quantize(set);
  kernels::GemmArgs g{&w.w, a.x.data(), a.k, bias, c_init, c->data(), ldc, n_store};
  g.qa = set->quantize_rows ? a.q.as<int8_t>() : nullptr;
  g.ldqa = a.ldq;
  g.a_scales = set->quantize_rows ? a.scales.data() : nullptr;
  const uint32_t vectors = w.gates * layout::panels_of(w.units);
  if (!split) {
    set->gemm(g, 0, a.rows, 0, vectors);
    return;
  }
  const size_t m_half = a.rows / 2;
  const uint32_t q_half = vectors / 2;
  set->gemm(g, 0, m_half, 0, vectors);
  set->gemm(g, m_half, a.rows, 0, q_half);
  set->gemm(g, m_half, a.rows, q_half, vectors);
}

TEST(QuantKernelSets, GemmIsTheContractOnEverySetAndWithinBoundOfFloat64) {
  std::mt19937 rng(29);
  for (DType d : {DType::kF16, DType::kI8, DType::kI4}) {
    const std::vector<const KernelSet*> sets = all_sets(d);
    if (!reference(d)) GTEST_SKIP() << "no quantized reference sets in this build";
    for (const GemmShape& sh : kGemmShapes) {
      QWeight w(rng, d, sh.gates, sh.units, sh.k);
      Bias bias(rng, sh.gates, sh.units);
      const uint32_t cols = layout::gate_row_floats(sh.gates, sh.units);
      const std::vector<float> init = random_vector(rng, sh.rows * cols);
      const std::vector<float> x = random_vector(rng, sh.rows * sh.k, 2.0f);
      for (int mode = 0; mode < 3; ++mode) {  // bias, initial rows, nothing
        const Weight* b = mode == 0 ? &bias.w : nullptr;
        const float* ci = mode == 1 ? init.data() : nullptr;
        std::vector<float> want(sh.rows * cols, 0.0f);
        Rows ra(x, sh.rows, sh.k);
        run_gemm(sets.front(), w, ra, b, ci, &want, cols, cols, false);
        // The reference against float64 on the dequantized values.
        for (size_t m = 0; m < sh.rows; ++m) {
          for (uint32_t g = 0; g < sh.gates; ++g) {
            for (uint32_t u = 0; u < sh.units; ++u) {
              const uint32_t col = layout::gate_column(sh.gates, g, u);
              const double i0 = mode == 0 ? bias.at(g * sh.units + u) : mode == 1 ? init[m * cols + col] : 0.0;
              const Exact e = exact_output(w, g * sh.units + u, ra, m, i0);
              EXPECT_NEAR(want[m * cols + col], e.y, e.bound)
                  << dtype_name(d) << " G" << sh.gates << " units " << sh.units << " K " << sh.k << " row " << m;
            }
          }
        }
        // Every set, split as threads would split it: the same bits.
        for (const KernelSet* set : sets) {
          std::vector<float> got(sh.rows * cols, 0.0f);
          Rows rs(x, sh.rows, sh.k);
          run_gemm(set, w, rs, b, ci, &got, cols, cols, true);
          for (size_t m = 0; m < sh.rows; ++m)
            for (uint32_t g = 0; g < sh.gates; ++g)
              for (uint32_t u = 0; u < sh.units; ++u) {
                const size_t i = m * cols + layout::gate_column(sh.gates, g, u);
                ASSERT_EQ(bits(got[i]), bits(want[i]))
                    << set->name << " differs from " << sets.front()->name << ": G" << sh.gates << " units "
                    << sh.units << " K " << sh.k << " rows " << sh.rows << " mode " << mode << " row " << m;
              }
        }
      }
    }
  }
}

TEST(QuantKernelSets, CompactGemmWritesOnlyTheTrueWidth) {
  std::mt19937 rng(31);
  for (DType d : {DType::kF16, DType::kI8, DType::kI4}) {
    // gates 2: the 512-bit int8 tiles' masked stores (every set must stop at the same column)
    for (uint32_t gates : {1u, 2u})
    for (uint32_t out : {1u, 5u, 12u, 17u}) {
      QWeight w(rng, d, gates, out, 9);
      Bias bias(rng, gates, out);
      const std::vector<float> x = random_vector(rng, 3 * 9);
      std::vector<float> first;
      for (const KernelSet* set : all_sets(d)) {
        std::vector<float> c(3 * out + 8, 42.0f);
        Rows a(x, 3, 9);
        run_gemm(set, w, a, &bias.w, nullptr, &c, out, out, false);
        for (size_t i = 3 * out; i < c.size(); ++i) EXPECT_EQ(c[i], 42.0f) << set->name << " wrote past the row";
        if (first.empty()) first = c;
        EXPECT_EQ(std::memcmp(first.data(), c.data(), c.size() * 4), 0) << set->name;
      }
    }
  }
}

// The widest int8 row at full scale: K * 127^2 fits int32 on every set.
TEST(QuantKernelSets, WidestInt8RowDoesNotOverflow) {
  const uint32_t K = layout::kMaxI8Cols;
  std::mt19937 rng(53);
  QWeight w(rng, DType::kI8, 1, 1, 1);
  w.cols = K;
  w.logical.assign(K, -1.0f);  // q = -127, scale 1/127
  w.pack();
  const std::vector<float> x(K, -3.0f);  // q = -127
  const double want = double{w.scales.as<float>()[0]} * (3.0f / 127.0f) * (double{K} * 127 * 127);
  for (const KernelSet* set : all_sets(DType::kI8)) {
    std::vector<float> c(8, 0.0f);
    Rows a(x, 1, K);
    run_gemm(set, w, a, nullptr, nullptr, &c, 8, 8, false);
    EXPECT_NEAR(c[0], want, want * 1e-6) << set->name;
  }
}

// f16_reference also reads RowMajor f16 (the layout order is not part of the
// f16 chain): the same bits as from Panel8.
TEST(QuantKernelSets, F16ReferenceReadsRowMajorToo) {
  const KernelSet* ref = reference(DType::kF16);
  if (!ref) GTEST_SKIP() << "no quantized reference sets in this build";
  std::mt19937 rng(47);
  for (uint32_t G : {1u, 4u}) {
    QWeight panel(rng, DType::kF16, G, 11, 21);
    QWeight rows = panel;
    for (uint32_t r = 0; r < G * 11; ++r)
      for (uint32_t k = 0; k < 21; ++k)
        rows.data.as<uint16_t>()[size_t{r} * 21 + k] = layout::half_from_float(static_cast<float>(panel.at(r, k)));
    rows.w.layout = WeightLayout::kRowMajor;
    Bias bias(rng, G, 11);
    const uint32_t cols = layout::gate_row_floats(G, 11);
    const std::vector<float> x = random_vector(rng, 3 * 21);
    std::vector<float> a(3 * cols, 0.0f), b(3 * cols, 0.0f);
    Rows ra(x, 3, 21), rb(x, 3, 21);
    run_gemm(ref, panel, ra, &bias.w, nullptr, &a, cols, cols, false);
    run_gemm(ref, rows, rb, &bias.w, nullptr, &b, cols, cols, false);
    EXPECT_TRUE(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  }
}

// Zero rows give exactly the initial values; a NaN or Inf in a row makes
// every output of that row NaN and no other.
TEST(QuantKernelSets, ZeroRowsGiveTheInitialValuesAndNanRowsGiveNan) {
  std::mt19937 rng(37);
  for (DType d : {DType::kF16, DType::kI8, DType::kI4}) {
    QWeight w(rng, d, 4, 13, 40);
    Bias bias(rng, 4, 13);
    const uint32_t cols = layout::gate_row_floats(4, 13);
    std::vector<float> x = random_vector(rng, 5 * 40);
    for (uint32_t k = 0; k < 40; ++k) x[1 * 40 + k] = 0.0f;
    x[2 * 40 + 7] = std::numeric_limits<float>::quiet_NaN();
    x[3 * 40 + 39] = -std::numeric_limits<float>::infinity();
    for (const KernelSet* set : all_sets(d)) {
      std::vector<float> c(5 * cols, 0.0f);
      Rows a(x, 5, 40);
      run_gemm(set, w, a, &bias.w, nullptr, &c, cols, cols, false);
      for (uint32_t g = 0; g < 4; ++g) {
        for (uint32_t u = 0; u < 13; ++u) {
          const uint32_t col = layout::gate_column(4, g, u);
          EXPECT_EQ(bits(c[1 * cols + col]), bits(bias.at(g * 13 + u))) << set->name;
          EXPECT_TRUE(std::isnan(c[2 * cols + col])) << set->name << " NaN row";
          if (d != DType::kF16) EXPECT_TRUE(std::isnan(c[3 * cols + col])) << set->name << " Inf row";
          EXPECT_FALSE(std::isnan(c[0 * cols + col]) || std::isnan(c[4 * cols + col])) << set->name;
        }
      }
    }
  }
}

// ---------------------------------------------------------- fused steps --

struct StepCase {
  DType dtype;
  CellKind kind;
  bool relu;
  uint32_t in, hidden;
};

// A cell's weights in `dtype` and a state; runs steps of a set three ways.
struct TestCell {
  StepCase sc;
  uint32_t G;
  QWeight w_ih, w_hh;
  Bias bias, b_hn;
  std::vector<float> x, h0, c0;

  TestCell(const StepCase& c, std::mt19937& rng)
      : sc(c),
        G(layout::gate_count(c.kind)),
        w_ih(rng, c.dtype, G, c.hidden, c.in),
        w_hh(rng, c.dtype, G, c.hidden, c.hidden),
        bias(rng, G, c.hidden),
        b_hn(rng, 1, c.hidden) {
    x = random_vector(rng, c.in, 1.5f);
    h0 = random_vector(rng, c.hidden);
    c0 = random_vector(rng, c.hidden, 2.0f);
  }
  int kind() const { return kernels::kind_index(sc.kind); }
  const Weight* bhn() const { return sc.kind == CellKind::kGru ? &b_hn.w : nullptr; }
  uint32_t panels() const { return layout::panels_of(sc.hidden); }

  struct Out {
    std::vector<float> h, c;
  };

  // The fused step (input part fused, or from `pre`), over the panel ranges
  // [0, s1), [s1, panels) (s1 = 0: one call).
  Out fused(const KernelSet* set, uint32_t split, const std::vector<float>* pre = nullptr) {
    Rows rx(x, 1, sc.in), rh(h0, 1, sc.hidden);
    rx.quantize(set);
    rh.quantize(set);
    Out o{std::vector<float>(sc.hidden), c0};
    kernels::StepArgs a{pre ? nullptr : &w_ih.w, x.data(),   pre ? pre->data() : nullptr, &bias.w,
                        &w_hh.w,                 h0.data(),  bhn(),                        o.c.data(),
                        o.h.data(),              sc.hidden,  sc.relu ? 1 : 0};
    if (set->quantize_rows) {
      a.qx = rx.qrow(0);
      a.x_scale = rx.scales[0];
      a.qh = rh.qrow(0);
      a.h_scale = rh.scales[0];
    }
    if (split) set->step[kind()](a, 0, split);
    set->step[kind()](a, split, panels());
    return o;
  }

  // The input part as one GEMM row (what a chunk's projection computes).
  std::vector<float> input_gemm(const KernelSet* set) {
    const uint32_t cols = layout::gate_row_floats(G, sc.hidden);
    std::vector<float> pre(cols, 0.0f);
    Rows rx(x, 1, sc.in);
    run_gemm(set, w_ih, rx, &bias.w, nullptr, &pre, cols, cols, false);
    return pre;
  }

  // GEMM (input), GEMM (recurrent, continuing it; GRU's n from b_hn), update.
  Out batched(const KernelSet* set) {
    const uint32_t cols = layout::gate_row_floats(G, sc.hidden);
    std::vector<float> pre = input_gemm(set), rec = pre;
    if (sc.kind == CellKind::kGru) {
      for (uint32_t u = 0; u < layout::padded_units(sc.hidden); ++u)
        rec[layout::gate_column(3, 2, u)] = b_hn.storage.as<float>()[u];
    }
    Rows rh(h0, 1, sc.hidden);
    run_gemm(set, w_hh, rh, nullptr, rec.data(), &rec, cols, cols, false);
    Out o{std::vector<float>(sc.hidden), c0};
    const kernels::UpdateArgs u{rec.data(), pre.data(), o.c.data(), h0.data(), o.h.data(), sc.hidden, sc.relu ? 1 : 0};
    set->update[kind()](u, 0, panels());
    return o;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<StepCase> step_cases(DType d) {
  std::vector<StepCase> cases;
  for (uint32_t hidden : {1u, 7u, 8u, 16u, 23u, 40u, 64u}) {
    for (uint32_t in : {1u, 5u, 16u, 33u, 40u}) {
      cases.push_back({d, CellKind::kLstm, false, in, hidden});
      cases.push_back({d, CellKind::kGru, false, in, hidden});
      cases.push_back({d, CellKind::kRnn, false, in, hidden});
      cases.push_back({d, CellKind::kRnn, true, in, hidden});
    }
  }
  return cases;
}

std::string describe(const StepCase& c) {
  const char* kind = c.kind == CellKind::kLstm ? "LSTM" : c.kind == CellKind::kGru ? "GRU" : c.relu ? "RNN relu" : "RNN tanh";
  return std::string(dtype_name(c.dtype)) + " " + kind + " in " + std::to_string(c.in) + " H " + std::to_string(c.hidden);
}

// Every set: fused == fused from `pre` == GEMM + update == any panel split,
// bit for bit; SIMD sets of a dtype identical to each other.
TEST(QuantKernelSets, FusedStepsEqualGemmPlusUpdateAndEverySplit) {
  uint32_t seed = 100;
  for (DType d : {DType::kF16, DType::kI8, DType::kI4}) {
    for (const StepCase& sc : step_cases(d)) {
      std::mt19937 rng(seed++);
      TestCell cell(sc, rng);
      TestCell::Out first_simd;
      for (const KernelSet* set : all_sets(d)) {
        const TestCell::Out fused = cell.fused(set, 0);
        const std::vector<float> pre = cell.input_gemm(set);
        const TestCell::Out from_pre = cell.fused(set, 0, &pre);
        const TestCell::Out batched = cell.batched(set);
        EXPECT_TRUE(same_bits(fused.h, batched.h)) << set->name << " " << describe(sc) << ": fused != GEMM + update";
        EXPECT_TRUE(same_bits(fused.h, from_pre.h)) << set->name << " " << describe(sc) << ": fused != fused from pre";
        if (sc.kind == CellKind::kLstm) {
          EXPECT_TRUE(same_bits(fused.c, batched.c)) << set->name << " " << describe(sc) << " (c)";
          EXPECT_TRUE(same_bits(fused.c, from_pre.c)) << set->name << " " << describe(sc) << " (c, pre)";
        }
        for (uint32_t split = 1; split < cell.panels(); ++split) {
          const TestCell::Out s = cell.fused(set, split);
          EXPECT_TRUE(same_bits(fused.h, s.h) && same_bits(fused.c, s.c))
              << set->name << " " << describe(sc) << ": panels split at " << split;
        }
        if (set->name == reference(d)->name) continue;
        if (first_simd.h.empty()) {
          first_simd = fused;
        } else {
          EXPECT_TRUE(same_bits(first_simd.h, fused.h) && same_bits(first_simd.c, fused.c))
              << set->name << " differs from the first SIMD set of its dtype: " << describe(sc);
        }
      }
    }
  }
}

// The reference step against float64 on the dequantized values (bound
// derived from the products' bounds and the nonlinearities' slopes), and
// every SIMD set against the reference (their nonlinearities differ from
// libm's by <= 4e-7; the products are identical).
TEST(QuantKernelSets, StepsMatchFloat64AndTheReference) {
  uint32_t seed = 500;
  for (DType d : {DType::kF16, DType::kI8, DType::kI4}) {
    if (!reference(d)) GTEST_SKIP() << "no quantized reference sets in this build";
    for (const StepCase& sc : step_cases(d)) {
      std::mt19937 rng(seed++);
      TestCell cell(sc, rng);
      const KernelSet* ref = reference(d);
      const TestCell::Out want = cell.fused(ref, 0);
      // float64: gate pre-activations and their bounds, from the rows as the
      // reference quantized them.
      Rows rx(cell.x, 1, sc.in), rh(cell.h0, 1, sc.hidden);
      rx.quantize(ref);
      rh.quantize(ref);
      for (uint32_t u = 0; u < sc.hidden; ++u) {
        double pre[4], err[4], nh = 0, nh_err = 0;
        for (uint32_t g = 0; g < cell.G; ++g) {
          const uint32_t r = g * sc.hidden + u;
          const Exact ex = exact_output(cell.w_ih, r, rx, 0, cell.bias.at(r));
          const bool n_slot = sc.kind == CellKind::kGru && g == 2;
          const Exact eh = exact_output(cell.w_hh, r, rh, 0, n_slot ? cell.b_hn.at(u) : ex.y);
          if (n_slot) {
            pre[g] = ex.y;
            err[g] = ex.bound;
            nh = eh.y;
            nh_err = eh.bound;
          } else {
            pre[g] = eh.y;
            err[g] = ex.bound + eh.bound;
          }
        }
        auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
        const double libm = 4e-6;  // libm's expf/tanhf and the update's own fp32 roundings, values <= ~4
        if (sc.kind == CellKind::kLstm) {
          const double i = sig(pre[0]), f = sig(pre[1]), g = std::tanh(pre[2]), o = sig(pre[3]);
          const double c = f * cell.c0[u] + i * g, h = o * std::tanh(c);
          // dc <= |c0| df + |g| di + |i| dg, sigmoid' <= 1/4, tanh' <= 1.
          const double dc = std::fabs(cell.c0[u]) * err[1] / 4 + err[0] / 4 + err[2];
          EXPECT_NEAR(want.c[u], c, dc + libm) << describe(sc) << " c unit " << u;
          EXPECT_NEAR(want.h[u], h, err[3] / 4 + dc + libm) << describe(sc) << " h unit " << u;
        } else if (sc.kind == CellKind::kGru) {
          const double r = sig(pre[0]), z = sig(pre[1]), n = std::tanh(pre[2] + r * nh);
          const double h = (1 - z) * n + z * cell.h0[u];
          const double dn = err[2] + r * nh_err + std::fabs(nh) * err[0] / 4;
          EXPECT_NEAR(want.h[u], h, dn + std::fabs(cell.h0[u] - n) * err[1] / 4 + libm) << describe(sc) << " unit " << u;
        } else {
          const double h = sc.relu ? std::max(0.0, pre[0]) : std::tanh(pre[0]);
          EXPECT_NEAR(want.h[u], h, err[0] + libm) << describe(sc) << " unit " << u;
        }
      }
      for (const KernelSet* set : simd_sets(d)) {
        const TestCell::Out got = cell.fused(set, 0);
        for (uint32_t u = 0; u < sc.hidden; ++u) {
          EXPECT_NEAR(got.h[u], want.h[u], 2e-6) << set->name << " " << describe(sc) << " unit " << u;
          if (sc.kind == CellKind::kLstm) EXPECT_NEAR(got.c[u], want.c[u], 2e-6) << set->name << " c " << u;
        }
      }
    }
  }
}

// NaN in x or h: every output of the step is NaN, on every set.
TEST(QuantKernelSets, NanInputsGiveNanStates) {
  std::mt19937 rng(41);
  for (DType d : {DType::kF16, DType::kI8, DType::kI4}) {
    for (CellKind kind : {CellKind::kLstm, CellKind::kGru, CellKind::kRnn}) {
      for (int which = 0; which < 2; ++which) {
        TestCell cell({d, kind, false, 20, 19}, rng);
        (which ? cell.h0 : cell.x)[3] = std::numeric_limits<float>::quiet_NaN();
        for (const KernelSet* set : all_sets(d)) {
          const TestCell::Out o = cell.fused(set, 0);
          for (uint32_t u = 0; u < 19; ++u) {
            EXPECT_TRUE(std::isnan(o.h[u])) << set->name << " kind " << int(kind) << (which ? " h" : " x") << " unit " << u;
          }
        }
      }
    }
  }
}

// f16: exactly the f32 set of the same ISA on the converted weights.
TEST(QuantKernelSets, F16SetsAreTheF32SetsOnConvertedWeights) {
  const std::vector<const KernelSet*> f16 = simd_sets(DType::kF16), f32 = simd_sets(DType::kF32);
  if (f16.empty() || f32.empty()) GTEST_SKIP() << "no f16 SIMD set runs here";
  const KernelSet* same_isa = f32.front();  // f32_avx2 / f32_neon: the f16 sets' ISA
  std::mt19937 rng(43);
  for (const StepCase& sc : step_cases(DType::kF16)) {
    TestCell cell(sc, rng);
    // The converted copy: f32 Panel8 of the dequantized halves.
    TestCell conv = cell;
    for (QWeight* w : {&conv.w_ih, &conv.w_hh}) {
      std::vector<float> f(layout::panel8_elements(w->gates, w->units, w->cols), 0.0f);
      for (size_t i = 0; i < f.size(); ++i) f[i] = layout::float_from_half(w->data.as<uint16_t>()[i]);
      w->data.resize(f.size() * 4);
      std::memcpy(w->data.p, f.data(), f.size() * 4);
      w->w.data = w->data.p;
      w->w.dtype = DType::kF32;
    }
    for (const KernelSet* set : f16) {
      const TestCell::Out a = cell.fused(set, 0), b = conv.fused(same_isa, 0);
      EXPECT_TRUE(same_bits(a.h, b.h) && same_bits(a.c, b.c)) << set->name << " vs " << same_isa->name << " " << describe(sc);
    }
  }
}

}  // namespace
