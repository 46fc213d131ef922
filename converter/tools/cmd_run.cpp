// ferry run MODEL.fb --input X.npy --output Y.npy: one whole-sequence run
// (or, with --stream, ferry_step one time step at a time) of a .npy input.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli_model.h"
#include "commands.h"
#include "io/npy.h"

namespace ferry::cli {
namespace {

using conv::Error;
using conv::NpyArray;
using conv::read_npy;
using conv::write_npy;

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

struct RunOptions {
  std::string model, input, output, backend = "auto", lengths, expect;
  double tolerance = 1e-5;
  size_t threads = 1;
  bool stream = false, quiet = false;
  CLI::Option *lengths_opt = nullptr, *expect_opt = nullptr;
};

int run_model(const RunOptions& o) {
  ThreadPool pool(o.threads);
  LoadedModel lm(o.model);
  ferry_model_info info{};
  info.struct_size = sizeof(info);
  check(ferry_model_get_info(lm.model, &info), "model info");

  const NpyArray x = read_npy(o.input, info.input_is_tokens != 0);
  const bool tokens = info.input_is_tokens != 0;
  if (tokens && !x.is_ids) {
    throw Error("'" + o.input + "': the model takes token ids (its first layer is an Embedding): give an int32 or "
                "int64 array " + (info.batch_first ? "[batch, time]" : "[time, batch]") + ", not float32");
  }
  size_t batch = 0, seq = 1, features = 0;
  if (tokens) {
    if (x.shape.size() != 2) {
      throw Error("'" + o.input + "': the model takes 2-D token ids " +
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
      throw Error("'" + o.input + "': the model takes a 3-D input " + layout + ", the file holds " +
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
      throw Error("'" + o.input + "': the model takes a 2-D input [batch, features], the file holds " +
                  std::to_string(x.shape.size()) + "-D");
    }
    batch = x.shape[0];
    features = x.shape[1];
  }
  if (features != info.input_size) {
    throw Error("'" + o.input + "': " + std::to_string(features) + " features per step, the model takes " +
                std::to_string(info.input_size));
  }
  if (batch == 0 || seq == 0) throw Error("'" + o.input + "': empty input");
  std::vector<int32_t> lengths;
  if (o.lengths_opt->count()) {
    lengths = parse_lengths(o.lengths);
    if (lengths.size() != batch) {
      throw UsageError("--lengths gives " + std::to_string(lengths.size()) + " values for a batch of " +
                       std::to_string(batch));
    }
    for (int32_t v : lengths)
      if (static_cast<size_t>(v) > seq) throw UsageError("--lengths: " + std::to_string(v) + " exceeds the " + std::to_string(seq) + " steps of the input");
  }
  const bool stream = o.stream;

  const ferry_backend backend = parse_backend(o.backend);
  const CliSession cli_session(lm.model, batch, stream ? 1 : seq, backend, pool.pool);
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
  } else if (info.output_layout == FERRY_LAYOUT_CHANNELS_FIRST) {
    y.shape = {batch, F, out_seq};
  } else if (info.output_layout == FERRY_LAYOUT_BATCH_FIRST) {
    y.shape = {batch, out_seq, F};
  } else {
    y.shape = {out_seq, batch, F};
  }
  if (stream && info.output_is_sequence && out_seq != seq) {
    throw UsageError("--stream: this model gives " + std::to_string(out_seq) + " output steps for " +
                     std::to_string(seq) + " input steps; run it whole");
  }

  // Element (b, t, f) of a [B,T,F], [T,B,F] or [B,F,T] array of `steps`
  // steps: the input's layout, and the output's.
  const int input_layout = info.channels_first ? FERRY_LAYOUT_CHANNELS_FIRST
                           : info.batch_first  ? FERRY_LAYOUT_BATCH_FIRST
                                               : FERRY_LAYOUT_TIME_MAJOR;
  auto index = [&](int layout, size_t b, size_t t, size_t f, size_t steps, size_t width) {
    if (layout == FERRY_LAYOUT_CHANNELS_FIRST) return (b * width + f) * steps + t;
    return (layout == FERRY_LAYOUT_BATCH_FIRST ? b * steps + t : t * batch + b) * width + f;
  };
  auto at = [&](size_t b, size_t t, size_t f, size_t steps, size_t width) {
    return index(input_layout, b, t, f, steps, width);
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
          for (size_t f = 0; f < F; ++f) y.data[index(info.output_layout, b, t, f, seq, F)] = yt[b * F + f];
      } else if (t + 1 == seq) {
        y.data = yt;
      }
    }
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  write_npy(o.output, y);
  if (!o.quiet) print_output(y);
  std::printf("ran      %zu x %zu steps%s in %.3f ms (backend %s, %zu thread%s, arena %zu bytes); wrote %s\n", batch,
              seq, stream ? " one step at a time" : "", ms, ferry_backend_name(backend), pool.threads,
              pool.threads == 1 ? "" : "s", arena_bytes, o.output.c_str());
  if (o.expect_opt->count()) {
    const NpyArray want = read_npy(o.expect);
    if (want.shape != y.shape) throw Error("'" + o.expect + "': shape differs from the output's");
    const double tol = o.tolerance;
    double worst = 0;
    for (size_t i = 0; i < y.data.size(); ++i) {
      const double e = std::fabs(double{y.data[i]} - double{want.data[i]});
      if (!(e <= worst)) worst = e;  // NaN counts as the worst
    }
    std::printf("check    max abs error vs %s: %.3g (tolerance %g)\n", o.expect.c_str(), worst, tol);
    if (!(worst <= tol)) throw Error("output differs from '" + o.expect + "' by " + std::to_string(worst));
  }
  return 0;
}

}  // namespace

Action declare_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  app.add_option("MODEL", o->model, "The model file")->type_name("MODEL.fb")->required();
  app.add_option("--input", o->input, "Input: float32 in the model's layout, or token ids")
      ->type_name("X.npy")
      ->required();
  app.add_option("--output", o->output, "Where to write the output (float32 .npy)")->type_name("Y.npy")->required();
  app.add_option("--backend", o->backend, "Where to run it")
      ->type_name("BACKEND")
      ->check(CLI::IsMember(backend_names()))
      ->capture_default_str();
  app.add_option("--threads", o->threads, "Threads (the output does not depend on it)")
      ->type_name("N")
      ->check(positive_count(1024))
      ->capture_default_str();
  auto* stream = app.add_flag("--stream", o->stream, "Run one ferry_step per time step, state carried");
  o->lengths_opt = app.add_option("--lengths", o->lengths,
                                  "Per-sample lengths of a padded batch")
                       ->type_name("L1,L2,...")
                       ->excludes(stream);
  o->expect_opt = app.add_option("--expect", o->expect,
                                 "Fail unless the output matches this one")
                      ->type_name("Y.npy");
  app.add_option("--tolerance", o->tolerance, "Largest abs difference --expect accepts")
      ->type_name("TOL")
      ->check(finite_non_negative())
      ->capture_default_str()
      ->needs(o->expect_opt);
  app.add_flag("--quiet", o->quiet, "Do not print the output values");
  app.footer(
      "The input is [B,T,F] or [T,B,F] (or [B,F,T]) as the model file says, [B,F] for a model without a time\n"
      "axis; a model whose first layer is an Embedding takes int32/int64 token ids. With --lengths, outputs\n"
      "past a sample's length are zero (pack_padded_sequence).");
  return [o] { return run_model(*o); };
}

}  // namespace ferry::cli
