#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "common/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>

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

namespace {

// Indexed by ferry_backend.
const char* const kBackendNames[] = {"auto", "reference", "simd", "xnnpack", "cuda"};
constexpr int kBackendCount = sizeof(kBackendNames) / sizeof(kBackendNames[0]);

}  // namespace

extern "C" const char* ferry_backend_name(ferry_backend backend) {
  // Read through its underlying type: a caller may pass any value, and an
  // out-of-range enum value must not be used as the enum (UB).
  std::underlying_type<ferry_backend>::type value;
  memcpy(&value, &backend, sizeof(value));
  const long long index = static_cast<long long>(value);  // the type may be unsigned
  return index >= 0 && index < kBackendCount ? kBackendNames[index] : "unknown";
}

extern "C" ferry_status ferry_backend_from_name(const char* name, ferry_backend* backend_out) {
  if (!name || !backend_out) return ferry::fail(FERRY_INVALID_ARGUMENT, "name or backend_out is NULL");
  for (int i = 0; i < kBackendCount; ++i) {
    if (strcmp(name, kBackendNames[i]) == 0) {
      *backend_out = static_cast<ferry_backend>(i);
      return FERRY_OK;
    }
  }
  return ferry::fail(FERRY_INVALID_ARGUMENT, "backend '%s': expected auto, reference, simd, xnnpack or cuda", name);
}
