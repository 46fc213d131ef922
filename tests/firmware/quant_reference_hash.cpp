// A hash of what the quantized reference sets compute (quantize_rows bytes
// and scales, GEMM outputs) on fixed pseudo-random data. Their products are
// exact integer sums and fixed fp32 steps (kernels/kernel_set.h), so the
// hashes must be the same on every target: quant_reference_m4.sh builds
// this for the host and for a Cortex-M4 (run under QEMU) and compares.
// put() is the target's console.
#include <stdint.h>
#include <string.h>
#include "kernels/kernel_set.h"
#include "kernels/quant/quant.h"
#include "shared/weight_layout.h"
#include "shared/weight_quant.h"
extern "C" void put(const char* s);
using namespace ferry;
static uint32_t lcg = 12345;
static float rnd() { lcg = lcg * 1664525u + 1013904223u; return float(int32_t(lcg >> 8) - (1 << 23)) / float(1 << 23); }
static uint32_t h = 2166136261u;
static void mix(const void* p, size_t n) { const uint8_t* b = (const uint8_t*)p; for (size_t i = 0; i < n; ++i) { h ^= b[i]; h *= 16777619u; } }
alignas(64) static float wl[4 * 13 * 45];
alignas(64) static uint8_t wdata[8192];
alignas(64) static float wsc[512];
alignas(64) static uint16_t wgs[512];
alignas(64) static float x[5 * 45];
alignas(64) static int8_t q[5 * 128];
static float xs[5];
alignas(64) static float bias[4 * 16];
static float c[5 * 64];
static void hex(uint32_t v, char* out) { for (int i = 0; i < 8; ++i) out[i] = "0123456789abcdef"[(v >> (28 - 4 * i)) & 15]; out[8] = 0; }
extern "C" int run_check() {
  const uint32_t G = 4, U = 13, K = 45, R = 5;
  for (float& v : wl) v = rnd();
  for (float& v : x) v = 3 * rnd();
  for (float& v : bias) v = rnd();
  const kernels::KernelSet* sets[3] = {kernels::f16_reference_kernel_set(), kernels::i8_reference_kernel_set(), kernels::i4_reference_kernel_set()};
  for (int s = 0; s < 3; ++s) {
    const kernels::KernelSet* set = sets[s];
    Weight w; w.gates = G; w.units = U; w.cols = K; w.data = wdata; w.dtype = set->dtype;
    memset(wdata, 0, sizeof wdata);
    if (s == 0) { quant::pack_f16_panel8(wl, G, U, K, (uint16_t*)wdata); w.layout = WeightLayout::kPanel8; }
    if (s == 1) { quant::quantize_i8_panel8x4(wl, G, U, K, (int8_t*)wdata, wsc); w.layout = WeightLayout::kPanel8x4; w.scales = wsc; }
    if (s == 2) { quant::quantize_i4_panel8x8q4(wl, G, U, K, wdata, wgs); w.layout = WeightLayout::kPanel8x8q4; w.group_scales = wgs; }
    Weight b; b.data = bias; b.gates = G; b.units = U; b.cols = 1; b.layout = WeightLayout::kPanel8;
    const uint32_t cols = layout::gate_row_floats(G, U);
    kernels::GemmArgs g{&w, x, K, &b, nullptr, c, cols, cols};
    if (set->quantize_rows) {
      set->quantize_rows(x, R, K, K, q, 128, xs);
      for (uint32_t r = 0; r < R; ++r) mix(q + r * 128, set->activation_bytes(K));
      mix(xs, sizeof xs);
      g.qa = q; g.ldqa = 128; g.a_scales = xs;
    }
    memset(c, 0, sizeof c);
    set->gemm(g, 0, R, 0, G * layout::panels_of(U));
    mix(c, R * cols * sizeof(float));
    char line[64] = "set "; strcat(line, set->name); strcat(line, " hash "); char hx[9]; hex(h, hx); strcat(line, hx); strcat(line, "\n");
    put(line);
  }
  return 0;
}
