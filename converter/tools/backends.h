// Which backends run a model file (`ferry inspect MODEL.fb`, its
// `backends` line and --json list), decided by the same plan functions each
// backend applies when a session is made, not by a list kept beside them:
//   reference, simd, xnnpack   the CPU backend's plan for that policy
//                              (ferry_session_arena_size at batch 1, the
//                              model's shortest input) on this machine;
//   cuda                       where a GPU is visible, the same; else the
//                              CUDA backend's device-independent plan
//                              (runtime/src/backend/cuda/plan.h,
//                              check_file: plain C++, linked into the CLI
//                              in every build), which is what the backend
//                              applies before it looks at the device.
#pragma once

#include <string>
#include <vector>

#include "ferry/ferry.h"

namespace ferry::cli {

struct BackendVerdict {
  std::string name;    // "reference", "simd", "xnnpack", "cuda"
  bool runs = false;   // the file runs on it
  std::string note;    // where it runs but not here: "not in this build", "no GPU here"
  std::string reason;  // where it does not run: the backend's own refusal
};

// The CPU policies (reference, simd, xnnpack) and cuda, in that order.
std::vector<BackendVerdict> backends_for(const ferry_model* model);

// "reference simd xnnpack cuda (not in this build)": the backends that run it.
std::string backends_line(const std::vector<BackendVerdict>& verdicts);

}  // namespace ferry::cli
