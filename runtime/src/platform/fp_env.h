// Denormals flushed for a call (ferry_run, ferry_step), as the session's
// ferry_fp_mode says: FLUSH turns flushing on once per thread and leaves it
// (a call then only checks it: flushing_denormals on x86, a read of the
// mode elsewhere), RESTORE also restores the caller's mode
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
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ferry {

#if defined(__SSE2__)
// Whether this thread flushes denormals (FTZ and DAZ both on), found with
// one multiply instead of a read of MXCSR: stmxcsr returns the exception
// flags of the float operations in flight, and in a profile of a small step
// (W1 LSTM H 16) the samples pile up right after it, behind the previous
// step's update (ferry_peer_bench, W4 GRU H 16: 74 ns a step with the read,
// 69.5 with this check, 68.6 with no check at all). Lane 0: the smallest
// denormal times 2^24 is 2^-125, a normal, or 0 under DAZ; lane 1: FLT_MIN
// times 1/2 is 2^-127, a denormal, or 0 under FTZ. The lanes are compared
// as integers (a float compare reads a denormal as 0 under DAZ). Needs the
// denormal and underflow exceptions masked, as they are unless the program
// unmasks them (ferry.h, FERRY_FP_FLUSH).
inline bool flushing_denormals() {
  __m128 p = _mm_setr_ps(1.40129846e-45f, 1.17549435e-38f, 0.0f, 0.0f);
  const __m128 scale = _mm_setr_ps(16777216.0f, 0.5f, 0.0f, 0.0f);
  __asm__ volatile("" : "+x"(p));  // the multiply sits between two volatile barriers:
  p = _mm_mul_ps(p, scale);          // after any earlier change of the mode, not folded,
  __asm__ volatile("" : "+x"(p));   // and in the caller's encoding (SSE or VEX)
  return _mm_movemask_epi8(_mm_cmpeq_epi32(_mm_castps_si128(p), _mm_setzero_si128())) == 0xFFFF;
}
#endif

class FlushDenormals {
 public:
  explicit FlushDenormals(ferry_fp_mode mode) {
    if (mode == FERRY_FP_CALLER) return;
#if defined(__x86_64__) || defined(__i386__)
#if defined(__SSE2__)
    if (mode == FERRY_FP_FLUSH && flushing_denormals()) return;  // on already: nothing to set, nothing to restore
#endif
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
