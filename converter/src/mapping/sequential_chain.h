// The layer chain of a whole pickled nn.Sequential (torch.save(model), alone
// or as the model of a training checkpoint; PYTORCH_FORMAT.md §4c): a pickle
// records no forward, but an nn.Sequential's forward is its children called
// in order, so their order is the chain. Nested Sequentials are flattened;
// weightless children (nn.ReLU, nn.Dropout, nn.Tanh, ...) are the built-in
// ops their class is (mapping/graph.h, recorded_activation), with the
// options they record.
//
// What the order does not tell is refused, never guessed:
//  - a root that is not an nn.Sequential (a user module: its forward is
//    Python the pickle does not hold), or any child that is neither a
//    Sequential, a layer ferry runs nor a known activation (nn.Flatten, a
//    user module, a ModuleList);
//  - an LSTM / GRU / RNN inside a Sequential: it returns a tuple (output,
//    state), which the next child cannot take, so a model that runs has a
//    wrapper whose forward picks the output (and maybe the last step), and
//    that forward is not in the file;
//  - an axis mismatch (mapping/chain_axes.h): a Linear after a Conv1d would
//    act on the time axis; an nn.Softmax without dim picks its axis from the
//    input's rank.
// Each refusal is an Error saying why, for the caller to suggest a --graph
// (recorded_order() gives the part of that suggestion the file does know).
#pragma once

#include <vector>

#include "checkpoint/checkpoint.h"
#include "mapping/graph.h"
#include "mapping/modules.h"
#include "mapping/script_chain.h"

namespace ferry::conv {

// Whether a qualified class name is torch.nn.Sequential (pickled or TorchScript).
bool is_sequential_class(const std::string& qualified_name);

// The chain of the whole-module root. Throws Error as above.
RecordedChain sequential_chain(const Checkpoint& checkpoint, const ModuleSet& modules);

// The modules of `modules` in the order the file holds them, with the
// built-in op of each weightless child of an nn.Sequential in its place
// (a Sequential's order is known even when the module around it is not):
// the raw material of a --graph suggestion. Empty when the file records no
// module objects.
std::vector<GraphElement> recorded_order(const Checkpoint& checkpoint, const ModuleSet& modules);

}  // namespace ferry::conv
