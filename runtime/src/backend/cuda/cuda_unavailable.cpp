// The CUDA backend's entry in a build without it (FERRY_CUDA off): probe
// says so; nothing else is ever reached (the C API probes first).
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include "backend/cuda/cuda_backend.h"
#include "common/status.h"

namespace ferry {
namespace cuda {
namespace {

ferry_status probe(const ferry_model*, const SessionConfig&) {
  return fail(FERRY_UNSUPPORTED, "backend cuda is not built into this runtime");
}

ferry_status plan(const ferry_model* m, const SessionConfig& c, ArenaPlan*, size_t*) { return probe(m, c); }
ferry_status init(ferry_session* s, const SessionConfig& c, uint8_t*) { return probe(s->model, c); }
ferry_status run(ferry_session* s, const RunCall&) { return probe(s->model, SessionConfig()); }
void state_get(const ferry_session*, size_t, float*) {}
void state_set(ferry_session*, size_t, const float*) {}
void state_reset(ferry_session*) {}

}  // namespace

const Backend kCudaBackend = {"cuda", probe, plan, init, run, run, state_get, state_set, state_reset};

}  // namespace cuda
}  // namespace ferry
