// The CUDA backend's table entry (backend/backend.h): cuda_backend.cpp in a
// build with FERRY_CUDA (cmake/cuda.cmake), else cuda_unavailable.cpp, where
// every session asks fail with FERRY_UNSUPPORTED, naming the reason.
//
// Map of this folder:
//   device_weights.h  a reader per stored dtype (f32, f16, int8, int4) and
//                     the activation quantization (shared by device and host)
//   device_math.h     the recurrent step: decomposition, cell update
//   device_ops.h      every other op of the chain, over (samples, features)
//                     tiles (shared by device and host)
//   plan.h/.cpp       memory layouts, recurrence strategy, I/O path, what
//                     the backend refuses: plain C++, tested on the CPU
//   executor.h/.cpp   the chain per call and the state copies, against a
//                     table of device operations: plain C++, tested on the
//                     CPU through an emulation of the kernels
//   kernels.h         the kernels' launches; kernels.cu (products),
//                     recurrent.cu (the recurrence, per dtype), ops.cu
//   cuda_backend.cpp  the entry: CUDA runtime calls, errors, resources
#pragma once

#include "backend/backend.h"

namespace ferry {
namespace cuda {

extern const Backend kCudaBackend;

}  // namespace cuda
}  // namespace ferry
