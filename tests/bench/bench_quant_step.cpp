// The streaming step (W1: batch 1, one time step, one thread) of an LSTM
// with H = I in {64, 256, 1024}, on the fastest kernel set of each weight
// dtype this CPU runs: f32, f16, int8, int4. One step is what ferry_step
// does on the kPanels path for a lone step: (i8, i4) quantize x_t and
// h_{t-1}, then the fused step over every panel (input part fused, since a
// lone step has no precomputed projection); h_t becomes the next h_{t-1}.
// Denormals are flushed, as the runtime does during a step.
//
//   ferry_bench_quant_step [--benchmark_filter=...] [--benchmark_min_time=...]
//                          [--benchmark_repetitions=N]
//
// Prints Google Benchmark's table, then ns per step (the fastest
// repetition) and the ratio to f32 per H. A benchmark, not a test: no
// timing is asserted anywhere.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "kernels/kernel_set.h"
#include "kernels/registry.h"
#include "shared/weight_layout.h"
#include "shared/weight_quant.h"

namespace {

using namespace ferry;
using kernels::KernelSet;

struct Aligned {
  std::vector<uint8_t> storage;
  uint8_t* p = nullptr;
  void resize(size_t n) {
    storage.assign(n + 64, 0);
    p = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  }
};

// A [4H, K] LSTM weight in `d`'s layout.
struct Matrix {
  Aligned data, scales;
  Weight w;
  Matrix(std::mt19937& rng, DType d, uint32_t H, uint32_t K) {
    std::uniform_real_distribution<float> dist(-1.0f / std::sqrt(float(H)), 1.0f / std::sqrt(float(H)));
    std::vector<float> logical(size_t{4} * H * K);
    for (float& v : logical) v = dist(rng);
    w.gates = 4;
    w.units = H;
    w.cols = K;
    w.dtype = d;
    switch (d) {
      case DType::kF32:
        data.resize(layout::panel8_elements(4, H, K) * 4);
        for (uint32_t g = 0; g < 4; ++g)
          for (uint32_t u = 0; u < H; ++u)
            for (uint32_t k = 0; k < K; ++k)
              reinterpret_cast<float*>(data.p)[layout::panel8_index(4, K, g, u, k)] = logical[(size_t{g} * H + u) * K + k];
        w.layout = WeightLayout::kPanel8;
        break;
      case DType::kF16:
        data.resize(layout::panel8_elements(4, H, K) * 2);
        quant::pack_f16_panel8(logical.data(), 4, H, K, reinterpret_cast<uint16_t*>(data.p));
        w.layout = WeightLayout::kPanel8;
        break;
      case DType::kI8:
        data.resize(layout::panel8x4_bytes(4, H, K));
        scales.resize(layout::row_scale_elements(4, H) * 4);
        quant::quantize_i8_panel8x4(logical.data(), 4, H, K, reinterpret_cast<int8_t*>(data.p),
                                    reinterpret_cast<float*>(scales.p));
        w.layout = WeightLayout::kPanel8x4;
        w.scales = reinterpret_cast<float*>(scales.p);
        break;
      case DType::kI4:
        data.resize(layout::panel8x8q4_bytes(4, H, K));
        scales.resize(layout::group_scale_elements(4, H, K) * 2);
        quant::quantize_i4_panel8x8q4(logical.data(), 4, H, K, data.p, reinterpret_cast<uint16_t*>(scales.p));
        w.layout = WeightLayout::kPanel8x8q4;
        w.group_scales = reinterpret_cast<uint16_t*>(scales.p);
        break;
    }
    w.data = data.p;
  }
};

struct Lstm {
  const KernelSet* set;
  uint32_t H;
  Matrix w_ih, w_hh;
  Aligned bias_storage, qx, qh;
  Weight bias;
  std::vector<float> x, h, h_new, c;

  Lstm(const KernelSet* s, DType d, uint32_t hidden, std::mt19937& rng)
      : set(s), H(hidden), w_ih(rng, d, hidden, hidden), w_hh(rng, d, hidden, hidden) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    bias_storage.resize(layout::panel8_elements(4, H, 1) * 4);
    for (uint32_t i = 0; i < 4 * H; ++i) reinterpret_cast<float*>(bias_storage.p)[i] = 0.1f * dist(rng);
    bias.data = bias_storage.p;
    bias.gates = 4;
    bias.units = H;
    bias.layout = WeightLayout::kPanel8;
    x.resize(H);
    h.resize(H);
    h_new.resize(H);
    c.resize(H);
    for (float& v : x) v = dist(rng);
    for (float& v : h) v = 0.5f * dist(rng);
    if (set->quantize_rows) {
      qx.resize(set->activation_bytes(H));
      qh.resize(set->activation_bytes(H));
    }
  }

  void step() {
    kernels::StepArgs a{&w_ih.w, x.data(), nullptr, &bias, &w_hh.w, h.data(), nullptr, c.data(), h_new.data(), H, 0};
    if (set->quantize_rows) {
      set->quantize_rows(x.data(), 1, H, H, reinterpret_cast<int8_t*>(qx.p), 0, &a.x_scale);
      set->quantize_rows(h.data(), 1, H, H, reinterpret_cast<int8_t*>(qh.p), 0, &a.h_scale);
      a.qx = reinterpret_cast<int8_t*>(qx.p);
      a.qh = reinterpret_cast<int8_t*>(qh.p);
    }
    set->step[0](a, 0, layout::panels_of(H));
    h.swap(h_new);
  }
};

const KernelSet* fastest(DType d) {
  const KernelSet* s = kernels::best_simd_kernel_set(d);
  return s ? s : kernels::reference_kernel_set(d);
}

const char* dtype_name(DType d) {
  return d == DType::kF16 ? "f16" : d == DType::kI8 ? "int8" : d == DType::kI4 ? "int4" : "f32";
}

// Collects each run's CPU time per step (ns) by name, for the ratio table: the
// fastest repetition (--benchmark_repetitions), the least disturbed by
// whatever else the machine runs.
class Collect : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, double> ns;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      const std::string name = r.run_name.function_name;
      auto it = ns.find(name);
      if (it == ns.end() || r.GetAdjustedCPUTime() < it->second) ns[name] = r.GetAdjustedCPUTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

}  // namespace

int main(int argc, char** argv) {
#if defined(__x86_64__)
  _mm_setcsr(_mm_getcsr() | 0x8040u);  // FTZ + DAZ, as ferry_step
#endif
  const uint32_t sizes[] = {64, 256, 1024};
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kI8, DType::kI4};
  std::map<std::string, std::string> set_of;
  for (uint32_t H : sizes) {
    for (DType d : dtypes) {
      const KernelSet* set = fastest(d);
      if (!set) continue;
      const std::string name = std::string("lstm_step/") + dtype_name(d) + "/H" + std::to_string(H);
      set_of[name] = set->name;
      benchmark::RegisterBenchmark(name.c_str(), [set, d, H](benchmark::State& state) {
        std::mt19937 rng(H);
        Lstm lstm(set, d, H, rng);
        for (int i = 0; i < 3; ++i) lstm.step();  // warm the caches
        for (auto _ : state) {
          lstm.step();
          benchmark::DoNotOptimize(lstm.h.data());
          benchmark::ClobberMemory();
        }
        state.SetLabel(set->name);
        // Weight bytes streamed per step (w_ih + w_hh, scales included).
        const double bytes = double(lstm.w_ih.data.storage.size() + lstm.w_ih.scales.storage.size()) * 2;
        state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
      })->Unit(benchmark::kNanosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  Collect reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\nLSTM step, batch 1, H = I, one thread (ns per step; ratio to f32 at the same H)\n");
  std::printf("%-6s", "H");
  for (DType d : dtypes) std::printf("  %22s", dtype_name(d));
  std::printf("\n");
  for (uint32_t H : sizes) {
    const std::string f32 = std::string("lstm_step/f32/H") + std::to_string(H);
    std::printf("%-6u", H);
    for (DType d : dtypes) {
      const std::string name = std::string("lstm_step/") + dtype_name(d) + "/H" + std::to_string(H);
      auto it = reporter.ns.find(name);
      if (it == reporter.ns.end()) {
        std::printf("  %22s", "-");
        continue;
      }
      char cell[64];
      auto base = reporter.ns.find(f32);
      if (base != reporter.ns.end()) {
        std::snprintf(cell, sizeof cell, "%.0f (%.2fx)", it->second, it->second / base->second);
      } else {
        std::snprintf(cell, sizeof cell, "%.0f", it->second);
      }
      std::printf("  %22s", cell);
    }
    std::printf("\n");
  }
  std::printf("sets:");
  for (DType d : dtypes) {
    const KernelSet* s = fastest(d);
    std::printf(" %s", s ? s->name : "-");
  }
  std::printf("\n");
  return 0;
}
