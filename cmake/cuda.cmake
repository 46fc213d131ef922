# FERRY_CUDA: the CUDA backend (Jetson-class GPUs) is not part of this
# version yet. Asking for it is not an error: the CPU backends build as
# usual and configure says so once, with what it found for CUDA, so the
# `jetson` preset is ready for the backend when it lands.
if(FERRY_CUDA)
  file(GLOB_RECURSE _ferry_cuda_sources ${PROJECT_SOURCE_DIR}/runtime/src/*.cu)
  if(NOT _ferry_cuda_sources)
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(_ferry_nvcc "CUDA compiler ${CMAKE_CUDA_COMPILER}")
    else()
      set(_ferry_nvcc "no CUDA compiler found")
    endif()
    message(NOTICE
      "-- ferry: FERRY_CUDA=ON, but this version has no CUDA backend yet; building the CPU "
      "backends only (${_ferry_nvcc}; CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES} "
      "is kept for it).")
  endif()
endif()
