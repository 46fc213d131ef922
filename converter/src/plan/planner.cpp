#include "plan/planner.h"

#include <cerrno>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <memory>
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
    if (t.sources.empty()) map(t.name, layer, role);
    // A folded weight (mapping/reparametrize.h): every part it was made from.
    for (const std::string& source : t.sources) map(source, layer, role + " = " + t.derivation);
    return add(std::move(tp));
  }

  // A tensor computed from others (folded biases, BatchNorm scale and shift).
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

  ModelPlan& plan() { return plan_; }

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

namespace {

// ------------------------------------------------------ hyper-parameters --
// A module option: from --graph (`conv(stride=2)`), else what the file
// records (whole modules, TorchScript), else nothing.
struct Options {
  const GraphElement& element;
  const Checkpoint& checkpoint;
  const std::string& path;   // the module's path ("" for the root)
  std::string where;         // "--graph element 2 'conv(stride=2)'"

  // The value and where it came from ("--graph" / "the file").
  std::optional<std::pair<std::string, std::string>> get(const std::string& graph_key,
                                                         const std::string& attribute) const {
    auto a = element.args.find(graph_key);
    if (a != element.args.end()) return std::make_pair(a->second, std::string("--graph"));
    if (attribute.empty()) return std::nullopt;
    auto r = checkpoint.attributes.find(attribute_key(path, attribute));
    if (r != checkpoint.attributes.end()) return std::make_pair(r->second, std::string("the file"));
    return std::nullopt;
  }

  // "3", "(3,)", "[3]" -> 3.
  std::optional<int64_t> integer(const std::string& graph_key, const std::string& attribute) const {
    auto v = get(graph_key, attribute);
    if (!v) return std::nullopt;
    std::string t;
    for (char c : v->first)
      if (c != '(' && c != ')' && c != '[' && c != ']' && c != ' ') t += c;
    if (!t.empty() && t.back() == ',') t.pop_back();
    char* end = nullptr;
    errno = 0;
    const long long n = t.empty() ? 0 : std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || *end != '\0' || errno != 0) {
      throw Error(where + ": " + graph_key + "=" + v->first + " (from " + v->second + ") is not an integer");
    }
    return n;
  }

  uint32_t positive(const std::string& graph_key, const std::string& attribute, uint32_t fallback) const {
    const auto n = integer(graph_key, attribute);
    if (!n) return fallback;
    if (*n < 1 || *n > (1 << 20)) {
      throw Error(where + ": " + graph_key + " " + std::to_string(*n) + " must be a positive integer (at most 2^20)");
    }
    return static_cast<uint32_t>(*n);
  }

  std::optional<double> real(const std::string& graph_key, const std::string& attribute) const {
    auto v = get(graph_key, attribute);
    if (!v) return std::nullopt;
    char* end = nullptr;
    const double x = std::strtod(v->first.c_str(), &end);
    if (v->first.empty() || *end != '\0' || !std::isfinite(x)) {
      throw Error(where + ": " + graph_key + "=" + v->first + " (from " + v->second + ") is not a finite number");
    }
    return x;
  }

  // Refuses --graph keys the element does not take.
  void only(std::initializer_list<const char*> keys, const char* what) const {
    for (const auto& [k, v] : element.args) {
      bool ok = false;
      for (const char* key : keys) ok = ok || k == key;
      if (!ok) {
        std::string list;
        for (const char* key : keys) list += (list.empty() ? "" : ", ") + std::string(key) + "=";
        throw Error(where + ": " + what + " takes " + (list.empty() ? std::string("no options") : list) +
                    " (not " + k + "=)");
      }
    }
  }
};

// The input width a module takes, where its weights say it alone.
std::optional<uint32_t> module_input(const Module& m) {
  switch (m.type) {
    case ModuleType::Recurrent: return m.input_size;
    case ModuleType::Linear: return m.in_features;
    case ModuleType::BatchNorm: case ModuleType::LayerNorm: return m.features;
    case ModuleType::Conv1d: return std::nullopt;  // in/groups * groups
    case ModuleType::PReLU: return m.features > 1 ? std::optional<uint32_t>(m.features) : std::nullopt;
  }
  return std::nullopt;
}

// ------------------------------------------------------------ the chain --
class ChainPlanner {
 public:
  // `recorded`: the chain was read from the file (TorchScript code, a .pt2
  // graph, an nn.Sequential), which writes every option it records: what it
  // leaves out is PyTorch's default, not an assumption.
  ChainPlanner(const Checkpoint& checkpoint, const ModuleSet& modules, PlanBuilder& b, PlanResult& r, bool recorded)
      : checkpoint_(checkpoint), modules_(modules), b_(b), r_(r), plan_(r.plan), recorded_(recorded) {}

  void run(const std::vector<GraphElement>& chain, bool time_axis) {
    chain_ = &chain;
    time_axis_ = time_axis;
    for (i_ = 0; i_ < chain.size(); ++i_) {
      const GraphElement& e = chain[i_];
      where_ = "--graph element " + std::to_string(i_ + 1) + " '" + format_graph({e}) + "'";
      if (e.op == OpKind::Module) {
        const Module* m = modules_.find(e.module);
        if (!m) {
          if (auto act = recorded_activation(checkpoint_, e.module == kRootModuleName ? "" : e.module)) {
            for (const auto& kv : e.args) act->args[kv.first] = kv.second;  // --graph overrides the file
            builtin_from_file_ = true;
            builtin(*act, e.module);
            builtin_from_file_ = false;
            continue;
          }
          std::string names;
          for (const Module& mm : modules_.modules) names += (names.empty() ? "" : ", ") + (mm.path.empty() ? std::string(kRootModuleName) : mm.path);
          throw Error(where_ + ": no such module in the checkpoint (modules: " + (names.empty() ? "none" : names) +
                      "; built-in ops: last, relu, tanh, sigmoid, softmax, logsoftmax, identity, dropout, gelu, "
                      "silu, elu, leaky_relu, hardtanh, relu6, mean, max)");
        }
        if (!used_modules_.insert(m->path).second) {
          throw Error(where_ + ": module '" + m->path + "' appears twice in the chain");
        }
        module(e, *m);
      } else if (e.op == OpKind::SkipBegin || e.op == OpKind::SkipEnd) {
        skip(e);
      } else {
        builtin(e, builtin_name(e.op));
      }
    }
    if (!skips_.empty()) throw Error("--graph: a residual skip is not closed");
  }

  uint32_t width() const { return width_; }
  bool time_axis() const { return time_axis_; }

  // Records that `parameter` of the layer `layer` was assumed to be `value`
  // (options.get() found it neither in --graph nor in the file).
  void assume(const std::string& layer, const std::string& parameter, const std::string& value,
              const std::string& override) {
    if (recorded_) return;
    r_.plan.assumptions.push_back({layer, parameter, value, override});
  }
  bool collapsed() const { return collapsed_; }

 private:
  LayerPlan& push(LayerOp op, const std::string& name, uint32_t in, uint32_t out) {
    plan_.layers.emplace_back();
    LayerPlan& l = plan_.layers.back();
    l.op = op;
    l.name = name;
    l.input_size = in;
    l.output_size = out;
    return l;
  }
  int li() const { return static_cast<int>(plan_.layers.size()); }

  // The first module fixes the model's input width; later ones must take the chain's.
  void take(uint32_t in, const Module& m) {
    if (!started_) {
      started_ = true;
      width_ = in;
      plan_.input_size = in;
      for (uint32_t s : pending_saves_) plan_.layers[s].input_size = plan_.layers[s].output_size = in;
      for (auto& sk : skips_) sk.width = in;
      pending_saves_.clear();
    } else if (in != width_) {
      throw Error(where_ + ": " + m.describe() + " takes " + std::to_string(in) + " features, but the chain before it gives " +
                  std::to_string(width_));
    }
  }

  void need_start(const char* what) const {
    if (!started_) throw Error(where_ + ": the chain must start with a module (its input size is the model's), not " + what);
  }

  bool is_embedding(const Module& m) const {
    if (m.type != ModuleType::Linear || m.has_bias) return false;
    if (!m.class_name.empty()) return m.class_name == "Embedding";
    if (started_ || !plan_.layers.empty()) return false;  // an Embedding is the model's first layer
    // [num_embeddings, dim] vs Linear's [out, in]: the next module takes dim (shape[1]), not out (shape[0]).
    for (size_t j = i_ + 1; j < chain_->size(); ++j) {
      const GraphElement& next = (*chain_)[j];
      if (next.op != OpKind::Module) continue;
      const Module* n = modules_.find(next.module);
      if (!n) return false;
      const auto in = module_input(*n);
      return in && *in == m.in_features && m.in_features != m.out_features;
    }
    return false;
  }

  void module(const GraphElement& e, const Module& m) {
    const Options opt{e, checkpoint_, m.path, where_};
    const std::string name = m.path.empty() ? kRootModuleName : m.path;
    if (m.type != ModuleType::Recurrent && !e.option.empty()) {
      throw Error(where_ + ": (" + e.option + ") applies to RNN modules only");
    }
    switch (m.type) {
      case ModuleType::Recurrent: return recurrent(e, m, name);
      case ModuleType::Linear:
        opt.only({}, "a Linear module");
        if (is_embedding(m)) return embedding(m, name);
        return linear(m, name);
      case ModuleType::Conv1d: return conv(opt, m, name);
      case ModuleType::BatchNorm: return batchnorm(opt, m, name);
      case ModuleType::LayerNorm: case ModuleType::PReLU: return per_feature(opt, m, name);
    }
  }

  void recurrent(const GraphElement& e, const Module& m, const std::string& name) {
    if (!e.args.empty()) throw Error(where_ + ": a recurrent module takes only (relu) or (tanh), for an RNN");
    take(m.input_size, m);
    if (collapsed_) throw Error(where_ + ": a recurrent layer after `last` has no time axis to run over");
    std::string nonlinearity = e.option;
    if (m.kind == CellKind::kRnn) {
      auto nl = checkpoint_.attributes.find(attribute_key(m.path, "nonlinearity"));
      if (nonlinearity.empty() && nl != checkpoint_.attributes.end()) nonlinearity = nl->second;
      if (nonlinearity.empty()) {
        nonlinearity = "tanh";
        assume("RNN '" + name + "'", "nonlinearity", "tanh", "--graph '" + name + "(relu)'");
      }
      if (nonlinearity != "relu" && nonlinearity != "tanh") {
        throw Error(where_ + ": the option must be (relu) or (tanh), for an RNN");
      }
    } else if (!e.option.empty()) {
      throw Error(where_ + ": (" + e.option + ") applies to RNN modules only");
    }
    const int index = li();
    LayerPlan& l = push(recurrent_op(m, nonlinearity), name, m.input_size, m.output_size());
    l.hidden_size = m.hidden_size;
    l.proj_size = m.proj_size;
    l.num_layers = m.num_layers;
    l.bidirectional = m.bidirectional;
    add_recurrent(b_, l, m, index);
    time_axis_ = true;
    width_ = m.output_size();
  }

  void linear(const Module& m, const std::string& name) {
    take(m.in_features, m);
    const int index = li();
    const int w = b_.copy(*m.params.at("weight"), m.path + ".weight", index, "weight");
    const int bias = m.has_bias ? b_.copy(*m.params.at("bias"), m.path + ".bias", index, "bias") : -1;
    LayerPlan& l = push(LayerOp::Linear, name, m.in_features, m.out_features);
    l.weight = w;
    l.bias = bias;
    width_ = m.out_features;
  }

  void embedding(const Module& m, const std::string& name) {
    // Token ids in: the model's input is one id per step.
    started_ = true;
    plan_.input_size = 1;
    plan_.input_is_tokens = true;
    const int index = li();
    const int w = b_.copy(*m.params.at("weight"), m.path + ".weight", index, "weight (embedding table)");
    LayerPlan& l = push(LayerOp::Embedding, name, m.out_features, m.in_features);
    l.weight = w;
    width_ = m.in_features;
    time_axis_ = true;
  }

  void conv(const Options& opt, const Module& m, const std::string& name) {
    opt.only({"stride", "padding", "dilation", "groups", "padding_mode"}, "a Conv1d module");
    if (collapsed_) throw Error(where_ + ": a Conv1d after `last` / pooling has no time axis to run over");
    uint32_t groups = opt.positive("groups", "groups", 0);
    if (groups == 0) {
      if (started_) {
        if (width_ % m.in_per_group != 0) {
          throw Error(where_ + ": " + m.describe() + " takes a multiple of " + std::to_string(m.in_per_group) +
                      " channels, but the chain before it gives " + std::to_string(width_));
        }
        groups = width_ / m.in_per_group;
      } else {
        groups = 1;
        assume("Conv1d '" + name + "'", "groups", "1 (" + std::to_string(m.in_per_group) + " input channels)",
               "--graph '" + name + "(groups=N)'");
      }
    }
    if (m.out_features % groups != 0) {
      throw Error(where_ + ": groups " + std::to_string(groups) + " does not divide the " +
                  std::to_string(m.out_features) + " output channels of " + m.describe());
    }
    const uint64_t in64 = uint64_t{m.in_per_group} * groups;
    if (in64 > (1u << 20)) throw Error(where_ + ": groups " + std::to_string(groups) + " too large");
    const uint32_t in = static_cast<uint32_t>(in64);
    take(in, m);
    if (auto k = opt.integer("", "kernel_size"); k && *k != m.kernel_size) {
      throw Error(where_ + ": the file records kernel_size " + std::to_string(*k) + ", but '" + m.path +
                  ".weight' has " + std::to_string(m.kernel_size));
    }
    const std::string layer = "Conv1d '" + name + "'";
    const uint32_t stride = opt.positive("stride", "stride", 1);
    if (!opt.get("stride", "stride")) assume(layer, "stride", "1", "--graph '" + name + "(stride=N)'");
    const uint32_t dilation = opt.positive("dilation", "dilation", 1);
    if (!opt.get("dilation", "dilation") && m.kernel_size > 1) {
      assume(layer, "dilation", "1", "--graph '" + name + "(dilation=N)'");
    }
    const uint64_t span = uint64_t{dilation} * (m.kernel_size - 1);
    if (span > (1u << 20)) throw Error(where_ + ": dilation x (kernel_size - 1) = " + std::to_string(span) + " is too long");
    uint32_t left = 0, right = 0;
    const auto padding = opt.get("padding", "padding");
    if (!padding) assume(layer, "padding", "0", "--graph '" + name + "(padding=N|same|causal)'");
    if (auto p = padding) {
      const std::string& v = p->first;
      if (v == "same") {
        if (stride != 1) throw Error(where_ + ": padding=same needs stride 1 (PyTorch refuses it too)");
        left = static_cast<uint32_t>(span / 2);
        right = static_cast<uint32_t>(span - left);
      } else if (v == "causal") {
        left = static_cast<uint32_t>(span);
      } else if (v != "valid") {
        const auto n = opt.integer("padding", "padding");
        if (*n < 0 || *n > (1 << 20)) {
          throw Error(where_ + ": padding " + std::to_string(*n) + " must be 0..2^20, same, valid or causal");
        }
        left = right = static_cast<uint32_t>(*n);
      }
    }
    PaddingMode mode = PaddingMode::Zeros;
    if (!opt.get("padding_mode", "padding_mode") && left + right > 0) {
      assume(layer, "padding_mode", "zeros", "--graph '" + name + "(padding_mode=reflect|replicate)'");
    }
    if (auto pm = opt.get("padding_mode", "padding_mode")) {
      if (pm->first == "zeros") mode = PaddingMode::Zeros;
      else if (pm->first == "reflect") mode = PaddingMode::Reflect;
      else if (pm->first == "replicate") mode = PaddingMode::Replicate;
      else throw Error(where_ + ": padding_mode '" + pm->first + "' (from " + pm->second +
                       ") is not one of zeros, reflect, replicate (circular is not supported)");
    }
    const int index = li();
    const int w = b_.copy(*m.params.at("weight"), m.path + ".weight", index, "weight");
    const int bias = m.has_bias ? b_.copy(*m.params.at("bias"), m.path + ".bias", index, "bias") : -1;
    LayerPlan& l = push(LayerOp::Conv1d, name, in, m.out_features);
    l.weight = w;
    l.bias = bias;
    l.kernel_size = m.kernel_size;
    l.stride = stride;
    l.dilation = dilation;
    l.groups = groups;
    l.pad_left = left;
    l.pad_right = right;
    l.padding_mode = mode;
    if (stride != 1 || uint64_t{left} + right != span) {
      for (auto& sk : skips_) sk.steps_changed = true;
    }
    width_ = m.out_features;
    time_axis_ = true;
  }

  // BatchNorm1d in eval mode: y = (x - mean) / sqrt(var + eps) * gamma + beta
  // = x * scale + shift. Folded into a Linear or Conv1d right before it
  // (W' = scale[o] W[o], b' = scale b + shift), else a layer of its own.
  void batchnorm(const Options& opt, const Module& m, const std::string& name) {
    opt.only({"eps"}, "a BatchNorm module");
    if (auto t = checkpoint_.attributes.find(attribute_key(m.path, "track_running_stats"));
        t != checkpoint_.attributes.end() && t->second == "false") {
      throw Error(where_ + ": BatchNorm1d '" + m.path + "' has track_running_stats=False: it normalises with the "
                  "statistics of each batch, which a streaming runtime does not have");
    }
    take(m.features, m);
    const double eps = opt.real("eps", "eps").value_or(1e-5);
    if (!(eps >= 0)) throw Error(where_ + ": eps must be >= 0");
    if (!opt.get("eps", "eps")) assume("BatchNorm1d '" + name + "'", "eps", "1e-05", "--graph '" + name + "(eps=X)'");
    const TensorRef* mean = m.param("running_mean");
    const TensorRef* var = m.param("running_var");
    const TensorRef* gamma = m.param("weight");
    const TensorRef* beta = m.param("bias");
    struct Folded {
      std::vector<double> scale, shift;
    };
    auto folded = std::make_shared<std::optional<Folded>>();
    auto get = [folded, mean, var, gamma, beta, eps]() -> const Folded& {
      if (!*folded) {
        const std::vector<float> mu = to_float32(*mean), v = to_float32(*var);
        const std::vector<float> g = gamma ? to_float32(*gamma) : std::vector<float>(mu.size(), 1.0f);
        const std::vector<float> bb = beta ? to_float32(*beta) : std::vector<float>(mu.size(), 0.0f);
        Folded f;
        for (size_t i = 0; i < mu.size(); ++i) {
          const double s = double{g[i]} / std::sqrt(double{v[i]} + eps);
          f.scale.push_back(s);
          f.shift.push_back(double{bb[i]} - double{mu[i]} * s);
        }
        *folded = std::move(f);
      }
      return **folded;
    };
    const uint32_t n = m.features;
    LayerPlan* prev = plan_.layers.empty() ? nullptr : &plan_.layers.back();
    const bool fold = prev && (prev->op == LayerOp::Linear || prev->op == LayerOp::Conv1d) && prev->output_size == n;
    if (fold) {
      const int target = li() - 1;
      TensorPlan& w = plan_.tensors[static_cast<size_t>(prev->weight)];
      const uint64_t cols = w.numel() / n;
      auto old = std::move(w.fill);
      w.fill = [old, get, cols](float* dst, uint64_t begin, uint64_t count) {
        old(dst, begin, count);
        const Folded& f = get();
        for (uint64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(dst[i] * f.scale[(begin + i) / cols]);
      };
      w.source_offset = -1;
      w.name += " (BatchNorm '" + m.path + "' folded)";
      if (prev->bias >= 0) {
        TensorPlan& bt = plan_.tensors[static_cast<size_t>(prev->bias)];
        auto old_b = std::move(bt.fill);
        bt.fill = [old_b, get](float* dst, uint64_t begin, uint64_t count) {
          old_b(dst, begin, count);
          const Folded& f = get();
          for (uint64_t i = 0; i < count; ++i)
            dst[i] = static_cast<float>(dst[i] * f.scale[begin + i] + f.shift[begin + i]);
        };
        bt.source_offset = -1;
        bt.name += " (BatchNorm '" + m.path + "' folded)";
      } else {
        prev->bias = b_.computed(prev->name + ".bias (BatchNorm '" + m.path + "' shift)", n, [get] {
          std::vector<float> v;
          for (double x : get().shift) v.push_back(static_cast<float>(x));
          return v;
        });
      }
      for (const TensorRef* t : {mean, var, gamma, beta})
        if (t) b_.map(t->name, target, "folded into '" + prev->name + "' (BatchNorm eval: scale and shift)");
      r_.notes.push_back("BatchNorm1d '" + m.path + "' folded into '" + prev->name + "' (eps " +
                         std::to_string(eps) + ")");
      return;
    }
    const int index = li();
    const int scale = b_.computed(m.path + ".scale", n, [get] {
      std::vector<float> v;
      for (double x : get().scale) v.push_back(static_cast<float>(x));
      return v;
    });
    const int shift = b_.computed(m.path + ".shift", n, [get] {
      std::vector<float> v;
      for (double x : get().shift) v.push_back(static_cast<float>(x));
      return v;
    });
    for (const TensorRef* t : {mean, var, gamma, beta})
      if (t) b_.map(t->name, index, "BatchNorm scale and shift");
    LayerPlan& l = push(LayerOp::BatchNorm, name, n, n);
    l.weight = scale;
    l.bias = shift;
  }

  void per_feature(const Options& opt, const Module& m, const std::string& name) {
    const bool prelu = m.type == ModuleType::PReLU;
    opt.only(prelu ? std::initializer_list<const char*>{} : std::initializer_list<const char*>{"eps"},
             prelu ? "a PReLU module" : "a LayerNorm module");
    if (!prelu || m.features > 1) {
      take(m.features, m);
    } else {
      need_start("a PReLU with one weight");
    }
    const int index = li();
    const int w = m.has_weight ? b_.copy(*m.param("weight"), m.path + ".weight", index, "weight") : -1;
    const int bias = m.has_bias ? b_.copy(*m.param("bias"), m.path + ".bias", index, "bias") : -1;
    LayerPlan& l = push(prelu ? LayerOp::PReLU : LayerOp::LayerNorm, name, width_, width_);
    l.weight = w;
    l.bias = bias;
    if (!prelu) {
      const double eps = opt.real("eps", "eps").value_or(1e-5);
      if (!(eps >= 0)) throw Error(where_ + ": eps must be >= 0");
      if (!opt.get("eps", "eps")) assume("LayerNorm '" + name + "'", "eps", "1e-05", "--graph '" + name + "(eps=X)'");
      l.eps = static_cast<float>(eps);
    }
  }

  // A built-in's option; its default is an assumption where the user's
  // --graph names the op without it (`leaky_relu` for a LeakyReLU(0.2)
  // would run with 0.01), not where the file records the op.
  float number(const GraphElement& e, const char* key, float fallback) {
    auto it = e.args.find(key);
    if (it == e.args.end()) {
      if (!builtin_from_file_) {
        char text[32];
        std::snprintf(text, sizeof text, "%g", static_cast<double>(fallback));
        const std::string op = builtin_name(e.op);
        assume(op + " (--graph element " + std::to_string(i_ + 1) + ")", key, text,
               "--graph '" + op + "(" + key + "=X)'");
      }
      return fallback;
    }
    char* end = nullptr;
    const double x = std::strtod(it->second.c_str(), &end);
    if (it->second.empty() || *end != '\0' || !std::isfinite(x)) {
      throw Error(where_ + ": " + key + "=" + it->second + " is not a finite number");
    }
    return static_cast<float>(x);
  }

  void builtin(const GraphElement& e, const std::string& name) {
    need_start(builtin_name(e.op));
    const uint32_t w = width_;
    switch (e.op) {
      case OpKind::Last: case OpKind::Mean: case OpKind::Max: {
        if (!time_axis_ || collapsed_) {
          throw Error(where_ + ": `" + builtin_name(e.op) + "` needs a time axis, i.e. a recurrent module (or a "
                      "Conv1d, an Embedding, --layout) before it and no `last` / pooling");
        }
        collapsed_ = true;
        const LayerOp op = e.op == OpKind::Last ? LayerOp::Last : e.op == OpKind::Mean ? LayerOp::MeanPool : LayerOp::MaxPool;
        push(op, name, w, w);
        return;
      }
      case OpKind::Dropout: return;  // eval mode: nothing to do
      case OpKind::ReLU: push(LayerOp::ReLU, name, w, w); return;
      case OpKind::Tanh: push(LayerOp::Tanh, name, w, w); return;
      case OpKind::Sigmoid: push(LayerOp::Sigmoid, name, w, w); return;
      case OpKind::Softmax: push(LayerOp::Softmax, name, w, w); return;
      case OpKind::LogSoftmax: push(LayerOp::LogSoftmax, name, w, w); return;
      case OpKind::Identity: push(LayerOp::Identity, name, w, w); return;
      case OpKind::SiLU: push(LayerOp::SiLU, name, w, w); return;
      case OpKind::GELU: push(LayerOp::GELU, name, w, w).approximate_tanh = e.option == "tanh"; return;
      case OpKind::ELU: push(LayerOp::ELU, name, w, w).alpha = number(e, "alpha", 1.0f); return;
      case OpKind::LeakyReLU: push(LayerOp::LeakyReLU, name, w, w).alpha = number(e, "slope", 0.01f); return;
      case OpKind::Hardtanh: case OpKind::ReLU6: {
        const bool six = e.op == OpKind::ReLU6;
        const float lo = six ? 0.0f : number(e, "min", -1.0f), hi = six ? 6.0f : number(e, "max", 1.0f);
        if (!(lo <= hi)) throw Error(where_ + ": hardtanh needs min <= max");
        LayerPlan& l = push(LayerOp::Hardtanh, name, w, w);
        l.alpha = lo;
        l.beta = hi;
        return;
      }
      default: throw Error("internal: " + where_ + " is not a built-in op");
    }
  }

  // `(chain) + input`: Save before, Add after, the same slot.
  struct Skip {
    unsigned slot;
    uint32_t width;
    bool collapsed;
    bool steps_changed;
  };
  void skip(const GraphElement& e) {
    if (e.op == OpKind::SkipBegin) {
      skips_.push_back({e.slot, width_, collapsed_, false});
      if (!started_) pending_saves_.push_back(static_cast<uint32_t>(plan_.layers.size()));
      push(LayerOp::Save, "save", width_, width_).slot = e.slot;
      return;
    }
    const Skip s = skips_.back();
    skips_.pop_back();
    if (!started_) throw Error(where_ + ": a residual skip around no module");
    if (s.width != width_ || s.collapsed != collapsed_) {
      throw Error(where_ + ": the residual skip adds its input (" + std::to_string(s.width) +
                  (s.collapsed ? " features" : " features per step") + ") to the sub-chain's output (" +
                  std::to_string(width_) + (collapsed_ ? " features" : " features per step") + "): the shapes differ");
    }
    if (s.steps_changed) {
      throw Error(where_ + ": the residual skip's sub-chain changes the number of time steps (a strided or "
                  "unpadded Conv1d): its output cannot be added to its input");
    }
    for (auto& outer : skips_) outer.steps_changed = outer.steps_changed || s.steps_changed;
    push(LayerOp::Add, "add", width_, width_).slot = e.slot;
  }

  const Checkpoint& checkpoint_;
  const ModuleSet& modules_;
  PlanBuilder& b_;
  PlanResult& r_;
  ModelPlan& plan_;
  const std::vector<GraphElement>* chain_ = nullptr;
  size_t i_ = 0;
  std::string where_;
  uint32_t width_ = 0;
  bool started_ = false, time_axis_ = false, collapsed_ = false;
  const bool recorded_;
  bool builtin_from_file_ = false;  // builtin() of a module the file records (nn.LeakyReLU(0.2))
  std::set<std::string> used_modules_;
  std::vector<Skip> skips_;
  std::vector<uint32_t> pending_saves_;
};

}  // namespace

std::vector<std::string> assumption_lines(const std::vector<Assumption>& assumptions) {
  // "--graph 'conv(stride=N)'" and "--graph 'conv(padding=N)'" of one
  // element merge into "--graph 'conv(stride=N, padding=N)'".
  static const std::string kGraph = "--graph '";
  const auto element_option = [](const std::string& o, std::string* element, std::string* args) {
    if (o.rfind(kGraph, 0) != 0 || o.size() < kGraph.size() + 3 || o.compare(o.size() - 2, 2, ")'") != 0) return false;
    const size_t open = o.find('(', kGraph.size());
    if (open == std::string::npos) return false;
    *element = o.substr(kGraph.size(), open - kGraph.size());
    *args = o.substr(open + 1, o.size() - 2 - open - 1);
    return true;
  };
  std::vector<std::string> lines;
  for (size_t i = 0; i < assumptions.size();) {
    size_t j = i;
    std::string values, graph_element, graph_args, others;
    for (; j < assumptions.size() && assumptions[j].layer == assumptions[i].layer; ++j) {
      const Assumption& a = assumptions[j];
      values += (j > i ? ", " : "") + a.parameter + " " + a.value;
      std::string element, args;
      if (element_option(a.override, &element, &args) && (graph_element.empty() || element == graph_element)) {
        graph_element = element;
        graph_args += (graph_args.empty() ? "" : ", ") + args;
      } else if (others.find(a.override) == std::string::npos) {
        others += (others.empty() ? "" : "; ") + a.override;
      }
    }
    std::string how = graph_element.empty() ? "" : kGraph + graph_element + "(" + graph_args + ")'";
    if (!others.empty()) how += (how.empty() ? "" : "; ") + others;
    lines.push_back(assumptions[i].layer + ": assumed " + values + " (the file does not record " +
                    (j - i > 1 ? "them" : "it") + "); to change: " + how);
    i = j;
  }
  return lines;
}

PlanResult plan_conversion(const Checkpoint& checkpoint, const ModuleSet& modules, const PlanOptions& options,
                           const MappedFile* source) {
  PlanResult r;
  ModelPlan& plan = r.plan;
  // The chain read from the file (TorchScript code, a .pt2 graph, an
  // nn.Sequential) records its options: nothing in it is assumed.
  const bool chain_from_file = !options.graph && options.inferred_graph.has_value();
  std::vector<GraphElement> chain;
  if (options.graph) {
    chain = parse_graph(*options.graph);
  } else if (options.inferred_graph) {
    chain = parse_graph(*options.inferred_graph);
    r.graph_inferred = true;
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
  std::optional<Layout> layout = options.layout;
  if (!layout && !options.batch_first && options.recorded_layout) layout = options.recorded_layout;
  if (layout) {
    plan.batch_first = *layout == Layout::kBatchFirst;
    plan.channels_first = *layout == Layout::kChannelsFirst;
    r.batch_first_source = options.layout ? "--layout" : options.recorded_layout_source;
    if (options.layout && recorded && *recorded != plan.batch_first && !plan.channels_first) {
      r.notes.push_back(std::string("the file records batch_first=") + (*recorded ? "True" : "False") +
                        "; --layout overrides it");
    }
  } else if (options.batch_first) {
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
  ChainPlanner chain_planner(checkpoint, modules, b, r, chain_from_file);
  chain_planner.run(chain, layout.has_value());
  plan.output_size = chain_planner.width();
  plan.output_is_sequence = chain_planner.time_axis() && !chain_planner.collapsed();
  bool implied = plan.channels_first || plan.input_is_tokens;
  for (const LayerPlan& l : plan.layers) {
    implied = implied || l.op == LayerOp::LSTM || l.op == LayerOp::GRU || l.op == LayerOp::RNN_TANH ||
              l.op == LayerOp::RNN_RELU || l.op == LayerOp::Conv1d;
  }
  // Model.time_axis is stored only where no layer implies it (a per-step chain of Linears).
  plan.time_axis = chain_planner.time_axis() && !implied;
  bool needs_time_axis = implied;
  for (const LayerPlan& l : plan.layers)
    needs_time_axis = needs_time_axis || l.op == LayerOp::Last || l.op == LayerOp::MeanPool || l.op == LayerOp::MaxPool;
  if (!needs_time_axis && !options.layout && !options.batch_first && !recorded) {
    r.batch_first_source = "no layer depends on it: [B, F] input, or a sequence either way";
  } else if (!layout && !options.batch_first && !recorded) {
    // Where a layer depends on it, nothing said where the time axis is.
    plan.assumptions.insert(plan.assumptions.begin(),
                         {"the input", "layout", plan.input_is_tokens ? "time-major [T,B]" : "time-major [T,B,F]",
                          "--batch-first, or --layout btf|tbf|bft"});
  }
  if (plan.channels_first && plan.input_is_tokens) {
    throw Error("--layout bft: a model taking token ids has no channel axis (use btf or tbf)");
  }
  // A sequence output's layout: the flag, else the file's record, else the input's.
  if (options.output_layout && !plan.output_is_sequence) {
    throw Error("--output-layout: the model's output has no time axis ([B, F]: the chain ends in last, mean or "
                "max, or has no time axis at all)");
  }
  const std::optional<Layout> out_layout = options.output_layout ? options.output_layout
                                           : plan.output_is_sequence ? options.recorded_output_layout
                                                                     : std::nullopt;
  if (out_layout && *out_layout != input_layout(plan)) {
    plan.output_layout = out_layout;
    r.output_layout_source = options.output_layout ? "--output-layout" : options.recorded_output_layout_source;
  }
  // A channels-first input whose chain returns a sequence: networks that
  // take [B,F,T] for their convolutions often return their RNN's [B,T,F].
  // Nothing said which: the output keeps the input's layout, and says so.
  if (!out_layout && plan.output_is_sequence && plan.channels_first && !chain_from_file) {
    plan.assumptions.push_back({"the output", "layout", "channels-first [B,F,T], as the input",
                                "--output-layout btf|tbf|bft"});
  }
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
