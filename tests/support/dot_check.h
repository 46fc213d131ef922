// `ferry inspect --dot` of a converted model, checked the way a user sees
// it: Graphviz's `dot` (Debian's graphviz, scripts/install-deps.sh) renders
// it, and the rendered graph has one node per element of the chain that
// `inspect --json` lists.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_runner.h"

namespace ferry::test {

inline void expect_dot_renders(const std::string& fb, const TempDir& dir) {
  const CommandResult json = run_ferry("inspect --json " + shell_quote(fb), dir);
  ASSERT_EQ(json.status, 0) << json.err;
  const size_t layers = nlohmann::json::parse(json.out).at("layers").size();
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
