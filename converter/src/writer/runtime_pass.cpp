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

// A session on the reference backend (machine-independent, as the schema
// defines it) for (max_batch, max_seq).
ferry_session_options reference_options(size_t max_batch, size_t max_seq) {
  ferry_session_options options;
  ferry_session_options_init(&options);
  options.backend = FERRY_BACKEND_REFERENCE;
  options.max_batch = max_batch;
  options.max_seq = max_seq;
  return options;
}

// Runs the stored self-test input on the reference backend and stores the
// output and the tolerance in place.
void fill_selftest(const ferry_model* model, ::ferry::fb::SelfTest* st, float relative_tolerance) {
  const ferry_session_options opt = reference_options(st->batch(), st->seq());
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

// The arena of the reference kernels at (max_batch, max_seq) in
// ferry_sizes.h's parts, or the runtime's refusal in `refused`.
CArrayArena arena_figure(const ferry_model* model, size_t max_batch, size_t max_seq) {
  const ferry_session_options options = reference_options(max_batch, max_seq);
  CArrayArena a;
  a.batch = max_batch;
  a.seq = max_seq;
  ArenaParts parts;
  if (session_arena_parts(model, &options, &parts) != FERRY_OK) {
    a.refused = ferry_last_error();
    return a;
  }
  // This machine's figure, added up as the header will add it.
  if (FERRY_ARENA_BYTES_CPU(parts.portable, size_t{parts.lone_cells}, parts.program_ops) != parts.total) {
    throw Error("internal: ferry_sizes.h's arena parts do not add up to ferry_session_arena_size()");
  }
  a.total = parts.total;
  a.portable = parts.portable;
  a.lone_cells = parts.lone_cells;
  a.program_ops = parts.program_ops;
  return a;
}

// What the --c-array header's memory macros say, from the loaded model.
CArrayMemory c_array_memory(const ferry_model* model, const uint8_t* data,
                            const std::vector<std::pair<size_t, size_t>>& arenas) {
  CArrayMemory memory;
  memory.arenas.push_back(arena_figure(model, 1, 1));  // streaming; a refusal is written as a comment
  for (const auto& [batch, seq] : arenas) {
    memory.arenas.push_back(arena_figure(model, batch, seq));
    if (!memory.arenas.back().refused.empty()) {
      throw Error("--max-batch " + std::to_string(batch) + " --max-seq " + std::to_string(seq) + ": " +
                  memory.arenas.back().refused);
    }
  }
  model_capacities(model, &memory.chain, &memory.cells);
  const auto* st = ::ferry::fb::GetModel(data)->selftest();
  if (st && st->batch() > 0 && st->output()) {
    memory.selftest = arena_figure(model, st->batch(), st->seq());
    if (!memory.selftest.refused.empty()) throw Error("internal: the self-test's arena: " + memory.selftest.refused);
    memory.selftest_output_bytes = st->output()->size() * sizeof(float);
    memory.has_selftest = true;
  }
  return memory;
}

}  // namespace

uint64_t complete_with_runtime(uint8_t* data, size_t size, float relative_tolerance, CArrayMemory* c_array,
                               const std::vector<std::pair<size_t, size_t>>& c_array_arenas) {
  ferry_model* loaded = nullptr;
  if (ferry_model_load(data, size, nullptr, &loaded) != FERRY_OK) {
    throw Error(runtime_error("internal: the runtime refuses the written model"));
  }
  const std::unique_ptr<ferry_model, void (*)(ferry_model*)> model(loaded, ferry_model_free);

  size_t arena = 0;
  const ferry_session_options options = reference_options(1, 1);
  if (ferry_session_arena_size(model.get(), &options, &arena) != FERRY_OK) {
    throw Error(runtime_error("internal: arena size"));
  }

  auto* file = ::ferry::fb::GetMutableModel(data);
  if (auto* st = file->mutable_selftest(); st && st->batch() > 0) fill_selftest(model.get(), st, relative_tolerance);
  if (!file->mutate_arena_bytes_stream_b1(arena)) throw Error("internal: the arena size field is missing");
  if (c_array) *c_array = c_array_memory(model.get(), data, c_array_arenas);
  return arena;
}

}  // namespace ferry::conv
