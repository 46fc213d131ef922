// The ferry CLI's commands, one file each (cmd_<name>.cpp), dispatched by
// main.cpp. Each takes main's argc/argv (argv[1] is the command's name),
// returns the exit status, and throws UsageError or conv::Error, which
// main.cpp turns into one `ferry: error: ...` line.
#pragma once

namespace ferry::cli {

int cmd_convert(int argc, char** argv);   // IN.pt OUT.fb: the converter library's convert()
int cmd_run(int argc, char** argv);       // MODEL.fb --input X.npy --output Y.npy
int cmd_bench(int argc, char** argv);     // MODEL.fb: median time of ferry_run / ferry_step
int cmd_inspect(int argc, char** argv);   // a checkpoint or a .fb model
int cmd_selftest(int argc, char** argv);  // MODEL.fb: its stored golden vectors

}  // namespace ferry::cli
