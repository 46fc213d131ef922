// The model file around its weights (schema/ferry.fbs): the FlatBuffers
// tables of a ModelPlan (layers, tensors with their stored layout and blob
// offset, I/O, provenance, self-test placeholders) and a weight blob that is
// reserved, 64-byte aligned, but not written. Internal to the writer.
#pragma once

#include <cstdint>
#include <vector>

#include "pack/tensor_packing.h"
#include "plan/model_plan.h"
#include "writer/model_bytes.h"

namespace ferry::conv {

// Where each tensor sits in the weight blob: at a 64-byte-aligned offset,
// in plan order.
struct BlobLayout {
  std::vector<uint64_t> offsets;  // bytes from the blob's start
  uint64_t size = 0;              // bytes, the last tensor padded to 64
};
BlobLayout blob_layout(const std::vector<StoredForm>& forms);

struct EncodedModel {
  ModelBytes bytes;         // the whole file; the blob's bytes unwritten
  uint64_t blob_start = 0;  // the blob's offset in `bytes`
};

// Encodes the metadata. The arena size and the self-test output and
// tolerance are placeholders the runtime pass overwrites in place; so is the
// source's SHA-256 when the plan computes it asynchronously
// (fill_source_sha256). Throws Error when the weights pass the 2 GiB a
// FlatBuffers file can hold.
EncodedModel encode_model(const ModelPlan& plan, const std::vector<StoredForm>& forms, const BlobLayout& blob);

// Writes `sha256` (64 hex characters) into the placeholder encode_model
// reserved in the model file at `data`.
void fill_source_sha256(uint8_t* data, const std::string& sha256);

}  // namespace ferry::conv
