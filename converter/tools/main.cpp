// The ferry command-line tool: the CLI (cli_main.cpp) as a program.
#include "library.h"

int main(int argc, char** argv) { return ferry::cli::run_cli(argc, argv); }
