// The layer chain from a TorchScript archive's forward code
// (Checkpoint::script_forward), read as text, never run.
//
// Straight-line code of supported calls is followed from the input to the
// return value: `self.m` modules called with `.forward(...)` (a recurrent
// module's (output, hidden) tuple unpacked), `out[:, -1]` (torch.select over
// the time axis: `last`; `h_n[-1]` of a unidirectional module likewise),
// torch.relu / tanh / sigmoid / softmax(-1) / log_softmax(-1) / mean over
// time, the same from torch.nn.functional, `.transpose(1, 2)` between a conv
// and a recurrent layer (ferry keeps one layout inside), and `y + x` where x
// is an earlier value on the chain (a residual skip). A loop, a branch or
// any other call is not read: the caller suggests a --graph instead.
#pragma once

#include <string>

#include "checkpoint/checkpoint.h"
#include "mapping/modules.h"

namespace ferry::conv {

// The chain in --graph syntax. Throws Error saying which line it cannot read.
std::string script_chain(const Checkpoint& checkpoint, const ModuleSet& modules);

}  // namespace ferry::conv
