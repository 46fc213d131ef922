// Materialization: a TensorRef (a strided view of file bytes in some float
// dtype and byte order) to float32 in C order, whole or by element range.
#include "checkpoint/tensor_ref.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "checkpoint/reader_internal.h"
#include "error.h"

namespace ferry::conv {
namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // ±0
  } else {
    // Subnormal: normalize the mantissa.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((mant & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Reads one element of `Size` bytes at p, byte-reversed when `swap`.
template <size_t Size>
void load_bytes(const uint8_t* p, bool swap, uint8_t* out) {
  if (swap) {
    for (size_t b = 0; b < Size; ++b) out[b] = p[Size - 1 - b];
  } else {
    std::memcpy(out, p, Size);
  }
}

// Converts `n` elements starting at p, `step` bytes apart, to float32. The
// dtype switch sits outside the loops.
void convert_run(DType dtype, bool swap, const uint8_t* p, int64_t step, float* dst, uint64_t n) {
  switch (dtype) {
    case DType::F32:
      for (uint64_t i = 0; i < n; ++i, p += step) load_bytes<4>(p, swap, reinterpret_cast<uint8_t*>(dst + i));
      return;
    case DType::F64:
      for (uint64_t i = 0; i < n; ++i, p += step) {
        double x;
        load_bytes<8>(p, swap, reinterpret_cast<uint8_t*>(&x));
        dst[i] = static_cast<float>(x);
      }
      return;
    case DType::F16:
      for (uint64_t i = 0; i < n; ++i, p += step) {
        uint16_t h;
        load_bytes<2>(p, swap, reinterpret_cast<uint8_t*>(&h));
        dst[i] = half_to_float(h);
      }
      return;
    case DType::BF16:
      for (uint64_t i = 0; i < n; ++i, p += step) {
        uint16_t h;
        load_bytes<2>(p, swap, reinterpret_cast<uint8_t*>(&h));
        const uint32_t bits = uint32_t(h) << 16;
        std::memcpy(dst + i, &bits, 4);
      }
      return;
    default:
      return;  // unreachable: callers check is_float()
  }
}

}  // namespace

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw Error("tensor '" + name + "': invalid shape");
  return n;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

bool is_contiguous(const TensorRef& t) {
  if (t.shape.size() != t.stride.size()) return false;
  int64_t expect = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] != 1 && t.stride[d] != expect) return false;
    if (__builtin_mul_overflow(expect, t.shape[d], &expect)) return false;
  }
  return true;
}

void to_float32_range(const TensorRef& t, float* dst, uint64_t begin, uint64_t count) {
  const std::string what = "tensor '" + t.name + "'";
  if (!is_float(t.dtype))
    throw Error(what + ": dtype " + std::string(dtype_name(t.dtype)) + " does not convert to float32");
  if (!t.storage) throw Error(what + ": no storage");
  const Storage& s = *t.storage;
  const size_t esize = dtype_size(t.dtype);
  // Re-checked on every call (O(rank)) so a hand-made TensorRef cannot read
  // out of bounds; check_view() also proves the index arithmetic below
  // cannot overflow.
  detail::check_view(what, t.shape, t.stride, t.offset, s.nbytes / esize);
  const uint64_t numel = static_cast<uint64_t>(t.numel());
  if (begin > numel || count > numel - begin)
    throw Error(what + ": elements [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                ") requested of a tensor of " + std::to_string(numel));
  if (count == 0) return;

  // Storage bytes are in the file's byte order; memcpy reads host order.
  constexpr bool kHostBigEndian = __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__;
  const bool swap = s.big_endian != kHostBigEndian;

  if (is_contiguous(t)) {
    const uint8_t* p = s.data + (static_cast<uint64_t>(t.offset) + begin) * esize;
    if (!swap && t.dtype == DType::F32) std::memcpy(dst, p, count * 4);
    else convert_run(t.dtype, swap, p, static_cast<int64_t>(esize), dst, count);
    return;
  }

  // Strided: start at the multi-index of `begin`, convert runs along the
  // last dimension, then advance the outer index. `at` (the element offset
  // of the current index) only ever takes in-bounds values.
  const size_t rank = t.shape.size();  // >= 1: a rank-0 tensor is contiguous
  std::vector<int64_t> index(rank, 0);
  int64_t at = t.offset;
  uint64_t rest = begin;
  for (size_t d = rank; d-- > 0;) {
    const uint64_t extent = static_cast<uint64_t>(t.shape[d]);
    index[d] = static_cast<int64_t>(rest % extent);
    rest /= extent;
    at += index[d] * t.stride[d];
  }
  const size_t last = rank - 1;
  const int64_t inner = t.shape[last];
  const int64_t inner_stride = t.stride[last];
  while (count > 0) {
    const uint64_t run = std::min<uint64_t>(count, static_cast<uint64_t>(inner - index[last]));
    convert_run(t.dtype, swap, s.data + static_cast<uint64_t>(at) * esize,
                inner_stride * static_cast<int64_t>(esize), dst, run);
    dst += run;
    count -= run;
    if (count == 0) break;
    // The run reached the end of the last dimension: back to its start, then
    // carry into the outer dimensions.
    at -= index[last] * inner_stride;
    index[last] = 0;
    for (size_t d = last; d-- > 0;) {
      if (index[d] + 1 < t.shape[d]) {
        ++index[d];
        at += t.stride[d];
        break;
      }
      at -= t.stride[d] * index[d];
      index[d] = 0;
    }
  }
}

std::vector<float> to_float32(const TensorRef& t) {
  to_float32_range(t, nullptr, 0, 0);  // validates before allocating
  std::vector<float> out(static_cast<size_t>(t.numel()));
  to_float32_range(t, out.data(), 0, out.size());
  return out;
}

}  // namespace ferry::conv
