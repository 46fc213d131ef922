// Quantizing a float matrix into the quantized layouts of weight_layout.h:
// the reference the converter's `--quantize f16|int8|int4` follows, and what
// the kernel tests pack their weights with. Header-only, C++17, no
// dependencies (like weight_layout.h, which defines where every byte goes).
//
// Input: a logical row-major float matrix [G*units, K] (PyTorch's layout of
// w_ih, w_hh, w_hr, a Linear weight), G = layout::gates_for_role. Output: the
// tensor's bytes and its scales, padding included, ready to be written.
//
//   f16   Panel8 halves, rounded to nearest even; |w| >= 65520 is an error
//         (it would become Inf).
//   int8  per row: s = max|w| / 127 (1.0 for an all-zero row and for the
//         padding rows), q = round_to_nearest_even(w / s) clamped to
//         [-127, 127]; scales as a Panel8 vector (panel order).
//   int4  per (row, group of 32 k), as llama.cpp's Q4_0: m = the element of
//         largest magnitude (sign kept, the first one on ties), d = m / -8
//         rounded to f16, q = round_to_nearest_even(w / d) clamped to
//         [-8, 7] (so m itself maps to -8 exactly); an all-zero group, one
//         whose d underflows to 0 in f16, and the padding rows get d = 1.0
//         and q = 0. |d| > 65504 (a weight beyond 524032) is an error.
// Non-finite weights are an error for every type, and so is an int8 matrix
// wider than layout::kMaxI8Cols (return false; the output is then
// incomplete and must not be written). store_i8_panel8x4 and
// store_i4_panel8x8q4 write integers and scales chosen elsewhere (the
// converter's calibration-aware rounding) into the same layouts.
#pragma once

#include <stdint.h>

#include "weight_layout.h"

namespace ferry {
namespace quant {

inline bool finite(float x) {
  uint32_t b;
  __builtin_memcpy(&b, &x, sizeof b);
  return (b & 0x7f800000u) != 0x7f800000u;
}

inline float magnitude(float x) { return x < 0.0f ? -x : x; }

// round_to_nearest_even(v) for |v| < 2^22, in the default rounding mode.
inline int round_even(float v) {
  const float kMagic = 12582912.0f;  // 1.5 * 2^23: the sum's ulp is 1
  volatile float t = v + kMagic;     // volatile: no reassociation, whatever the flags
  return static_cast<int>(t - kMagic);
}

// f16 Panel8: `out` holds layout::panel8_elements(G, units, K) halves.
inline bool pack_f16_panel8(const float* w, uint32_t gates, uint32_t units, uint32_t cols, uint16_t* out) {
  const uint64_t n = layout::panel8_elements(gates, units, cols);
  for (uint64_t i = 0; i < n; ++i) out[i] = 0;
  for (uint32_t g = 0; g < gates; ++g) {
    for (uint32_t u = 0; u < units; ++u) {
      for (uint32_t k = 0; k < cols; ++k) {
        const float v = w[(uint64_t{g} * units + u) * cols + k];
        if (!finite(v) || magnitude(v) >= 65520.0f) return false;
        out[layout::panel8_index(gates, cols, g, u, k)] = layout::half_from_float(v);
      }
    }
  }
  return true;
}

// int8 Panel8x4: `out` holds layout::panel8x4_bytes(G, units, K) bytes,
// `scales` layout::row_scale_elements(G, units) floats.
inline bool quantize_i8_panel8x4(const float* w, uint32_t gates, uint32_t units, uint32_t cols, int8_t* out,
                                 float* scales) {
  if (cols > layout::kMaxI8Cols) return false;  // the int32 sums could overflow
  const uint64_t n = layout::panel8x4_bytes(gates, units, cols);
  for (uint64_t i = 0; i < n; ++i) out[i] = 0;
  for (uint64_t i = 0; i < layout::row_scale_elements(gates, units); ++i) scales[i] = 1.0f;
  for (uint32_t g = 0; g < gates; ++g) {
    for (uint32_t u = 0; u < units; ++u) {
      const float* row = w + (uint64_t{g} * units + u) * cols;
      float m = 0.0f;
      for (uint32_t k = 0; k < cols; ++k) {
        if (!finite(row[k])) return false;
        if (magnitude(row[k]) > m) m = magnitude(row[k]);
      }
      const float s = m > 0.0f ? m / 127.0f : 1.0f;
      scales[layout::gate_column(gates, g, u)] = s;
      for (uint32_t k = 0; k < cols; ++k) {
        int q = round_even(row[k] / s);
        q = q > 127 ? 127 : q < -127 ? -127 : q;
        out[layout::panel8x4_index(gates, cols, g, u, k)] = static_cast<int8_t>(q);
      }
    }
  }
  return true;
}

// int4 Panel8x8q4: `out` holds layout::panel8x8q4_bytes(G, units, K) bytes,
// `group_scales` layout::group_scale_elements(G, units, K) halves.
inline bool quantize_i4_panel8x8q4(const float* w, uint32_t gates, uint32_t units, uint32_t cols, uint8_t* out,
                                   uint16_t* group_scales) {
  const uint64_t n = layout::panel8x8q4_bytes(gates, units, cols);
  for (uint64_t i = 0; i < n; ++i) out[i] = 0x88;  // q = 0 in both nibbles
  for (uint64_t i = 0; i < layout::group_scale_elements(gates, units, cols); ++i) group_scales[i] = 0x3c00;
  const uint64_t groups = layout::group_count(cols);
  for (uint32_t g = 0; g < gates; ++g) {
    for (uint32_t u = 0; u < units; ++u) {
      const float* row = w + (uint64_t{g} * units + u) * cols;
      for (uint64_t gi = 0; gi < groups; ++gi) {
        const uint32_t k0 = static_cast<uint32_t>(gi * layout::kGroup);
        const uint32_t k1 = k0 + layout::kGroup < cols ? k0 + layout::kGroup : cols;
        float m = 0.0f;
        for (uint32_t k = k0; k < k1; ++k) {
          if (!finite(row[k])) return false;
          if (magnitude(row[k]) > magnitude(m)) m = row[k];
        }
        const uint16_t dh = layout::half_from_float(m / -8.0f);
        const float d = layout::float_from_half(dh);
        if (!finite(d)) return false;
        if (d == 0.0f) continue;  // an all-zero (or all-tiny) group: scale 1.0, q = 0
        group_scales[layout::group_scale_index(gates, cols, g, u, gi)] = dh;
        for (uint32_t k = k0; k < k1; ++k) {
          int q = round_even(row[k] / d);
          q = q > 7 ? 7 : q < -8 ? -8 : q;
          layout::panel8x8q4_store(out, gates, cols, g, u, k, q);
        }
      }
    }
  }
  return true;
}

// Storing integers already chosen (the converter's calibration-aware
// rounding, converter/src/quantize/gptq.h, picks q and the scales itself):
// `q` is the logical row-major matrix [G*units, K] of integers on the grid
// above, `row_scales` one float per logical row (int8), `group_scales` the
// f16 bits of one scale per (logical row, group of 32 k), row-major
// [G*units, group_count(K)] (int4). Padding is written as the quantizers
// above write it. Returns false when a q lies off its grid or a scale is
// zero or not finite (the output is then incomplete and must not be
// written).
inline bool store_i8_panel8x4(const int8_t* q, const float* row_scales, uint32_t gates, uint32_t units,
                              uint32_t cols, int8_t* out, float* scales) {
  if (cols > layout::kMaxI8Cols) return false;
  const uint64_t n = layout::panel8x4_bytes(gates, units, cols);
  for (uint64_t i = 0; i < n; ++i) out[i] = 0;
  for (uint64_t i = 0; i < layout::row_scale_elements(gates, units); ++i) scales[i] = 1.0f;
  for (uint32_t g = 0; g < gates; ++g) {
    for (uint32_t u = 0; u < units; ++u) {
      const uint64_t r = uint64_t{g} * units + u;
      if (!finite(row_scales[r]) || row_scales[r] == 0.0f) return false;
      scales[layout::gate_column(gates, g, u)] = row_scales[r];
      for (uint32_t k = 0; k < cols; ++k) {
        const int v = q[r * cols + k];
        if (v < -127 || v > 127) return false;
        out[layout::panel8x4_index(gates, cols, g, u, k)] = static_cast<int8_t>(v);
      }
    }
  }
  return true;
}

inline bool store_i4_panel8x8q4(const int8_t* q, const uint16_t* group_scales, uint32_t gates, uint32_t units,
                                uint32_t cols, uint8_t* out, uint16_t* scales) {
  const uint64_t n = layout::panel8x8q4_bytes(gates, units, cols);
  for (uint64_t i = 0; i < n; ++i) out[i] = 0x88;
  for (uint64_t i = 0; i < layout::group_scale_elements(gates, units, cols); ++i) scales[i] = 0x3c00;
  const uint64_t groups = layout::group_count(cols);
  for (uint32_t g = 0; g < gates; ++g) {
    for (uint32_t u = 0; u < units; ++u) {
      const uint64_t r = uint64_t{g} * units + u;
      for (uint64_t gi = 0; gi < groups; ++gi) {
        const float d = layout::float_from_half(group_scales[r * groups + gi]);
        if (!finite(d) || d == 0.0f) return false;
        scales[layout::group_scale_index(gates, cols, g, u, gi)] = group_scales[r * groups + gi];
      }
      for (uint32_t k = 0; k < cols; ++k) {
        const int v = q[r * cols + k];
        if (v < -8 || v > 7) return false;
        layout::panel8x8q4_store(out, gates, cols, g, u, k, v);
      }
    }
  }
  return true;
}

}  // namespace quant
}  // namespace ferry
