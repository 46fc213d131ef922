// The layer chain from a TorchScript archive's code (PYTORCH_FORMAT.md §3),
// scripted or traced, read as text (mapping/script_syntax.h), never run.
//
// The root module's forward is followed from its input to its return value,
// statement by statement, each value knowing the chain of ops that made it
// from the input (a tensor), or what else it is (a module, a parameter, a
// tuple, zeros, a constant, or something the chain does not need). Nested
// call expressions, `a, b, = t` unpacking and `(t)[0]` indexing are plain
// expressions of that reading.
//
// A call of a submodule, `(m).forward(x, )`:
//  - a scripted torch.nn module (its class records its hyper-parameters as
//    Final constants, or a forward overload such as `forward__0`): what the
//    class computes, one chain element (an LSTM/GRU/RNN returns its
//    (output, h_n[, c_n]) tuple; ReLU & co. are built-in ops);
//  - otherwise (traced modules, user modules, nn.Sequential) its own forward
//    is read the same way, where the ATen calls that make a layer name the
//    module by the parameters they take: torch.linear, torch._convolution /
//    conv1d, batch_norm, layer_norm, prelu, embedding, torch.lstm / gru /
//    rnn_tanh / rnn_relu (whose arguments say batch_first and bidirectional;
//    a traced module returns what its caller used: `y` alone, or a tuple).
// Options the code passes (a conv's stride and padding, eps, a LeakyReLU's
// slope, an RNN's relu) are written into the chain.
//
// Ops read besides: relu / tanh / sigmoid / silu / gelu / leaky_relu / elu /
// hardtanh / softmax / log_softmax / dropout (and their in-place `_` and
// torch.nn.functional forms), the last step (torch.select(x, t, -1), x[:, -1],
// h_n[-1], h_n.squeeze(0)), mean / amax / max over time, full slices,
// transposes and permutes (mapping/chain_axes.h: they decide the input
// layout, and the output's where the result is returned transposed), and
// `torch.add(y, x)` where x is an earlier value of y's chain (a residual
// skip). Zeros as initial states. Calls that only read shapes
// (torch.size, int, ...) are ignored until their result is used.
//
// An `if` (torch.jit.script prints a Python if as an `if ...: else:` block)
// takes the branch PyTorch would where its condition is fixed by the file:
// ranks along the chain, a value's feature count, a constant, a module's
// attribute (ModuleObject::scalars, recorded hyper-parameters),
// self.training (False: eval mode), whether an argument left at its default
// is None. Where it differs between the input layouts still possible, or
// rests on the input's feature count before any layer read it, each way is
// tried in turn (a reading takes one, and the forward is read again with the
// next when it fails: at most 16 readings, sharing the step budget).
//
// A loop, a branch the data decides (tensor values, the batch size, the time
// length), a raise on the path taken, any other call on a chain value, an
// initial state that is not zeros, a training-mode dropout: refused with an
// Error naming the line (and the code record and module whose forward it
// is), for the caller to suggest a --graph. Reading is bounded: modules
// nested at most kMaxScriptCallDepth calls deep, at most kMaxScriptSteps
// steps in all (expressions evaluated, names an in-place op updates), tuples
// of at most 256 parts, chains of at most 4096 elements, blocks nested at
// most script::kMaxNesting deep.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "mapping/chain_axes.h"
#include "mapping/modules.h"
#include "mapping/python_source.h"

namespace ferry::conv {

// A chain a file records, and the input layout it needs where that is
// decided (nullopt: the chain runs on any, or the file does not say).
struct RecordedChain {
  std::string graph;  // in --graph syntax
  std::optional<InputLayout> layout;
  // A sequence output's layout where it is not the input's (the forward
  // transposes its result); nullopt otherwise (an nn.Sequential's always).
  std::optional<InputLayout> output_layout;
  std::vector<std::string> notes;  // what the chain leaves out of the forward's result
  // Python source (--code): per element of `graph`, the file and line it was
  // read from ("model.py:42"); empty for TorchScript code.
  std::vector<std::string> sources;
};

constexpr size_t kMaxScriptCallDepth = 32;
constexpr size_t kMaxScriptSteps = size_t{1} << 18;

// Whether the checkpoint is a TorchScript archive whose root has forward code.
bool has_script_forward(const Checkpoint& checkpoint);

// The chain of the root module's forward. Throws Error saying which line
// (of which module) it cannot read, and why.
//
// With `program` (--code: mapping/python_source.h, the module objects and
// their options from mapping/python_model.h), the forwards are Python source
// rather than TorchScript code, read by the same walker: `self.lstm(x)`
// calls a module; `x.view(...)` and the other tensor methods are the torch
// functions TorchScript prints for them; methods of the model's classes
// (`self.init_hidden(b)`) and module-level functions of the files are read
// where they are called; module-level constants and imports resolve names;
// `for` runs over an nn.Sequential / nn.ModuleList or a constant range (a
// loop over time steps is refused); `self.x = ...` (state kept on the
// module), attention and anything else are refused with the file and line.
// A view or reshape is read only where it keeps the axes as they are; a
// root forward argument passed as a recurrent layer's initial state is the
// state ferry's session carries, said in a note.
RecordedChain script_chain(const Checkpoint& checkpoint, const ModuleSet& modules,
                           const python::Program* program = nullptr);

}  // namespace ferry::conv
