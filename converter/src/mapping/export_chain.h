// The layer chain of a torch.export archive, read from its ATen graph
// (Checkpoint::export_graph, checkpoint/export_graph.h): what lets
// `ferry convert model.pt2 model.fb` run with no --graph.
//
// The graph is followed from its one tensor input to its output. Each op
// ferry runs becomes one chain element:
//   aten.lstm / gru / rnn_tanh / rnn_relu (.input)   the module owning their
//       params (every params entry must be that module's, in PyTorch's order),
//       started from aten.zeros (zeros_like, new_zeros, full(0)) states;
//   aten.linear, conv1d / convolution (1-D), batch_norm /
//       _native_batch_norm_legit_no_training (eval), layer_norm /
//       native_layer_norm, prelu, embedding              the module owning their weight;
//   select / slice of the last time step -> `last`; mean / amax / max over
//       time -> `mean` / `max`; h_n[-1] of a one-direction module -> `last`;
//   relu, tanh, sigmoid, gelu, silu, elu, leaky_relu, hardtanh (relu6),
//       softmax / log_softmax over the features, dropout (eval);
//   add.Tensor of an earlier value of the chain -> a residual skip `( ... ) + input`.
// transpose / permute, clone / alias / detach and squeeze of a length-1 time
// axis add no element: ferry keeps one layout inside. The axes are tracked
// through them by ChainAxes (mapping/chain_axes.h), the tracker the
// TorchScript and Sequential readers use: every value carries its axes
// under each input layout still possible, and each op rules out the layouts
// under which it would not work on the axis it says (an RNN's batch_first,
// a conv's [B, C, T], a select's dim, a Linear's features last, the same
// axes on both sides of a residual add), which fixes where the input keeps
// its batch, time and feature axes, hence the input layout (btf / tbf / bft;
// a 2-dimensional input is [B, F], or token ids where an Embedding reads it).
// Where ops that work per step leave several, the first of [B, T, F],
// [T, B, F], [B, F, T] is taken, with a note. The axes of the returned value
// give the output's layout (a GRU's [B, T, F] returned from a [B, F, T]
// input: the output layout btf).
// Module options (batch_first, strides, eps) are the Checkpoint attributes
// the reader recorded from the same op arguments; activation options
// (slopes, bounds) are written into the chain.
//
// Anything else is refused naming the node, the op and its module, with what
// to do: pass --graph (and --layout) to convert the weights alone. A
// core-ATen graph (run_decompositions(): the RNN unrolled into per-step cells)
// is refused saying so.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace ferry::conv {

// Where the graph's input keeps its axes.
enum class ExportInputLayout {
  kNone,           // [B, F]: no time axis
  kBatchFirst,     // [B, T, F] (token ids: [B, T])
  kTimeMajor,      // [T, B, F] (token ids: [T, B])
  kChannelsFirst,  // [B, F, T]
};

struct ExportChain {
  std::string graph;  // the chain, in --graph syntax
  ExportInputLayout layout = ExportInputLayout::kNone;
  // A sequence output's layout where it is not the input's (a permute or
  // transpose between the last layer and the return); nullopt otherwise.
  std::optional<ExportInputLayout> output_layout;
  std::vector<std::string> notes;  // assumptions the user should know
};

// "[B, T, F]", "[B, F, T]", ... for messages and inspect.
const char* export_layout_text(ExportInputLayout layout);

// Reads the chain of `checkpoint.export_graph` (which must be set). Throws
// Error naming the graph record, the node, its op and module, and what to do.
ExportChain export_chain(const Checkpoint& checkpoint);

}  // namespace ferry::conv
