// ferry against libtorch, side by side in one process (issue 4's benchmark).
//
//   ferry_bench_torch [--quick] [--json FILE] [--only W1|W2|W3|W4] [--backend auto|simd|xnnpack|reference]
//
// For each workload a PyTorch module is made by libtorch (seeded), saved
// with torch::pickle_save (torch.save's format), converted by ferry's own
// converter in process, and both run single-threaded on identical inputs:
//   W1  streaming, batch 1, one time step per call with the state carried:
//       LSTM input = hidden = H for H in {16, 64, 256, 1024}; GRU for H in
//       {16, 64, 256}. libtorch: module->forward on [1, 1, H] with (h, c).
//   W2  2-layer LSTM, input 32, hidden 256, batch 1, T = 512, whole sequence;
//       again on 2 threads (ferry: a pool of 2, whose run is a wavefront over
//       the two layers; libtorch: at::set_num_threads(2), OpenBLAS 2 threads),
//       timed by the wall clock (a thread's CPU time would count one of them).
//   W3  1-layer LSTM, input 64, hidden 256, batch 64, T = 128, whole sequence.
//   W4  a CRNN keyword spotter (issue 12): 40 mel features -> causal
//       Conv1d(40, 64, k3) -> BatchNorm1d -> ReLU -> causal Conv1d(64, 64, k3)
//       -> BatchNorm1d -> ReLU -> GRU(64) -> Linear(12) on every frame; ferry
//       folds the norms into the convs at conversion. Two rows, batch 1:
//       streamed (ferry_step per frame; libtorch, the fastest honest way per
//       frame: the last k-1 frames of each conv's input kept, conv1d over the
//       k-frame window, at::gru_cell, linear, BatchNorm folded into the conv
//       weights as ferry does) and whole sequence T = 100 (ferry_run;
//       libtorch: left pad + conv1d over the sequence, twice, the GRU module,
//       linear). Both libtorch paths are checked against the unfolded module.
// Outputs are compared (max abs difference), then timed in alternating
// rounds (5 ferry samples, 5 libtorch samples, 5 memory-ceiling samples,
// ...) so that all three see the same machine state; medians of the thread's
// CPU time are reported (equal to the wall clock on an idle machine; on a
// shared one they leave out the time other processes held the core), the
// wall-clock medians beside them. The machine's ceilings are measured in the
// same run, the same way:
//   FMA peak     12 independent FMA chains, single core, at the widest
//                vector ferry's kernels use here (AVX-512 where the CPU has
//                it: the batched GEMM uses it; else AVX2+FMA);
//   stream       a plain read loop over a buffer of the step's weight bytes
//                (per step of a whole sequence: each layer's W_hh), as many
//                passes per sample as ferry's sample has steps.
// "fraction of ceiling" = max(time at FMA peak, stream time) / measured time.
//
// libtorch: at::set_num_threads(1), torch::NoGradGuard; OpenBLAS (the BLAS
// libtorch uses for these GEMMs) limited to one thread too. The BLAS actually
// loaded is read from /proc/self/maps.
#include <dlfcn.h>
#include <unistd.h>
#include <time.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "convert.h"
#include "error.h"
#include "ferry/ferry.h"
#include "fma_peak.h"
#include "read_pass.h"

namespace {

using clock_type = std::chrono::steady_clock;

double now_us() {
  return std::chrono::duration<double, std::micro>(clock_type::now().time_since_epoch()).count();
}

// CPU time of this thread: what the timings report. On an idle machine it
// equals the wall clock; on a shared one it leaves out the time other
// processes held the core (the wall clock is printed beside it).
double cpu_us() { return ferry_bench::thread_cpu_seconds() * 1e6; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// ------------------------------------------------------------ the machine --

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

// The BLAS shared objects actually mapped into this process.
std::string loaded_blas() {
  std::ifstream f("/proc/self/maps");
  std::string line, out;
  while (std::getline(f, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if ((path.find("blas") != std::string::npos || path.find("mkl") != std::string::npos) &&
        out.find(path) == std::string::npos) {
      out += (out.empty() ? "" : ", ") + path;
    }
  }
  return out.empty() ? "none mapped" : out;
}

// OpenBLAS's thread count, where its symbols are found.
void set_openblas_threads(int n) {
  using set_fn = void (*)(int);
  auto set = reinterpret_cast<set_fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set) set(n);
}

// OpenBLAS keeps its own thread pool: one thread, like at::set_num_threads.
std::string limit_openblas_threads() {
  using set_fn = void (*)(int);
  using get_fn = int (*)();
  using config_fn = char* (*)();
  auto set = reinterpret_cast<set_fn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<get_fn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  auto config = reinterpret_cast<config_fn>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  if (!set) return "OpenBLAS symbols not found";
  set(1);
  std::string s = "OpenBLAS";
  if (config) s += std::string(" (") + config() + ")";
  if (get) s += ", " + std::to_string(get()) + " thread";
  return s;
}

// OpenBLAS 0.3.21 (Debian 12's) does not know the newest Intel cores (this
// session's Xeon, CPUID family 6 model 207): its DYNAMIC_ARCH build falls
// back to Prescott's SSE3 kernels, and libtorch's W2 took 148-167 ms there
// against 29-47 ms on its SkylakeX kernels (`--only W2`, OPENBLAS_CORETYPE
// set by hand; Haswell's kernels were no faster than Prescott's here). The
// baseline should run at its best: on a CPU with AVX-512 whose OpenBLAS
// picked a core without it, the benchmark runs itself again with
// OPENBLAS_CORETYPE=SkylakeX, which OpenBLAS reads when it loads. A
// caller's own OPENBLAS_CORETYPE is left alone; the BLAS line says which
// core ran.
bool is_avx512_openblas_core(std::string core) {
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* name : {"skylakex", "cooperlake", "sapphirerapids"})
    if (core == name) return true;
  return false;
}

void run_openblas_at_its_best(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE")) return;
  using name_fn = char* (*)();
  auto corename = reinterpret_cast<name_fn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!corename) return;
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || is_avx512_openblas_core(corename())) return;
  std::fprintf(stderr,
               "ferry_bench_torch: OpenBLAS chose %s on an AVX-512 CPU: running again with "
               "OPENBLAS_CORETYPE=SkylakeX\n",
               corename());
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  execv("/proc/self/exe", argv);
  std::perror("ferry_bench_torch: execv /proc/self/exe (going on with OpenBLAS's own choice)");
}

volatile float g_sink;

using ferry_bench::fma_peak;
using ferry_bench::read_loop;

// A buffer of a weight matrix's size, read whole by `pass()`: the memory
// ceiling of a workload, sampled in the same rounds as ferry and libtorch so
// that it sees the same cache state (after a libtorch sample, a large
// buffer is partly out of the caches for its first pass, as ferry's weights
// are for its first step).
struct StreamBuffer {
  size_t n = 0;
  float* p = nullptr;
  explicit StreamBuffer(size_t bytes) : n((bytes / sizeof(float) + 31) / 32 * 32) {
    p = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
    for (size_t i = 0; i < n; ++i) p[i] = 1e-3f;
  }
  ~StreamBuffer() { std::free(p); }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  void pass() {
    g_sink = read_loop(p, n);
  }
};

// ----------------------------------------------------------- the models --

struct Workload {
  std::string name;     // "W1 LSTM H=16"
  bool gru = false;
  int64_t input = 0, hidden = 0, layers = 1;
  int64_t batch = 1, seq = 1;
  int threads = 1;      // > 1: both on that many threads, timed by the wall clock
  bool stream = false;  // per-step timing
  bool crnn = false;    // W4: the CRNN keyword spotter (run_crnn), not a plain LSTM/GRU
  double target_us = 0;         // the absolute target (Zen3 machine), 0 = none
  double target_ratio = 0;      // required libtorch / ferry, 0 = none
  double bandwidth_factor = 0;  // "within x of the bandwidth bound", 0 = none
};

// The module's state_dict as torch.save writes it, converted by ferry.
std::vector<uint8_t> convert_with_ferry(torch::nn::Module& module, const std::string& name, bool gru,
                                        const std::string& dir) {
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  for (const auto& p : module.named_parameters()) dict.insert(name + "." + p.key(), p.value().detach().contiguous());
  const std::vector<char> bytes = torch::pickle_save(dict);
  const std::string path = dir + "/" + name + ".pt";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ferry::conv::ConvertRequest request;
  request.input = path;
  request.graph = name;
  request.batch_first = false;
  request.selftest = ferry::conv::SelfTestPolicy::Never;
  (void)gru;
  const std::vector<uint8_t> out = ferry::conv::convert(request).bytes.to_vector();
  std::remove(path.c_str());
  return out;
}

struct FerryRunner {
  std::vector<uint8_t> storage;
  uint8_t* bytes = nullptr;
  ferry_model* model = nullptr;
  void* arena = nullptr;
  ferry_session* session = nullptr;
  size_t arena_bytes = 0;

  void* pool = nullptr;

  FerryRunner(const std::vector<uint8_t>& file, ferry_backend backend, size_t batch, size_t seq, int threads = 1) {
    storage.resize(file.size() + 64);
    bytes = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
    std::memcpy(bytes, file.data(), file.size());
    check(ferry_model_load(bytes, file.size(), nullptr, &model));
    ferry_session_options o;
    ferry_session_options_init(&o);
    o.backend = backend;
    o.max_batch = batch;
    o.max_seq = seq;
    if (threads > 1) {
      pool = ferry_threadpool_create(static_cast<size_t>(threads));
      if (!pool) {
        std::fprintf(stderr, "ferry_bench_torch: no thread pool in this build\n");
        std::exit(1);
      }
      o.threadpool = pool;
    }
    check(ferry_session_arena_size(model, &o, &arena_bytes));
    arena = std::aligned_alloc(64, (arena_bytes + 63) / 64 * 64);
    check(ferry_session_init(model, &o, arena, arena_bytes, &session));
  }
  ~FerryRunner() {
    std::free(arena);
    ferry_model_free(model);
    if (pool) ferry_threadpool_destroy(pool);
  }
  static void check(ferry_status s) {
    if (s != FERRY_OK) {
      std::fprintf(stderr, "ferry_bench_torch: ferry: %s\n", ferry_last_error());
      std::exit(1);
    }
  }
};

struct Result {
  Workload w;
  double ferry_us = 0, torch_us = 0;            // CPU time per step (W1) or per run
  double ferry_wall_us = 0, torch_wall_us = 0;  // the same, wall clock
  double max_abs_diff = 0;
  double macs = 0;            // per timed unit
  double compute_bound_us = 0, stream_bound_us = 0;
  size_t rounds = 0;
};

struct Options {
  bool quick = false;
  std::string only;
  ferry_backend backend = FERRY_BACKEND_AUTO;
  std::string backend_name = "auto";
  std::string json;
  double seconds = 2.0;  // per workload, both frameworks together
};

// Alternating blocks of samples (ferry, libtorch, memory ceiling) until the
// time budget is spent, medians per unit (per step when streaming, else per run).
void time_alternating(Result& r, const Options& opt, double units, const std::function<void()>& reset,
                      const std::function<void()>& ferry_sample, const std::function<void()>& torch_sample,
                      const std::function<void()>& stream_sample) {
  std::vector<double> tf, tt, ts, wf, wt;
  const double budget_us = (opt.quick ? 0.25 : 1.0) * opt.seconds * 1e6;
  const double start = now_us();
  const size_t min_rounds = opt.quick ? 1 : 3;
  // Each round times a block of samples of each, so that what one leaves
  // behind (caches, the core's AVX-512 clock license after OpenBLAS) weighs
  // on the first sample of the next block only, which the median discards.
  constexpr int kBlock = 5;
  while (tf.size() < min_rounds * kBlock || (now_us() - start < budget_us && tf.size() < 20000)) {
    for (int b = 0; b < kBlock; ++b) {
      reset();
      const double w0 = now_us(), t0 = cpu_us();
      ferry_sample();
      tf.push_back(cpu_us() - t0);
      wf.push_back(now_us() - w0);
    }
    for (int b = 0; b < kBlock; ++b) {
      reset();
      const double w0 = now_us(), t0 = cpu_us();
      torch_sample();
      tt.push_back(cpu_us() - t0);
      wt.push_back(now_us() - w0);
    }
    for (int b = 0; b < kBlock; ++b) {
      const double t0 = cpu_us();
      stream_sample();
      ts.push_back(cpu_us() - t0);
    }
  }
  r.rounds = tf.size();
  r.ferry_us = median(tf) / units;
  r.torch_us = median(tt) / units;
  r.ferry_wall_us = median(wf) / units;
  r.torch_wall_us = median(wt) / units;
  r.stream_bound_us = median(ts) / units;
}

Result run_workload(const Workload& w, const Options& opt, double peak_macs_per_s, const std::string& dir) {
  Result r;
  r.w = w;
  torch::manual_seed(1234);
  std::shared_ptr<torch::nn::Module> module;
  torch::nn::LSTM lstm{nullptr};
  torch::nn::GRU gru{nullptr};
  if (w.gru) {
    gru = torch::nn::GRU(torch::nn::GRUOptions(w.input, w.hidden).num_layers(w.layers));
    module = gru.ptr();
  } else {
    lstm = torch::nn::LSTM(torch::nn::LSTMOptions(w.input, w.hidden).num_layers(w.layers));
    module = lstm.ptr();
  }
  module->eval();
  const std::vector<uint8_t> file = convert_with_ferry(*module, w.gru ? "gru" : "lstm", w.gru, dir);
  FerryRunner fr(file, opt.backend, w.batch, w.stream ? 1 : w.seq, w.threads);
  at::set_num_threads(w.threads);
  set_openblas_threads(w.threads);

  // Inputs: [T, B, I] time-major, the same floats for both.
  const int64_t T = w.stream ? 64 : w.seq;
  torch::Tensor x = torch::rand({T, w.batch, w.input}) * 2 - 1;
  x = x.contiguous();
  const float* xp = x.data_ptr<float>();
  const size_t H = static_cast<size_t>(w.hidden);
  std::vector<float> y_ferry(static_cast<size_t>(T * w.batch) * H);

  // libtorch state for streaming.
  torch::Tensor h0 = torch::zeros({w.layers, w.batch, w.hidden}), c0 = torch::zeros({w.layers, w.batch, w.hidden});
  torch::Tensor h = h0, c = c0;

  // One timed unit each: W1 = `reps` times the T steps (reported per step;
  // enough steps that a sample lasts well above the clock's resolution),
  // W2/W3 = one run.
  const int reps = w.stream && w.hidden <= 64 ? 16 : 1;
  const auto ferry_sample = [&] {
    if (w.stream) {
      for (int rep = 0; rep < reps; ++rep)
      for (int64_t t = 0; t < T; ++t) {
        ferry_step(fr.session, xp + t * w.batch * w.input, static_cast<size_t>(w.batch),
                   y_ferry.data() + static_cast<size_t>(t * w.batch) * H, H * static_cast<size_t>(w.batch));
      }
    } else {
      ferry_run(fr.session, xp, static_cast<size_t>(w.batch), static_cast<size_t>(T), nullptr, y_ferry.data(),
                y_ferry.size());
    }
  };
  // The step inputs as [1, B, I] views, made once (not timed).
  std::vector<torch::Tensor> steps;
  for (int64_t t = 0; t < T; ++t) steps.push_back(x[t].unsqueeze(0));
  std::vector<torch::Tensor> outs(static_cast<size_t>(T));
  torch::Tensor y_torch;
  const auto torch_sample = [&] {
    if (w.stream) {
      for (int rep = 0; rep < reps; ++rep)
      for (int64_t t = 0; t < T; ++t) {
        if (w.gru) {
          auto out = gru->forward(steps[static_cast<size_t>(t)], h);
          h = std::get<1>(out);
          outs[static_cast<size_t>(t)] = std::get<0>(out);
        } else {
          auto out = lstm->forward(steps[static_cast<size_t>(t)], std::make_tuple(h, c));
          h = std::get<0>(std::get<1>(out));
          c = std::get<1>(std::get<1>(out));
          outs[static_cast<size_t>(t)] = std::get<0>(out);
        }
      }
    } else {
      y_torch = w.gru ? std::get<0>(gru->forward(x)) : std::get<0>(lstm->forward(x));
    }
  };
  const auto reset = [&] {
    ferry_state_reset(fr.session);
    h = h0;
    c = c0;
  };

  // Agreement, from the zero state.
  reset();
  ferry_sample();
  torch_sample();
  if (w.stream) y_torch = torch::cat(outs, 0);
  const torch::Tensor yt = y_torch.contiguous();
  const float* yp = yt.data_ptr<float>();
  for (size_t i = 0; i < y_ferry.size(); ++i) {
    const double e = std::fabs(double{y_ferry[i]} - double{yp[i]});
    if (!(e <= r.max_abs_diff)) r.max_abs_diff = e;
  }

  // The memory ceiling: the bytes each step reads. Streaming reads all its
  // weights every step; a whole sequence, layer after layer, reads each
  // layer's W_hh once per step (W_ih once per chunk of steps, not counted).
  const double g = w.gru ? 3 : 4;
  const double units_padded = std::ceil(w.hidden / 8.0) * 8;
  std::vector<std::unique_ptr<StreamBuffer>> streams;
  if (w.stream) {
    const double bytes = 4.0 * g * units_padded * (w.input + w.hidden + 1) + (w.gru ? 4.0 * units_padded : 0);
    streams.emplace_back(new StreamBuffer(static_cast<size_t>(bytes)));
  } else {
    for (int64_t k = 0; k < w.layers; ++k) {
      streams.emplace_back(new StreamBuffer(static_cast<size_t>(4.0 * g * units_padded * w.hidden)));
    }
  }
  const auto stream_sample = [&] {  // as many passes as ferry's sample has steps
    for (auto& b : streams)
      for (int64_t t = 0; t < T * reps; ++t) b->pass();
  };

  const double units = w.stream ? static_cast<double>(T * reps) : 1.0;
  time_alternating(r, opt, units, reset, ferry_sample, torch_sample, stream_sample);
  at::set_num_threads(1);
  set_openblas_threads(1);
  if (w.threads > 1) {
    // Several threads: the wall clock. The ceilings per core: each core
    // streams the W_hh of its own layers (ferry's wavefront gives each
    // thread a layer) and has its own FMA units.
    r.ferry_us = r.ferry_wall_us;
    r.torch_us = r.torch_wall_us;
    const int64_t cores = std::min<int64_t>(w.threads, w.layers);
    r.stream_bound_us = r.stream_bound_us / static_cast<double>(cores) *
                        static_cast<double>((w.layers + cores - 1) / cores);
  }

  const double per_step_macs = [&] {
    double m = 0;
    const double g = w.gru ? 3 : 4;
    for (int64_t k = 0; k < w.layers; ++k) m += g * w.hidden * ((k ? w.hidden : w.input) + w.hidden);
    return m * w.batch;
  }();
  r.macs = per_step_macs * (w.stream ? 1 : T);
  r.compute_bound_us = peak_macs_per_s > 0 ? r.macs / (peak_macs_per_s * w.threads) * 1e6 : 0;
  return r;
}

double max_abs_diff(const float* a, const torch::Tensor& b) {
  const torch::Tensor bc = b.contiguous();
  const float* bp = bc.data_ptr<float>();
  double m = 0;
  for (int64_t i = 0; i < bc.numel(); ++i) {
    const double e = std::fabs(double{a[i]} - double{bp[i]});
    if (!(e <= m)) m = e;
  }
  return m;
}

// W4: the CRNN keyword spotter, streamed (w.stream) or over a whole sequence.
Result run_crnn(const Workload& w, const Options& opt, double peak_macs_per_s, const std::string& dir) {
  constexpr int64_t F = 40, C = 64, K = 3, H = 64, O = 12;
  const int64_t T = w.seq;
  Result r;
  r.w = w;
  torch::manual_seed(1234);
  torch::nn::Conv1d conv1(torch::nn::Conv1dOptions(F, C, K)), conv2(torch::nn::Conv1dOptions(C, C, K));
  torch::nn::BatchNorm1d bn1(C), bn2(C);
  torch::nn::GRU gru(torch::nn::GRUOptions(C, H));
  torch::nn::Linear fc(H, O);
  for (torch::nn::BatchNorm1d bn : {bn1, bn2}) {  // running statistics of a trained model
    bn->running_mean.copy_(torch::randn({C}) * 0.2);
    bn->running_var.copy_(torch::rand({C}) + 0.5);
    bn->weight.data().copy_(torch::randn({C}) * 0.1 + 1);
    bn->bias.data().copy_(torch::randn({C}) * 0.1);
    bn->eval();
  }
  gru->eval();

  // The state dict as torch.save writes it (parameters and BatchNorm buffers).
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  const std::vector<std::pair<std::string, torch::nn::Module*>> mods = {
      {"conv1", conv1.get()}, {"bn1", bn1.get()}, {"conv2", conv2.get()},
      {"bn2", bn2.get()},     {"gru", gru.get()}, {"fc", fc.get()}};
  for (const auto& [name, m] : mods) {
    for (const auto& p : m->named_parameters()) dict.insert(name + "." + p.key(), p.value().detach().contiguous());
    for (const auto& b : m->named_buffers()) dict.insert(name + "." + b.key(), b.value().detach().contiguous());
  }
  const std::vector<char> bytes = torch::pickle_save(dict);
  const std::string path = dir + "/crnn.pt";
  {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ferry::conv::ConvertRequest request;
  request.input = path;
  request.graph = "conv1(padding=causal) > bn1 > relu > conv2(padding=causal) > bn2 > relu > gru > fc";
  request.layout = ferry::conv::Layout::kTimeMajor;
  request.selftest = ferry::conv::SelfTestPolicy::Never;
  const std::vector<uint8_t> file = ferry::conv::convert(request).bytes.to_vector();
  std::remove(path.c_str());
  FerryRunner fr(file, opt.backend, 1, w.stream ? 1 : static_cast<size_t>(T));

  // Inputs: the same floats, [T, 1, F] for ferry (time-major) and [1, F, T]
  // for libtorch's conv1d (its native layout, made once, not timed).
  const torch::Tensor x = (torch::rand({T, 1, F}) * 2 - 1).contiguous();
  const torch::Tensor x_bct = x.permute({1, 2, 0}).contiguous();
  const float* xp = x.data_ptr<float>();
  std::vector<float> y_ferry(static_cast<size_t>(T * O));

  // The oracle: the unfolded modules in eval mode, whole sequence.
  const auto pad = [](const torch::Tensor& t) { return torch::constant_pad_nd(t, {K - 1, 0}); };
  const torch::Tensor reference = [&] {
    torch::Tensor a = torch::relu(bn1(conv1(pad(x_bct))));
    a = torch::relu(bn2(conv2(pad(a))));
    return fc(std::get<0>(gru->forward(a.permute({2, 0, 1})))).contiguous();  // [T, 1, O]
  }();

  // BatchNorm folded into the conv weights for libtorch too (as ferry does).
  const auto fold = [](torch::nn::Conv1d& conv, torch::nn::BatchNorm1d& bn) {
    const torch::Tensor scale = bn->weight / torch::sqrt(bn->running_var + bn->options.eps());
    return std::make_pair((conv->weight * scale.view({-1, 1, 1})).contiguous(),
                          ((conv->bias - bn->running_mean) * scale + bn->bias).contiguous());
  };
  const auto [w1, b1] = fold(conv1, bn1);
  const auto [w2, b2] = fold(conv2, bn2);
  const torch::Tensor w_ih = gru->named_parameters()["weight_ih_l0"], w_hh = gru->named_parameters()["weight_hh_l0"],
                      b_ih = gru->named_parameters()["bias_ih_l0"], b_hh = gru->named_parameters()["bias_hh_l0"];

  // Streaming state of libtorch: the last K-1 frames of each conv's input
  // ([1, C, 1] each) and the GRU's h.
  // Two ways per frame, the faster one timed (chosen below): conv1d over the
  // window [1, C_in, K], or addmm of the window flattened frame-major
  // [1, K*C_in] with the kernel as a [K*C_in, C_out] matrix.
  bool conv_as_matmul = false;
  const torch::Tensor m1 = w1.permute({2, 1, 0}).reshape({K * F, C}).contiguous();
  const torch::Tensor m2 = w2.permute({2, 1, 0}).reshape({K * C, C}).contiguous();
  std::vector<torch::Tensor> frames, frames_flat;  // the inputs as [1, F, 1] and [1, F], made once
  for (int64_t t = 0; t < T; ++t) {
    frames.push_back(x_bct.narrow(2, t, 1).contiguous());
    frames_flat.push_back(x[t].contiguous());
  }
  torch::Tensor p1a, p1b, p2a, p2b, h;
  std::vector<torch::Tensor> outs(static_cast<size_t>(T));
  torch::Tensor y_torch;
  const auto reset = [&] {
    ferry_state_reset(fr.session);
    p1a = p1b = conv_as_matmul ? torch::zeros({1, F}) : torch::zeros({1, F, 1});
    p2a = p2b = conv_as_matmul ? torch::zeros({1, C}) : torch::zeros({1, C, 1});
    h = torch::zeros({1, H});
  };
  int reps = 1;  // the agreement check: one pass over the T frames from the zero state
  const std::function<void()> ferry_sample = [&] {
    if (w.stream) {
      for (int rep = 0; rep < reps; ++rep)
        for (int64_t t = 0; t < T; ++t)
          ferry_step(fr.session, xp + t * F, 1, y_ferry.data() + t * O, O);
    } else {
      ferry_run(fr.session, xp, 1, static_cast<size_t>(T), nullptr, y_ferry.data(), y_ferry.size());
    }
  };
  const std::function<void()> torch_sample = [&] {
    if (w.stream) {
      for (int rep = 0; rep < reps; ++rep)
        for (int64_t t = 0; t < T; ++t) {
          const torch::Tensor& xt = (conv_as_matmul ? frames_flat : frames)[static_cast<size_t>(t)];
          torch::Tensor a1, a2;
          if (conv_as_matmul) {  // the window [1, K*C_in] (frame-major) times the kernel as a matrix
            a1 = torch::relu(torch::addmm(b1, torch::cat({p1a, p1b, xt}, 1), m1));
            a2 = torch::relu(torch::addmm(b2, torch::cat({p2a, p2b, a1}, 1), m2));
          } else {
            a1 = torch::relu(torch::conv1d(torch::cat({p1a, p1b, xt}, 2), w1, b1));
            a2 = torch::relu(torch::conv1d(torch::cat({p2a, p2b, a1}, 2), w2, b2));
          }
          p1a = p1b;
          p1b = xt;
          p2a = p2b;
          p2b = a1;
          h = at::gru_cell(a2.view({1, C}), h, w_ih, w_hh, b_ih, b_hh);
          outs[static_cast<size_t>(t)] = torch::linear(h, fc->weight, fc->bias);
        }
    } else {
      torch::Tensor a = torch::relu(torch::conv1d(pad(x_bct), w1, b1));
      a = torch::relu(torch::conv1d(pad(a), w2, b2));
      y_torch = fc(std::get<0>(gru->forward(a.permute({2, 0, 1}))));
    }
  };

  // Agreement, from the zero state: ferry and each libtorch path against
  // each other, and each libtorch path against the unfolded module.
  for (bool matmul : {false, true}) {
    if (matmul && !w.stream) break;
    conv_as_matmul = matmul;
    reset();
    ferry_sample();
    torch_sample();
    if (w.stream) y_torch = torch::stack(outs, 0);  // [T, 1, O]
    r.max_abs_diff = std::max(r.max_abs_diff, max_abs_diff(y_ferry.data(), y_torch));
    const double torch_vs_module = (y_torch - reference).abs().max().item<double>();
    if (!(torch_vs_module <= 1e-4)) {
      std::fprintf(stderr, "ferry_bench_torch: %s: libtorch's path is %g from the module\n", w.name.c_str(),
                   torch_vs_module);
      r.max_abs_diff = std::max(r.max_abs_diff, torch_vs_module);
    }
  }
  if (w.stream) {  // libtorch's faster per-frame path (median of a few passes) is the one timed
    std::vector<double> per[2];
    for (int i = 0; i < 15; ++i)
      for (int m = 0; m < 2; ++m) {
        conv_as_matmul = m == 1;
        reset();
        const double t0 = cpu_us();
        torch_sample();
        per[m].push_back(cpu_us() - t0);
      }
    conv_as_matmul = median(per[1]) < median(per[0]);
    std::fprintf(stderr, "W4 libtorch per frame: conv1d on the window %.1f us, addmm %.1f us: timing %s\n",
                 median(per[0]) / T, median(per[1]) / T, conv_as_matmul ? "addmm" : "conv1d");
  }

  reps = w.stream ? 4 : 1;  // timed: 4 passes per sample, the state carried on

  // Per step: conv1, conv2, the GRU (both products), fc.
  const double macs = static_cast<double>(F * K * C + C * K * C + 3 * H * (C + H) + H * O);
  StreamBuffer weights(static_cast<size_t>(4 * macs));
  const double units = w.stream ? static_cast<double>(T * reps) : 1.0;
  time_alternating(r, opt, units, reset, ferry_sample, torch_sample, [&] {
    for (int64_t i = 0; i < T * reps; ++i) weights.pass();
  });
  r.macs = macs * (w.stream ? 1 : static_cast<double>(T));
  r.compute_bound_us = peak_macs_per_s > 0 ? r.macs / peak_macs_per_s * 1e6 : 0;
  return r;
}

std::string fmt_time(double us) {
  char b[32];
  if (us < 10) std::snprintf(b, sizeof b, "%.3f us", us);
  else if (us < 1000) std::snprintf(b, sizeof b, "%.1f us", us);
  else std::snprintf(b, sizeof b, "%.2f ms", us / 1000);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  run_openblas_at_its_best(argv);
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      opt.quick = true;
    } else if (a == "--only" && i + 1 < argc) {
      opt.only = argv[++i];
    } else if (a == "--json" && i + 1 < argc) {
      opt.json = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      opt.seconds = std::atof(argv[++i]);
    } else if (a == "--backend" && i + 1 < argc) {
      opt.backend_name = argv[++i];
      if (opt.backend_name == "auto") opt.backend = FERRY_BACKEND_AUTO;
      else if (opt.backend_name == "simd") opt.backend = FERRY_BACKEND_SIMD;
      else if (opt.backend_name == "xnnpack") opt.backend = FERRY_BACKEND_XNNPACK;
      else if (opt.backend_name == "reference") opt.backend = FERRY_BACKEND_REFERENCE;
      else {
        std::fprintf(stderr, "ferry_bench_torch: --backend %s: auto, simd, xnnpack or reference\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: ferry_bench_torch [--quick] [--only W1|W2|W3|W4] [--backend B] [--seconds S] [--json FILE]\n");
      return 2;
    }
  }
  at::set_num_threads(1);
  at::set_num_interop_threads(1);
  torch::NoGradGuard no_grad;
  const std::string blas_threads = limit_openblas_threads();
  char dir_template[] = "/tmp/ferry-bench-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) {
    std::perror("mkdtemp");
    return 1;
  }

  std::vector<Workload> all;
  for (int64_t h : {16, 64, 256, 1024}) {
    Workload w;
    w.name = "W1 LSTM H=" + std::to_string(h);
    w.input = w.hidden = h;
    w.stream = true;
    w.target_us = h == 16 ? 0.15 : h == 64 ? 1.5 : h == 256 ? 30 : 0;
    w.target_ratio = h == 16 ? 150 : h == 64 ? 40 : 0;
    w.bandwidth_factor = h == 1024 ? 1.15 : 0;
    all.push_back(w);
  }
  for (int64_t h : {16, 64, 256}) {
    Workload w;
    w.name = "W1 GRU H=" + std::to_string(h);
    w.gru = true;
    w.input = w.hidden = h;
    w.stream = true;
    all.push_back(w);
  }
  {
    Workload w;
    w.name = "W2 LSTM 2x256 T=512";
    w.input = 32, w.hidden = 256, w.layers = 2, w.batch = 1, w.seq = 512;
    w.target_us = 18000;
    w.target_ratio = 8;
    all.push_back(w);
    w.name = "W2 LSTM 2x256 T=512, 2 threads";
    w.threads = 2;
    w.target_us = w.target_ratio = 0;
    all.push_back(w);
  }
  {
    Workload w;
    w.name = "W3 LSTM 256 B=64 T=128";
    w.input = 64, w.hidden = 256, w.layers = 1, w.batch = 64, w.seq = 128;
    w.target_us = 65000;
    w.target_ratio = 1.9;
    all.push_back(w);
  }
  for (bool stream : {true, false}) {  // issue 12: >= 5x per step, no slower on the sequence
    Workload w;
    w.name = stream ? "W4 CRNN KWS" : "W4 CRNN KWS T=100";
    w.crnn = true;
    w.input = 40, w.hidden = 64, w.batch = 1, w.seq = 100;
    w.stream = stream;
    w.target_ratio = stream ? 5 : 1;
    all.push_back(w);
  }

  // The compute ceiling is the widest FMA ferry's kernels use on this CPU:
  // AVX-512 where the CPU has it (ferry's batched GEMM switches to it), else
  // AVX2+FMA.
  const double peak256 = fma_peak(false), peak512 = fma_peak(true);
  const double peak = peak512 > 0 ? peak512 : peak256;
  std::printf("machine   %s, %ld online CPUs\n", cpu_model().c_str(), sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("libtorch  %s, %d intra-op thread, %d inter-op thread, no grad\n", TORCH_VERSION,
              at::get_num_threads(), at::get_num_interop_threads());
  std::printf("BLAS      %s; %s\n", blas_threads.c_str(), loaded_blas().c_str());
  const char* table = "none (reference)";
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    table = __builtin_cpu_supports("avx512f") ? "avx512 (AVX-512 GEMM and LSTM step, AVX2 for the rest)" : "avx2";
  }
#elif defined(__aarch64__)
  table = "neon";
#endif
  std::printf("ferry     %s, backend %s, single thread (rows marked threads: a pool); SIMD table on this CPU: %s\n", ferry_version(),
              opt.backend_name.c_str(), table);
  std::printf("ceiling   FMA peak, 1 core: AVX2+FMA %.1f GFLOP/s", 2 * peak256 / 1e9);
  if (peak512 > 0) std::printf(", AVX-512 %.1f GFLOP/s (the ceiling used: ferry's GEMM runs AVX-512 here)", 2 * peak512 / 1e9);
  char load[64] = "?";
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (!std::fgets(load, sizeof load, f)) load[0] = 0;
    std::fclose(f);
    load[strcspn(load, "\n")] = 0;
  }
  std::printf("\nload      %s (/proc/loadavg: other processes share these cores when > 0)\n\n", load);

  std::vector<Result> results;
  for (const Workload& w : all) {
    if (!opt.only.empty() && w.name.rfind(opt.only, 0) != 0) continue;
    results.push_back(w.crnn ? run_crnn(w, opt, peak, dir) : run_workload(w, opt, peak, dir));
    const Result& r = results.back();
    std::fprintf(stderr, "done      %s (%zu rounds)\n", w.name.c_str(), r.rounds);
  }
  rmdir(dir);

  std::printf("Times: medians of thread CPU time (wall-clock medians in the last column; rows on several threads: "
              "wall clock in every column).\n\n");
  std::printf("| workload | ferry | libtorch | libtorch / ferry | max abs diff | FMA-peak time | weight-stream time | fraction of ceiling | target | wall: ferry / libtorch |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Result& r : results) {
    const double bound = std::max(r.compute_bound_us, r.stream_bound_us);
    std::string target = "-";
    if (r.w.target_us > 0 || r.w.target_ratio > 0 || r.w.bandwidth_factor > 0) {
      target.clear();
      bool met = true;
      if (r.w.target_us > 0) {
        target += "<= " + fmt_time(r.w.target_us);
        met = met && r.ferry_us <= r.w.target_us;
      }
      if (r.w.target_ratio > 0) {
        char b[48];
        std::snprintf(b, sizeof b, "%s>= %.3gx libtorch", target.empty() ? "" : ", ", r.w.target_ratio);
        target += b;
        met = met && r.torch_us / r.ferry_us >= r.w.target_ratio;
      }
      if (r.w.bandwidth_factor > 0) {
        char b[48];
        std::snprintf(b, sizeof b, "%s<= %.2fx stream", target.empty() ? "" : ", ", r.w.bandwidth_factor);
        target += b;
        met = met && r.ferry_us <= r.w.bandwidth_factor * r.stream_bound_us;
      }
      target += met ? ": met" : ": NOT met";
    }
    std::printf("| %s%s | %s | %s | %.1fx | %.1e | %s | %s | %.2f | %s | %s / %s |\n", r.w.name.c_str(),
                r.w.stream ? " (per step)" : "", fmt_time(r.ferry_us).c_str(), fmt_time(r.torch_us).c_str(),
                r.torch_us / r.ferry_us, r.max_abs_diff, fmt_time(r.compute_bound_us).c_str(),
                fmt_time(r.stream_bound_us).c_str(), bound / r.ferry_us, target.c_str(),
                fmt_time(r.ferry_wall_us).c_str(), fmt_time(r.torch_wall_us).c_str());
  }
  int status = 0;
  for (const Result& r : results) {
    // Both must compute the same function: 1e-4 absolute covers float
    // rounding over 512 steps; anything larger is a bug, not noise.
    if (!(r.max_abs_diff <= 1e-4)) {
      std::fprintf(stderr, "ferry_bench_torch: %s: ferry and libtorch disagree by %g\n", r.w.name.c_str(),
                   r.max_abs_diff);
      status = 1;
    }
  }
  if (!opt.json.empty()) {
    std::ofstream f(opt.json);
    char date[16] = "";
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d", std::localtime(&now));
    f << "{\"machine\": \"" << cpu_model() << "\", \"date\": \"" << date << "\", \"fma_peak_gflops\": " << 2 * peak / 1e9
      << ", \"fma_peak_avx2_gflops\": " << 2 * peak256 / 1e9
      << ", \"backend\": \"" << opt.backend_name << "\", \"workloads\": [";
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      f << (i ? ", " : "") << "{\"name\": \"" << r.w.name << "\", \"per_step\": " << (r.w.stream ? "true" : "false")
        << ", \"threads\": " << r.w.threads
        << ", \"ferry_us\": " << r.ferry_us << ", \"torch_us\": " << r.torch_us
        << ", \"ferry_wall_us\": " << r.ferry_wall_us << ", \"torch_wall_us\": " << r.torch_wall_us
        << ", \"max_abs_diff\": " << r.max_abs_diff << ", \"fma_peak_us\": " << r.compute_bound_us
        << ", \"stream_us\": " << r.stream_bound_us << ", \"rounds\": " << r.rounds << "}";
    }
    f << "]}\n";
  }
  return status;
}
