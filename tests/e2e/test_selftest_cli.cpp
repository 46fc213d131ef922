// `ferry selftest` and `ferry convert --c-array`, as a user (or a cross
// run on a device) drives them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "ferry/ferry_generated.h"

namespace {

using ferry::test::read_bytes;
using ferry::test::read_text;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kModels = std::string(FERRY_FIXTURES_DIR) + "/models/";

ferry::test::CommandResult convert(const TempDir& dir, const std::string& extra = "") {
  return run_ferry("convert " + shell_quote(kModels + "lstm_2l_bf.pt") + " " + shell_quote(dir / "m.fb") +
                       " --graph 'lstm > last > fc' --batch-first " + extra,
                   dir);
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST(SelfTestCli, ConvertedModelPasses) {
  TempDir dir;
  const auto c = convert(dir);
  ASSERT_EQ(c.status, 0) << c.err;
  for (const char* backend : {"auto", "reference"}) {
    const auto r = run_ferry("selftest " + shell_quote(dir / "m.fb") + " --backend " + backend, dir);
    EXPECT_EQ(r.status, 0) << r.err << r.out;
    EXPECT_NE(r.out.find("batch 1 x 5 steps"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("max abs error"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
  }
  // Nothing but the model is left beside it (no staging file).
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(name == "m.fb" || name == "stdout.txt" || name == "stderr.txt") << name;
  }
}

TEST(SelfTestCli, CorruptedGoldenOutputFailsAndReportsTheError) {
  TempDir dir;
  ASSERT_EQ(convert(dir).status, 0);
  std::vector<uint8_t> bytes = read_bytes(dir / "m.fb");
  auto* out = ferry::fb::GetMutableModel(bytes.data())->mutable_selftest()->mutable_output();
  out->Mutate(1, out->Get(1) + 0.25f);
  write_bytes(dir / "bad.fb", bytes);
  const auto r = run_ferry("selftest " + shell_quote(dir / "bad.fb"), dir);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.rfind("ferry: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("selftest failed: max abs error 0.25"), std::string::npos) << r.err;
}

TEST(SelfTestCli, UsageErrors) {
  TempDir dir;
  EXPECT_EQ(run_ferry("selftest", dir).status, 2);
  EXPECT_EQ(run_ferry("selftest " + shell_quote(dir / "missing.fb"), dir).status, 1);
  ASSERT_EQ(convert(dir).status, 0);
  EXPECT_EQ(run_ferry("selftest " + shell_quote(dir / "m.fb") + " --backend gpu", dir).status, 2);
}

TEST(CArrayCli, HeaderHoldsTheModelFileBytes) {
  TempDir dir;
  const auto c = convert(dir, "--c-array " + shell_quote(dir / "model_data.h"));
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("C array 'model_data'"), std::string::npos) << c.out;
  const std::vector<uint8_t> model = read_bytes(dir / "m.fb");
  const std::string text = read_text(dir / "model_data.h");
  EXPECT_NE(text.find("model_data_len = " + std::to_string(model.size()) + "u;"), std::string::npos);
  std::vector<uint8_t> back;
  for (size_t at = text.find("= {"); (at = text.find("0x", at)) != std::string::npos; at += 4) {
    back.push_back(static_cast<uint8_t>(std::stoul(text.substr(at + 2, 2), nullptr, 16)));
  }
  EXPECT_EQ(back, model);
}

}  // namespace
