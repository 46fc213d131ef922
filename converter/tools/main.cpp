// The ferry command-line tool: dispatch to one command per file
// (commands.h), the one-line error report, and signals.
//
// Every failure ends as one line `ferry: error: <what>` on stderr and a
// non-zero exit status (2 for usage errors, 1 otherwise); no partial output
// file is ever left behind (writers go through a temporary name + rename).
#include <csignal>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "args.h"
#include "commands.h"
#include "error.h"
#include "ferry/ferry.h"
#include "io/atomic_file.h"

namespace {

using ferry::cli::UsageError;
using ferry::conv::Error;

const char* kUsage =
    "usage:\n"
    "  ferry convert IN.pt OUT.fb [--graph SPEC] [--batch-first] [--key NAME] [--stats] [--selftest]\n"
    "                             [--c-array model_data.h]\n"
    "  ferry run MODEL.fb --input X.npy --output Y.npy [--backend auto|reference|simd|xnnpack]\n"
    "                     [--threads N] [--stream] [--lengths L1,L2,...] [--expect Y.npy [--tolerance 1e-5]]\n"
    "  ferry bench MODEL.fb [--stream] [--batch B] [--seq T] [--backend B] [--threads N]\n"
    "                     [--repeat N] [--json]   (median time of ferry_run / ferry_step)\n"
    "  ferry inspect FILE            (a checkpoint: a file or a DCP directory; or a .fb model)\n"
    "  ferry selftest MODEL.fb [--backend B]   (the golden vectors stored in the file)\n"
    "  ferry --version\n"
    "\n"
    "--graph is a chain of module paths and ops, e.g. \"lstm > last > fc\";\n"
    "ops: last, relu, tanh, sigmoid, softmax, identity; an RNN may be written rnn(relu).\n";

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

int dispatch(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "--version") {
      std::printf("ferry %s (model format %d.%d)\n", FERRY_VERSION_STRING, FERRY_FORMAT_MAJOR, FERRY_FORMAT_MINOR);
      return 0;
    }
    if (cmd == "convert") return ferry::cli::cmd_convert(argc, argv);
    if (cmd == "run") return ferry::cli::cmd_run(argc, argv);
    if (cmd == "inspect") return ferry::cli::cmd_inspect(argc, argv);
    if (cmd == "selftest") return ferry::cli::cmd_selftest(argc, argv);
    if (cmd == "bench") return ferry::cli::cmd_bench(argc, argv);
    throw UsageError("unknown command '" + cmd + "' (convert, run, inspect, selftest, bench)");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ferry: error: %s\n%s", e.what(), kUsage);
    return 2;
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

int main(int argc, char** argv) {
  install_signal_handlers();
  const int status = dispatch(argc, argv);
  if (g_signal != 0) {
    std::fflush(nullptr);
    std::signal(g_signal, SIG_DFL);
    std::raise(g_signal);
  }
  return status;
}
