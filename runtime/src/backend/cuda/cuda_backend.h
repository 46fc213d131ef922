// The CUDA backend's table entry (backend/backend.h). In a build without
// FERRY_CUDA it is cuda_unavailable.cpp: every session asks fail with
// FERRY_UNSUPPORTED, naming the reason.
#pragma once

#include "backend/backend.h"

namespace ferry {
namespace cuda {

extern const Backend kCudaBackend;

}  // namespace cuda
}  // namespace ferry
