// Small models of every layer kind with seeded pseudo-random weights, built
// through the converter's own ModelPlan -> build_model path (so the bytes are
// exactly what `ferry convert` writes, layout and alignment included), and a
// session helper that runs them in a 64-byte-aligned arena.
//
// Used by the numerics, determinism and byte-sweep tests and by the
// input-value fuzz target: each needs models whose weights it knows, of every
// layer kind, without depending on the PyTorch fixtures.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ferry/ferry.h"
#include "writer/model_writer.h"

namespace ferry::test {

// One element of the chain. `size` is the hidden size (recurrent) or
// out_features (Linear); activations and `last` ignore it.
struct LayerSpec {
  conv::LayerOp op = conv::LayerOp::Identity;
  uint32_t size = 0;
  uint32_t num_layers = 1;
  bool bidirectional = false;
  uint32_t proj = 0;  // LSTM proj_size
  bool bias = true;
};

struct ModelSpec {
  uint32_t input_size = 4;
  bool batch_first = false;
  std::vector<LayerSpec> layers;
  uint64_t seed = 1;
  // Weights are uniform in [-scale, scale); 0 means PyTorch's default
  // 1/sqrt(hidden) (recurrent) or 1/sqrt(in_features) (Linear).
  float weight_scale = 0.0f;
};

// Deterministic uniform value in [-1, 1) for (seed, tensor, element)
// (splitmix64; the same on every host).
inline float uniform_pm1(uint64_t seed, uint64_t tensor, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + tensor * 0xd1b54a32d192ed03ull + i * 0x94d049bb133111ebull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<int64_t>(z >> 40) - (int64_t{1} << 23)) / static_cast<float>(1 << 23);
}

inline bool is_recurrent(conv::LayerOp op) {
  return op == conv::LayerOp::LSTM || op == conv::LayerOp::GRU || op == conv::LayerOp::RNN_TANH ||
         op == conv::LayerOp::RNN_RELU;
}

inline uint32_t gates_of(conv::LayerOp op) {
  return op == conv::LayerOp::LSTM ? 4 : op == conv::LayerOp::GRU ? 3 : 1;
}

// The quantized-backend tests' first three models (each dtype's kernels on
// an LSTM with projection, a GRU into `last` and softmax, a bias-free tanh
// RNN whose K passes one int4 group); each suite adds its own after them.
inline std::vector<ModelSpec> mixed_dtype_specs() {
  using conv::LayerOp;
  std::vector<ModelSpec> out;
  ModelSpec a;  // LSTM with projection, 2 layers, then a Linear per step
  a.input_size = 37;
  a.layers = {{LayerOp::LSTM, 48, 2, false, 20}, {LayerOp::Linear, 7}};
  a.seed = 11;
  out.push_back(a);
  ModelSpec b;  // GRU > last > Linear > softmax
  b.input_size = 9;
  b.batch_first = true;
  b.layers = {{LayerOp::GRU, 70}, {LayerOp::Last}, {LayerOp::Linear, 5}, {LayerOp::Softmax}};
  b.seed = 12;
  out.push_back(b);
  ModelSpec c;  // tanh RNN, K past one int4 group, no bias
  c.input_size = 65;
  c.layers = {{LayerOp::RNN_TANH, 33, 1, false, 0, false}, {LayerOp::Linear, 3}};
  c.seed = 13;
  out.push_back(c);
  return out;
}

// The plan for `spec`: tensors in the order the converter emits them
// (per cell: w_ih, w_hh, [w_hr], [bias, [b_hn]]; per Linear: weight, [bias]).
inline conv::ModelPlan make_plan(const ModelSpec& spec) {
  using conv::LayerOp;
  conv::ModelPlan plan;
  plan.batch_first = spec.batch_first;
  plan.input_size = spec.input_size;
  plan.source_file = "random";
  plan.source_sha256 = std::string(64, '0');
  plan.source_format = "random_models.h";
  plan.converter_version = "test";
  auto add = [&](const std::string& name, std::vector<uint32_t> shape, float scale) {
    conv::TensorPlan t;
    t.name = name;
    t.shape = std::move(shape);
    const uint64_t seed = spec.seed, index = plan.tensors.size();
    t.fill = [seed, index, scale](float* dst, uint64_t begin, uint64_t count) {
      for (uint64_t i = 0; i < count; ++i) dst[i] = scale * uniform_pm1(seed, index, begin + i);
    };
    plan.tensors.push_back(std::move(t));
    return static_cast<int>(plan.tensors.size() - 1);
  };
  uint32_t width = spec.input_size;
  bool time_axis = false, collapsed = false;
  for (size_t li = 0; li < spec.layers.size(); ++li) {
    const LayerSpec& s = spec.layers[li];
    conv::LayerPlan l;
    l.op = s.op;
    l.name = "layer" + std::to_string(li);
    l.input_size = width;
    l.output_size = width;
    if (is_recurrent(s.op)) {
      const uint32_t g = gates_of(s.op), h = s.size, h_out = s.proj ? s.proj : s.size;
      const uint32_t dirs = s.bidirectional ? 2 : 1;
      const float scale = spec.weight_scale > 0 ? spec.weight_scale : 1.0f / std::sqrt(float(h));
      l.hidden_size = h;
      l.proj_size = s.proj;
      l.num_layers = s.num_layers;
      l.bidirectional = s.bidirectional;
      l.output_size = dirs * h_out;
      for (uint32_t k = 0; k < s.num_layers; ++k) {
        for (uint32_t d = 0; d < dirs; ++d) {
          const std::string tag = l.name + ".l" + std::to_string(k) + (d ? "_reverse" : "");
          conv::CellPlan c;
          c.w_ih = add(tag + ".w_ih", {g * h, k == 0 ? width : dirs * h_out}, scale);
          c.w_hh = add(tag + ".w_hh", {g * h, h_out}, scale);
          if (s.proj) c.w_hr = add(tag + ".w_hr", {s.proj, h}, scale);
          if (s.bias) {
            c.bias = add(tag + ".bias", {g * h}, scale);
            if (s.op == LayerOp::GRU) c.b_hn = add(tag + ".b_hn", {h}, scale);
          }
          l.cells.push_back(c);
        }
      }
      time_axis = true;
    } else if (s.op == LayerOp::Linear) {
      const float scale = spec.weight_scale > 0 ? spec.weight_scale : 1.0f / std::sqrt(float(width));
      l.output_size = s.size;
      l.weight = add(l.name + ".weight", {s.size, width}, scale);
      if (s.bias) l.bias = add(l.name + ".bias", {s.size}, scale);
    } else if (s.op == LayerOp::Last) {
      collapsed = true;
    }
    width = l.output_size;
    plan.layers.push_back(std::move(l));
  }
  plan.output_size = width;
  plan.output_is_sequence = time_axis && !collapsed;
  // A chain of activations only has no weights; the writer then places the
  // empty weight blob unaligned and the runtime refuses the file. One unused
  // tensor keeps such chains (which the CLI never writes) loadable.
  if (plan.tensors.empty()) add("unused", {16}, 0.0f);
  return plan;
}

inline std::vector<uint8_t> build_model_bytes(const ModelSpec& spec) {
  return conv::build_model(make_plan(spec)).to_vector();
}

// The values of tensor `index` of a plan, in C order.
inline std::vector<float> tensor_values(const conv::ModelPlan& plan, int index) {
  const conv::TensorPlan& t = plan.tensors.at(static_cast<size_t>(index));
  std::vector<float> v(static_cast<size_t>(t.numel()));
  t.fill(v.data(), 0, v.size());
  return v;
}

// Memory aligned to FERRY_ALIGNMENT, freed on destruction. `offset` shifts
// the start by a multiple of FERRY_ALIGNMENT (a different arena address).
class AlignedBytes {
 public:
  AlignedBytes() = default;
  explicit AlignedBytes(size_t size, size_t offset = 0) : size_(size) {
    base_ = static_cast<uint8_t*>(std::aligned_alloc(FERRY_ALIGNMENT, round(size + offset) + FERRY_ALIGNMENT));
    if (!base_) std::abort();
    data_ = base_ + offset;
  }
  AlignedBytes(const uint8_t* bytes, size_t size) : AlignedBytes(size) {
    if (size) std::memcpy(data_, bytes, size);
  }
  ~AlignedBytes() { std::free(base_); }
  AlignedBytes(AlignedBytes&& o) noexcept { *this = std::move(o); }
  AlignedBytes& operator=(AlignedBytes&& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  static size_t round(size_t n) { return (n + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT; }
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// A loaded model and one session over it, in memory the helper owns.
class Runner {
 public:
  // `model_bytes` is copied to aligned memory. status() tells whether loading
  // and session init succeeded; last_error() why not.
  Runner(const std::vector<uint8_t>& model_bytes, size_t max_batch, size_t max_seq,
         ferry_backend backend = FERRY_BACKEND_REFERENCE, size_t arena_offset = 0, void* threadpool = nullptr)
      : bytes_(model_bytes.data(), model_bytes.size()) {
    status_ = ferry_model_load(bytes_.data(), bytes_.size(), nullptr, &model_);
    if (status_ != FERRY_OK) {
      error_ = ferry_last_error();
      return;
    }
    info_.struct_size = sizeof(info_);
    ferry_model_get_info(model_, &info_);
    ferry_session_options_init(&options_);
    options_.max_batch = max_batch;
    options_.max_seq = max_seq;
    options_.backend = backend;
    set_threadpool(&options_, threadpool);
    size_t arena_bytes = 0;
    status_ = arena_size(model_, &options_, &arena_bytes);
    if (status_ == FERRY_OK) {
      arena_ = AlignedBytes(arena_bytes, arena_offset);
      status_ = ferry_session_init(model_, &options_, arena_.data(), arena_.size(), &session_);
    }
    if (status_ != FERRY_OK) error_ = ferry_last_error();
  }
  ~Runner() { ferry_model_free(model_); }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  ferry_status status() const { return status_; }
  const std::string& last_error() const { return error_; }
  const ferry_model_info& info() const { return info_; }
  ferry_model* model() const { return model_; }
  ferry_session* session() const { return session_; }
  const uint8_t* arena() const { return arena_.data(); }

  size_t output_floats(size_t batch, size_t seq) const {
    size_t n = 0;
    ferry_output_floats(model_, batch, seq, &n);
    return n;
  }
  // Whole-sequence run; `out` is resized to the output.
  ferry_status run(const std::vector<float>& input, size_t batch, size_t seq, std::vector<float>* out,
                   const int32_t* lengths = nullptr) {
    out->assign(output_floats(batch, seq), 0.0f);
    return ferry_run(session_, input.data(), batch, seq, lengths, out->data(), out->size());
  }
  ferry_status step(const float* input, size_t batch, std::vector<float>* out) {
    out->assign(batch * info_.output_size, 0.0f);
    return ferry_step(session_, input, batch, out->data(), out->size());
  }

 private:
  // ferry_session_options grew a `threadpool` member; set it where it exists.
  template <typename O>
  static auto set_threadpool(O* o, void* pool) -> decltype(o->threadpool = pool, void()) {
    o->threadpool = pool;
  }
  static void set_threadpool(...) {}
  // ferry_session_arena_size (per options) where the runtime has it, else
  // ferry_arena_size (default options). Found by argument-dependent lookup.
  template <typename M>
  static auto arena_size(M* m, const ferry_session_options* o, size_t* out)
      -> decltype(ferry_session_arena_size(m, o, out)) {
    return ferry_session_arena_size(m, o, out);
  }
  static ferry_status arena_size(const void* m, const ferry_session_options* o, size_t* out) {
    return ferry_arena_size(static_cast<const ferry_model*>(m), o->max_batch, o->max_seq, out);
  }

  AlignedBytes bytes_;
  AlignedBytes arena_;
  ferry_model* model_ = nullptr;
  ferry_session* session_ = nullptr;
  ferry_session_options options_{};
  ferry_model_info info_{};
  ferry_status status_ = FERRY_OK;
  std::string error_;
};

}  // namespace ferry::test
