// Reparametrized weights folded at convert time (PYTORCH_FORMAT.md §10): a
// state dict saved with weight norm or spectral norm on a layer holds the
// parts the weight is computed from, not the weight. This finds them by
// name and folds each set into the weight PyTorch computes in eval mode
// (the rules and their arithmetic: mapping/pytorch_rules.h):
//
//   legacy torch.nn.utils.weight_norm     <p>.<name>_g, <p>.<name>_v
//   parametrizations.weight_norm          <p>.parametrizations.<name>.original0 (g), .original1 (v)
//   legacy torch.nn.utils.spectral_norm   <p>.<name>_orig, <p>.<name>_u, <p>.<name>_v
//   parametrizations.spectral_norm        <p>.parametrizations.<name>.original, .0._u, .0._v
//
// on any parameter (Linear, Conv1d and RNN weights alike), into a float32
// tensor named <p>.<name> that takes the place of its first part in
// state-dict order. Its TensorRef::sources name the parts and
// TensorRef::derivation says how it was made, so the provenance mapping
// names every part and `ferry inspect` shows the folding.
//
// Any other parametrization (orthogonal, a user's own, two stacked on one
// weight) is refused naming its parts, and its class where a whole module
// records it; so are parts of the wrong shape (g fitting no dimension of v,
// u or v not the weight's rows / columns) and weights PyTorch itself leaves
// undefined (a zero-norm v, sigma 0).
#pragma once

#include <memory>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace ferry::conv {

struct Reparametrized {
  // The checkpoint's tensors in state-dict order, each set of parts replaced
  // by its folded tensor, which points into `folded`.
  std::vector<const TensorRef*> tensors;
  // The folded tensors, float32, contiguous, in memory they own.
  std::vector<std::shared_ptr<const TensorRef>> folded;
};

// Finds and folds every reparametrized weight of `checkpoint`. Throws Error
// naming the tensors and the rule at fault.
Reparametrized fold_reparametrizations(const Checkpoint& checkpoint);

}  // namespace ferry::conv
