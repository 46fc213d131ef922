// ferry selftest MODEL.fb: runs the golden vectors stored in the file on
// this machine's runtime (ferry_selftest) and says PASS or FAIL.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cli_model.h"
#include "commands.h"
#include "ferry/ferry_generated.h"

namespace ferry::cli {

using conv::Error;

namespace {

int run_selftest(const std::string& path, const std::string& backend_name) {
  const ferry_backend backend = parse_backend(backend_name);
  LoadedModel lm(path);
  // The status is named: FERRY_UNSUPPORTED (a backend this build or CPU
  // lacks, a model without vectors) is not a failed check.
  const auto check_status = [&path](ferry_status st) {
    if (st != FERRY_OK) {
      throw Error("'" + path + "': " + ferry_last_error() + " [" + ferry_status_string(st) + "]");
    }
  };
  size_t arena_bytes = 0;
  check_status(ferry_selftest_arena_size(lm.model, &arena_bytes));
  void* arena = std::aligned_alloc(FERRY_ALIGNMENT, (arena_bytes + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT);
  if (!arena) throw Error("cannot allocate a " + std::to_string(arena_bytes) + "-byte arena");
  struct Free { void* p; ~Free() { std::free(p); } } free_arena{arena};
  int passed = 0;
  float max_error = 0;
  check_status(ferry_selftest(lm.model, backend, arena, arena_bytes, &passed, &max_error));
  const auto* st = ferry::fb::GetModel(lm.file.data())->selftest();
  std::printf("selftest %s: batch %u x %u steps, %u outputs, backend %s\n", path.c_str(), st->batch(), st->seq(),
              st->output()->size(), ferry_backend_name(backend));
  std::printf("selftest max abs error %.3g (tolerance %.3g): %s\n", max_error, st->tolerance(),
              passed ? "PASS" : "FAIL");
  if (!passed) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "selftest failed: max abs error %.3g exceeds the tolerance %.3g", max_error,
                  st->tolerance());
    throw Error("'" + path + "': " + msg);
  }
  return 0;
}

}  // namespace

Action declare_selftest(CLI::App& app) {
  struct Options {
    std::string model, backend = "auto";
  };
  auto o = std::make_shared<Options>();
  app.footer("Exit status 0 on PASS, 1 on FAIL or when the file stores no vectors.");
  app.add_option("MODEL", o->model, "The model file")->type_name("MODEL.fb")->required();
  app.add_option("--backend", o->backend, "Where to run it")
      ->type_name("BACKEND")
      ->check(CLI::IsMember(backend_names()))
      ->capture_default_str();
  return [o] { return run_selftest(o->model, o->backend); };
}

}  // namespace ferry::cli
