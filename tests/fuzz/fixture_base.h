// A real checkpoint a fuzz target runs its text against (fuzz_script_chain:
// forward code; fuzz_python_source: a --code source): read once per process,
// by index into the target's list of fixture paths, and kept.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "checkpoint/checkpoint.h"
#include "io/mapped_file.h"
#include "mapping/modules.h"

namespace ferry::fuzz {

struct FixtureBase {
  std::unique_ptr<conv::MappedFile> file;  // the tensors view it
  conv::Checkpoint checkpoint;
  conv::ModuleSet modules;
};

// The checkpoint at FERRY_FIXTURES_DIR/`paths[i]`, of `N` paths.
template <size_t N>
const FixtureBase& fixture_base(const char* const (&paths)[N], size_t i) {
  static std::unique_ptr<FixtureBase> bases[N];
  if (!bases[i]) {
    auto b = std::make_unique<FixtureBase>();
    b->file = std::make_unique<conv::MappedFile>(std::string(FERRY_FIXTURES_DIR) + "/" + paths[i]);
    b->checkpoint = conv::load_checkpoint(*b->file);
    b->modules = conv::group_modules(b->checkpoint);
    bases[i] = std::move(b);
  }
  return *bases[i];
}

}  // namespace ferry::fuzz
