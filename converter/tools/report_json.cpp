// convert_report_json (library.h): a ConvertReport as the JSON object the
// Python package's ConvertReport is made from, and plan_json
// (report_json.h), its planned part, which `inspect --json` shows too. Keys
// are the report's fields; strings from the file are passed as they are
// (the JSON encoder escapes).
#include "report_json.h"

#include "cli.h"
#include "library.h"
#include "plan/quantization.h"

namespace ferry::cli {
namespace {

using nlohmann::ordered_json;

ordered_json stats_json(const conv::ErrorStatsPlan& e) {
  ordered_json j;
  j["name"] = e.name;
  j["dtype"] = conv::precision_name(e.dtype);
  j["max_abs"] = e.max_abs;
  j["rms"] = e.rms;
  j["cosine"] = e.cosine;
  j["rounding"] = e.rounding.empty() ? ordered_json(nullptr) : ordered_json(e.rounding);
  return j;
}

ordered_json quantization_json(const conv::ConvertReport& r) {
  const conv::QuantizationPlan& q = r.quantization;
  if (q.requested.empty()) return nullptr;
  ordered_json j;
  j["requested"] = q.requested;
  j["measured_on"] = q.input;
  j["max_error"] = q.max_error;
  j["precisions"] = ordered_json::array();
  for (const conv::LayerPrecision& p : r.precisions) {
    ordered_json e;
    e["layer"] = r.layers.at(static_cast<size_t>(p.layer)).name;
    e["dtype"] = conv::precision_name(p.dtype);
    const bool integer = p.dtype == conv::DType::I8 || p.dtype == conv::DType::I4;
    e["rounding"] = integer ? ordered_json(conv::rounding_name(p.rounding)) : ordered_json(nullptr);
    e["reason"] = p.reason;
    j["precisions"].push_back(e);
  }
  j["fallback"] = r.fallback_moves;
  j["model"] = stats_json(q.model);
  j["layers"] = ordered_json::array();
  for (const conv::ErrorStatsPlan& e : q.layers) j["layers"].push_back(stats_json(e));
  j["drift"] = q.drift_steps ? ordered_json{{"steps", q.drift_steps},
                                            {"start_rms", q.drift_start_rms},
                                            {"end_rms", q.drift_end_rms}}
                             : ordered_json(nullptr);
  j["roundings"] = ordered_json::array();
  for (const conv::RoundingReport& rr : q.roundings) {
    ordered_json e;
    e["rounding"] = rr.rounding;
    e["model"] = stats_json(rr.model);
    e["layers"] = ordered_json::array();
    for (const conv::ErrorStatsPlan& l : rr.layers) e["layers"].push_back(stats_json(l));
    e["drift_start_rms"] = rr.drift_start_rms;
    e["drift_end_rms"] = rr.drift_end_rms;
    j["roundings"].push_back(e);
  }
  return j;
}

}  // namespace

ordered_json plan_json(const conv::ConvertReport& r) {
  ordered_json p;
  p["graph"] = r.graph;
  p["graph_inferred"] = r.graph_inferred;
  p["layout"] = input_layout_code(r);
  p["layout_source"] = r.batch_first_source;
  p["output_layout"] = r.output_layout ? ordered_json(layout_code(*r.output_layout)) : ordered_json(nullptr);
  p["layers"] = ordered_json::array();
  for (const conv::LayerSummary& l : r.layers) {
    p["layers"].push_back({{"name", l.name}, {"description", l.description}, {"in", l.input_size}, {"out", l.output_size}});
  }
  p["assumptions"] = ordered_json::array();
  for (const conv::Assumption& a : r.assumptions) {
    p["assumptions"].push_back({{"layer", a.layer}, {"parameter", a.parameter}, {"value", a.value}, {"override", a.override}});
  }
  p["notes"] = r.notes;
  if (r.code) {
    ordered_json code;
    code["class"] = r.code->class_name;
    code["where"] = r.code->class_where;
    code["under"] = r.code->root_path;
    code["layers"] = ordered_json::array();
    for (const auto& l : r.code->layers) code["layers"].push_back({{"path", l[0]}, {"constructor", l[1]}, {"where", l[2]}});
    code["chain"] = ordered_json::array();
    for (const auto& [element, where] : r.code->chain(r.graph)) code["chain"].push_back({{"element", element}, {"where", where}});
    p["code"] = code;
  }
  return p;
}

std::string convert_report_json(const conv::ConvertReport& r) {
  // What was read, then the plan (as inspect shows it), then what was made.
  ordered_json j;
  j["form"] = r.form;
  j["input_bytes"] = r.input_bytes;
  j["tensor_count"] = r.tensor_count;
  j["storage_locations"] = r.storage_locations;
  const ordered_json plan = plan_json(r);
  for (const auto& [key, value] : plan.items()) j[key] = value;
  j["input_is_tokens"] = r.input_is_tokens;
  j["output_is_sequence"] = r.output_is_sequence;
  j["output_layout_source"] = r.output_layout_source;
  j["folded"] = r.folded;
  j["ignored"] = ordered_json::array();
  for (const auto& [key, why] : r.ignored) j["ignored"].push_back(ordered_json{{"key", key}, {"reason", why}});
  j["assumption_lines"] = conv::assumption_lines(r.assumptions);
  if (r.code) {
    j["code"]["text"] = r.code->class_text();
  } else {
    j["code"] = nullptr;
  }
  j["weight_bytes"] = r.weight_bytes;
  j["selftest_stored"] = r.selftest_stored;
  j["metadata"] = nlohmann::ordered_json::array();
  for (const auto& [key, what] : r.metadata) j["metadata"].push_back({{"key", key}, {"description", what}});
  j["quantization"] = quantization_json(r);
  j["file_bytes"] = r.file_bytes;
  j["stored_weight_bytes"] = r.stored_weight_bytes;
  j["arena_bytes"] = r.arena_bytes;
  j["c_array_name"] = r.c_array_name.empty() ? ordered_json(nullptr) : ordered_json(r.c_array_name);
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace ferry::cli
