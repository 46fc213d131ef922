// `ferry inspect --dot`: a model's chain as a Graphviz digraph (one node per
// layer, in chain order, with its kind, widths, weight dtype and bytes; an
// edge per activation passed on, labelled with its width; a dashed edge from
// each residual Save to the Add that uses it). `dot -Tsvg` renders it.
#pragma once

#include <string>

namespace ferry::fb {
struct Model;
}

namespace ferry::cli {

// `title` heads the graph (the file's name).
std::string model_dot(const ferry::fb::Model* m, const std::string& title);

}  // namespace ferry::cli
