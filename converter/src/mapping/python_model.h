// The model class of a --code source (mapping/python_source.h), matched to
// a checkpoint and its constructor read, never run.
//
// Every class in the files that derives from nn.Module (directly, through
// LightningModule, or through another class of the files) is a candidate;
// `file.py:Class` names one. A candidate's constructor is read as text:
// `self.x = nn.LSTM(...)` and the other torch.nn layers ferry knows (their
// arguments bound by name as PyTorch's signatures give them), nn.Sequential
// (positional or an OrderedDict), nn.ModuleList, user classes of the files
// (their own constructors read the same way), plain attributes
// (`self.hidden_size = hidden_size`), `if` on what is known, `for` over a
// range or a list, lists built with append, comprehensions. An argument is
// what the code gives it: a literal, arithmetic on known values, a
// module-level constant, the default of the constructor's own parameter, or
// (for a parameter with no default) the value the checkpoint's shapes give
// the layer option it is passed to (`nn.LSTM(input_size, ...)` binds
// `input_size` to the weights' input size). A whole pickled module records
// its own options: with --code only its classes' forwards are read.
//
// The class whose layers match the checkpoint's modules (paths and kinds,
// wrapper prefixes stripped; also under one leading prefix, a wrapper's
// `model.`) is the model. Its modules become the checkpoint's module objects
// and their options the attributes a whole pickled module records, so that
// every later stage (the forward's reading, the planner) reads them as it
// reads a pickled model's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "mapping/modules.h"
#include "mapping/python_source.h"

namespace ferry::conv {

// What --code read, for `ferry inspect --code` and the conversion notes.
struct CodeModel {
  python::Program program;
  std::string class_name;  // the model class
  std::string class_where;  // "model.py:12"
  std::string root_path;   // "" or the prefix the class sits under in the checkpoint ("model")
  struct Layer {
    std::string path;         // "lstm", "head.0"
    std::string constructor;  // "nn.LSTM(input_size=16, hidden_size=64, batch_first=True)", as read
    std::string where;        // "model.py:20"
  };
  std::vector<Layer> layers;
  std::vector<std::string> notes;  // the class picked among several, defaults the weights overrode
  // Layer options that are a constructor parameter's default: the class
  // says them, but a state dict does not record whether the model was
  // built with them (plan/model_plan.h Assumption's fields).
  struct Default {
    std::string layer, parameter, value, override;
  };
  std::vector<Default> defaults;
};

struct CodeOptions {
  // The user gives the input layout (--batch-first / --layout) or the chain
  // (--graph): an option the constructor leaves undecided is not asked for.
  bool layout_given = false;
  bool graph_given = false;
  // The input layout the user gives, as a recurrent layer's batch_first:
  // where the class passes a constructor parameter as batch_first, that
  // parameter takes this value (the forward's own branches on it follow).
  std::optional<bool> batch_first;
};

// Reads the --code arguments (`path` or `path:Class`), picks the model class
// for `modules` and writes its modules and options into `checkpoint`
// (module_objects, attributes; a whole pickled module keeps its own and only
// gains its classes' forward code). Throws Error naming the file and line,
// or the classes tried and how each differs from the checkpoint.
CodeModel read_model_code(const std::vector<std::string>& code, Checkpoint& checkpoint, const ModuleSet& modules,
                          const CodeOptions& options = {});

// The same, on files already read into `code.program` (tests, fuzzing);
// `wanted` names the class ("" to match one).
CodeModel match_model(CodeModel code, const std::string& wanted, Checkpoint& checkpoint, const ModuleSet& modules,
                      const CodeOptions& options = {});

}  // namespace ferry::conv
