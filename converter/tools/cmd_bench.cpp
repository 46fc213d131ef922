// ferry bench MODEL.fb: times ferry_run (or ferry_step) on seeded input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_model.h"
#include "commands.h"
#include "ferry/ferry_generated.h"
#include "io/atomic_file.h"
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
  std::string model, backend = "auto", trace;
  size_t batch = 1, seq = 64, threads = 1, repeat = 0, trace_runs = 20;
  bool stream = false, json = false, per_layer = false;
  CLI::Option* repeat_opt = nullptr;
};

using Clock = std::chrono::steady_clock;

// The profiler of --per-layer (ferry_profiler): each layer's time in the
// current sample, summed over its calls, and, while `tracing`, one trace
// event per layer per call into `events` (reserved beforehand: the callback
// allocates nothing, so it adds only two clock reads to the layer's time).
struct LayerClock {
  struct Event {
    uint32_t layer;  // kCall: a whole ferry_run / ferry_step
    Clock::time_point begin;
    double us;
  };
  static constexpr uint32_t kCall = ~0u;
  std::vector<Clock::time_point> began;
  std::vector<double> sample_us;  // per layer, this sample
  std::vector<Event> events;
  bool tracing = false;

  explicit LayerClock(size_t layers) : began(layers), sample_us(layers) {}

  static void on_layer(void* context, size_t layer, int end) {
    LayerClock* c = static_cast<LayerClock*>(context);
    const Clock::time_point now = Clock::now();
    if (!end) {
      c->began[layer] = now;
      return;
    }
    const double us = std::chrono::duration<double, std::micro>(now - c->began[layer]).count();
    c->sample_us[layer] += us;
    if (c->tracing && c->events.size() < c->events.capacity()) {
      c->events.push_back(Event{static_cast<uint32_t>(layer), c->began[layer], us});
    }
  }
};

// Index of the value at quantile q of sorted `v`.
double quantile(const std::vector<double>& sorted, double q) {
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * (sorted.size() - 1) + 0.5))];
}

// `s` as a JSON string (a name from the file: any bytes; not UTF-8 ones as U+FFFD).
std::string json_string(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

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
  if (stream && !info.has_time_axis) throw UsageError("--stream needs a model with a time axis");

  const ferry_backend backend = parse_backend(o.backend);
  const CliSession cli_session(lm.model, batch, stream ? 1 : seq, backend, pool.pool);
  ferry_session* session = cli_session.session;
  const size_t arena_bytes = cli_session.arena_bytes;
  if (stream && !info.streamable) {
    // ferry_step says why (the layer: bidirectional, or a conv that looks ahead).
    std::vector<float> zeros(batch * info.input_size), out(batch * info.output_size);
    ferry_step(session, zeros.data(), batch, out.data(), out.size());
    throw Error("'" + path + "': --stream: " + ferry_last_error());
  }

  // Seeded input in the model's layout.
  std::vector<float> x(batch * seq * info.input_size);
  uint32_t state = 12345;
  for (float& v : x) v = ferry::seeded_float(&state);
  size_t out_floats = 0;
  check(ferry_output_floats(lm.model, batch, stream ? 1 : seq, &out_floats), "output size");
  std::vector<float> y(out_floats);
  // One sample: a whole ferry_run, or `seq` ferry_step calls (input of each
  // step gathered beforehand, so that only ferry_step is timed).
  std::vector<float> steps(stream ? seq * batch * info.input_size : 0);
  for (size_t t = 0; stream && t < seq; ++t)
    for (size_t b = 0; b < batch; ++b) {
      const size_t src = info.batch_first ? (b * seq + t) * info.input_size : (t * batch + b) * info.input_size;
      std::memcpy(&steps[(t * batch + b) * info.input_size], &x[src], info.input_size * sizeof(float));
    }
  const size_t calls = stream ? seq : 1;
  const auto call = [&](ferry_session* s, size_t t) {
    if (!stream) {
      check(ferry_run(s, x.data(), batch, seq, nullptr, y.data(), y.size()), "run");
    } else {
      check(ferry_step(s, &steps[t * batch * info.input_size], batch, y.data(), y.size()), "step");
    }
  };
  const auto sample = [&] {
    for (size_t t = 0; t < calls; ++t) call(session, t);
  };
  sample();  // warm-up: caches, pages, branch predictors
  check(ferry_state_reset(session), "reset");
  size_t repeat = o.repeat;
  if (!o.repeat_opt->count()) {
    // About half a second of samples, at least 5, at most 10000.
    const auto t0 = Clock::now();
    sample();
    const double one = std::chrono::duration<double>(Clock::now() - t0).count();
    repeat = std::max<size_t>(5, std::min<size_t>(10000, static_cast<size_t>(0.5 / std::max(one, 1e-9))));
  }
  // --per-layer: a second session, the same options and a profiler,
  // sampled right after each plain sample (so both see the same machine).
  const ferry::fb::Model* fm = ferry::fb::GetModel(lm.file.data());
  const size_t layers = fm->layers()->size();
  LayerClock layer_clock(layers);
  const ferry_profiler profiler{&layer_clock, &LayerClock::on_layer};
  std::unique_ptr<CliSession> profiled;
  std::vector<std::vector<double>> layer_us(layers);
  std::vector<double> profiled_us;
  const bool per_layer = o.per_layer || !o.trace.empty();
  if (per_layer) {
    profiled = std::make_unique<CliSession>(lm.model, batch, stream ? 1 : seq, backend, pool.pool, &profiler);
  }
  // One call of a traced sample: its own event around the layers'.
  const auto traced_sample = [&] {
    for (size_t t = 0; t < calls; ++t) {
      const Clock::time_point t0 = Clock::now();
      call(profiled->session, t);
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (layer_clock.tracing && layer_clock.events.size() < layer_clock.events.capacity()) {
        layer_clock.events.push_back(LayerClock::Event{LayerClock::kCall, t0, us});
      }
    }
  };
  const size_t traced_runs = o.trace.empty() ? 0 : std::min(o.trace_runs, repeat);
  if (per_layer) {
    traced_sample();  // warm-up
    check(ferry_state_reset(profiled->session), "reset");
    // Room for every event of the traced samples: per call, each layer
    // once and the call itself.
    layer_clock.events.reserve(traced_runs * calls * (layers + 1));
    for (auto& v : layer_us) v.reserve(repeat);
    profiled_us.reserve(repeat);
  }
  const Clock::time_point origin = Clock::now();
  std::vector<double> us;
  us.reserve(repeat);
  for (size_t r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    sample();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!per_layer) continue;
    std::fill(layer_clock.sample_us.begin(), layer_clock.sample_us.end(), 0.0);
    layer_clock.tracing = r < traced_runs;
    const auto p0 = Clock::now();
    traced_sample();
    profiled_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - p0).count());
    for (size_t l = 0; l < layers; ++l) layer_us[l].push_back(layer_clock.sample_us[l]);
  }
  std::sort(us.begin(), us.end());
  const auto pct = [&us](double q) { return quantile(us, q); };
  const double median = pct(0.5), p10 = pct(0.1), p90 = pct(0.9), best = us.front();
  const ModelCost cost = model_cost(fm);
  // Per layer: median, p10, p90 over the samples, and the share of the
  // profiled sample's median.
  struct LayerRow {
    std::string name, kind;
    double median, p10, p90;
  };
  std::vector<LayerRow> rows;
  double layers_sum = 0, profiled_median = 0;
  if (per_layer) {
    std::sort(profiled_us.begin(), profiled_us.end());
    profiled_median = quantile(profiled_us, 0.5);
    for (size_t l = 0; l < layers; ++l) {
      std::vector<double>& v = layer_us[l];
      std::sort(v.begin(), v.end());
      const auto* fl = fm->layers()->Get(static_cast<uint32_t>(l));
      rows.push_back(LayerRow{fl->name() ? fl->name()->str() : "", ferry::fb::EnumNameLayerKind(fl->kind()),
                              quantile(v, 0.5), quantile(v, 0.1), quantile(v, 0.9)});
      layers_sum += rows.back().median;
    }
  }
  if (!o.trace.empty()) {
    // Chrome's trace event format (Perfetto and chrome://tracing open it):
    // complete events in microseconds from the first timed sample.
    std::string t = "{\"displayTimeUnit\": \"ns\", \"otherData\": {\"model\": " + json_string(path) +
                    ", \"backend\": " + json_string(ferry_backend_name(backend)) + ", \"mode\": \"" +
                    (stream ? "stream" : "run") + "\", \"batch\": " + std::to_string(batch) +
                    ", \"seq\": " + std::to_string(seq) + "},\n \"traceEvents\": [";
    bool first = true;
    for (const LayerClock::Event& e : layer_clock.events) {
      const bool call = e.layer == LayerClock::kCall;
      const double ts = std::chrono::duration<double, std::micro>(e.begin - origin).count();
      char buf[96];
      std::snprintf(buf, sizeof buf, "\"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": 1, \"tid\": 1", ts, e.us);
      t += first ? "\n  {" : ",\n  {";
      first = false;
      if (call) {
        t += std::string("\"name\": \"") + (stream ? "ferry_step" : "ferry_run") + "\", \"cat\": \"call\", " + buf + "}";
      } else {
        const LayerRow& r = rows[e.layer];
        t += "\"name\": " + json_string(std::to_string(e.layer) + " " + (r.name.empty() ? r.kind : r.name + " (" + r.kind + ")")) +
             ", \"cat\": \"layer\", " + buf + ", \"args\": {\"layer\": " + std::to_string(e.layer) +
             ", \"kind\": " + json_string(r.kind) + ", \"name\": " + json_string(r.name) + "}}";
      }
    }
    t += "\n]}\n";
    conv::AtomicFile f(o.trace);
    f.write(reinterpret_cast<const uint8_t*>(t.data()), t.size());
    f.commit();
  }
  const double macs = cost.macs_per_step_sample * batch * seq + cost.macs_per_sample * batch * (stream ? seq : 1);
  const double per_step = median / seq;
  const double gflops = 2 * macs / (median * 1e3);
  if (json) {
    std::string layer_json;
    if (per_layer) {
      char buf[160];
      std::snprintf(buf, sizeof buf, ", \"per_layer\": {\"profiled_median_us\": %.4f, \"layers_sum_us\": %.4f, \"layers\": [",
                    profiled_median, layers_sum);
      layer_json = buf;
      for (size_t l = 0; l < rows.size(); ++l) {
        std::snprintf(buf, sizeof buf, "\"median_us\": %.4f, \"p10_us\": %.4f, \"p90_us\": %.4f, \"share\": %.4f}",
                      rows[l].median, rows[l].p10, rows[l].p90, profiled_median > 0 ? rows[l].median / profiled_median : 0.0);
        layer_json += std::string(l ? ", " : "") + "{\"index\": " + std::to_string(l) + ", \"name\": " + json_string(rows[l].name) +
                      ", \"kind\": " + json_string(rows[l].kind) + ", " + buf;
      }
      layer_json += "]}";
    }
    std::printf("{\"model\": %s, \"mode\": \"%s\", \"backend\": \"%s\", \"threads\": %zu, \"batch\": %zu, "
                "\"seq\": %zu, \"samples\": %zu, \"median_us\": %.4f, \"p10_us\": %.4f, \"p90_us\": %.4f, "
                "\"min_us\": %.4f, \"per_step_us\": %.4f, \"gflops\": %.3f, \"weight_bytes\": %llu, "
                "\"arena_bytes\": %zu%s}\n",
                json_string(path).c_str(), stream ? "stream" : "run", ferry_backend_name(backend), pool.threads, batch, seq, us.size(),
                median, p10, p90, best, per_step, gflops, static_cast<unsigned long long>(cost.weight_bytes),
                arena_bytes, layer_json.c_str());
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
  if (per_layer) {
    const char* unit = stream ? "sample of steps" : "run";
    std::printf("\nper layer (a profiled session beside the plain one, %zu samples; us per %s)\n", profiled_us.size(),
                unit);
    std::printf("  %-5s %-16s %-10s %10s %10s %10s %7s\n", "layer", "name", "kind", "median", "p10", "p90", "share");
    for (size_t l = 0; l < rows.size(); ++l) {
      std::printf("  %-5zu %-16s %-10s %10.3f %10.3f %10.3f %6.1f%%\n", l, rows[l].name.substr(0, 16).c_str(),
                  rows[l].kind.c_str(), rows[l].median, rows[l].p10, rows[l].p90,
                  profiled_median > 0 ? 100 * rows[l].median / profiled_median : 0.0);
    }
    std::printf("  %-5s %-16s %-10s %10.3f %10s %10s %6.1f%%\n", "", "outside layers", "", profiled_median - layers_sum, "",
                "", profiled_median > 0 ? 100 * (profiled_median - layers_sum) / profiled_median : 0.0);
    std::printf("profiled %.3f us per %s (the plain session beside it: %.3f; the profiler adds two clock reads a layer)\n",
                profiled_median, unit, median);
    if (!o.trace.empty()) {
      std::printf("trace    %s: %zu events of the first %zu samples (Chrome trace format: Perfetto, chrome://tracing)\n",
                  o.trace.c_str(), layer_clock.events.size(), traced_runs);
    }
  }
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
  app.add_flag("--per-layer", o->per_layer,
               "Also time each layer, on a second session with a profiler, sampled beside the plain one");
  app.add_option("--trace", o->trace,
                 "Also write each layer's calls as a Chrome trace (Perfetto opens it); implies --per-layer")
      ->type_name("OUT.json");
  app.add_option("--trace-runs", o->trace_runs, "Samples the trace holds (the first N)")
      ->type_name("N")
      ->check(positive_count(10000))
      ->capture_default_str();
  return [o] { return run_bench(*o); };
}

}  // namespace ferry::cli
