// ferry convert IN OUT.fb: the converter library's convert(), with what it
// read, planned and wrote printed as it goes.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <string>

#include "args.h"
#include "commands.h"
#include "convert.h"
#include "plan/quantization.h"

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

void print_plan(const std::string& in, const ConvertReport& r) {
  std::string locations;
  for (const std::string& l : r.storage_locations) locations += (locations.empty() ? "" : ", ") + l;
  std::printf("read     %s: %s, %zu tensors, storages on %s\n", in.c_str(), r.form.c_str(), r.tensor_count,
              locations.empty() ? "none" : locations.c_str());
  std::printf("graph    %s%s\n", r.graph.c_str(), r.graph_inferred ? "  (inferred)" : "");
  const char* layout = r.channels_first ? "channels-first [B,F,T]"
                       : r.batch_first    ? (r.input_is_tokens ? "batch-first token ids [B,T]" : "batch-first [B,T,F]")
                                          : (r.input_is_tokens ? "time-major token ids [T,B]" : "time-major [T,B,F]");
  std::printf("layout   %s (%s)\n", layout, r.batch_first_source.c_str());
  for (size_t i = 0; i < r.layers.size(); ++i) {
    const conv::LayerSummary& l = r.layers[i];
    std::printf("layer %zu  %-10s %s  %u -> %u\n", i, l.name.c_str(), l.description.c_str(), l.input_size,
                l.output_size);
  }
  for (const std::string& f : r.folded) std::printf("folded   %s\n", f.c_str());
  for (size_t i = 0; i < r.ignored.size() && i < 8; ++i)
    std::printf("ignored  %s (%s)\n", r.ignored[i].first.c_str(), r.ignored[i].second.c_str());
  if (r.ignored.size() > 8) std::printf("ignored  ... and %zu more (see ferry inspect)\n", r.ignored.size() - 8);
  for (const std::string& n : r.notes) std::fprintf(stderr, "ferry: note: %s\n", n.c_str());
}

void print_stats(const char* what, const conv::ErrorStatsPlan& e) {
  std::printf("accuracy %-10s %-5s max abs %.3g  rms %.3g  cosine %.6f\n", what, conv::precision_name(e.dtype),
              e.max_abs, e.rms, e.cosine);
}

void print_quantization(const ConvertReport& r) {
  const conv::QuantizationPlan& q = r.quantization;
  for (const conv::LayerPrecision& p : r.precisions) {
    std::printf("quantize %-10s %s%s%s\n", r.layers[static_cast<size_t>(p.layer)].name.c_str(),
                conv::precision_name(p.dtype), p.reason.empty() ? "" : "  ", p.reason.c_str());
  }
  for (const std::string& m : r.fallback_moves) std::printf("fallback %s\n", m.c_str());
  std::printf("accuracy quantized vs fp32 on %s (per layer: that layer alone quantized)\n", q.input.c_str());
  for (const conv::ErrorStatsPlan& e : q.layers) print_stats(e.name.c_str(), e);
  print_stats("model", q.model);
  if (q.drift_steps) {
    std::printf("drift    %u streamed steps: rms error %.3g over the first 1%%, %.3g over the last 1%%\n",
                q.drift_steps, q.drift_start_rms, q.drift_end_rms);
  }
}

}  // namespace

int cmd_convert(int argc, char** argv) {
  const Args args(argc, argv, 2,
                  {"--graph", "--key", "--quantize", "--calibration", "--c-array", "--max-error", "--layout"},
                  {"--batch-first", "--stats", "--selftest", "--fallback"});
  const auto t0 = std::chrono::steady_clock::now();
  if (args.positional.size() != 2) throw UsageError("convert takes IN and OUT.fb");
  conv::ConvertRequest request;
  if (auto q = args.get("--quantize")) {
    if (*q != "f32" && *q != "f16" && *q != "int8" && *q != "int4") {
      throw UsageError("--quantize " + *q + ": expected f32, f16, int8 or int4");
    }
    request.quantize.dtype = conv::precision_from_name(*q);
  }
  const bool quantized = request.quantize.dtype != conv::DType::F32;
  if (!quantized && (args.get("--calibration") || args.get("--max-error") || args.has("--fallback"))) {
    throw UsageError("--calibration, --max-error and --fallback need --quantize f16, int8 or int4");
  }
  request.quantize.calibration = args.get("--calibration");
  if (auto e = args.get("--max-error")) {
    char* end = nullptr;
    const float v = std::strtof(e->c_str(), &end);
    if (e->empty() || *end != '\0' || !(v >= 0.0f) || !std::isfinite(v)) {
      throw UsageError("--max-error " + *e + ": expected a finite number >= 0");
    }
    request.quantize.max_error = v;
  }
  request.quantize.fallback = args.has("--fallback");
  if (request.quantize.fallback && !request.quantize.max_error) throw UsageError("--fallback needs --max-error E");
  request.input = args.positional[0];
  request.output = args.positional[1];
  request.graph = args.get("--graph");
  if (args.has("--batch-first")) request.batch_first = true;
  if (auto layout = args.get("--layout")) {
    if (*layout == "btf") request.layout = conv::Layout::kBatchFirst;
    else if (*layout == "tbf") request.layout = conv::Layout::kTimeMajor;
    else if (*layout == "bft") request.layout = conv::Layout::kChannelsFirst;
    else throw UsageError("--layout " + *layout + ": one of btf ([B,T,F], batch-first), tbf ([T,B,F], time-major), "
                          "bft ([B,F,T], channels-first as nn.Conv1d takes)");
    if (request.batch_first) throw UsageError("--layout and --batch-first: give one");
  }
  request.key = args.get("--key").value_or("");
  request.c_array = args.get("--c-array");
  if (args.has("--selftest")) request.selftest = conv::SelfTestPolicy::Always;
  Progress bar;  // chosen once the input's size is known
  request.on_plan = [&](const ConvertReport& r) {
    print_plan(request.input, r);
    bar = progress_bar(r.input_bytes);
  };
  request.progress = [&bar](uint64_t done, uint64_t total) {
    if (bar) bar(done, total);
  };

  const ConvertReport r = conv::convert(request).report;
  if (quantized) print_quantization(r);
  std::printf("wrote    %s: %llu bytes (weights %llu bytes), streaming arena (batch 1): %llu bytes\n",
              request.output.c_str(), static_cast<unsigned long long>(r.file_bytes),
              static_cast<unsigned long long>(r.stored_weight_bytes), static_cast<unsigned long long>(r.arena_bytes));
  if (request.c_array) {
    std::printf("wrote    %s: C array '%s', %llu bytes, 64-byte aligned\n", request.c_array->c_str(),
                r.c_array_name.c_str(), static_cast<unsigned long long>(r.file_bytes));
  }
  if (args.has("--stats")) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("stats    %.3f s, %.0f MB/s of input, peak RSS %s\n", s, r.input_bytes / 1e6 / s, peak_rss().c_str());
  }
  return 0;
}

}  // namespace ferry::cli
