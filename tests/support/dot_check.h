// `ferry inspect --dot` of a converted model, checked the way a user sees
// it: Graphviz's `dot` (Debian's graphviz, scripts/install-deps.sh) renders
// it, and the rendered graph has one node per element of the chain
// (ferry_model_info.num_layers, what `inspect --json` lists).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "ferry/ferry.h"
#include "random_models.h"  // AlignedBytes

namespace ferry::test {

// The chain's length from the C API, in this process (one CLI run fewer
// than asking `inspect --json`: under an emulator each run costs a second).
inline void chain_length(const std::string& fb, size_t* layers) {
  const std::vector<uint8_t> file = read_bytes(fb);
  const AlignedBytes bytes(file.data(), file.size());
  ferry_model* m = nullptr;
  ASSERT_EQ(ferry_model_load(bytes.data(), bytes.size(), nullptr, &m), FERRY_OK) << ferry_last_error();
  ferry_model_info info{};
  info.struct_size = sizeof info;
  EXPECT_EQ(ferry_model_get_info(m, &info), FERRY_OK);
  *layers = info.num_layers;
  ferry_model_free(m);
}

inline void expect_dot_renders(const std::string& fb, const TempDir& dir) {
  size_t layers = 0;
  ASSERT_NO_FATAL_FAILURE(chain_length(fb, &layers));
  const CommandResult dot = run_ferry("inspect --dot " + shell_quote(fb), dir);
  ASSERT_EQ(dot.status, 0) << dot.err;
  ASSERT_EQ(dot.out.rfind("digraph ferry {", 0), 0u) << dot.out;
  const std::string gv = dir / "model.gv", plain = dir / "model.plain";
  {
    std::ofstream(gv) << dot.out;
  }
  const std::string cmd = "dot -Tplain " + shell_quote(gv) + " >" + shell_quote(plain) + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "Graphviz's dot did not render it (is graphviz installed? "
                                            "scripts/install-deps.sh installs it): "
                                         << read_text(plain) << "\n" << dot.out;
  std::istringstream lines(read_text(plain));
  size_t nodes = 0;
  for (std::string line; std::getline(lines, line);) nodes += line.rfind("node ", 0) == 0;
  EXPECT_EQ(nodes, layers) << dot.out;
}

}  // namespace ferry::test
