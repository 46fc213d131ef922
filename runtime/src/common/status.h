// Error reporting inside the runtime: every failing path sets a message for
// ferry_last_error() and returns its status in one expression.
#pragma once

#include "ferry/ferry.h"

namespace ferry {

// Formats the message (printf-style, truncated to the buffer) and returns
// `status`, so callers write `return fail(FERRY_INVALID_MODEL, "...", ...)`.
ferry_status fail(ferry_status status, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

void clear_error();

}  // namespace ferry
