// User metadata (schema/ferry.fbs, Model.metadata): the loader's checks
// (check_metadata, model/loader.cpp calls it) and the C API that reads the
// entries in place from the model bytes.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <string.h>

#include "common/status.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"
#include "model/loader.h"
#include "model/model.h"
#include "shared/metadata_rules.h"

namespace ferry {
namespace {

namespace fb = ::ferry::fb;

static_assert(meta::kMaxRank == FERRY_METADATA_MAX_RANK, "FERRY_METADATA_MAX_RANK");
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

ferry_status check_metadata(const fb::Model* m) {
  const auto* entries = m->metadata();
  if (!entries) return FERRY_OK;
  const uint32_t n = entries->size();
  if (n > meta::kMaxEntries) {
    return fail(FERRY_INVALID_MODEL, "metadata: %u entries, at most %zu", n, meta::kMaxEntries);
  }
  size_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const fb::MetaEntry* e = entries->Get(i);
    const flatbuffers::String* key = e->key();
    if (!key || !meta::key_ok(key->c_str(), key->size())) {
      return fail(FERRY_INVALID_MODEL, "metadata[%u]: the key is absent or not 1 to %zu characters of [A-Za-z0-9_.-]",
                  i, meta::kMaxKeyBytes);
    }
    for (uint32_t j = 0; j < i; ++j) {
      if (strcmp(entries->Get(j)->key()->c_str(), key->c_str()) == 0) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): the key is also metadata[%u]'s", i, key->c_str(), j);
      }
    }
    total += key->size();
    if (e->type() == fb::MetaType::Text) {
      const flatbuffers::String* text = e->text();
      if (!text || e->numbers() || e->shape()) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): a text entry holds text and nothing else", i,
                    key->c_str());
      }
      if (text->size() > meta::kMaxTextBytes) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): %u bytes of text, at most %zu", i, key->c_str(),
                    text->size(), meta::kMaxTextBytes);
      }
      size_t bad = 0;
      if (!meta::utf8_ok(reinterpret_cast<const uint8_t*>(text->data()), text->size(), &bad)) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): the text is not UTF-8 (byte %zu)", i, key->c_str(),
                    bad);
      }
      total += text->size();
    } else if (e->type() == fb::MetaType::Numbers) {
      const auto* numbers = e->numbers();
      if (!numbers || e->text()) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): a numbers entry holds numbers and nothing else", i,
                    key->c_str());
      }
      if (numbers->size() == 0 || numbers->size() > meta::kMaxNumbers) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): %u numbers, 1 to %zu", i, key->c_str(),
                    numbers->size(), meta::kMaxNumbers);
      }
      const uint32_t rank = e->shape() ? e->shape()->size() : 0;
      if (rank > meta::kMaxRank) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): rank %u, at most %zu", i, key->c_str(), rank,
                    meta::kMaxRank);
      }
      uint64_t product = 1;
      for (uint32_t d = 0; d < rank; ++d) {
        product *= e->shape()->Get(d);  // each factor < 2^32, at most 4 of them, capped below
        if (product > meta::kMaxNumbers) break;
      }
      if (product != numbers->size()) {
        return fail(FERRY_INVALID_MODEL, "metadata[%u] ('%s'): the shape holds %llu numbers, the entry %u", i,
                    key->c_str(), static_cast<unsigned long long>(product), numbers->size());
      }
      total += size_t{numbers->size()} * sizeof(double);
    } else {
      return fail(FERRY_UNSUPPORTED, "metadata[%u] ('%s'): unknown type %u (a newer format?)", i, key->c_str(),
                  static_cast<unsigned>(e->type()));
    }
    if (total > meta::kMaxTotalBytes) {
      return fail(FERRY_INVALID_MODEL, "metadata: more than %zu bytes in all", meta::kMaxTotalBytes);
    }
  }
  return FERRY_OK;
}

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
