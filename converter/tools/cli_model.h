// What the commands that load a model share (run, bench, selftest, inspect):
// the model mapped and loaded, a session on an exact arena, --backend and
// --threads.
#pragma once

#include <cstddef>
#include <string>

#include "ferry/ferry.h"
#include "io/mapped_file.h"

namespace ferry::cli {

// A model file mapped and loaded (verified) by the runtime.
struct LoadedModel {
  conv::MappedFile file;
  ferry_model* model = nullptr;
  explicit LoadedModel(const std::string& path);  // throws Error "'PATH': <why>"
  ~LoadedModel();
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
};

// Throws Error("<what>: <ferry_last_error()>") unless `st` is FERRY_OK.
void check(ferry_status st, const std::string& what);

// --backend NAME, as the runtime names backends (ferry_backend_from_name);
// anything else is a UsageError that lists them.
ferry_backend parse_backend(const std::string& name);

// --threads N: a thread pool for the session (none for 1), freed after it.
struct ThreadPool {
  void* pool = nullptr;
  size_t threads = 1;
  explicit ThreadPool(size_t count);  // checked by the parser (cli.h positive_count)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
};

// A session on a heap arena of exactly ferry_session_arena_size() bytes.
struct CliSession {
  ferry_session* session = nullptr;
  size_t arena_bytes = 0;
  void* arena = nullptr;
  CliSession(const ferry_model* model, size_t batch, size_t seq, ferry_backend backend, void* threadpool,
             const ferry_profiler* profiler = nullptr);
  ~CliSession();
  CliSession(const CliSession&) = delete;
  CliSession& operator=(const CliSession&) = delete;
};

}  // namespace ferry::cli
