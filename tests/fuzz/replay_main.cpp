// A libFuzzer-compatible driver for builds without libFuzzer (gcc, the
// normal test build): runs LLVMFuzzerTestOneInput once on every file named
// on the command line or found (recursively) in a named folder. ctest uses it
// to replay tests/fuzz/regressions/<target>/ (every crash fuzzing found, kept
// after its fix) and the seed inputs. Folders that do not exist are skipped,
// so an empty regression folder needs no placeholder.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

size_t run_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // A heap copy of exactly the file's size, so ASan sees any overread.
  std::vector<uint8_t> input(bytes.begin(), bytes.end());
  uint8_t* data = input.empty() ? nullptr : input.data();
  std::fprintf(stderr, "replay %s (%zu bytes)\n", path.c_str(), input.size());
  LLVMFuzzerTestOneInput(data, input.size());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  size_t files = 0;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path p = argv[i];
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      std::vector<std::filesystem::path> paths;
      for (const auto& e : std::filesystem::recursive_directory_iterator(p))
        if (e.is_regular_file()) paths.push_back(e.path());
      std::sort(paths.begin(), paths.end());
      for (const auto& path : paths) files += run_file(path);
    } else if (std::filesystem::is_regular_file(p, ec)) {
      files += run_file(p);
    }
  }
  std::printf("replayed %zu inputs without a crash\n", files);
  return 0;
}
