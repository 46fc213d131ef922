// `ferry inspect --dot`: a model's chain as a Graphviz digraph (one node per
// layer, in chain order, with its kind, widths, weight dtype and bytes; an
// edge per activation passed on, labelled with its width; a dashed edge from
// each residual Save to the Add that uses it). `dot -Tsvg` renders it.
#pragma once

#include <cstdint>
#include <string>

namespace ferry::fb {
struct Model;
struct Layer;
}

namespace ferry::cli {

// `title` heads the graph (the file's name).
std::string model_dot(const ferry::fb::Model* m, const std::string& title);

// The stored bytes of a layer's tensors, each with its scale tensor: the
// layer's flash (`inspect --memory`, the graph's nodes).
uint64_t layer_weight_bytes(const ferry::fb::Model* m, const ferry::fb::Layer* l);

}  // namespace ferry::cli
