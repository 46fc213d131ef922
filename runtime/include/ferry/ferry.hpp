/*
 * ferry runtime — thin C++17 wrapper over ferry.h.
 *
 * RAII handles for the model and the session, and spans for input and
 * output, the way ggml-cpp.h wraps ggml.h: nothing here computes anything;
 * every call is the C function of the same name, and every failure is the C
 * API's ferry_status (ferry::Status carries it with the message of
 * ferry_last_error()). No exceptions are thrown, so the header works in
 * builds with -fno-exceptions.
 *
 * Ownership is the C API's (ferry.h, top): the model bytes must outlive the
 * Model and every Session made from it; a Session made with create() owns a
 * heap arena of exactly ferry_session_arena_size() bytes, one made with
 * create_in() uses the caller's arena, which must outlive it.
 *
 *   ferry::Model model;
 *   ferry::Status st = ferry::Model::load(bytes, size, &model);
 *   if (!st) { fprintf(stderr, "%s\n", st.message.c_str()); ... }
 *   ferry::Session session;
 *   st = ferry::Session::create(model, ferry::SessionOptions().batch(1).seq(1), &session);
 *   st = session.step(x, 1, y);   // x: ferry::Span<const float>, y: ferry::Span<float>
 */
#ifndef FERRY_FERRY_HPP_
#define FERRY_FERRY_HPP_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <utility>

#include "ferry/ferry.h"

namespace ferry {

/* A view of `size` contiguous elements (std::span's subset, for C++17). */
template <typename T>
class Span {
 public:
  constexpr Span() = default;
  constexpr Span(T* data, size_t size) : data_(data), size_(size) {}
  template <size_t N>
  constexpr Span(T (&array)[N]) : data_(array), size_(N) {}  // NOLINT: implicit like std::span
  /* Any contiguous container with data() and size() (std::vector, std::array). */
  template <typename C, typename = decltype(std::declval<C&>().data()),
            typename = decltype(std::declval<C&>().size())>
  constexpr Span(C& c) : data_(c.data()), size_(c.size()) {}  // NOLINT
  /* Span<const T> from Span<T>. */
  template <typename U>
  constexpr Span(Span<U> other) : data_(other.data()), size_(other.size()) {}  // NOLINT

  constexpr T* data() const { return data_; }
  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr T& operator[](size_t i) const { return data_[i]; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

/* A ferry_status with the message ferry_last_error() gave for it. */
struct Status {
  ferry_status code = FERRY_OK;
  std::string message;

  Status() = default;
  /* Takes the message of the last failing call on this thread. */
  explicit Status(ferry_status c) : code(c), message(c == FERRY_OK ? "" : ferry_last_error()) {}
  bool ok() const { return code == FERRY_OK; }
  explicit operator bool() const { return ok(); }
  const char* name() const { return ferry_status_string(code); }
};

/* Session options with chained setters; starts from ferry_session_options_init. */
class SessionOptions {
 public:
  SessionOptions() { ferry_session_options_init(&options_); }
  SessionOptions& batch(size_t max_batch) { options_.max_batch = max_batch; return *this; }
  SessionOptions& seq(size_t max_seq) { options_.max_seq = max_seq; return *this; }
  SessionOptions& backend(ferry_backend b) { options_.backend = b; return *this; }
  /* A pthreadpool_t owned by the caller (see ferry_session_options). */
  SessionOptions& threadpool(void* pool) { options_.threadpool = pool; return *this; }
  const ferry_session_options& c() const { return options_; }

 private:
  ferry_session_options options_;
};

/* A verified model viewing the caller's bytes (ferry_model_load). */
class Model {
 public:
  Model() = default;

  static Status load(const void* data, size_t size, Model* out) {
    ferry_model* m = nullptr;
    const ferry_status st = ferry_model_load(data, size, nullptr, &m);
    if (st != FERRY_OK) return Status(st);
    out->model_.reset(m);
    out->info_.struct_size = sizeof(out->info_);
    return Status(ferry_model_get_info(m, &out->info_));
  }

  const ferry_model* get() const { return model_.get(); }
  explicit operator bool() const { return model_ != nullptr; }
  const ferry_model_info& info() const { return info_; }

  /* Floats of output for a run of (batch, seq); 0 if it overflows. */
  size_t output_floats(size_t batch, size_t seq) const {
    size_t n = 0;
    return ferry_output_floats(get(), batch, seq, &n) == FERRY_OK ? n : 0;
  }

 private:
  struct Free {
    void operator()(ferry_model* m) const { ferry_model_free(m); }
  };
  std::unique_ptr<ferry_model, Free> model_;
  ferry_model_info info_{};
};

/* A session: ferry_run, ferry_step and the recurrent state. */
class Session {
 public:
  Session() = default;

  /* Arena bytes for `options` (ferry_session_arena_size). */
  static Status arena_size(const Model& model, const SessionOptions& options, size_t* bytes) {
    return Status(ferry_session_arena_size(model.get(), &options.c(), bytes));
  }

  /* A session on a heap arena of exactly the needed size, owned by it. */
  static Status create(const Model& model, const SessionOptions& options, Session* out) {
    size_t bytes = 0;
    Status st = arena_size(model, options, &bytes);
    if (!st) return st;
    const size_t rounded = (bytes + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT;
    std::unique_ptr<void, FreeArena> arena(aligned_alloc(FERRY_ALIGNMENT, rounded ? rounded : FERRY_ALIGNMENT));
    if (!arena) {
      Status oom;
      oom.code = FERRY_ARENA_TOO_SMALL;
      oom.message = "cannot allocate a " + std::to_string(bytes) + "-byte arena";
      return oom;
    }
    st = create_in(model, options, Span<uint8_t>(static_cast<uint8_t*>(arena.get()), bytes), out);
    if (st) out->arena_ = std::move(arena);
    return st;
  }

  /* A session in the caller's arena (FERRY_ALIGNMENT-aligned), which must
   * outlive it. */
  static Status create_in(const Model& model, const SessionOptions& options, Span<uint8_t> arena,
                          Session* out) {
    ferry_session* s = nullptr;
    const ferry_status st = ferry_session_init(model.get(), &options.c(), arena.data(), arena.size(), &s);
    if (st != FERRY_OK) return Status(st);
    out->arena_.reset();
    out->session_ = s;
    out->input_size_ = model.info().input_size;
    return Status();
  }

  ferry_session* get() const { return session_; }
  explicit operator bool() const { return session_ != nullptr; }

  /* Whole sequence; `lengths` empty or `batch` values (ferry_run). */
  Status run(Span<const float> input, size_t batch, size_t seq, Span<float> output,
             Span<const int32_t> lengths = {}) {
    if (!lengths.empty() && lengths.size() != batch) return invalid("lengths holds a value per sample");
    if (!input.empty() && input.size() < batch * seq * input_size_) {
      return invalid("input holds fewer floats than batch x seq x input_size");
    }
    return Status(ferry_run(session_, input.data(), batch, seq, lengths.empty() ? nullptr : lengths.data(),
                            output.data(), output.size()));
  }

  /* One time step of `batch` samples, state carried (ferry_step). */
  Status step(Span<const float> input, size_t batch, Span<float> output) {
    if (!input.empty() && input.size() < batch * input_size_) {
      return invalid("input holds fewer floats than batch x input_size");
    }
    return Status(ferry_step(session_, input.data(), batch, output.data(), output.size()));
  }

  Status state_get(size_t batch, Span<float> state) const {
    return Status(ferry_state_get(session_, batch, state.data(), state.size()));
  }
  Status state_set(size_t batch, Span<const float> state) {
    return Status(ferry_state_set(session_, batch, state.data(), state.size()));
  }
  Status state_reset() { return Status(ferry_state_reset(session_)); }

 private:
  struct FreeArena {
    void operator()(void* p) const { free(p); }
  };
  static Status invalid(const char* what) {
    Status st;
    st.code = FERRY_INVALID_ARGUMENT;
    st.message = what;
    return st;
  }
  ferry_session* session_ = nullptr;  // lives in the arena: nothing to free
  std::unique_ptr<void, FreeArena> arena_;
  size_t input_size_ = 0;  // floats per sample and step
};

}  // namespace ferry

#endif  /* FERRY_FERRY_HPP_ */
