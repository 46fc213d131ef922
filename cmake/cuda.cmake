# FERRY_CUDA: the CUDA backend (runtime/src/backend/cuda, README "CUDA
# backend"). Included from the top-level CMakeLists.txt after runtime/, so
# that the language is enabled in the top directory (the kernels' object
# library lives here) and the runtime target exists to receive the objects.
#
# OFF: nothing CUDA is compiled or linked; FERRY_BACKEND_CUDA is the entry
# of cuda_unavailable.cpp, which says the backend is not built. The backend's
# host logic (plan.cpp, executor.cpp: plain C++) is still compiled into the
# unit tests (tests/CMakeLists.txt), which check it on the CPU.
#
# ON: needs nvcc. CMAKE_CUDA_ARCHITECTURES defaults to 87;90;110 (Jetson
# Orin, Hopper, Jetson Thor); any list, the default or the caller's, is
# filtered to the architectures this nvcc can compile for (nvcc
# --list-gpu-arch): a missing one is dropped and reported, never passed on
# (CUDA 13 has no sm_72 for Xavier: build Xavier with JetPack 5's CUDA
# 11.4). Each listed architecture gets SASS and PTX, so a newer GPU runs
# the PTX of the newest one.

# The backend's plain C++ (no CUDA): what the tests compile without FERRY_CUDA.
set(FERRY_CUDA_HOST_SOURCES
  ${PROJECT_SOURCE_DIR}/runtime/src/backend/cuda/plan.cpp
  ${PROJECT_SOURCE_DIR}/runtime/src/backend/cuda/executor.cpp
  ${PROJECT_SOURCE_DIR}/runtime/src/backend/cuda/mailbox.cpp
  ${PROJECT_SOURCE_DIR}/runtime/src/backend/cuda/resident.cpp
  ${PROJECT_SOURCE_DIR}/runtime/src/backend/cuda/resident_program.cpp)

# `ferry inspect` asks the CUDA plan (plan.cpp, plain C++) which files the
# backend runs, in every build: without FERRY_CUDA it is compiled into the
# CLI, which then says "cuda (not in this build)".
if(TARGET ferry_cli)
  target_include_directories(ferry_cli PRIVATE ${PROJECT_SOURCE_DIR}/runtime/src)
  if(FERRY_CUDA)
    target_compile_definitions(ferry_cli PRIVATE FERRY_CLI_HAVE_CUDA=1)
  else()
    target_sources(ferry_cli PRIVATE ${PROJECT_SOURCE_DIR}/runtime/src/backend/cuda/plan.cpp)
  endif()
endif()

if(NOT FERRY_CUDA)
  return()
endif()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR "FERRY_CUDA is ON but no CUDA compiler (nvcc) was found: put the CUDA toolkit's bin/ on PATH "
                      "(export PATH=/usr/local/cuda/bin:$PATH) or set CMAKE_CUDA_COMPILER, or configure with "
                      "-DFERRY_CUDA=OFF")
endif()

# The architectures this nvcc knows (compute_XX), to filter the list with.
set(FERRY_CUDA_DEFAULT_ARCHITECTURES "87;90;110")
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(_ferry_cuda_requested ${FERRY_CUDA_DEFAULT_ARCHITECTURES})
  set(_ferry_cuda_origin "default")
else()
  set(_ferry_cuda_requested ${CMAKE_CUDA_ARCHITECTURES})
  set(_ferry_cuda_origin "CMAKE_CUDA_ARCHITECTURES")
endif()
execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-arch
                OUTPUT_VARIABLE _ferry_nvcc_archs ERROR_QUIET RESULT_VARIABLE _ferry_nvcc_rc)
if(_ferry_nvcc_rc EQUAL 0 AND _ferry_nvcc_archs MATCHES "compute_")
  string(REGEX MATCHALL "compute_[0-9]+[a-z]?" _ferry_known "${_ferry_nvcc_archs}")
  string(REPLACE "compute_" "" _ferry_known "${_ferry_known}")
  set(_ferry_kept "")
  set(_ferry_dropped "")
  foreach(arch IN LISTS _ferry_cuda_requested)
    string(REGEX REPLACE "-(real|virtual)$" "" _ferry_number "${arch}")
    if(arch MATCHES "^(all|all-major|native)$" OR _ferry_number IN_LIST _ferry_known)
      list(APPEND _ferry_kept ${arch})
    else()
      list(APPEND _ferry_dropped ${arch})
    endif()
  endforeach()
  if(_ferry_dropped)
    list(JOIN _ferry_dropped ", " _ferry_dropped_text)
    list(JOIN _ferry_known " " _ferry_known_text)
    message(WARNING "ferry: this nvcc (${CMAKE_CUDA_COMPILER}) cannot compile for CUDA architecture(s) "
                    "${_ferry_dropped_text} (${_ferry_cuda_origin}); they are left out. It knows: ${_ferry_known_text}. "
                    "Xavier (72) needs JetPack 5's CUDA 11.4.")
  endif()
  if(NOT _ferry_kept)
    message(FATAL_ERROR "ferry: none of the CUDA architectures ${_ferry_cuda_requested} can be compiled by this nvcc "
                        "(it knows: ${_ferry_known_text}); set CMAKE_CUDA_ARCHITECTURES")
  endif()
else()
  message(WARNING "ferry: `nvcc --list-gpu-arch` failed (an nvcc older than CUDA 11?): CMAKE_CUDA_ARCHITECTURES "
                  "${_ferry_cuda_requested} is used unchecked")
  set(_ferry_kept ${_ferry_cuda_requested})
endif()
set(CMAKE_CUDA_ARCHITECTURES "${_ferry_kept}" CACHE STRING "CUDA architectures of the CUDA backend's kernels" FORCE)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
message(STATUS "ferry: CUDA backend with nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")

# The kernels: one translation unit, compiled in this (top) directory where
# CUDA is enabled, its objects added to the runtime library. --fmad=false:
# the kernels' only fused multiply-adds are their explicit fmaf calls
# (device_math.h, numeric contract), as -ffp-contract=off does for the CPU.
# Whole-program compilation (no -rdc): the cooperative grid sync of CUDA 11+
# needs no device link, and the static library needs no device-link step.
set(_ferry_cuda_dir ${PROJECT_SOURCE_DIR}/runtime/src/backend/cuda)
# kernels.cu: the matrix products; recurrent.cu: the recurrence, per weight
# type; ops.cu: the chain's other ops (three files: nvcc builds them side by
# side).
# resident.cu: the resident streaming kernel, with global loads cached in L2
# only (it never ends, and reads what other blocks wrote since: L1 is not
# coherent across blocks).
add_library(ferry_cuda_kernels OBJECT ${_ferry_cuda_dir}/kernels.cu ${_ferry_cuda_dir}/recurrent.cu
                                      ${_ferry_cuda_dir}/ops.cu ${_ferry_cuda_dir}/resident.cu)
set_source_files_properties(${_ferry_cuda_dir}/resident.cu PROPERTIES COMPILE_OPTIONS "-Xptxas=-dlcm=cg")
set_target_properties(ferry_cuda_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
if(NOT CMAKE_SYSTEM_NAME STREQUAL "Generic")
  set_target_properties(ferry_cuda_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)
endif()
# runtime/include: resident.cu reads the executor's and the model's headers.
target_include_directories(ferry_cuda_kernels PRIVATE ${PROJECT_SOURCE_DIR}/runtime/src
                                                      ${PROJECT_SOURCE_DIR}/runtime/include)
# Host side as the rest of the runtime: no exceptions, no RTTI, and no
# thread-safe statics (CUDA's headers have function-local statics), so that
# a C program links the static library without libstdc++.
target_compile_options(ferry_cuda_kernels PRIVATE --fmad=false
  -Xcompiler=-Wall,-Wextra,-fno-exceptions,-fno-rtti,-fno-threadsafe-statics)

# The runtime: the backend's entry replaces cuda_unavailable.cpp.
get_target_property(_ferry_runtime_sources ferry_runtime SOURCES)
list(FILTER _ferry_runtime_sources EXCLUDE REGEX "backend/cuda/cuda_unavailable\\.cpp$")
set_property(TARGET ferry_runtime PROPERTY SOURCES ${_ferry_runtime_sources})
target_sources(ferry_runtime PRIVATE ${_ferry_cuda_dir}/cuda_backend.cpp ${FERRY_CUDA_HOST_SOURCES}
                                     $<TARGET_OBJECTS:ferry_cuda_kernels>)
target_include_directories(ferry_runtime PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
string(REPLACE ";" "," _ferry_arch_text "${CMAKE_CUDA_ARCHITECTURES}")
target_compile_definitions(ferry_runtime PRIVATE FERRY_HAVE_CUDA=1 "FERRY_CUDA_ARCHITECTURES=\"${_ferry_arch_text}\"")
# The static CUDA runtime, by path (no imported target in the installed
# package's link interface, so find_package(ferry) needs no CUDAToolkit), and
# the library folder for pkg-config's -lcudart_static.
if(NOT CUDA_cudart_static_LIBRARY)
  message(FATAL_ERROR "ferry: the CUDA toolkit has no libcudart_static (CUDA_cudart_static_LIBRARY)")
endif()
get_filename_component(_ferry_cudart_dir ${CUDA_cudart_static_LIBRARY} DIRECTORY)
target_link_libraries(ferry_runtime PUBLIC "-L${_ferry_cudart_dir}" ${CUDA_cudart_static_LIBRARY} rt ${CMAKE_DL_LIBS}
                                           pthread)
