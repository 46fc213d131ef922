// Latency with denormal inputs against ordinary inputs (issue: within 1.1x).
// x86 and many Arm cores take a slow path (microcode assist) for arithmetic
// on denormal operands unless flush-to-zero / denormals-are-zero is on; the
// runtime flushes denormals for the duration of ferry_run / ferry_step.
//
//   ferry_bench_denormals [--benchmark_filter=...]
//
// Prints Google Benchmark's table, then the denormal / normal time ratio
// per model and backend, measured again with a plain clock (median of 15
// rounds) so the ratio is one number.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "random_models.h"

namespace {

using ferry::conv::LayerOp;
using ferry::test::LayerSpec;
using ferry::test::ModelSpec;
using ferry::test::Runner;

struct Case {
  const char* name;
  ModelSpec spec;
};

LayerSpec layer(LayerOp op, uint32_t size = 0) {
  LayerSpec l;
  l.op = op;
  l.size = size;
  return l;
}

std::vector<Case> cases() {
  ModelSpec lstm;
  lstm.input_size = 64;
  lstm.layers = {layer(LayerOp::LSTM, 128), layer(LayerOp::Linear, 16)};
  ModelSpec gru;
  gru.input_size = 64;
  gru.layers = {layer(LayerOp::GRU, 128), layer(LayerOp::Linear, 16)};
  ModelSpec mlp;
  mlp.input_size = 256;
  mlp.layers = {layer(LayerOp::Linear, 256), layer(LayerOp::Tanh), layer(LayerOp::Linear, 64)};
  return {{"lstm_i64_h128", lstm}, {"gru_i64_h128", gru}, {"mlp_256", mlp}};
}

enum class Inputs { Normal, Denormal };

// Inputs of the same signs and pattern; denormal ones are scaled into
// [FLT_TRUE_MIN, FLT_MIN).
std::vector<float> inputs(size_t n, Inputs kind) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const float u = ferry::test::uniform_pm1(9, 0, i);
    x[i] = kind == Inputs::Normal ? u : u * (FLT_MIN / 2);
    if (kind == Inputs::Denormal && x[i] == 0.0f) x[i] = FLT_TRUE_MIN;
  }
  return x;
}

// One streaming step (or one batch-1 run for a model without time axis).
struct Bench {
  Bench(const ModelSpec& spec, ferry_backend backend, Inputs kind)
      : runner(ferry::test::build_model_bytes(spec), 1, 1, backend),
        x(inputs(spec.input_size * 256, kind)) {}
  void once() {
    const float* in = x.data() + (i++ % 256) * runner.info().input_size;
    if (runner.info().has_time_axis) {
      runner.step(in, 1, &y);
    } else {
      std::vector<float> v(in, in + runner.info().input_size);
      runner.run(v, 1, 1, &y);
    }
  }
  Runner runner;
  std::vector<float> x, y;
  size_t i = 0;
};

void bm(benchmark::State& state, ModelSpec spec, ferry_backend backend, Inputs kind) {
  Bench b(spec, backend, kind);
  if (b.runner.status() != FERRY_OK) {
    state.SkipWithError(b.runner.last_error().c_str());
    return;
  }
  for (auto _ : state) b.once();
}

double median_ns(Bench& b) {
  std::vector<double> rounds;
  for (int r = 0; r < 15; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < 400; ++k) b.once();
    rounds.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 400);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::pair<const char*, ferry_backend> backends[] = {{"reference", FERRY_BACKEND_REFERENCE},
                                                            {"auto", FERRY_BACKEND_AUTO}};
  for (const Case& c : cases()) {
    for (const auto& [bname, backend] : backends) {
      for (Inputs kind : {Inputs::Normal, Inputs::Denormal}) {
        const std::string name = std::string(c.name) + "/" + bname + (kind == Inputs::Normal ? "/normal" : "/denormal");
        benchmark::RegisterBenchmark(name.c_str(), bm, c.spec, backend, kind);
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();

  std::printf("\ndenormal / normal latency (median of 15 x 400 steps; target <= 1.10)\n");
  for (const Case& c : cases()) {
    for (const auto& [bname, backend] : backends) {
      Bench normal(c.spec, backend, Inputs::Normal), denormal(c.spec, backend, Inputs::Denormal);
      if (normal.runner.status() != FERRY_OK) continue;
      for (int w = 0; w < 200; ++w) normal.once(), denormal.once();  // warm up
      const double n = median_ns(normal), d = median_ns(denormal);
      std::printf("  %-16s %-10s normal %9.0f ns  denormal %9.0f ns  ratio %.3f%s\n", c.name, bname, n, d, d / n,
                  d / n > 1.10 ? "  ABOVE 1.10" : "");
    }
  }
  return 0;
}
