// The static table of backends, indexed by ferry_backend (backend.h).
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"

namespace ferry {

const Backend& backend_for(ferry_backend backend) {
  static const Backend* const kTable[] = {
      &cpu::kCpuBackend,    // FERRY_BACKEND_AUTO
      &cpu::kCpuBackend,    // FERRY_BACKEND_REFERENCE
      &cpu::kCpuBackend,    // FERRY_BACKEND_SIMD
      &cpu::kCpuBackend,    // FERRY_BACKEND_XNNPACK
      &cuda::kCudaBackend,  // FERRY_BACKEND_CUDA
  };
  static_assert(sizeof(kTable) / sizeof(kTable[0]) == FERRY_BACKEND_CUDA + 1, "one entry per ferry_backend");
  return *kTable[static_cast<int>(backend)];
}

}  // namespace ferry
