// The ferry command-line tool as one call (library.h run_cli; main.cpp and
// `python -m ferry` call it): parse (cli.h: every command declared once with
// CLI11), run the chosen command, report the one-line error, signals.
//
// Every failure ends as one line `ferry: error: <what>` on stderr and a
// non-zero exit status (2 for usage errors, followed by the command's usage;
// 1 otherwise); no partial output file is ever left behind (writers go
// through a temporary name + rename).
#include <csignal>
#include <cstdio>
#include <new>
#include <string>

#include "cli.h"
#include "error.h"
#include "io/atomic_file.h"
#include "library.h"

namespace {

using ferry::cli::Cli;
using ferry::cli::UsageError;
using ferry::conv::Error;

// SIGINT, SIGTERM, SIGHUP: the first one cancels the file writers (the
// temporary file being written is removed as the error unwinds; a complete
// output stays complete) and main then dies of that signal, as shells
// expect; a second one kills at once. SIGXFSZ (the file size limit, a full
// quota) is ignored so that a write past it fails with EFBIG: an error like
// any other, instead of a kill that would leave the temporary file behind.
volatile sig_atomic_t g_signal = 0;

void on_terminating_signal(int sig) {
  if (g_signal != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
  ferry::conv::cancel_writes();
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_terminating_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  std::signal(SIGXFSZ, SIG_IGN);
}

// The usage shown after a usage error: the command's own help when the
// parse got to one, else the top level's.
int usage_error(const Cli& cli, const std::string& what) {
  const CLI::App* sub = cli.selected();
  std::fprintf(stderr, "ferry: error: %s\n%s", what.c_str(), cli.help(sub ? sub->get_name() : "").c_str());
  return 2;
}

int dispatch(int argc, char** argv) {
  Cli cli;
  if (argc < 2) {
    std::fputs(cli.help().c_str(), stderr);
    return 2;
  }
  ferry::cli::Action action;
  try {
    action = cli.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    const CLI::App* sub = cli.selected();
    std::fputs(cli.help(sub ? sub->get_name() : "").c_str(), stdout);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::printf("%s\n", e.what());
    return 0;
  } catch (const CLI::ParseError& e) {
    // An unknown option is what the user got wrong, whatever CLI11 checked
    // first (a required option the typo was meant to be).
    const std::vector<std::string> extra = cli.unexpected();
    if (!extra.empty()) {
      std::string words;
      for (const std::string& w : extra) words += (words.empty() ? "'" : ", '") + w + "'";
      return usage_error(cli, (extra.size() == 1 ? "unknown option or extra argument " : "unknown options or extra arguments ") + words);
    }
    return usage_error(cli, e.what());
  } catch (const UsageError& e) {
    return usage_error(cli, e.what());
  }
  try {
    return action();
  } catch (const UsageError& e) {
    return usage_error(cli, e.what());
  } catch (const Error& e) {
    std::fprintf(stderr, "ferry: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "ferry: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry: error: internal: %s\n", e.what());
    return 1;
  }
}

}  // namespace

namespace ferry::cli {

int run_cli(int argc, char** argv) {
  install_signal_handlers();
  const int status = dispatch(argc, argv);
  if (g_signal != 0) {
    std::fflush(nullptr);
    std::signal(g_signal, SIG_DFL);
    std::raise(g_signal);
  }
  return status;
}

}  // namespace ferry::cli
