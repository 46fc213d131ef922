# Shared part of the Linux cross toolchain files (aarch64-linux-gnu.cmake,
# arm-linux-gnueabihf.cmake), which set FERRY_TARGET_TRIPLE and FERRY_QEMU
# and then include this file.
#
# Compilers: Debian's cross compilers (g++-aarch64-linux-gnu, ...); the
#   target's C library lives in /usr/<triple>.
# FERRY_TARGET_SYSROOT (cache variable or environment, optional): a private
#   folder with the target's own libraries: Debian's XNNPACK, pthreadpool and
#   cpuinfo for the target unpacked with `dpkg -x` (they cannot be installed
#   beside the host's) and GoogleTest built for the target. Its usr/include
#   and usr/lib/<triple> are searched like a target system's would be.
#   scripts/cross-test.sh makes it.
# Header-only host libraries (FlatBuffers, nlohmann/json, Eigen, CLI11) come from a
#   folder of symlinks in the build tree (host-headers.cmake).
# Programs built for the target run under qemu-user: CMAKE_CROSSCOMPILING_
#   EMULATOR is used by ctest, by gtest_discover_tests and by the tests'
#   FERRY_CLI wrapper (cmake/emulator.cmake); binfmt_misc is not needed.
#   Pass -DCMAKE_CROSSCOMPILING_EMULATOR= (empty) to run binaries directly,
#   e.g. on an Arm host.
include(${CMAKE_CURRENT_LIST_DIR}/host-headers.cmake)

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_C_COMPILER ${FERRY_TARGET_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${FERRY_TARGET_TRIPLE}-g++)
set(CMAKE_LIBRARY_ARCHITECTURE ${FERRY_TARGET_TRIPLE})

if(NOT FERRY_TARGET_SYSROOT AND DEFINED ENV{FERRY_TARGET_SYSROOT})
  set(FERRY_TARGET_SYSROOT $ENV{FERRY_TARGET_SYSROOT})
endif()
# try_compile projects read this file again: hand the sysroot down.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES FERRY_TARGET_SYSROOT)

set(_ferry_host_headers ${CMAKE_BINARY_DIR}/ferry-host-headers)
ferry_host_headers(${_ferry_host_headers} flatbuffers nlohmann eigen3 CLI)

set(CMAKE_FIND_ROOT_PATH /usr/${FERRY_TARGET_TRIPLE} ${_ferry_host_headers})
set(_ferry_include_dirs ${_ferry_host_headers}/usr/include)
if(FERRY_TARGET_SYSROOT)
  list(PREPEND CMAKE_FIND_ROOT_PATH ${FERRY_TARGET_SYSROOT})
  # Multiarch first, as on the target (openssl/opensslconf.h lives there).
  list(APPEND _ferry_include_dirs ${FERRY_TARGET_SYSROOT}/usr/include/${FERRY_TARGET_TRIPLE}
                                  ${FERRY_TARGET_SYSROOT}/usr/include)
  set(_ferry_libdir ${FERRY_TARGET_SYSROOT}/usr/lib/${FERRY_TARGET_TRIPLE})
  # -rpath-link: the linker follows libXNNPACK.so's own dependencies
  # (pthreadpool, cpuinfo) inside the sysroot.
  foreach(kind EXE SHARED MODULE)
    string(APPEND CMAKE_${kind}_LINKER_FLAGS_INIT " -L${_ferry_libdir} -Wl,-rpath-link,${_ferry_libdir}")
  endforeach()
  set(ENV{PKG_CONFIG_LIBDIR} ${_ferry_libdir}/pkgconfig:${FERRY_TARGET_SYSROOT}/usr/share/pkgconfig)
  set(ENV{PKG_CONFIG_SYSROOT_DIR} ${FERRY_TARGET_SYSROOT})
endif()
set(CMAKE_C_STANDARD_INCLUDE_DIRECTORIES ${_ferry_include_dirs})
set(CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES ${_ferry_include_dirs})

# Tools (flatc) from the host; libraries, headers and packages from the target.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

if(NOT DEFINED CMAKE_CROSSCOMPILING_EMULATOR)
  find_program(FERRY_QEMU_PROGRAM ${FERRY_QEMU} NO_CMAKE_FIND_ROOT_PATH)
  if(FERRY_QEMU_PROGRAM)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${FERRY_QEMU_PROGRAM} -L /usr/${FERRY_TARGET_TRIPLE})
    if(FERRY_TARGET_SYSROOT)
      list(APPEND CMAKE_CROSSCOMPILING_EMULATOR -E LD_LIBRARY_PATH=${_ferry_libdir})
    endif()
  endif()
endif()
