#include "cli_model.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "cli.h"
#include "error.h"

namespace ferry::cli {

using conv::Error;

LoadedModel::LoadedModel(const std::string& path) : file(path) {
  if (ferry_model_load(file.data(), file.size(), nullptr, &model) != FERRY_OK) {
    throw Error("'" + path + "': " + ferry_last_error());
  }
}

LoadedModel::~LoadedModel() { ferry_model_free(model); }

void check(ferry_status st, const std::string& what) {
  if (st != FERRY_OK) throw Error(what + ": " + ferry_last_error());
}

ferry_backend parse_backend(const std::string& name) {
  ferry_backend backend = FERRY_BACKEND_AUTO;
  if (ferry_backend_from_name(name.c_str(), &backend) == FERRY_OK) return backend;
  std::string expected;
  for (const std::string& n : backend_names()) expected += (expected.empty() ? "" : ", ") + n;
  throw UsageError("--backend '" + name + "': expected one of " + expected);
}

ThreadPool::ThreadPool(size_t count) : threads(count) {
  if (threads <= 1) {
    threads = 1;
    return;
  }
  pool = ferry_threadpool_create(threads);
  if (!pool) throw Error("--threads " + std::to_string(count) + ": this ferry was built without pthreadpool");
}

ThreadPool::~ThreadPool() { ferry_threadpool_destroy(pool); }

CliSession::CliSession(const ferry_model* model, size_t batch, size_t seq, ferry_backend backend, void* threadpool,
                       const ferry_profiler* profiler) {
  ferry_session_options opt;
  ferry_session_options_init(&opt);
  opt.max_batch = batch;
  opt.max_seq = seq;
  opt.backend = backend;
  opt.threadpool = threadpool;
  opt.profiler = profiler;
  check(ferry_session_arena_size(model, &opt, &arena_bytes), "arena size");
  arena = std::aligned_alloc(FERRY_ALIGNMENT, (arena_bytes + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT);
  if (!arena) throw Error("cannot allocate a " + std::to_string(arena_bytes) + "-byte arena");
  if (ferry_session_init(model, &opt, arena, arena_bytes, &session) != FERRY_OK) {
    std::free(arena);
    throw Error(std::string("session: ") + ferry_last_error());
  }
}

CliSession::~CliSession() {
  ferry_session_release(session);  // a device backend's memory and streams; a no-op on the CPU
  std::free(arena);
}

}  // namespace ferry::cli
