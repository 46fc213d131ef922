// Element types, as the converter names them: the dtypes a checkpoint's
// tensors come in (checkpoint/) and the dtype a planned tensor is stored in
// (plan/; F32 only today, F16 and I8 once quantization sets them).
#pragma once

#include <cstddef>

namespace ferry::conv {

enum class DType { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool, Unknown };

const char* dtype_name(DType d);  // "float32", "bfloat16", ... ("unknown")
size_t dtype_size(DType d);       // bytes per element (0 for Unknown)
// float32, float16, bfloat16 and float64: the dtypes that convert to float32.
bool is_float(DType d);

}  // namespace ferry::conv
