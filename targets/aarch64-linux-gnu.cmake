# 64-bit Arm Linux (Raspberry Pi 3/4/5 with a 64-bit OS, Graviton, the CPU
# side of a Jetson), cross-compiled with Debian's g++-aarch64-linux-gnu.
# NEON is part of AArch64: the SIMD backend's NEON kernels build by default.
#
#   cmake -S . -B build-aarch64 -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=targets/aarch64-linux-gnu.cmake
#   (or: cmake --preset aarch64; the whole suite under qemu:
#    scripts/cross-test.sh aarch64)
#
# See linux-cross.cmake for FERRY_TARGET_SYSROOT and the qemu emulator.
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(FERRY_TARGET_TRIPLE aarch64-linux-gnu)
set(FERRY_QEMU qemu-aarch64)
include(${CMAKE_CURRENT_LIST_DIR}/linux-cross.cmake)
