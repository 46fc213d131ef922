// Fuzz target: the .pt2 reader's JSON and what it leads to. The input is
//
//   graph JSON  NUL  weights-config JSON  NUL  records
//
// where records are (u32 LE length, bytes) pairs, the raw storages
// weight_0, weight_1, ... (at most 16; a short last one takes what is left).
// Each JSON goes to its parser directly (pt2_json.h); then the three parts
// are packed as a torch 2.9+ export archive and read the way a conversion
// reads it: load_checkpoint() (signature binding, views of shared storages),
// every tensor converted, the modules grouped, and the layer chain read from
// the graph (mapping/export_chain.h). A refusal (Error) is fine; anything
// else is a crash. Seeds (seeds/pt2/, make_seeds.py) are the real torch
// 2.11 exports of tests/fixtures/torch2_forms in this framing.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/pt2_json.h"
#include "error.h"
#include "fuzz_support.h"
#include "mapping/export_chain.h"
#include "mapping/modules.h"
#include "pt_builder.h"

namespace {

using namespace ferry::conv;

std::pair<const uint8_t*, size_t> take_until_nul(const uint8_t*& p, const uint8_t* end) {
  const uint8_t* start = p;
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(p, 0, static_cast<size_t>(end - p)));
  p = nul ? nul + 1 : end;
  return {start, static_cast<size_t>((nul ? nul : end) - start)};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* p = data;
  const uint8_t* end = data + size;
  const auto graph = take_until_nul(p, end);
  const auto config = take_until_nul(p, end);
  std::vector<ferry::test::Bytes> records;
  while (p < end && records.size() < 16) {
    uint32_t n = 0;
    const size_t head = std::min<size_t>(4, static_cast<size_t>(end - p));
    for (size_t i = 0; i < head; ++i) n |= uint32_t(p[i]) << (8 * i);
    p += head;
    const size_t len = std::min<size_t>(n, static_cast<size_t>(end - p));
    records.emplace_back(p, p + len);
    p += len;
  }

  try {
    (void)parse_export_graph(graph.first, graph.second, "fuzz: graph");
  } catch (const Error&) {
  }
  try {
    (void)parse_payload_config(config.first, config.second, "fuzz: config");
  } catch (const Error&) {
  }

  ferry::test::ZipBuilder z;
  z.add("model/models/model.json", ferry::test::Bytes(graph.first, graph.first + graph.second));
  z.add("model/data/weights/model_weights_config.json", ferry::test::Bytes(config.first, config.first + config.second));
  for (size_t i = 0; i < records.size(); ++i) z.add("model/data/weights/weight_" + std::to_string(i), records[i]);
  z.add("model/archive_format", ferry::test::bytes_of("pt2"));
  const ferry::test::Bytes archive = z.finish();

  static ferry::fuzz::MemoryFile memory;
  const auto file = memory.map(archive.data(), archive.size());
  try {
    const Checkpoint c = load_checkpoint(*file);
    for (const TensorRef& t : c.tensors)
      if (t.numel() <= (int64_t{1} << 20)) (void)to_float32(t);
    (void)group_modules(c);
    if (c.export_graph) (void)export_chain(c);
  } catch (const Error&) {
  }
  return 0;
}
