// Test helpers that write torch.export archives (.pt2) in memory, in the
// three layouts torch has used (PYTORCH_FORMAT.md §8), on top of
// pt_builder.h's zip writer and torch.save pickles:
//
//   GraphWriter     a graph JSON (schema 8.x) node by node, with the one-key
//                   unions torch writes ({"as_tensor": {"name": ..}}, ...)
//   RawTensor       one FQN of a weights config (layout c)
//   pt2_raw()       layout (c): <root>/models/model.json, data/weights/
//                   model_weights_config.json + raw records
//   pt2_torch_save()  layout (b): data/weights/model.pt, a torch.save zip
//   pt2_legacy()    layout (a): root-level serialized_*.pt, no folder
//   state_dict_zip()  the torch.save zip of (a) and (b), from the same
//                   storages and views as (c)
// Permissive on purpose: the catalogue and the tests build broken files too.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "pt_builder.h"

namespace ferry::test {

using ojson = nlohmann::ordered_json;

// Argument unions.
inline ojson arg_tensor(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
inline ojson arg_tensors(const std::vector<std::string>& names) {
  ojson list = ojson::array();
  for (const std::string& n : names) list.push_back({{"name", n}});
  return {{"as_tensors", list}};
}
inline ojson arg_int(int64_t v) { return {{"as_int", v}}; }
inline ojson arg_ints(const std::vector<int64_t>& v) { return {{"as_ints", v}}; }
inline ojson arg_float(double v) { return {{"as_float", v}}; }
inline ojson arg_bool(bool v) { return {{"as_bool", v}}; }
inline ojson arg_string(const std::string& v) { return {{"as_string", v}}; }
inline ojson arg_none() { return {{"as_none", true}}; }

inline ojson sym_ints(const std::vector<int64_t>& v) {
  ojson list = ojson::array();
  for (int64_t x : v) list.push_back({{"as_int", x}});
  return list;
}

inline ojson tensor_meta(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, int64_t offset = 0,
                         int dtype = 7) {
  return {{"dtype", dtype},
          {"sizes", sym_ints(sizes)},
          {"requires_grad", false},
          {"device", {{"type", "cuda"}, {"index", 0}}},
          {"strides", sym_ints(strides)},
          {"storage_offset", {{"as_int", offset}}},
          {"layout", 7}};
}

// A graph JSON, written node by node.
class GraphWriter {
 public:
  GraphWriter& parameter(const std::string& value, const std::string& fqn) {
    return state_input(value, {{"parameter", {{"arg", {{"name", value}}}, {"parameter_name", fqn}}}});
  }
  GraphWriter& buffer(const std::string& value, const std::string& fqn) {
    return state_input(value, {{"buffer", {{"arg", {{"name", value}}}, {"buffer_name", fqn}, {"persistent", true}}}});
  }
  GraphWriter& input(const std::string& name, const std::vector<int64_t>& sizes) {
    inputs_.push_back(arg_tensor(name));
    specs_.push_back({{"user_input", {{"arg", arg_tensor(name)}}}});
    values_[name] = tensor_meta(sizes, contiguous_strides(sizes));
    return *this;
  }
  // `module`: the innermost nn_module_stack entry ("" for the top level).
  GraphWriter& node(const std::string& target, const std::vector<std::string>& outputs,
                    const std::vector<std::pair<std::string, ojson>>& args, const std::string& module = "",
                    const std::string& cls = "") {
    ojson inputs = ojson::array();
    for (const auto& [name, a] : args) inputs.push_back({{"name", name}, {"arg", a}, {"kind", 1}});
    ojson outs = ojson::array();
    for (const std::string& o : outputs) outs.push_back(arg_tensor(o));
    std::string stack = "L__self__,,__main__.Net";
    if (!module.empty()) stack += ";L__self__" + module + "," + module + "," + cls;
    nodes_.push_back({{"target", "torch.ops." + target},
                      {"inputs", inputs},
                      {"outputs", outs},
                      {"metadata", {{"nn_module_stack", stack}}},
                      {"name", outputs.empty() ? target : outputs[0]}});
    return *this;
  }
  GraphWriter& output(const std::string& name) {
    outputs_.push_back(arg_tensor(name));
    out_specs_.push_back({{"user_output", {{"arg", arg_tensor(name)}}}});
    return *this;
  }
  ojson& last_node() { return nodes_.back(); }

  ojson doc(int major = 8, int minor = 17) const {
    return {{"graph_module",
             {{"graph",
               {{"inputs", inputs_},
                {"outputs", outputs_},
                {"nodes", nodes_},
                {"tensor_values", values_},
                {"sym_int_values", ojson::object()},
                {"sym_bool_values", ojson::object()},
                {"sym_float_values", ojson::object()},
                {"custom_obj_values", ojson::object()},
                {"is_single_tensor_return", false}}},
              {"signature", {{"input_specs", specs_}, {"output_specs", out_specs_}}},
              {"module_call_graph", ojson::array()}}},
            {"opset_version", {{"aten", 10}}},
            {"range_constraints", ojson::object()},
            {"schema_version", {{"major", major}, {"minor", minor}}},
            {"verifiers", {"TRAINING"}},
            {"torch_version", "2.11.0"}};
  }
  std::string text(int major = 8, int minor = 17) const { return doc(major, minor).dump(); }

 private:
  GraphWriter& state_input(const std::string& value, ojson spec) {
    inputs_.push_back(arg_tensor(value));
    specs_.push_back(std::move(spec));
    return *this;
  }

  ojson inputs_ = ojson::array(), specs_ = ojson::array(), nodes_ = ojson::array();
  ojson outputs_ = ojson::array(), out_specs_ = ojson::array(), values_ = ojson::object();
};

// One FQN of a weights config: a view of the raw record `path`.
struct RawTensor {
  std::string fqn, path;
  std::vector<int64_t> sizes, strides;  // strides empty: contiguous
  int64_t offset = 0;
  int dtype = 7;
  bool is_param = true;
};

inline std::string weights_config(const std::vector<RawTensor>& tensors) {
  ojson config = ojson::object();
  for (const RawTensor& t : tensors) {
    config[t.fqn] = {{"path_name", t.path},
                     {"is_param", t.is_param},
                     {"use_pickle", false},
                     {"tensor_meta", tensor_meta(t.sizes, t.strides.empty() ? contiguous_strides(t.sizes) : t.strides,
                                                 t.offset, t.dtype)}};
  }
  return ojson{{"config", config}}.dump();
}

// Layout (c), torch 2.9+: raw records under data/weights/.
inline Bytes pt2_raw(const std::string& graph, const std::string& config,
                     const std::vector<std::pair<std::string, Bytes>>& records, const std::string& root = "model",
                     const std::string& byteorder = "little",
                     const std::string& constants_config = R"({"config": {}})") {
  ZipBuilder z;
  for (const auto& [path, data] : records) z.add(root + "/data/weights/" + path, data);
  z.add(root + "/data/weights/model_weights_config.json", bytes_of(config));
  z.add(root + "/data/constants/model_constants_config.json", bytes_of(constants_config));
  z.add(root + "/models/model.json", bytes_of(graph));
  z.add(root + "/data/sample_inputs/model.pt", bytes_of("not read: sample inputs are skipped"));
  z.add(root + "/archive_format", bytes_of("pt2"));
  z.add(root + "/archive_version", bytes_of("0"));
  z.add(root + "/.data/version", bytes_of("6\n"));
  z.add(root + "/byteorder", bytes_of(byteorder));
  return z.finish();
}

// The torch.save zip of a state dict whose tensors view `storages` (one
// FloatStorage / LongStorage per record, named by its index) as `tensors`
// say: the (a) and (b) form of the same weights as (c).
inline Bytes state_dict_zip(const std::vector<RawTensor>& tensors,
                            const std::vector<std::pair<std::string, Bytes>>& storages) {
  std::vector<TensorSpec> specs;
  for (const RawTensor& t : tensors) {
    size_t index = 0;
    while (index < storages.size() && storages[index].first != t.path) ++index;
    TensorSpec s;
    s.name = t.fqn;
    s.key = std::to_string(index);
    const bool is_long = t.dtype == 5;
    s.storage_class = is_long ? "LongStorage" : "FloatStorage";
    s.storage_numel = index < storages.size() ? int64_t(storages[index].second.size() / (is_long ? 8 : 4)) : 0;
    s.offset = t.offset;
    s.size = t.sizes;
    s.stride = t.strides;
    s.parameter = t.is_param;
    specs.push_back(s);
  }
  std::vector<std::pair<std::string, Bytes>> keyed;
  for (size_t i = 0; i < storages.size(); ++i) keyed.emplace_back(std::to_string(i), storages[i].second);
  return checkpoint_zip(state_dict_pickle(specs), keyed, "archive", "little");
}

inline Bytes empty_dict_zip() {
  PickleBuilder p;
  p.proto(2).empty_dict().stop();
  return checkpoint_zip(p.bytes, {}, "archive", "little");
}

// Layout (b), torch 2.8: data/weights/model.pt is a torch.save zip.
inline Bytes pt2_torch_save(const std::string& graph, const Bytes& state_dict, const std::string& root = "model") {
  ZipBuilder z;
  z.add(root + "/models/model.json", bytes_of(graph));
  z.add(root + "/data/weights/model.pt", state_dict);
  z.add(root + "/data/constants/model.pt", empty_dict_zip());
  z.add(root + "/data/sample_inputs/model.pt", bytes_of("not read"));
  z.add(root + "/archive_format", bytes_of("pt2"));
  z.add(root + "/archive_version", bytes_of("0"));
  z.add(root + "/.data/version", bytes_of("6\n"));
  z.add(root + "/byteorder", bytes_of("little"));
  return z.finish();
}

// Layout (a), torch <= 2.7: records at the root, as Python's zipfile wrote
// them (no alignment padding).
inline Bytes pt2_legacy(const std::string& graph, const Bytes& state_dict) {
  ZipBuilder z;
  z.add("serialized_exported_program.json", bytes_of(graph), false);
  z.add("serialized_state_dict.pt", state_dict, false);
  z.add("serialized_constants.pt", empty_dict_zip(), false);
  z.add("serialized_example_inputs.pt", bytes_of("not read: example inputs are skipped"), false);
  z.add("version", bytes_of("8.17"), false);
  return z.finish();
}

}  // namespace ferry::test
