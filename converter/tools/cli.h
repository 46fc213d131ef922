// The ferry command line, declared once with CLI11: every command's
// positionals and options are declared on its own CLI::App (one file per
// command, cmd_<name>.cpp), and the parser, `ferry help [COMMAND]` and
// `ferry COMMAND --help` are all generated from that one declaration, so the
// help cannot drift from what the parser accepts.
//
// Exit statuses: 0 success, 2 a usage error (an unknown command or option, a
// bad value, a missing argument: reported with that command's usage), 1 any
// other failure (one line `ferry: error: ...` on stderr).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "convert.h"
#include "error.h"

namespace ferry::cli {

// A mistake in the command line found after parsing (two options that do
// not combine, a list that does not fit the input): reported like a parse
// error, with the command's usage, exit status 2.
struct UsageError : conv::Error {
  using conv::Error::Error;
};

// What a parsed command does; returns the exit status.
using Action = std::function<int()>;

struct Command {
  const char* name;
  const char* summary;  // one line, shown by `ferry help`
  // Declares the command's positionals and options on `app` (the
  // command's own subcommand) and returns its action, which reads the
  // values the parse stored.
  Action (*declare)(CLI::App& app);
};

// Every command, in the order `ferry help` lists them.
const std::vector<Command>& commands();

// The whole command line.
class Cli {
 public:
  Cli();

  // Parses argv. Returns the chosen command's action (for `help` and
  // `--version`, one that prints). Throws CLI::ParseError (CLI11's: unknown
  // options, bad values, --help) for the caller to report.
  Action parse(int argc, char** argv);
  // The same for a command line given as words (no program name): the
  // tests parse the examples of the docs this way.
  Action parse(std::vector<std::string> words);

  // The help of `command` ("" or an unknown name: the top level's).
  std::string help(const std::string& command = "") const;
  // The command a parse (also a failed one) got to, or nullptr.
  const CLI::App* selected() const;
  // What the last parse could not place (unknown options, extra
  // arguments): a parse error names these first.
  std::vector<std::string> unexpected() const;
  // The subcommand declared for `name`, or nullptr.
  const CLI::App* command(const std::string& name) const;
  const CLI::App& app() const { return *app_; }

 private:
  std::unique_ptr<CLI::App> app_;
  std::vector<std::pair<CLI::App*, Action>> actions_;
  std::string help_topic_;
  CLI::App* help_ = nullptr;
};

// The layouts as the options spell them: "btf", "tbf", "bft" (and the
// input's "bt" / "tb" for token ids).
conv::Layout layout_named(const std::string& name);
const char* layout_code(conv::Layout layout);
std::string input_layout_code(const conv::ConvertReport& r);

// Parses a command's words (after its name; not reversed) with `app`, the
// App its options are declared on: a parse error, or a word it could not
// place, is a UsageError with the parser's message.
void parse_words(CLI::App& app, const std::vector<std::string>& args);

// The text of `ferry --version`: the tool's version, the model format it
// writes and the ones it reads, and the checkpoint forms it reads.
std::string version_text();

// Shared value lists, so that every command shows the same ones.
// The backends, as the runtime names them (ferry_backend_name).
std::vector<std::string> backend_names();
// A positive count (--threads, --batch, ...), at most `max`.
CLI::Validator positive_count(long max);
// A finite number >= 0 (--max-error, --tolerance).
CLI::Validator finite_non_negative();

}  // namespace ferry::cli
