#include "backends.h"

#include "backend/cuda/plan.h"
#include "model/model.h"

namespace ferry::cli {
namespace {

// The backend's own plan for a session of one sample and the model's
// shortest input: FERRY_OK, or its refusal (with the message).
ferry_status plans(const ferry_model* model, ferry_backend backend, std::string* reason) {
  ferry_model_info info{};
  info.struct_size = sizeof info;
  ferry_model_get_info(model, &info);
  ferry_session_options o;
  ferry_session_options_init(&o);
  o.backend = backend;
  o.max_batch = 1;
  o.max_seq = info.min_seq ? info.min_seq : 1;
  size_t bytes = 0;
  const ferry_status st = ferry_session_arena_size(model, &o, &bytes);
  if (st != FERRY_OK) *reason = ferry_last_error();
  return st;
}

}  // namespace

std::vector<BackendVerdict> backends_for(const ferry_model* model) {
  std::vector<BackendVerdict> out;
  for (ferry_backend b : {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_SIMD, FERRY_BACKEND_XNNPACK}) {
    BackendVerdict v;
    v.name = ferry_backend_name(b);
    v.runs = plans(model, b, &v.reason) == FERRY_OK;
    out.push_back(v);
  }
  BackendVerdict cuda;
  cuda.name = ferry_backend_name(FERRY_BACKEND_CUDA);
  std::string device_reason;
  if (plans(model, FERRY_BACKEND_CUDA, &device_reason) == FERRY_OK) {
    cuda.runs = true;
  } else if (ferry::cuda::check_file(model) == FERRY_OK) {
    // The file is one the CUDA backend runs; this machine cannot say more.
    cuda.runs = true;
#if defined(FERRY_CLI_HAVE_CUDA)
    cuda.note = "no GPU here";
#else
    cuda.note = "not in this build";
#endif
  } else {
    cuda.reason = ferry_last_error();
  }
  out.push_back(cuda);
  return out;
}

std::string backends_line(const std::vector<BackendVerdict>& verdicts) {
  std::string line;
  for (const BackendVerdict& v : verdicts) {
    if (!v.runs) continue;
    line += (line.empty() ? "" : " ") + v.name + (v.note.empty() ? "" : " (" + v.note + ")");
  }
  return line.empty() ? "none" : line;
}

}  // namespace ferry::cli
