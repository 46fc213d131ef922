// The memory a model takes, as `ferry convert --c-array` writes it (macros
// exact for the target that compiles the header, ferry/ferry_sizes.h) and as
// `ferry inspect --memory` prints it, against what the runtime asks for:
// every fixture of tests/fixtures/models and tests/fixtures/torch2. The
// 32-bit side runs in the firmware on QEMU (scripts/test-embedded.sh: the
// firmware takes its arena and handle from the header and checks them).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "ferry/ferry.h"
#include "random_models.h"  // AlignedBytes

namespace {

using ferry::test::AlignedBytes;
using ferry::test::read_bytes;
using ferry::test::read_text;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

struct Fixture {
  std::string name, pt, graph;
  bool batch_first = false;
};
void PrintTo(const Fixture& f, std::ostream* os) { *os << f.name; }

std::vector<Fixture> fixtures() {
  std::vector<Fixture> out;
  for (const char* folder : {"/models/", "/torch2/"}) {
    const std::string dir = std::string(FERRY_FIXTURES_DIR) + folder;
    std::ifstream f(dir + "manifest.json");
    if (!f) continue;
    for (const auto& e : nlohmann::json::parse(f)) {
      out.push_back({e.at("name").get<std::string>(), dir + e.at("pt").get<std::string>(),
                     e.at("graph").get<std::string>(), e.at("batch_first").get<bool>()});
    }
  }
  return out;
}

// One macro of the header: FERRY_ARENA_BYTES_CPU(p, l, o) (+ n), evaluated
// with this target's ferry_sizes.h, the way the header's compiler would.
struct Macros {
  std::map<std::string, size_t> arena;  // suffix ("", "_B3_T5", "_SELFTEST") -> bytes
  std::string handle;                   // the handle macro's expansion
  size_t max_chain = 0, max_cells = 0;
};

Macros parse_macros(const std::string& text) {
  Macros m;
  const std::regex arena(R"(#define MODEL_DATA(_SELFTEST)?_ARENA_BYTES(_B\d+_T\d+)? \(?FERRY_ARENA_BYTES_CPU\((\d+)u, (\d+)u, (\d+)u\)(?: \+ (\d+)u\))?)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), arena); it != std::sregex_iterator(); ++it) {
    const std::smatch& x = *it;
    const size_t p = std::stoull(x[3]), l = std::stoull(x[4]), o = std::stoull(x[5]);
    const size_t extra = x[6].matched ? std::stoull(x[6]) : 0;
    m.arena[x[1].str() + x[2].str()] = FERRY_ARENA_BYTES_CPU(p, l, o) + extra;
  }
  std::smatch x;
  if (std::regex_search(text, x, std::regex(R"(#define MODEL_DATA_HANDLE_BYTES (\w+))"))) m.handle = x[1];
  if (std::regex_search(text, x, std::regex(R"(#define MODEL_DATA_MAX_CHAIN (\d+)u)"))) m.max_chain = std::stoull(x[1]);
  if (std::regex_search(text, x, std::regex(R"(#define MODEL_DATA_MAX_CELLS (\d+)u)"))) m.max_cells = std::stoull(x[1]);
  return m;
}

class MemoryMacros : public ::testing::TestWithParam<Fixture> {};

TEST_P(MemoryMacros, EqualWhatTheRuntimeAsksAndInspectSaysTheSame) {
  const Fixture& f = GetParam();
  TempDir dir;
  const auto c = run_ferry("convert " + shell_quote(f.pt) + " " + shell_quote(dir / "m.fb") + " --graph " +
                               shell_quote(f.graph) + (f.batch_first ? " --batch-first" : "") + " --c-array " +
                               shell_quote(dir / "model_data.h") + " --max-batch 3 --max-seq 5 --max-seq 1",
                           dir);
  ASSERT_EQ(c.status, 0) << c.err;
  const Macros macros = parse_macros(read_text(dir / "model_data.h"));
  const std::vector<uint8_t> bytes = read_bytes(dir / "m.fb");
  const AlignedBytes data(bytes.data(), bytes.size());
  ferry_model* model = nullptr;
  ASSERT_EQ(ferry_model_load(data.data(), data.size(), nullptr, &model), FERRY_OK) << ferry_last_error();
  const std::unique_ptr<ferry_model, void (*)(ferry_model*)> owner(model, ferry_model_free);
  ferry_model_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(ferry_model_get_info(model, &info), FERRY_OK);

  EXPECT_EQ(macros.handle, "FERRY_MODEL_HANDLE_BYTES");
  EXPECT_EQ(size_t{FERRY_MODEL_HANDLE_BYTES}, ferry_model_handle_size());
  EXPECT_EQ(macros.max_chain, info.num_layers);

  // Each session figure is the runtime's, and the session lays out in exactly it.
  const std::map<std::string, std::pair<size_t, size_t>> sessions = {
      {"", {1, 1}}, {"_B3_T5", {3, 5}}, {"_B3_T1", {3, 1}}};
  for (const auto& [suffix, bt] : sessions) {
    ASSERT_TRUE(macros.arena.count(suffix)) << "no MODEL_DATA_ARENA_BYTES" << suffix;
    ferry_session_options o;
    ferry_session_options_init(&o);
    o.backend = FERRY_BACKEND_REFERENCE;
    o.max_batch = bt.first;
    o.max_seq = bt.second;
    size_t need = 0;
    ASSERT_EQ(ferry_session_arena_size(model, &o, &need), FERRY_OK) << ferry_last_error();
    EXPECT_EQ(macros.arena.at(suffix), need) << suffix;
    const AlignedBytes arena(need);
    ferry_session* s = nullptr;
    EXPECT_EQ(ferry_session_init(model, &o, arena.data(), macros.arena.at(suffix), &s), FERRY_OK) << ferry_last_error();
    EXPECT_EQ(ferry_session_init(model, &o, arena.data(), macros.arena.at(suffix) - 1, &s), FERRY_ARENA_TOO_SMALL);
  }
  // The self-test on the reference kernels, in exactly its figure.
  ASSERT_TRUE(macros.arena.count("_SELFTEST"));
  const size_t st = macros.arena.at("_SELFTEST");
  const AlignedBytes arena(st);
  int passed = 0;
  float max_error = 0;
  EXPECT_EQ(ferry_selftest(model, FERRY_BACKEND_REFERENCE, arena.data(), st, &passed, &max_error), FERRY_OK)
      << ferry_last_error();
  EXPECT_EQ(passed, 1);
  EXPECT_EQ(ferry_selftest(model, FERRY_BACKEND_REFERENCE, arena.data(), st - 1, &passed, &max_error),
            FERRY_ARENA_TOO_SMALL);

  // inspect --memory: the same arena, the regions adding up to it, the
  // layers inspect --json lists, state and flash adding up.
  const auto r = run_ferry("inspect " + shell_quote(dir / "m.fb") + " --memory --json --max-batch 3 --max-seq 5", dir);
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["arena"]["bytes"].get<size_t>(), macros.arena.at("_B3_T5"));
  size_t regions = 0, state_region = 0;
  for (const auto& region : j["arena"]["regions"]) {
    regions += region["bytes"].get<size_t>();
    if (region["name"] == "state") state_region = region["bytes"].get<size_t>();
  }
  EXPECT_EQ(regions, j["arena"]["bytes"].get<size_t>());
  const auto summary = nlohmann::json::parse(run_ferry("inspect " + shell_quote(dir / "m.fb") + " --json", dir).out);
  ASSERT_EQ(j["layers"].size(), summary["layers"].size());
  size_t state = 0, flash = 0;
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    EXPECT_EQ(j["layers"][i]["name"], summary["layers"][i]["name"]);
    state += j["layers"][i]["state_bytes"].get<size_t>();
    flash += j["layers"][i]["flash_bytes"].get<size_t>();
  }
  EXPECT_EQ((state + 63) / 64 * 64, state_region) << "the layers' state, rounded as the planner rounds it";
  EXPECT_EQ(flash, j["weights_bytes"].get<size_t>());
  EXPECT_LT(flash, bytes.size());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MemoryMacros, ::testing::ValuesIn(fixtures()),
                         [](const ::testing::TestParamInfo<Fixture>& i) { return i.param.name; });

TEST(MemoryCli, OptionsNeedTheirCompanions) {
  TempDir dir;
  const std::string pt = std::string(FERRY_FIXTURES_DIR) + "/models/lstm_2l_bf.pt";
  const auto a = run_ferry("convert " + shell_quote(pt) + " " + shell_quote(dir / "m.fb") +
                               " --graph 'lstm > last > fc' --batch-first --max-batch 4",
                           dir);
  EXPECT_EQ(a.status, 2);
  EXPECT_NE(a.err.find("--c-array"), std::string::npos) << a.err;
  const auto b = run_ferry("inspect " + shell_quote(pt) + " --memory", dir);
  EXPECT_EQ(b.status, 2);
  EXPECT_NE(b.err.find("model file"), std::string::npos) << b.err;
  const auto d = run_ferry("inspect " + shell_quote(pt) + " --max-seq 4", dir);
  EXPECT_EQ(d.status, 2);
  // A figure the runtime refuses is named, and nothing is written.
  const auto e = run_ferry("convert " + shell_quote(pt) + " " + shell_quote(dir / "m.fb") +
                               " --graph 'lstm > last > fc' --batch-first --c-array " + shell_quote(dir / "h.h") +
                               " --max-batch 0",
                           dir);
  EXPECT_EQ(e.status, 2);
}

}  // namespace
