// Every test starts in the floating-point mode the process started with.
//
// ferry_run's default (FERRY_FP_FLUSH) turns denormal flushing on for the
// calling thread and leaves it on, by design (ferry.h, ferry_fp_mode). A
// test binary runs many tests on one thread, so without this every test
// after the first ferry_run would inherit flushing, and a test that computes
// with denormals (QuantKernelSets.QuantizeRowsFollowsTheDefinitionOnEverySet)
// would pass or fail by which tests ran before it in the same process: it
// passed under ctest (one process per test) and failed in a sharded run on
// a machine where the CUDA tests, which ran first, left flushing on.
// fesetenv restores the whole mode: MXCSR on x86-64 (FTZ, DAZ, rounding,
// masks), FPCR on AArch64, FPSCR on ARMv7 (glibc).
#include <gtest/gtest.h>

#include <cfenv>

namespace {

class RestoreFloatingPointMode : public ::testing::EmptyTestEventListener {
 public:
  RestoreFloatingPointMode() { std::fegetenv(&initial_); }
  void OnTestStart(const ::testing::TestInfo&) override { std::fesetenv(&initial_); }

 private:
  std::fenv_t initial_;
};

const bool kRegistered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new RestoreFloatingPointMode);
  return true;
}();

}  // namespace
