// convert_report_json (library.h): a ConvertReport as the JSON object the
// Python package's ConvertReport is made from. Keys are the report's fields;
// strings from the file are passed as they are (the JSON encoder escapes).
#include <nlohmann/json.hpp>

#include "library.h"
#include "plan/quantization.h"

namespace ferry::cli {
namespace {

using nlohmann::ordered_json;

const char* layout_code(conv::Layout l) {
  return l == conv::Layout::kBatchFirst ? "btf" : l == conv::Layout::kTimeMajor ? "tbf" : "bft";
}

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

std::string convert_report_json(const conv::ConvertReport& r) {
  ordered_json j;
  j["form"] = r.form;
  j["input_bytes"] = r.input_bytes;
  j["tensor_count"] = r.tensor_count;
  j["storage_locations"] = r.storage_locations;
  j["graph"] = r.graph;
  j["graph_inferred"] = r.graph_inferred;
  j["layout"] = r.channels_first ? "bft" : r.input_is_tokens ? (r.batch_first ? "bt" : "tb") : r.batch_first ? "btf" : "tbf";
  j["layout_source"] = r.batch_first_source;
  j["input_is_tokens"] = r.input_is_tokens;
  j["output_is_sequence"] = r.output_is_sequence;
  j["output_layout"] = r.output_layout ? ordered_json(layout_code(*r.output_layout)) : ordered_json(nullptr);
  j["output_layout_source"] = r.output_layout_source;
  j["layers"] = ordered_json::array();
  for (const conv::LayerSummary& l : r.layers) {
    j["layers"].push_back(ordered_json{{"name", l.name}, {"description", l.description},
                                       {"in", l.input_size}, {"out", l.output_size}});
  }
  j["folded"] = r.folded;
  j["ignored"] = ordered_json::array();
  for (const auto& [key, why] : r.ignored) j["ignored"].push_back(ordered_json{{"key", key}, {"reason", why}});
  j["notes"] = r.notes;
  j["assumptions"] = ordered_json::array();
  for (const conv::Assumption& a : r.assumptions) {
    j["assumptions"].push_back(ordered_json{{"layer", a.layer}, {"parameter", a.parameter},
                                            {"value", a.value}, {"override", a.override}});
  }
  j["assumption_lines"] = conv::assumption_lines(r.assumptions);
  if (r.code) {
    ordered_json c;
    c["class"] = r.code->class_name;
    c["where"] = r.code->class_where;
    c["under"] = r.code->root_path;
    c["text"] = r.code->class_text();
    c["layers"] = ordered_json::array();
    for (const auto& l : r.code->layers)
      c["layers"].push_back(ordered_json{{"path", l[0]}, {"constructor", l[1]}, {"where", l[2]}});
    c["chain"] = ordered_json::array();
    for (const auto& [element, where] : r.code->chain(r.graph))
      c["chain"].push_back(ordered_json{{"element", element}, {"where", where}});
    j["code"] = c;
  } else {
    j["code"] = nullptr;
  }
  j["weight_bytes"] = r.weight_bytes;
  j["selftest_stored"] = r.selftest_stored;
  j["quantization"] = quantization_json(r);
  j["file_bytes"] = r.file_bytes;
  j["stored_weight_bytes"] = r.stored_weight_bytes;
  j["arena_bytes"] = r.arena_bytes;
  j["c_array_name"] = r.c_array_name.empty() ? ordered_json(nullptr) : ordered_json(r.c_array_name);
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace ferry::cli
