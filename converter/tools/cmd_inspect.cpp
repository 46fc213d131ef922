// ferry inspect FILE [--json]: a checkpoint (its form, tensors, attributes,
// the modules they make, what is ignored, and the layer chain the file
// records, if any: a .pt2's graph, TorchScript code, a whole nn.Sequential)
// or a .fb model (its layers, tensors, sizes, provenance, and the backends
// that run it: backends.h); --json: a .fb model's summary as one JSON object.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "arena_parts.h"
#include "backends.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/dcp.h"
#include "cli_model.h"
#include "commands.h"
#include "convert.h"
#include "library.h"
#include "report_json.h"
#include "ferry/ferry_generated.h"
#include "io/mapped_file.h"
#include "io/sha256.h"
#include "mapping/export_chain.h"
#include "mapping/modules.h"
#include "mapping/script_chain.h"
#include "mapping/sequential_chain.h"
#include "model_graph.h"
#include "plan/planner.h"
#include "text.h"
#include "weight_layout.h"

namespace ferry::cli {
namespace {

using namespace ferry::conv;

// A string of the model file, escaped for one line (text.h); `absent` when
// the field is not there.
std::string file_text(const flatbuffers::String* s, const char* absent) {
  return s ? escaped(s->str()) : std::string(absent);
}

// ", per row, scales [min, max] |s|" for a quantized tensor (its scales
// were checked by the loader).
std::string scale_summary(const ferry::fb::Model* m, const ferry::fb::Tensor* t) {
  if (t->scales() < 0 || !m->tensors() || static_cast<uint32_t>(t->scales()) >= m->tensors()->size()) return "";
  const auto* st = m->tensors()->Get(static_cast<uint32_t>(t->scales()));
  const uint8_t* p = m->weights()->data() + st->offset();
  const bool f32 = st->dtype() == ferry::fb::DType::F32;
  const uint64_t n = st->size() / (f32 ? 4 : 2);
  float lo = INFINITY, hi = 0;
  double sum = 0;
  for (uint64_t i = 0; i < n; ++i) {
    float v;
    if (f32) {
      std::memcpy(&v, p + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      v = ferry::layout::float_from_half(h);
    }
    v = std::fabs(v);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  char text[160];
  std::snprintf(text, sizeof text, ", %s, %llu scales (tensor %d) |s| in [%.3g, %.3g], mean %.3g",
                f32 ? "per row" : "groups of 32 k", static_cast<unsigned long long>(n), t->scales(), lo, hi,
                n ? sum / n : 0.0);
  return text;
}

void print_stats(const ferry::fb::ErrorStats* e) {
  if (!e) return;
  std::printf("accuracy %-10s %-4s max abs %.3g  rms %.3g  cosine %.6f\n", file_text(e->name(), "").c_str(),
              ferry::fb::EnumNameDType(e->dtype()), e->max_abs(), e->rms(), e->cosine());
}

void print_quantization(const ferry::fb::Quantization* q) {
  std::printf("quantize %s, measured against fp32 on %s%s\n", file_text(q->requested(), "?").c_str(),
              file_text(q->input(), "?").c_str(),
              q->max_error() > 0 ? (", --max-error " + std::to_string(q->max_error())).c_str() : "");
  if (q->layers()) {
    for (const auto* e : *q->layers()) print_stats(e);
  }
  print_stats(q->model());
  if (q->drift_steps()) {
    std::printf("drift    %u streamed steps: rms error %.3g over the first 1%%, %.3g over the last 1%%\n",
                q->drift_steps(), q->drift_start_rms(), q->drift_end_rms());
  }
}

// The hyper-parameters the conversion assumed (Provenance.assumptions).
std::vector<Assumption> stored_assumptions(const ferry::fb::Model* m) {
  std::vector<Assumption> out;
  if (!m->provenance() || !m->provenance()->assumptions()) return out;
  for (const auto* a : *m->provenance()->assumptions()) {
    out.push_back({file_text(a->layer(), ""), file_text(a->parameter(), ""), file_text(a->value(), ""),
                   file_text(a->override(), "")});
  }
  return out;
}

// A sequence output's layout as the runtime reads it (ferry_model_info).
int output_layout(const ferry_model* model) {
  ferry_model_info info{};
  info.struct_size = sizeof info;
  if (ferry_model_get_info(model, &info) != FERRY_OK) throw Error(std::string("model info: ") + ferry_last_error());
  return info.output_layout;
}
const char* runtime_layout_code(int layout) {  // a ferry_layout
  return layout == FERRY_LAYOUT_CHANNELS_FIRST ? "bft" : layout == FERRY_LAYOUT_BATCH_FIRST ? "btf" : "tbf";
}
const char* layout_text(int layout) {
  return layout == FERRY_LAYOUT_CHANNELS_FIRST ? "channels-first [B,F,T]"
         : layout == FERRY_LAYOUT_BATCH_FIRST  ? "batch-first [B,T,F]"
                                               : "time-major [T,B,F]";
}

// A layer's weight dtype ("F32", "F16", "I8", "I4"), read off its weight
// or first cell; null for a layer without weights.
nlohmann::ordered_json layer_dtype(const ferry::fb::Model* m, const ferry::fb::Layer* l) {
  int index = l->weight();
  if (index < 0 && l->cells() && l->cells()->size()) index = l->cells()->Get(0)->w_ih();
  if (index < 0 || !m->tensors() || static_cast<uint32_t>(index) >= m->tensors()->size()) return nullptr;
  return ferry::fb::EnumNameDType(m->tensors()->Get(static_cast<uint32_t>(index))->dtype());
}

// The model's user metadata, read through the C API (ferry_model_metadata_at).
nlohmann::ordered_json metadata_json(const ferry_model* model) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  const size_t n = ferry_model_metadata_count(model);
  for (size_t i = 0; i < n; ++i) {
    ferry_metadata e{};
    e.struct_size = sizeof e;
    check(ferry_model_metadata_at(model, i, &e), "metadata");
    nlohmann::ordered_json j;
    j["key"] = e.key;
    if (e.type == FERRY_METADATA_TEXT) {
      j["type"] = "text";
      j["text"] = std::string(e.text, e.text_bytes);
    } else {
      std::vector<double> v(e.count);
      check(ferry_model_metadata_numbers(model, e.key, v.data(), v.size()), "metadata");
      j["type"] = "numbers";
      j["shape"] = std::vector<size_t>(e.shape, e.shape + e.rank);
      j["values"] = v;
    }
    out.push_back(j);
  }
  return out;
}

// The same for people: one line an entry, text shown escaped up to 60
// bytes, numbers up to 8.
void print_metadata(const ferry_model* model) {
  for (const auto& e : metadata_json(model)) {
    const std::string key = e["key"];
    if (e["type"] == "text") {
      const std::string text = e["text"];
      std::printf("meta     %-16s text, %zu bytes: \"%s\"%s\n", key.c_str(), text.size(),
                  escaped(text.substr(0, 60)).c_str(), text.size() > 60 ? "..." : "");
      continue;
    }
    const auto& v = e["values"];
    std::string shape, values;
    for (size_t d = 0; d < e["shape"].size(); ++d) shape += (d ? ", " : "") + std::to_string(e["shape"][d].get<size_t>());
    for (size_t k = 0; k < v.size() && k < 8; ++k) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.9g", k ? ", " : "", v[k].get<double>());
      values += buf;
    }
    if (e["shape"].empty()) {
      std::printf("meta     %-16s %s\n", key.c_str(), values.c_str());
    } else {
      std::printf("meta     %-16s numbers [%s]: %s%s\n", key.c_str(), shape.c_str(), values.c_str(),
                  v.size() > 8 ? ", ..." : "");
    }
  }
}

int inspect_model(const std::string& path) {
  LoadedModel lm(path);
  const auto* m = ferry::fb::GetModel(lm.file.data());
  std::printf("%s: ferry model, format %u.%u, %zu bytes\n", path.c_str(), m->format_major(),
              m->format_minor(), lm.file.size());
  std::printf("input    %u features, %s\n", m->input_size(),
              m->channels_first() ? "channels-first [B,F,T]"
              : m->batch_first()  ? "batch-first [B,T,F]"
                                  : "time-major [T,B,F]");
  if (m->output_is_sequence()) {
    std::printf("output   %u features per time step, %s\n", m->output_size(), layout_text(output_layout(lm.model)));
  } else {
    std::printf("output   %u features ([B,F])\n", m->output_size());
  }
  std::printf("arena    %llu bytes for streaming at batch 1\n",
              static_cast<unsigned long long>(m->arena_bytes_stream_b1()));
  print_metadata(lm.model);
  const std::vector<BackendVerdict> verdicts = backends_for(lm.model);
  std::printf("backends  %s\n", backends_line(verdicts).c_str());
  for (const BackendVerdict& v : verdicts) {
    if (!v.runs) std::printf("          %s does not run it: %s\n", v.name.c_str(), v.reason.c_str());
  }
  for (uint32_t i = 0; i < m->layers()->size(); ++i) {
    const auto* l = m->layers()->Get(i);
    std::printf("layer %u  %-10s %-8s %u -> %u", i, file_text(l->name(), "").c_str(),
                ferry::fb::EnumNameLayerKind(l->kind()), l->input_size(), l->output_size());
    if (l->hidden_size()) {
      std::printf("  hidden %u, layers %u%s", l->hidden_size(), l->num_layers(),
                  l->bidirectional() ? ", bidirectional" : "");
      if (l->proj_size()) std::printf(", proj %u", l->proj_size());
    }
    std::printf("\n");
  }
  if (m->tensors()) {
    uint64_t bytes_by_dtype[4] = {};
    for (uint32_t i = 0; i < m->tensors()->size(); ++i) {
      const auto* t = m->tensors()->Get(i);
      std::string shape;
      for (uint32_t d = 0; t->shape() && d < t->shape()->size(); ++d)
        shape += (d ? ", " : "") + std::to_string(t->shape()->Get(d));
      std::printf("tensor %-3u %-28s %s [%s] %s @%llu, %llu bytes%s\n", i, file_text(t->name(), "").c_str(),
                  ferry::fb::EnumNameDType(t->dtype()), shape.c_str(), ferry::fb::EnumNameTensorLayout(t->layout()),
                  static_cast<unsigned long long>(t->offset()), static_cast<unsigned long long>(t->size()),
                  scale_summary(m, t).c_str());
      bytes_by_dtype[static_cast<size_t>(t->dtype())] += t->size();
    }
    std::printf("weights ");
    for (size_t d = 0; d < 4; ++d) {
      if (bytes_by_dtype[d]) {
        std::printf(" %s %llu bytes", ferry::fb::EnumNameDType(static_cast<ferry::fb::DType>(d)),
                    static_cast<unsigned long long>(bytes_by_dtype[d]));
      }
    }
    std::printf("\n");
  }
  if (const auto* q = m->quantization()) print_quantization(q);
  if (const auto* p = m->provenance()) {
    std::printf("source   %s (%s), sha256 %s\n", file_text(p->source_file(), "?").c_str(),
                file_text(p->source_format(), "?").c_str(),
                file_text(p->source_sha256(), "?").c_str());
    std::printf("made by  %s\n", file_text(p->converter_version(), "?").c_str());
    for (const std::string& line : assumption_lines(stored_assumptions(m))) std::printf("assumed  %s\n", line.c_str());
    if (p->mapping()) {
      for (const auto* r : *p->mapping()) {
        std::printf("map      %-32s -> %s %s\n", file_text(r->source_key(), "").c_str(),
                    r->layer() >= 0 ? ("layer " + std::to_string(r->layer())).c_str() : "ignored:",
                    file_text(r->role(), "").c_str());
      }
    }
  }
  return 0;
}

// The chain `ferry convert` takes from the file with no --graph, where the
// file records one (a .pt2 graph, TorchScript code, an nn.Sequential): its
// text and where it was read from, or why it cannot be read. Empty `from`:
// the file records no chain.
struct RecordedChainText {
  std::string chain, from, layout, not_read;
  std::vector<std::string> notes;
};

RecordedChainText recorded_chain_text(const Checkpoint& c, const ModuleSet& modules) {
  RecordedChainText out;
  if (c.export_graph) {
    out.from = "the exported graph";
    try {
      const ExportChain chain = export_chain(c);
      out.chain = chain.graph;
      out.layout = export_layout_text(chain.layout);
      out.notes = chain.notes;
    } catch (const Error& e) {
      out.not_read = e.what();
    }
  } else if (!c.module_objects.empty()) {
    const bool script = has_script_forward(c);
    out.from = script ? "the TorchScript code" : "the nn.Sequential's order";
    try {
      const RecordedChain r = script ? script_chain(c, modules) : sequential_chain(c, modules);
      static const char* const kLayouts[] = {"btf", "tbf", "bft", "bf"};
      out.chain = r.graph;
      if (r.layout) out.layout = kLayouts[static_cast<unsigned>(*r.layout)];
      out.notes = r.notes;
    } catch (const Error& e) {
      out.from = script ? "the TorchScript code" : "the pickled module";
      out.not_read = e.what();
    }
  }
  return out;
}

struct InspectOptions {
  std::string file, key, graph, layout, output_layout;
  std::vector<std::string> code;
  bool json = false, batch_first = false, memory = false, dot = false;
  size_t max_batch = 1, max_seq = 1;  // --memory's session
  CLI::Option *graph_opt = nullptr, *layout_opt = nullptr, *output_layout_opt = nullptr;
};

// `inspect --memory`: a model file's flash and a session's arena, per layer
// and per region, on the CPU backend's reference kernels (what a core
// without SIMD runs; the figure a --c-array header's macros give).
nlohmann::ordered_json memory_json(const LoadedModel& lm, size_t max_batch, size_t max_seq) {
  using nlohmann::ordered_json;
  const auto* m = ferry::fb::GetModel(lm.file.data());
  ferry_session_options options;
  ferry_session_options_init(&options);
  options.backend = FERRY_BACKEND_REFERENCE;
  options.max_batch = max_batch;
  options.max_seq = max_seq;
  ferry::ArenaParts parts;
  if (ferry::session_arena_parts(lm.model, &options, &parts) != FERRY_OK) {
    throw Error("--max-batch " + std::to_string(max_batch) + " --max-seq " + std::to_string(max_seq) + ": " +
                ferry_last_error());
  }
  ordered_json j;
  j["file"] = lm.file.size();
  uint64_t weights = 0;
  j["layers"] = ordered_json::array();
  for (uint32_t i = 0; m->layers() && i < m->layers()->size(); ++i) {
    const auto* l = m->layers()->Get(i);
    const uint64_t flash = layer_weight_bytes(m, l);
    weights += flash;
    ordered_json layer;
    layer["index"] = i;
    layer["name"] = file_text(l->name(), "");
    layer["kind"] = ferry::fb::EnumNameLayerKind(l->kind());
    layer["flash_bytes"] = flash;
    layer["state_bytes"] = uint64_t{ferry::layer_state_floats(lm.model, i)} * sizeof(float) * max_batch;
    layer["output_bytes"] = uint64_t{l->output_size()} * sizeof(float) * max_batch;
    j["layers"].push_back(layer);
  }
  j["weights_bytes"] = weights;
  j["other_file_bytes"] = lm.file.size() - std::min<uint64_t>(weights, lm.file.size());
  ordered_json arena;
  arena["max_batch"] = max_batch;
  arena["max_seq"] = max_seq;
  arena["bytes"] = parts.total;
  arena["portable_bytes"] = parts.portable;
  arena["pointer_width_bits"] = sizeof(void*) * 8;
  arena["regions"] = ordered_json::array();
  for (uint32_t r = 0; r < parts.region_count; ++r) {
    arena["regions"].push_back(ordered_json{{"name", parts.regions[r].name},
                                            {"bytes", parts.regions[r].bytes},
                                            {"depends_on_target", parts.regions[r].pointers}});
  }
  j["arena"] = arena;
  j["handle_bytes"] = ferry_model_handle_size();
  return j;
}

int inspect_memory(const InspectOptions& o) {
  LoadedModel lm(o.file);
  const nlohmann::ordered_json j = memory_json(lm, o.max_batch, o.max_seq);
  const auto num = [](const nlohmann::ordered_json& v) { return v.get<unsigned long long>(); };
  std::printf("%s: memory on the CPU backend with the reference kernels (what a core without SIMD runs)\n",
              o.file.c_str());
  std::printf("flash    %llu bytes: the model file, weights %llu, layers, self-test and provenance %llu\n",
              num(j["file"]), num(j["weights_bytes"]), num(j["other_file_bytes"]));
  std::printf("\nlayer                         flash   state  output   (bytes at max_batch %zu; state: kept between calls,\n"
              "                                                  output: its activations, in the shared buffers)\n",
              o.max_batch);
  for (const auto& l : j["layers"]) {
    const std::string label = std::to_string(num(l["index"])) + "  " + l["name"].get<std::string>() + " (" +
                              l["kind"].get<std::string>() + ")";
    std::printf("%-26s %8llu %7llu %7llu\n", label.c_str(), num(l["flash_bytes"]), num(l["state_bytes"]),
                num(l["output_bytes"]));
  }
  const auto& a = j["arena"];
  std::printf("\narena    %llu bytes at max_batch %zu, max_seq %zu on this machine (%u-bit)\n", num(a["bytes"]),
              o.max_batch, o.max_seq, static_cast<unsigned>(sizeof(void*) * 8));
  for (const auto& r : a["regions"]) {
    std::printf("  %-24s %8llu%s\n", r["name"].get<std::string>().c_str(), num(r["bytes"]),
                r["depends_on_target"].get<bool>() ? "  (holds pointers: its size depends on the target)" : "");
  }
  std::printf("handle   %llu bytes (ferry_model_handle_size(), this build's FERRY_MAX_CHAIN %u, FERRY_MAX_CELLS %u)\n",
              num(j["handle_bytes"]), static_cast<unsigned>(FERRY_MAX_CHAIN), static_cast<unsigned>(FERRY_MAX_CELLS));
  std::printf("A target's exact figures: `ferry convert ... --c-array model.h` (macros evaluated by its compiler).\n");
  return 0;
}

// What `ferry convert` would make of the checkpoint with the same options:
// the chain, both layouts, the layers and every hyper-parameter it would
// assume. Planned only: nothing is written. `error` says why it cannot be.
struct PlanView {
  std::optional<ConvertReport> report;
  std::string error;
};

// The conversion of the checkpoint that inspect's options describe, as
// `ferry convert` would make it with the same ones.
ConvertRequest checkpoint_request(const InspectOptions& o) {
  ConvertRequest request;
  request.input = o.file;
  request.key = o.key;
  if (o.graph_opt && o.graph_opt->count()) request.graph = o.graph;
  request.code = o.code;
  if (o.batch_first) request.batch_first = true;
  if (o.layout_opt && o.layout_opt->count()) request.layout = layout_named(o.layout);
  if (o.output_layout_opt && o.output_layout_opt->count()) request.output_layout = layout_named(o.output_layout);
  return request;
}

PlanView plan_checkpoint(const InspectOptions& o) {
  ConvertRequest request = checkpoint_request(o);
  request.plan_only = true;
  PlanView v;
  try {
    v.report = convert(request).report;
  } catch (const Error& e) {
    v.error = e.what();
  }
  return v;
}

// `inspect --json` of a checkpoint: opened and planned.
std::string checkpoint_json(const InspectOptions& o) {
  const std::string& path = o.file;
  LoadOptions load;
  load.key = o.key;
  const CheckpointInput input = open_checkpoint(path, load);
  const Checkpoint& c = input.checkpoint;
  const ModuleSet modules = group_modules(c);
  const RecordedChainText chain = recorded_chain_text(c, modules);
  const PlanView plan = plan_checkpoint(o);
  nlohmann::ordered_json j;
  j["file"] = path;
  j["kind"] = "checkpoint";
  j["form"] = c.form;
  j["bytes"] = input.bytes();
  j["sha256"] = input.sha256();
  j["files"] = nlohmann::ordered_json::array();
  for (const auto& [name, f] : input.files) j["files"].push_back({{"name", name}, {"bytes", f->size()}});
  j["tensors"] = nlohmann::ordered_json::array();
  for (const TensorRef& t : c.tensors) {
    j["tensors"].push_back({{"name", t.name},
                            {"dtype", dtype_name(t.dtype)},
                            {"shape", t.shape},
                            {"location", t.storage ? t.storage->location : ""},
                            {"bytes", static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype)},
                            {"storage", t.storage ? t.storage->key : ""},
                            {"offset", t.offset}});
  }
  j["attributes"] = c.attributes;
  j["folded"] = nlohmann::ordered_json::array();
  for (const auto& f : modules.folded) j["folded"].push_back({{"name", f->name}, {"from", f->derivation}});
  j["modules"] = nlohmann::ordered_json::array();
  for (const Module& m : modules.modules) j["modules"].push_back({{"path", m.path}, {"description", m.describe()}});
  j["ignored"] = nlohmann::ordered_json::array();
  for (const auto& [k, why] : modules.ignored) j["ignored"].push_back({{"name", k}, {"reason", why}});
  // (group_modules starts from the checkpoint's own ignored entries.)
  if (!chain.from.empty()) {
    j["recorded_chain"] = {{"from", chain.from}};
    if (chain.not_read.empty()) {
      j["recorded_chain"]["chain"] = chain.chain;
      j["recorded_chain"]["layout"] = chain.layout;
      j["recorded_chain"]["notes"] = chain.notes;
    } else {
      j["recorded_chain"]["not_read"] = chain.not_read;
    }
  }
  // JSON escapes control characters itself; a byte that is not UTF-8
  // (a name the file holds) becomes U+FFFD rather than an exception.
  if (plan.report) {
    j["plan"] = plan_json(*plan.report);
  } else {
    j["plan"] = {{"not_planned", plan.error}};
  }
  return j.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

int inspect_checkpoint(const InspectOptions& o) {
  const std::string& path = o.file;
  LoadOptions load;
  load.key = o.key;
  const CheckpointInput input = open_checkpoint(path, load);
  const Checkpoint& c = input.checkpoint;
  const ModuleSet modules = group_modules(c);
  const RecordedChainText chain = recorded_chain_text(c, modules);
  const PlanView plan = plan_checkpoint(o);
  std::printf("%s: %s, %llu bytes%s, sha256 %s\n", path.c_str(), escaped(c.form).c_str(),
              static_cast<unsigned long long>(input.bytes()), input.directory ? " read" : "", input.sha256().c_str());
  if (input.directory) {
    for (const auto& [name, f] : input.files)
      std::printf("file     %-24s %llu bytes\n", name.c_str(), static_cast<unsigned long long>(f->size()));
  }
  std::printf("%-40s %-9s %-16s %-8s %10s  %s\n", "tensor", "dtype", "shape", "location", "bytes", "storage");
  for (const TensorRef& t : c.tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
    std::printf("%-40s %-9s %-16s %-8s %10llu  %s%s\n", escaped(t.name).c_str(), dtype_name(t.dtype),
                dims_text(t.shape).c_str(), t.storage ? escaped(t.storage->location).c_str() : "-",
                static_cast<unsigned long long>(bytes), t.storage ? escaped(t.storage->key).c_str() : "-",
                t.offset ? (" +" + std::to_string(t.offset)).c_str() : "");
  }
  // Names and values from the file, escaped: one line each, whatever they hold.
  for (const auto& [k, v] : c.attributes) std::printf("attr     %s = %s\n", escaped(k).c_str(), escaped(v).c_str());
  for (const auto& f : modules.folded)
    std::printf("folded   %s = %s\n", escaped(f->name).c_str(), escaped(f->derivation).c_str());
  for (const Module& m : modules.modules)
    std::printf("module   %-20s %s\n", escaped(m.path).c_str(), escaped(m.describe()).c_str());
  for (const auto& [k, why] : modules.ignored) std::printf("ignored  %s (%s)\n", escaped(k).c_str(), escaped(why).c_str());
  if (!chain.from.empty() && chain.not_read.empty()) {
    std::printf("chain    %s  (read from %s%s%s)\n", escaped(chain.chain).c_str(), chain.from.c_str(),
                chain.layout.empty() ? "" : "; input ", chain.layout.c_str());
    for (const std::string& note : chain.notes) std::printf("note     %s\n", escaped(note).c_str());
  } else if (!chain.from.empty()) {
    std::printf("chain    not read from %s: %s\n", chain.from.c_str(), chain.not_read.c_str());
  }
  if (plan.report) {
    const ConvertReport& r = *plan.report;
    std::printf("plan     %s  (%s)\n", escaped(r.graph).c_str(),
                !r.graph_inferred                                 ? "--graph"
                : r.code && !r.code->element_sources.empty()      ? "read from the forward of --code's class"
                : chain.from.empty() || !chain.not_read.empty()   ? "inferred"
                                                                  : "read from the file");
    std::printf("plan     input %s (%s)", input_layout_code(r).c_str(), escaped(r.batch_first_source).c_str());
    if (r.output_layout) std::printf(", output %s (%s)", layout_code(*r.output_layout), escaped(r.output_layout_source).c_str());
    std::printf("\n");
    if (r.code) {
      std::printf("code     class %s\n", escaped(r.code->class_text()).c_str());
      for (const auto& l : r.code->layers)
        std::printf("code     %-20s %s  (%s)\n", escaped(l[0].empty() ? "root" : l[0]).c_str(), escaped(l[1]).c_str(),
                    escaped(l[2]).c_str());
      for (const auto& [element, where] : r.code->chain(r.graph))
        std::printf("chain    %-20s %s\n", escaped(element).c_str(), escaped(where).c_str());
      for (const std::string& n : r.notes) std::printf("note     %s\n", escaped(n).c_str());
    }
    for (const std::string& line : assumption_lines(r.assumptions)) std::printf("assumed  %s\n", escaped(line).c_str());
  } else {
    std::printf("plan     not planned: %s\n", plan.error.c_str());
  }
  return 0;
}

// A ferry model file (its FlatBuffers identifier), not a checkpoint.
bool is_model_file(const std::string& path) {
  if (is_directory(path)) return false;  // a directory is a distributed checkpoint
  MappedFile f(path);
  return f.size() >= 8 && std::memcmp(f.data() + 4, ferry::fb::ModelIdentifier(), 4) == 0;
}

// `inspect --json`: a model file's summary or a checkpoint's.
// --memory reads a model file only.
void check_memory_file(const InspectOptions& o) {
  if (o.memory && !is_model_file(o.file)) {
    throw UsageError("--memory reads a model file (.fb): convert the checkpoint first");
  }
}

std::string json_text(const InspectOptions& o) {
  if (o.dot) throw UsageError("--dot prints a Graphviz graph, not JSON: run `ferry inspect FILE --dot`");
  check_memory_file(o);
  if (o.memory) {
    LoadedModel lm(o.file);
    return memory_json(lm, o.max_batch, o.max_seq)
        .dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  if (!is_model_file(o.file)) return checkpoint_json(o);
  LoadedModel lm(o.file);
  return model_json(lm.model, lm.file.data(), lm.file.size(), o.file);
}

// `inspect --dot`: a model file's chain, or the chain a checkpoint converts
// to (converted in memory with the same options, nothing written).
int inspect_dot(const InspectOptions& o) {
  const std::string title = basename_of(o.file);
  if (is_model_file(o.file)) {
    LoadedModel lm(o.file);  // verified: the graph reads only checked fields
    std::printf("%s", model_dot(ferry::fb::GetModel(lm.file.data()), title).c_str());
    return 0;
  }
  ConvertRequest request = checkpoint_request(o);
  request.selftest = SelfTestPolicy::Never;
  const ConvertResult r = convert(request);
  std::printf("%s", model_dot(ferry::fb::GetModel(r.bytes.data()), title + " (" + r.report.graph + ")").c_str());
  return 0;
}

int run_inspect(const InspectOptions& o) {
  check_memory_file(o);
  if (o.dot) return inspect_dot(o);
  if (o.json) {
    std::printf("%s\n", json_text(o).c_str());
    return 0;
  }
  if (o.memory) return inspect_memory(o);
  return is_model_file(o.file) ? inspect_model(o.file) : inspect_checkpoint(o);
}

}  // namespace

std::string model_json(const ferry_model* model, const uint8_t* bytes, size_t size, const std::string& file) {
  using nlohmann::ordered_json;
  const auto* m = ferry::fb::GetModel(bytes);
  ferry_model_info info{};
  info.struct_size = sizeof info;
  if (ferry_model_get_info(model, &info) != FERRY_OK) throw Error(std::string("model info: ") + ferry_last_error());
  ordered_json j;
  j["file"] = file;
  j["format"] = std::to_string(m->format_major()) + "." + std::to_string(m->format_minor());
  j["bytes"] = size;
  j["input_size"] = m->input_size();
  j["output_size"] = m->output_size();
  j["layout"] = m->channels_first() ? "bft" : m->batch_first() ? "btf" : "tbf";
  j["output_is_sequence"] = m->output_is_sequence();
  j["output_layout"] = m->output_is_sequence() ? ordered_json(runtime_layout_code(info.output_layout)) : ordered_json(nullptr);
  j["layers"] = ordered_json::array();
  for (uint32_t i = 0; i < m->layers()->size(); ++i) {
    const auto* l = m->layers()->Get(i);
    ordered_json e;
    e["kind"] = ferry::fb::EnumNameLayerKind(l->kind());
    e["name"] = file_text(l->name(), "");
    e["in"] = l->input_size();
    e["out"] = l->output_size();
    e["dtype"] = layer_dtype(m, l);
    if (l->hidden_size()) {
      e["hidden"] = l->hidden_size();
      e["num_layers"] = l->num_layers();
      e["bidirectional"] = l->bidirectional();
      e["proj"] = l->proj_size();
    }
    j["layers"].push_back(e);
  }
  const std::vector<BackendVerdict> verdicts = backends_for(model);
  j["backends"] = ordered_json::array();
  j["backend_detail"] = ordered_json::array();
  for (const BackendVerdict& v : verdicts) {
    if (v.runs) j["backends"].push_back(v.name);
    j["backend_detail"].push_back({{"name", v.name}, {"runs", v.runs}, {"note", v.note}, {"reason", v.reason}});
  }
  j["assumptions"] = ordered_json::array();
  for (const Assumption& a : stored_assumptions(m)) {
    j["assumptions"].push_back({{"layer", a.layer}, {"parameter", a.parameter}, {"value", a.value}, {"override", a.override}});
  }
  // (Added after the keys above: scripts that read those are unaffected.)
  j["input_is_tokens"] = info.input_is_tokens != 0;
  j["has_time_axis"] = info.has_time_axis != 0;
  j["streamable"] = info.streamable != 0;
  j["min_seq"] = info.min_seq;
  j["state_floats"] = info.state_floats;
  j["arena_bytes_stream_b1"] = m->arena_bytes_stream_b1();
  j["selftest"] = m->selftest() != nullptr;
  j["metadata"] = metadata_json(model);
  if (const auto* p = m->provenance()) {
    j["provenance"] = {{"source_file", file_text(p->source_file(), "")},
                       {"source_format", file_text(p->source_format(), "")},
                       {"source_sha256", file_text(p->source_sha256(), "")},
                       {"converter_version", file_text(p->converter_version(), "")}};
  } else {
    j["provenance"] = nullptr;
  }
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

namespace {

// inspect's positionals and options, declared once: on the CLI's
// subcommand and on the App inspect_json() parses with.
std::shared_ptr<InspectOptions> declare_inspect_options(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  app.footer(
      "A checkpoint: its form, every tensor (dtype, shape, location, bytes, storage), the hyper-parameters it\n"
      "records, the modules they make, what is ignored, and the plan `ferry convert` would make of it with the\n"
      "same --graph / --layout / --batch-first / --output-layout: the chain, both layouts and every\n"
      "hyper-parameter it would assume. A model file: its layers, tensors, sizes, arena size, provenance (with\n"
      "what the conversion assumed) and the backends that run it; with --memory, where its flash and RAM go,\n"
      "per layer and per arena region.");
  app.add_option("FILE", o->file, "A checkpoint (a file or a DCP directory) or a model file")
      ->type_name("PATH")
      ->required();
  app.add_option("--key", o->key, "The entry of a checkpoint dict that holds the model")->type_name("NAME");
  auto* json = app.add_flag("--json", o->json, "Print one JSON object instead of text");
  app.add_flag("--dot", o->dot,
               "Print the chain as a Graphviz digraph (dot -Tsvg renders it); a checkpoint's as convert would make it")
      ->excludes(json);
  auto* memory = app.add_flag("--memory", o->memory,
                              "A model file: its flash and a session's arena per layer and per region (reference "
                              "kernels)");
  app.add_option("--max-batch", o->max_batch, "With --memory: the session's max_batch")
      ->type_name("B")
      ->check(positive_count(1 << 24))
      ->needs(memory)
      ->capture_default_str();
  app.add_option("--max-seq", o->max_seq, "With --memory: the session's max_seq")
      ->type_name("T")
      ->check(positive_count(1 << 30))
      ->needs(memory)
      ->capture_default_str();
  app.add_option("--code", o->code,
                 "A checkpoint: plan with the model's Python source, as convert would, and show what was read")
      ->type_name("FILE[:CLASS]");
  o->graph_opt = app.add_option("--graph", o->graph, "A checkpoint: plan with this layer chain, as convert would")
                     ->type_name("SPEC");
  auto* batch_first = app.add_flag("--batch-first", o->batch_first, "A checkpoint: plan with a [batch, time, features] input");
  o->layout_opt = app.add_option("--layout", o->layout, "A checkpoint: plan with this input layout")
                      ->check(CLI::IsMember({"btf", "tbf", "bft"}))
                      ->type_name("btf|tbf|bft")
                      ->excludes(batch_first);
  o->output_layout_opt = app.add_option("--output-layout", o->output_layout,
                                        "A checkpoint: plan with this layout of a sequence output")
                             ->check(CLI::IsMember({"btf", "tbf", "bft"}))
                             ->type_name("btf|tbf|bft");
  return o;
}

}  // namespace

Action declare_inspect(CLI::App& app) {
  std::shared_ptr<InspectOptions> o = declare_inspect_options(app);
  return [o] { return run_inspect(*o); };
}

std::string inspect_json(const std::vector<std::string>& args) {
  CLI::App app("", "inspect");
  std::shared_ptr<InspectOptions> o = declare_inspect_options(app);
  parse_words(app, args);
  return json_text(*o);
}

}  // namespace ferry::cli
