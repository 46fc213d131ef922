#include "model_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
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

ModelBytes build_model(const ModelPlan& plan, const Progress& progress) {
  // Blob layout: each tensor at a 64-byte-aligned offset, in plan order.
  std::vector<uint64_t> offsets(plan.tensors.size());
  uint64_t blob_size = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    offsets[i] = blob_size;
    blob_size = align_up(blob_size + plan.tensors[i].numel() * sizeof(float));
  }
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
  std::memset(blob, 0, static_cast<size_t>(blob_size));
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    plan.tensors[i].fill(reinterpret_cast<float*>(blob + offsets[i]));
    if (progress) progress(i + 1 < plan.tensors.size() ? offsets[i + 1] : blob_size, blob_size);
  }

  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorPlan& t = plan.tensors[i];
    tensors.push_back(fb::CreateTensor(fbb, fbb.CreateString(t.name), fb::DType::F32,
                                       fb::TensorLayout::RowMajor, fbb.CreateVector(t.shape),
                                       offsets[i], t.numel() * sizeof(float)));
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
  size_t arena = 0;
  const ferry_status st = ferry_arena_size(model, 1, 1, &arena);
  ferry_model_free(model);
  if (st != FERRY_OK) throw Error(std::string("internal: arena size: ") + ferry_last_error());
  fb::GetMutableModel(bytes.mutable_data())->mutate_arena_bytes_stream_b1(arena);
  return bytes;
}

void write_file_atomic(const std::string& path, const uint8_t* data, size_t size) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create '" + tmp + "': " + std::strerror(errno));
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error("cannot write '" + path + "': " + why);
    }
    done += static_cast<size_t>(n);
  }
  // No fsync: like cp or torch.save, durability is left to the OS; the
  // rename alone guarantees that `path` is never seen half-written.
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error("cannot write '" + path + "': " + why);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error("cannot rename '" + tmp + "' to '" + path + "': " + why);
  }
}

}  // namespace ferry::conv
