// Fuzz target: a distributed checkpoint's .metadata (converter/src/
// checkpoint/dcp.h). The input is the .metadata pickle. It is parsed and
// checked on its own (parse_dcp_metadata: the narrowed unpickler, the
// records, the chunk tiling), then read as the metadata of a directory that
// holds the two real data files of tests/fixtures/torch2_forms/dcp_sharded
// (__0_0.distcp, __1_0.distcp, copied once into a private folder), so that a
// mutated storage_data reaches the chunk reader: byte ranges of real files
// that may or may not be the torch.save zips they claim to be, and sharded
// tensors reassembled from them. Tensors read are converted to float32 and
// the modules grouped, as a conversion would.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "checkpoint/dcp.h"
#include "error.h"
#include "fuzz_support.h"
#include "mapping/modules.h"

namespace {

constexpr const char* kDataFiles[] = {"__0_0.distcp", "__1_0.distcp"};

// The private folder, removed at exit.
struct Directory {
  Directory() {
    char tmpl[] = "/tmp/ferry-fuzz-dcp-XXXXXX";
    if (!::mkdtemp(tmpl)) std::abort();
    path = tmpl;
    for (const char* name : kDataFiles) {
      std::ifstream in(std::string(FERRY_DCP_DATA_DIR) + "/" + name, std::ios::binary);
      std::ofstream out(path + "/" + name, std::ios::binary);
      if (!in || !out) std::abort();
      out << in.rdbuf();
    }
  }
  ~Directory() {
    for (const char* name : kDataFiles) ::unlink((path + "/" + name).c_str());
    ::unlink((path + "/.metadata").c_str());
    ::rmdir(path.c_str());
  }
  std::string path;
};

const std::string& directory() {
  static const Directory dir;
  return dir.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::conv;
  try {
    (void)parse_dcp_metadata(data, size, "fuzz/.metadata");
  } catch (const Error&) {
  }
  const std::string& dir = directory();
  {
    std::ofstream out(dir + "/.metadata", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const Checkpoint c = read_dcp_directory(dir, {});
    for (const TensorRef& t : c.tensors)
      if (t.numel() <= (int64_t{1} << 20)) (void)to_float32(t);
    (void)group_modules(c);
  } catch (const Error&) {
  }
  return 0;
}
