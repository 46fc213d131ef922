// The catalogue of malformed inputs (tests/bad/, made by make_catalogue.py):
// every file is refused with its exact message, by the CLI (`ferry: error:`,
// a non-zero status, no output file, no temporary file) and, for model files,
// by the C API (the manifest's status and ferry_last_error()). The control
// files, built by the same script, must be accepted: they prove a refusal
// comes from the one defect each file carries, not from the script.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "ferry/ferry.h"

namespace {

using ferry::test::CommandResult;
using ferry::test::read_text;
using ferry::test::run_ferry;
using ferry::test::shell_quote;
using ferry::test::TempDir;

const std::string kCatalogue = std::string(FERRY_SOURCE_DIR) + "/tests/bad/";

struct Entry {
  std::string file, tool, expect, status, why;
  std::vector<std::string> args;  // convert: after `ferry convert IN OUT`
  bool ok = false;
};

void PrintTo(const Entry& e, std::ostream* os) { *os << e.file; }

std::vector<Entry> load_manifest() {
  std::ifstream f(kCatalogue + "manifest.json");
  if (!f) return {};
  std::vector<Entry> out;
  for (const auto& j : nlohmann::json::parse(f)) {
    Entry e;
    e.file = j.at("file");
    e.tool = j.at("tool");
    e.ok = j.value("ok", false);
    e.expect = j.value("expect", "");
    e.status = j.value("status", "");
    e.why = j.value("why", "");
    if (j.contains("args")) e.args = j.at("args").get<std::vector<std::string>>();
    out.push_back(e);
  }
  return out;
}

const std::vector<Entry>& manifest() {
  static const std::vector<Entry> entries = load_manifest();
  return entries;
}

ferry_status status_named(const std::string& name) {
  for (int s = FERRY_OK; s <= FERRY_INVALID_STATE; ++s) {
    if (name == ferry_status_string(static_cast<ferry_status>(s))) return static_cast<ferry_status>(s);
  }
  ADD_FAILURE() << "unknown status name '" << name << "' in the manifest";
  return FERRY_OK;
}

// The whole file in a 64-byte-aligned buffer (as a model is used in place).
struct AlignedFile {
  explicit AlignedFile(const std::string& path) {
    const std::string bytes = read_text(path);
    size = bytes.size();
    data = static_cast<uint8_t*>(std::aligned_alloc(64, (size + 64) / 64 * 64));
    if (size) std::memcpy(data, bytes.data(), size);
  }
  ~AlignedFile() { std::free(data); }
  uint8_t* data = nullptr;
  size_t size = 0;
};

// A .npy of `shape` holding float32 values, or int32 ids (all 0) when `ids`.
void write_npy_file(const std::string& path, const std::vector<size_t>& shape, bool ids) {
  std::string dims;
  size_t count = 1;
  for (size_t d : shape) {
    dims += std::to_string(d) + ", ";
    count *= d;
  }
  std::string header = std::string("{'descr': '") + (ids ? "<i4" : "<f4") + "', 'fortran_order': False, 'shape': (" +
                       dims + "), }";
  header.append(128 - 10 - header.size() - 1, ' ');  // 10-byte preamble; 64-byte multiple
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xFF);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  static const float kValues[] = {0.5f, -0.25f, 1.0f, 0.0f, 0.75f, -1.0f};
  for (size_t i = 0; i < count; ++i) {
    const float v = ids ? 0.0f : kValues[i % 6];
    const int32_t id = 0;
    bytes.append(ids ? reinterpret_cast<const char*>(&id) : reinterpret_cast<const char*>(&v), 4);
  }
  std::ofstream(path, std::ios::binary) << bytes;
}

// An input the model takes (two steps, one sample), in its layout; for a
// model that does not load, the [T=2, B=1, I=3] input the control LSTM takes.
void write_input_npy(const std::string& path, const ferry_model_info* info) {
  if (info == nullptr) return write_npy_file(path, {2, 1, 3}, false);
  const size_t I = info->input_size, T = 4;
  if (info->input_is_tokens) return write_npy_file(path, info->batch_first ? std::vector<size_t>{1, T} : std::vector<size_t>{T, 1}, true);
  if (!info->has_time_axis) return write_npy_file(path, {1, I}, false);
  if (info->channels_first) return write_npy_file(path, {1, I, T}, false);
  write_npy_file(path, info->batch_first ? std::vector<size_t>{1, T, I} : std::vector<size_t>{T, 1, I}, false);
}

// Nothing but the files the test put there: no output, no temporary file.
void expect_only(const TempDir& dir, const std::vector<std::string>& allowed) {
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = e.path().filename().string();
    bool known = name == "stdout.txt" || name == "stderr.txt";
    for (const std::string& a : allowed) known = known || name == a;
    EXPECT_TRUE(known) << "left behind: " << name;
  }
}

// A refusal as the user meets it: one `ferry: error:` line naming the fault.
void expect_refused(const CommandResult& r, const Entry& e) {
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.status, -1) << "killed by a signal";
  EXPECT_EQ(r.err.rfind("ferry: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "more than one line:\n" << r.err;
  EXPECT_NE(r.err.find(e.expect), std::string::npos) << "expected '" << e.expect << "' in\n" << r.err;
  EXPECT_EQ(r.err.find("AddressSanitizer"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("runtime error"), std::string::npos) << r.err;  // UBSan
}

class BadCatalogue : public ::testing::TestWithParam<Entry> {};

TEST_P(BadCatalogue, IsHandled) {
  const Entry& e = GetParam();
  SCOPED_TRACE(e.file + ": " + e.why);
  const std::string path = kCatalogue + e.file;
  ASSERT_TRUE(std::filesystem::exists(path)) << path;
  TempDir dir;

  if (e.tool == "convert") {
    std::filesystem::remove("/tmp/ferry_pwned");
    std::string args;
    for (std::string a : e.args) {
      // A path in the catalogue (a --code source): {catalogue}/sources/x.py.
      if (a.rfind("{catalogue}/", 0) == 0) a = kCatalogue + a.substr(12);
      args += " " + shell_quote(a);
    }
    const CommandResult r =
        run_ferry("convert " + shell_quote(path) + " " + shell_quote(dir / "out.fb") + args, dir);
    EXPECT_FALSE(std::filesystem::exists("/tmp/ferry_pwned")) << "the file ran code";
    if (e.ok) {
      EXPECT_EQ(r.status, 0) << r.err;
      EXPECT_TRUE(std::filesystem::exists(dir / "out.fb"));
      expect_only(dir, {"out.fb"});
      return;
    }
    expect_refused(r, e);
    expect_only(dir, {});
    return;
  }

  // Model files: the C API first.
  const AlignedFile file(path);
  ferry_model* model = nullptr;
  const ferry_status load = ferry_model_load(file.data, file.size, nullptr, &model);
  const std::string load_error = ferry_last_error();
  ferry_model_info info{};
  info.struct_size = sizeof info;
  bool have_info = false;
  if (e.tool == "model" && !e.ok) {
    EXPECT_EQ(load, status_named(e.status)) << ferry_status_string(load) << ": " << load_error;
    EXPECT_EQ(model, nullptr);
    EXPECT_NE(load_error.find(e.expect), std::string::npos) << load_error;
  } else {
    ASSERT_EQ(load, FERRY_OK) << load_error;
    have_info = ferry_model_get_info(model, &info) == FERRY_OK;
    size_t arena_bytes = 0;
    const ferry_status st = ferry_selftest_arena_size(model, &arena_bytes);
    const std::string st_error = ferry_last_error();
    if (e.tool == "selftest" && !e.ok) {
      EXPECT_EQ(st, status_named(e.status)) << ferry_status_string(st) << ": " << st_error;
      EXPECT_NE(st_error.find(e.expect), std::string::npos) << st_error;
    } else if (e.tool == "selftest") {
      EXPECT_EQ(st, FERRY_OK) << st_error;
    }
    ferry_model_free(model);
  }

  // Then the CLI: `ferry run` (or `ferry selftest`) writes nothing.
  write_input_npy(dir / "x.npy", have_info ? &info : nullptr);
  const CommandResult r =
      e.tool == "selftest"
          ? run_ferry("selftest " + shell_quote(path), dir)
          : run_ferry("run " + shell_quote(path) + " --input " + shell_quote(dir / "x.npy") + " --output " +
                          shell_quote(dir / "y.npy") + " --quiet",
                      dir);
  if (e.ok) {
    EXPECT_EQ(r.status, 0) << r.err;
    return;
  }
  expect_refused(r, e);
  expect_only(dir, {"x.npy"});
  // The CUDA backend reads the same loader's view: a file the loader
  // refuses is refused with the same message before any backend (or GPU)
  // is asked, in every build.
  if (e.tool == "model") {
    const CommandResult c = run_ferry("run " + shell_quote(path) + " --input " + shell_quote(dir / "x.npy") +
                                          " --output " + shell_quote(dir / "y.npy") + " --quiet --backend cuda",
                                      dir);
    expect_refused(c, e);
    EXPECT_EQ(c.err, r.err) << "--backend cuda and the default backend refuse it alike";
    expect_only(dir, {"x.npy"});
  }
}

std::string entry_name(const ::testing::TestParamInfo<Entry>& info) {
  std::string name = info.param.file;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Files, BadCatalogue, ::testing::ValuesIn(manifest()), entry_name);

TEST(BadCatalogue, ManifestCoversTheIssue) {
  // At least 40 refused files; every kind the issue lists is present.
  size_t refused = 0;
  for (const Entry& e : manifest()) refused += !e.ok;
  EXPECT_GE(refused, 40u);
  for (const char* needle :
       {"zip_truncated", "zip_overlapping", "zip_cd_past_end", "zip64_locator_offset_wrap",
        "zip_duplicate_name", "zip_dotdot_name", "zip_code_deflate_bomb", "pickle_stack_underflow",
        "pickle_mark_underflow", "pickle_bad_memo_index", "pickle_memo_bomb", "pickle_deep_nesting",
        "pickle_unknown_opcode", "pickle_global_os_system", "pickle_stack_global_builtins_eval",
        "pickle_global_subprocess_popen", "pickle_stack_global_posix_system", "pickle_setitem_on_list",
        "huge_length", "tensor_negative_size", "tensor_size_overflow", "tensor_view_past_storage",
        "tensor_record_short", "tensor_unknown", "tensor_index_out_of_range", "shape_product",
        "weights_misaligned", "weights_missing", "wrong_identifier", "pt2_target_os_system",
        "pt2_target_in_subgraph", "polyglot_pt2_torch_save", "polyglot_pt2_torchscript"}) {
    bool found = false;
    for (const Entry& e : manifest()) found = found || e.file.find(needle) != std::string::npos;
    EXPECT_TRUE(found) << needle;
  }
}

}  // namespace
