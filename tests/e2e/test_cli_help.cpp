// The CLI's help cannot drift from what it accepts, and the docs cannot
// drift from the CLI:
//  - every option and positional a command declares appears in its help,
//    with the values it takes (backends, dtypes, layouts);
//  - `ferry help CMD` and `ferry CMD --help` print the same text, exit 0;
//  - every example command in README.md and docs/*.md (fenced sh / bash /
//    console / shell blocks, lines that run `ferry`) parses: the words are
//    split as a shell would and handed to the same parser the tool uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "cli_runner.h"

namespace {

using ferry::cli::Cli;
using ferry::test::run_ferry;
using ferry::test::TempDir;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(CliHelp, EveryDeclaredOptionIsInItsCommandsHelp) {
  const Cli cli;
  size_t options = 0;
  for (const ferry::cli::Command& c : ferry::cli::commands()) {
    const CLI::App* sub = cli.command(c.name);
    ASSERT_NE(sub, nullptr) << c.name;
    const std::string help = cli.help(c.name);
    EXPECT_TRUE(contains(help, std::string("ferry ") + c.name)) << help;
    for (const CLI::Option* o : sub->get_options()) {
      for (const std::string& name : o->get_lnames()) {
        EXPECT_TRUE(contains(help, "--" + name)) << c.name << ": --" << name << " is accepted but not in:\n" << help;
        ++options;
      }
      if (o->get_lnames().empty() && o->get_snames().empty()) {
        EXPECT_TRUE(contains(help, o->get_name())) << c.name << ": positional " << o->get_name();
      }
    }
    // The command is listed, with its summary, in the top-level help.
    EXPECT_TRUE(contains(cli.help(), c.name)) << c.name;
    EXPECT_TRUE(contains(cli.help(), c.summary)) << c.summary;
  }
  EXPECT_GE(options, 30u);  // convert, run, bench, inspect, selftest: not an empty walk
}

TEST(CliHelp, ValueListsAreShown) {
  const Cli cli;
  for (const char* cmd : {"run", "bench", "selftest"})
    for (const std::string& b : ferry::cli::backend_names()) EXPECT_TRUE(contains(cli.help(cmd), b)) << cmd << " " << b;
  for (const char* v : {"f32", "f16", "int8", "int4", "btf", "tbf", "bft"})
    EXPECT_TRUE(contains(cli.help("convert"), v)) << v;
  EXPECT_TRUE(contains(cli.help("run"), "1e-05")) << "--tolerance's default";
}

TEST(CliHelp, HelpCommandAndHelpFlagAgree) {
  TempDir dir;
  for (const ferry::cli::Command& c : ferry::cli::commands()) {
    const auto a = run_ferry(std::string("help ") + c.name, dir);
    const auto b = run_ferry(std::string(c.name) + " --help", dir);
    EXPECT_EQ(a.status, 0) << a.err;
    EXPECT_EQ(b.status, 0) << b.err;
    EXPECT_EQ(a.out, b.out) << c.name;
    EXPECT_TRUE(contains(a.out, std::string("Usage: ferry ") + c.name)) << a.out;
  }
  const auto top = run_ferry("help", dir);
  EXPECT_EQ(top.status, 0);
  EXPECT_EQ(top.out, run_ferry("--help", dir).out);
  const auto bad = run_ferry("help frobnicate", dir);
  EXPECT_EQ(bad.status, 2);
  EXPECT_TRUE(contains(bad.err, "'frobnicate' is not a ferry command")) << bad.err;
  const auto none = run_ferry("", dir);
  EXPECT_EQ(none.status, 2);
  const auto version = run_ferry("--version", dir);
  EXPECT_EQ(version.status, 0);
  EXPECT_TRUE(contains(version.out, "writes format ")) << version.out;
}

TEST(CliHelp, UsageErrorsExitTwoWithTheCommandsUsage) {
  TempDir dir;
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"frobnicate", "unknown command 'frobnicate'"},
      {"run m.fb --bogus", "unknown option or extra argument '--bogus'"},
      {"run m.fb --input x.npy", "--output is required"},
      {"run m.fb --input x.npy --output y.npy --backend gpu", "--backend: gpu not in"},
      {"run m.fb --input x.npy --output y.npy --stream --lengths 1", "excludes --lengths"},
      {"run m.fb --input x.npy --output y.npy --tolerance 1", "--tolerance requires --expect"},
      {"bench m.fb --threads 0", "--threads: '0'"},
      {"convert a.pt", "OUT is required"},
      {"convert a.pt b.fb --layout xyz", "--layout: xyz not in"},
      {"convert a.pt b.fb --layout btf --batch-first", "excludes"},
  };
  for (const auto& c : cases) {
    const auto r = run_ferry(c.args, dir);
    EXPECT_EQ(r.status, 2) << c.args << ": " << r.err;
    EXPECT_TRUE(contains(r.err, std::string("ferry: error: "))) << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << c.args << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "Usage: ferry")) << c.args << ": the usage follows the error";
  }
}

// ---------------------------------------------------------------------------
// The docs' example commands.

// Splits a command line as a POSIX shell would (quotes, backslashes), up to
// the first unquoted redirection, pipe, `;` or `&&`.
std::vector<std::string> shell_words(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '\'') {
      const size_t end = line.find('\'', i + 1);
      word += line.substr(i + 1, end - i - 1);
      i = end == std::string::npos ? line.size() : end;
      in_word = true;
    } else if (c == '"') {
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) ++i;
        word += line[i];
      }
      in_word = true;
    } else if (c == '\\' && i + 1 < line.size()) {
      word += line[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else if (c == '#' && !in_word) {
      break;
    } else if (c == '|' || c == ';' || c == '>' || c == '<' || c == '&') {
      if (in_word && !(c == '>' && (word == "2" || word == "1"))) words.push_back(word);
      word.clear();
      in_word = false;
      break;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

struct Example {
  std::string file;
  int line;
  std::string text;
};

// `ferry ...` lines of the fenced shell blocks of a Markdown file, with
// their `\` continuations joined.
std::vector<Example> examples_in(const std::filesystem::path& md) {
  std::ifstream in(md);
  std::vector<Example> out;
  std::string line, pending;
  int number = 0, start = 0;
  bool shell = false, fenced = false;
  while (std::getline(in, line)) {
    ++number;
    if (line.rfind("```", 0) == 0) {
      const std::string lang = line.substr(3);
      shell = !fenced && (lang == "sh" || lang == "bash" || lang == "console" || lang == "shell");
      fenced = !fenced;
      pending.clear();
      continue;
    }
    if (!shell) continue;
    if (pending.empty()) {
      std::string t = line.substr(std::min(line.find_first_not_of(" \t"), line.size()));
      if (t.rfind("$ ", 0) == 0) t = t.substr(2);
      // `ferry`, or a path to it (./build/converter/ferry).
      const std::string first = t.substr(0, t.find(' '));
      if (first != "ferry" && !(first.size() > 6 && first.compare(first.size() - 6, 6, "/ferry") == 0)) continue;
      pending = t;
      start = number;
    } else {
      pending += " " + line;
    }
    if (!pending.empty() && pending.back() == '\\') {
      pending.pop_back();
      continue;
    }
    out.push_back({md.filename().string(), start, pending});
    pending.clear();
  }
  return out;
}

TEST(CliHelp, EveryExampleCommandInTheDocsParses) {
  const std::filesystem::path root = FERRY_SOURCE_DIR;
  std::vector<std::filesystem::path> pages{root / "README.md"};
  if (std::filesystem::is_directory(root / "docs"))
    for (const auto& e : std::filesystem::directory_iterator(root / "docs"))
      if (e.path().extension() == ".md") pages.push_back(e.path());
  size_t checked = 0;
  for (const auto& page : pages) {
    for (const Example& ex : examples_in(page)) {
      std::vector<std::string> words = shell_words(ex.text);
      ASSERT_FALSE(words.empty());
      words.erase(words.begin());  // the program
      Cli cli;
      try {
        cli.parse(words);
      } catch (const CLI::CallForHelp&) {
      } catch (const CLI::CallForVersion&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << ex.file << ":" << ex.line << ": `" << ex.text << "` does not parse: " << e.what();
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 5u) << "the README's quick start alone has more example commands";
}

TEST(CliHelp, ShellWordsSplitsAsAShellDoes) {
  EXPECT_EQ(shell_words(R"(ferry convert a.pt b.fb --graph "lstm > last > fc"  # comment)"),
            (std::vector<std::string>{"ferry", "convert", "a.pt", "b.fb", "--graph", "lstm > last > fc"}));
  EXPECT_EQ(shell_words(R"(ferry run m.fb --input 'x y.npy' > out.txt)"),
            (std::vector<std::string>{"ferry", "run", "m.fb", "--input", "x y.npy"}));
  EXPECT_EQ(shell_words(R"(ferry inspect m.fb --json | jq .)"),
            (std::vector<std::string>{"ferry", "inspect", "m.fb", "--json"}));
}

}  // namespace

// `ferry inspect --json` is one JSON object for a checkpoint and for a model
// file, with what a script needs: the checkpoint's tensors and modules and
// the chain it records; the model's layers and the backends that run it.
TEST(CliInspectJson, CheckpointAndModelAreOneObjectEach) {
  TempDir dir;
  const std::string ts = std::string(FERRY_FIXTURES_DIR) + "/torch2_forms/traced_ts.pt";
  const auto c = run_ferry("inspect --json " + ferry::test::shell_quote(ts), dir);
  ASSERT_EQ(c.status, 0) << c.err;
  const nlohmann::json j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j.at("kind"), "checkpoint");
  EXPECT_FALSE(j.at("tensors").empty());
  EXPECT_EQ(j.at("tensors")[0].at("location"), "cuda:0");
  EXPECT_FALSE(j.at("modules").empty());
  EXPECT_EQ(j.at("recorded_chain").at("from"), "the TorchScript code");
  EXPECT_FALSE(j.at("recorded_chain").at("chain").get<std::string>().empty());

  const std::string model = dir / "m.fb";
  ASSERT_EQ(run_ferry("convert " + ferry::test::shell_quote(ts) + " " + ferry::test::shell_quote(model) + " --quiet", dir)
                .status,
            0);
  const auto m = run_ferry("inspect --json " + ferry::test::shell_quote(model), dir);
  ASSERT_EQ(m.status, 0) << m.err;
  const nlohmann::json k = nlohmann::json::parse(m.out);
  EXPECT_FALSE(k.at("layers").empty());
  EXPECT_NE(std::find(k.at("backends").begin(), k.at("backends").end(), "reference"), k.at("backends").end());
}
