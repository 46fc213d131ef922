// Determinism: the same model and input give bit-identical outputs across
// 100 runs, across arena (and model) addresses, across 1 and 2 threads, and
// step by step versus whole sequence; the converter writes byte-identical
// files from the same checkpoint.
#ifdef FERRY_HAVE_CONVERTER  // the models are made by the converter
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#if defined(FERRY_TEST_HAVE_PTHREADPOOL) && __has_include(<pthreadpool.h>)
#include <pthreadpool.h>
#define FERRY_TEST_THREADS 1
#endif

#include "convert.h"
#include "error.h"
#include "random_models.h"

namespace {

using ferry::conv::LayerOp;
using ferry::test::LayerSpec;
using ferry::test::ModelSpec;
using ferry::test::Runner;

LayerSpec layer(LayerOp op, uint32_t size = 0, uint32_t num_layers = 1, bool bidirectional = false) {
  LayerSpec l;
  l.op = op;
  l.size = size;
  l.num_layers = num_layers;
  l.bidirectional = bidirectional;
  return l;
}

std::vector<ModelSpec> models() {
  std::vector<ModelSpec> out;
  auto add = [&](uint32_t input, std::vector<LayerSpec> layers) {
    ModelSpec s;
    s.input_size = input;
    s.layers = std::move(layers);
    s.seed = out.size() + 5;
    out.push_back(s);
  };
  add(12, {layer(LayerOp::LSTM, 40, 2), layer(LayerOp::Last), layer(LayerOp::Linear, 5)});
  add(9, {layer(LayerOp::GRU, 33, 1, true), layer(LayerOp::Linear, 4), layer(LayerOp::Softmax)});
  add(7, {layer(LayerOp::RNN_TANH, 17, 3), layer(LayerOp::Linear, 3), layer(LayerOp::Sigmoid)});
  add(64, {layer(LayerOp::LSTM, 128), layer(LayerOp::Linear, 16)});  // big enough to thread
  return out;
}

std::vector<float> input_for(const ferry_model_info& info, size_t batch, size_t seq, uint64_t seed) {
  std::vector<float> x(batch * seq * info.input_size);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 2.0f * ferry::test::uniform_pm1(seed, 0, i);
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

const ferry_backend kBackends[] = {FERRY_BACKEND_REFERENCE, FERRY_BACKEND_AUTO};

TEST(Determinism, HundredRunsAreBitIdentical) {
  for (const ModelSpec& spec : models()) {
    const std::vector<uint8_t> bytes = ferry::test::build_model_bytes(spec);
    for (ferry_backend backend : kBackends) {
      Runner r(bytes, 3, 6, backend);
      ASSERT_EQ(r.status(), FERRY_OK) << r.last_error();
      const std::vector<float> x = input_for(r.info(), 3, 6, 42);
      std::vector<float> first, out;
      ASSERT_EQ(r.run(x, 3, 6, &first), FERRY_OK) << ferry_last_error();
      for (int i = 1; i < 100; ++i) {
        ASSERT_EQ(ferry_state_reset(r.session()), FERRY_OK);
        ASSERT_EQ(r.run(x, 3, 6, &out), FERRY_OK);
        ASSERT_TRUE(same_bits(first, out)) << "run " << i << ", backend " << backend;
      }
    }
  }
}

TEST(Determinism, ArenaAndModelAddressesDoNotMatter) {
  for (const ModelSpec& spec : models()) {
    const std::vector<uint8_t> bytes = ferry::test::build_model_bytes(spec);
    for (ferry_backend backend : kBackends) {
      std::vector<float> want;
      for (size_t offset = 0; offset <= 7 * FERRY_ALIGNMENT; offset += FERRY_ALIGNMENT) {
        Runner r(bytes, 2, 5, backend, offset);
        ASSERT_EQ(r.status(), FERRY_OK) << r.last_error();
        std::vector<float> out;
        ASSERT_EQ(r.run(input_for(r.info(), 2, 5, 7), 2, 5, &out), FERRY_OK);
        if (want.empty()) want = out;
        ASSERT_TRUE(same_bits(want, out)) << "arena offset " << offset << ", backend " << backend;
      }
      // The model bytes themselves at 4-, 8-, 16- and 32-byte alignment too
      // (the API asks for 4; 64 is only the fast path).
      for (size_t shift : {4, 8, 16, 32}) {
        ferry::test::AlignedBytes moved(bytes.size() + shift);
        std::memcpy(moved.data() + shift, bytes.data(), bytes.size());
        ferry_model* m = nullptr;
        ASSERT_EQ(ferry_model_load(moved.data() + shift, bytes.size(), nullptr, &m), FERRY_OK) << ferry_last_error();
        ferry_session_options o;
        ferry_session_options_init(&o);
        o.max_batch = 2;
        o.max_seq = 5;
        o.backend = backend;
        size_t arena_bytes = 0;
        ASSERT_EQ(ferry_arena_size(m, 2, 5, &arena_bytes), FERRY_OK);
        ferry::test::AlignedBytes arena(arena_bytes * 2);
        ferry_session* s = nullptr;
        const ferry_status st = ferry_session_init(m, &o, arena.data(), arena.size(), &s);
        if (st == FERRY_OK) {
          ferry_model_info info{};
          info.struct_size = sizeof info;
          ferry_model_get_info(m, &info);
          std::vector<float> out(want.size());
          ASSERT_EQ(ferry_run(s, input_for(info, 2, 5, 7).data(), 2, 5, nullptr, out.data(), out.size()), FERRY_OK);
          EXPECT_TRUE(same_bits(want, out)) << "model bytes shifted by " << shift << ", backend " << backend;
        }
        ferry_model_free(m);
      }
    }
  }
}

TEST(Determinism, StepByStepEqualsTheWholeSequence) {
  for (const ModelSpec& spec : models()) {
    const std::vector<uint8_t> bytes = ferry::test::build_model_bytes(spec);
    for (ferry_backend backend : kBackends) {
      Runner whole(bytes, 2, 9, backend), steps(bytes, 2, 1, backend);
      ASSERT_EQ(whole.status(), FERRY_OK) << whole.last_error();
      ASSERT_EQ(steps.status(), FERRY_OK) << steps.last_error();
      if (!whole.info().streamable) continue;
      const ferry_model_info& info = whole.info();
      ASSERT_FALSE(info.batch_first);
      const std::vector<float> x = input_for(info, 2, 9, 3);
      std::vector<float> all, one;
      ASSERT_EQ(whole.run(x, 2, 9, &all), FERRY_OK);
      for (size_t t = 0; t < 9; ++t) {
        ASSERT_EQ(steps.step(x.data() + t * 2 * info.input_size, 2, &one), FERRY_OK);
        const size_t at = info.output_is_sequence ? t * 2 * info.output_size : 0;
        if (info.output_is_sequence || t == 8) {
          ASSERT_EQ(std::memcmp(one.data(), all.data() + at, one.size() * sizeof(float)), 0)
              << "step " << t << ", backend " << backend;
        }
      }
    }
  }
}

#ifdef FERRY_TEST_THREADS
TEST(Determinism, OneAndTwoThreadsAreBitIdentical) {
  pthreadpool_t two = pthreadpool_create(2);
  ASSERT_NE(two, nullptr);
  for (const ModelSpec& spec : models()) {
    const std::vector<uint8_t> bytes = ferry::test::build_model_bytes(spec);
    for (ferry_backend backend : kBackends) {
      Runner single(bytes, 4, 8, backend), threaded(bytes, 4, 8, backend, 0, two);
      ASSERT_EQ(single.status(), FERRY_OK) << single.last_error();
      ASSERT_EQ(threaded.status(), FERRY_OK) << threaded.last_error();
      const std::vector<float> x = input_for(single.info(), 4, 8, 11);
      std::vector<float> a, b;
      ASSERT_EQ(single.run(x, 4, 8, &a), FERRY_OK);
      ASSERT_EQ(threaded.run(x, 4, 8, &b), FERRY_OK);
      EXPECT_TRUE(same_bits(a, b)) << "backend " << backend;
      if (single.info().streamable) {
        std::vector<float> sa, sb;
        for (size_t t = 0; t < 8; ++t) {
          ASSERT_EQ(single.step(x.data() + t * 4 * single.info().input_size, 4, &sa), FERRY_OK);
          ASSERT_EQ(threaded.step(x.data() + t * 4 * single.info().input_size, 4, &sb), FERRY_OK);
          ASSERT_TRUE(same_bits(sa, sb)) << "step " << t << ", backend " << backend;
        }
      }
    }
  }
  pthreadpool_destroy(two);
}
#else
TEST(Determinism, OneAndTwoThreadsAreBitIdentical) {
  GTEST_SKIP() << "this build has no pthreadpool (or ferry_session_options has no threadpool)";
}
#endif

// The converter: the same checkpoint gives the same bytes, in memory and
// through the streaming file writer the CLI uses.
TEST(Determinism, ConverterOutputIsByteIdentical) {
  const std::string models = std::string(FERRY_FIXTURES_DIR) + "/models/";
  const struct {
    const char* file;
    const char* graph;
  } cases[] = {{"lstm_2l_bf.pt", "lstm > last > fc"},
               {"gru_bi.pt", "gru > last > fc"},
               {"lstm_proj_2l.pt", "lstm > last > fc"},
               {"lstm_fp16.pt", "lstm > last > fc"},  // converted, not copied
               {"mlp.pt", "fc1 > relu > fc2 > softmax"}};
  struct TempDir {
    std::string path = (std::filesystem::temp_directory_path() / "ferry-determinism-XXXXXX").string();
    TempDir() {
      if (!mkdtemp(path.data())) path.clear();
    }
    ~TempDir() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
  } temp;
  ASSERT_FALSE(temp.path.empty());
  const std::string& dir = temp.path;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    std::vector<std::vector<uint8_t>> in_memory;
    std::vector<std::string> on_disk;
    for (int round = 0; round < 3; ++round) {
      // The same convert() call, the model returned in memory, then written
      // to a file as `ferry convert` writes it.
      ferry::conv::ConvertRequest request;
      request.input = models + c.file;
      request.graph = c.graph;
      const std::string path = dir + "/out" + std::to_string(round) + ".fb";
      try {
        in_memory.push_back(ferry::conv::convert(request).bytes.to_vector());
        request.output = path;
        ferry::conv::convert(request);
      } catch (const ferry::conv::Error& e) {
        FAIL() << e.what();
      }
      on_disk.push_back(read_file(path));
    }
    for (int round = 1; round < 3; ++round) {
      EXPECT_EQ(in_memory[round], in_memory[0]) << "in memory, round " << round;
      EXPECT_EQ(on_disk[round], on_disk[0]) << "on disk, round " << round;
    }
    EXPECT_EQ(std::string(in_memory[0].begin(), in_memory[0].end()), on_disk[0])
        << "the streamed file differs from the in-memory model";
  }
}

}  // namespace

#endif  // FERRY_HAVE_CONVERTER
