// ferry convert IN OUT.fb: the converter library's convert(), with what it
// read, planned and wrote printed as it goes.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "convert.h"
#include "library.h"
#include "plan/quantization.h"
#include "text.h"

namespace ferry::cli {
namespace {

using conv::ConvertReport;
using conv::Progress;

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

// What the conversion prints: --quiet nothing but errors; the default the
// plan, the quantization report and what was written (stdout), notes
// (stderr), and on a terminal a line on stderr naming the step under way,
// overwritten by the next (nothing of it in a pipe or a log); --verbose also
// every ignored tensor and each step as a line of its own, terminal or not.
enum class Verbosity { Quiet, Normal, Verbose };

class StageLine {
 public:
  explicit StageLine(Verbosity v) : verbosity_(v), terminal_(isatty(STDERR_FILENO) != 0) {}
  ~StageLine() { clear(); }
  void operator()(const std::string& what) {
    if (verbosity_ == Verbosity::Verbose) {
      clear();
      std::fprintf(stderr, "ferry: %s\n", what.c_str());
    } else if (verbosity_ == Verbosity::Normal && terminal_) {
      // Cut to a line's width so that \r overwrites all of it.
      std::fprintf(stderr, "\r\033[Kferry: %.100s ...", what.c_str());
      shown_ = true;
    }
    std::fflush(stderr);
  }
  // Before anything else is printed.
  void clear() {
    if (!shown_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  Verbosity verbosity_;
  bool terminal_;
  bool shown_ = false;
};

void print_plan(const std::string& in, const ConvertReport& r, Verbosity verbosity) {
  std::string locations;
  for (const std::string& l : r.storage_locations) locations += (locations.empty() ? "" : ", ") + l;
  // Names from the file are escaped (text.h): one line each, whatever they hold.
  const auto e = [](const std::string& s) { return conv::escaped(s); };
  std::printf("read     %s: %s, %zu tensors, storages on %s\n", in.c_str(), e(r.form).c_str(), r.tensor_count,
              locations.empty() ? "none" : e(locations).c_str());
  if (r.code)
    std::printf("code     class %s\n", e(r.code->class_text()).c_str());
  std::printf("graph    %s%s\n", e(r.graph).c_str(),
              !r.graph_inferred ? "" : r.code && !r.code->element_sources.empty() ? "  (read from its forward)" : "  (inferred)");
  const char* layout = r.channels_first ? "channels-first [B,F,T]"
                       : r.batch_first    ? (r.input_is_tokens ? "batch-first token ids [B,T]" : "batch-first [B,T,F]")
                                          : (r.input_is_tokens ? "time-major token ids [T,B]" : "time-major [T,B,F]");
  std::string output;
  if (r.output_layout) {
    output = std::string("; output ") + (*r.output_layout == conv::Layout::kChannelsFirst ? "channels-first [B,F,T]"
                                         : *r.output_layout == conv::Layout::kBatchFirst  ? "batch-first [B,T,F]"
                                                                                          : "time-major [T,B,F]") +
             " (" + r.output_layout_source + ")";
  }
  std::printf("layout   %s (%s)%s\n", layout, r.batch_first_source.c_str(), output.c_str());
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const conv::LayerSummary& l = r.layers[i];
    std::printf("layer %zu  %-10s %s  %u -> %u\n", i, e(l.name).c_str(), e(l.description).c_str(), l.input_size,
                l.output_size);
  }
  for (const std::string& f : r.folded) std::printf("folded   %s\n", e(f).c_str());
  const size_t shown = verbosity == Verbosity::Verbose ? r.ignored.size() : std::min<size_t>(r.ignored.size(), 8);
  for (size_t i = 0; i < shown; ++i)
    std::printf("ignored  %s (%s)\n", e(r.ignored[i].first).c_str(), e(r.ignored[i].second).c_str());
  if (r.ignored.size() > shown) {
    std::printf("ignored  ... and %zu more (ferry inspect, or --verbose, lists them)\n", r.ignored.size() - shown);
  }
  for (const std::string& n : conv::assumption_lines(r.assumptions)) std::fprintf(stderr, "ferry: note: %s\n", e(n).c_str());
  for (const std::string& n : r.notes) std::fprintf(stderr, "ferry: note: %s\n", e(n).c_str());
}

void print_stats(const char* what, const conv::ErrorStatsPlan& e) {
  std::printf("accuracy %-10s %-5s max abs %.3g  rms %.3g  cosine %.6f%s%s\n", what, conv::precision_name(e.dtype),
              e.max_abs, e.rms, e.cosine, e.rounding.empty() ? "" : "  ", e.rounding.c_str());
}

// Both roundings side by side (with --calibration): each int8 / int4 layer
// alone, the model, the drift.
void print_roundings(const conv::QuantizationPlan& q) {
  if (q.roundings.size() != 2) return;
  const conv::RoundingReport &a = q.roundings[0], &b = q.roundings[1];
  std::printf("rounding %-16s %-40s %s\n", "", a.rounding.c_str(), b.rounding.c_str());
  const auto cell = [](const conv::ErrorStatsPlan& e) {
    char text[96];
    std::snprintf(text, sizeof text, "max abs %.3g rms %.3g cos %.6f", e.max_abs, e.rms, e.cosine);
    return std::string(text);
  };
  for (size_t i = 0; i < a.layers.size() && i < b.layers.size(); ++i) {
    if (a.layers[i].rounding.empty()) continue;  // f16 / f32: nothing to round
    std::printf("rounding %-10s %-5s %-40s %s\n", a.layers[i].name.c_str(), conv::precision_name(a.layers[i].dtype),
                cell(a.layers[i]).c_str(), cell(b.layers[i]).c_str());
  }
  std::printf("rounding %-10s %-5s %-40s %s\n", "model", conv::precision_name(a.model.dtype), cell(a.model).c_str(),
              cell(b.model).c_str());
  if (q.drift_steps) {
    char da[96], db[96];
    std::snprintf(da, sizeof da, "first 1%% %.3g last 1%% %.3g", a.drift_start_rms, a.drift_end_rms);
    std::snprintf(db, sizeof db, "first 1%% %.3g last 1%% %.3g", b.drift_start_rms, b.drift_end_rms);
    std::printf("rounding %-10s %-5s %-40s %s\n", "drift", "rms", da, db);
  }
}

void print_quantization(const ConvertReport& r) {
  const conv::QuantizationPlan& q = r.quantization;
  for (const conv::LayerPrecision& p : r.precisions) {
    // The rounding where there was a choice (with --calibration).
    const bool integer = (p.dtype == conv::DType::I8 || p.dtype == conv::DType::I4) && !q.roundings.empty();
    std::printf("quantize %-10s %s%s%s%s%s\n", r.layers[static_cast<size_t>(p.layer)].name.c_str(),
                conv::precision_name(p.dtype), integer ? "  rounded " : "", integer ? conv::rounding_name(p.rounding) : "",
                p.reason.empty() ? "" : "  ", p.reason.c_str());
  }
  for (const std::string& m : r.fallback_moves) std::printf("fallback %s\n", m.c_str());
  std::printf("accuracy quantized vs fp32 on %s (per layer: that layer alone quantized)\n", q.input.c_str());
  for (const conv::ErrorStatsPlan& e : q.layers) print_stats(e.name.c_str(), e);
  print_stats("model", q.model);
  if (q.drift_steps) {
    std::printf("drift    %u streamed steps: rms error %.3g over the first 1%%, %.3g over the last 1%%\n",
                q.drift_steps, q.drift_start_rms, q.drift_end_rms);
  }
  print_roundings(q);
}

}  // namespace

namespace {

struct ConvertOptions {
  std::string input, output, graph, layout, output_layout, key, quantize = "f32", calibration, c_array, rounding;
  std::vector<std::string> code;
  std::vector<size_t> max_batch, max_seq;  // --c-array's arena figures
  std::vector<std::string> meta;           // --meta KEY=VALUE
  float max_error = 0;
  bool batch_first = false, selftest = false, stats = false, fallback = false, quiet = false, verbose = false;
  CLI::Option *graph_opt = nullptr, *layout_opt = nullptr, *output_layout_opt = nullptr, *calibration_opt = nullptr, *max_error_opt = nullptr,
              *c_array_opt = nullptr, *rounding_opt = nullptr;
};

// The request the options make, checked as a usage error where options do
// not combine.
ConvertCall convert_call(const ConvertOptions& o) {
  ConvertCall call;
  conv::ConvertRequest& request = call.request;
  request.quantize.dtype = conv::precision_from_name(o.quantize);
  const bool quantized = request.quantize.dtype != conv::DType::F32;
  if (!quantized && (o.calibration_opt->count() || o.max_error_opt->count() || o.fallback || o.rounding_opt->count())) {
    throw UsageError("--calibration, --max-error, --fallback and --rounding need --quantize f16, int8 or int4");
  }
  if (o.calibration_opt->count()) request.quantize.calibration = o.calibration;
  if (o.rounding_opt->count()) {
    if (request.quantize.dtype != conv::DType::I8 && request.quantize.dtype != conv::DType::I4) {
      throw UsageError("--rounding applies to --quantize int8 and int4");
    }
    if (o.rounding == "gptq" && !request.quantize.calibration) {
      throw UsageError("--rounding gptq needs --calibration X.npy (the inputs the weights meet)");
    }
    request.quantize.rounding = conv::rounding_from_name(o.rounding);
  }
  if (o.max_error_opt->count()) request.quantize.max_error = o.max_error;
  request.quantize.fallback = o.fallback;
  request.input = o.input;
  request.output = o.output;
  if (o.graph_opt->count()) request.graph = o.graph;
  request.code = o.code;
  if (o.batch_first) request.batch_first = true;
  if (o.layout_opt->count()) request.layout = layout_named(o.layout);
  if (o.output_layout_opt->count()) request.output_layout = layout_named(o.output_layout);
  request.key = o.key;
  if (o.c_array_opt->count()) request.c_array = o.c_array;
  request.c_array_batches = o.max_batch;
  request.c_array_seqs = o.max_seq;
  if (o.selftest) request.selftest = conv::SelfTestPolicy::Always;
  request.metadata = o.meta;
  call.verbose = o.verbose;
  return call;
}

int run_convert(const ConvertOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  ConvertCall call = convert_call(o);
  conv::ConvertRequest& request = call.request;
  const bool quantized = request.quantize.dtype != conv::DType::F32;
  const Verbosity verbosity = o.quiet ? Verbosity::Quiet : o.verbose ? Verbosity::Verbose : Verbosity::Normal;
  StageLine stage(verbosity);
  request.stage = [&stage](const std::string& what) { stage(what); };
  Progress bar;  // chosen once the input's size is known
  request.on_plan = [&](const ConvertReport& r) {
    stage.clear();
    if (verbosity != Verbosity::Quiet) print_plan(request.input, r, verbosity);
    if (verbosity != Verbosity::Quiet) bar = progress_bar(r.input_bytes);
  };
  request.progress = [&](uint64_t done, uint64_t total) {
    if (!bar) return;
    stage.clear();
    bar(done, total);
  };

  const ConvertReport r = conv::convert(request).report;
  stage.clear();
  if (verbosity == Verbosity::Quiet) return 0;
  if (quantized) print_quantization(r);
  std::printf("wrote    %s: %llu bytes (weights %llu bytes), streaming arena (batch 1): %llu bytes\n",
              request.output.c_str(), static_cast<unsigned long long>(r.file_bytes),
              static_cast<unsigned long long>(r.stored_weight_bytes), static_cast<unsigned long long>(r.arena_bytes));
  for (const auto& [key, what] : r.metadata) std::printf("meta     %s: %s\n", key.c_str(), what.c_str());
  if (request.c_array) {
    std::printf("wrote    %s: C array '%s', %llu bytes, 64-byte aligned\n", request.c_array->c_str(),
                r.c_array_name.c_str(), static_cast<unsigned long long>(r.file_bytes));
  }
  if (o.stats) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("stats    %.3f s, %.0f MB/s of input, peak RSS %s\n", s, r.input_bytes / 1e6 / s, peak_rss().c_str());
  }
  return 0;
}

}  // namespace

namespace {

// convert's positionals and options, declared once: on the CLI's
// subcommand and on the App parse_convert() parses with.
std::shared_ptr<ConvertOptions> declare_convert_options(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  app.footer(
      "IN is any form ferry reads: a torch.save zip or legacy file (state dict, training checkpoint, whole\n"
      "module), TorchScript, safetensors, a torch.export .pt2 archive or a distributed checkpoint directory.\n"
      "The layer chain is read from the file where it records it (.pt2, TorchScript, a pickled Sequential),\n"
      "else from the model's Python source given with --code (read, never run), else inferred where the\n"
      "tensors make it unambiguous, else given with --graph. docs/convert.md has the ops, their options\n"
      "and examples.");
  app.add_option("IN", o->input, "The checkpoint (a file, or a DCP directory)")->type_name("PATH")->required();
  app.add_option("OUT", o->output, "The model file to write (whole or not at all)")->type_name("OUT.fb")->required();
  app.add_option("--code", o->code,
                 "The model's Python source (.py or .ipynb; FILE:Class to name the class): its layers, options "
                 "and forward are read, never run. May be given more than once")
      ->type_name("FILE[:CLASS]");
  o->graph_opt = app.add_option("--graph", o->graph,
                                "The layer chain: module paths and ops, e.g. \"lstm > last > fc\"")
                     ->type_name("SPEC");
  auto* batch_first = app.add_flag("--batch-first", o->batch_first, "The input is [batch, time, features]");
  o->layout_opt = app.add_option("--layout", o->layout,
                                 "Input layout: btf [B,T,F], tbf [T,B,F], bft [B,F,T]")
                      ->type_name("LAYOUT")
                      ->check(CLI::IsMember({"btf", "tbf", "bft"}))
                      ->excludes(batch_first);
  o->output_layout_opt = app.add_option("--output-layout", o->output_layout,
                                        "Layout of a sequence output: btf, tbf, bft (default: what the file "
                                        "records, else the input's)")
                             ->type_name("LAYOUT")
                             ->check(CLI::IsMember({"btf", "tbf", "bft"}));
  app.add_option("--key", o->key, "The entry of a checkpoint dict that holds the model")->type_name("NAME");
  app.add_option("--quantize", o->quantize, "Weight type of the matrices (biases, small layers stay f32)")
      ->type_name("DTYPE")
      ->check(CLI::IsMember({"f32", "f16", "int8", "int4"}))
      ->capture_default_str();
  o->calibration_opt = app.add_option("--calibration", o->calibration,
                                      "Real input (model's layout) for the accuracy report")
                           ->type_name("X.npy");
  o->max_error_opt = app.add_option("--max-error", o->max_error,
                                    "Fail when the model's max abs error exceeds E")
                         ->type_name("E")
                         ->check(finite_non_negative());
  o->rounding_opt = app.add_option("--rounding", o->rounding,
                                   "int8/int4 rounding: gptq (default with --calibration) or nearest")
                        ->type_name("ROUNDING")
                        ->check(CLI::IsMember({"nearest", "gptq"}));
  app.add_flag("--fallback", o->fallback, "Instead, move the worst layer up a dtype until within E")
      ->needs(o->max_error_opt);
  o->c_array_opt = app.add_option("--c-array", o->c_array, "Also write the model as a 64-byte aligned C array")
                       ->type_name("model_data.h");
  app.add_option("--max-batch", o->max_batch,
                 "With --c-array: also the arena for max_batch B (with each --max-seq; repeatable)")
      ->type_name("B")
      ->check(positive_count(1 << 24))
      ->needs(o->c_array_opt);
  app.add_option("--max-seq", o->max_seq,
                 "With --c-array: also the arena for max_seq T (with each --max-batch; repeatable)")
      ->type_name("T")
      ->check(positive_count(1 << 30))
      ->needs(o->c_array_opt);
  app.add_flag("--selftest", o->selftest, "Store self-test vectors whatever the model's size");
  app.add_option("--meta", o->meta,
                 "Store KEY=VALUE in the file: a number, N,N,... (an array), text, text:ANY, or @FILE (a .npy's "
                 "numbers, else the file as text); repeatable. Read with ferry_model_metadata")
      ->type_name("KEY=VALUE");
  app.add_flag("--stats", o->stats, "Print time, throughput and peak memory");
  auto* quiet = app.add_flag("--quiet,-q", o->quiet, "Print nothing but errors");
  app.add_flag("--verbose,-v", o->verbose, "Print every ignored tensor and each step as it starts")->excludes(quiet);
  return o;
}

}  // namespace

Action declare_convert(CLI::App& app) {
  std::shared_ptr<ConvertOptions> o = declare_convert_options(app);
  return [o] { return run_convert(*o); };
}

ConvertCall parse_convert(const std::vector<std::string>& args) {
  CLI::App app("", "convert");
  std::shared_ptr<ConvertOptions> o = declare_convert_options(app);
  parse_words(app, args);
  return convert_call(*o);
}

}  // namespace ferry::cli
