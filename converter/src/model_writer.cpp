#include "model_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "error.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"

namespace ferry::conv {
namespace {

namespace fb = ::ferry::fb;

constexpr uint64_t kAlign = FERRY_ALIGNMENT;

uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

fb::LayerKind layer_kind(LayerOp op) {
  switch (op) {
    case LayerOp::LSTM: return fb::LayerKind::LSTM;
    case LayerOp::GRU: return fb::LayerKind::GRU;
    case LayerOp::RNN_TANH: return fb::LayerKind::RNN_TANH;
    case LayerOp::RNN_RELU: return fb::LayerKind::RNN_RELU;
    case LayerOp::Linear: return fb::LayerKind::Linear;
    case LayerOp::Last: return fb::LayerKind::Last;
    case LayerOp::ReLU: return fb::LayerKind::ReLU;
    case LayerOp::Tanh: return fb::LayerKind::Tanh;
    case LayerOp::Sigmoid: return fb::LayerKind::Sigmoid;
    case LayerOp::Softmax: return fb::LayerKind::Softmax;
    case LayerOp::Identity: return fb::LayerKind::Identity;
  }
  return fb::LayerKind::Identity;
}

}  // namespace

uint64_t TensorPlan::numel() const {
  uint64_t n = 1;
  for (uint32_t d : shape) {
    if (__builtin_mul_overflow(n, uint64_t{d}, &n)) throw Error("tensor '" + name + "': shape overflows");
  }
  return n;
}

namespace {

// How each tensor is stored. Every weight and bias that a layer reads is
// written Panel8 (schema/ferry.fbs): the layout the SIMD kernels stream,
// which the reference kernels read too, so the file holds one copy of each
// weight (for firmware, flash is the budget). G comes from the role: the
// cell's w_ih, w_hh and bias have the module's gates, the rest one.
struct Storage {
  bool panel8 = false;
  uint32_t gates = 1;
  uint64_t numel = 0;  // floats stored: the logical count, or padded to whole panels
};

uint32_t gates_of(LayerOp op) {
  return op == LayerOp::LSTM ? 4 : op == LayerOp::GRU ? 3 : 1;
}

std::vector<Storage> storage_of(const ModelPlan& plan) {
  std::vector<Storage> out(plan.tensors.size());
  std::vector<bool> seen(plan.tensors.size(), false);
  const auto use = [&](int index, uint32_t gates) {
    if (index < 0) return;
    const size_t i = static_cast<size_t>(index);
    if (i >= out.size()) throw Error("internal: tensor index " + std::to_string(index) + " out of range");
    if (seen[i] && out[i].gates != gates) {
      throw Error("internal: tensor '" + plan.tensors[i].name + "' is used with " + std::to_string(out[i].gates) +
                  " and " + std::to_string(gates) + " gates");
    }
    seen[i] = true;
    out[i].panel8 = true;
    out[i].gates = gates;
  };
  for (const LayerPlan& l : plan.layers) {
    const uint32_t g = gates_of(l.op);
    for (const CellPlan& c : l.cells) {
      use(c.w_ih, g);
      use(c.w_hh, g);
      use(c.bias, g);
      use(c.b_hn, 1);
      use(c.w_hr, 1);
    }
    use(l.weight, 1);
    use(l.bias, 1);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const TensorPlan& t = plan.tensors[i];
    out[i].numel = t.numel();
    if (!out[i].panel8) continue;
    if (t.shape.empty() || t.shape.size() > 2 || t.shape[0] % out[i].gates != 0) {
      throw Error("internal: tensor '" + t.name + "' does not split into " + std::to_string(out[i].gates) + " gates");
    }
    const uint64_t units = t.shape[0] / out[i].gates;
    const uint64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
    out[i].numel = (units + 7) / 8 * 8 * out[i].gates * cols;
  }
  return out;
}

// Blob layout: each tensor at a 64-byte-aligned offset, in plan order.
std::vector<uint64_t> blob_offsets(const std::vector<Storage>& storage, uint64_t* blob_size) {
  std::vector<uint64_t> offsets(storage.size());
  uint64_t size = 0;
  for (size_t i = 0; i < storage.size(); ++i) {
    offsets[i] = size;
    size = align_up(size + storage[i].numel * sizeof(float));
  }
  *blob_size = size;
  return offsets;
}

// Produces tensor `t` as stored, in order, in pieces handed to `sink`.
// Panel8 gathers slabs of whole panels (~4 MiB of output at a time): for
// each gate one contiguous range of source rows, read with one `fill` call,
// then scattered k-major into the panels:
//   out[((p*K + k)*G + g)*8 + j] = W[g*H + 8p + j][k]   (0 past H).
void emit_stored(const TensorPlan& t, const Storage& st, std::vector<float>& buffer,
                 const std::function<void(const float*, uint64_t)>& sink) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;  // floats (4 MiB)
  if (!st.panel8) {
    const uint64_t n = st.numel;
    buffer.resize(static_cast<size_t>(std::min(n, kChunk)));
    for (uint64_t begin = 0; begin < n; begin += kChunk) {
      const uint64_t count = std::min(kChunk, n - begin);
      t.fill(buffer.data(), begin, count);
      sink(buffer.data(), count);
    }
    return;
  }
  const uint64_t G = st.gates, H = t.shape[0] / G, K = t.shape.size() == 2 ? t.shape[1] : 1;
  if (G > 4) throw Error("internal: tensor '" + t.name + "': more than 4 gates");
  const uint64_t panels = (H + 7) / 8, panel_floats = 8 * G * K;
  const uint64_t per_slab = std::max<uint64_t>(1, kChunk / panel_floats);
  std::vector<float> packed;
  for (uint64_t p0 = 0; p0 < panels; p0 += per_slab) {
    const uint64_t p1 = std::min(panels, p0 + per_slab);
    const uint64_t u0 = 8 * p0, u1 = std::min(H, 8 * p1);  // source units of the slab
    buffer.resize(static_cast<size_t>(G * (u1 - u0) * K));
    for (uint64_t g = 0; g < G; ++g) {
      t.fill(buffer.data() + g * (u1 - u0) * K, (g * H + u0) * K, (u1 - u0) * K);
    }
    // Written in stored order (reads gather from the slab's 8G rows).
    packed.resize(static_cast<size_t>((p1 - p0) * panel_floats));
    float* dst = packed.data();
    for (uint64_t p = p0; p < p1; ++p) {
      const float* rows[32];  // G * 8 <= 32 source rows of this panel; null past H
      for (uint64_t g = 0; g < G; ++g) {
        for (uint64_t j = 0; j < 8; ++j) {
          const uint64_t u = 8 * p + j;
          rows[g * 8 + j] = u < H ? buffer.data() + (g * (u1 - u0) + (u - u0)) * K : nullptr;
        }
      }
      for (uint64_t k = 0; k < K; ++k) {
        for (uint64_t i = 0; i < G * 8; ++i) *dst++ = rows[i] ? rows[i][k] : 0.0f;
      }
    }
    sink(packed.data(), packed.size());
  }
}

}  // namespace

ModelBytes build_model(const ModelPlan& plan, const Progress& progress, bool fill_weights) {
  uint64_t blob_size = 0;
  const std::vector<Storage> storage = storage_of(plan);
  const std::vector<uint64_t> offsets = blob_offsets(storage, &blob_size);
  if (blob_size > (uint64_t{1} << 31) - (uint64_t{1} << 24)) {
    throw Error("the weights total " + std::to_string(blob_size) +
                " bytes, above the 2 GiB a FlatBuffers file can hold");
  }

  // Sized up front so the builder never reallocates (and never holds the
  // weights twice).
  flatbuffers::FlatBufferBuilder fbb(static_cast<size_t>(blob_size) + 65536 +
                                     plan.mapping.size() * 128);
  fbb.ForceVectorAlignment(static_cast<size_t>(blob_size), 1, kAlign);
  uint8_t* blob = nullptr;
  const auto weights = fbb.CreateUninitializedVector(static_cast<size_t>(blob_size), 1, &blob);
  if (fill_weights) {
    std::memset(blob, 0, static_cast<size_t>(blob_size));
    std::vector<float> buffer;
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      float* dst = reinterpret_cast<float*>(blob + offsets[i]);
      emit_stored(plan.tensors[i], storage[i], buffer, [&dst](const float* data, uint64_t count) {
        std::memcpy(dst, data, count * sizeof(float));
        dst += count;
      });
      if (progress) progress(i + 1 < plan.tensors.size() ? offsets[i + 1] : blob_size, blob_size);
    }
  }

  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorPlan& t = plan.tensors[i];
    tensors.push_back(fb::CreateTensor(fbb, fbb.CreateString(t.name), fb::DType::F32,
                                       storage[i].panel8 ? fb::TensorLayout::Panel8 : fb::TensorLayout::RowMajor,
                                       fbb.CreateVector(t.shape), offsets[i], storage[i].numel * sizeof(float)));
  }
  std::vector<flatbuffers::Offset<fb::Layer>> layers;
  for (const LayerPlan& l : plan.layers) {
    std::vector<flatbuffers::Offset<fb::RecurrentCell>> cells;
    for (const CellPlan& c : l.cells) {
      cells.push_back(fb::CreateRecurrentCell(fbb, c.w_ih, c.w_hh, c.bias, c.b_hn, c.w_hr));
    }
    layers.push_back(fb::CreateLayer(fbb, layer_kind(l.op), fbb.CreateString(l.name), l.input_size,
                                     l.output_size, l.hidden_size, l.proj_size, l.num_layers,
                                     l.bidirectional, cells.empty() ? 0 : fbb.CreateVector(cells),
                                     l.weight, l.bias));
  }
  std::vector<flatbuffers::Offset<fb::Mapping>> mapping;
  for (const MappingRow& r : plan.mapping) {
    mapping.push_back(fb::CreateMapping(fbb, fbb.CreateString(r.source_key), r.layer,
                                        fbb.CreateString(r.role)));
  }
  const std::string sha256 = plan.source_sha256_async ? plan.source_sha256_async() : plan.source_sha256;
  const auto provenance = fb::CreateProvenance(
      fbb, fbb.CreateString(plan.source_file), fbb.CreateString(sha256),
      fbb.CreateString(plan.source_format), fbb.CreateString(plan.converter_version),
      fbb.CreateVector(mapping));
  flatbuffers::Offset<fb::SelfTest> selftest;
  if (plan.selftest.batch > 0) {
    const SelfTestPlan& st = plan.selftest;
    selftest = fb::CreateSelfTest(fbb, st.batch, st.seq, fbb.CreateVector(st.input),
                                  fbb.CreateVector(st.output), st.tolerance);
  }
  fb::ModelBuilder mb(fbb);
  mb.add_format_major(FERRY_FORMAT_MAJOR);
  mb.add_format_minor(FERRY_FORMAT_MINOR);
  mb.add_layers(fbb.CreateVector(layers));
  mb.add_tensors(fbb.CreateVector(tensors));
  mb.add_weights(flatbuffers::Offset<flatbuffers::Vector<uint8_t>>(weights));
  mb.add_batch_first(plan.batch_first);
  mb.add_input_size(plan.input_size);
  mb.add_output_size(plan.output_size);
  mb.add_output_is_sequence(plan.output_is_sequence);
  mb.add_arena_bytes_stream_b1(~uint64_t{0});  // placeholder, set below
  mb.add_provenance(provenance);
  if (!selftest.IsNull()) mb.add_selftest(selftest);
  fbb.Finish(mb.Finish(), fb::ModelIdentifier());

  auto buffer = std::make_shared<flatbuffers::DetachedBuffer>(fbb.Release());
  ModelBytes bytes(buffer, buffer->data(), buffer->size());

  // Verify with the runtime itself, and record the streaming arena size.
  ferry_model* model = nullptr;
  if (ferry_model_load(bytes.data(), bytes.size(), nullptr, &model) != FERRY_OK) {
    throw Error(std::string("internal: the runtime refuses the written model: ") + ferry_last_error());
  }
  // The schema defines it for the reference backend (machine-independent).
  size_t arena = 0;
  ferry_session_options options;
  ferry_session_options_init(&options);
  options.backend = FERRY_BACKEND_REFERENCE;
  const ferry_status st = ferry_session_arena_size(model, &options, &arena);
  ferry_model_free(model);
  if (st != FERRY_OK) throw Error(std::string("internal: arena size: ") + ferry_last_error());
  fb::GetMutableModel(bytes.mutable_data())->mutate_arena_bytes_stream_b1(arena);
  return bytes;
}

namespace {

// Set by cancel_writes(), from a signal handler: every writer stops at its
// next write (or rename) with an Error, which removes its temporary file.
volatile sig_atomic_t g_writes_cancelled = 0;

// An output file under a temporary name, renamed into place by commit();
// removed if destroyed uncommitted (any error path).
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path) : path_(path), tmp_(path + ".tmp." + std::to_string(getpid())) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw Error("cannot create '" + tmp_ + "': " + std::strerror(errno));
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  int fd() const { return fd_; }

  void write(const uint8_t* data, size_t size) {
    while (size > 0) {
      check_cancelled();
      const ssize_t n = ::write(fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
      data += n;
      size -= static_cast<size_t>(n);
    }
  }

  void zeros(uint64_t size) {
    static const uint8_t kZeros[4096] = {};
    while (size > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(size, sizeof(kZeros)));
      write(kZeros, n);
      size -= n;
    }
  }

  // Copies `size` bytes at `offset` of `in_fd` to the end of this file inside
  // the kernel; falls back to read/write where copy_file_range is refused.
  void copy_from(int in_fd, uint64_t offset, uint64_t size) {
    loff_t in_off = static_cast<loff_t>(offset);
    while (size > 0) {
      check_cancelled();
      const ssize_t n = ::copy_file_range(in_fd, &in_off, fd_, nullptr, size, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      size -= static_cast<uint64_t>(n);
    }
    std::vector<uint8_t> buf(size ? size_t{1} << 20 : 0);
    while (size > 0) {
      const ssize_t n = ::pread(in_fd, buf.data(), static_cast<size_t>(std::min<uint64_t>(size, buf.size())), in_off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error("cannot read the source file at offset " + std::to_string(in_off) + ": " + std::strerror(errno));
      write(buf.data(), static_cast<size_t>(n));
      in_off += n;
      size -= static_cast<uint64_t>(n);
    }
  }

  void commit() {
    check_cancelled();
    const int fd = fd_;
    fd_ = -1;
    // No fsync: like cp or torch.save, durability is left to the OS; the
    // rename alone guarantees that `path` is never seen half-written.
    if (::close(fd) != 0) throw Error("cannot write '" + path_ + "': " + std::strerror(errno));
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      throw Error("cannot rename '" + tmp_ + "' to '" + path_ + "': " + std::strerror(errno));
    }
    committed_ = true;
  }

 private:
  void check_cancelled() const {
    if (g_writes_cancelled) throw Error("interrupted: '" + path_ + "' was not written");
  }

  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void write_model_file(const std::string& path, const ModelBytes& bytes, const ModelPlan& plan,
                      int source_fd, const Progress& progress) {
  uint64_t blob_size = 0;
  const std::vector<Storage> storage = storage_of(plan);
  const std::vector<uint64_t> offsets = blob_offsets(storage, &blob_size);
  const auto* weights = fb::GetModel(bytes.data())->weights();
  const uint64_t blob_start = weights ? static_cast<uint64_t>(weights->data() - bytes.data()) : bytes.size();
  if ((weights ? weights->size() : 0) != blob_size || blob_start + blob_size > bytes.size()) {
    throw Error("internal: the model's weight blob does not match its plan");
  }
  AtomicFile out(path);
  out.write(bytes.data(), static_cast<size_t>(blob_start));
  std::vector<float> chunk;
  uint64_t written = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorPlan& t = plan.tensors[i];
    const uint64_t n = storage[i].numel;
    if (t.source_offset >= 0 && source_fd >= 0 && !storage[i].panel8) {
      // Stored as in the source: a file-to-file copy.
      out.copy_from(source_fd, static_cast<uint64_t>(t.source_offset), n * sizeof(float));
    } else {
      emit_stored(t, storage[i], chunk, [&out](const float* data, uint64_t count) {
        out.write(reinterpret_cast<const uint8_t*>(data), static_cast<size_t>(count * sizeof(float)));
      });
    }
    written = offsets[i] + n * sizeof(float);
    const uint64_t next = i + 1 < plan.tensors.size() ? offsets[i + 1] : blob_size;
    out.zeros(next - written);
    written = next;
    if (progress) progress(written, blob_size);
  }
  out.write(bytes.data() + blob_start + blob_size, static_cast<size_t>(bytes.size() - blob_start - blob_size));
  out.commit();
}

void cancel_writes() { g_writes_cancelled = 1; }

bool writes_cancelled() { return g_writes_cancelled != 0; }

void write_file_atomic(const std::string& path, const uint8_t* data, size_t size) {
  AtomicFile out(path);
  out.write(data, size);
  out.commit();
}

}  // namespace ferry::conv
