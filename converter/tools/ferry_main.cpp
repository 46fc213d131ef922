// The ferry command-line tool: convert, run, inspect.
//
// Every failure ends as one line `ferry: error: <what>` on stderr and a
// non-zero exit status (2 for usage errors, 1 otherwise); no partial output
// file is ever left behind (writers go through a temporary name + rename).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <future>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "c_array.h"
#include "checkpoint.h"
#include "convert.h"
#include "error.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"
#include "mapped_file.h"
#include "model_writer.h"
#include "modules.h"
#include "npy.h"
#include "selftest_vectors.h"

namespace {

using namespace ferry::conv;

struct UsageError : Error {
  using Error::Error;
};

const char* kUsage =
    "usage:\n"
    "  ferry convert IN.pt OUT.fb [--graph SPEC] [--batch-first] [--key NAME] [--stats] [--selftest]\n"
    "                             [--c-array model_data.h]\n"
    "  ferry run MODEL.fb --input X.npy --output Y.npy [--backend auto|reference|simd|xnnpack]\n"
    "                     [--threads N] [--stream] [--lengths L1,L2,...] [--expect Y.npy [--tolerance 1e-5]]\n"
    "  ferry bench MODEL.fb [--stream] [--batch B] [--seq T] [--backend B] [--threads N]\n"
    "                     [--repeat N] [--json]   (median time of ferry_run / ferry_step)\n"
    "  ferry inspect FILE            (a checkpoint, or a .fb model)\n"
    "  ferry selftest MODEL.fb [--backend B]   (the golden vectors stored in the file)\n"
    "  ferry --version\n"
    "\n"
    "--graph is a chain of module paths and ops, e.g. \"lstm > last > fc\";\n"
    "ops: last, relu, tanh, sigmoid, softmax, identity; an RNN may be written rnn(relu).\n";

// Minimal flag parser: positional arguments and --flag [value].
struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;
  std::set<std::string> flags;

  Args(int argc, char** argv, int first, const std::set<std::string>& valued,
       const std::set<std::string>& boolean) {
    for (int i = first; i < argc; ++i) {
      const std::string a = argv[i];
      if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
        if (valued.count(a)) {
          if (i + 1 >= argc) throw UsageError(a + " needs a value");
          values[a] = argv[++i];
        } else if (boolean.count(a)) {
          flags.insert(a);
        } else {
          throw UsageError("unknown option '" + a + "'");
        }
      } else {
        positional.push_back(a);
      }
    }
  }
  std::optional<std::string> get(const std::string& k) const {
    auto it = values.find(k);
    if (it == values.end()) return std::nullopt;
    return it->second;
  }
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string basename_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string locations_of(const Checkpoint& c) {
  std::set<std::string> locs;
  for (const TensorRef& t : c.tensors)
    if (t.storage) locs.insert(t.storage->location);
  std::string s;
  for (const std::string& l : locs) s += (s.empty() ? "" : ", ") + l;
  return s.empty() ? "none" : s;
}

// ------------------------------------------------------------------ convert

// This process's peak resident set (VmHWM of its own address space; unlike
// getrusage it does not include what a parent held before exec).
std::string peak_rss() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return "unknown";
  char line[256];
  std::string out = "unknown";
  while (std::fgets(line, sizeof line, f)) {
    unsigned long kib = 0;
    if (std::sscanf(line, "VmHWM: %lu kB", &kib) == 1) out = std::to_string(kib / 1024) + " MiB";
  }
  std::fclose(f);
  return out;
}

// A progress bar on stderr while weights are written, only when stderr is a
// terminal and the input is large enough for it to matter.
Progress progress_bar(uint64_t input_bytes) {
  if (input_bytes < (uint64_t{64} << 20) || !isatty(STDERR_FILENO)) return nullptr;
  return [](uint64_t done, uint64_t total) {
    const int width = 40;
    const int filled = total ? static_cast<int>(width * done / total) : width;
    std::fprintf(stderr, "\rferry: writing weights [%s%s] %3d%% (%llu / %llu MB)%s",
                 std::string(filled, '#').c_str(), std::string(width - filled, ' ').c_str(),
                 total ? static_cast<int>(100 * done / total) : 100,
                 static_cast<unsigned long long>(done >> 20), static_cast<unsigned long long>(total >> 20),
                 done >= total ? "\n" : "");
    std::fflush(stderr);
  };
}

int cmd_convert(int argc, char** argv) {
  Args args(argc, argv, 2, {"--graph", "--key", "--quantize", "--calibration", "--c-array"},
            {"--batch-first", "--stats", "--selftest"});
  const auto t0 = std::chrono::steady_clock::now();
  if (args.positional.size() != 2) throw UsageError("convert takes IN and OUT.fb");
  const std::string in = args.positional[0], out = args.positional[1];
  if (auto q = args.get("--quantize"); q && *q != "f32") {
    throw UsageError("--quantize " + *q + " is not available in this version (only f32)");
  }
  MappedFile file(in);
  LoadOptions load;
  load.key = args.get("--key").value_or("");
  const Checkpoint checkpoint = load_checkpoint(file, load);
  const ModuleSet modules = group_modules(checkpoint);
  ConvertOptions options;
  options.graph = args.get("--graph");
  if (args.flags.count("--batch-first")) options.batch_first = true;
  options.key = load.key;
  ConvertResult result = plan_conversion(checkpoint, modules, options, &file);
  ModelPlan& plan = result.plan;
  plan.source_file = basename_of(in);
  // Hash the source beside the weight conversion (second core), joined when
  // the provenance record is written.
  auto sha256 = std::async(std::launch::async, [&file] { return sha256_file(file); });
  plan.source_sha256_async = [&sha256] { return sha256.get(); };
  plan.source_format = checkpoint.form;
  plan.converter_version = std::string("ferry ") + FERRY_VERSION_STRING;

  std::printf("read     %s: %s, %zu tensors, storages on %s\n", in.c_str(), checkpoint.form.c_str(),
              checkpoint.tensors.size(), locations_of(checkpoint).c_str());
  std::printf("graph    %s%s\n", result.graph.c_str(), result.graph_inferred ? "  (inferred)" : "");
  std::printf("layout   %s (%s)\n", plan.batch_first ? "batch-first [B,T,F]" : "time-major [T,B,F]",
              result.batch_first_source.c_str());
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const LayerPlan& l = plan.layers[i];
    const Module* m = modules.find(l.name);
    std::printf("layer %zu  %-10s %s  %u -> %u\n", i, l.name.c_str(), m ? m->describe().c_str() : "",
                l.input_size, l.output_size);
  }
  size_t ignored = 0;
  for (const MappingRow& r : plan.mapping) {
    if (r.layer >= 0) continue;
    if (ignored++ < 8) std::printf("ignored  %s (%s)\n", r.source_key.c_str(), r.role.c_str());
  }
  if (ignored > 8) std::printf("ignored  ... and %zu more (see ferry inspect)\n", ignored - 8);
  for (const std::string& n : result.notes) std::fprintf(stderr, "ferry: note: %s\n", n.c_str());

  // Metadata in memory; weights streamed from the source to the file.
  // Golden vectors (the output is filled in the written file). Computing them
  // runs the whole model once, which for a large host model costs as much
  // time and memory as the conversion itself: above 64 MiB of weights they
  // are stored only when asked for (--selftest).
  uint64_t weight_bytes = 0;
  for (const TensorPlan& t : plan.tensors) weight_bytes += t.numel() * sizeof(float);
  const bool with_selftest = args.flags.count("--selftest") || weight_bytes <= (uint64_t{64} << 20);
  if (with_selftest) {
    plan_selftest(plan);
  } else {
    std::fprintf(stderr, "ferry: note: %llu MiB of weights: self-test vectors not stored (pass --selftest to store them)\n",
                 static_cast<unsigned long long>(weight_bytes >> 20));
  }
  const ModelBytes bytes = build_model(plan, nullptr, /*fill_weights=*/false);
  const int source_fd = ::open(in.c_str(), O_RDONLY | O_CLOEXEC);
  if (source_fd < 0) throw Error("cannot open '" + in + "': " + std::strerror(errno));
  struct Close { int fd; ~Close() { ::close(fd); } } close_source{source_fd};
  if (with_selftest) {
    write_with_selftest(out, [&](const std::string& staging) {
      write_model_file(staging, bytes, plan, source_fd, progress_bar(file.size()));
    });
  } else {
    write_model_file(out, bytes, plan, source_fd, progress_bar(file.size()));
  }
  const auto* model = ferry::fb::GetModel(bytes.data());
  std::printf("wrote    %s: %zu bytes (weights %u bytes), streaming arena (batch 1): %llu bytes\n",
              out.c_str(), bytes.size(), model->weights() ? model->weights()->size() : 0u,
              static_cast<unsigned long long>(model->arena_bytes_stream_b1()));
  if (auto header = args.get("--c-array")) {
    const MappedFile written(out);
    try {
      write_c_array(*header, written.data(), written.size(), basename_of(in) + " (as " + basename_of(out) + ")");
    } catch (const Error&) {
      ::unlink(out.c_str());  // a failing command leaves no output behind
      throw;
    }
    std::printf("wrote    %s: C array '%s', %zu bytes, 64-byte aligned\n", header->c_str(),
                c_array_name(*header).c_str(), written.size());
  }
  if (args.flags.count("--stats")) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("stats    %.3f s, %.0f MB/s of input, peak RSS %s\n", s, file.size() / 1e6 / s,
                peak_rss().c_str());
  }
  return 0;
}

// ---------------------------------------------------------------------- run

struct LoadedModel {
  MappedFile file;
  ferry_model* model = nullptr;
  explicit LoadedModel(const std::string& path) : file(path) {
    if (ferry_model_load(file.data(), file.size(), nullptr, &model) != FERRY_OK) {
      throw Error("'" + path + "': " + ferry_last_error());
    }
  }
  ~LoadedModel() { ferry_model_free(model); }
};

void check(ferry_status st, const std::string& what) {
  if (st != FERRY_OK) throw Error(what + ": " + ferry_last_error());
}

ferry_backend parse_backend(const std::string& b) {
  if (b == "auto") return FERRY_BACKEND_AUTO;
  if (b == "reference") return FERRY_BACKEND_REFERENCE;
  if (b == "simd") return FERRY_BACKEND_SIMD;
  if (b == "xnnpack") return FERRY_BACKEND_XNNPACK;
  if (b == "cuda") return FERRY_BACKEND_CUDA;
  throw UsageError("--backend '" + b + "': expected auto, reference, simd, xnnpack or cuda");
}

// --threads N: a thread pool for the session (none for 1), freed after it.
struct ThreadPool {
  void* pool = nullptr;
  size_t threads = 1;
  explicit ThreadPool(const std::optional<std::string>& text) {
    if (!text) return;
    char* end = nullptr;
    const long n = std::strtol(text->c_str(), &end, 10);
    if (text->empty() || *end != '\0' || n < 1 || n > 1024) {
      throw UsageError("--threads '" + *text + "': expected a number of threads >= 1");
    }
    threads = static_cast<size_t>(n);
    if (threads == 1) return;
    pool = ferry_threadpool_create(threads);
    if (!pool) throw Error("--threads " + *text + ": this ferry was built without pthreadpool");
  }
  ~ThreadPool() { ferry_threadpool_destroy(pool); }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
};

std::vector<int32_t> parse_lengths(const std::string& text) {
  std::vector<int32_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > (1L << 30)) {
      throw UsageError("--lengths: '" + item + "' is not a positive integer");
    }
    out.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void print_output(const NpyArray& y) {
  // Rows of the last axis; long outputs are abbreviated.
  const size_t cols = y.shape.empty() ? 1 : y.shape.back();
  const size_t rows = cols ? y.data.size() / cols : 0;
  std::string shape;
  for (size_t i = 0; i < y.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(y.shape[i]);
  std::printf("output [%s]\n", shape.c_str());
  for (size_t r = 0; r < rows && r < 8; ++r) {
    std::printf("  ");
    for (size_t c = 0; c < cols && c < 10; ++c) std::printf("% .6f ", y.data[r * cols + c]);
    std::printf("%s\n", cols > 10 ? "..." : "");
  }
  if (rows > 8) std::printf("  ... (%zu rows)\n", rows);
}

// A session on a heap arena of exactly ferry_session_arena_size() bytes, for
// the commands that run a model (run, bench).
struct CliSession {
  ferry_session* session = nullptr;
  size_t arena_bytes = 0;
  void* arena = nullptr;

  CliSession(const ferry_model* model, size_t batch, size_t seq, ferry_backend backend, void* threadpool) {
    ferry_session_options opt;
    ferry_session_options_init(&opt);
    opt.max_batch = batch;
    opt.max_seq = seq;
    opt.backend = backend;
    opt.threadpool = threadpool;
    check(ferry_session_arena_size(model, &opt, &arena_bytes), "arena size");
    arena = std::aligned_alloc(FERRY_ALIGNMENT, (arena_bytes + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT);
    if (!arena) throw Error("cannot allocate a " + std::to_string(arena_bytes) + "-byte arena");
    if (ferry_session_init(model, &opt, arena, arena_bytes, &session) != FERRY_OK) {
      std::free(arena);
      throw Error(std::string("session: ") + ferry_last_error());
    }
  }
  ~CliSession() { std::free(arena); }
  CliSession(const CliSession&) = delete;
  CliSession& operator=(const CliSession&) = delete;
};

int cmd_run(int argc, char** argv) {
  Args args(argc, argv, 2, {"--input", "--output", "--backend", "--lengths", "--threads", "--expect", "--tolerance"},
            {"--stream", "--quiet"});
  if (args.positional.size() != 1) throw UsageError("run takes one MODEL.fb");
  const auto input_path = args.get("--input");
  const auto output_path = args.get("--output");
  if (!input_path || !output_path) throw UsageError("run needs --input X.npy and --output Y.npy");
  ThreadPool pool(args.get("--threads"));
  LoadedModel lm(args.positional[0]);
  ferry_model_info info{};
  info.struct_size = sizeof(info);
  check(ferry_model_get_info(lm.model, &info), "model info");

  const NpyArray x = read_npy(*input_path, info.input_is_tokens != 0);
  const bool tokens = info.input_is_tokens != 0;
  if (tokens && !x.is_ids) {
    throw Error("'" + *input_path + "': the model takes token ids (its first layer is an Embedding): give an int32 or "
                "int64 array " + (info.batch_first ? "[batch, time]" : "[time, batch]") + ", not float32");
  }
  size_t batch = 0, seq = 1, features = 0;
  if (tokens) {
    if (x.shape.size() != 2) {
      throw Error("'" + *input_path + "': the model takes 2-D token ids " +
                  (info.batch_first ? "[batch, time]" : "[time, batch]") + ", the file holds " +
                  std::to_string(x.shape.size()) + "-D");
    }
    batch = info.batch_first ? x.shape[0] : x.shape[1];
    seq = info.batch_first ? x.shape[1] : x.shape[0];
    features = info.input_size;
  } else if (info.has_time_axis) {
    const char* layout = info.channels_first ? "[batch, features, time]"
                         : info.batch_first  ? "[batch, time, features]"
                                             : "[time, batch, features]";
    if (x.shape.size() != 3) {
      throw Error("'" + *input_path + "': the model takes a 3-D input " + layout + ", the file holds " +
                  std::to_string(x.shape.size()) + "-D");
    }
    if (info.channels_first) {
      batch = x.shape[0];
      features = x.shape[1];
      seq = x.shape[2];
    } else {
      batch = info.batch_first ? x.shape[0] : x.shape[1];
      seq = info.batch_first ? x.shape[1] : x.shape[0];
      features = x.shape[2];
    }
  } else {
    if (x.shape.size() != 2) {
      throw Error("'" + *input_path + "': the model takes a 2-D input [batch, features], the file holds " +
                  std::to_string(x.shape.size()) + "-D");
    }
    batch = x.shape[0];
    features = x.shape[1];
  }
  if (features != info.input_size) {
    throw Error("'" + *input_path + "': " + std::to_string(features) + " features per step, the model takes " +
                std::to_string(info.input_size));
  }
  if (batch == 0 || seq == 0) throw Error("'" + *input_path + "': empty input");
  std::vector<int32_t> lengths;
  if (auto l = args.get("--lengths")) {
    lengths = parse_lengths(*l);
    if (lengths.size() != batch) {
      throw UsageError("--lengths gives " + std::to_string(lengths.size()) + " values for a batch of " +
                       std::to_string(batch));
    }
    for (int32_t v : lengths)
      if (static_cast<size_t>(v) > seq) throw UsageError("--lengths: " + std::to_string(v) + " exceeds the " + std::to_string(seq) + " steps of the input");
  }
  const bool stream = args.flags.count("--stream") != 0;
  if (stream && !lengths.empty()) throw UsageError("--stream and --lengths do not combine");

  const std::string backend_name = args.get("--backend").value_or("auto");
  const CliSession cli_session(lm.model, batch, stream ? 1 : seq, parse_backend(backend_name), pool.pool);
  ferry_session* session = cli_session.session;
  const size_t arena_bytes = cli_session.arena_bytes;

  size_t out_floats = 0;
  check(ferry_output_floats(lm.model, batch, seq, &out_floats), "output size");
  const size_t F = info.output_size;
  // Output steps: seq, or what a strided / unpadded Conv1d makes of it.
  const size_t out_seq = out_floats / (batch * F);
  NpyArray y;
  y.data.assign(out_floats, 0.0f);
  if (!info.has_time_axis || !info.output_is_sequence) {
    y.shape = {batch, F};
  } else if (info.channels_first) {
    y.shape = {batch, F, out_seq};
  } else if (info.batch_first) {
    y.shape = {batch, out_seq, F};
  } else {
    y.shape = {out_seq, batch, F};
  }
  if (stream && info.output_is_sequence && out_seq != seq) {
    throw UsageError("--stream: this model gives " + std::to_string(out_seq) + " output steps for " +
                     std::to_string(seq) + " input steps; run it whole");
  }

  // Element (b, t, f) of a [B,T,F], [T,B,F] or [B,F,T] array of `steps` steps.
  auto at = [&](size_t b, size_t t, size_t f, size_t steps, size_t width) {
    if (info.channels_first) return (b * width + f) * steps + t;
    return (info.batch_first ? b * steps + t : t * batch + b) * width + f;
  };
  const auto t0 = std::chrono::steady_clock::now();
  if (!stream) {
    const int32_t* len = lengths.empty() ? nullptr : lengths.data();
    if (tokens) {
      check(ferry_run_tokens(session, x.ids.data(), batch, seq, len, y.data.data(), y.data.size()), "run");
    } else {
      check(ferry_run(session, x.data.data(), batch, seq, len, y.data.data(), y.data.size()), "run");
    }
  } else {
    const size_t I = info.input_size;
    std::vector<float> xt(batch * I), yt(batch * F);
    std::vector<int32_t> idt(batch);
    for (size_t t = 0; t < seq; ++t) {
      if (tokens) {
        for (size_t b = 0; b < batch; ++b) idt[b] = x.ids[info.batch_first ? b * seq + t : t * batch + b];
        check(ferry_step_tokens(session, idt.data(), batch, yt.data(), yt.size()), "step " + std::to_string(t));
      } else {
        for (size_t b = 0; b < batch; ++b)
          for (size_t f = 0; f < I; ++f) xt[b * I + f] = x.data[at(b, t, f, seq, I)];
        check(ferry_step(session, xt.data(), batch, yt.data(), yt.size()), "step " + std::to_string(t));
      }
      if (info.output_is_sequence) {
        for (size_t b = 0; b < batch; ++b)
          for (size_t f = 0; f < F; ++f) y.data[at(b, t, f, seq, F)] = yt[b * F + f];
      } else if (t + 1 == seq) {
        y.data = yt;
      }
    }
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  write_npy(*output_path, y);
  if (!args.flags.count("--quiet")) print_output(y);
  std::printf("ran      %zu x %zu steps%s in %.3f ms (backend %s, %zu thread%s, arena %zu bytes); wrote %s\n", batch,
              seq, stream ? " one step at a time" : "", ms, backend_name.c_str(), pool.threads,
              pool.threads == 1 ? "" : "s", arena_bytes, output_path->c_str());
  if (auto expect_path = args.get("--expect")) {
    const NpyArray want = read_npy(*expect_path);
    if (want.shape != y.shape) throw Error("'" + *expect_path + "': shape differs from the output's");
    const std::string tol_text = args.get("--tolerance").value_or("1e-5");
    char* end = nullptr;
    const double tol = std::strtod(tol_text.c_str(), &end);
    if (*end != '\0' || !(tol >= 0)) throw UsageError("--tolerance '" + tol_text + "' is not a number >= 0");
    double worst = 0;
    for (size_t i = 0; i < y.data.size(); ++i) {
      const double e = std::fabs(double{y.data[i]} - double{want.data[i]});
      if (!(e <= worst)) worst = e;  // NaN counts as the worst
    }
    std::printf("check    max abs error vs %s: %.3g (tolerance %g)\n", expect_path->c_str(), worst, tol);
    if (!(worst <= tol)) throw Error("output differs from '" + *expect_path + "' by " + std::to_string(worst));
  }
  return 0;
}

// -------------------------------------------------------------------- bench

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
        const double g = l->kind() == fb::LayerKind::LSTM ? 4 : l->kind() == fb::LayerKind::GRU ? 3 : 1;
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

size_t parse_count(const Args& args, const std::string& flag, size_t fallback) {
  const auto text = args.get(flag);
  if (!text) return fallback;
  char* end = nullptr;
  const long v = std::strtol(text->c_str(), &end, 10);
  if (text->empty() || *end != '\0' || v < 1 || v > (1L << 24)) {
    throw UsageError(flag + " '" + *text + "': expected a positive integer");
  }
  return static_cast<size_t>(v);
}

// Times ferry_run (or, with --stream, ferry_step one time step at a time) on
// seeded random input: repeated samples, median and spread, single-threaded
// unless --threads. The side-by-side comparison with libtorch, and the
// machine's ceilings, are tests/bench/ferry_bench_torch.
int cmd_bench(int argc, char** argv) {
  Args args(argc, argv, 2, {"--batch", "--seq", "--backend", "--threads", "--repeat"}, {"--stream", "--json"});
  if (args.positional.size() != 1) throw UsageError("bench takes one MODEL.fb");
  const std::string path = args.positional[0];
  const bool stream = args.flags.count("--stream") != 0;
  const bool json = args.flags.count("--json") != 0;
  const size_t batch = parse_count(args, "--batch", 1);
  ThreadPool pool(args.get("--threads"));
  LoadedModel lm(path);
  ferry_model_info info{};
  info.struct_size = sizeof(info);
  check(ferry_model_get_info(lm.model, &info), "model info");
  const size_t seq = info.has_time_axis ? parse_count(args, "--seq", 64) : 1;
  if (stream && !info.streamable) throw Error("'" + path + "': --stream: the model has a bidirectional layer");
  if (stream && !info.has_time_axis) throw UsageError("--stream needs a model with a time axis");

  const std::string backend_name = args.get("--backend").value_or("auto");
  const CliSession cli_session(lm.model, batch, stream ? 1 : seq, parse_backend(backend_name), pool.pool);
  ferry_session* session = cli_session.session;
  const size_t arena_bytes = cli_session.arena_bytes;

  // Seeded input in the model's layout: a small deterministic generator.
  std::vector<float> x(batch * seq * info.input_size);
  uint32_t state = 12345;
  for (float& v : x) {
    state = state * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) / static_cast<float>(1 << 23);
  }
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
  size_t repeat = parse_count(args, "--repeat", 1);
  if (!args.get("--repeat")) {
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
                path.c_str(), stream ? "stream" : "run", backend_name.c_str(), pool.threads, batch, seq, us.size(),
                median, p10, p90, best, per_step, gflops, static_cast<unsigned long long>(cost.weight_bytes),
                arena_bytes);
    return 0;
  }
  std::printf("bench    %s: %s, batch %zu, %zu steps, backend %s, %zu thread%s, %zu samples\n", path.c_str(),
              stream ? "ferry_step one step at a time" : "ferry_run", batch, seq, backend_name.c_str(),
              pool.threads, pool.threads == 1 ? "" : "s", us.size());
  std::printf("time     median %.3f us per %s (p10 %.3f, p90 %.3f, min %.3f)\n", median,
              stream ? "sample of steps" : "run", p10, p90, best);
  std::printf("step     %.4f us per time step (%.0f steps/s of batch %zu)\n", per_step, 1e6 / per_step, batch);
  std::printf("compute  %.2f GFLOP/s (%.3g multiply-adds per run); weights %.2f MB, arena %zu bytes\n", gflops, macs,
              static_cast<double>(cost.weight_bytes) / 1e6, arena_bytes);
  return 0;
}

// ----------------------------------------------------------------- selftest

int cmd_selftest(int argc, char** argv) {
  Args args(argc, argv, 2, {"--backend"}, {});
  if (args.positional.size() != 1) throw UsageError("selftest takes one MODEL.fb");
  const std::string& path = args.positional[0];
  const std::string backend_name = args.get("--backend").value_or("auto");
  const ferry_backend backend = parse_backend(backend_name);
  LoadedModel lm(path);
  // The status is named: FERRY_UNSUPPORTED (a backend this build or CPU
  // lacks, a model without vectors) is not a failed check.
  const auto check_status = [&path](ferry_status st) {
    if (st != FERRY_OK) {
      throw Error("'" + path + "': " + ferry_last_error() + " [" + ferry_status_string(st) + "]");
    }
  };
  size_t arena_bytes = 0;
  check_status(ferry_selftest_arena_size(lm.model, &arena_bytes));
  void* arena = std::aligned_alloc(FERRY_ALIGNMENT, (arena_bytes + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT);
  if (!arena) throw Error("cannot allocate a " + std::to_string(arena_bytes) + "-byte arena");
  struct Free { void* p; ~Free() { std::free(p); } } free_arena{arena};
  int passed = 0;
  float max_error = 0;
  check_status(ferry_selftest(lm.model, backend, arena, arena_bytes, &passed, &max_error));
  const auto* st = ferry::fb::GetModel(lm.file.data())->selftest();
  std::printf("selftest %s: batch %u x %u steps, %u outputs, backend %s\n", path.c_str(), st->batch(), st->seq(),
              st->output()->size(), backend_name.c_str());
  std::printf("selftest max abs error %.3g (tolerance %.3g): %s\n", max_error, st->tolerance(),
              passed ? "PASS" : "FAIL");
  if (!passed) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "selftest failed: max abs error %.3g exceeds the tolerance %.3g", max_error,
                  st->tolerance());
    throw Error("'" + path + "': " + msg);
  }
  return 0;
}

// ------------------------------------------------------------------ inspect

int inspect_model(const std::string& path) {
  LoadedModel lm(path);
  const auto* m = ferry::fb::GetModel(lm.file.data());
  std::printf("%s: ferry model, format %u.%u, %zu bytes\n", path.c_str(), m->format_major(),
              m->format_minor(), lm.file.size());
  std::printf("input    %u features, %s\n", m->input_size(),
              m->batch_first() ? "batch-first [B,T,F]" : "time-major [T,B,F]");
  std::printf("output   %u features%s\n", m->output_size(), m->output_is_sequence() ? " per time step" : " ([B,F])");
  std::printf("arena    %llu bytes for streaming at batch 1\n",
              static_cast<unsigned long long>(m->arena_bytes_stream_b1()));
  for (uint32_t i = 0; i < m->layers()->size(); ++i) {
    const auto* l = m->layers()->Get(i);
    std::printf("layer %u  %-10s %-8s %u -> %u", i, l->name() ? l->name()->c_str() : "",
                ferry::fb::EnumNameLayerKind(l->kind()), l->input_size(), l->output_size());
    if (l->hidden_size()) {
      std::printf("  hidden %u, layers %u%s", l->hidden_size(), l->num_layers(),
                  l->bidirectional() ? ", bidirectional" : "");
      if (l->proj_size()) std::printf(", proj %u", l->proj_size());
    }
    std::printf("\n");
  }
  if (m->tensors()) {
    for (uint32_t i = 0; i < m->tensors()->size(); ++i) {
      const auto* t = m->tensors()->Get(i);
      std::string shape;
      for (uint32_t d = 0; t->shape() && d < t->shape()->size(); ++d)
        shape += (d ? ", " : "") + std::to_string(t->shape()->Get(d));
      std::printf("tensor %-3u %-28s %s [%s] %s @%llu, %llu bytes\n", i, t->name() ? t->name()->c_str() : "",
                  ferry::fb::EnumNameDType(t->dtype()), shape.c_str(), ferry::fb::EnumNameTensorLayout(t->layout()),
                  static_cast<unsigned long long>(t->offset()), static_cast<unsigned long long>(t->size()));
    }
  }
  if (const auto* p = m->provenance()) {
    std::printf("source   %s (%s), sha256 %s\n", p->source_file() ? p->source_file()->c_str() : "?",
                p->source_format() ? p->source_format()->c_str() : "?",
                p->source_sha256() ? p->source_sha256()->c_str() : "?");
    std::printf("made by  %s\n", p->converter_version() ? p->converter_version()->c_str() : "?");
    if (p->mapping()) {
      for (const auto* r : *p->mapping()) {
        std::printf("map      %-32s -> %s %s\n", r->source_key() ? r->source_key()->c_str() : "",
                    r->layer() >= 0 ? ("layer " + std::to_string(r->layer())).c_str() : "ignored:",
                    r->role() ? r->role()->c_str() : "");
      }
    }
  }
  return 0;
}

int inspect_checkpoint(const std::string& path, const std::string& key) {
  MappedFile file(path);
  LoadOptions load;
  load.key = key;
  const Checkpoint c = load_checkpoint(file, load);
  std::printf("%s: %s, %zu bytes, sha256 %s\n", path.c_str(), c.form.c_str(), file.size(),
              sha256_file(file).c_str());
  std::printf("%-40s %-9s %-16s %-8s %10s  %s\n", "tensor", "dtype", "shape", "location", "bytes", "storage");
  for (const TensorRef& t : c.tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
    std::printf("%-40s %-9s %-16s %-8s %10llu  %s%s\n", t.name.c_str(), dtype_name(t.dtype),
                shape_str(t.shape).c_str(), t.storage ? t.storage->location.c_str() : "-",
                static_cast<unsigned long long>(bytes), t.storage ? t.storage->key.c_str() : "-",
                t.offset ? (" +" + std::to_string(t.offset)).c_str() : "");
  }
  for (const auto& [k, v] : c.attributes) std::printf("attr     %s = %s\n", k.c_str(), v.c_str());
  const ModuleSet modules = group_modules(c);
  for (const Module& m : modules.modules) std::printf("module   %-20s %s\n", m.path.c_str(), m.describe().c_str());
  for (const auto& [k, why] : modules.ignored) std::printf("ignored  %s (%s)\n", k.c_str(), why.c_str());
  return 0;
}

int cmd_inspect(int argc, char** argv) {
  Args args(argc, argv, 2, {"--key"}, {});
  if (args.positional.size() != 1) throw UsageError("inspect takes one FILE");
  const std::string& path = args.positional[0];
  bool is_model = false;
  {
    MappedFile f(path);
    is_model = f.size() >= 8 && std::memcmp(f.data() + 4, ferry::fb::ModelIdentifier(), 4) == 0;
  }
  return is_model ? inspect_model(path) : inspect_checkpoint(path, args.get("--key").value_or(""));
}

// SIGINT, SIGTERM, SIGHUP: the first one cancels the file writers (the
// temporary file being written is removed as the error unwinds; a complete
// output stays complete) and main then dies of that signal, as shells
// expect; a second one kills at once. SIGXFSZ (the file size limit, a full
// quota) is ignored so that a write past it fails with EFBIG: an error like
// any other, instead of a kill that would leave the temporary file behind.
volatile sig_atomic_t g_signal = 0;

void on_terminating_signal(int sig) {
  if (g_signal != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
  cancel_writes();
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_terminating_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  std::signal(SIGXFSZ, SIG_IGN);
}

int dispatch(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "--version") {
      std::printf("ferry %s (model format %d.%d)\n", FERRY_VERSION_STRING, FERRY_FORMAT_MAJOR, FERRY_FORMAT_MINOR);
      return 0;
    }
    if (cmd == "convert") return cmd_convert(argc, argv);
    if (cmd == "run") return cmd_run(argc, argv);
    if (cmd == "inspect") return cmd_inspect(argc, argv);
    if (cmd == "selftest") return cmd_selftest(argc, argv);
    if (cmd == "bench") return cmd_bench(argc, argv);
    throw UsageError("unknown command '" + cmd + "' (convert, run, inspect, selftest, bench)");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ferry: error: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "ferry: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ferry: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry: error: internal: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  install_signal_handlers();
  const int status = dispatch(argc, argv);
  if (g_signal != 0) {
    std::fflush(nullptr);
    std::signal(g_signal, SIG_DFL);
    std::raise(g_signal);
  }
  return status;
}
