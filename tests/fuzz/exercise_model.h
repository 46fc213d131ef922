// Drives every runtime entry point over a model file that may be malformed:
// load (verify), info, arena sizes, sessions on the reference and auto
// backends, whole-sequence runs with and without lengths, steps, state
// get/set/reset and the stored self-test. Shared by the model fuzz targets
// and the byte-sweep test.
//
// The contract checked: loading either fails with a status and a message, or
// succeeds; and once a model has loaded, every call made with valid
// arguments returns FERRY_OK (or FERRY_UNSUPPORTED for a backend this build
// or CPU lacks). Anything else is reported in `failure`; memory errors are
// the sanitizers' to catch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ferry/ferry.h"

// Targets built with the CUDA backend's plain C++ (plan.cpp: every unit
// test and fuzz target) also run its plan over every model that loads.
#if defined(FERRY_EXERCISE_CUDA_PLAN)
#include "backend/cuda/plan.h"
#endif

namespace ferry::test {

struct ExerciseResult {
  ferry_status load = FERRY_OK;
  bool ran = false;           // a session ran (some backend)
  bool skipped_large = false;  // loaded, but an arena above the cap was skipped
  std::string failure;        // non-empty: a call on a loaded model failed
};

// Inputs mixing ordinary values with the ones that break naive kernels.
inline float exercise_input_value(size_t i) {
  static const float kValues[] = {0.5f, -1.25f, 3.0f, 0.0f, -0.0f, 1e-40f, 89.0f, -89.0f,
                                  1e4f, -7.5f, 0.125f, 2.0f, -3.5f, 1.0f, -1.0f, 0.25f};
  return kValues[i % (sizeof kValues / sizeof kValues[0])];
}

// `data` must be 4-byte aligned (64 for the fast paths); `max_arena` caps the
// memory one session may ask for (a flipped size field can legitimately ask
// for gigabytes).
inline ExerciseResult exercise_model(const uint8_t* data, size_t size, size_t max_arena = size_t{64} << 20) {
  ExerciseResult r;
  ferry_model* model = nullptr;
  r.load = ferry_model_load(data, size, nullptr, &model);
  if (r.load != FERRY_OK) {
    if (model != nullptr) r.failure = "load failed but returned a model";
    if (ferry_last_error()[0] == '\0') r.failure = "load failed without a message";
    return r;
  }
  auto fail = [&](const std::string& what, ferry_status st) {
    if (r.failure.empty()) r.failure = what + ": " + ferry_status_string(st) + ": " + ferry_last_error();
  };
  ferry_model_info info{};
  info.struct_size = sizeof info;
  ferry_status st = ferry_model_get_info(model, &info);
  if (st != FERRY_OK) fail("get_info", st);

  // Every metadata entry the loader accepted reads back through the C API:
  // by index, by its key, its numbers copied out.
  const size_t entries = ferry_model_metadata_count(model);
  for (size_t i = 0; i < entries; ++i) {
    ferry_metadata e{};
    e.struct_size = sizeof e;
    if ((st = ferry_model_metadata_at(model, i, &e)) != FERRY_OK) {
      fail("metadata_at", st);
      break;
    }
    ferry_metadata by_key{};
    by_key.struct_size = sizeof by_key;
    if ((st = ferry_model_metadata(model, e.key, &by_key)) != FERRY_OK) fail("metadata", st);
    if (e.type == FERRY_METADATA_TEXT) {
      if (!e.text || e.text[e.text_bytes] != '\0') fail("metadata: text not NUL-terminated", FERRY_OK);
    } else {
      std::vector<double> values(e.count);
      if ((st = ferry_model_metadata_numbers(model, e.key, values.data(), values.size())) != FERRY_OK) {
        fail("metadata_numbers", st);
      }
      size_t product = 1;
      for (size_t d = 0; d < e.rank; ++d) product *= e.shape[d];
      if (product != e.count || e.rank > FERRY_METADATA_MAX_RANK) fail("metadata: shape", FERRY_OK);
    }
  }

  // A Conv1d with little padding needs its kernel span of steps
  // (info.min_seq): run at least that many, and check that one fewer is
  // refused. A model that needs more steps than any sane arena is skipped.
  constexpr size_t kMaxSeq = 4096;
  if (info.min_seq == 0 || (!info.has_time_axis && info.min_seq != 1)) fail("get_info: min_seq", FERRY_OK);
  if (info.min_seq > kMaxSeq) {
    r.skipped_large = true;
    ferry_model_free(model);
    return r;
  }
  const size_t B = 2, T = info.has_time_axis ? std::max<size_t>(3, info.min_seq) : 1;
  size_t out_floats = 0;
  if ((st = ferry_output_floats(model, B, T, &out_floats)) != FERRY_OK) fail("output_floats", st);
  if (info.min_seq > 1) {
    size_t fewer = 0;
    if ((st = ferry_output_floats(model, B, info.min_seq, &fewer)) != FERRY_OK) fail("output_floats(min_seq)", st);
    if (ferry_output_floats(model, B, info.min_seq - 1, &fewer) != FERRY_INVALID_ARGUMENT) {
      fail("output_floats(min_seq - 1) was not refused", FERRY_OK);
    }
  }
  size_t stream_bytes = 0;
  if ((st = ferry_arena_size(model, 1, 1, &stream_bytes)) != FERRY_OK) fail("arena_size(1, 1)", st);

#if defined(FERRY_EXERCISE_CUDA_PLAN)
  // The CUDA backend's plan, on an H100 on paper, with or without a GPU or
  // a CUDA build: the file is refused (FERRY_UNSUPPORTED) or laid out,
  // sizes that overflow are refused (FERRY_INVALID_ARGUMENT); no crash.
  if ((st = ferry::cuda::check_file(model)) != FERRY_OK && st != FERRY_UNSUPPORTED) fail("cuda check_file", st);
  if (st == FERRY_OK) {
    ferry::cuda::DeviceCaps caps;
    caps.cc_major = 9, caps.sm_count = 132, caps.shared_per_block_optin = 232448, caps.shared_per_sm = 233472;
    caps.cooperative_launch = true;
    ferry::SessionConfig config;
    config.max_batch = B;
    config.max_seq = T;
    if ((st = ferry::cuda::check_model(model, config, caps)) != FERRY_OK && st != FERRY_UNSUPPORTED) {
      fail("cuda check_model", st);
    }
    ferry::cuda::DeviceLayout layout;
    if ((st = ferry::cuda::plan_device(model, B, T, &layout, nullptr)) != FERRY_OK && st != FERRY_INVALID_ARGUMENT) {
      fail("cuda plan_device", st);
    }
  }
#endif

  for (ferry_backend backend : {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_AUTO}) {
    if (!r.failure.empty()) break;
    size_t arena_bytes = 0;
    if ((st = ferry_arena_size(model, B, T, &arena_bytes)) != FERRY_OK) {
      fail("arena_size", st);
      break;
    }
    // Generous slack: a backend may need more than the default plan.
    const size_t want = arena_bytes * 2 + (size_t{1} << 20);
    const size_t io = (B * T * info.input_size + out_floats + 2 * size_t{info.state_floats}) * sizeof(float);
    if (arena_bytes > max_arena || io > max_arena) {
      r.skipped_large = true;
      break;
    }
    void* arena = std::aligned_alloc(FERRY_ALIGNMENT, (want + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT);
    ferry_session_options options;
    ferry_session_options_init(&options);
    options.max_batch = B;
    options.max_seq = T;
    options.backend = backend;
    ferry_session* session = nullptr;
    st = ferry_session_init(model, &options, arena, want, &session);
    if (st == FERRY_UNSUPPORTED) {
      std::free(arena);
      continue;
    }
    if (st != FERRY_OK) {
      fail("session_init", st);
      std::free(arena);
      break;
    }
    std::vector<float> x(B * T * info.input_size), y(out_floats);
    for (size_t i = 0; i < x.size(); ++i) x[i] = exercise_input_value(i);
    // A model taking token ids gets id 0 (every embedding has a row 0).
    const std::vector<int32_t> tokens(B * T, 0);
    auto run = [&](const int32_t* lengths) {
      return info.input_is_tokens ? ferry_run_tokens(session, tokens.data(), B, T, lengths, y.data(), y.size())
                                  : ferry_run(session, x.data(), B, T, lengths, y.data(), y.size());
    };
    if ((st = run(nullptr)) != FERRY_OK) fail("run", st);
    if (info.has_time_axis) {
      const int32_t lengths[2] = {static_cast<int32_t>(T), 1};
      // Refused (FERRY_UNSUPPORTED) when a Conv1d changes the step count:
      // the lengths would not say which output steps are valid.
      if ((st = run(lengths)) != FERRY_OK && st != FERRY_UNSUPPORTED) fail("run(lengths)", st);
    }
    if (info.has_time_axis && info.streamable) {
      std::vector<float> ys(B * info.output_size);
      for (size_t t = 0; t < 2; ++t) {
        st = info.input_is_tokens ? ferry_step_tokens(session, tokens.data(), B, ys.data(), ys.size())
                                  : ferry_step(session, x.data(), B, ys.data(), ys.size());
        if (st != FERRY_OK) fail("step", st);
      }
    }
    std::vector<float> state(B * size_t{info.state_floats} + 1);  // never empty: NULL is refused
    if ((st = ferry_state_get(session, B, state.data(), state.size())) != FERRY_OK) fail("state_get", st);
    if ((st = ferry_state_set(session, B, state.data(), state.size())) != FERRY_OK) fail("state_set", st);
    if ((st = ferry_state_reset(session)) != FERRY_OK) fail("state_reset", st);
    std::free(arena);
    r.ran = true;
  }

  // The stored self-test: refused with a status, or runs (any verdict).
  size_t selftest_bytes = 0;
  st = ferry_selftest_arena_size(model, &selftest_bytes);
  if (st == FERRY_OK && r.failure.empty()) {
    if (selftest_bytes > max_arena) {
      r.skipped_large = true;
    } else {
      const size_t n = (selftest_bytes + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT;
      void* arena = std::aligned_alloc(FERRY_ALIGNMENT, n ? n : FERRY_ALIGNMENT);
      int passed = 0;
      float max_error = 0;
      st = ferry_selftest(model, FERRY_BACKEND_REFERENCE, arena, selftest_bytes, &passed, &max_error);
      if (st != FERRY_OK) fail("selftest", st);
      std::free(arena);
    }
  } else if (st != FERRY_UNSUPPORTED && st != FERRY_INVALID_MODEL && st != FERRY_OK) {
    fail("selftest_arena_size", st);
  }
  ferry_model_free(model);
  return r;
}

}  // namespace ferry::test
