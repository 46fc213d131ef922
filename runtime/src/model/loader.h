// Model verification and the internal view (model/model.h), in two steps so
// that ferry_model_load (api/model_api.cpp) can place the handle in between.
// Every check is always on:
//  1. verify_model_bytes: the file identifier and the FlatBuffers verifier
//     (every offset and vector inside the buffer);
//  2. build_model_view: ferry's own checks (enum values known, every tensor
//     index in range, every tensor window inside the weight blob and 64-byte
//     aligned, dtypes this runtime reads, every shape product
//     overflow-checked and equal to what its layer needs, the chain's
//     feature widths consistent from input to output, the user's metadata
//     within shared/metadata_rules.h), filling the view.
// Nothing is trusted that was not checked here; kernels index without checks.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "ferry/ferry.h"
#include "model/model.h"

namespace ferry {

// `bytes` holds `size` >= 8 bytes, 4-byte aligned.
ferry_status verify_model_bytes(const uint8_t* bytes, size_t size);

// `model` is a fresh handle whose `bytes` and `size` are set to bytes that
// passed verify_model_bytes.
ferry_status build_model_view(ferry_model* model);

}  // namespace ferry
