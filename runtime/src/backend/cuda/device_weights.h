// The CUDA backend's weight readers: one per stored dtype (f32, f16, int8,
// int4), written once for the device (the kernels of kernels.cu and
// recurrent.cu, instantiated per reader) and the host (the CPU emulation of
// the kernels in tests/unit/test_cuda_host.cpp). A kernel that multiplies
// by a weight matrix is a template over a reader; which reader a layer gets
// is a table lookup by its dtype (kernels.cu, recurrent.cu), never an
// `if (dtype)` in a kernel.
//
// Every reader reads the model's bytes as the converter stored them
// (shared/weight_layout.h), uploaded once and never repacked:
//   f32   Panel8: lane j of vector q, column k at vector_offset(G, K, q) + k*G*8 + j
//   f16   Panel8 halves, converted exactly to fp32 in registers
//   int8  Panel8x4: lane j's 4 consecutive k in one 32-bit word, quad c of
//         vector q at panel8x4_vector_index(G, K, q) + c*G*32 + 4j;
//         fp32 row scales (a Panel8 vector: row (q, j) at 8q + j)
//   int4  Panel8x8q4: lane j's word of block b (8 k) holds k 8b..8b+3 in its
//         low nibbles and 8b+4..8b+7 in its high nibbles (q + 8); f16 group
//         scales, group gi of row (q, j) at ((p*groups + gi)*G + g)*8 + j
// A product is split into "chunks" of the reader's own width (1 column for
// the float types, a word of 4 for int8, a group of 32 for int4); a chunk's
// weights are loaded once and multiplied into several samples' chains.
//
// Numeric contract (the quantized sets' of kernels/kernel_set.h, over the
// column ranges of device_math.h's k splits):
//   f32, f16  partial = one fmaf chain over the range from 0, k ascending;
//             the splits' partials added left to right; y = init + sum
//   int8      partial = the int32 dot product over the range (dp4a on
//             sm_61+, exact: |dot| <= K * 127^2 < 2^31 by the loader's
//             kMaxI8Cols); the splits added as integers (exact); y =
//             fmaf(row_scale * a_scale, float(dot), init)
//   int4      partial = acc over the range's groups, ascending: acc =
//             fmaf(group_scale, float(dot_group), acc); splits added left
//             to right; y = fmaf(acc, a_scale, init)
// With one split (K < 256) the int8 and int4 products are the CPU kernel
// sets' bit for bit. The activations of int8 and int4 products are
// quantized per row exactly as kernel_set.h defines it ("Activations"):
// m = max |x| on the bit patterns, s = m / 127, q = round_to_nearest_even(
// x * (127 / m)); m >= +Inf: s = NaN, q = 0; m < 2^-120: s = 0, q = 0.
// (quantize_row below; the maximum is exact, so any reduction order of a
// kernel gives the same bytes.)
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if !defined(__CUDA_ARCH__)
#include "shared/weight_layout.h"
#else
#include <cuda_fp16.h>
#endif

#if defined(__CUDACC__)
#define FERRY_HD __host__ __device__ __forceinline__
#else
#define FERRY_HD inline
#endif

namespace ferry {
namespace cuda {

// ------------------------------------------------------------ Panel8 ----

FERRY_HD uint32_t panels_of(uint32_t units) { return (units + 7u) / 8u; }

// Element offset of vector q, lane 0, column 0 of a Panel8 matrix of G
// gates and K columns; column k is k * G * 8 further (weight_layout.h).
FERRY_HD size_t vector_offset(uint32_t G, uint32_t K, uint32_t q) {
  return (size_t{q / G} * K * G + q % G) * 8u;
}

// Element (c, k) of a Panel8 matrix read as a GEMM operand: output column
// c = 8q + j (panel order; the natural order when G = 1).
FERRY_HD size_t gemm_weight_index(uint32_t G, uint32_t K, uint32_t c, uint32_t k) {
  return vector_offset(G, K, c / 8u) + size_t{k} * G * 8u + c % 8u;
}

// Stored weight types, as the kernels number them (ferry::DType's values;
// plan.cpp static_asserts the two agree).
enum WeightType : int32_t { kWeightF32 = 0, kWeightF16 = 1, kWeightI8 = 2, kWeightI4 = 3 };
constexpr int kWeightTypes = 4;

// A weight matrix [G*units, K] on the device, in its dtype's layout.
struct DeviceWeight {
  const void* data;    // null: absent
  const void* scales;  // int8: fp32 row scales; int4: f16 group scales; else null
  int32_t type;        // WeightType
  int32_t gates;       // G
  int32_t cols;        // K
  int32_t reserved;
};

// ------------------------------------------------------------ per type --
// The only place that says how the types differ in size and shape.

// Columns a stored row covers (the padding past K holds zeros).
FERRY_HD uint32_t padded_cols(int32_t type, uint32_t K) {
  return type == kWeightI8 ? (K + 3u) / 4u * 4u : type == kWeightI4 ? (K + 31u) / 32u * 32u : K;
}

// Columns of one chunk: what a reader loads at once.
FERRY_HD uint32_t chunk_cols(int32_t type) { return type == kWeightI8 ? 4u : type == kWeightI4 ? 32u : 1u; }

// Whether products with this type read quantized activation rows.
FERRY_HD bool quantizes_activations(int32_t type) { return type == kWeightI8 || type == kWeightI4; }

// Bytes of one quantized activation row of K values (16-aligned), 0 for
// the float types.
FERRY_HD uint32_t activation_row_bytes(int32_t type, uint32_t K) {
  return quantizes_activations(type) ? (padded_cols(type, K) + 15u) / 16u * 16u : 0u;
}

// Bytes of one panel (8 units x G gates x K columns) of a matrix, and of
// its scales.
FERRY_HD size_t panel_bytes(int32_t type, uint32_t G, uint32_t K) {
  const size_t lanes = size_t{8} * G;
  switch (type) {
    case kWeightF16: return lanes * K * 2u;
    case kWeightI8: return lanes * padded_cols(type, K);
    case kWeightI4: return lanes * padded_cols(type, K) / 2u;
    default: return lanes * K * 4u;
  }
}
FERRY_HD size_t panel_scale_bytes(int32_t type, uint32_t G, uint32_t K) {
  const size_t lanes = size_t{8} * G;
  return type == kWeightI8 ? lanes * 4u : type == kWeightI4 ? lanes * (padded_cols(type, K) / 32u) * 2u : 0u;
}

// The matrix from panel p0 on (panels are stored one after the other, so a
// run of panels is a matrix of its own, its vectors numbered from 0).
FERRY_HD DeviceWeight panel_slice(const DeviceWeight& w, uint32_t p0) {
  DeviceWeight s = w;
  const uint32_t G = static_cast<uint32_t>(w.gates), K = static_cast<uint32_t>(w.cols);
  s.data = static_cast<const uint8_t*>(w.data) + p0 * panel_bytes(w.type, G, K);
  if (w.scales) s.scales = static_cast<const uint8_t*>(w.scales) + p0 * panel_scale_bytes(w.type, G, K);
  return s;
}

// ---------------------------------------------------------- bit helpers --

FERRY_HD uint32_t bits_of_float(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
#endif
}

FERRY_HD float float_of_bits(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// binary16 -> binary32, exact (both sides: subnormals, Inf, NaN).
FERRY_HD float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(h));
#else
  return layout::float_from_half(h);
#endif
}

// A 4-byte-aligned 32-bit word.
FERRY_HD uint32_t load_word(const void* p) {
#if defined(__CUDA_ARCH__)
  return *static_cast<const uint32_t*>(p);
#else
  uint32_t w;
  memcpy(&w, p, sizeof w);
  return w;
#endif
}

// acc + the dot product of the 4 signed bytes of a and b (dp4a).
FERRY_HD int32_t dot4(uint32_t a, uint32_t b, int32_t acc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
  return __dp4a(static_cast<int>(a), static_cast<int>(b), acc);
#else
  for (int i = 0; i < 4; ++i) {
    acc += static_cast<int32_t>(static_cast<int8_t>(a >> (8 * i))) * static_cast<int32_t>(static_cast<int8_t>(b >> (8 * i)));
  }
  return acc;
#endif
}

// The 4 nibbles n (0..15) in the low half of each byte of `w`, as the
// signed bytes n - 8: (n + 0x78) ^ 0x80 per byte (no carry crosses a byte).
FERRY_HD uint32_t nibbles_to_s8(uint32_t w) { return ((w & 0x0f0f0f0fu) + 0x78787878u) ^ 0x80808080u; }

// round_to_nearest_even(v), |v| <= 2^22 (here <= 127.00002).
FERRY_HD int32_t round_even(float v) {
#if defined(__CUDA_ARCH__)
  return __float2int_rn(v);
#else
  return static_cast<int32_t>(rintf(v));
#endif
}

// ------------------------------------------------ activation quantizing --

// |x| as a bit pattern (NaN and Inf above every finite value).
FERRY_HD uint32_t magnitude_bits(float x) { return bits_of_float(x) & 0x7fffffffu; }

// The scale and multiplier of a row whose largest magnitude (bits) is m:
// *inv 0 for a row that quantizes to zeros (m < 2^-120: s = 0; NaN or Inf:
// s = NaN).
FERRY_HD void row_quantizer(uint32_t m, float* scale, float* inv) {
  if (m >= 0x7f800000u || m < 0x03800000u) {
    *scale = m >= 0x7f800000u ? float_of_bits(0x7fc00000u) : 0.0f;
    *inv = 0.0f;
    return;
  }
  const float mf = float_of_bits(m);
  *scale = mf / 127.0f;
  *inv = 127.0f / mf;
}

// One element, given the row's multiplier (0: a zero row).
FERRY_HD int8_t quantize_value(float x, float inv) {
  if (inv == 0.0f) return 0;
  const float v = x * inv;  // rounded before the rounding to an integer, as on the CPU
  return static_cast<int8_t>(round_even(v));
}

// A whole row, sequentially (the emulation, and any kernel that gives a row
// to one thread): K values into q[0, Kp) (zeros past K) and its scale.
FERRY_HD void quantize_row(const float* x, uint32_t K, uint32_t Kp, int8_t* q, float* scale) {
  uint32_t m = 0;
  for (uint32_t k = 0; k < K; ++k) {
    const uint32_t b = magnitude_bits(x[k]);
    m = b > m ? b : m;
  }
  float inv = 0.0f;
  row_quantizer(m, scale, &inv);
  for (uint32_t k = 0; k < K; ++k) q[k] = quantize_value(x[k], inv);
  for (uint32_t k = K; k < Kp; ++k) q[k] = 0;
}

// ------------------------------------------------------------- readers --

// Where lane j of vector q reads: its weights and (quantized types) scales.
struct Lane {
  const uint8_t* w;   // chunk 0
  const uint8_t* s;   // int4: group 0's scale; int8: the row scale
  uint32_t w_stride;  // bytes between chunks
  uint32_t s_stride;  // int4: bytes between groups' scales
};

template <int T>
struct Reader;

template <>
struct Reader<kWeightF32> {
  using Partial = float;
  using Chunk = float;
  static constexpr int kType = kWeightF32;
  static constexpr bool kQuantized = false;  // reads float activation rows
  FERRY_HD static Lane lane(const DeviceWeight& w, uint32_t q, uint32_t j) {
    const uint32_t G = static_cast<uint32_t>(w.gates), K = static_cast<uint32_t>(w.cols);
    return Lane{static_cast<const uint8_t*>(w.data) + (vector_offset(G, K, q) + j) * 4u, nullptr, G * 8u * 4u, 0u};
  }
  FERRY_HD static Chunk load(const Lane& l, uint32_t c) {
    return *reinterpret_cast<const float*>(l.w + size_t{c} * l.w_stride);
  }
  // acc + chunk c of the weights times the activation row (floats).
  FERRY_HD static Partial mac(const Chunk& w, const void* a, uint32_t c, Partial acc) {
    return fmaf(w, static_cast<const float*>(a)[c], acc);
  }
  FERRY_HD static Partial zero() { return 0.0f; }
  FERRY_HD static float finish(const Lane&, Partial total, float, float init) { return init + total; }
};

template <>
struct Reader<kWeightF16> {
  using Partial = float;
  using Chunk = float;
  static constexpr int kType = kWeightF16;
  static constexpr bool kQuantized = false;  // reads float activation rows
  FERRY_HD static Lane lane(const DeviceWeight& w, uint32_t q, uint32_t j) {
    const uint32_t G = static_cast<uint32_t>(w.gates), K = static_cast<uint32_t>(w.cols);
    return Lane{static_cast<const uint8_t*>(w.data) + (vector_offset(G, K, q) + j) * 2u, nullptr, G * 8u * 2u, 0u};
  }
  FERRY_HD static Chunk load(const Lane& l, uint32_t c) {
    return half_to_float(*reinterpret_cast<const uint16_t*>(l.w + size_t{c} * l.w_stride));
  }
  FERRY_HD static Partial mac(const Chunk& w, const void* a, uint32_t c, Partial acc) {
    return fmaf(w, static_cast<const float*>(a)[c], acc);
  }
  FERRY_HD static Partial zero() { return 0.0f; }
  FERRY_HD static float finish(const Lane&, Partial total, float, float init) { return init + total; }
};

template <>
struct Reader<kWeightI8> {
  using Partial = int32_t;
  using Chunk = uint32_t;
  static constexpr int kType = kWeightI8;
  static constexpr bool kQuantized = true;  // reads quantized activation rows
  FERRY_HD static Lane lane(const DeviceWeight& w, uint32_t q, uint32_t j) {
    const uint32_t G = static_cast<uint32_t>(w.gates), K = static_cast<uint32_t>(w.cols);
    const size_t panel = panel_bytes(kWeightI8, G, K);
    const uint8_t* base = static_cast<const uint8_t*>(w.data) + (q / G) * panel + (q % G) * 32u + j * 4u;
    const uint8_t* scale = static_cast<const uint8_t*>(w.scales) + (size_t{q} * 8u + j) * 4u;
    return Lane{base, scale, G * 32u, 0u};
  }
  FERRY_HD static Chunk load(const Lane& l, uint32_t c) { return load_word(l.w + size_t{c} * l.w_stride); }
  // Chunk c: columns 4c .. 4c+3 of the quantized row.
  FERRY_HD static Partial mac(const Chunk& w, const void* a, uint32_t c, Partial acc) {
    return dot4(w, load_word(static_cast<const int8_t*>(a) + size_t{c} * 4u), acc);
  }
  FERRY_HD static Partial zero() { return 0; }
  FERRY_HD static float finish(const Lane& l, Partial total, float a_scale, float init) {
    const float row_scale = *reinterpret_cast<const float*>(l.s);
    return fmaf(row_scale * a_scale, static_cast<float>(total), init);
  }
};

template <>
struct Reader<kWeightI4> {
  using Partial = float;
  struct Chunk {
    uint32_t w[4];  // blocks 0..3 of the group
    float scale;
  };
  static constexpr int kType = kWeightI4;
  static constexpr bool kQuantized = true;  // reads quantized activation rows
  FERRY_HD static Lane lane(const DeviceWeight& w, uint32_t q, uint32_t j) {
    const uint32_t G = static_cast<uint32_t>(w.gates), K = static_cast<uint32_t>(w.cols);
    const uint32_t p = q / G, g = q % G, groups = padded_cols(kWeightI4, K) / 32u;
    const uint8_t* base = static_cast<const uint8_t*>(w.data) + p * panel_bytes(kWeightI4, G, K) + g * 32u + j * 4u;
    const uint8_t* scale =
        static_cast<const uint8_t*>(w.scales) + ((size_t{p} * groups * G + g) * 8u + j) * 2u;
    return Lane{base, scale, G * 32u, G * 8u * 2u};
  }
  // Chunk c: group c (4 blocks of 8 k) and its scale.
  FERRY_HD static Chunk load(const Lane& l, uint32_t c) {
    Chunk k;
    const uint8_t* p = l.w + size_t{c} * 4u * l.w_stride;
    for (int b = 0; b < 4; ++b) k.w[b] = load_word(p + static_cast<size_t>(b) * l.w_stride);
    k.scale = half_to_float(*reinterpret_cast<const uint16_t*>(l.s + size_t{c} * l.s_stride));
    return k;
  }
  FERRY_HD static Partial mac(const Chunk& w, const void* a, uint32_t c, Partial acc) {
    const int8_t* row = static_cast<const int8_t*>(a) + size_t{c} * 32u;
    int32_t dot = 0;
    for (int b = 0; b < 4; ++b) {
      dot = dot4(nibbles_to_s8(w.w[b]), load_word(row + 8 * b), dot);
      dot = dot4(nibbles_to_s8(w.w[b] >> 4), load_word(row + 8 * b + 4), dot);
    }
    return fmaf(w.scale, static_cast<float>(dot), acc);
  }
  FERRY_HD static Partial zero() { return 0.0f; }
  FERRY_HD static float finish(const Lane&, Partial total, float a_scale, float init) {
    return fmaf(total, a_scale, init);
  }
};

// The chunks [c0, c1) of a product over K columns split `splits` ways:
// split s covers chunks [s*per, min((s+1)*per, chunks)) (empty ones give 0).
FERRY_HD void split_chunks(int32_t type, uint32_t K, uint32_t splits, uint32_t s, uint32_t* c0, uint32_t* c1) {
  const uint32_t chunks = padded_cols(type, K) / chunk_cols(type);
  const uint32_t per = (chunks + splits - 1u) / splits;
  const uint32_t begin = s * per;
  *c0 = begin < chunks ? begin : chunks;
  *c1 = begin + per < chunks ? begin + per : chunks;
}

// One partial: lane j of vector q against one activation row, chunks
// [c0, c1): the chain every kernel computes for that (output, sample,
// split), several samples per weight load.
template <class R>
FERRY_HD typename R::Partial lane_partial(const DeviceWeight& w, uint32_t q, uint32_t j, const void* a, uint32_t c0,
                                          uint32_t c1) {
  const Lane l = R::lane(w, q, j);
  typename R::Partial acc = R::zero();
  for (uint32_t c = c0; c < c1; ++c) acc = R::mac(R::load(l, c), a, c, acc);
  return acc;
}

// ------------------------------------------------------ dense products --

// C[r][c] = init + A[r] W(c), rows r < m, columns c < n (panel order; the
// natural order when G = 1); init = bias[c] or 0. A is float rows (a,
// lda) for the float types, quantized rows (qa, ldqa, a_scales) for int8
// and int4 (quantize_rows below). One chain per output, over all of K.
struct GemmParams {
  const float* a;
  int64_t lda;
  int64_t m;
  const int8_t* qa;
  int64_t ldqa;
  const float* a_scales;
  DeviceWeight w;
  const float* bias;  // n floats, or null for 0
  float* c;
  int64_t ldc;
  int32_t n;
};

// Output (r, c) of a product with a non-f32 weight (the generic GEMM; the
// f32 GEMMs of kernels.cu compute the same chain, tiled).
template <class R>
FERRY_HD float gemm_output(const GemmParams& g, int64_t r, int32_t c) {
  const uint32_t q = static_cast<uint32_t>(c) / 8u, j = static_cast<uint32_t>(c) % 8u;
  const bool quantized = R::kQuantized;
  const void* a = quantized ? static_cast<const void*>(g.qa + r * g.ldqa) : static_cast<const void*>(g.a + r * g.lda);
  const uint32_t chunks = padded_cols(R::kType, static_cast<uint32_t>(g.w.cols)) / chunk_cols(R::kType);
  const typename R::Partial total = lane_partial<R>(g.w, q, j, a, 0, chunks);
  const float init = g.bias ? g.bias[c] : 0.0f;
  return R::finish(R::lane(g.w, q, j), total, quantized ? g.a_scales[r] : 0.0f, init);
}

// Rows of floats into quantized rows for a product of `type`.
struct QuantizeParams {
  const float* x;
  int64_t ldx;
  int64_t rows;
  int32_t k;       // values per row
  int32_t kp;      // padded_cols(type, k)
  int8_t* q;       // row r at q + r * ldq
  int64_t ldq;
  float* scales;   // [rows]
};

}  // namespace cuda
}  // namespace ferry
