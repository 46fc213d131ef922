#include "mapping/sequential_chain.h"

#include <cstdlib>
#include <unordered_map>

#include "error.h"

namespace ferry::conv {
namespace {

constexpr size_t kMaxSequentialLayers = 4096;

std::string parent_of(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string short_class(const std::string& qualified) {
  const size_t dot = qualified.rfind('.');
  return dot == std::string::npos ? qualified : qualified.substr(dot + 1);
}

// A class of torch.nn itself (pickled "torch.nn.modules.activation.ReLU" or
// TorchScript "__torch__.torch.nn.modules..."), not a user's class that
// happens to share its name.
bool is_torch_nn(const std::string& qualified) {
  return qualified.rfind("torch.nn.modules.", 0) == 0 || qualified.rfind("__torch__.torch.nn.modules.", 0) == 0;
}

[[noreturn]] void refuse(const ModuleObject& o, const std::string& why) {
  throw Error("nn.Sequential child '" + o.path + "' (" + short_class(o.class_name) + "): " + why);
}

GraphElement module_element(const Module& m) {
  GraphElement e;
  e.module = m.path.empty() ? kRootModuleName : m.path;
  return e;
}

}  // namespace

bool is_sequential_class(const std::string& q) {
  return is_torch_nn(q) && q.find(".container.") != std::string::npos && short_class(q) == "Sequential";
}

RecordedChain sequential_chain(const Checkpoint& checkpoint, const ModuleSet& modules) {
  const std::vector<ModuleObject>& objects = checkpoint.module_objects;
  if (objects.empty()) throw Error("the file records no module objects");
  if (!is_sequential_class(objects[0].class_name)) {
    throw Error("the file holds a whole " + objects[0].class_name +
                " module, whose forward a pickle does not record (only an nn.Sequential's order is its computation)");
  }
  std::unordered_map<std::string, const ModuleObject*> by_path;
  for (const ModuleObject& o : objects) by_path.emplace(o.path, &o);

  ChainAxes axes;
  const Axes x = axes.input();  // nothing in a Sequential moves an axis
  std::vector<GraphElement> chain;
  for (size_t i = 1; i < objects.size(); ++i) {
    const ModuleObject& o = objects[i];
    auto parent = by_path.find(parent_of(o.path));
    // Inside a child already read (a layer's own submodules): not a step of the chain.
    if (parent == by_path.end() || !is_sequential_class(parent->second->class_name)) continue;
    if (is_sequential_class(o.class_name)) continue;  // its children follow, in order
    if (chain.size() >= kMaxSequentialLayers)
      refuse(o, "more than " + std::to_string(kMaxSequentialLayers) + " layers in one chain");
    const Module* m = modules.find(o.path);
    if (m) {
      switch (m->type) {
        case ModuleType::Recurrent:
          refuse(o, m->is_cell ? std::string("a recurrent Cell is stepped by code around it, which the file does not hold")
                               : "it returns a tuple (output, state), which the next child cannot take: the module "
                                 "that picks the output is a forward the file does not hold");
        case ModuleType::Conv1d:
          if (!axes.require_exactly(x, "BFT", false)) refuse(o, "a Conv1d after a layer that keeps the features last");
          break;
        case ModuleType::BatchNorm:
          if (!axes.require_exactly(x, "BFT", true))
            refuse(o, "a BatchNorm1d normalises dim 1, which after the layers before it is not the features");
          break;
        case ModuleType::PReLU:
          if (m->features > 1 && !axes.require_exactly(x, "BFT", true))
            refuse(o, "a PReLU with a weight per channel acts on dim 1, which after the layers before it is not the features");
          break;
        case ModuleType::Linear: case ModuleType::LayerNorm:
          if (m->class_name == "Embedding" && !chain.empty()) refuse(o, "an Embedding after the first layer");
          if (!axes.require_features_last(x)) refuse(o, "it acts on the last axis, which after a Conv1d is time");
          break;
      }
      chain.push_back(module_element(*m));
      continue;
    }
    auto act = is_torch_nn(o.class_name) ? recorded_activation(checkpoint, o.path) : std::nullopt;
    if (!act) {
      refuse(o, "neither a layer ferry runs nor an activation it knows (what it computes is a forward the file does "
                "not hold)");
    }
    if (act->op == OpKind::Softmax || act->op == OpKind::LogSoftmax) {
      auto dim = checkpoint.attributes.find(attribute_key(o.path, "dim"));
      if (dim == checkpoint.attributes.end()) refuse(o, "no dim: PyTorch picks the axis from the input's rank");
      char* end = nullptr;
      const long d = std::strtol(dim->second.c_str(), &end, 10);
      if (*end != '\0' || !axes.require_axis(x, d, 'F')) refuse(o, "dim " + dim->second + " is not the features axis");
    }
    chain.push_back(*act);
  }
  if (chain.empty()) throw Error("an empty nn.Sequential");
  for (const Module& m : modules.modules) {
    bool used = false;
    for (const GraphElement& e : chain) used = used || (e.op == OpKind::Module && e.module == (m.path.empty() ? kRootModuleName : m.path));
    if (!used) throw Error("module '" + m.path + "' is not a child of the nn.Sequential");
  }
  RecordedChain r;
  r.graph = format_graph(chain);
  r.layout = axes.decided();
  return r;
}

std::vector<GraphElement> recorded_order(const Checkpoint& checkpoint, const ModuleSet& modules) {
  std::vector<GraphElement> out;
  std::unordered_map<std::string, const ModuleObject*> by_path;
  for (const ModuleObject& o : checkpoint.module_objects) by_path.emplace(o.path, &o);
  for (const ModuleObject& o : checkpoint.module_objects) {
    if (const Module* m = modules.find(o.path.empty() ? kRootModuleName : o.path)) {
      out.push_back(module_element(*m));
      continue;
    }
    auto parent = by_path.find(parent_of(o.path));
    if (o.path.empty() || parent == by_path.end() || !is_sequential_class(parent->second->class_name)) continue;
    if (!is_torch_nn(o.class_name)) continue;
    if (auto act = recorded_activation(checkpoint, o.path)) out.push_back(*act);
  }
  return out;
}

}  // namespace ferry::conv
