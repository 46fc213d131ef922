#include "status.h"

#include <stdarg.h>
#include <stdio.h>

namespace ferry {
namespace {

// One message per thread. Bare-metal builds without TLS define
// FERRY_NO_THREAD_LOCAL and get a single global buffer.
#if defined(FERRY_NO_THREAD_LOCAL)
char g_message[256];
#else
thread_local char g_message[256];
#endif

}  // namespace

ferry_status fail(ferry_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(g_message, sizeof(g_message), format, args);
  va_end(args);
  return status;
}

void clear_error() { g_message[0] = '\0'; }

}  // namespace ferry

extern "C" const char* ferry_last_error(void) { return ferry::g_message; }

extern "C" const char* ferry_status_string(ferry_status status) {
  switch (status) {
    case FERRY_OK: return "FERRY_OK";
    case FERRY_INVALID_ARGUMENT: return "FERRY_INVALID_ARGUMENT";
    case FERRY_INVALID_MODEL: return "FERRY_INVALID_MODEL";
    case FERRY_UNSUPPORTED: return "FERRY_UNSUPPORTED";
    case FERRY_ARENA_TOO_SMALL: return "FERRY_ARENA_TOO_SMALL";
    case FERRY_INVALID_STATE: return "FERRY_INVALID_STATE";
  }
  return "FERRY_UNKNOWN_STATUS";
}

#ifndef FERRY_VERSION_STRING
#define FERRY_VERSION_STRING "0.1.0"
#endif
extern "C" const char* ferry_version(void) { return FERRY_VERSION_STRING; }
