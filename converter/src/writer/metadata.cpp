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

fb::DType stored_dtype(DType d) {
  switch (d) {
    case DType::F32: return fb::DType::F32;
    case DType::F16: return fb::DType::F16;
    case DType::I8: return fb::DType::I8;
    case DType::I4: return fb::DType::I4;
    default: throw Error(std::string("internal: stored dtype ") + dtype_name(d) + " is not in the schema");
  }
}

fb::TensorLayout stored_layout(StoredForm::Layout l) {
  switch (l) {
    case StoredForm::Layout::Panel8: return fb::TensorLayout::Panel8;
    case StoredForm::Layout::Panel8x4: return fb::TensorLayout::Panel8x4;
    case StoredForm::Layout::Panel8x8q4: return fb::TensorLayout::Panel8x8q4;
    default: return fb::TensorLayout::RowMajor;
  }
}

// The format a file needs: 1.3 only for quantized weights, so that an f32
// conversion stays byte-identical to (and as readable as) a 1.2 file; 2.0
// only where a sequence output's layout is not the input's, which a 1.x
// reader would misread (schema/ferry.fbs).
constexpr uint16_t kMajorSameLayout = 1, kMinorQuantized = 3, kMinorWithoutQuantization = 2;
static_assert(FERRY_FORMAT_MAJOR == 2 && FERRY_FORMAT_MINOR == 0, "the formats the writer chooses from");

fb::IoLayout stored_output_layout(const ModelPlan& plan) {
  if (!plan.output_is_sequence || output_layout(plan) == input_layout(plan)) return fb::IoLayout::AsInput;
  switch (output_layout(plan)) {
    case Layout::kTimeMajor: return fb::IoLayout::TimeMajor;
    case Layout::kBatchFirst: return fb::IoLayout::BatchFirst;
    case Layout::kChannelsFirst: return fb::IoLayout::ChannelsFirst;
  }
  return fb::IoLayout::AsInput;
}

flatbuffers::Offset<fb::ErrorStats> error_stats(flatbuffers::FlatBufferBuilder& fbb, const ErrorStatsPlan& e) {
  return fb::CreateErrorStats(fbb, fbb.CreateString(e.name), stored_dtype(e.dtype), e.max_abs, e.rms, e.cosine);
}

}  // namespace

BlobLayout blob_layout(const std::vector<StoredForm>& forms) {
  BlobLayout blob;
  blob.offsets.resize(forms.size());
  for (size_t i = 0; i < forms.size(); ++i) {
    blob.offsets[i] = blob.size;
    blob.size = align_up(blob.size + forms[i].bytes);
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
  bool quantized = false;
  for (size_t i = 0; i < forms.size(); ++i) {
    const StoredForm& f = forms[i];
    if (i < plan.tensors.size()) {
      const TensorPlan& t = plan.tensors[i];
      quantized = quantized || f.dtype != DType::F32;
      tensors.push_back(fb::CreateTensor(fbb, fbb.CreateString(t.name), stored_dtype(f.dtype), stored_layout(f.layout),
                                         fbb.CreateVector(t.shape), blob.offsets[i], f.bytes, f.scales));
    } else {
      const TensorPlan& w = plan.tensors.at(static_cast<size_t>(f.scales_of));
      const std::vector<uint32_t> shape{static_cast<uint32_t>(f.elements)};
      tensors.push_back(fb::CreateTensor(fbb, fbb.CreateString(w.name + ".scales"), stored_dtype(f.dtype),
                                         fb::TensorLayout::RowMajor, fbb.CreateVector(shape), blob.offsets[i],
                                         f.bytes));
    }
  }
  flatbuffers::Offset<fb::Quantization> quantization;
  if (!plan.quantization.requested.empty()) {
    const QuantizationPlan& q = plan.quantization;
    std::vector<flatbuffers::Offset<fb::ErrorStats>> layer_stats;
    for (const ErrorStatsPlan& e : q.layers) layer_stats.push_back(error_stats(fbb, e));
    const auto model_stats = error_stats(fbb, q.model);
    quantization = fb::CreateQuantization(fbb, fbb.CreateString(q.requested), fbb.CreateString(q.input), q.max_error,
                                          model_stats, fbb.CreateVector(layer_stats), q.drift_steps,
                                          q.drift_start_rms, q.drift_end_rms);
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
  std::vector<flatbuffers::Offset<fb::Assumption>> assumptions;
  for (const Assumption& a : plan.assumptions) {
    assumptions.push_back(fb::CreateAssumption(fbb, fbb.CreateString(a.layer), fbb.CreateString(a.parameter),
                                               fbb.CreateString(a.value), fbb.CreateString(a.override)));
  }
  const auto provenance = fb::CreateProvenance(
      fbb, fbb.CreateString(plan.source_file), fbb.CreateString(sha256),
      fbb.CreateString(plan.source_format), fbb.CreateString(plan.converter_version),
      fbb.CreateVector(mapping), assumptions.empty() ? 0 : fbb.CreateVector(assumptions));
  flatbuffers::Offset<fb::SelfTest> selftest;
  if (plan.selftest.batch > 0) {
    const SelfTestPlan& st = plan.selftest;
    selftest = fb::CreateSelfTest(fbb, st.batch, st.seq, fbb.CreateVector(st.input),
                                  fbb.CreateVector(st.output), st.tolerance);
  }
  std::vector<flatbuffers::Offset<fb::MetaEntry>> user;
  for (const MetaValue& v : plan.metadata) {
    if (v.is_text) {
      user.push_back(fb::CreateMetaEntry(fbb, fbb.CreateString(v.key), fb::MetaType::Text, fbb.CreateString(v.text)));
    } else {
      user.push_back(fb::CreateMetaEntry(fbb, fbb.CreateString(v.key), fb::MetaType::Numbers, 0,
                                         fbb.CreateVector(v.numbers), v.shape.empty() ? 0 : fbb.CreateVector(v.shape)));
    }
  }
  const auto user_metadata = user.empty() ? 0 : fbb.CreateVector(user);
  fb::ModelBuilder mb(fbb);
  const fb::IoLayout out_layout = stored_output_layout(plan);
  if (out_layout != fb::IoLayout::AsInput) {
    mb.add_format_major(FERRY_FORMAT_MAJOR);
    mb.add_format_minor(FERRY_FORMAT_MINOR);
    mb.add_output_layout(out_layout);
  } else {
    mb.add_format_major(kMajorSameLayout);
    mb.add_format_minor(quantized || !quantization.IsNull() ? kMinorQuantized : kMinorWithoutQuantization);
  }
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
  if (!quantization.IsNull()) mb.add_quantization(quantization);
  if (!user_metadata.IsNull()) mb.add_metadata(user_metadata);
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
