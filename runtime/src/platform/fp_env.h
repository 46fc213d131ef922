// Denormals flushed for a call (ferry_run, ferry_step), as the session's
// ferry_fp_mode says: FLUSH turns flushing on once per thread and leaves it
// (a call then only reads the mode), RESTORE also restores the caller's mode
// when the call returns, CALLER touches nothing. A recurrence that
// decays towards zero otherwise spends most of its time in denormal
// micro-code assists (x86: ~100 cycles per operation).
//   x86-64  MXCSR.FTZ (bit 15: results) and MXCSR.DAZ (bit 6: inputs)
//   AArch64 FPCR.FZ (bit 24)
//   ARMv7   FPSCR.FZ (bit 24); NEON flushes regardless
// Worker threads get the same through PTHREADPOOL_FLAG_DISABLE_DENORMALS.
#pragma once

#include <stdint.h>

#include "ferry/ferry.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace ferry {

class FlushDenormals {
 public:
  explicit FlushDenormals(ferry_fp_mode mode) {
    if (mode == FERRY_FP_CALLER) return;
#if defined(__x86_64__) || defined(__i386__)
    const uint32_t csr = _mm_getcsr();
    saved_ = csr;
    changed_ = (csr & 0x8040u) != 0x8040u;
    if (changed_) _mm_setcsr(csr | 0x8040u);  // ldmxcsr only when it changes something
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    saved_ = fpcr;
    changed_ = !(fpcr & (1u << 24));
    if (changed_) __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr | (1u << 24)));
#elif defined(__arm__) && defined(__ARM_FP)
    uint32_t fpscr;
    __asm__ __volatile__("vmrs %0, fpscr" : "=r"(fpscr));
    saved_ = fpscr;
    changed_ = !(fpscr & (1u << 24));
    if (changed_) __asm__ __volatile__("vmsr fpscr, %0" : : "r"(fpscr | (1u << 24)));
#endif
    if (mode != FERRY_FP_RESTORE) changed_ = false;  // FLUSH: leave it on
  }
  ~FlushDenormals() {
#if defined(__x86_64__) || defined(__i386__)
    if (changed_) _mm_setcsr(static_cast<uint32_t>(saved_));
#elif defined(__aarch64__)
    if (changed_) __asm__ __volatile__("msr fpcr, %0" : : "r"(saved_));
#elif defined(__arm__) && defined(__ARM_FP)
    if (changed_) __asm__ __volatile__("vmsr fpscr, %0" : : "r"(static_cast<uint32_t>(saved_)));
#endif
  }
  FlushDenormals(const FlushDenormals&) = delete;
  FlushDenormals& operator=(const FlushDenormals&) = delete;

 private:
  uint64_t saved_ = 0;
  bool changed_ = false;  // the caller ran without flushing: restore on exit
};

}  // namespace ferry
