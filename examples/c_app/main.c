/*
 * ferry from C: load a model file, run one sequence, run the golden
 * self-test stored in the file.
 *
 *   ferry_c_app MODEL.fb [STEPS]
 *
 * Memory is the application's: the model bytes, the model handle
 * (ferry_model_options.handle_memory) and the arenas are allocated here, once;
 * the runtime allocates nothing. Exit status 0 when the self-test passes.
 */
#include <ferry/ferry.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* alloc_aligned(size_t bytes) {
  /* C11 aligned_alloc wants a multiple of the alignment. */
  const size_t rounded = (bytes + FERRY_ALIGNMENT - 1) / FERRY_ALIGNMENT * FERRY_ALIGNMENT;
  return aligned_alloc(FERRY_ALIGNMENT, rounded ? rounded : FERRY_ALIGNMENT);
}

static void* read_file(const char* path, size_t* size_out) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  void* data = NULL;
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
    data = alloc_aligned((size_t)size);
    if (data && fread(data, 1, (size_t)size, f) != (size_t)size) {
      free(data);
      data = NULL;
    }
  }
  fclose(f);
  *size_out = size > 0 ? (size_t)size : 0;
  return data;
}

static int fail(const char* what, ferry_status status) {
  fprintf(stderr, "ferry_c_app: %s: %s: %s\n", what, ferry_status_string(status), ferry_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: ferry_c_app MODEL.fb [STEPS]\n");
    return 2;
  }
  const size_t steps = argc > 2 ? (size_t)strtoul(argv[2], NULL, 10) : 4;
  size_t size = 0;
  void* bytes = read_file(argv[1], &size);
  if (!bytes) {
    fprintf(stderr, "ferry_c_app: cannot read '%s'\n", argv[1]);
    return 1;
  }
  printf("ferry %s, model %s (%zu bytes)\n", ferry_version(), argv[1], size);

  /* The handle in our memory: ferry_model_load allocates nothing. */
  ferry_model_options options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.handle_memory_size = ferry_model_handle_size();
  options.handle_memory = alloc_aligned(options.handle_memory_size);
  ferry_model* model = NULL;
  ferry_status st = ferry_model_load(bytes, size, &options, &model);
  if (st != FERRY_OK) return fail("load", st);

  ferry_model_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ferry_model_get_info(model, &info);
  const size_t seq = info.has_time_axis ? (steps ? steps : 1) : 1;
  printf("input %zu features, output %zu features, %zu layers\n", info.input_size, info.output_size,
         info.num_layers);

  /* One run of batch 1 over `seq` steps of a ramp input. */
  ferry_session_options so;
  ferry_session_options_init(&so);
  so.max_batch = 1;
  so.max_seq = seq;
  size_t arena_bytes = 0;
  st = ferry_arena_size(model, so.max_batch, so.max_seq, &arena_bytes);
  if (st != FERRY_OK) return fail("arena size", st);
  void* arena = alloc_aligned(arena_bytes);
  ferry_session* session = NULL;
  st = ferry_session_init(model, &so, arena, arena_bytes, &session);
  if (st != FERRY_OK) return fail("session", st);
  size_t out_floats = 0;
  ferry_output_floats(model, 1, seq, &out_floats);
  float* input = malloc(seq * info.input_size * sizeof(float));
  float* output = malloc(out_floats * sizeof(float));
  for (size_t i = 0; i < seq * info.input_size; ++i) input[i] = (float)((int)(i % 17) - 8) / 8.0f;
  st = ferry_run(session, input, 1, seq, NULL, output, out_floats);
  if (st != FERRY_OK) return fail("run", st);
  printf("run   %zu step(s), arena %zu bytes, output:", seq, arena_bytes);
  for (size_t i = 0; i < out_floats && i < 8; ++i) printf(" %.6f", output[i]);
  printf("%s\n", out_floats > 8 ? " ..." : "");

  /* The golden vectors stored by ferry convert. */
  size_t test_bytes = 0;
  st = ferry_selftest_arena_size(model, &test_bytes);
  if (st != FERRY_OK) return fail("selftest arena size", st);
  void* test_arena = alloc_aligned(test_bytes);
  int passed = 0;
  float max_error = 0;
  st = ferry_selftest(model, FERRY_BACKEND_AUTO, test_arena, test_bytes, &passed, &max_error);
  if (st != FERRY_OK) return fail("selftest", st);
  printf("selftest max abs error %g: %s\n", (double)max_error, passed ? "PASS" : "FAIL");

  ferry_model_free(model); /* a no-op for a handle in caller memory */
  free(test_arena);
  free(output);
  free(input);
  free(arena);
  free(options.handle_memory);
  free(bytes);
  return passed ? 0 : 1;
}
