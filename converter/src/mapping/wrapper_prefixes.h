// Wrapper prefixes of state-dict keys (PYTORCH_FORMAT.md §4d): a model saved
// through nn.DataParallel / DistributedDataParallel has every key under
// `module.`, one compiled with torch.compile under `_orig_mod.` (also below
// the top: `encoder._orig_mod.rnn.weight_ih_l0`), in any combination. ferry
// names modules without them: in --graph, in the chain it prints, and in the
// hyper-parameters a checkpoint records (Checkpoint::attributes).
#pragma once

#include <string>

namespace ferry::conv {

// Strips a leading `module.` and every `_orig_mod.` (at the start or after a
// '.'), repeatedly, until none is left.
std::string strip_wrapper_prefixes(const std::string& key);

}  // namespace ferry::conv
