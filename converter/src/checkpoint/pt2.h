// torch.export archives (`torch.export.save(ep, "model.pt2")`, an
// ExportedProgram), PYTORCH_FORMAT.md §8, in the three layouts torch has
// written:
//
//   (a) torch <= 2.7   a zip with no root folder (Python's zipfile):
//                      serialized_exported_program.json (the graph),
//                      serialized_state_dict.pt and serialized_constants.pt
//                      (each a whole torch.save zip), serialized_example_inputs.pt,
//                      version
//   (b) torch 2.8      a PT2 archive: <root>/archive_format = "pt2",
//                      models/<model>.json (the graph), data/weights/<model>.pt
//                      (torch.save of the state dict), data/constants/<model>.pt
//   (c) torch 2.9+     as (b), but the weights are raw storages,
//                      data/weights/weight_<n>, described by
//                      data/weights/<model>_weights_config.json; constants likewise
//
// Weights: the nested torch.save zips of (a) and (b) are read by the same
// zip reader and restricted unpickler as any torch.save file (reader_internal.h;
// no global beyond what a state dict needs), their records viewed in place
// in the outer file. The raw storages of (c) are whole storages: each FQN is
// a view (sizes, strides, storage offset, all in elements of its dtype) of
// one file, which several FQNs may share (a GPU LSTM's parameters are views
// of one cuDNN flat buffer); every view is bounds-checked, and two different
// FQNs whose contiguous views of one storage partly overlap are refused
// (tied weights, the same view twice, are fine). A use_pickle tensor (what
// torch 2.15 writes for a tensor subclass: a torch.save of that tensor) is
// read as a torch.save file is, and must match its tensor_meta;
// custom_obj_* TorchBind objects and opaque_obj_* pickles are refused
// naming them; sample inputs are never read.
//
// The graph (pt2_json.h) is bound to the weights through the signature:
// every parameter and buffer it names must be a tensor of the file. The
// Checkpoint's tensors are named by their state-dict FQN, parameters and
// buffers in the signature's order; its attributes get each module's class
// (from nn_module_stack) and the hyper-parameters the graph's op arguments
// give it (aten_schema.h: "lstm.batch_first", "conv.padding", "bn.eps");
// Checkpoint::export_graph keeps the graph for mapping/export_chain.h.
// --key picks the program of an archive that holds several.
#pragma once

#include <string>

#include "checkpoint/checkpoint.h"
#include "io/zip_reader.h"

namespace ferry::conv::detail {

// Whether a zip archive is a torch.export archive: a root-level
// serialized_exported_program.json, or an archive_format record.
bool is_pt2(const ZipReader& zip);

// `zip` is the validated archive of the file named `path` (for messages).
Checkpoint read_pt2(const ZipReader& zip, const std::string& path, const LoadOptions& options);

}  // namespace ferry::conv::detail
