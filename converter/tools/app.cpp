// The command line as one CLI11 App: a subcommand per Command (commands()),
// `help [COMMAND]` and `--version`. See cli.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cli.h"
#include "commands.h"
#include "library.h"
#include "ferry/ferry.h"

namespace ferry::cli {

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (int i = 0;; ++i) {
    const std::string name = ferry_backend_name(static_cast<ferry_backend>(i));
    if (name == "unknown") break;
    names.push_back(name);
  }
  return names;
}

CLI::Validator positive_count(long max) {
  return CLI::Validator(
      [max](std::string& text) -> std::string {
        char* end = nullptr;
        const long v = std::strtol(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || v < 1 || v > max)
          return "'" + text + "': expected a whole number from 1 to " + std::to_string(max);
        return "";
      },
      "");
}

CLI::Validator finite_non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !(v >= 0) || !std::isfinite(v))
          return "'" + text + "': expected a finite number >= 0";
        return "";
      },
      "");
}

std::string version_text() {
  char line[256];
  std::snprintf(line, sizeof line,
                "ferry %s\nmodel files: writes format 1.2 (f32), 1.3 (quantized weights), %d.%d (a sequence output "
                "in another layout than the input's); reads formats %d.x to %d.x (any minor)\n",
                FERRY_VERSION_STRING, FERRY_FORMAT_MAJOR, FERRY_FORMAT_MINOR, FERRY_FORMAT_MAJOR_OLDEST,
                FERRY_FORMAT_MAJOR);
  return std::string(line) +
         "checkpoints: torch.save zip and legacy (pre-1.6) files, whole pickled modules, TorchScript archives, "
         "safetensors, torch.export .pt2 archives, distributed checkpoint directories";
}

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"convert", "Convert a PyTorch checkpoint into a ferry model file", declare_convert},
      {"run", "Run a model file on a .npy input, whole sequence or step by step", declare_run},
      {"inspect", "Show what a checkpoint or a model file holds", declare_inspect},
      {"bench", "Time ferry_run or ferry_step on a model file", declare_bench},
      {"selftest", "Run the golden vectors stored in a model file", declare_selftest},
  };
  return kCommands;
}

namespace {

std::string command_names() {
  std::string names;
  for (const Command& c : commands()) names += (names.empty() ? "" : ", ") + std::string(c.name);
  return names;
}

}  // namespace

Cli::Cli() : app_(std::make_unique<CLI::App>(
                 "Converts a PyTorch recurrent/linear network into a ferry model file and runs it.", "ferry")) {
  CLI::App& app = *app_;
  app.set_help_flag("-h,--help", "Print this help and exit");
  app.set_version_flag("--version", version_text(), "Print the version and the formats it reads and writes");
  app.require_subcommand(0, 1);
  app.footer("Run 'ferry help COMMAND' or 'ferry COMMAND --help' for a command's options.");
  app.get_formatter()->column_width(34);
  app.get_formatter()->label("Subcommands", "Commands");
  app.get_formatter()->label("SUBCOMMAND", "COMMAND");
  for (const Command& c : commands()) {
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    sub->set_help_flag("-h,--help", "Print this command's help and exit");
    actions_.emplace_back(sub, c.declare(*sub));
  }
  help_ = app.add_subcommand("help", "Print the help of ferry, or of one command");
  help_->add_option("COMMAND", help_topic_, "The command to explain")->type_name("");
}

Action Cli::parse(int argc, char** argv) {
  std::vector<std::string> words(argv + std::min(argc, 1), argv + argc);
  return parse(std::move(words));
}

Action Cli::parse(std::vector<std::string> words) {
  help_topic_.clear();
  if (!words.empty() && !words[0].empty() && words[0][0] != '-' && words[0] != "help" && !command(words[0]))
    throw UsageError("unknown command '" + words[0] + "' (" + command_names() + ")");
  std::reverse(words.begin(), words.end());  // CLI11 takes them last first
  app_->parse(words);
  if (help_->parsed()) {
    if (!help_topic_.empty() && !command(help_topic_))
      throw CLI::ValidationError("COMMAND", "'" + help_topic_ + "' is not a ferry command");
    const std::string text = help(help_topic_);
    return [text] {
      std::fputs(text.c_str(), stdout);
      return 0;
    };
  }
  for (auto& [sub, action] : actions_)
    if (sub->parsed()) return action;
  // No command: the top-level help, as a usage error.
  throw UsageError("no command given (" + command_names() + ")");
}

std::string Cli::help(const std::string& name) const {
  const CLI::App* sub = name.empty() ? nullptr : command(name);
  return sub ? sub->help("ferry") : app_->get_formatter()->make_help(app_.get(), "ferry", CLI::AppFormatMode::Normal);
}

std::vector<std::string> Cli::unexpected() const {
  const CLI::App* sub = selected();
  return (sub ? sub : app_.get())->remaining();
}

const CLI::App* Cli::selected() const {
  for (const CLI::App* sub : app_->get_subcommands({})) if (sub->parsed()) return sub;
  return nullptr;
}

const CLI::App* Cli::command(const std::string& name) const {
  for (const CLI::App* sub : app_->get_subcommands({}))
    if (sub->get_name() == name && sub != help_) return sub;
  return nullptr;
}

}  // namespace ferry::cli

namespace ferry::cli {

conv::Layout layout_named(const std::string& name) {
  return name == "btf" ? conv::Layout::kBatchFirst : name == "tbf" ? conv::Layout::kTimeMajor : conv::Layout::kChannelsFirst;
}

const char* layout_code(conv::Layout l) {
  return l == conv::Layout::kBatchFirst ? "btf" : l == conv::Layout::kTimeMajor ? "tbf" : "bft";
}

std::string input_layout_code(const conv::ConvertReport& r) {
  if (r.channels_first) return "bft";
  if (r.input_is_tokens) return r.batch_first ? "bt" : "tb";
  return r.batch_first ? "btf" : "tbf";
}

void parse_words(CLI::App& app, const std::vector<std::string>& args) {
  std::vector<std::string> words(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(words);
  } catch (const CLI::Error& e) {
    throw UsageError(e.what());
  }
  if (!app.remaining().empty()) throw UsageError("unexpected argument '" + app.remaining().front() + "'");
}

std::vector<OptionInfo> command_options(const std::string& name) {
  const Cli cli;
  const CLI::App* sub = cli.command(name);
  if (!sub) throw UsageError("unknown command '" + name + "' (" + command_names() + ")");
  std::vector<OptionInfo> out;
  for (const CLI::Option* o : sub->get_options()) {
    if (o->get_positional() || o->get_lnames().empty() || o == sub->get_help_ptr()) continue;
    OptionInfo info;
    info.name = o->get_lnames().front();
    info.flag = o->get_expected_max() == 0;
    info.multiple = !info.flag && o->get_expected_max() > 1;
    info.type_name = info.flag ? "" : o->get_type_name();
    info.description = o->get_description();
    info.default_value = o->get_default_str();
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace ferry::cli
