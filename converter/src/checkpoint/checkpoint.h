// Checkpoint reading: turns a PyTorch file (any form listed in DESIGN.md) into
// an ordered list of named tensors that view the mapped file's bytes, plus
// whatever hyper-parameters the file records. Nothing in the file is executed:
// see pickle.h.
//
// load_checkpoint() detects the container from the bytes and hands the file
// to one reader (zip_checkpoint.h, legacy.h, legacy_tar.h, torchscript.h,
// safetensors.h, pt2.h);
// the readers share their internals through reader_internal.h and never call
// one another. open_checkpoint() takes a path, which may also name a
// distributed checkpoint directory (dcp.h).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/tensor_ref.h"
#include "io/mapped_file.h"

namespace ferry::conv {

struct ExportGraph;  // checkpoint/export_graph.h

// TorchScript code/ lines are kept up to this many characters; a longer line
// is cut to kMaxScriptLine + 1, so that a reader can tell it was cut.
constexpr size_t kMaxScriptLine = size_t{1} << 14;

// One module object of a whole pickled module or a TorchScript archive.
struct ModuleObject {
  std::string path;        // "" for the root, else "encoder.rnn" (wrapper prefixes stripped)
  std::string class_name;  // qualified: "torch.nn.modules.container.Sequential",
                           // "__torch__.torch.nn.modules.rnn.___torch_mangle_4.GRU"
  // TorchScript only: the `def forward(...)` of its class in code/, as text
  // (never run), and whether the class declares Final constants (a scripted
  // torch.nn module records its hyper-parameters so; a traced one does not:
  // its forward holds them as call arguments instead).
  std::vector<std::string> forward;
  std::string code_record;  // the code/ record holding it ("archive/code/__torch__.py"), for messages
  bool final_constants = false;
  // TorchScript only: the object's plain attributes that are scalars, which
  // a forward may branch on, as Python literals ("True", "3", "0.5", "None",
  // a string as "'last'": quoted, not escaped).
  std::map<std::string, std::string> scalars;
  // --code only: plain attributes the constructor sets to what the code
  // does not decide, and why ("the argument 'pool' of GRUPool(), which has
  // no default"), for the message of a branch on one.
  std::map<std::string, std::string> undecided;
};

struct Checkpoint {
  // The file or directory it was read from, as given (messages name it).
  std::string path;
  // The detected form, shown by inspect and recorded as provenance:
  // "zip state_dict", "zip training checkpoint (key 'model_state_dict')",
  // "zip whole module (__main__.Net)", "legacy (pre-1.6) state_dict",
  // "TorchScript archive (__torch__.Net)", "safetensors", ...
  std::string form;
  std::vector<TensorRef> tensors;   // state-dict order
  // Entries that are not model tensors, with why (optimizer state, ...).
  // Entries beside the selected state dict of a training checkpoint are
  // named by their dotted path from the top ("optimizer_state_dict.state.0.
  // exp_avg", "epoch"), so they cannot collide with a model tensor's name.
  std::vector<std::pair<std::string, std::string>> ignored;
  // Hyper-parameters the file records, keyed "module.path.attr" with wrapper
  // prefixes (module., _orig_mod.) stripped, e.g. "lstm.batch_first" ->
  // "true", "rnn.nonlinearity" -> "relu", "lstm.proj_size" -> "0"; a
  // root module's own attributes have no path ("batch_first"). Whole pickled
  // modules and TorchScript archives record them; safetensors records its
  // __metadata__ as "__metadata__.<key>". Empty for a bare state dict.
  std::map<std::string, std::string> attributes;
  // Whole pickled modules and TorchScript archives: every module object,
  // depth first from the root (path ""), each module's children in the order
  // it holds them (its _modules order: an nn.Sequential's call order). Empty
  // for a state dict. mapping/script_chain.h and mapping/sequential_chain.h
  // read a layer chain from them.
  std::vector<ModuleObject> module_objects;
  // torch.export archives (.pt2): the ATen graph the file records, read and
  // checked (checkpoint/export_graph.h; mapping/export_chain.h reads the
  // layer chain from it). Null for every other form.
  std::shared_ptr<const ExportGraph> export_graph;

  // The module object at `path` (wrapper prefixes stripped), or null.
  const ModuleObject* module_object(const std::string& path) const;
};

// The key of hyper-parameter `name` of the module at `module_path` ("" for
// the root) in Checkpoint::attributes: "lstm.batch_first", wrapper prefixes
// (module., _orig_mod.) stripped.
std::string attribute_key(const std::string& module_path, const std::string& name);

// The attribute holding a module's class name as the file records it (the
// last part of its qualified name: "Conv1d", "BatchNorm1d", "LeakyReLU"):
// Checkpoint::attributes[attribute_key(path, kClassAttribute)].
constexpr const char* kClassAttribute = "__class__";

struct LoadOptions {
  std::string key;                  // --key: which entry of a checkpoint dict
                                    // (of a .pt2: which of its programs)
};

// Reads the checkpoint in `file`, whichever container the bytes show (never
// the extension): a torch.save zip (bare state dict, training checkpoint
// dict, whole pickled module), the legacy pre-1.6 pickle stream and the
// pre-0.3 tar format (same shapes), a TorchScript archive, a torch.export archive (.pt2), or
// safetensors. Throws Error with a precise
// message (file name, record, tensor, byte offset) on anything malformed or
// unsupported.
Checkpoint load_checkpoint(const MappedFile& file, const LoadOptions& options = {});

// A checkpoint as it lies on disk, read: one file, or a distributed
// checkpoint (DCP) directory and the files of it that were read.
struct CheckpointInput {
  Checkpoint checkpoint;
  // The mapped file of a one-file checkpoint (the planner's source for byte
  // copies and page release); null for a directory.
  std::shared_ptr<const MappedFile> file;
  bool directory = false;
  // Every file read, by name in its directory, in name order: {file} for a
  // one-file checkpoint; for a directory its metadata and the data files
  // holding the tensors read.
  std::vector<std::pair<std::string, std::shared_ptr<const MappedFile>>> files;

  uint64_t bytes() const;  // of every file read
  // Provenance: the SHA-256 of the file; of a directory, the SHA-256 of the
  // lines "<sha256 of file>  <name>\n" of `files` (what `sha256sum FILES |
  // sha256sum` prints in the directory; dcp.h).
  std::string sha256() const;
};

// Reads the checkpoint at `path`: a DCP directory (dcp.h), else a file
// (load_checkpoint). Throws Error.
CheckpointInput open_checkpoint(const std::string& path, const LoadOptions& options = {});

}  // namespace ferry::conv
