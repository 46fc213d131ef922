#include "model_graph.h"

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "ferry/ferry_generated.h"

namespace ferry::cli {
namespace {

namespace fb = ::ferry::fb;

// Text from the file inside a DOT string: quotes and backslashes escaped,
// control characters shown as '?', at most 60 bytes.
std::string dot_text(const flatbuffers::String* s) {
  std::string out;
  if (!s) return out;
  for (uint32_t i = 0; i < s->size() && i < 60; ++i) {
    const char c = s->c_str()[i];
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
  }
  return out;
}

std::string with_commas(uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// The tensors a layer holds (its weights and their scales), each once: for
// its dtypes.
std::set<int32_t> layer_tensors(const fb::Model* m, const fb::Layer* l) {
  std::set<int32_t> t;
  const auto add = [&](int32_t i) {
    if (i < 0 || !m->tensors() || static_cast<uint32_t>(i) >= m->tensors()->size()) return;
    t.insert(i);
    const int32_t s = m->tensors()->Get(static_cast<uint32_t>(i))->scales();
    if (s >= 0 && static_cast<uint32_t>(s) < m->tensors()->size()) t.insert(s);
  };
  add(l->weight());
  add(l->bias());
  if (l->cells()) {
    for (const fb::RecurrentCell* c : *l->cells()) {
      add(c->w_ih());
      add(c->w_hh());
      add(c->bias());
      add(c->b_hn());
      add(c->w_hr());
    }
  }
  return t;
}

// The weight dtypes of a layer's matrices ("f32", "int8", "int8 + f32"), or
// empty for a layer without weights.
std::string layer_dtypes(const fb::Model* m, const std::set<int32_t>& tensors) {
  std::set<std::string> names;
  std::set<int32_t> scales;
  for (int32_t i : tensors) {
    const int32_t s = m->tensors()->Get(static_cast<uint32_t>(i))->scales();
    if (s >= 0) scales.insert(s);
  }
  for (int32_t i : tensors) {
    if (scales.count(i)) continue;  // a quantized weight's scales: part of its dtype
    switch (m->tensors()->Get(static_cast<uint32_t>(i))->dtype()) {
      case fb::DType::F32: names.insert("f32"); break;
      case fb::DType::F16: names.insert("f16"); break;
      case fb::DType::I8: names.insert("int8"); break;
      case fb::DType::I4: names.insert("int4"); break;
      default: names.insert("?"); break;
    }
  }
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : " + ") + n;
  return out;
}

std::string layer_detail(const fb::Layer* l) {
  char buf[160] = "";
  switch (l->kind()) {
    case fb::LayerKind::LSTM: case fb::LayerKind::GRU: case fb::LayerKind::RNN_TANH: case fb::LayerKind::RNN_RELU:
      std::snprintf(buf, sizeof buf, "\\nhidden %u x %u layer%s%s%s", l->hidden_size(), l->num_layers(),
                    l->num_layers() == 1 ? "" : "s", l->bidirectional() ? ", bidirectional" : "",
                    l->proj_size() ? (", proj " + std::to_string(l->proj_size())).c_str() : "");
      break;
    case fb::LayerKind::Conv1d:
      std::snprintf(buf, sizeof buf, "\\nkernel %u, stride %u, dilation %u, groups %u, pad %u/%u", l->kernel_size(),
                    l->stride(), l->dilation(), l->groups(), l->pad_left(), l->pad_right());
      break;
    case fb::LayerKind::Save: case fb::LayerKind::Add:
      std::snprintf(buf, sizeof buf, "\\nslot %u", l->slot());
      break;
    default: break;
  }
  return buf;
}

}  // namespace

uint64_t layer_weight_bytes(const fb::Model* m, const fb::Layer* l) {
  const auto* tensors = m->tensors();
  const auto tensor_bytes = [tensors](int32_t index) -> uint64_t {
    if (!tensors || index < 0 || static_cast<uint32_t>(index) >= tensors->size()) return 0;
    const fb::Tensor* t = tensors->Get(static_cast<uint32_t>(index));
    uint64_t bytes = t->size();
    if (t->scales() >= 0 && static_cast<uint32_t>(t->scales()) < tensors->size()) {
      bytes += tensors->Get(static_cast<uint32_t>(t->scales()))->size();
    }
    return bytes;
  };
  uint64_t bytes = tensor_bytes(l->weight()) + tensor_bytes(l->bias());
  for (uint32_t c = 0; l->cells() && c < l->cells()->size(); ++c) {
    const fb::RecurrentCell* cell = l->cells()->Get(c);
    bytes += tensor_bytes(cell->w_ih()) + tensor_bytes(cell->w_hh()) + tensor_bytes(cell->bias()) +
             tensor_bytes(cell->b_hn()) + tensor_bytes(cell->w_hr());
  }
  return bytes;
}

std::string model_dot(const fb::Model* m, const std::string& title) {
  const char* layout = m->channels_first() ? "[B,F,T]" : m->batch_first() ? "[B,T,F]" : "[T,B,F]";
  std::string out = "digraph ferry {\n";
  std::string t;
  for (char c : title) {
    if (c == '"' || c == '\\') t += '\\';
    t += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  }
  out += "  graph [rankdir=TB, labelloc=t, fontname=\"Helvetica\", label=\"" + t + "\\ninput " +
         std::to_string(m->input_size()) + (m->input_is_tokens() ? " token id" : " features") + " " +
         (m->input_is_tokens() ? (m->batch_first() ? "[B,T]" : "[T,B]") : layout) + ", output " +
         std::to_string(m->output_size()) + (m->output_is_sequence() ? " per step" : " [B,F]") + "\"];\n";
  out += "  node [shape=box, style=rounded, fontname=\"Helvetica\", fontsize=10];\n";
  out += "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  const uint32_t n = m->layers() ? m->layers()->size() : 0;
  std::vector<int64_t> saved_at;  // slot -> the Save layer that fills it
  for (uint32_t i = 0; i < n; ++i) {
    const fb::Layer* l = m->layers()->Get(i);
    const uint64_t bytes = layer_weight_bytes(m, l);
    const std::string dtypes = layer_dtypes(m, layer_tensors(m, l));
    const std::string name = dot_text(l->name());
    out += "  L" + std::to_string(i) + " [label=\"" + std::to_string(i) + (name.empty() ? "" : ": " + name) + "\\n" +
           fb::EnumNameLayerKind(l->kind()) + " " + std::to_string(l->input_size()) + " -> " +
           std::to_string(l->output_size()) + layer_detail(l) +
           (dtypes.empty() ? std::string() : "\\n" + dtypes + ", " + with_commas(bytes) + " bytes") + "\"" +
           (bytes ? ", penwidth=2" : "") + "];\n";
    if (l->kind() == fb::LayerKind::Save && l->slot() < 1024) {
      if (saved_at.size() <= l->slot()) saved_at.resize(l->slot() + 1, -1);
      saved_at[l->slot()] = i;
    }
    if (l->kind() == fb::LayerKind::Add && l->slot() < saved_at.size() && saved_at[l->slot()] >= 0) {
      out += "  L" + std::to_string(saved_at[l->slot()]) + " -> L" + std::to_string(i) +
             " [style=dashed, label=\"skip\"];\n";
    }
  }
  for (uint32_t i = 0; i + 1 < n; ++i) {
    out += "  L" + std::to_string(i) + " -> L" + std::to_string(i + 1) + " [label=\"" +
           std::to_string(m->layers()->Get(i)->output_size()) + "\"];\n";
  }
  out += "}\n";
  return out;
}

}  // namespace ferry::cli
