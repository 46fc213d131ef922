// The ISA cap (FERRY_MAX_ISA, kernels/registry.h): which SIMD sets each
// value allows, on the sets this build has and this CPU runs, and that the
// process's cap is the environment's. ctest runs this binary twice: once as
// every other test (no cap: the process cap must be off) and once with
// FERRY_MAX_ISA=avx2 (tests/CMakeLists.txt: unit.isa_cap_avx2, which also
// runs the kernel-set, backend and determinism tests under it, so that on
// an AVX-512 machine the AVX2 set's batched paths run end to end).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel_set.h"
#include "kernels/registry.h"

namespace {

using namespace ferry;
using kernels::KernelSet;

std::vector<const KernelSet*> sets_under(const char* cap, DType dtype) {
  const KernelSet* sets[16];
  const size_t n = kernels::simd_kernel_sets_under(kernels::parse_isa_cap(cap), dtype, sets, 16);
  return std::vector<const KernelSet*>(sets, sets + n);
}

// Whether a set's name ends in one of the x86 ISAs above AVX2.
bool above_avx2(const KernelSet* s) {
  const std::string name = s->name;
  return name.find("avx512") != std::string::npos || name.find("avxvnni") != std::string::npos;
}

TEST(IsaCap, ParsesTheLevelNames) {
  EXPECT_FALSE(kernels::parse_isa_cap(nullptr).active);
  EXPECT_FALSE(kernels::parse_isa_cap("").active);
  for (const char* name : {"avx2", "avxvnni", "avx512", "avx512vnni", "neon", "neondot"}) {
    const kernels::IsaCap cap = kernels::parse_isa_cap(name);
    EXPECT_TRUE(cap.active) << name;
    EXPECT_FALSE(cap.none) << name;
    EXPECT_FALSE(cap.unknown) << name;
  }
  EXPECT_LT(kernels::parse_isa_cap("avx2").level, kernels::parse_isa_cap("avx512").level);
  EXPECT_EQ(kernels::parse_isa_cap("avx2").family, kernels::parse_isa_cap("avx512vnni").family);
  EXPECT_NE(kernels::parse_isa_cap("avx2").family, kernels::parse_isa_cap("neon").family);
  EXPECT_TRUE(kernels::parse_isa_cap("none").active);
  EXPECT_TRUE(kernels::parse_isa_cap("none").none);
  for (const char* bad : {"AVX2", "avx-2", "sse4", "avx2 ", "x"}) {
    const kernels::IsaCap cap = kernels::parse_isa_cap(bad);
    EXPECT_FALSE(cap.active) << bad;
    EXPECT_TRUE(cap.unknown) << bad;
  }
}

TEST(IsaCap, CapsTheSetsOfItsFamilyOnly) {
  for (DType d : {DType::kF32, DType::kF16, DType::kI8, DType::kI4}) {
    const std::vector<const KernelSet*> all = sets_under(nullptr, d);
    // No cap, an unknown value and the highest level of each family: every set.
    // (On Arm, avx512vnni names another family: every set too.)
    for (const char* same : {"", "bogus", "avx512vnni"}) EXPECT_EQ(sets_under(same, d), all) << "cap '" << same << "'";
    EXPECT_TRUE(sets_under("none", d).empty());
    // avx2: a prefix of the sets (slowest first), none above AVX2.
    const std::vector<const KernelSet*> capped = sets_under("avx2", d);
    ASSERT_LE(capped.size(), all.size());
    for (size_t i = 0; i < capped.size(); ++i) {
      EXPECT_EQ(capped[i], all[i]);
      EXPECT_FALSE(above_avx2(capped[i])) << capped[i]->name;
    }
    for (size_t i = capped.size(); i < all.size(); ++i) EXPECT_TRUE(above_avx2(all[i])) << all[i]->name;
    // An Arm cap leaves x86 sets alone (and caps neondot on Arm).
    for (const KernelSet* s : sets_under("neon", d)) EXPECT_EQ(std::string(s->name).find("neondot"), std::string::npos) << s->name;
#if defined(__x86_64__)
    EXPECT_EQ(sets_under("neon", d), all);
#endif
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    const std::vector<const KernelSet*> f32 = sets_under("avx2", DType::kF32);
    ASSERT_EQ(f32.size(), 1u);
    EXPECT_STREQ(f32[0]->name, "f32_avx2");
    if (__builtin_cpu_supports("avx512f")) {
      EXPECT_STREQ(sets_under("avx512", DType::kF32).back()->name, "f32_avx512");
    }
  }
#endif
}

// The process's cap is FERRY_MAX_ISA's, and best_simd_kernel_set and
// runnable_simd_kernel_sets obey it.
TEST(IsaCap, TheProcessCapIsTheEnvironments) {
  const char* env = std::getenv("FERRY_MAX_ISA");
  const kernels::IsaCap want = kernels::parse_isa_cap(env);
  const kernels::IsaCap got = kernels::simd_isa_cap();
  EXPECT_EQ(got.active, want.active);
  EXPECT_EQ(got.none, want.none);
  EXPECT_EQ(got.family, want.family);
  EXPECT_EQ(got.level, want.level);
  for (DType d : {DType::kF32, DType::kF16, DType::kI8, DType::kI4}) {
    const std::vector<const KernelSet*> want_sets = sets_under(env, d);
    const KernelSet* sets[16];
    const size_t n = kernels::runnable_simd_kernel_sets(d, sets, 16);
    EXPECT_EQ(std::vector<const KernelSet*>(sets, sets + n), want_sets);
    EXPECT_EQ(kernels::best_simd_kernel_set(d), want_sets.empty() ? nullptr : want_sets.back());
    if (env && std::strcmp(env, "avx2") == 0) {
      for (size_t i = 0; i < n; ++i) EXPECT_FALSE(above_avx2(sets[i])) << sets[i]->name;
    }
  }
  std::printf("[ INFO     ] FERRY_MAX_ISA=%s, best f32 set: %s\n", env ? env : "(unset)",
              kernels::best_simd_kernel_set(DType::kF32) ? kernels::best_simd_kernel_set(DType::kF32)->name : "none");
}

}  // namespace
