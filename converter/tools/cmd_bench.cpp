// ferry bench MODEL.fb: times ferry_run (or ferry_step) on seeded input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli_model.h"
#include "commands.h"
#include "ferry/ferry_generated.h"
#include "seeded_floats.h"
#include "weight_layout.h"

namespace ferry::cli {
namespace {

using conv::Error;

// Multiply-adds of one ferry_run of (batch, seq) on `m`, and its weight bytes.
struct ModelCost {
  double macs_per_step_sample = 0;  // recurrent + Linear layers before `last`
  double macs_per_sample = 0;       // Linear layers after `last`
  uint64_t weight_bytes = 0;
};

ModelCost model_cost(const ferry::fb::Model* m) {
  namespace fb = ferry::fb;
  ModelCost c;
  c.weight_bytes = m->weights() ? m->weights()->size() : 0;
  bool collapsed = false;
  for (const fb::Layer* l : *m->layers()) {
    switch (l->kind()) {
      case fb::LayerKind::LSTM: case fb::LayerKind::GRU: case fb::LayerKind::RNN_TANH: case fb::LayerKind::RNN_RELU: {
        const layout::CellKind cell = l->kind() == fb::LayerKind::LSTM ? layout::CellKind::kLstm
                                      : l->kind() == fb::LayerKind::GRU ? layout::CellKind::kGru
                                                                         : layout::CellKind::kRnn;
        const double g = layout::gate_count(cell);
        const double h = l->hidden_size(), p = l->proj_size(), h_out = p ? p : h;
        const double dirs = l->bidirectional() ? 2 : 1;
        for (uint32_t k = 0; k < l->num_layers(); ++k) {
          const double in = k == 0 ? l->input_size() : dirs * h_out;
          c.macs_per_step_sample += dirs * (g * h * (in + h_out) + p * h);
        }
        break;
      }
      case fb::LayerKind::Linear:
        (collapsed ? c.macs_per_sample : c.macs_per_step_sample) += static_cast<double>(l->input_size()) * l->output_size();
        break;
      case fb::LayerKind::Last: collapsed = true; break;
      default: break;
    }
  }
  return c;
}

}  // namespace

namespace {

struct BenchOptions {
  std::string model, backend = "auto";
  size_t batch = 1, seq = 64, threads = 1, repeat = 0;
  bool stream = false, json = false;
  CLI::Option* repeat_opt = nullptr;
};

// Times ferry_run (or, with --stream, ferry_step one time step at a time) on
// seeded random input: repeated samples, median and spread, single-threaded
// unless --threads. The side-by-side comparison with libtorch, and the
// machine's ceilings, are tests/bench/ferry_bench_torch.
int run_bench(const BenchOptions& o) {
  const std::string& path = o.model;
  const bool stream = o.stream;
  const bool json = o.json;
  const size_t batch = o.batch;
  ThreadPool pool(o.threads);
  LoadedModel lm(path);
  ferry_model_info info{};
  info.struct_size = sizeof(info);
  check(ferry_model_get_info(lm.model, &info), "model info");
  const size_t seq = info.has_time_axis ? o.seq : 1;
  if (stream && !info.streamable) throw Error("'" + path + "': --stream: the model has a bidirectional layer");
  if (stream && !info.has_time_axis) throw UsageError("--stream needs a model with a time axis");

  const ferry_backend backend = parse_backend(o.backend);
  const CliSession cli_session(lm.model, batch, stream ? 1 : seq, backend, pool.pool);
  ferry_session* session = cli_session.session;
  const size_t arena_bytes = cli_session.arena_bytes;

  // Seeded input in the model's layout.
  std::vector<float> x(batch * seq * info.input_size);
  uint32_t state = 12345;
  for (float& v : x) v = ferry::seeded_float(&state);
  size_t out_floats = 0;
  check(ferry_output_floats(lm.model, batch, stream ? 1 : seq, &out_floats), "output size");
  std::vector<float> y(out_floats), xt(batch * info.input_size);
  // One sample: a whole ferry_run, or `seq` ferry_step calls (input of each
  // step gathered beforehand, so that only ferry_step is timed).
  std::vector<float> steps(stream ? seq * batch * info.input_size : 0);
  for (size_t t = 0; stream && t < seq; ++t)
    for (size_t b = 0; b < batch; ++b) {
      const size_t src = info.batch_first ? (b * seq + t) * info.input_size : (t * batch + b) * info.input_size;
      std::memcpy(&steps[(t * batch + b) * info.input_size], &x[src], info.input_size * sizeof(float));
    }
  const auto sample = [&] {
    if (!stream) {
      check(ferry_run(session, x.data(), batch, seq, nullptr, y.data(), y.size()), "run");
      return;
    }
    for (size_t t = 0; t < seq; ++t) {
      check(ferry_step(session, &steps[t * batch * info.input_size], batch, y.data(), y.size()), "step");
    }
  };
  using clock = std::chrono::steady_clock;
  sample();  // warm-up: caches, pages, branch predictors
  check(ferry_state_reset(session), "reset");
  size_t repeat = o.repeat;
  if (!o.repeat_opt->count()) {
    // About half a second of samples, at least 5, at most 10000.
    const auto t0 = clock::now();
    sample();
    const double one = std::chrono::duration<double>(clock::now() - t0).count();
    repeat = std::max<size_t>(5, std::min<size_t>(10000, static_cast<size_t>(0.5 / std::max(one, 1e-9))));
  }
  std::vector<double> us;
  us.reserve(repeat);
  for (size_t r = 0; r < repeat; ++r) {
    const auto t0 = clock::now();
    sample();
    us.push_back(std::chrono::duration<double, std::micro>(clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  const auto pct = [&us](double q) { return us[std::min(us.size() - 1, static_cast<size_t>(q * (us.size() - 1) + 0.5))]; };
  const double median = pct(0.5), p10 = pct(0.1), p90 = pct(0.9), best = us.front();
  const ModelCost cost = model_cost(ferry::fb::GetModel(lm.file.data()));
  const double macs = cost.macs_per_step_sample * batch * seq + cost.macs_per_sample * batch * (stream ? seq : 1);
  const double per_step = median / seq;
  const double gflops = 2 * macs / (median * 1e3);
  if (json) {
    std::printf("{\"model\": \"%s\", \"mode\": \"%s\", \"backend\": \"%s\", \"threads\": %zu, \"batch\": %zu, "
                "\"seq\": %zu, \"samples\": %zu, \"median_us\": %.4f, \"p10_us\": %.4f, \"p90_us\": %.4f, "
                "\"min_us\": %.4f, \"per_step_us\": %.4f, \"gflops\": %.3f, \"weight_bytes\": %llu, "
                "\"arena_bytes\": %zu}\n",
                path.c_str(), stream ? "stream" : "run", ferry_backend_name(backend), pool.threads, batch, seq, us.size(),
                median, p10, p90, best, per_step, gflops, static_cast<unsigned long long>(cost.weight_bytes),
                arena_bytes);
    return 0;
  }
  std::printf("bench    %s: %s, batch %zu, %zu steps, backend %s, %zu thread%s, %zu samples\n", path.c_str(),
              stream ? "ferry_step one step at a time" : "ferry_run", batch, seq, ferry_backend_name(backend),
              pool.threads, pool.threads == 1 ? "" : "s", us.size());
  std::printf("time     median %.3f us per %s (p10 %.3f, p90 %.3f, min %.3f)\n", median,
              stream ? "sample of steps" : "run", p10, p90, best);
  std::printf("step     %.4f us per time step (%.0f steps/s of batch %zu)\n", per_step, 1e6 / per_step, batch);
  std::printf("compute  %.2f GFLOP/s (%.3g multiply-adds per run); weights %.2f MB, arena %zu bytes\n", gflops, macs,
              static_cast<double>(cost.weight_bytes) / 1e6, arena_bytes);
  return 0;
}

}  // namespace

Action declare_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  app.footer("Prints the median, p10, p90 and min time of repeated runs on seeded input, and GFLOP/s.");
  app.add_option("MODEL", o->model, "The model file")->type_name("MODEL.fb")->required();
  app.add_option("--batch", o->batch, "Samples per run")->type_name("B")->check(positive_count(1 << 24))->capture_default_str();
  app.add_option("--seq", o->seq, "Time steps per run (models with a time axis)")
      ->type_name("T")
      ->check(positive_count(1 << 24))
      ->capture_default_str();
  app.add_flag("--stream", o->stream, "Time ferry_step one time step at a time");
  app.add_option("--backend", o->backend, "Where to run it")
      ->type_name("BACKEND")
      ->check(CLI::IsMember(backend_names()))
      ->capture_default_str();
  app.add_option("--threads", o->threads, "Threads")->type_name("N")->check(positive_count(1024))->capture_default_str();
  o->repeat_opt = app.add_option("--repeat", o->repeat, "Timed runs (default: half a second's worth, 5 to 10000)")
                      ->type_name("N")
                      ->check(positive_count(1 << 24));
  app.add_flag("--json", o->json, "Print one JSON object instead of text");
  return [o] { return run_bench(*o); };
}

}  // namespace ferry::cli
