// Workloads of ferry_bench_torch taken apart into the kernels the CPU
// backend runs for them, on the fastest f32 kernel set of this CPU, each
// reported against a ceiling measured in the same process.
//
// W3 (LSTM, I = 64, H = 256, B = 64: one step of a batched sequence), each
// gemm as a fraction of the core's FMA peak:
//   input    gemm  P = bias + W_ih x_t        M = 64, N = 1024, K = 64
//   gemm     gemm  P += W_hh h_{t-1}          M = 64, N = 1024, K = 256
//   update   lstm_update of the 64 rows       2,048 gate vectors of 4 x 8
// The sum of the three is what a W3 step costs at the kernels; `ferry bench
// --batch 64 --seq 128` on the same shape adds the output rows and the state
// around it. Where the set has batch_step (f32_avx2, f32_avx512) the backend
// runs the whole step in it instead (BM_W3FusedStep), and
// BM_W3BatchStepPerSet compares the two forms, LSTM and GRU, on every set
// that runs here (FERRY_MAX_ISA=avx2, kernels/registry.h, measures the AVX2
// set alone on an AVX-512 machine).
//
// W2 (2-layer LSTM, I = 32, H = 256, B = 1, T = 512), per chunk of 64 steps
// (the CPU backend's chunk at batch 1):
//   steps    64 fused batch-1 step kernels of one layer, from its
//            precomputed input part: W_hh (1 MB) read every step; against
//            `read`, a plain read of the same bytes as many times (of_read =
//            read time / kernel time)
//   proj1    layer 1's input part of the chunk: gemm M = 64, N = 1024, K = 32
//   proj2    layer 2's: gemm M = 64, N = 1024, K = 256 (as fraction of peak)
// A whole W2 run is 8 chunks of (proj1 + steps + proj2 + steps): BM_W2Run
// runs exactly that, for comparison with `ferry bench --seq 512` and with
// ferry_bench_torch's floor (the W_hh reads alone).
//
// W1 / W4 at H = 16 (LSTM / GRU, I = 16, one sample): the fused step kernel
// alone, 1,000 dependent steps (ns_per_step): what ferry_step costs without
// its C API around it.
// Denormals are flushed, as the runtime does during a run.
//
//   ferry_bench_kernels [--benchmark_repetitions=N] [--benchmark_filter=...]
//
// A benchmark, not a test: no timing is asserted anywhere.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "fma_peak.h"
#include "read_pass.h"
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

// A [G*H, K] weight in Panel8 (the f32 SIMD sets' layout), or with K = 1 a
// panel-order bias row.
struct Panel8 {
  Floats data;
  Weight w;
  Panel8(std::mt19937& rng, uint32_t K, uint32_t H = kH, uint32_t G = kG, float scale = 0.0625f)
      : data(layout::panel8_elements(G, H, K), &rng, scale) {
    w.data = data.p;
    w.units = H;
    w.cols = K;
    w.gates = G;
    w.layout = WeightLayout::kPanel8;
  }
};

struct W3 {
  std::mt19937 rng{7};
  const KernelSet* set = kernels::best_simd_kernel_set(DType::kF32);
  Panel8 w_ih{rng, kI}, w_hh{rng, kH};
  Panel8 bias{rng, 1, kH, kG, 0.1f};
  Floats x{kB * kI, &rng, 1.0f}, h{kB * kH, &rng, 0.5f};
  Floats gates{kB * kCols}, c{kB * kH, &rng, 0.5f}, h_new{kB * kH};
  void input() { set->gemm({&w_ih.w, x.p, kI, &bias.w, nullptr, gates.p, kCols, kCols}, 0, kB, 0, kCols / 8); }
  void recurrent() { set->gemm({&w_hh.w, h.p, kH, nullptr, gates.p, gates.p, kCols, kCols}, 0, kB, 0, kCols / 8); }
  // The whole step in one kernel, where the set has batch_step: no gate
  // rows written or read.
  void fused() {
    const kernels::BatchStepArgs a{&w_ih.w, x.p, kI, &bias.w, &w_hh.w, h.p, kH, c.p, kH, h_new.p, kH, nullptr, 0, kH};
    set->batch_step[0](a, 0, kB, 0, layout::panels_of(kH));
  }
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

// W1 / W4 at H = 16 and 64 (I = H, one sample): the fused step kernel
// alone, as ferry_step runs it for a lone LSTM or GRU (input part,
// recurrent part and update in one call), h of each step feeding the next.
// What `ferry bench --stream` or the peer harness measure beyond this is the
// C API around it (and, from 64 KiB of weights, the alternating panel order
// of backend/cpu: this loop always runs forward).
struct SmallStep {
  std::mt19937 rng{13};
  const KernelSet* set;
  uint32_t gates, n;
  Panel8 w_ih, w_hh, bias, b_hn;
  Floats x, h, c, h_new;
  SmallStep(uint32_t G, uint32_t H, const KernelSet* kernel_set)
      : set(kernel_set),
        gates(G),
        n(H),
        w_ih(rng, H, H, G, 0.25f),
        w_hh(rng, H, H, G, 0.25f),
        bias(rng, 1, H, G, 0.1f),
        b_hn(rng, 1, H, 1, 0.1f),
        x(H, &rng, 1.0f),
        h(H, &rng, 0.5f),
        c(H, &rng, 0.5f),
        h_new(H) {}
  void run(size_t steps) {
    const int kind = gates == 4 ? 0 : 1;  // kernel_set.h: LSTM, GRU, RNN
    float* hp = h.p;
    float* hn = h_new.p;
    for (size_t t = 0; t < steps; ++t) {
      const kernels::StepArgs a{&w_ih.w, x.p, nullptr, &bias.w, &w_hh.w, hp, gates == 3 ? &b_hn.w : nullptr,
                                gates == 4 ? c.p : nullptr, hn, n, 0};
      set->step[kind](a, 0, layout::panels_of(n));
      std::swap(hp, hn);
    }
  }
};

// W2 (I 32, H 256, B 1): one chunk of 64 steps of each layer. Layer 2's
// steps read a second W_hh, as the run does (each layer's W_hh is read by
// its own 512 steps, one layer after the other).
constexpr uint32_t kW2I = 32, kW2Chunk = 64, kW2Chunks = 8;

struct W2 {
  std::mt19937 rng{11};
  const KernelSet* set = kernels::best_simd_kernel_set(DType::kF32);
  Panel8 w_ih1{rng, kW2I}, w_hh1{rng, kH}, w_ih2{rng, kH}, w_hh2{rng, kH};
  Panel8 bias{rng, 1, kH, kG, 0.1f};
  Floats x{kW2Chunk * kW2I, &rng, 1.0f}, y1{kW2Chunk * kH, &rng, 0.5f};
  Floats pre{kW2Chunk * kCols}, h{kH, &rng, 0.5f}, c{kH, &rng, 0.5f}, h_new{kH};
  W2() { proj1(); }
  void proj1() { set->gemm({&w_ih1.w, x.p, kW2I, &bias.w, nullptr, pre.p, kCols, kCols}, 0, kW2Chunk, 0, kCols / 8); }
  void proj2() { set->gemm({&w_ih2.w, y1.p, kH, &bias.w, nullptr, pre.p, kCols, kCols}, 0, kW2Chunk, 0, kCols / 8); }
  // The chunk's steps of one layer; h ping-pongs as the backend's state does.
  void steps(const Weight& w_hh) {
    float* hp = h.p;
    float* hn = h_new.p;
    for (uint32_t t = 0; t < kW2Chunk; ++t) {
      const kernels::StepArgs a{nullptr, nullptr, pre.p + size_t{t} * kCols, nullptr, &w_hh, hp, nullptr,
                                c.p,     hn,      kH,                        0};
      set->step[0](a, 0, layout::panels_of(kH));
      std::swap(hp, hn);
    }
  }
  // The chunk's steps of one layer in the runtime's alternating panel order,
  // each computing share t of 64 of the next chunk's projection (W x rows a,
  // K = w.cols) into `next` where the set has step_project, else that
  // projection after the steps.
  Floats next{kW2Chunk * kCols};
  void steps_project(const Weight& w_hh, const Weight& w, const float* a, bool overlap) {
    float* hp = h.p;
    float* hn = h_new.p;
    const auto fused = set->step_project[0];
    for (uint32_t t = 0; t < kW2Chunk; ++t) {
      const kernels::StepArgs s{nullptr, nullptr, pre.p + size_t{t} * kCols, nullptr, &w_hh, hp, nullptr,
                                c.p,     hn,      kH,                        0};
      if (overlap && fused) {
        fused(s, kernels::ProjectShare{&w, a, w.cols, &bias.w, next.p, kCols, kW2Chunk, t, kW2Chunk},
              layout::panels_of(kH), t & 1);
      } else {
        const uint32_t panels = layout::panels_of(kH);
        if (!(t & 1)) {
          set->step[0](s, 0, panels);
        } else {
          for (uint32_t p1 = panels; p1 > 0;) {
            const uint32_t p0 = p1 > set->step_group[0] ? p1 - set->step_group[0] : 0;
            set->step[0](s, p0, p1);
            p1 = p0;
          }
        }
      }
      std::swap(hp, hn);
    }
    if (!(overlap && fused)) set->gemm({&w, a, w.cols, &bias.w, nullptr, next.p, kCols, kCols}, 0, kW2Chunk, 0, kCols / 8);
  }
  // A plain read of both W_hh, as many times as the chunk's steps read them.
  float read() {
    const size_t n = layout::panel8_elements(kG, kH, kH);
    float s = 0;
    for (uint32_t t = 0; t < kW2Chunk; ++t) s += ferry_bench::read_loop(w_hh1.data.p, n);
    for (uint32_t t = 0; t < kW2Chunk; ++t) s += ferry_bench::read_loop(w_hh2.data.p, n);
    return s;
  }
};

W2& w2() {
  static W2 w;
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

// The step in one kernel (as the backend runs a batch of 64 where the set
// has batch_step): against BM_W3Step, what the fusion saves.
void BM_W3FusedStep(benchmark::State& state) {
  flush_denormals();
  W3& w = w3();
  if (!w.set->batch_step[0]) {
    state.SkipWithError("this CPU's f32 set has no fused batched LSTM step");
    return;
  }
  for (auto _ : state) w.fused();
  report(state, double(kB) * kCols * (kI + kH));
}

// A W3-shaped step (I 64, H 256, B 64) of an LSTM (G 4) or a GRU (G 3) on
// any runnable set, as the backend runs a batch of 64: the set's batch_step
// (fused) or the gemm + update it replaces (the input gemm from the bias;
// GRU: the recurrent gemm into a copy whose n slot starts from b_hn, as
// backend/cpu/recurrent.cpp does); with cold:1, the weights are flushed from
// every cache before each step (untimed), as another core's work can leave
// them in the L3 the cores share: the step's sensitivity to that (x86 only).
// Compare sets in one process:
//   ferry_bench_kernels --benchmark_filter=W3BatchStepPerSet --benchmark_enable_random_interleaving=true
struct W3Cell {
  std::mt19937 rng{23};
  uint32_t G;
  Panel8 w_ih, w_hh, bias, b_hn;
  Floats x, h, c, h_new, pre, rec;
  explicit W3Cell(uint32_t gates)
      : G(gates),
        w_ih(rng, kI, kH, gates),
        w_hh(rng, kH, kH, gates),
        bias(rng, 1, kH, gates, 0.1f),
        b_hn(rng, 1, kH, 1, 0.1f),
        x(kB * kI, &rng, 1.0f),
        h(kB * kH, &rng, 0.5f),
        c(kB * kH, &rng, 0.5f),
        h_new(kB * kH),
        pre(kB * kG * kH),
        rec(kB * kG * kH) {}
  int kind() const { return G == 4 ? 0 : 1; }
  // W_ih, W_hh and the biases flushed from every cache level.
  void evict() {
#if defined(__x86_64__)
    for (const Panel8* m : {&w_ih, &w_hh, &bias, &b_hn}) {
      const char* p = reinterpret_cast<const char*>(m->w.data);
      const size_t n = layout::panel8_elements(m->w.gates, m->w.units, m->w.cols) * sizeof(float);
      for (size_t o = 0; o < n; o += 64) _mm_clflush(p + o);
    }
    _mm_mfence();
#endif
  }
  uint32_t cols() const { return G * kH; }
  void fused(const KernelSet* set) {
    const kernels::BatchStepArgs a{&w_ih.w, x.p,     kI,      &bias.w, &w_hh.w, h.p, kH, G == 4 ? c.p : nullptr,
                                   kH,      h_new.p, kH,      nullptr, 0,       kH,  G == 3 ? &b_hn.w : nullptr};
    set->batch_step[kind()](a, 0, kB, 0, layout::panels_of(kH));
  }
  void separate(const KernelSet* set) {
    const uint32_t n = cols();
    set->gemm({&w_ih.w, x.p, kI, &bias.w, nullptr, pre.p, n, n}, 0, kB, 0, n / 8);
    float* r = pre.p;
    if (G == 3) {  // r, z continue the input chains; n starts from b_hn
      r = rec.p;
      for (size_t b = 0; b < kB; ++b) {
        for (uint32_t p = 0; p < kH / 8; ++p) {
          std::copy(pre.p + b * n + p * 24, pre.p + b * n + p * 24 + 16, r + b * n + p * 24);
          std::copy(b_hn.data.p + p * 8, b_hn.data.p + p * 8 + 8, r + b * n + p * 24 + 16);
        }
      }
    }
    set->gemm({&w_hh.w, h.p, kH, nullptr, r, r, n, n}, 0, kB, 0, n / 8);
    for (size_t b = 0; b < kB; ++b) {
      const kernels::UpdateArgs u{r + b * n, pre.p + b * n, c.p + b * kH, h.p + b * kH, h_new.p + b * kH, kH, 0};
      set->update[kind()](u, 0, layout::panels_of(kH));
    }
  }
};

void BM_W3BatchStepPerSet(benchmark::State& state) {
  flush_denormals();
  const KernelSet* sets[8];
  const size_t n = kernels::runnable_simd_kernel_sets(DType::kF32, sets, 8);
  const size_t i = static_cast<size_t>(state.range(0));
  const uint32_t G = static_cast<uint32_t>(state.range(1));
  const bool fused = state.range(2) != 0;
  if (i >= n) {
    state.SkipWithError("fewer SIMD kernel sets run here");
    return;
  }
  const KernelSet* set = sets[i];
  static W3Cell lstm(4), gru(3);
  W3Cell& w = G == 4 ? lstm : gru;
  if (fused && !set->batch_step[w.kind()]) {
    state.SkipWithError("this set has no batch_step for the cell");
    return;
  }
  const bool cold = state.range(3) != 0;
  for (auto _ : state) {
    if (cold) {  // the weights out of every cache level, as another core's work may leave them
      state.PauseTiming();
      w.evict();
      state.ResumeTiming();
    }
    if (fused) {
      w.fused(set);
    } else {
      w.separate(set);
    }
  }
  const double macs = double(kB) * w.cols() * (kI + kH);
  const double peak = ferry_bench::fma_peak(std::string(set->name).find("avx512") != std::string::npos);
  state.counters["GFLOP/s"] = benchmark::Counter(2 * macs, benchmark::Counter::kIsIterationInvariantRate);
  if (peak > 0) state.counters["of_peak"] = benchmark::Counter(macs / peak, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(set->name) + (G == 4 ? " LSTM" : " GRU") + (fused ? " batch_step" : " gemm+update") +
                 (cold ? ", weights evicted" : ""));
}

// 1,000 dependent steps per iteration; the time is per step.
void small_step(benchmark::State& state, uint32_t G, uint32_t H,
                const KernelSet* set = kernels::best_simd_kernel_set(DType::kF32)) {
  flush_denormals();
  if (!set) {
    state.SkipWithError("no SIMD kernel set runs here");
    return;
  }
  SmallStep w(G, H, set);
  for (auto _ : state) w.run(1000);
  state.counters["ns_per_step"] = benchmark::Counter(1000 * 1e-9, benchmark::Counter::kIsIterationInvariantRate |
                                                                       benchmark::Counter::kInvert);
  state.SetLabel(w.set->name);
}

void BM_W1H16StepKernel(benchmark::State& state) { small_step(state, 4, 16); }
void BM_W4H16StepKernel(benchmark::State& state) { small_step(state, 3, 16); }
void BM_W1H64StepKernel(benchmark::State& state) { small_step(state, 4, 64); }
void BM_W4H64StepKernel(benchmark::State& state) { small_step(state, 3, 64); }

// The LSTM (G 4) or GRU (G 3) step (I = H) of every SIMD set that runs
// here: range(0) picks the set (0 = the narrowest ISA), range(1) is H.
// Where AVX-512 runs, this is what decides below which H its set takes the
// AVX2 step (avx512.cpp: lstm_step_1x32, gru_step_wide); run it with
// --benchmark_enable_random_interleaving=true.
void step_per_set(benchmark::State& state, uint32_t G) {
  const KernelSet* sets[8];
  const size_t n = kernels::runnable_simd_kernel_sets(DType::kF32, sets, 8);
  const size_t i = static_cast<size_t>(state.range(0));
  if (i >= n) {
    state.SkipWithError("fewer SIMD kernel sets run here");
    return;
  }
  small_step(state, G, static_cast<uint32_t>(state.range(1)), sets[i]);
}
void BM_LstmStepPerSet(benchmark::State& state) { step_per_set(state, 4); }
void BM_GruStepPerSet(benchmark::State& state) { step_per_set(state, 3); }

// Seconds of one W2::read() (median of 9, thread CPU time: the clock
// Google Benchmark's rate counters divide by): the W_hh reads of one chunk
// of both layers at the speed of a plain read, measured once.
double w2_read_seconds() {
  static const double seconds = [] {
    static volatile float sink;
    std::vector<double> t;
    for (int r = 0; r < 9; ++r) {
      const double t0 = ferry_bench::thread_cpu_seconds();
      sink = w2().read();
      t.push_back(ferry_bench::thread_cpu_seconds() - t0);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }();
  return seconds;
}

constexpr double kW2HhBytes = 4.0 * kG * kH * kH;  // one W_hh

void BM_W2Read(benchmark::State& state) {
  W2& w = w2();
  for (auto _ : state) benchmark::DoNotOptimize(w.read());
  state.counters["GB/s"] = benchmark::Counter(2 * kW2Chunk * kW2HhBytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// 64 steps of each layer: the W_hh reads, plus the update and the input
// part each step adds.
void BM_W2Steps(benchmark::State& state) {
  flush_denormals();
  W2& w = w2();
  const double read_s = w2_read_seconds();
  for (auto _ : state) {
    w.steps(w.w_hh1.w);
    w.steps(w.w_hh2.w);
  }
  state.counters["GB/s"] = benchmark::Counter(2 * kW2Chunk * kW2HhBytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["of_read"] = benchmark::Counter(read_s, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(w.set->name);
}

void BM_W2Proj1(benchmark::State& state) {
  flush_denormals();
  W2& w = w2();
  for (auto _ : state) w.proj1();
  report(state, double(kW2Chunk) * kCols * kW2I);
}

void BM_W2Proj2(benchmark::State& state) {
  flush_denormals();
  W2& w = w2();
  for (auto _ : state) w.proj2();
  report(state, double(kW2Chunk) * kCols * kH);
}

// One chunk of both layers as the runtime runs it (alternating panel
// order), each layer's steps followed by the next chunk's projection
// (arg 0) or computing it in shares inside the steps (arg 1, step_project).
void BM_W2Chunk(benchmark::State& state) {
  flush_denormals();
  W2& w = w2();
  const bool overlap = state.range(0) != 0;
  const double read_s = w2_read_seconds();
  for (auto _ : state) {
    w.steps_project(w.w_hh1.w, w.w_ih1.w, w.x.p, overlap);
    w.steps_project(w.w_hh2.w, w.w_ih2.w, w.y1.p, overlap);
  }
  state.counters["of_read"] = benchmark::Counter(read_s, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(w.set->name) + (overlap && w.set->step_project[0] ? " step_project" : " steps, gemm"));
}

// A whole W2 run at the kernels, in the backend's order: layer 1's eight
// chunks (input part, then its 64 steps), then layer 2's. of_floor:
// ferry_bench_torch's floor for W2 (each W_hh read once per step at the
// plain read's speed) over this time.
void BM_W2Run(benchmark::State& state) {
  flush_denormals();
  W2& w = w2();
  const double read_s = w2_read_seconds();
  for (auto _ : state) {
    for (uint32_t i = 0; i < kW2Chunks; ++i) {
      w.proj1();
      w.steps(w.w_hh1.w);
    }
    for (uint32_t i = 0; i < kW2Chunks; ++i) {
      w.proj2();
      w.steps(w.w_hh2.w);
    }
  }
  state.counters["of_floor"] = benchmark::Counter(kW2Chunks * read_s, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(w.set->name);
}

#if defined(__x86_64__)
// What bounds the AVX-512 GRU step from L2 (avx512.cpp: gru_step_wide): its
// loads and FMAs alone, over a GRU(H, H)'s two Panel8 matrices (96 H^2
// bytes: 96 KiB at H 64), groups of 4 panels, the group order reversed
// every other step as ferry_step does from 64 KiB, no update. range(0)
// picks how a panel's two rows k, k+1 (192 bytes) are read:
//   0 rows     [r z] as one zmm and n as a ymm, row by row: the [r z] of
//              every odd k straddles two cache lines (the step's form for
//              odd K)
//   1 aligned  three aligned zmm [r z] [n r'] [z' n'], [r' z'] by one
//              valignd, n' a ymm: the step's form for even K
//   2 whole    three aligned zmm, one FMA each: no exact form (each gate's
//              lanes move between the two rows), the loads' own bound
// The FMAs' results are summed at the end only so that none is dropped.
template <int Form>
__attribute__((target("avx512f,fma"))) float gru_stream_model(const float* w_ih, const float* w_hh, uint32_t h,
                                                          size_t steps) {
  const uint32_t panels = h / 8;
  const size_t panel = layout::panel8_panel_elements(3, h);
  const __m512 x = _mm512_set1_ps(1e-3f);
  __m512 rz[4], w3[4];
  __m256 n[4];
  for (int i = 0; i < 4; ++i) {
    rz[i] = w3[i] = _mm512_setzero_ps();
    n[i] = _mm256_setzero_ps();
  }
  for (size_t t = 0; t < steps; ++t) {
    for (uint32_t g = 0; g < panels / 4; ++g) {
      const uint32_t p = t % 2 ? panels - 4 * (g + 1) : 4 * g;
      for (const float* w : {w_ih, w_hh}) {
        const float* wi[4];
        for (int i = 0; i < 4; ++i) wi[i] = w + (p + i) * panel;
        for (uint32_t k = 0; k < h; k += 2) {
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            if (Form == 0) {
              rz[i] = _mm512_fmadd_ps(x, _mm512_loadu_ps(wi[i]), rz[i]);
              n[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(x), _mm256_loadu_ps(wi[i] + 16), n[i]);
              rz[i] = _mm512_fmadd_ps(x, _mm512_loadu_ps(wi[i] + 24), rz[i]);
              n[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(x), _mm256_loadu_ps(wi[i] + 40), n[i]);
            } else if (Form == 1) {
              const __m512 b = _mm512_load_ps(wi[i] + 16), c = _mm512_load_ps(wi[i] + 32);
              rz[i] = _mm512_fmadd_ps(x, _mm512_load_ps(wi[i]), rz[i]);
              n[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(x), _mm512_castps512_ps256(b), n[i]);
              const __m512i odd = _mm512_alignr_epi32(_mm512_castps_si512(c), _mm512_castps_si512(b), 8);
              rz[i] = _mm512_fmadd_ps(x, _mm512_castsi512_ps(odd), rz[i]);
              n[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(x), _mm256_load_ps(wi[i] + 40), n[i]);
            } else {
              rz[i] = _mm512_fmadd_ps(x, _mm512_load_ps(wi[i]), rz[i]);
              w3[i] = _mm512_fmadd_ps(x, _mm512_load_ps(wi[i] + 16), w3[i]);
              rz[i] = _mm512_fmadd_ps(x, _mm512_load_ps(wi[i] + 32), rz[i]);
            }
            wi[i] += 48;
          }
        }
      }
    }
  }
  float sum = 0;
  for (int i = 0; i < 4; ++i) {
    float t[16], u[8];
    _mm512_storeu_ps(t, _mm512_add_ps(rz[i], w3[i]));
    _mm256_storeu_ps(u, n[i]);
    for (float v : t) sum += v;
    for (float v : u) sum += v;
  }
  return sum;
}

void BM_GruStreamModel(benchmark::State& state) {
  const int form = static_cast<int>(state.range(0));
  const uint32_t h = static_cast<uint32_t>(state.range(1));
  if (!__builtin_cpu_supports("avx512f")) {
    state.SkipWithError("no AVX-512 here");
    return;
  }
  std::mt19937 rng(17);
  Panel8 w_ih(rng, h, h, 3, 0.25f), w_hh(rng, h, h, 3, 0.25f);
  static volatile float sink;
  constexpr size_t kSteps = 100;
  for (auto _ : state) {
    sink = form == 0   ? gru_stream_model<0>(w_ih.w.f32(), w_hh.w.f32(), h, kSteps)
           : form == 1 ? gru_stream_model<1>(w_ih.w.f32(), w_hh.w.f32(), h, kSteps)
                       : gru_stream_model<2>(w_ih.w.f32(), w_hh.w.f32(), h, kSteps);
  }
  state.counters["ns_per_step"] = benchmark::Counter(kSteps * 1e-9, benchmark::Counter::kIsIterationInvariantRate |
                                                                         benchmark::Counter::kInvert);
  static const char* const kForms[] = {"rows", "aligned", "whole"};
  state.SetLabel(kForms[form]);
}
#endif

}  // namespace

BENCHMARK(BM_W3InputGemm)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W3RecurrentGemm)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W3LstmUpdate)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W3Step)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W3FusedStep)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W3BatchStepPerSet)
    ->ArgsProduct({{0, 1}, {4, 3}, {0, 1}, {0, 1}})
    ->ArgNames({"set", "G", "fused", "cold"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W1H16StepKernel)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W4H16StepKernel)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W1H64StepKernel)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W4H64StepKernel)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LstmStepPerSet)
    ->ArgsProduct({{0, 1}, {32, 64, 96, 128, 256}})
    ->ArgNames({"set", "H"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GruStepPerSet)
    ->ArgsProduct({{0, 1}, {16, 32, 64, 128, 256}})
    ->ArgNames({"set", "H"})
    ->Unit(benchmark::kMicrosecond);
#if defined(__x86_64__)
BENCHMARK(BM_GruStreamModel)
    ->ArgsProduct({{0, 1, 2}, {64, 256}})
    ->ArgNames({"form", "H"})
    ->Unit(benchmark::kMicrosecond);
#endif
BENCHMARK(BM_W2Read)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W2Steps)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W2Proj1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W2Proj2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W2Chunk)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_W2Run)->Unit(benchmark::kMillisecond);

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
