#include "plan/planner.h"

#include <cstring>
#include <set>

#include "error.h"
#include "io/page_release.h"
#include "mapping/graph.h"
#include "mapping/pytorch_rules.h"

namespace ferry::conv {
namespace {

std::vector<uint32_t> u32_shape(const TensorRef& t) {
  std::vector<uint32_t> s;
  for (int64_t d : t.shape) s.push_back(static_cast<uint32_t>(d));
  return s;
}

class PlanBuilder {
 public:
  PlanBuilder(ModelPlan& plan, const MappedFile* source) : plan_(plan), source_(source) {}

  // A tensor copied (converted to float32) from the checkpoint.
  int copy(const TensorRef& t, const std::string& name, int layer, const std::string& role) {
    TensorPlan tp;
    tp.name = name;
    tp.shape = u32_shape(t);
    const TensorRef* src = &t;
    const MappedFile* source = source_;
    const std::optional<uint64_t> file_offset = source ? float32_view_file_offset(t, *source) : std::nullopt;
    if (file_offset) {
      // Contiguous little-endian float32 inside the file: a byte copy.
      tp.source_offset = static_cast<int64_t>(*file_offset);
      tp.fill = [src, source](float* dst, uint64_t begin, uint64_t count) {
        const uint8_t* p = src->storage->data + (src->offset + begin) * 4;
        std::memcpy(dst, p, count * 4);
        release_pages(*source, p, count * 4);
      };
    } else {
      // Converted chunk by chunk: each call reads only elements [begin,
      // begin + count). A contiguous view releases the bytes it just read; a
      // strided one may come back to any part of its storage, so it releases
      // the storage after its last chunk.
      const bool contiguous = is_contiguous(t);
      tp.fill = [src, source, contiguous](float* dst, uint64_t begin, uint64_t count) {
        to_float32_range(*src, dst, begin, count);
        if (!source || !src->storage) return;
        const uint64_t esize = dtype_size(src->dtype);
        if (contiguous) {
          release_pages(*source, src->storage->data + (src->offset + begin) * esize, count * esize);
        } else if (begin + count == static_cast<uint64_t>(src->numel())) {
          release_pages(*source, src->storage->data, src->storage->nbytes);
        }
      };
    }
    map(t.name, layer, role);
    return add(std::move(tp));
  }

  // A tensor computed from others (folded biases).
  int computed(const std::string& name, uint32_t size, std::function<std::vector<float>()> make) {
    TensorPlan tp;
    tp.name = name;
    tp.shape = {size};
    tp.fill = [make, size, name](float* dst, uint64_t begin, uint64_t count) {
      const std::vector<float> v = make();
      if (v.size() != size || begin + count > size) throw Error("internal: tensor '" + name + "' size mismatch");
      std::memcpy(dst, v.data() + begin, count * sizeof(float));
    };
    return add(std::move(tp));
  }

  void map(const std::string& key, int layer, const std::string& role) {
    plan_.mapping.push_back({key, layer, role});
    used_.insert(key);
  }

  bool used(const std::string& key) const { return used_.count(key) != 0; }

 private:
  int add(TensorPlan tp) {
    plan_.tensors.push_back(std::move(tp));
    return static_cast<int>(plan_.tensors.size() - 1);
  }
  ModelPlan& plan_;
  const MappedFile* source_;
  std::set<std::string> used_;
};

LayerOp recurrent_op(const Module& m, const std::string& nonlinearity) {
  switch (m.kind) {
    case CellKind::kLstm: return LayerOp::LSTM;
    case CellKind::kGru: return LayerOp::GRU;
    case CellKind::kRnn: return nonlinearity == "relu" ? LayerOp::RNN_RELU : LayerOp::RNN_TANH;
  }
  return LayerOp::LSTM;
}

void add_recurrent(PlanBuilder& b, LayerPlan& l, const Module& m, int li) {
  const uint32_t dirs = m.bidirectional ? 2 : 1;
  const uint32_t rows = layout::gate_count(m.kind) * m.hidden_size;
  for (uint32_t k = 0; k < m.num_layers; ++k) {
    for (uint32_t d = 0; d < dirs; ++d) {
      const std::string sfx = recurrent_param_suffix(m.is_cell, k, d == 1);
      const std::string tag = m.path + ".l" + std::to_string(k) + (d ? "_reverse" : "");
      const auto param = [&](const std::string& base) -> const TensorRef* {
        auto it = m.params.find(base + sfx);
        return it == m.params.end() ? nullptr : it->second;
      };
      CellPlan c;
      c.w_ih = b.copy(*param("weight_ih"), tag + ".w_ih", li, "w_ih" + sfx);
      c.w_hh = b.copy(*param("weight_hh"), tag + ".w_hh", li, "w_hh" + sfx);
      if (m.proj_size) c.w_hr = b.copy(*param("weight_hr"), tag + ".w_hr", li, "w_hr" + sfx);
      if (m.has_bias) {
        const TensorRef* b_ih = param("bias_ih");
        const TensorRef* b_hh = param("bias_hh");
        if (m.kind == CellKind::kGru) {
          const uint32_t h = m.hidden_size;
          c.bias = b.computed(tag + ".bias", rows, [b_ih, b_hh, h] {
            return fold_gru_bias(to_float32(*b_ih), to_float32(*b_hh), h).folded;
          });
          c.b_hn = b.computed(tag + ".b_hn", h, [b_ih, b_hh, h] {
            return fold_gru_bias(to_float32(*b_ih), to_float32(*b_hh), h).b_hn;
          });
          b.map(b_ih->name, li, "bias" + sfx + " (r,z folded with bias_hh; n kept)");
          b.map(b_hh->name, li, "bias" + sfx + " (r,z) and b_hn" + sfx);
        } else {
          c.bias = b.computed(tag + ".bias", rows, [b_ih, b_hh] {
            return fold_bias(to_float32(*b_ih), to_float32(*b_hh));
          });
          b.map(b_ih->name, li, "bias" + sfx + " (folded b_ih + b_hh)");
          b.map(b_hh->name, li, "bias" + sfx + " (folded b_ih + b_hh)");
        }
      }
      l.cells.push_back(c);
    }
  }
}

}  // namespace

PlanResult plan_conversion(const Checkpoint& checkpoint, const ModuleSet& modules, const PlanOptions& options,
                           const MappedFile* source) {
  PlanResult r;
  ModelPlan& plan = r.plan;
  std::vector<GraphElement> chain;
  if (options.graph) {
    chain = parse_graph(*options.graph);
  } else {
    chain = infer_graph(modules);
    r.graph_inferred = true;
  }

  // batch_first: the flag, else what the file records for the first recurrent module.
  std::optional<bool> recorded;
  for (const GraphElement& e : chain) {
    if (e.op != OpKind::Module) continue;
    auto it = checkpoint.attributes.find(attribute_key(e.module, "batch_first"));
    if (it != checkpoint.attributes.end()) {
      recorded = it->second == "true" || it->second == "True" || it->second == "1";
      break;
    }
  }
  if (options.batch_first) {
    plan.batch_first = *options.batch_first;
    r.batch_first_source = "--batch-first";
    if (recorded && *recorded != *options.batch_first) {
      r.notes.push_back(std::string("the file records batch_first=") + (*recorded ? "True" : "False") +
                        "; --batch-first overrides it");
    }
  } else if (recorded) {
    plan.batch_first = *recorded;
    r.batch_first_source = "recorded in the file";
  } else {
    plan.batch_first = false;
    r.batch_first_source = "PyTorch default (time-major); pass --batch-first if the model was batch_first=True";
  }

  PlanBuilder b(plan, source);
  uint32_t width = 0;
  bool time_axis = false, collapsed = false;
  std::set<std::string> used_modules;
  for (size_t i = 0; i < chain.size(); ++i) {
    const GraphElement& e = chain[i];
    const int li = static_cast<int>(plan.layers.size());
    LayerPlan l;
    const std::string where = "--graph element " + std::to_string(i + 1) + " '" + format_graph({e}) + "'";
    if (e.op == OpKind::Module) {
      const Module* m = modules.find(e.module);
      if (!m) {
        std::string names;
        for (const Module& mm : modules.modules) names += (names.empty() ? "" : ", ") + mm.path;
        throw Error(where + ": no such module in the checkpoint (modules: " +
                    (names.empty() ? "none" : names) + ")");
      }
      if (!used_modules.insert(m->path).second) {
        throw Error(where + ": module '" + m->path + "' appears twice in the chain");
      }
      const uint32_t in = m->type == ModuleType::Linear ? m->in_features : m->input_size;
      if (i == 0) {
        width = in;
        plan.input_size = in;
      } else if (in != width) {
        throw Error(where + ": " + m->describe() + " takes " + std::to_string(in) +
                    " features, but the chain before it gives " + std::to_string(width));
      }
      l.name = m->path.empty() ? kRootModuleName : m->path;
      l.input_size = in;
      l.output_size = m->output_size();
      if (m->type == ModuleType::Linear) {
        l.op = LayerOp::Linear;
        l.weight = b.copy(*m->params.at("weight"), m->path + ".weight", li, "weight");
        if (m->has_bias) l.bias = b.copy(*m->params.at("bias"), m->path + ".bias", li, "bias");
      } else {
        if (collapsed) throw Error(where + ": a recurrent layer after `last` has no time axis to run over");
        std::string nonlinearity = e.option;
        if (m->kind == CellKind::kRnn) {
          auto nl = checkpoint.attributes.find(attribute_key(m->path, "nonlinearity"));
          if (nonlinearity.empty() && nl != checkpoint.attributes.end()) nonlinearity = nl->second;
          if (nonlinearity.empty()) {
            nonlinearity = "tanh";
            r.notes.push_back("RNN '" + m->path + "': a state dict does not record the nonlinearity; "
                              "assuming tanh (write '" + m->path + "(relu)' in --graph for relu)");
          }
        } else if (!e.option.empty()) {
          throw Error(where + ": (" + e.option + ") applies to RNN modules only");
        }
        l.op = recurrent_op(*m, nonlinearity);
        l.hidden_size = m->hidden_size;
        l.proj_size = m->proj_size;
        l.num_layers = m->num_layers;
        l.bidirectional = m->bidirectional;
        add_recurrent(b, l, *m, li);
        time_axis = true;
      }
      width = l.output_size;
    } else {
      if (i == 0) throw Error(where + ": the chain must start with a module (its input size is the model's)");
      l.input_size = l.output_size = width;
      switch (e.op) {
        case OpKind::Last:
          if (!time_axis || collapsed) {
            throw Error(where + ": `last` needs a time axis, i.e. a recurrent module before it");
          }
          collapsed = true;
          l.op = LayerOp::Last;
          l.name = "last";
          break;
        case OpKind::ReLU: l.op = LayerOp::ReLU; l.name = "relu"; break;
        case OpKind::Tanh: l.op = LayerOp::Tanh; l.name = "tanh"; break;
        case OpKind::Sigmoid: l.op = LayerOp::Sigmoid; l.name = "sigmoid"; break;
        case OpKind::Softmax: l.op = LayerOp::Softmax; l.name = "softmax"; break;
        default: l.op = LayerOp::Identity; l.name = "identity"; break;
      }
    }
    plan.layers.push_back(std::move(l));
  }
  plan.output_size = width;
  plan.output_is_sequence = time_axis && !collapsed;
  r.graph = format_graph(chain);

  // Coverage: every tensor is used or listed as ignored with its reason.
  for (const TensorRef& t : checkpoint.tensors) {
    if (b.used(t.name)) continue;
    bool listed = false;
    for (const auto& [key, why] : modules.ignored) {
      if (key == t.name) {
        plan.mapping.push_back({t.name, -1, why});
        listed = true;
        break;
      }
    }
    if (!listed) plan.mapping.push_back({t.name, -1, "module not in the graph"});
  }
  for (const auto& [key, why] : checkpoint.ignored) plan.mapping.push_back({key, -1, why});
  return r;
}

}  // namespace ferry::conv
