# Bare-metal Cortex-M, no OS: arm-none-eabi-gcc with newlib (Debian's
# gcc-arm-none-eabi, libnewlib-arm-none-eabi, libstdc++-arm-none-eabi-dev).
# Builds the runtime library only (the reference kernels: no NEON, no
# XNNPACK, no converter, no tests); examples/firmware links it into a
# complete image.
#
#   cmake -S . -B build-m4 -G Ninja -DCMAKE_TOOLCHAIN_FILE=targets/arm-none-eabi.cmake
#   (or: cmake --preset cortex-m3 / m4 / m7 / m33 / m55)
#
# FERRY_CORTEX_M, always Thumb-2:
#   cortex-m3   Armv7-M, no FPU: soft float (float in integer registers)
#   cortex-m4   Armv7E-M, FPv4-SP (single precision), hard float; the default
#   cortex-m7   Armv7E-M, FPv5 with double precision, hard float
#   cortex-m33  Armv8-M Mainline, FPv5-SP (single precision), hard float
#   cortex-m55  Armv8.1-M Mainline, FPv5 with double precision and MVE (Helium,
#               integer and float), hard float: -mfpu=auto takes all the
#               core has from -mcpu (GCC 12 has no -mfpu name for FP + MVE)
# Code is built with -fno-exceptions -fno-rtti -ffunction-sections
# -fdata-sections (the image links with --gc-sections) and
# FERRY_NO_THREAD_LOCAL (one error-message buffer instead of a TLS one).
# The compiler sees one header-only library from the host, flatbuffers/, in
# a folder of its own, never /usr/include.
include(${CMAKE_CURRENT_LIST_DIR}/host-headers.cmake)

set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_C_COMPILER arm-none-eabi-gcc)
set(CMAKE_CXX_COMPILER arm-none-eabi-g++)
set(CMAKE_ASM_COMPILER arm-none-eabi-gcc)
# No startup code or linker script here: compiler checks build a library.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

if(NOT FERRY_CORTEX_M)
  set(FERRY_CORTEX_M cortex-m4)
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES FERRY_CORTEX_M)
# The core's name, not "arm": nothing meant for Arm application cores (NEON
# flags for armv7/arm in runtime/CMakeLists.txt) applies to an M-profile core.
set(CMAKE_SYSTEM_PROCESSOR ${FERRY_CORTEX_M})
if(FERRY_CORTEX_M STREQUAL "cortex-m3")
  set(_ferry_cpu "-mcpu=cortex-m3 -mthumb -mfloat-abi=soft")
elseif(FERRY_CORTEX_M STREQUAL "cortex-m4")
  set(_ferry_cpu "-mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard")
elseif(FERRY_CORTEX_M STREQUAL "cortex-m7")
  set(_ferry_cpu "-mcpu=cortex-m7 -mthumb -mfpu=fpv5-d16 -mfloat-abi=hard")
elseif(FERRY_CORTEX_M STREQUAL "cortex-m33")
  set(_ferry_cpu "-mcpu=cortex-m33 -mthumb -mfpu=fpv5-sp-d16 -mfloat-abi=hard")
elseif(FERRY_CORTEX_M STREQUAL "cortex-m55")
  set(_ferry_cpu "-mcpu=cortex-m55 -mthumb -mfpu=auto -mfloat-abi=hard")
else()
  message(FATAL_ERROR "FERRY_CORTEX_M='${FERRY_CORTEX_M}': expected cortex-m3, cortex-m4, "
                      "cortex-m7, cortex-m33 or cortex-m55")
endif()
set(_ferry_flags "${_ferry_cpu} -ffunction-sections -fdata-sections -DFERRY_NO_THREAD_LOCAL")
set(CMAKE_C_FLAGS_INIT "${_ferry_flags}")
set(CMAKE_CXX_FLAGS_INIT "${_ferry_flags} -fno-exceptions -fno-rtti -fno-threadsafe-statics")
set(CMAKE_ASM_FLAGS_INIT "${_ferry_cpu}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,--gc-sections")

set(_ferry_host_headers ${CMAKE_BINARY_DIR}/ferry-host-headers)
ferry_host_headers(${_ferry_host_headers} flatbuffers)
set(CMAKE_FIND_ROOT_PATH ${_ferry_host_headers})
# A Generic system has no standard prefixes to search: name the folder.
set(FLATBUFFERS_INCLUDE_DIR ${_ferry_host_headers}/usr/include CACHE PATH
    "FlatBuffers headers (a folder that holds flatbuffers/ only)")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# What a firmware build can hold: the runtime alone. (Defaults only: a
# project that includes ferry can still set these before it does.)
set(FERRY_XNNPACK OFF CACHE BOOL "Build the XNNPACK backend")
set(FERRY_CONVERTER OFF CACHE BOOL "Build the converter and the ferry CLI")
set(FERRY_TESTS OFF CACHE BOOL "Build the test suite")
