// ferry inspect FILE: a checkpoint (its form, tensors, attributes, the
// modules they make and what is ignored) or a .fb model (its layers,
// tensors, sizes and provenance).
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "args.h"
#include "checkpoint/checkpoint.h"
#include "cli_model.h"
#include "commands.h"
#include "ferry/ferry_generated.h"
#include "io/mapped_file.h"
#include "io/sha256.h"
#include "mapping/modules.h"

namespace ferry::cli {
namespace {

using namespace ferry::conv;

int inspect_model(const std::string& path) {
  LoadedModel lm(path);
  const auto* m = ferry::fb::GetModel(lm.file.data());
  std::printf("%s: ferry model, format %u.%u, %zu bytes\n", path.c_str(), m->format_major(),
              m->format_minor(), lm.file.size());
  std::printf("input    %u features, %s\n", m->input_size(),
              m->batch_first() ? "batch-first [B,T,F]" : "time-major [T,B,F]");
  std::printf("output   %u features%s\n", m->output_size(), m->output_is_sequence() ? " per time step" : " ([B,F])");
  std::printf("arena    %llu bytes for streaming at batch 1\n",
              static_cast<unsigned long long>(m->arena_bytes_stream_b1()));
  for (uint32_t i = 0; i < m->layers()->size(); ++i) {
    const auto* l = m->layers()->Get(i);
    std::printf("layer %u  %-10s %-8s %u -> %u", i, l->name() ? l->name()->c_str() : "",
                ferry::fb::EnumNameLayerKind(l->kind()), l->input_size(), l->output_size());
    if (l->hidden_size()) {
      std::printf("  hidden %u, layers %u%s", l->hidden_size(), l->num_layers(),
                  l->bidirectional() ? ", bidirectional" : "");
      if (l->proj_size()) std::printf(", proj %u", l->proj_size());
    }
    std::printf("\n");
  }
  if (m->tensors()) {
    for (uint32_t i = 0; i < m->tensors()->size(); ++i) {
      const auto* t = m->tensors()->Get(i);
      std::string shape;
      for (uint32_t d = 0; t->shape() && d < t->shape()->size(); ++d)
        shape += (d ? ", " : "") + std::to_string(t->shape()->Get(d));
      std::printf("tensor %-3u %-28s %s [%s] %s @%llu, %llu bytes\n", i, t->name() ? t->name()->c_str() : "",
                  ferry::fb::EnumNameDType(t->dtype()), shape.c_str(), ferry::fb::EnumNameTensorLayout(t->layout()),
                  static_cast<unsigned long long>(t->offset()), static_cast<unsigned long long>(t->size()));
    }
  }
  if (const auto* p = m->provenance()) {
    std::printf("source   %s (%s), sha256 %s\n", p->source_file() ? p->source_file()->c_str() : "?",
                p->source_format() ? p->source_format()->c_str() : "?",
                p->source_sha256() ? p->source_sha256()->c_str() : "?");
    std::printf("made by  %s\n", p->converter_version() ? p->converter_version()->c_str() : "?");
    if (p->mapping()) {
      for (const auto* r : *p->mapping()) {
        std::printf("map      %-32s -> %s %s\n", r->source_key() ? r->source_key()->c_str() : "",
                    r->layer() >= 0 ? ("layer " + std::to_string(r->layer())).c_str() : "ignored:",
                    r->role() ? r->role()->c_str() : "");
      }
    }
  }
  return 0;
}

int inspect_checkpoint(const std::string& path, const std::string& key) {
  MappedFile file(path);
  LoadOptions load;
  load.key = key;
  const Checkpoint c = load_checkpoint(file, load);
  std::printf("%s: %s, %zu bytes, sha256 %s\n", path.c_str(), c.form.c_str(), file.size(),
              sha256_file(file).c_str());
  std::printf("%-40s %-9s %-16s %-8s %10s  %s\n", "tensor", "dtype", "shape", "location", "bytes", "storage");
  for (const TensorRef& t : c.tensors) {
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
    std::printf("%-40s %-9s %-16s %-8s %10llu  %s%s\n", t.name.c_str(), dtype_name(t.dtype),
                dims_text(t.shape).c_str(), t.storage ? t.storage->location.c_str() : "-",
                static_cast<unsigned long long>(bytes), t.storage ? t.storage->key.c_str() : "-",
                t.offset ? (" +" + std::to_string(t.offset)).c_str() : "");
  }
  for (const auto& [k, v] : c.attributes) std::printf("attr     %s = %s\n", k.c_str(), v.c_str());
  const ModuleSet modules = group_modules(c);
  for (const Module& m : modules.modules) std::printf("module   %-20s %s\n", m.path.c_str(), m.describe().c_str());
  for (const auto& [k, why] : modules.ignored) std::printf("ignored  %s (%s)\n", k.c_str(), why.c_str());
  return 0;
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  Args args(argc, argv, 2, {"--key"}, {});
  if (args.positional.size() != 1) throw UsageError("inspect takes one FILE");
  const std::string& path = args.positional[0];
  bool is_model = false;
  {
    MappedFile f(path);
    is_model = f.size() >= 8 && std::memcmp(f.data() + 4, ferry::fb::ModelIdentifier(), 4) == 0;
  }
  return is_model ? inspect_model(path) : inspect_checkpoint(path, args.get("--key").value_or(""));
}

}  // namespace ferry::cli
