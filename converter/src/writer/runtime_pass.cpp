#include "writer/runtime_pass.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "arena_parts.h"
#include "error.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"

namespace ferry::conv {
namespace {

std::string runtime_error(const char* what) { return std::string(what) + ": " + ferry_last_error(); }

// Runs the stored self-test input on the reference backend and stores the
// output and the tolerance in place.
void fill_selftest(const ferry_model* model, ::ferry::fb::SelfTest* st, float relative_tolerance) {
  ferry_session_options opt;
  ferry_session_options_init(&opt);
  opt.max_batch = st->batch();
  opt.max_seq = st->seq();
  opt.backend = FERRY_BACKEND_REFERENCE;
  size_t arena_bytes = 0;
  if (ferry_session_arena_size(model, &opt, &arena_bytes) != FERRY_OK) {
    throw Error(runtime_error("internal: self-test arena size"));
  }
  const size_t rounded = (arena_bytes + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT;
  std::unique_ptr<void, void (*)(void*)> arena(std::aligned_alloc(FERRY_ALIGNMENT, rounded), std::free);
  if (!arena) throw Error("cannot allocate a " + std::to_string(arena_bytes) + "-byte arena for the self-test");
  ferry_session* session = nullptr;
  if (ferry_session_init(model, &opt, arena.get(), arena_bytes, &session) != FERRY_OK) {
    throw Error(runtime_error("internal: self-test session"));
  }
  auto* out = st->mutable_output();
  std::vector<float> y(out->size());
  if (ferry_run(session, st->input()->data(), st->batch(), st->seq(), nullptr, y.data(), y.size()) != FERRY_OK) {
    throw Error(runtime_error("internal: self-test run"));
  }
  // A non-finite output (NaN weights) is stored as it is: the self-test then
  // fails on every device, which is the truth about such a model.
  float scale = 1.0f;
  for (size_t i = 0; i < y.size(); ++i) {
    out->Mutate(static_cast<flatbuffers::uoffset_t>(i), y[i]);
    if (std::isfinite(y[i])) scale = std::max(scale, std::fabs(y[i]));
  }
  if (!st->mutate_tolerance(relative_tolerance * scale)) {
    throw Error("internal: the self-test tolerance field is missing (no placeholder written)");
  }
}

}  // namespace

uint64_t complete_with_runtime(uint8_t* data, size_t size, float relative_tolerance) {
  ferry_model* loaded = nullptr;
  if (ferry_model_load(data, size, nullptr, &loaded) != FERRY_OK) {
    throw Error(runtime_error("internal: the runtime refuses the written model"));
  }
  const std::unique_ptr<ferry_model, void (*)(ferry_model*)> model(loaded, ferry_model_free);

  size_t arena = 0;
  ferry_session_options options;
  ferry_session_options_init(&options);
  options.backend = FERRY_BACKEND_REFERENCE;
  if (ferry_session_arena_size(model.get(), &options, &arena) != FERRY_OK) {
    throw Error(runtime_error("internal: arena size"));
  }

  auto* file = ::ferry::fb::GetMutableModel(data);
  if (auto* st = file->mutable_selftest(); st && st->batch() > 0) fill_selftest(model.get(), st, relative_tolerance);
  if (!file->mutate_arena_bytes_stream_b1(arena)) throw Error("internal: the arena size field is missing");
  return arena;
}

CArrayMemory c_array_memory(const uint8_t* data, size_t size, const std::vector<std::pair<size_t, size_t>>& arenas) {
  ferry_model* loaded = nullptr;
  if (ferry_model_load(data, size, nullptr, &loaded) != FERRY_OK) {
    throw Error(runtime_error("internal: the runtime refuses the written model"));
  }
  const std::unique_ptr<ferry_model, void (*)(ferry_model*)> model(loaded, ferry_model_free);
  CArrayMemory memory;
  std::vector<std::pair<size_t, size_t>> all{{1, 1}};
  all.insert(all.end(), arenas.begin(), arenas.end());
  for (size_t i = 0; i < all.size(); ++i) {
    ferry_session_options options;
    ferry_session_options_init(&options);
    options.backend = FERRY_BACKEND_REFERENCE;
    options.max_batch = all[i].first;
    options.max_seq = all[i].second;
    ArenaParts parts;
    CArrayArena a;
    a.batch = all[i].first;
    a.seq = all[i].second;
    if (session_arena_parts(model.get(), &options, &parts) != FERRY_OK) {
      if (i > 0) {
        throw Error("--max-batch " + std::to_string(a.batch) + " --max-seq " + std::to_string(a.seq) + ": " +
                    ferry_last_error());
      }
      a.refused = ferry_last_error();
    } else {
      // This machine's figure, added up as the header will add it.
      if (FERRY_ARENA_BYTES_CPU(parts.portable, size_t{parts.lone_cells}, parts.program_ops) != parts.total) {
        throw Error("internal: ferry_sizes.h's arena parts do not add up to ferry_session_arena_size()");
      }
      a.total = parts.total;
      a.portable = parts.portable;
      a.lone_cells = parts.lone_cells;
      a.program_ops = parts.program_ops;
    }
    memory.arenas.push_back(a);
  }
  model_capacities(model.get(), &memory.chain, &memory.cells);
  const auto* st = ::ferry::fb::GetModel(data)->selftest();
  if (st && st->batch() > 0 && st->output()) {
    ferry_session_options options;
    ferry_session_options_init(&options);
    options.backend = FERRY_BACKEND_REFERENCE;
    options.max_batch = st->batch();
    options.max_seq = st->seq();
    ArenaParts parts;
    if (session_arena_parts(model.get(), &options, &parts) != FERRY_OK) {
      throw Error(runtime_error("internal: the self-test's arena"));
    }
    size_t selftest_bytes = 0;
    if (ferry_selftest_arena_size(model.get(), &selftest_bytes) != FERRY_OK) {
      throw Error(runtime_error("internal: the self-test's arena"));
    }
    memory.selftest = CArrayArena{options.max_batch, options.max_seq, selftest_bytes, parts.portable,
                                  parts.lone_cells, parts.program_ops, {}};
    memory.selftest_output_bytes = st->output()->size() * sizeof(float);
    memory.has_selftest = true;
  }
  return memory;
}

}  // namespace ferry::conv
