// A session for the backend tests: options for a backend and shape, and a
// session in its own FERRY_ALIGNMENT-aligned arena (status and message kept
// for a test to skip or fail with), released at the end (a device backend
// holds memory beyond the arena; releasing is harmless on any backend).
#pragma once

#include <cstddef>
#include <string>

#include "ferry/ferry.h"
#include "random_models.h"

namespace ferry::test {

inline ferry_session_options session_options(ferry_backend backend, size_t batch, size_t seq,
                                             void* pool = nullptr) {
  ferry_session_options o;
  ferry_session_options_init(&o);
  o.backend = backend;
  o.max_batch = batch;
  o.max_seq = seq;
  o.threadpool = pool;
  return o;
}

struct ArenaSession {
  AlignedBytes arena;
  ferry_session* s = nullptr;
  ferry_status status = FERRY_OK;
  std::string error;  // ferry_last_error() when status is not FERRY_OK
  ArenaSession(const ferry_model* model, const ferry_session_options& o) {
    size_t need = 0;
    status = ferry_session_arena_size(model, &o, &need);
    if (status == FERRY_OK) {
      arena = AlignedBytes(need);
      status = ferry_session_init(model, &o, arena.data(), need, &s);
    }
    if (status != FERRY_OK) error = ferry_last_error();
  }
  ~ArenaSession() { ferry_session_release(s); }
  ArenaSession(const ArenaSession&) = delete;
  ArenaSession& operator=(const ArenaSession&) = delete;
};

}  // namespace ferry::test
