// The model entry points of the C API: load (verify + view, no copy of the
// weights), free, info. The checks themselves are model/loader.h's.
#include "common/build_flags.h"  // first: the flags the numbers depend on
#include <stddef.h>
#include <stdlib.h>

#include <new>

#include "common/status.h"
#include "ferry/ferry.h"
#include "ferry/ferry_generated.h"
#include "model/loader.h"
#include "model/model.h"

// FERRY_MODEL_HANDLE_BYTES (ferry/ferry_sizes.h) is the handle, exactly.
static_assert(offsetof(ferry_model, layers) == FERRY_SIZEOF_HANDLE_HEAD, "FERRY_SIZEOF_HANDLE_HEAD (ferry_sizes.h)");
static_assert(sizeof(ferry::Layer) == FERRY_SIZEOF_LAYER, "FERRY_SIZEOF_LAYER (ferry_sizes.h) is sizeof(Layer)");
static_assert(sizeof(ferry::Cell) == FERRY_SIZEOF_CELL, "FERRY_SIZEOF_CELL (ferry_sizes.h) is sizeof(Cell)");
static_assert(sizeof(ferry_model) == FERRY_MODEL_HANDLE_BYTES, "FERRY_MODEL_HANDLE_BYTES (ferry_sizes.h)");

extern "C" size_t ferry_model_handle_size(void) { return sizeof(ferry_model); }

extern "C" ferry_status ferry_model_load(const void* data, size_t size,
                                         const ferry_model_options* options,
                                         ferry_model** model_out) {
  using namespace ferry;
  clear_error();
  if (!model_out) return fail(FERRY_INVALID_ARGUMENT, "model_out is NULL");
  *model_out = nullptr;
  if (!data) return fail(FERRY_INVALID_ARGUMENT, "data is NULL");
  if (size < 8) return fail(FERRY_INVALID_MODEL, "file is %zu bytes, too small for a model", size);
  if (size > FLATBUFFERS_MAX_BUFFER_SIZE) {
    return fail(FERRY_INVALID_MODEL, "file is %zu bytes, above the format's 2 GiB limit", size);
  }
  if (reinterpret_cast<uintptr_t>(data) % alignof(float) != 0) {
    return fail(FERRY_INVALID_ARGUMENT, "model bytes must be at least 4-byte aligned in memory");
  }
  const uint8_t* bytes = static_cast<const uint8_t*>(data);
  ferry_status status = verify_model_bytes(bytes, size);
  if (status != FERRY_OK) return status;

  void* memory = nullptr;
  bool owned = false;
  if (options && options->struct_size >= sizeof(ferry_model_options) && options->handle_memory) {
    if (options->handle_memory_size < sizeof(ferry_model) ||
        reinterpret_cast<uintptr_t>(options->handle_memory) % alignof(ferry_model) != 0) {
      return fail(FERRY_INVALID_ARGUMENT, "handle_memory: needs %zu bytes, %zu-byte aligned",
                  sizeof(ferry_model), alignof(ferry_model));
    }
    memory = options->handle_memory;
  } else {
    memory = malloc(sizeof(ferry_model));
    if (!memory) return fail(FERRY_INVALID_ARGUMENT, "out of memory for the model handle");
    owned = true;
  }
  ferry_model* model = new (memory) ferry_model();
  model->bytes = bytes;
  model->size = size;
  model->owned_handle = owned;
  status = build_model_view(model);
  if (status != FERRY_OK) {
    if (owned) free(memory);
    return status;
  }
  *model_out = model;
  return FERRY_OK;
}

extern "C" void ferry_model_free(ferry_model* model) {
  if (model && model->owned_handle) free(model);
}

extern "C" ferry_status ferry_model_get_info(const ferry_model* model, ferry_model_info* info) {
  using namespace ferry;
  if (!model || !info) return fail(FERRY_INVALID_ARGUMENT, "model or info_out is NULL");
  // Callers compiled against an older header pass a smaller struct: fill
  // what it has.
  constexpr size_t kInfoV1Size = offsetof(ferry_model_info, channels_first);
  if (info->struct_size < kInfoV1Size) {
    return fail(FERRY_INVALID_ARGUMENT, "info_out->struct_size must be sizeof(ferry_model_info)");
  }
  info->input_size = model->input_size;
  info->output_size = model->output_size;
  info->batch_first = model->batch_first;
  info->output_is_sequence = model->output_is_sequence;
  info->has_time_axis = model->has_time_axis;
  info->streamable = model->streamable;
  info->num_layers = model->num_layers;
  info->state_floats = model->state_floats;
  if (info->struct_size >= offsetof(ferry_model_info, input_is_tokens) + sizeof(int)) {
    info->channels_first = model->channels_first;
    info->input_is_tokens = model->input_is_tokens;
  }
  if (info->struct_size >= offsetof(ferry_model_info, min_seq) + sizeof(size_t)) {
    info->min_seq = min_input_steps(model);
  }
  if (info->struct_size >= offsetof(ferry_model_info, output_layout) + sizeof(int)) {
    info->output_layout = model->output_layout;
  }
  return FERRY_OK;
}
