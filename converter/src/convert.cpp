#include "convert.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <optional>
#include <set>

#include "checkpoint/checkpoint.h"
#include "error.h"
#include "io/mapped_file.h"
#include "io/sha256.h"
#include "mapping/export_chain.h"
#include "mapping/graph.h"
#include "mapping/modules.h"
#include "mapping/python_model.h"
#include "mapping/script_chain.h"
#include "mapping/sequential_chain.h"
#include "plan/planner.h"
#include "plan/selftest_plan.h"
#include "text.h"

namespace ferry::conv {
namespace {

// The checkpoint, open for the writer's in-kernel copies.
class SourceFd {
 public:
  explicit SourceFd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  }
  ~SourceFd() { ::close(fd_); }
  SourceFd(const SourceFd&) = delete;
  SourceFd& operator=(const SourceFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// The planner's layout for the input layout a .pt2 graph records.
std::optional<Layout> plan_layout(ExportInputLayout layout) {
  switch (layout) {
    case ExportInputLayout::kBatchFirst: return Layout::kBatchFirst;
    case ExportInputLayout::kTimeMajor: return Layout::kTimeMajor;
    case ExportInputLayout::kChannelsFirst: return Layout::kChannelsFirst;
    case ExportInputLayout::kNone: break;
  }
  return std::nullopt;
}

Layout layout_of(InputLayout l) {
  switch (l) {
    case InputLayout::kTBF: return Layout::kTimeMajor;
    case InputLayout::kBFT: return Layout::kChannelsFirst;
    default: return Layout::kBatchFirst;
  }
}

// The chain a forward records: TorchScript code, or the Python source
// --code gave (`code`), else a whole pickled nn.Sequential's children.
RecordedChain read_chain(const Checkpoint& checkpoint, const ModuleSet& modules, const CodeModel* code) {
  if (code || has_script_forward(checkpoint)) return script_chain(checkpoint, modules, code ? &code->program : nullptr);
  return sequential_chain(checkpoint, modules);
}

// The chain the file records (TorchScript code, a whole pickled
// nn.Sequential), or nullopt where it records none and the state dict alone
// decides (infer_graph: one module, recurrent modules stacked). TorchScript
// code or an nn.Sequential that cannot be read is refused, naming the file
// (and the record and line), with a --graph to pass: the file says what the
// model computes, and a chain the state dict suggests could differ from it.
// A pickled module that is not an nn.Sequential records no forward at all:
// like a state dict, it is refused only where the state dict is ambiguous.
std::optional<RecordedChain> recorded_chain(const std::string& path, const Checkpoint& checkpoint,
                                            const ModuleSet& modules, const CodeModel* code) {
  if (checkpoint.module_objects.empty()) return std::nullopt;
  const bool script = has_script_forward(checkpoint);
  const bool records = script || is_sequential_class(checkpoint.module_objects[0].class_name);
  try {
    return read_chain(checkpoint, modules, code);
  } catch (const Error& e) {
    std::string suggestion;
    try {
      const std::vector<GraphElement> chain = infer_graph(modules, recorded_order(checkpoint, modules));
      if (!records) return std::nullopt;
      suggestion = "pass --graph, for example --graph \"" + format_graph(chain) + "\"";
    } catch (const Error& s) {
      suggestion = s.what();
    }
    if (code)
      throw Error(std::string(e.what()) + " (reading the forward of " + code->class_name + " for " + path +
                  "); " + suggestion + " and --layout");
    throw Error(path + ": " +
                (script ? "cannot read the layer chain from the TorchScript forward code ("
                        : "cannot read the layer chain from the pickled module (") +
                e.what() + "); " + suggestion);
  }
}

}  // namespace

std::string ConvertReport::CodeRead::class_text() const {
  return class_name + " (" + class_where + ")" + (root_path.empty() ? "" : "  under '" + root_path + "'");
}

std::vector<std::pair<std::string, std::string>> ConvertReport::CodeRead::chain(const std::string& graph) const {
  std::vector<std::pair<std::string, std::string>> out;
  const std::vector<GraphElement> elements = parse_graph(graph);
  for (size_t i = 0; i < elements.size() && i < element_sources.size(); ++i)
    out.emplace_back(format_graph({elements[i]}), element_sources[i]);
  return out;
}

ConvertResult convert(const ConvertRequest& request) {
  const auto stage = [&request](const std::string& what) {
    if (request.stage) request.stage(what);
  };
  // --meta first: a mistake there is reported before any long work.
  std::vector<MetaValue> metadata;
  for (const std::string& word : request.metadata) metadata.push_back(parse_meta(word));
  check_meta(metadata);
  stage("reading " + request.input);
  LoadOptions load;
  load.key = request.key;
  // A file, or a distributed checkpoint directory (checkpoint/dcp.h).
  const CheckpointInput input = open_checkpoint(request.input, load);
  const MappedFile* file = input.file.get();  // null for a directory
  // --code: the checkpoint with the model class's modules and options
  // written in, as a whole pickled module records them.
  Checkpoint with_code;
  std::optional<CodeModel> code;
  ModuleSet modules = group_modules(input.checkpoint);
  if (!request.code.empty()) {
    if (input.checkpoint.export_graph || has_script_forward(input.checkpoint))
      throw Error(request.input + ": " + input.checkpoint.form + " records its forward itself (" +
                  (input.checkpoint.export_graph ? "an exported graph" : "TorchScript code") +
                  "): convert it without --code");
    stage("reading " + request.code.front() + (request.code.size() > 1 ? " and the other --code files" : ""));
    with_code = input.checkpoint;
    CodeOptions code_options;
    code_options.layout_given = request.layout.has_value() || request.batch_first.has_value();
    code_options.graph_given = request.graph.has_value();
    if (request.batch_first) code_options.batch_first = *request.batch_first;
    if (request.layout == Layout::kBatchFirst) code_options.batch_first = true;
    if (request.layout == Layout::kTimeMajor) code_options.batch_first = false;
    code = read_model_code(request.code, with_code, modules, code_options);
    modules = group_modules(with_code);
  }
  const Checkpoint& checkpoint = code ? with_code : input.checkpoint;
  PlanOptions plan_options;
  plan_options.graph = request.graph;
  plan_options.batch_first = request.batch_first;
  plan_options.layout = request.layout;
  plan_options.output_layout = request.output_layout;
  std::vector<std::string> chain_notes;
  std::optional<ConvertReport::CodeRead> code_read;
  if (checkpoint.export_graph) {
    // .pt2: the chain and the input layout its graph records. With --graph
    // the user's chain is used and the weights alone are needed; the layout
    // is still taken from the graph where it reads.
    plan_options.recorded_layout_source = "recorded in the file (the axes its graph's ops take)";
    plan_options.recorded_output_layout_source = "recorded in the file: the axes of its graph's output";
    if (!request.graph) {
      const ExportChain chain = export_chain(checkpoint);
      plan_options.inferred_graph = chain.graph;
      plan_options.recorded_layout = plan_layout(chain.layout);
      if (chain.output_layout) plan_options.recorded_output_layout = plan_layout(*chain.output_layout);
      chain_notes = chain.notes;
    } else {
      try {
        const ExportChain chain = export_chain(checkpoint);
        plan_options.recorded_layout = plan_layout(chain.layout);
        if (chain.output_layout) plan_options.recorded_output_layout = plan_layout(*chain.output_layout);
      } catch (const Error&) {
        // The graph does not read (a core-ATen graph, an op ferry does not
        // run): --graph and the flags say everything.
      }
    }
  } else {
    // TorchScript code, a whole pickled nn.Sequential: the chain it records.
    std::optional<RecordedChain> recorded;
    if (!request.graph) {
      recorded = recorded_chain(request.input, checkpoint, modules, code ? &*code : nullptr);
      if (recorded) {
        plan_options.inferred_graph = recorded->graph;
        chain_notes = recorded->notes;
      }
    } else if (!checkpoint.module_objects.empty()) {
      // A --graph of the user's: the input layout is still the file's to say
      // (a traced module records batch_first only in its code), where it reads.
      try {
        recorded = read_chain(checkpoint, modules, code ? &*code : nullptr);
      } catch (const Error&) {
      }
    }
    const std::string code_source = code ? "read from the forward of " + code->class_name + " (" + code->class_where + ")"
                                         : std::string();
    if (recorded && recorded->layout) {
      plan_options.recorded_layout = layout_of(*recorded->layout);
      plan_options.recorded_layout_source = code ? code_source
                                            : has_script_forward(checkpoint) ? "read from the TorchScript code"
                                                                             : "what the nn.Sequential's layers take";
    }
    if (recorded && recorded->output_layout) {
      plan_options.recorded_output_layout = layout_of(*recorded->output_layout);
      plan_options.recorded_output_layout_source = code ? code_source + ": the axes it returns"
                                                        : "read from the TorchScript code: the axes it returns";
    }
    if (code) {
      ConvertReport::CodeRead read;
      read.class_name = code->class_name;
      read.class_where = code->class_where;
      read.root_path = code->root_path;
      for (const CodeModel::Layer& l : code->layers) read.layers.push_back({l.path, l.constructor, l.where});
      if (recorded && !request.graph) read.element_sources = recorded->sources;
      code_read = std::move(read);
      chain_notes.insert(chain_notes.begin(), code->notes.begin(), code->notes.end());
    }
  }
  PlanResult planned = plan_conversion(checkpoint, modules, plan_options, file);
  planned.notes.insert(planned.notes.end(), chain_notes.begin(), chain_notes.end());
  ModelPlan& plan = planned.plan;
  if (code)
    for (const CodeModel::Default& d : code->defaults) plan.assumptions.push_back({d.layer, d.parameter, d.value, d.override});
  plan.source_file = basename_of(request.input);
  // Hashed on a second core beside the weights, joined once they are written.
  std::future<std::string> sha256;
  if (!request.plan_only) {
    sha256 = std::async(std::launch::async, [&input] { return input.sha256(); });
    plan.source_sha256_async = [&sha256] { return sha256.get(); };
  }
  plan.source_format = checkpoint.form + (code ? ", chain from " + code->class_name + " in " +
                                                         code->class_where.substr(0, code->class_where.rfind(':'))
                                              : std::string());
  plan.converter_version = std::string("ferry ") + FERRY_VERSION_STRING;
  plan.metadata = metadata;

  ConvertResult result;
  ConvertReport& report = result.report;
  report.input_bytes = input.bytes();
  report.form = checkpoint.form;
  for (const MetaValue& v : metadata) report.metadata.emplace_back(v.key, describe_meta(v));
  report.tensor_count = checkpoint.tensors.size();
  std::set<std::string> locations;
  for (const TensorRef& t : checkpoint.tensors)
    if (t.storage) locations.insert(t.storage->location);
  report.storage_locations.assign(locations.begin(), locations.end());
  report.graph = planned.graph;
  report.graph_inferred = planned.graph_inferred;
  report.batch_first = plan.batch_first;
  report.channels_first = plan.channels_first;
  report.input_is_tokens = plan.input_is_tokens;
  report.batch_first_source = planned.batch_first_source;
  report.output_is_sequence = plan.output_is_sequence;
  report.output_layout = plan.output_layout;
  report.output_layout_source = planned.output_layout_source;
  for (const LayerPlan& l : plan.layers) {
    const Module* m = modules.find(l.name);
    report.layers.push_back({l.name, m ? m->describe() : "", l.input_size, l.output_size});
  }
  for (const MappingRow& r : plan.mapping)
    if (r.layer < 0) report.ignored.emplace_back(r.source_key, r.role);
  for (const auto& f : modules.folded) report.folded.push_back(f->name + " = " + f->derivation);
  report.notes = planned.notes;
  report.assumptions = plan.assumptions;
  report.code = std::move(code_read);
  for (const TensorPlan& t : plan.tensors) report.weight_bytes += t.numel() * sizeof(float);
  if (request.plan_only) {
    if (request.on_plan) request.on_plan(report);
    return result;
  }
  report.selftest_stored = request.selftest == SelfTestPolicy::Always ||
                           (request.selftest == SelfTestPolicy::Auto && report.weight_bytes <= kAutoSelfTestWeightBytes);
  if (plan.input_is_tokens && report.selftest_stored) {
    // ferry_selftest feeds float vectors; a token model's input is ids.
    report.selftest_stored = false;
    report.notes.push_back("a model taking token ids stores no self-test vectors");
  }
  if (report.selftest_stored) {
    plan_selftest(plan);
  } else if (request.selftest == SelfTestPolicy::Auto) {
    report.notes.push_back(std::to_string(report.weight_bytes >> 20) +
                           " MiB of weights: self-test vectors not stored (pass --selftest to store them)");
  }
  if (request.on_plan) request.on_plan(report);
  if (request.quantize.dtype != DType::F32) {
    QuantizeRequest quantize = request.quantize;
    if (request.stage) quantize.stage = [&stage](const std::string& what) { stage("quantizing: " + what); };
    QuantizeOutcome q = quantize_plan(plan, quantize);
    report.precisions = std::move(q.precisions);
    report.fallback_moves = std::move(q.decisions);
    report.quantization = plan.quantization;
  }

  // A one-file checkpoint is open for the writer's in-kernel copies (a
  // directory's tensors are converted element by element: no source_offset).
  stage("writing " + (request.output.empty() ? std::string("the model") : request.output));
  std::optional<SourceFd> source;
  if (file) source.emplace(request.input);
  WriteOptions write;
  write.path = request.output;
  write.source_fd = source ? source->get() : -1;
  write.c_array_path = request.c_array;
  for (size_t b : request.c_array_batches.empty() ? std::vector<size_t>{1} : request.c_array_batches) {
    for (size_t t : request.c_array_seqs.empty() ? std::vector<size_t>{1} : request.c_array_seqs) {
      if (b != 1 || t != 1) write.c_array_arenas.emplace_back(b, t);
    }
  }
  write.c_array_source = basename_of(request.input) +
                         (request.output.empty() ? "" : " (as " + basename_of(request.output) + ")");
  write.progress = request.progress;
  WrittenModel written = write_model(plan, write);
  report.file_bytes = written.file_bytes;
  report.stored_weight_bytes = written.stored_weight_bytes;
  report.arena_bytes = written.arena_bytes;
  report.c_array_name = written.c_array_name;
  result.bytes = std::move(written.bytes);
  return result;
}

}  // namespace ferry::conv
