#include "writer/metadata.h"

#include <string>

#include "error.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"

namespace ferry::conv {
namespace {

namespace fb = ::ferry::fb;

constexpr uint64_t kAlign = FERRY_ALIGNMENT;
constexpr size_t kSha256Chars = 64;  // hex digits of a SHA-256

uint64_t align_up(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// LayerOp mirrors fb::LayerKind value for value.
fb::LayerKind layer_kind(LayerOp op) { return static_cast<fb::LayerKind>(op); }
static_assert(static_cast<int>(LayerOp::Identity) == static_cast<int>(fb::LayerKind::Identity), "LayerOp");
static_assert(static_cast<int>(LayerOp::Conv1d) == static_cast<int>(fb::LayerKind::Conv1d), "LayerOp");
static_assert(static_cast<int>(LayerOp::Embedding) == static_cast<int>(fb::LayerKind::Embedding), "LayerOp");
static_assert(static_cast<int>(LayerOp::Add) == static_cast<int>(fb::LayerKind::MAX), "LayerOp");
static_assert(static_cast<int>(PaddingMode::Replicate) == static_cast<int>(fb::PaddingMode::Replicate), "PaddingMode");

// The schema's dtype of a planned tensor. The packer produces float32 only,
// so F32 is the one dtype a plan may target until quantization exists.
fb::DType stored_dtype(const TensorPlan& t) {
  if (t.dtype != DType::F32)
    throw Error("internal: tensor '" + t.name + "': target dtype " + dtype_name(t.dtype) + " is not supported");
  return fb::DType::F32;
}

}  // namespace

BlobLayout blob_layout(const std::vector<StoredForm>& forms) {
  BlobLayout blob;
  blob.offsets.resize(forms.size());
  for (size_t i = 0; i < forms.size(); ++i) {
    blob.offsets[i] = blob.size;
    blob.size = align_up(blob.size + forms[i].elements * sizeof(float));
  }
  return blob;
}

EncodedModel encode_model(const ModelPlan& plan, const std::vector<StoredForm>& forms, const BlobLayout& blob) {
  const uint64_t blob_size = blob.size;
  if (blob_size > (uint64_t{1} << 31) - (uint64_t{1} << 24)) {
    throw Error("the weights total " + std::to_string(blob_size) +
                " bytes, above the 2 GiB a FlatBuffers file can hold");
  }

  // Sized up front so the builder never reallocates (and never holds the
  // weights twice). The blob's memory is reserved, never touched here.
  flatbuffers::FlatBufferBuilder fbb(static_cast<size_t>(blob_size) + 65536 + plan.mapping.size() * 128);
  fbb.ForceVectorAlignment(static_cast<size_t>(blob_size), 1, kAlign);
  uint8_t* unwritten = nullptr;
  const auto weights = fbb.CreateUninitializedVector(static_cast<size_t>(blob_size), 1, &unwritten);

  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const TensorPlan& t = plan.tensors[i];
    tensors.push_back(fb::CreateTensor(fbb, fbb.CreateString(t.name), stored_dtype(t),
                                       forms[i].panel8 ? fb::TensorLayout::Panel8 : fb::TensorLayout::RowMajor,
                                       fbb.CreateVector(t.shape), blob.offsets[i], forms[i].elements * sizeof(float)));
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
                                     l.weight, l.bias, l.kernel_size, l.stride, l.dilation, l.groups, l.pad_left,
                                     l.pad_right, static_cast<fb::PaddingMode>(l.padding_mode), l.eps, l.alpha,
                                     l.beta, l.approximate_tanh, l.slot));
  }
  std::vector<flatbuffers::Offset<fb::Mapping>> mapping;
  for (const MappingRow& r : plan.mapping) {
    mapping.push_back(fb::CreateMapping(fbb, fbb.CreateString(r.source_key), r.layer,
                                        fbb.CreateString(r.role)));
  }
  const std::string sha256 = plan.source_sha256_async ? std::string(kSha256Chars, '0') : plan.source_sha256;
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
  mb.add_channels_first(plan.channels_first);
  mb.add_time_axis(plan.time_axis);
  mb.add_input_is_tokens(plan.input_is_tokens);
  mb.add_arena_bytes_stream_b1(~uint64_t{0});  // placeholder, set by the runtime pass
  mb.add_provenance(provenance);
  if (!selftest.IsNull()) mb.add_selftest(selftest);
  fbb.Finish(mb.Finish(), fb::ModelIdentifier());

  auto buffer = std::make_shared<flatbuffers::DetachedBuffer>(fbb.Release());
  EncodedModel out;
  out.bytes = ModelBytes(buffer, buffer->data(), buffer->size());
  const auto* blob_vector = fb::GetModel(out.bytes.data())->weights();
  out.blob_start = static_cast<uint64_t>(blob_vector->data() - out.bytes.data());
  if (blob_vector->size() != blob_size || out.blob_start + blob_size > out.bytes.size()) {
    throw Error("internal: the model's weight blob does not match its plan");
  }
  return out;
}

void fill_source_sha256(uint8_t* data, const std::string& sha256) {
  auto* field = fb::GetMutableModel(data)->mutable_provenance()->mutable_source_sha256();
  if (sha256.size() != kSha256Chars || field->size() != kSha256Chars)
    throw Error("internal: the source SHA-256 '" + sha256 + "' does not fit the room reserved for it");
  for (flatbuffers::uoffset_t i = 0; i < kSha256Chars; ++i) field->Mutate(i, sha256[i]);
}

}  // namespace ferry::conv
