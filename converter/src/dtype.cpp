#include "dtype.h"

namespace ferry::conv {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::F64: return "float64";
    case DType::I64: return "int64";
    case DType::I32: return "int32";
    case DType::I16: return "int16";
    case DType::I8: return "int8";
    case DType::U8: return "uint8";
    case DType::Bool: return "bool";
    case DType::Unknown: return "unknown";
  }
  return "unknown";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    case DType::I8: case DType::U8: case DType::Bool: return 1;
    case DType::Unknown: return 0;
  }
  return 0;
}

bool is_float(DType d) {
  return d == DType::F32 || d == DType::F16 || d == DType::BF16 || d == DType::F64;
}

}  // namespace ferry::conv
