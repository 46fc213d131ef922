// No partial output: a conversion (or run) that fails leaves neither its
// output nor a temporary file behind, whatever the failure: a refused input,
// an output folder that does not exist or is read-only, an output path that
// is a folder, a full disk (simulated with RLIMIT_FSIZE, `ulimit -f`), a
// failing --c-array, or SIGINT / SIGTERM in the middle of a large conversion.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.h"
#include "ferry/ferry.h"
#include "pt_builder.h"

namespace {

using ferry::test::CommandResult;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kModels = std::string(FERRY_FIXTURES_DIR) + "/models/";

// Every name in `dir` except the ones listed and the runner's captures.
std::set<std::string> leftovers(const TempDir& dir, const std::set<std::string>& expected) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path())) {
    const std::string name = std::filesystem::relative(e.path(), dir.path()).string();
    if (!expected.count(name) && name != "stdout.txt" && name != "stderr.txt") out.insert(name);
  }
  return out;
}

std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : ", ") + x;
  return out;
}

void expect_error(const CommandResult& r) {
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.status, -1) << "killed by a signal: " << r.err;
  EXPECT_EQ(r.err.rfind("ferry: error: ", 0), 0u) << r.err;
}

// A Linear(cols -> rows) state dict stored as float64, so the converter has
// to compute every output float (no file-to-file copy): a slow conversion.
void write_big_checkpoint(const std::string& path, int64_t rows, int64_t cols) {
  using namespace ferry::test;
  std::vector<double> w(static_cast<size_t>(rows * cols)), b(static_cast<size_t>(rows));
  for (size_t i = 0; i < w.size(); ++i) w[i] = double(int64_t(i % 17) - 8) / 64.0;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5;
  TensorSpec weight;
  weight.name = "fc.weight";
  weight.storage_class = "DoubleStorage";
  weight.key = "0";
  weight.storage_numel = rows * cols;
  weight.size = {rows, cols};
  TensorSpec bias = weight;
  bias.name = "fc.bias";
  bias.key = "1";
  bias.storage_numel = rows;
  bias.size = {rows};
  const Bytes zip = checkpoint_zip(state_dict_pickle({weight, bias}), {{"0", raw_bytes(w)}, {"1", raw_bytes(b)}});
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(zip.data()), zip.size());
}

TEST(NoPartialOutput, RefusedInputLeavesNothing) {
  TempDir dir;
  expect_error(run_ferry("convert " + shell_quote(kModels + "lstm_1l_tm.pt") + " " + shell_quote(dir / "out.fb") +
                             " --graph 'lstm > nosuchmodule'",
                         dir));
  EXPECT_EQ(join(leftovers(dir, {})), "");
}

TEST(NoPartialOutput, MissingOutputFolder) {
  TempDir dir;
  expect_error(run_ferry("convert " + shell_quote(kModels + "mlp.pt") + " " + shell_quote(dir / "no/such/out.fb"), dir));
  EXPECT_EQ(join(leftovers(dir, {})), "");
}

TEST(NoPartialOutput, OutputPathIsAFolder) {
  TempDir dir;
  std::filesystem::create_directory(dir / "out.fb");
  expect_error(run_ferry("convert " + shell_quote(kModels + "mlp.pt") + " " + shell_quote(dir / "out.fb"), dir));
  EXPECT_TRUE(std::filesystem::is_directory(dir / "out.fb"));
  EXPECT_EQ(join(leftovers(dir, {"out.fb"})), "");
}

TEST(NoPartialOutput, ReadOnlyOutputFolder) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root: folder permissions do not apply";
  TempDir dir;
  std::filesystem::create_directory(dir / "ro");
  ASSERT_EQ(::chmod((dir / "ro").c_str(), 0555), 0);
  const CommandResult r =
      run_ferry("convert " + shell_quote(kModels + "mlp.pt") + " " + shell_quote(dir / "ro/out.fb"), dir);
  ::chmod((dir / "ro").c_str(), 0755);
  expect_error(r);
  EXPECT_EQ(join(leftovers(dir, {"ro"})), "");
}

TEST(NoPartialOutput, RunOutputInMissingFolder) {
  TempDir dir;
  ASSERT_EQ(run_ferry("convert " + shell_quote(kModels + "mlp.pt") + " " + shell_quote(dir / "m.fb") +
                          " --graph 'fc1 > relu > fc2 > softmax'",
                      dir).status,
            0);
  expect_error(run_ferry("run " + shell_quote(dir / "m.fb") + " --input " + shell_quote(kModels + "mlp.in.npy") +
                             " --output " + shell_quote(dir / "no/y.npy"),
                         dir));
  EXPECT_EQ(join(leftovers(dir, {"m.fb"})), "");
}

// The C array is written after the model: when it fails, the command fails,
// and the model it made must not stay behind either.
TEST(NoPartialOutput, FailingCArrayLeavesNoModel) {
  TempDir dir;
  expect_error(run_ferry("convert " + shell_quote(kModels + "mlp.pt") + " " + shell_quote(dir / "out.fb") +
                             " --graph 'fc1 > relu > fc2 > softmax' --c-array " + shell_quote(dir / "no/model.h"),
                         dir));
  EXPECT_EQ(join(leftovers(dir, {})), "");
}

// A full disk: the file size limit makes write() fail with EFBIG (the CLI
// ignores SIGXFSZ, whose default action would kill it mid-write).
TEST(NoPartialOutput, DiskFullLeavesNothing) {
  TempDir dir;
  write_big_checkpoint(dir / "big.pt", 512, 1024);  // 4 MiB in, 2 MiB out
  const std::string cmd = "ulimit -f 1024 && " + shell_quote(FERRY_CLI) + " convert " + shell_quote(dir / "big.pt") +
                          " " + shell_quote(dir / "out.fb") + " >" + shell_quote(dir / "stdout.txt") + " 2>" +
                          shell_quote(dir / "stderr.txt");
  const int raw = std::system(("/bin/sh -c " + shell_quote(cmd)).c_str());
  const std::string err = ferry::test::read_text(dir / "stderr.txt");
  ASSERT_TRUE(WIFEXITED(raw)) << "the shell died";
  const int status = WEXITSTATUS(raw);
  EXPECT_NE(status, 0);
  EXPECT_LT(status, 128) << "ferry was killed by signal " << status - 128 << " (SIGXFSZ is 25)";
  EXPECT_EQ(err.rfind("ferry: error: ", 0), 0u) << err;
  EXPECT_EQ(join(leftovers(dir, {"big.pt"})), "");
}

// SIGINT or SIGTERM while the weights are being written: the temporary file
// is removed and no output appears. The signal is sent as soon as a
// temporary file shows up; a conversion too quick to catch is retried with a
// larger model.
void interrupt_conversion(int sig) {
  bool caught = false;
  for (int64_t rows = 1024; rows <= 8192 && !caught; rows *= 2) {
    TempDir dir;
    write_big_checkpoint(dir / "big.pt", rows, 4096);  // 32 MiB of float64 per 1024 rows
    const std::string cmd = "exec " + shell_quote(FERRY_CLI) + " convert " + shell_quote(dir / "big.pt") + " " +
                            shell_quote(dir / "out.fb") + " >" + shell_quote(dir / "stdout.txt") + " 2>" +
                            shell_quote(dir / "stderr.txt");
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    bool exited = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!caught && !exited && std::chrono::steady_clock::now() < deadline) {
      for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
        const std::string name = e.path().filename().string();
        // The weights are being written to a temporary file.
        if (name.rfind("out.fb.", 0) == 0 && name.find(".tmp.") != std::string::npos) caught = true;
      }
      if (caught) {
        ::kill(pid, sig);
      } else if (::waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    if (!exited) ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (!caught) continue;  // finished before a temporary file was seen
    const std::string err = ferry::test::read_text(dir / "stderr.txt");
    EXPECT_TRUE(WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0))
        << "an interrupted conversion reported success: " << err;
    EXPECT_EQ(err.find("AddressSanitizer"), std::string::npos) << err;
    // A signal that lands after the last write may let the conversion
    // finish: then out.fb is the complete model, never a piece of one.
    if (std::filesystem::exists(dir / "out.fb")) {
      const std::string bytes = ferry::test::read_text(dir / "out.fb");
      ferry::test::Bytes copy(bytes.begin(), bytes.end());
      copy.resize(copy.size() + 64);
      uint8_t* aligned = copy.data() + (64 - reinterpret_cast<uintptr_t>(copy.data()) % 64) % 64;
      std::memmove(aligned, bytes.data(), bytes.size());
      ferry_model* m = nullptr;
      EXPECT_EQ(ferry_model_load(aligned, bytes.size(), nullptr, &m), FERRY_OK) << "out.fb is partial";
      ferry_model_free(m);
      EXPECT_EQ(join(leftovers(dir, {"big.pt", "out.fb"})), "") << err;
    } else {
      EXPECT_EQ(join(leftovers(dir, {"big.pt"})), "") << err;
    }
  }
  EXPECT_TRUE(caught) << "every conversion finished before it could be interrupted";
}

TEST(NoPartialOutput, SigintDuringConversion) { interrupt_conversion(SIGINT); }

TEST(NoPartialOutput, SigtermDuringConversion) { interrupt_conversion(SIGTERM); }

}  // namespace
