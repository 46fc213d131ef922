// Error reporting inside the runtime: every failing path sets a message for
// ferry_last_error() and returns its status in one expression.
#pragma once

#include "ferry/ferry.h"

namespace ferry {

// Formats the message (printf-style, truncated to the buffer) and returns
// `status`, so callers write `return fail(FERRY_INVALID_MODEL, "...", ...)`.
// The format is checked on hosted GCC/Clang builds (x86-64, AArch64, Arm
// Linux), which catch every mismatch that matters. Not on bare-metal and
// RTOS toolchains (arm-none-eabi, ESP-IDF, Zephyr), whose uint32_t is
// `unsigned long`: every "%u" of a uint32_t would warn there although the two
// are the same 32-bit type, and a build with -Werror=all (ESP-IDF's default)
// would fail on them.
ferry_status fail(ferry_status status, const char* format, ...)
#if defined(__GNUC__) && (defined(__linux__) || defined(__APPLE__))
    __attribute__((format(printf, 2, 3)))
#endif
    ;

void clear_error();

}  // namespace ferry
