#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "kernels/registry.h"

#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "kernels/quant/quant.h"
#include "kernels/reference/reference.h"
#include "kernels/simd/isa.h"
#include "platform/cpu_features.h"

#if (defined(__arm__) || defined(__aarch64__)) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace ferry {
namespace kernels {
namespace {

#if defined(__arm__) && defined(__linux__)
constexpr unsigned long kHwcapNeon = 1ul << 12;   // HWCAP_NEON (asm/hwcap.h)
constexpr unsigned long kHwcapVfpv4 = 1ul << 16;  // HWCAP_VFPv4: vfma (the quantized sets' fused fma)
#endif
#if defined(__aarch64__) && defined(__linux__)
constexpr unsigned long kHwcapAsimdDp = 1ul << 20;  // HWCAP_ASIMDDP (asm/hwcap.h): sdot, udot
#endif

// The ISA levels a cap (FERRY_MAX_ISA, below) can name, per architecture
// family, slowest first: an ISA runs under a cap of its family when its
// level is at most the cap's.
enum class IsaFamily : uint8_t { kX86, kArm };

struct IsaLevel {
  const char* name;
  IsaFamily family;
  uint8_t level;
};

constexpr IsaLevel kLevels[] = {
    {"avx2", IsaFamily::kX86, 1},   {"avxvnni", IsaFamily::kX86, 2}, {"avx512", IsaFamily::kX86, 3},
    {"avx512vnni", IsaFamily::kX86, 4}, {"neon", IsaFamily::kArm, 1},    {"neondot", IsaFamily::kArm, 2},
};

constexpr bool same_name(const char* a, const char* b) {
  while (*a && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}

// kLevels' entry for `name` (a name it lacks: a null name, which the
// static_assert below refuses).
constexpr IsaLevel isa_level(const char* name) {
  for (const IsaLevel& l : kLevels)
    if (same_name(l.name, name)) return l;
  return {nullptr, IsaFamily::kX86, 0};
}

// The SIMD ISAs, slowest first; each with the CPU check, its sets per dtype
// and its level.
struct Isa {
  bool (*runs_here)();
  const KernelSet* (*set_for)(DType dtype);
  IsaLevel level;
};

bool avx2_runs_here() {
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports also checks that the OS saves the YMM/ZMM
  // registers (OSXSAVE / XCR0), not just the CPUID bits.
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool avx512_runs_here() {
#if defined(__x86_64__) || defined(__i386__)
  return avx2_runs_here() && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

bool neon_runs_here() {
#if defined(__arm__) && defined(__linux__)
  // ARMv7: neon.cpp is compiled with -mfpu=neon; the CPU may still lack it.
  return (getauxval(AT_HWCAP) & kHwcapNeon) != 0;
#else
  // NEON is part of AArch64 (and, on bare-metal ARMv7, the build's choice);
  // where neon.cpp was not built its set is null anyway.
  return true;
#endif
}

// The quantized x86 sets also convert halves (f16 weights, int4 group
// scales) with F16C, which every AVX2 CPU has; checked all the same.
bool avx2_f16c_runs_here() {
#if defined(__x86_64__) || defined(__i386__)
  return avx2_runs_here() && platform::x86_has_f16c();
#else
  return false;
#endif
}

bool avxvnni_runs_here() {
#if defined(__x86_64__) || defined(__i386__)
  return avx2_f16c_runs_here() && platform::x86_has_avxvnni();
#else
  return false;
#endif
}

bool avx512vnni_runs_here() {
#if defined(__x86_64__) || defined(__i386__)
  return avx2_f16c_runs_here() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// The quantized NEON sets: ARMv7 also needs VFPv4's fused multiply-add.
bool neon_quant_runs_here() {
#if defined(__arm__) && defined(__linux__)
  const unsigned long hwcap = getauxval(AT_HWCAP);
  return (hwcap & kHwcapNeon) != 0 && (hwcap & kHwcapVfpv4) != 0;
#else
  return neon_runs_here();
#endif
}

bool neondot_runs_here() {
#if defined(__aarch64__) && defined(__linux__)
  return (getauxval(AT_HWCAP) & kHwcapAsimdDp) != 0;
#elif defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
  return true;  // bare metal or another OS: the build's choice
#else
  return false;
#endif
}

const KernelSet* avx2_set(DType dtype) { return dtype == DType::kF32 ? f32_avx2_kernel_set() : nullptr; }
const KernelSet* avx512_set(DType dtype) { return dtype == DType::kF32 ? f32_avx512_kernel_set() : nullptr; }
const KernelSet* neon_set(DType dtype) { return dtype == DType::kF32 ? f32_neon_kernel_set() : nullptr; }

const KernelSet* avx2_quant_set(DType dtype) {
  switch (dtype) {
    case DType::kF16: return f16_avx2_kernel_set();
    case DType::kI8: return i8_avx2_kernel_set();
    case DType::kI4: return i4_avx2_kernel_set();
    default: return nullptr;
  }
}
const KernelSet* avxvnni_set(DType dtype) {
  return dtype == DType::kI8 ? i8_avxvnni_kernel_set() : dtype == DType::kI4 ? i4_avxvnni_kernel_set() : nullptr;
}
const KernelSet* avx512vnni_set(DType dtype) {
  return dtype == DType::kI8 ? i8_avx512vnni_kernel_set() : dtype == DType::kI4 ? i4_avx512vnni_kernel_set() : nullptr;
}
const KernelSet* neon_quant_set(DType dtype) {
  switch (dtype) {
    case DType::kF16: return f16_neon_kernel_set();
    case DType::kI8: return i8_neon_kernel_set();
    case DType::kI4: return i4_neon_kernel_set();
    default: return nullptr;
  }
}
const KernelSet* neondot_set(DType dtype) {
  return dtype == DType::kI8 ? i8_neondot_kernel_set() : dtype == DType::kI4 ? i4_neondot_kernel_set() : nullptr;
}

// Per dtype the order is slowest first: f32 avx2 < avx512; i8/i4 avx2 <
// avxvnni < avx512vnni; neon < neondot.
constexpr Isa kIsas[] = {
    {avx2_runs_here, avx2_set, isa_level("avx2")},
    {avx2_f16c_runs_here, avx2_quant_set, isa_level("avx2")},
    {avx512_runs_here, avx512_set, isa_level("avx512")},
    {avxvnni_runs_here, avxvnni_set, isa_level("avxvnni")},
    {avx512vnni_runs_here, avx512vnni_set, isa_level("avx512vnni")},
    {neon_runs_here, neon_set, isa_level("neon")},
    {neon_quant_runs_here, neon_quant_set, isa_level("neon")},
    {neondot_runs_here, neondot_set, isa_level("neondot")},
};

constexpr size_t kIsaCount = sizeof(kIsas) / sizeof(kIsas[0]);

constexpr bool every_isa_has_a_level() {
  for (const Isa& isa : kIsas)
    if (!isa.level.name) return false;
  return true;
}
static_assert(every_isa_has_a_level(), "an ISA of kIsas names a level kLevels lacks");

// Whether `isa` runs under `cap`.
bool under_cap(const Isa& isa, const IsaCap& cap) {
  if (!cap.active) return true;
  if (cap.none) return false;
  return isa.level.family != static_cast<IsaFamily>(cap.family) || isa.level.level <= cap.level;
}

// FERRY_MAX_ISA, read once per process: the first call parses it and
// publishes the result in one word (bit 31: read; every thread that races
// there computes the same word). No function-local static: its guard would
// need libstdc++ (__cxa_guard_acquire), which a C program linking the
// static runtime does not bring (tests/package: the C app).
std::atomic<uint32_t> g_cap_word{0};
constexpr uint32_t kCapRead = 1u << 31;

uint32_t pack_cap(const IsaCap& c) {
  return kCapRead | (c.active ? 1u : 0u) | (c.none ? 2u : 0u) | (c.unknown ? 4u : 0u) | (uint32_t{c.family} << 8) |
         (uint32_t{c.level} << 16);
}

IsaCap unpack_cap(uint32_t w) {
  IsaCap c;
  c.active = (w & 1u) != 0;
  c.none = (w & 2u) != 0;
  c.unknown = (w & 4u) != 0;
  c.family = static_cast<uint8_t>(w >> 8);
  c.level = static_cast<uint8_t>(w >> 16);
  return c;
}

IsaCap process_cap() {
  uint32_t w = g_cap_word.load(std::memory_order_acquire);
  if (!(w & kCapRead)) {
#if defined(__linux__) || defined(__APPLE__)
    w = pack_cap(parse_isa_cap(getenv("FERRY_MAX_ISA")));
#else
    w = pack_cap(parse_isa_cap(nullptr));
#endif
    g_cap_word.store(w, std::memory_order_release);
  }
  return unpack_cap(w);
}

}  // namespace

IsaCap parse_isa_cap(const char* value) {
  IsaCap cap;
  if (!value || !*value) return cap;
  cap.active = true;
  if (strcmp(value, "none") == 0) {
    cap.none = true;
    return cap;
  }
  for (const IsaLevel& l : kLevels) {
    if (strcmp(value, l.name) == 0) {
      cap.family = static_cast<uint8_t>(l.family);
      cap.level = l.level;
      return cap;
    }
  }
  cap.active = false;  // not a name of kLevels: no cap
  cap.unknown = true;
  return cap;
}

IsaCap simd_isa_cap() { return process_cap(); }

size_t simd_kernel_sets_under(const IsaCap& cap, DType dtype, const KernelSet** out, size_t capacity) {
  size_t n = 0;
  for (const Isa& isa : kIsas) {
    // The cap and the CPU first: an ISA's accessor is code compiled for that ISA.
    if (n >= capacity || !under_cap(isa, cap) || !isa.runs_here()) continue;
    const KernelSet* set = isa.set_for(dtype);
    if (set) out[n++] = set;
  }
  return n;
}

const KernelSet* reference_kernel_set(DType dtype) {
  switch (dtype) {
    case DType::kF32: return f32_reference_kernel_set();
    case DType::kF16: return f16_reference_kernel_set();  // these three are null when built with
    case DType::kI8: return i8_reference_kernel_set();    // FERRY_QUANT_REFERENCE=OFF
    case DType::kI4: return i4_reference_kernel_set();
  }
  return nullptr;
}

size_t runnable_simd_kernel_sets(DType dtype, const KernelSet** out, size_t capacity) {
  return simd_kernel_sets_under(process_cap(), dtype, out, capacity);
}

const KernelSet* best_simd_kernel_set(DType dtype) {
  const KernelSet* sets[kIsaCount];
  const size_t n = runnable_simd_kernel_sets(dtype, sets, kIsaCount);
  return n ? sets[n - 1] : nullptr;
}

}  // namespace kernels
}  // namespace ferry
