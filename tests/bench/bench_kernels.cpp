// W3 (LSTM, I = 64, H = 256, B = 64: one step of a batched sequence) taken
// apart into the kernels the CPU backend runs for it, on the fastest f32
// kernel set of this CPU, each reported as a fraction of the core's FMA peak
// measured in the same process:
//   input    gemm  P = bias + W_ih x_t        M = 64, N = 1024, K = 64
//   gemm     gemm  P += W_hh h_{t-1}          M = 64, N = 1024, K = 256
//   update   lstm_update of the 64 rows       2,048 gate vectors of 4 x 8
// The sum of the three is what a W3 step costs at the kernels; `ferry bench
// --batch 64 --seq 128` on the same shape adds the output rows and the state
// around it. Denormals are flushed, as the runtime does during a run.
//
//   ferry_bench_kernels [--benchmark_repetitions=N] [--benchmark_filter=...]
//
// A benchmark, not a test: no timing is asserted anywhere.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "fma_peak.h"
#include "kernels/kernel_set.h"
#include "kernels/registry.h"
#include "shared/weight_layout.h"

namespace {

using namespace ferry;
using kernels::KernelSet;

constexpr uint32_t kI = 64, kH = 256, kG = 4, kCols = kG * kH;
constexpr size_t kB = 64;

// 64-byte aligned floats.
struct Floats {
  std::vector<float> storage;
  float* p = nullptr;
  explicit Floats(size_t n, std::mt19937* rng = nullptr, float scale = 0) {
    storage.assign(n + 16, 0.0f);
    p = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) / 4 % 16) % 16;
    if (rng) {
      std::uniform_real_distribution<float> dist(-scale, scale);
      for (size_t i = 0; i < n; ++i) p[i] = dist(*rng);
    }
  }
};

// A [4H, K] LSTM weight in Panel8 (the f32 SIMD sets' layout).
struct Panel8 {
  Floats data;
  Weight w;
  Panel8(std::mt19937& rng, uint32_t K) : data(layout::panel8_elements(kG, kH, K), &rng, 0.0625f) {
    w.data = data.p;
    w.units = kH;
    w.cols = K;
    w.gates = kG;
    w.layout = WeightLayout::kPanel8;
  }
};

struct W3 {
  std::mt19937 rng{7};
  const KernelSet* set = kernels::best_simd_kernel_set(DType::kF32);
  Panel8 w_ih{rng, kI}, w_hh{rng, kH};
  Floats bias_data{kCols, &rng, 0.1f}, x{kB * kI, &rng, 1.0f}, h{kB * kH, &rng, 0.5f};
  Floats gates{kB * kCols}, c{kB * kH, &rng, 0.5f}, h_new{kB * kH};
  Weight bias;
  W3() {
    bias.data = bias_data.p;
    bias.units = kH;
    bias.gates = kG;
    bias.layout = WeightLayout::kPanel8;
  }
  void input() { set->gemm({&w_ih.w, x.p, kI, &bias, nullptr, gates.p, kCols, kCols}, 0, kB, 0, kCols / 8); }
  void recurrent() { set->gemm({&w_hh.w, h.p, kH, nullptr, gates.p, gates.p, kCols, kCols}, 0, kB, 0, kCols / 8); }
  void update() {
    for (size_t b = 0; b < kB; ++b) {
      const kernels::UpdateArgs u{gates.p + b * kCols, gates.p + b * kCols, c.p + b * kH, h.p + b * kH,
                                  h_new.p + b * kH, kH, 0};
      set->update[0](u, 0, layout::panels_of(kH));
    }
  }
};

W3& w3() {
  static W3 w;
  return w;
}

void flush_denormals() {
#if defined(__x86_64__)
  _mm_setcsr(_mm_getcsr() | 0x8040);
#endif
}

// Multiply-adds per second of one core at the FMA width of the kernel set
// (AVX-512 for f32_avx512, else AVX2+FMA), measured once.
double fma_peak() {
  static const double peak = ferry_bench::fma_peak(std::string(w3().set->name).find("avx512") != std::string::npos);
  return peak;  // 0 where not measurable: the fraction is not reported
}

void report(benchmark::State& state, double macs) {
  const double peak = fma_peak();
  state.counters["GFLOP/s"] = benchmark::Counter(2 * macs, benchmark::Counter::kIsIterationInvariantRate);
  if (peak > 0) state.counters["of_peak"] = benchmark::Counter(macs / peak, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(w3().set->name);
}

void BM_W3InputGemm(benchmark::State& state) {
  flush_denormals();
  W3& w = w3();
  for (auto _ : state) w.input();
  report(state, double(kB) * kCols * kI);
}

void BM_W3RecurrentGemm(benchmark::State& state) {
  flush_denormals();
  W3& w = w3();
  w.input();
  for (auto _ : state) w.recurrent();  // gates grow by W_hh h each time: same work, finite values
  report(state, double(kB) * kCols * kH);
}

void BM_W3LstmUpdate(benchmark::State& state) {
  flush_denormals();
  W3& w = w3();
  w.input();
  w.recurrent();
  for (auto _ : state) w.update();
  // No multiply-adds of the products: of_peak is not meaningful here, but
  // its time is part of the step (the fraction below counts it as zero).
  state.SetLabel(w.set->name);
}

void BM_W3Step(benchmark::State& state) {
  flush_denormals();
  W3& w = w3();
  for (auto _ : state) {
    w.input();
    w.recurrent();
    w.update();
  }
  report(state, double(kB) * kCols * (kI + kH));
}

}  // namespace

BENCHMARK(BM_W3InputGemm)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W3RecurrentGemm)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W3LstmUpdate)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W3Step)->Unit(benchmark::kMicrosecond);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (!w3().set) {
    std::printf("no f32 SIMD kernel set runs on this CPU: nothing to measure\n");
    return 0;
  }
  if (fma_peak() > 0) std::printf("FMA peak, 1 core, at %s's width: %.1f GFLOP/s\n", w3().set->name, 2 * fma_peak() / 1e9);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
