// ferry's CUDA backend against PyTorch's cuDNN LSTM and onnxruntime's CUDA
// execution provider, on the same weights and inputs (README, "CUDA
// backend", how to run it). Never run by ctest; built with FERRY_CUDA.
//
//   ferry_bench_cuda [--quick] [--only W1|W2|W3] [--json FILE] [--device N]
//                    [--python PY] [--no-torch] [--no-ort] [--zero-copy]
//
// Workloads (one-layer LSTMs have input size = hidden size in W1):
//   W1  streaming: one time step per call, the state carried, batch 1,
//       1-layer LSTM, H in {64, 256, 1024}: the latency of one step from a
//       host input to a host output (ferry_step; PyTorch: lstm(x_t, (h, c))
//       with x_t copied in and y_t copied out; onnxruntime: one run with
//       the state as inputs and outputs).
//   W2  2-layer LSTM, input 32, hidden 256, batch 1, T = 512, whole sequence.
//   W3  1-layer LSTM, input 64, hidden 256, batch 64, T = 128, whole sequence.
// Each number is the median wall-clock time of one call (a step for W1, a
// sequence for W2/W3) over many calls after a warm-up, host to host, with
// the GPU synchronised at the end of every call on every side.
//
// PyTorch: in process through libtorch when this binary was built with it
// (target ferry_bench_cuda_torch, libtorch with CUDA), else by driving
// tests/bench/bench_torch_cuda.py with `python3` (torch with CUDA; the
// script also runs onnxruntime-gpu when it is installed), else reported as
// not available with the reason. The weights go to the script as .npy files
// in PyTorch's layout (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0,
// ...); ferry gets the same weights through the converter's model writer
// (biases folded). Each side's output on the same input is compared: the
// table's last column is the largest absolute difference from ferry.
//
// PyTorch is timed twice too: eager, and cuDNN's LSTM captured with its
// copies in one CUDA Graph over pinned host buffers (the strongest PyTorch
// on a GPU; "best x" is that time over ferry's better one: above 1, ferry
// is faster).
// ferry's streaming rows are timed twice: launched steps (graph replays)
// and the resident streaming kernel (FERRY_CUDA_STEP=resident_only), whose
// output must equal the launched steps' bit for bit (max_abs_diff_resident).
//
// Prints a table and one JSON object (also written to --json FILE).
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/ferry.h"
#include "writer/model_writer.h"
#include "io/npy.h"

#if defined(FERRY_BENCH_WITH_LIBTORCH)
#include <torch/torch.h>
#endif

#ifndef FERRY_BENCH_SCRIPT
#define FERRY_BENCH_SCRIPT "bench_torch_cuda.py"
#endif

namespace {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return NAN;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double{a[i]} - double{b[i]}));
  return worst;
}

uint64_t splitmix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [-bound, bound), the same on every host.
std::vector<float> seeded(uint64_t seed, size_t n, float bound) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t z = splitmix(seed * 0x9e3779b97f4a7c15ull + i);
    v[i] = bound * (static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f);
  }
  return v;
}

struct Workload {
  std::string name;  // "W1 H=64", ...
  std::string group;  // W1, W2, W3
  uint32_t input, hidden, layers;
  size_t batch, seq;
  bool streaming;
};

std::vector<Workload> workloads() {
  return {
      {"W1 H=64", "W1", 64, 64, 1, 1, 64, true},
      {"W1 H=256", "W1", 256, 256, 1, 1, 64, true},
      {"W1 H=1024", "W1", 1024, 1024, 1, 1, 64, true},
      {"W2", "W2", 32, 256, 2, 1, 512, false},
      {"W3", "W3", 64, 256, 1, 64, 128, false},
  };
}

// PyTorch's parameters of an nn.LSTM, by name, C order.
struct Weights {
  std::vector<std::string> names;
  std::vector<std::vector<uint32_t>> shapes;
  std::vector<std::vector<float>> values;
};

Weights make_weights(const Workload& w) {
  Weights out;
  const float bound = 1.0f / std::sqrt(static_cast<float>(w.hidden));
  uint64_t seed = 1;
  for (uint32_t k = 0; k < w.layers; ++k) {
    const uint32_t in = k == 0 ? w.input : w.hidden;
    const std::string l = std::to_string(k);
    const std::pair<std::string, std::vector<uint32_t>> params[] = {{"weight_ih_l" + l, {4 * w.hidden, in}},
                                                                    {"weight_hh_l" + l, {4 * w.hidden, w.hidden}},
                                                                    {"bias_ih_l" + l, {4 * w.hidden}},
                                                                    {"bias_hh_l" + l, {4 * w.hidden}}};
    for (const auto& p : params) {
      size_t n = 1;
      for (uint32_t d : p.second) n *= d;
      out.names.push_back(p.first);
      out.shapes.push_back(p.second);
      out.values.push_back(seeded(seed++, n, bound));
    }
  }
  return out;
}

// The ferry model of the same LSTM: time-major, sequence output.
std::vector<uint8_t> ferry_model_bytes(const Workload& w, const Weights& weights) {
  using namespace ferry::conv;
  ModelPlan plan;
  plan.input_size = w.input;
  plan.output_size = w.hidden;
  plan.output_is_sequence = true;
  plan.source_file = "ferry_bench_cuda";
  plan.source_sha256 = std::string(64, '0');
  plan.source_format = "generated";
  plan.converter_version = "bench";
  const auto add = [&plan](const std::string& name, std::vector<uint32_t> shape, std::vector<float> values) {
    TensorPlan t;
    t.name = name;
    t.shape = std::move(shape);
    auto data = std::make_shared<std::vector<float>>(std::move(values));
    t.fill = [data](float* dst, uint64_t begin, uint64_t count) {
      std::memcpy(dst, data->data() + begin, count * sizeof(float));
    };
    plan.tensors.push_back(std::move(t));
    return static_cast<int>(plan.tensors.size() - 1);
  };
  LayerPlan l;
  l.op = LayerOp::LSTM;
  l.name = "lstm";
  l.input_size = w.input;
  l.output_size = w.hidden;
  l.hidden_size = w.hidden;
  l.num_layers = w.layers;
  for (uint32_t k = 0; k < w.layers; ++k) {
    CellPlan c;
    c.w_ih = add(weights.names[4 * k], weights.shapes[4 * k], weights.values[4 * k]);
    c.w_hh = add(weights.names[4 * k + 1], weights.shapes[4 * k + 1], weights.values[4 * k + 1]);
    std::vector<float> bias = weights.values[4 * k + 2];
    for (size_t i = 0; i < bias.size(); ++i) bias[i] += weights.values[4 * k + 3][i];
    c.bias = add("bias_l" + std::to_string(k), {4 * w.hidden}, std::move(bias));
    l.cells.push_back(c);
  }
  plan.layers.push_back(l);
  return build_model(plan).to_vector();
}

struct Timing {
  double us = NAN;            // median of one call
  std::vector<float> output;  // on the check input
  std::string note;           // why not available, or a detail
};

struct Config {
  bool quick = false, torch = true, ort = true, zero_copy = false;
  int device = 0;
  std::string only, json_path, python = "python3";
};

// Calls per sample: W1 steps, W2/W3 whole sequences.
int calls(const Workload& w, const Config& c) { return w.streaming ? (c.quick ? 300 : 3000) : (c.quick ? 5 : 40); }

// ------------------------------------------------------------------ ferry --

// `resident`: ferry_step through the resident streaming kernel
// (FERRY_CUDA_STEP=resident_only: a session it does not fit is reported,
// never timed with launched steps).
Timing run_ferry(const Workload& w, const std::vector<float>& x, const Config& cfg, size_t* device_bytes,
                 bool resident = false) {
  Timing t;
  const char* old_step = getenv("FERRY_CUDA_STEP");
  const std::string saved = old_step ? old_step : "";
  setenv("FERRY_CUDA_STEP", resident ? "resident_only" : "launch", 1);
  const std::vector<uint8_t> bytes = ferry_model_bytes(w, make_weights(w));
  void* model_mem = aligned_alloc(FERRY_ALIGNMENT, (bytes.size() + 63) / 64 * 64);
  std::memcpy(model_mem, bytes.data(), bytes.size());
  ferry_model* m = nullptr;
  void* arena = nullptr;
  ferry_session* s = nullptr;
  const auto done = [&](const std::string& why) {
    t.note = why;
    if (old_step) setenv("FERRY_CUDA_STEP", saved.c_str(), 1);
    else unsetenv("FERRY_CUDA_STEP");
    ferry_session_release(s);
    free(arena);
    ferry_model_free(m);
    free(model_mem);
    return t;
  };
  if (ferry_model_load(model_mem, bytes.size(), nullptr, &m) != FERRY_OK) return done(ferry_last_error());
  ferry_session_options o;
  ferry_session_options_init(&o);
  o.backend = FERRY_BACKEND_CUDA;
  o.max_batch = w.batch;
  o.max_seq = w.streaming ? 1 : w.seq;
  o.device = cfg.device;
  if (cfg.zero_copy) o.device_io = FERRY_DEVICE_IO_ZERO_COPY;
  size_t host = 0;
  if (ferry_session_memory(m, &o, &host, device_bytes) != FERRY_OK) return done(ferry_last_error());
  arena = aligned_alloc(FERRY_ALIGNMENT, (host + 63) / 64 * 64);
  if (ferry_session_init(m, &o, arena, host, &s) != FERRY_OK) return done(ferry_last_error());
  const size_t I = w.input, H = w.hidden, B = w.batch, T = w.seq;
  std::vector<float> y(T * B * H);
  // The check output (the whole sequence, step by step for W1).
  if (w.streaming) {
    for (size_t i = 0; i < T; ++i) {
      if (ferry_step(s, &x[i * B * I], B, &y[i * B * H], B * H) != FERRY_OK) return done(ferry_last_error());
    }
  } else if (ferry_run(s, x.data(), B, T, nullptr, y.data(), y.size()) != FERRY_OK) {
    return done(ferry_last_error());
  }
  t.output = y;
  // Timed calls.
  std::vector<double> us;
  const int n = calls(w, cfg), warm = w.streaming ? 100 : 3;
  for (int i = -warm; i < n; ++i) {
    if (!w.streaming) ferry_state_reset(s);  // a stream carries its state
    const auto t0 = clock_type::now();
    const ferry_status st = w.streaming ? ferry_step(s, &x[(static_cast<size_t>(i + warm) % T) * B * I], B, y.data(), B * H)
                                        : ferry_run(s, x.data(), B, T, nullptr, y.data(), y.size());
    const auto t1 = clock_type::now();
    if (st != FERRY_OK) return done(ferry_last_error());
    if (i >= 0) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  t.us = median(us);
  return done("");
}

// ---------------------------------------------------------------- PyTorch --

#if defined(FERRY_BENCH_WITH_LIBTORCH)
Timing run_libtorch(const Workload& w, const std::vector<float>& x, const Config& cfg) {
  Timing t;
  if (!torch::cuda::is_available()) {
    t.note = "libtorch without CUDA (or no GPU it can use)";
    return t;
  }
  torch::NoGradGuard no_grad;
  const torch::Device dev(torch::kCUDA, static_cast<c10::DeviceIndex>(cfg.device));
  torch::nn::LSTM lstm(torch::nn::LSTMOptions(w.input, w.hidden).num_layers(w.layers));
  const Weights weights = make_weights(w);
  auto params = lstm->named_parameters();
  for (size_t i = 0; i < weights.names.size(); ++i) {
    std::vector<int64_t> shape(weights.shapes[i].begin(), weights.shapes[i].end());
    params[weights.names[i]].copy_(torch::from_blob(const_cast<float*>(weights.values[i].data()), shape).clone());
  }
  lstm->to(dev);
  const int64_t I = w.input, H = w.hidden, B = static_cast<int64_t>(w.batch), T = static_cast<int64_t>(w.seq);
  const torch::Tensor xs = torch::from_blob(const_cast<float*>(x.data()), {T, B, I}).clone();
  const auto zeros = [&] {
    return std::make_tuple(torch::zeros({static_cast<int64_t>(w.layers), B, H}, dev),
                           torch::zeros({static_cast<int64_t>(w.layers), B, H}, dev));
  };
  // Check output.
  torch::Tensor y;
  if (w.streaming) {
    auto hc = zeros();
    std::vector<torch::Tensor> ys;
    for (int64_t i = 0; i < T; ++i) {
      auto r = lstm->forward(xs.slice(0, i, i + 1).to(dev), hc);
      hc = std::get<1>(r);
      ys.push_back(std::get<0>(r).to(torch::kCPU));
    }
    y = torch::cat(ys, 0);
  } else {
    y = std::get<0>(lstm->forward(xs.to(dev), zeros())).to(torch::kCPU).contiguous();
  }
  t.output.assign(y.data_ptr<float>(), y.data_ptr<float>() + y.numel());
  std::vector<double> us;
  const int n = calls(w, cfg), warm = w.streaming ? 100 : 3;
  auto hc = zeros();
  for (int i = -warm; i < n; ++i) {
    const auto t0 = clock_type::now();
    if (w.streaming) {
      auto r = lstm->forward(xs.slice(0, (i + warm) % T, (i + warm) % T + 1).to(dev), hc);
      hc = std::get<1>(r);
      std::get<0>(r).to(torch::kCPU);
    } else {
      std::get<0>(lstm->forward(xs.to(dev), zeros())).to(torch::kCPU);
    }
    const auto t1 = clock_type::now();
    if (i >= 0) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  t.us = median(us);
  t.note = "libtorch (in process)";
  return t;
}
#endif

// Runs bench_torch_cuda.py on the workload: PyTorch's cuDNN LSTM and
// onnxruntime's CUDA provider. Fills what it could measure.
void run_python(const Workload& w, const std::vector<float>& x, const Config& cfg, Timing* torch_t, Timing* ort_t,
                Timing* graph_t) {
  char dir_template[] = "/tmp/ferry_bench_cuda.XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) {
    torch_t->note = ort_t->note = graph_t->note = "cannot make a temporary folder";
    return;
  }
  const std::string d = dir;
  const Weights weights = make_weights(w);
  for (size_t i = 0; i < weights.names.size(); ++i) {
    ferry::conv::NpyArray a;
    a.shape.assign(weights.shapes[i].begin(), weights.shapes[i].end());
    a.data = weights.values[i];
    ferry::conv::write_npy(d + "/" + weights.names[i] + ".npy", a);
  }
  ferry::conv::NpyArray xa;
  xa.shape = {w.seq, w.batch, w.input};
  xa.data = x;
  ferry::conv::write_npy(d + "/x.npy", xa);
  std::ostringstream cmd;
  cmd << cfg.python << " '" << FERRY_BENCH_SCRIPT << "' --dir '" << d << "' --input " << w.input << " --hidden "
      << w.hidden << " --layers " << w.layers << " --batch " << w.batch << " --seq " << w.seq << " --calls "
      << calls(w, cfg) << " --device " << cfg.device << (w.streaming ? " --streaming" : "")
      << (cfg.torch ? "" : " --no-torch") << (cfg.ort ? "" : " --no-ort") << " 2>" << d << "/stderr.txt";
  std::string out;
  if (FILE* p = popen(cmd.str().c_str(), "r")) {
    char buf[4096];
    size_t n = 0;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    const int rc = pclose(p);
    if (rc != 0 && out.find('{') == std::string::npos) {
      std::ifstream err(d + "/stderr.txt");
      std::stringstream e;
      e << err.rdbuf();
      std::string text = e.str();
      if (text.size() > 300) text = text.substr(text.size() - 300);
      torch_t->note = ort_t->note = graph_t->note = cfg.python + " " + FERRY_BENCH_SCRIPT + " failed: " + text;
    }
  } else {
    torch_t->note = ort_t->note = graph_t->note = "cannot run " + cfg.python;
  }
  const size_t brace = out.rfind("\n{") == std::string::npos ? out.find('{') : out.rfind("\n{") + 1;
  if (brace != std::string::npos) {
    try {
      const json r = json::parse(out.substr(brace));
      const auto take = [&](const char* key, Timing* t, const char* npy) {
        const json& e = r.value(key, json::object());
        if (e.contains("us") && e["us"].is_number()) t->us = e["us"].get<double>();
        t->note = e.value("note", std::string());
        if (access((d + "/" + npy).c_str(), R_OK) == 0) t->output = ferry::conv::read_npy(d + "/" + npy).data;
      };
      take("torch", torch_t, "y_torch.npy");
      take("torch_graph", graph_t, "y_torch_graph.npy");
      take("ort", ort_t, "y_ort.npy");
    } catch (const std::exception& e) {
      torch_t->note = ort_t->note = graph_t->note = std::string("unreadable output of the script: ") + e.what();
    }
  }
  const std::string cleanup = "rm -rf '" + d + "'";
  if (system(cleanup.c_str()) != 0) fprintf(stderr, "ferry_bench_cuda: could not remove %s\n", d.c_str());
}

std::string fmt(double us) {
  if (std::isnan(us)) return "n/a";
  char b[32];
  snprintf(b, sizeof(b), "%.1f", us);
  return b;
}

json number_or_null(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      cfg.quick = true;
    } else if (a == "--only" && i + 1 < argc) {
      cfg.only = argv[++i];
    } else if (a == "--json" && i + 1 < argc) {
      cfg.json_path = argv[++i];
    } else if (a == "--device" && i + 1 < argc) {
      cfg.device = atoi(argv[++i]);
    } else if (a == "--python" && i + 1 < argc) {
      cfg.python = argv[++i];
    } else if (a == "--no-torch") {
      cfg.torch = false;
    } else if (a == "--no-ort") {
      cfg.ort = false;
    } else if (a == "--zero-copy") {
      cfg.zero_copy = true;
    } else {
      fprintf(stderr,
              "usage: ferry_bench_cuda [--quick] [--only W1|W2|W3] [--json FILE] [--device N] [--python PY] "
              "[--no-torch] [--no-ort] [--zero-copy]\n");
      return 2;
    }
  }
  json report;
  report["benchmark"] = "ferry_bench_cuda";
  report["ferry"] = ferry_version();
  report["quick"] = cfg.quick;
  report["zero_copy"] = cfg.zero_copy;
#if defined(FERRY_BENCH_WITH_LIBTORCH)
  report["torch_path"] = "libtorch";
#else
  report["torch_path"] = "python";
#endif
  json rows = json::array();
  printf("%-10s %10s %11s %11s %9s %10s %10s %11s %11s  %s\n", "workload", "ferry us", "resident us", "cuDNN graph",
         "best x", "eager us", "onnxrt us", "|f-graph|", "|f-resid|", "notes");
  for (const Workload& w : workloads()) {
    if (!cfg.only.empty() && cfg.only != w.group) continue;
    const std::vector<float> x = seeded(1000 + w.hidden, w.seq * w.batch * w.input, 1.0f);
    size_t device_bytes = 0;
    const Timing f = run_ferry(w, x, cfg, &device_bytes);
    Timing r;  // the resident streaming kernel, for the streaming workloads
    size_t resident_bytes = 0;
    if (w.streaming) r = run_ferry(w, x, cfg, &resident_bytes, true);
    Timing t, o, g;
    t.note = g.note = cfg.torch ? "" : "--no-torch";
    o.note = cfg.ort ? "" : "--no-ort";
#if defined(FERRY_BENCH_WITH_LIBTORCH)
    if (cfg.torch) t = run_libtorch(w, x, cfg);
    if (cfg.torch && std::isnan(t.us)) {
      const std::string why = t.note;
      run_python(w, x, cfg, &t, &o, &g);
      if (std::isnan(t.us)) t.note = why + "; " + t.note;
    } else if (cfg.torch || cfg.ort) {  // the CUDA Graph side (and onnxruntime) from the script
      Timing dummy;
      run_python(w, x, cfg, &dummy, &o, &g);
    }
#else
    if (cfg.torch || cfg.ort) run_python(w, x, cfg, &t, &o, &g);
#endif
    const double dt = max_abs_diff(f.output, t.output), dor = max_abs_diff(f.output, o.output);
    std::string notes;
    const double dr = w.streaming ? max_abs_diff(f.output, r.output) : NAN, dg = max_abs_diff(f.output, g.output);
    // ferry's best (launched or resident) against cuDNN in a CUDA Graph: > 1 is ferry faster.
    const double best = std::isnan(r.us) ? f.us : std::isnan(f.us) ? r.us : std::min(f.us, r.us);
    const double ratio = g.us / best;
    for (const auto& [who, note] : {std::pair<const char*, std::string>{"ferry", f.note}, {"resident", r.note},
                                    {"graph", g.note}, {"torch", t.note}, {"ort", o.note}}) {
      if (!note.empty()) notes += std::string(notes.empty() ? "" : "; ") + who + ": " + note;
    }
    char times_text[16] = "n/a";
    if (!std::isnan(ratio)) snprintf(times_text, sizeof(times_text), "%.2fx", ratio);
    printf("%-10s %10s %11s %11s %9s %10s %10s %11.2e %11.2e  %s\n", w.name.c_str(), fmt(f.us).c_str(),
           fmt(r.us).c_str(), fmt(g.us).c_str(), times_text, fmt(t.us).c_str(), fmt(o.us).c_str(), dg, dr,
           notes.c_str());
    fflush(stdout);
    rows.push_back({{"workload", w.name},
                    {"input", w.input},
                    {"hidden", w.hidden},
                    {"layers", w.layers},
                    {"batch", w.batch},
                    {"seq", w.seq},
                    {"streaming", w.streaming},
                    {"unit", w.streaming ? "us per step" : "us per sequence"},
                    {"ferry_us", number_or_null(f.us)},
                    {"ferry_device_bytes", device_bytes},
                    {"ferry_resident_us", number_or_null(r.us)},
                    {"ferry_resident_device_bytes", resident_bytes},
                    {"max_abs_diff_resident", number_or_null(dr)},
                    {"resident_note", r.note},
                    {"torch_graph_us", number_or_null(g.us)},
                    {"graph_over_ferry_best", number_or_null(ratio)},
                    {"max_abs_diff_torch_graph", number_or_null(dg)},
                    {"torch_graph_note", g.note},
                    {"torch_us", number_or_null(t.us)},
                    {"ort_us", number_or_null(o.us)},
                    {"max_abs_diff_torch", number_or_null(dt)},
                    {"max_abs_diff_ort", number_or_null(dor)},
                    {"ferry_note", f.note},
                    {"torch_note", t.note},
                    {"ort_note", o.note}});
  }
  report["results"] = rows;
  const std::string text = report.dump(2);
  printf("%s\n", text.c_str());
  if (!cfg.json_path.empty()) {
    std::ofstream f(cfg.json_path);
    f << text << "\n";
  }
  return 0;
}
