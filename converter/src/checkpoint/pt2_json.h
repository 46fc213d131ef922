// The JSON records of a torch.export archive (PYTORCH_FORMAT.md §8), read
// with nlohmann-json as hostile input:
//
//   parse_export_graph()    models/<model>.json / serialized_exported_program.json:
//                           the ExportGraph (export_graph.h), its structure
//                           checked and the omitted arguments of known ops
//                           filled in (aten_schema.h)
//   parse_payload_config()  data/weights/<model>_weights_config.json and the
//                           constants' config (layout 2.9+): one entry per FQN
//
// Before nlohmann sees the bytes they are bounded (kMaxJsonBytes) and their
// nesting measured (kMaxJsonDepth), so no later walk of the document can run
// deep; parse errors become one-line Errors with nlohmann's position. Every
// field is then read through checked accessors: a wrong type, a number out
// of range (huge, negative, fractional where an integer is due) or a missing
// field is an Error naming the file, the record and the field's JSON path
// ("config['fc.weight'].tensor_meta.sizes[0]"). No nlohmann exception leaves
// these functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/export_graph.h"
#include "io/bounded_json.h"

namespace ferry::conv {


// One FQN of a payload config.
struct PayloadEntry {
  std::string fqn;        // "lstm.weight_ih_l0"
  std::string path_name;  // the record below the payload folder: "weight_0"
  bool is_param = false;
  bool use_pickle = false;   // a torch.save payload (a tensor subclass) or a pickled object
  bool has_meta = false;     // tensor_meta present (required unless use_pickle)
  int64_t dtype_code = 0;    // the schema's ScalarType (7 = float32)
  std::vector<int64_t> sizes, strides;  // in elements
  int64_t storage_offset = 0;           // in elements
  std::string device;        // "cuda:0", "cpu"
  int64_t layout = 7;        // the schema's Layout (7 = strided)
};

// `label` names the record in errors ("model.pt2: record 'm/data/weights/
// model_weights_config.json'"). Entries in the file's key order.
std::vector<PayloadEntry> parse_payload_config(const uint8_t* data, size_t size, const std::string& label);

// Parses and checks a graph JSON. Refuses a schema major other than 8
// naming the version, custom-object (TorchBind) inputs and arguments, a
// node whose target is not an operator torch.export.load would accept
// (aten_schema.h: export_target_kind; so too an operator argument and every
// target inside a higher-order op's subgraph), naming the node's index, name
// and target, and anything malformed.
ExportGraph parse_export_graph(const uint8_t* data, size_t size, const std::string& label);

}  // namespace ferry::conv
