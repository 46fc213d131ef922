# 32-bit Arm Linux, ARMv7-A with NEON and hard float (Raspberry Pi 2/3 with a
# 32-bit OS, Cortex-A7/A9/A15 boards), cross-compiled with Debian's
# g++-arm-linux-gnueabihf.
#
#   cmake -S . -B build-armv7 -G Ninja \
#         -DCMAKE_TOOLCHAIN_FILE=targets/arm-linux-gnueabihf.cmake
#   (or: cmake --preset armv7; the whole suite under qemu:
#    scripts/cross-test.sh armv7)
#
# FERRY_ARMV7_FPU: neon-vfpv4 (default: NEON with fused multiply-add,
# Cortex-A7/A15/A17) or neon (Cortex-A8/A9, no VFPv4).
# See linux-cross.cmake for FERRY_TARGET_SYSROOT and the qemu emulator.
set(CMAKE_SYSTEM_PROCESSOR armv7-a)
set(FERRY_TARGET_TRIPLE arm-linux-gnueabihf)
set(FERRY_QEMU qemu-arm)
if(NOT FERRY_ARMV7_FPU)
  set(FERRY_ARMV7_FPU neon-vfpv4)
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES FERRY_ARMV7_FPU)
set(CMAKE_C_FLAGS_INIT "-march=armv7-a -mfpu=${FERRY_ARMV7_FPU} -mfloat-abi=hard")
# -Wno-psabi: silences GCC's notes that the ABI of some std:: types changed
# in GCC 7.1 (nothing here links code built by GCC 6 or older).
set(CMAKE_CXX_FLAGS_INIT "-march=armv7-a -mfpu=${FERRY_ARMV7_FPU} -mfloat-abi=hard -Wno-psabi")
include(${CMAKE_CURRENT_LIST_DIR}/linux-cross.cmake)
