// The CLI's commands as calls, for the Python package (python/): the same
// option declarations (so `ferry.convert(...)` and `ferry convert` accept
// the same options and check them the same way) and the same results as
// data instead of printed text. Nothing here prints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "convert.h"
#include "ferry/ferry.h"

namespace ferry::cli {

// One option of a command, as its CLI11 declaration has it.
struct OptionInfo {
  std::string name;         // the long name without "--" ("max-error")
  std::string type_name;    // "E", "FILE[:CLASS]"; "" for a flag
  std::string description;  // the help text
  std::string default_value;  // "" when none is shown
  bool flag = false;        // takes no value
  bool multiple = false;    // may be given more than once (--code)
};

// The named options `command` ("convert", "inspect", ...) declares, in the
// order its help lists them; positionals and -h/--help left out. Throws
// UsageError for an unknown command.
std::vector<OptionInfo> command_options(const std::string& command);

// `ferry convert`'s arguments (the words after "convert": IN, OUT and
// options) parsed with its own declaration and checked as the CLI checks
// them. Throws UsageError with the parser's message.
struct ConvertCall {
  conv::ConvertRequest request;
  bool verbose = false;  // --verbose: each step as it starts
};
ConvertCall parse_convert(const std::vector<std::string>& args);

// The converted report as one JSON object: what `ferry convert` prints,
// as data (read, planned, quantized, written).
std::string convert_report_json(const conv::ConvertReport& report);

// `ferry inspect ARGS --json`: the JSON text it prints (a checkpoint or a
// model file). Throws UsageError or conv::Error as the command does.
std::string inspect_json(const std::vector<std::string>& args);

// The `inspect --json` summary of a loaded model. `bytes` are the model
// file's, `file` names it in the summary ("" for bytes from memory).
std::string model_json(const ferry_model* model, const uint8_t* bytes, size_t size, const std::string& file);

// The whole CLI as a process runs it (`ferry ARGS...`, argv[0] the
// program's name): installs the signal handlers (SIGINT cancels the file
// writers, then the process dies of the signal), parses, runs, reports the
// one-line error; returns the exit status. main() is only this.
int run_cli(int argc, char** argv);

}  // namespace ferry::cli
