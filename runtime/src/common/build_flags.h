// The build flags the runtime's numbers depend on, stated in the source, so
// that a build that passes no flags (an Arduino library, a plain Makefile,
// an IDE project; scripts/export-embedded.sh) gets the same bits as the
// CMake build. Every runtime translation unit includes this header first,
// before any other header, so that it covers every function the unit
// defines, inline ones from headers included after it too
// (scripts/export-embedded.sh refuses a source that does not).
//
// - No compiler-fused multiply-adds (-ffp-contract=off): GCC fuses a*b + c
//   into one FMA by default on Arm (Cortex-M4F/M7/M33/M55, AArch64), which
//   rounds once instead of twice. The reference kernels round the same way
//   on every target only without it; the kernels' own FMAs are explicit
//   (kernels/kernel_set.h, numeric contract). Clang honours the pragma
//   unless told -ffp-contract=fast, which a build must then not pass.
// - No thread_local on a core without an OS (Cortex-M): newlib has no TLS
//   (__aeabi_read_tp), so the error message is one global buffer there
//   (api/status.cpp).
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

#if !defined(FERRY_NO_THREAD_LOCAL) && \
    ((defined(__ARM_ARCH_PROFILE) && __ARM_ARCH_PROFILE == 'M') || defined(__ZEPHYR__))
#define FERRY_NO_THREAD_LOCAL 1
#endif
