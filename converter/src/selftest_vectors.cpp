#include "selftest_vectors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "error.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"

namespace ferry::conv {
namespace {

bool is_recurrent(LayerOp op) {
  return op == LayerOp::LSTM || op == LayerOp::GRU || op == LayerOp::RNN_TANH || op == LayerOp::RNN_RELU;
}

std::string runtime_error(const char* what) { return std::string(what) + ": " + ferry_last_error(); }

}  // namespace

std::vector<float> selftest_input(uint64_t seed, size_t count) {
  std::vector<float> v(count);
  uint64_t state = seed;
  for (float& x : v) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    // 24 random bits: exactly representable, uniform in [-1, 1).
    x = static_cast<float>(static_cast<int64_t>(z >> 40) - (int64_t{1} << 23)) / static_cast<float>(1 << 23);
  }
  return v;
}

void plan_selftest(ModelPlan& plan, const SelfTestOptions& options) {
  bool time_axis = false;
  for (const LayerPlan& l : plan.layers) time_axis = time_axis || is_recurrent(l.op);
  SelfTestPlan& st = plan.selftest;
  st.batch = options.batch;
  st.seq = time_axis ? options.seq : 1;
  st.input = selftest_input(options.seed, size_t{st.batch} * st.seq * plan.input_size);
  const size_t steps = time_axis && plan.output_is_sequence ? st.seq : 1;
  st.output.assign(size_t{st.batch} * steps * plan.output_size, 0.0f);
  // Non-zero so the field is stored (FlatBuffers omits default values) and
  // can be overwritten in place by fill_selftest_output.
  st.tolerance = 1.0f;
}

void fill_selftest_output(uint8_t* data, size_t size, const SelfTestOptions& options) {
  auto* model_fb = ::ferry::fb::GetMutableModel(data);
  ferry_model* model = nullptr;
  if (ferry_model_load(data, size, nullptr, &model) != FERRY_OK) {
    throw Error(runtime_error("internal: the runtime refuses the written model"));
  }
  std::unique_ptr<ferry_model, void (*)(ferry_model*)> owner(model, ferry_model_free);
  auto* st = model_fb->mutable_selftest();
  if (!st || st->batch() == 0) return;

  ferry_session_options opt;
  ferry_session_options_init(&opt);
  opt.max_batch = st->batch();
  opt.max_seq = st->seq();
  opt.backend = FERRY_BACKEND_REFERENCE;
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
  if (ferry_run(session, st->input()->data(), st->batch(), st->seq(), nullptr, y.data(), y.size()) !=
      FERRY_OK) {
    throw Error(runtime_error("internal: self-test run"));
  }
  // A non-finite output (NaN weights) is stored as it is: the self-test then
  // fails on every device, which is the truth about such a model.
  float scale = 1.0f;
  for (size_t i = 0; i < y.size(); ++i) {
    out->Mutate(static_cast<flatbuffers::uoffset_t>(i), y[i]);
    if (std::isfinite(y[i])) scale = std::max(scale, std::fabs(y[i]));
  }
  if (!st->mutate_tolerance(options.relative_tolerance * scale)) {
    throw Error("internal: the self-test tolerance field is missing (plan_selftest not called?)");
  }
}

void write_with_selftest(const std::string& out, const std::function<void(const std::string&)>& write,
                         const SelfTestOptions& options) {
  const std::string staging = out + ".selftest." + std::to_string(getpid());
  struct Remove {
    const std::string& path;
    bool armed = true;
    ~Remove() {
      if (armed) ::unlink(path.c_str());
    }
  } remove_staging{staging};

  write(staging);
  const int fd = ::open(staging.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open '" + staging + "': " + std::strerror(errno));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0 || info.st_size <= 0) throw Error("cannot stat '" + staging + "'");
  const size_t size = static_cast<size_t>(info.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) throw Error("cannot map '" + staging + "': " + std::strerror(errno));
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { ::munmap(p, n); }
  } unmap{map, size};
  // The mapping is shared: the stores below are the file's bytes (no fsync,
  // as for the model file itself; rename makes the complete file visible).
  fill_selftest_output(static_cast<uint8_t*>(map), size, options);
  if (std::rename(staging.c_str(), out.c_str()) != 0) {
    throw Error("cannot rename '" + staging + "' to '" + out + "': " + std::strerror(errno));
  }
  remove_staging.armed = false;
}

}  // namespace ferry::conv
