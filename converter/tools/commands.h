// The ferry CLI's commands, one file each (cmd_<name>.cpp). Each declares
// its positionals and options on its CLI11 subcommand and returns the
// action that runs it (cli.h); the action throws UsageError or conv::Error,
// which main.cpp turns into one `ferry: error: ...` line.
#pragma once

#include "cli.h"

namespace ferry::cli {

Action declare_convert(CLI::App& app);   // IN OUT.fb: the converter library's convert()
Action declare_run(CLI::App& app);       // MODEL.fb --input X.npy --output Y.npy
Action declare_bench(CLI::App& app);     // MODEL.fb: median time of ferry_run / ferry_step
Action declare_inspect(CLI::App& app);   // a checkpoint or a .fb model
Action declare_selftest(CLI::App& app);  // MODEL.fb: its stored golden vectors

}  // namespace ferry::cli
