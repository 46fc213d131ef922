// User metadata (schema/ferry.fbs, Model.metadata): the C API that reads
// the entries in place from the model bytes (the loader, model/loader.cpp,
// has checked every one).
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <string.h>

#include "common/status.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"
#include "model/model.h"

namespace ferry {
namespace {

namespace fb = ::ferry::fb;

static_assert(static_cast<int>(fb::MetaType::Text) == FERRY_METADATA_TEXT, "enum");
static_assert(static_cast<int>(fb::MetaType::Numbers) == FERRY_METADATA_NUMBERS, "enum");

const flatbuffers::Vector<flatbuffers::Offset<fb::MetaEntry>>* entries_of(const ferry_model* model) {
  return fb::GetModel(model->bytes)->metadata();
}

void fill(const fb::MetaEntry* e, ferry_metadata* out) {
  const size_t size = out->struct_size;
  memset(out, 0, size < sizeof(ferry_metadata) ? size : sizeof(ferry_metadata));
  out->struct_size = size;
  out->key = e->key()->c_str();
  out->type = static_cast<int>(e->type());
  if (e->type() == fb::MetaType::Text) {
    out->text = e->text()->c_str();
    out->text_bytes = e->text()->size();
    return;
  }
  out->count = e->numbers()->size();
  out->rank = e->shape() ? e->shape()->size() : 0;
  for (size_t d = 0; d < out->rank; ++d) out->shape[d] = e->shape()->Get(static_cast<flatbuffers::uoffset_t>(d));
}

ferry_status find(const ferry_model* model, const char* key, const fb::MetaEntry** out) {
  if (!model || !key) return fail(FERRY_INVALID_ARGUMENT, "model or key is NULL");
  const auto* entries = entries_of(model);
  const uint32_t n = entries ? entries->size() : 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (strcmp(entries->Get(i)->key()->c_str(), key) == 0) {
      *out = entries->Get(i);
      return FERRY_OK;
    }
  }
  // The keys it has, as many as the message holds.
  char keys[256] = "";
  size_t used = 0;
  for (uint32_t i = 0; i < n && used + 4 < sizeof(keys); ++i) {
    const char* k = entries->Get(i)->key()->c_str();
    const size_t len = strlen(k);
    if (used + len + 6 >= sizeof(keys)) {
      memcpy(keys + used, ", ...", 6);
      used += 5;
      break;
    }
    if (i) keys[used++] = ',', keys[used++] = ' ';
    memcpy(keys + used, k, len + 1);
    used += len;
  }
  if (n == 0) return fail(FERRY_INVALID_ARGUMENT, "metadata '%.64s': the model has no metadata", key);
  return fail(FERRY_INVALID_ARGUMENT, "metadata '%.64s': no such key (the model has %s)", key, keys);
}

bool entry_fits(const ferry_metadata* out) {
  return out && out->struct_size >= offsetof(ferry_metadata, shape) + sizeof(out->shape);
}

}  // namespace

}  // namespace ferry

using namespace ferry;

extern "C" size_t ferry_model_metadata_count(const ferry_model* model) {
  if (!model) return 0;
  const auto* entries = entries_of(model);
  return entries ? entries->size() : 0;
}

extern "C" ferry_status ferry_model_metadata_at(const ferry_model* model, size_t index, ferry_metadata* entry_out) {
  if (!model) return fail(FERRY_INVALID_ARGUMENT, "model is NULL");
  if (!entry_fits(entry_out)) return fail(FERRY_INVALID_ARGUMENT, "entry_out is NULL or its struct_size too small");
  const size_t n = ferry_model_metadata_count(model);
  if (index >= n) return fail(FERRY_INVALID_ARGUMENT, "metadata index %zu, the model has %zu entries", index, n);
  fill(entries_of(model)->Get(static_cast<flatbuffers::uoffset_t>(index)), entry_out);
  return FERRY_OK;
}

extern "C" ferry_status ferry_model_metadata(const ferry_model* model, const char* key, ferry_metadata* entry_out) {
  if (!entry_fits(entry_out)) return fail(FERRY_INVALID_ARGUMENT, "entry_out is NULL or its struct_size too small");
  const fb::MetaEntry* e = nullptr;
  const ferry_status st = find(model, key, &e);
  if (st != FERRY_OK) return st;
  fill(e, entry_out);
  return FERRY_OK;
}

extern "C" ferry_status ferry_model_metadata_numbers(const ferry_model* model, const char* key, double* out,
                                                     size_t capacity) {
  if (!out) return fail(FERRY_INVALID_ARGUMENT, "out is NULL");
  const fb::MetaEntry* e = nullptr;
  const ferry_status st = find(model, key, &e);
  if (st != FERRY_OK) return st;
  if (e->type() != fb::MetaType::Numbers) {
    return fail(FERRY_INVALID_ARGUMENT, "metadata '%s' is text, not numbers", key);
  }
  const uint32_t n = e->numbers()->size();
  if (capacity < n) return fail(FERRY_INVALID_ARGUMENT, "metadata '%s' holds %u numbers, out has room for %zu", key, n, capacity);
  // Copied byte-wise: the model bytes need only be 4-byte aligned, so the
  // doubles may not be 8-byte aligned in memory.
  const uint8_t* p = e->numbers()->Data();
  for (uint32_t i = 0; i < n; ++i) {
    double v;
    memcpy(&v, p + size_t{i} * sizeof(double), sizeof(double));
    out[i] = flatbuffers::EndianScalar(v);
  }
  return FERRY_OK;
}
