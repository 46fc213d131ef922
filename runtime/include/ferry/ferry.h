/*
 * ferry runtime — C API.
 *
 * Runs recurrent/linear networks (LSTM, GRU, RNN, Linear and activations)
 * stored in a ferry model file (`.fb`, made by `ferry convert`), on the
 * caller's memory. One header; every call returns a ferry_status; results come
 * back through `*_out` pointers placed last.
 *
 * Lifecycle
 *   ferry_model_load     verify the model bytes and build a view over them
 *   ferry_arena_size     exact bytes a session needs for (max_batch, max_seq)
 *   ferry_session_init   lay a session out in the caller's arena
 *   ferry_run            whole sequence          } any number of times,
 *   ferry_step           one time step, state    } no allocation
 *   ferry_state_get/set/reset                    }
 *   ferry_session_release  what a device backend holds beyond the arena
 *
 * Ownership (read this once)
 *   - The model bytes belong to the caller and must stay valid and unchanged
 *     for as long as the model or any session made from it is used. Weights
 *     are read in place: loading copies no weights.
 *   - The arena belongs to the caller and must outlive its session. A CPU
 *     session lives entirely inside its arena; there is nothing to free. A
 *     CUDA session also holds device memory, a stream and CUDA Graphs:
 *     ferry_session_release gives them back (calling it is harmless on any
 *     backend).
 *   - The model handle is allocated with malloc by ferry_model_load, unless
 *     ferry_model_options.handle_memory is given (then nothing is allocated);
 *     ferry_model_free releases it and never frees caller memory.
 *   - Many sessions may share one model; one session must not be used from two
 *     threads at once.
 *
 * Errors
 *   A malformed model file gives FERRY_INVALID_MODEL, never a crash or an
 *   abort. ferry_last_error() returns a message naming the field at fault for
 *   the last failing call on this thread.
 */
#ifndef FERRY_FERRY_H_
#define FERRY_FERRY_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ferry_status {
  FERRY_OK = 0,
  FERRY_INVALID_ARGUMENT = 1, /* a null pointer, a zero or too large size */
  FERRY_INVALID_MODEL = 2,    /* the model bytes fail verification */
  FERRY_UNSUPPORTED = 3,      /* valid, but not supported by this build */
  FERRY_ARENA_TOO_SMALL = 4,  /* ferry_arena_size() says how much is needed */
  FERRY_INVALID_STATE = 5,    /* call out of order, e.g. batch > max_batch */
} ferry_status;

/* "FERRY_OK", "FERRY_INVALID_MODEL", ... Never NULL. */
const char* ferry_status_string(ferry_status status);

/* Message for the last failing call on this thread ("" if none). */
const char* ferry_last_error(void);

/* Version of the library ("0.1.0") and of the model format it reads. */
const char* ferry_version(void);
/* It reads every format 1.x and 2.x file (2.x: a sequence output in another
 * layout than the input's, schema/ferry.fbs). */
#define FERRY_FORMAT_MAJOR 2
#define FERRY_FORMAT_MINOR 0
#define FERRY_FORMAT_MAJOR_OLDEST 1

/* Arena and handle memory must be aligned to this many bytes. */
#define FERRY_ALIGNMENT 64

/* FERRY_MODEL_HANDLE_BYTES and FERRY_ARENA_BYTES_CPU(): the handle and a
 * CPU session's arena as compile-time constants (ferry_sizes.h). */
#include "ferry_sizes.h"

typedef struct ferry_model ferry_model;
typedef struct ferry_session ferry_session;

/* ---------------------------------------------------------------- model -- */

typedef struct ferry_model_options {
  size_t struct_size;  /* sizeof(ferry_model_options) */
  /* Optional: where the model handle lives (no allocation then). At least
   * ferry_model_handle_size() bytes, FERRY_ALIGNMENT-aligned. */
  void* handle_memory;
  size_t handle_memory_size;
} ferry_model_options;

/* Bytes a model handle needs when placed in caller memory. */
size_t ferry_model_handle_size(void);

/* Verifies `data` (the whole model file, 4-byte aligned at least; 64 for the
 * SIMD kernels' best speed) and returns a handle viewing it. `options` may be
 * NULL. */
ferry_status ferry_model_load(const void* data, size_t size,
                              const ferry_model_options* options,
                              ferry_model** model_out);

/* Releases the handle (if ferry_model_load allocated it). NULL is a no-op. */
void ferry_model_free(ferry_model* model);

/* Where a sequence's axes are: the input's layout, and the output's
 * (ferry_model_info.output_layout). */
typedef enum ferry_layout {
  FERRY_LAYOUT_TIME_MAJOR = 0,     /* [T,B,F] */
  FERRY_LAYOUT_BATCH_FIRST = 1,    /* [B,T,F] */
  FERRY_LAYOUT_CHANNELS_FIRST = 2, /* [B,F,T] (what nn.Conv1d takes) */
} ferry_layout;

typedef struct ferry_model_info {
  size_t struct_size;      /* set by the caller: sizeof(ferry_model_info) */
  size_t input_size;       /* features per time step */
  size_t output_size;      /* features of the output */
  int batch_first;         /* 1: [B,T,F] input (and output, see output_layout); 0: [T,B,F] */
  int output_is_sequence;  /* 0 when the chain contains `last`: output [B,F] */
  int has_time_axis;       /* 0 for a Linear-only model: input [B,F] */
  int streamable;          /* 1 if ferry_step is supported (no bidirectional, convs causal) */
  size_t num_layers;       /* elements of the chain */
  size_t state_floats;     /* floats of recurrent state per batch sample */
  /* (0.2) Filled when struct_size covers them. */
  int channels_first;      /* 1: [B,F,T] input (and sequence output, see output_layout)
                              (what nn.Conv1d takes) */
  int input_is_tokens;     /* 1: int32 token ids, ferry_run_tokens / ferry_step_tokens */
  /* (0.3) Filled when struct_size covers it. */
  size_t min_seq;          /* fewest steps ferry_run accepts: a Conv1d without enough
                              padding needs its kernel span (1 for other models) */
  /* (0.4) Filled when struct_size covers it. */
  int output_layout;       /* ferry_layout of ferry_run's output when output_is_sequence:
                              the input's (batch_first / channels_first) unless the model
                              returns its sequence transposed ([B,F,T] in, [B,T,F] out).
                              A [B,F] output (and ferry_step's) has no time axis. */
} ferry_model_info;

ferry_status ferry_model_get_info(const ferry_model* model, ferry_model_info* info_out);

/* ------------------------------------------------------------- metadata -- */

/* What the application needs beside the weights, stored in the model file by
 * `ferry convert --meta KEY=VALUE` (class labels, a sample rate, a feature
 * normalisation): text, or numbers (a scalar or an array of rank <= 4). The
 * loader has checked every entry (keys unique, 1 to 64 characters of
 * [A-Za-z0-9_.-], text valid UTF-8, sizes within the limits). */
typedef enum ferry_metadata_type {
  FERRY_METADATA_TEXT = 0,
  FERRY_METADATA_NUMBERS = 1,
} ferry_metadata_type;

#define FERRY_METADATA_MAX_RANK 4

typedef struct ferry_metadata {
  size_t struct_size;  /* set by the caller: sizeof(ferry_metadata) */
  const char* key;     /* NUL-terminated, in the model bytes */
  int type;            /* ferry_metadata_type */
  const char* text;    /* TEXT: UTF-8, NUL-terminated, in the model bytes; NULL for NUMBERS */
  size_t text_bytes;   /* TEXT: its bytes, without the NUL */
  size_t count;        /* NUMBERS: how many (1 for a scalar); read them with ferry_model_metadata_numbers */
  size_t rank;         /* NUMBERS: 0 for a scalar, else the dimensions in shape[] */
  size_t shape[FERRY_METADATA_MAX_RANK];
} ferry_metadata;

/* Entries in the model (0 for NULL or a model without metadata). */
size_t ferry_model_metadata_count(const ferry_model* model);

/* The entry at `index` (0 .. count-1), in the order the converter stored
 * them (as given on its command line). */
ferry_status ferry_model_metadata_at(const ferry_model* model, size_t index, ferry_metadata* entry_out);

/* The entry named `key`: FERRY_INVALID_ARGUMENT, naming the keys the model
 * has, when there is none. */
ferry_status ferry_model_metadata(const ferry_model* model, const char* key, ferry_metadata* entry_out);

/* Copies the numbers of entry `key` (row-major) into `out`, which holds
 * `capacity` doubles (at least the entry's count). FERRY_INVALID_ARGUMENT
 * for a text entry, a missing key or too small a buffer. */
ferry_status ferry_model_metadata_numbers(const ferry_model* model, const char* key, double* out, size_t capacity);

/* -------------------------------------------------------------- session -- */

/* Exact arena bytes for a session that runs batches up to `max_batch` and
 * sequences up to `max_seq` steps (max_seq 1 for streaming only), with the
 * default options (backend auto). */
ferry_status ferry_arena_size(const ferry_model* model, size_t max_batch,
                              size_t max_seq, size_t* bytes_out);

/* Backends. Every one computes the same function (each is tested against
 * `reference`); they differ in speed and in rounding.
 *   REFERENCE  portable scalar C++, the oracle; runs any model file.
 *   SIMD       AVX2+FMA (x86-64) or NEON (Arm) kernels on the weights the
 *              converter packed for them (model format >= 1.1).
 *   XNNPACK    XNNPACK's GEMM for the input products of many time steps at
 *              once and for Linear layers, the recurrence on SIMD.
 *   AUTO       per layer: SIMD where the CPU and the file allow, else
 *              REFERENCE; XNNPACK for large products where it is faster and
 *              gives bit-identical results (checked at init).
 *   CUDA       the whole chain on an NVIDIA GPU (FERRY_CUDA builds; see
 *              README "CUDA backend"): Panel8 f32 weights uploaded once,
 *              the recurrence as a persistent kernel or replayed from CUDA
 *              Graphs, the state resident on the GPU. Within 1e-5 of
 *              REFERENCE; ferry_step equals ferry_run bit for bit. Errors
 *              of the CUDA runtime (no device, no kernel image for this
 *              GPU, out of device memory) make ferry_session_init return
 *              FERRY_UNSUPPORTED, a failing kernel or copy makes the call
 *              return FERRY_INVALID_STATE (and every later call on that
 *              session); ferry_last_error() carries the CUDA error text.
 * A backend that cannot run here makes ferry_session_init (and
 * ferry_session_arena_size) return FERRY_UNSUPPORTED with a message.
 * On SIMD, XNNPACK and AUTO, the output does not depend on how a sequence is
 * split into ferry_step calls nor on the number of threads: bit for bit.
 * NaN inputs propagate as NaN on REFERENCE and SIMD; XNNPACK's output clamp
 * turns the NaNs of the products it computes into -inf. */
typedef enum ferry_backend {
  FERRY_BACKEND_AUTO = 0,
  FERRY_BACKEND_REFERENCE = 1,
  FERRY_BACKEND_SIMD = 2,
  FERRY_BACKEND_XNNPACK = 3,
  FERRY_BACKEND_CUDA = 4,
} ferry_backend;

/* "auto", "reference", "simd", "xnnpack", "cuda"; "unknown" for any other
 * value. Never NULL. */
const char* ferry_backend_name(ferry_backend backend);

/* The backend named `name` (as ferry_backend_name spells it). Returns
 * FERRY_INVALID_ARGUMENT, with the names in the message, for any other. */
ferry_status ferry_backend_from_name(const char* name, ferry_backend* backend_out);

/* Device memory for a device backend (CUDA), when the caller wants to
 * provide it (a pool, a carve-out, memory shared with other work). NULL in
 * ferry_session_options: the backend uses cudaMalloc and cudaFree. */
typedef struct ferry_device_allocator {
  void* context;  /* passed back to both functions */
  /* Returns `bytes` of device memory aligned to `alignment` (256), or NULL.
   * Called once, by ferry_session_init, with ferry_session_memory's
   * device bytes. */
  void* (*allocate)(void* context, size_t bytes, size_t alignment);
  /* Gives back what allocate returned; called once, by
   * ferry_session_release (or by a ferry_session_init that fails later). */
  void (*deallocate)(void* context, void* memory, size_t bytes);
} ferry_device_allocator;

/* How a device backend moves inputs and outputs.
 *   AUTO       zero copy on an integrated GPU (Jetson) that can map host
 *              memory, else COPY. The environment variable FERRY_CUDA_IO
 *              ("copy" or "zero_copy") overrides AUTO, for testing.
 *   COPY       one host-to-device copy (descriptor, lengths and input
 *              together) and one device-to-host copy of the output per call.
 *   ZERO_COPY  the input and output buffers of the session's arena are
 *              page-locked and mapped (cudaHostRegister) at init and the
 *              kernels read and write them in place; on a discrete GPU
 *              that is slow (every access crosses PCIe) but runs, which is
 *              how the Jetson path is tested on a data-centre GPU. */
typedef enum ferry_device_io {
  FERRY_DEVICE_IO_AUTO = 0,
  FERRY_DEVICE_IO_COPY = 1,
  FERRY_DEVICE_IO_ZERO_COPY = 2,
} ferry_device_io;

/* What ferry_run / ferry_step do with the calling thread's floating-point
 * mode. Denormal numbers (|x| < 1.2e-38) make x86 and Arm cores take slow
 * micro-code paths, and a recurrence that decays towards zero makes many:
 * ferry computes with them flushed to zero (x86 MXCSR.FTZ+DAZ, Arm FPCR.FZ).
 *   FERRY_FP_FLUSH   (default) the first call on a thread turns flushing on
 *                    and leaves it on: afterwards a call only checks it (no
 *                    write: a write costs ~15 ns on x86, a fifth of a small
 *                    step; on x86 the check is one multiply, not a read of
 *                    MXCSR, which waits for the float work in flight: ~5 ns
 *                    of a small step). The thread's other float code then
 *                    also flushes denormals; its rounding mode is never
 *                    changed. On x86 the check needs the denormal and
 *                    underflow exceptions masked, as they are unless the
 *                    program unmasks them (feenableexcept): a program that
 *                    unmasks them uses FERRY_FP_RESTORE or FERRY_FP_CALLER.
 *   FERRY_FP_RESTORE flushing on for the call, the caller's mode restored
 *                    before it returns (the 0.1 behaviour; ~15 ns a call when
 *                    the caller does not flush itself).
 *   FERRY_FP_CALLER  ferry never touches the mode; results then depend on it
 *                    (denormal inputs and products are kept if the caller
 *                    keeps them) and steps may slow down near zero.
 * Results are bit-identical between FLUSH and RESTORE. */
typedef enum ferry_fp_mode {
  FERRY_FP_FLUSH = 0,
  FERRY_FP_RESTORE = 1,
  FERRY_FP_CALLER = 2,
} ferry_fp_mode;

/* Per-layer profiling (`ferry bench --per-layer`): a callback the CPU
 * backends call before and after each layer of the chain, on the thread that
 * called ferry_run / ferry_step, so the caller can read its own clock (a
 * cycle counter on a microcontroller) and attribute the time. `layer` is
 * the layer's index in the chain (ferry_model_info.num_layers of them, in
 * `ferry inspect`'s order); `end` is 0 before the layer and 1 after it. In
 * one call a layer is reported at most once, in chain order; one with
 * nothing to do may not be (an Identity, or `last` in a one-sample step of a
 * session whose step program skips it). Work outside the layers (the
 * input's and the output's layout) falls between them. The callback must not
 * call ferry on the same session. A session made without a profiler runs
 * exactly the code it ran before profiling existed (no test per layer or per
 * call); with one, the callbacks are the only difference (the same results,
 * bit for bit, and nothing allocated). The CUDA backend runs the chain as
 * one kernel or graph and refuses a profiler (FERRY_UNSUPPORTED). */
typedef struct ferry_profiler {
  void* context;  /* passed back to `layer` */
  void (*layer)(void* context, size_t layer, int end);
} ferry_profiler;

typedef struct ferry_session_options {
  size_t struct_size;  /* sizeof(ferry_session_options) */
  size_t max_batch;    /* >= 1 */
  size_t max_seq;      /* >= 1 */
  ferry_backend backend;
  /* Optional (NULL: everything runs on the calling thread): a pthreadpool_t
   * (<pthreadpool.h>) that ferry_run and ferry_step spread their work over.
   * Owned by the caller; must outlive the session; one session uses it from
   * one thread at a time. Work is split over outputs, never inside a sum
   * (a one-sample run through stacked LSTM / GRU / RNN layers: over the
   * layers, each a thread, a chunk of steps behind the one below; through
   * a bidirectional one: its two directions side by side), so
   * results are identical for any number of threads. Worker threads flush
   * denormals for the duration of the work, like the calling thread. The
   * CUDA backend does not use it. */
  void* threadpool;
  /* (0.2) The calling thread's floating-point mode (ferry_fp_mode). */
  ferry_fp_mode fp_mode;
  /* Device backends (FERRY_BACKEND_CUDA); the CPU backends ignore these.
   * Added in 0.2: a caller compiled against an older header passes a
   * smaller struct_size and gets the defaults. */
  const ferry_device_allocator* device_allocator;  /* NULL: cudaMalloc; must outlive the session */
  ferry_device_io device_io;                        /* FERRY_DEVICE_IO_AUTO */
  int device;                                       /* CUDA device ordinal, 0 */
  /* (0.5) Optional (NULL: none): per-layer callbacks (ferry_profiler); the
   * struct must outlive the session. */
  const ferry_profiler* profiler;
} ferry_session_options;

/* Fills defaults: max_batch 1, max_seq 1, backend auto, no thread pool,
 * FERRY_FP_FLUSH, no device allocator, device_io auto, device 0, no
 * profiler. */
void ferry_session_options_init(ferry_session_options* options);

/* Convenience for ferry_session_options.threadpool: a pthreadpool of
 * `threads` threads (0: one per core), or NULL when this runtime was built
 * without pthreadpool or the pool cannot be made. It allocates: make it
 * before the sessions that use it, free it with ferry_threadpool_destroy
 * after them. Any pthreadpool_t made otherwise works the same. */
void* ferry_threadpool_create(size_t threads);
void ferry_threadpool_destroy(void* threadpool);

/* Exact arena bytes for a session made with `options` (backend, batch and
 * sequence limits). With an XNNPACK backend this asks XNNPACK how much its
 * weight packing takes (a dry run that allocates and frees on the heap). */
ferry_status ferry_session_arena_size(const ferry_model* model,
                                      const ferry_session_options* options,
                                      size_t* bytes_out);

/* Exact memory of a session made with `options`: `host_bytes_out` gets the
 * arena bytes (what ferry_session_arena_size gives), `device_bytes_out` the
 * bytes of the one device allocation a device backend makes at init (0 for
 * the CPU backends). Either pointer may be NULL. The device bytes hold the
 * weights (uploaded once), the recurrent state and the working buffers; the
 * CUDA driver's own memory (context, module, graphs) is not included. */
ferry_status ferry_session_memory(const ferry_model* model,
                                  const ferry_session_options* options,
                                  size_t* host_bytes_out, size_t* device_bytes_out);

/* Lays a session out in `arena` (FERRY_ALIGNMENT-aligned, at least
 * ferry_session_arena_size() bytes for these options). The recurrent state
 * starts at zero. Everything the session will ever need is placed here,
 * XNNPACK's packed weights included; ferry_run and ferry_step allocate
 * nothing. A device backend also takes its device memory here (from
 * options->device_allocator or cudaMalloc), uploads the weights once and
 * creates its stream; ferry_session_release gives them back. */
ferry_status ferry_session_init(const ferry_model* model,
                                const ferry_session_options* options,
                                void* arena, size_t arena_size,
                                ferry_session** session_out);

/* Gives back what a session holds outside its arena: for the CUDA backend
 * its device memory, stream, CUDA Graphs and the page-locking of its
 * staging buffers. A no-op for the CPU backends (their sessions live
 * entirely in the arena). Afterwards the session must not be used (calls
 * on it return FERRY_INVALID_STATE where the backend can tell) and the
 * arena may be reused. NULL is a no-op. */
ferry_status ferry_session_release(ferry_session* session);

/* Runs a whole sequence. Denormals are flushed to zero (ferry_fp_mode says
 * how the calling thread's mode is treated). `input` holds batch*seq*input_size floats in the
 * model's layout ([B,T,I] batch-first, else [T,B,I]; [B,I] without a time
 * axis). `lengths` is NULL (every sample has `seq` steps) or `batch` values in
 * 1..seq: each sample's valid steps; outputs past a sample's length are zero,
 * `last` takes each sample's own last valid step. The run starts from the
 * session's state and leaves the final state there (call ferry_state_reset
 * between independent sequences). `output` receives
 * ferry_output_floats(batch, seq) floats; `output_capacity` is its size in
 * floats. A sequence output is in ferry_model_info.output_layout (the
 * input's layout, unless the model returns its sequence transposed). */
ferry_status ferry_run(ferry_session* session, const float* input,
                       size_t batch, size_t seq, const int32_t* lengths,
                       float* output, size_t output_capacity);

/* Runs one time step on `input` [B,I], carrying the state; `output` gets
 * [B,output_size]. Running T steps one by one gives exactly the output of the
 * whole-sequence run. FERRY_UNSUPPORTED, naming the layer, for a model with
 * a bidirectional layer or a Conv1d that looks ahead (only a causal conv,
 * padded on the left only, streams: its last inputs are its state). */
ferry_status ferry_step(ferry_session* session, const float* input, size_t batch,
                        float* output, size_t output_capacity);

/* The same for a model taking token ids (ferry_model_info.input_is_tokens,
 * a first Embedding layer): `tokens` holds batch*seq ids, [B,T] batch-first
 * else [T,B]. An id outside the embedding's rows is FERRY_INVALID_ARGUMENT,
 * checked before anything runs. */
ferry_status ferry_run_tokens(ferry_session* session, const int32_t* tokens,
                              size_t batch, size_t seq, const int32_t* lengths,
                              float* output, size_t output_capacity);
ferry_status ferry_step_tokens(ferry_session* session, const int32_t* tokens, size_t batch,
                               float* output, size_t output_capacity);

/* Floats of output for a run of (batch, seq): batch * output_size, times
 * the output's steps for a sequence output (seq, or what a strided or
 * unpadded Conv1d makes of it). FERRY_INVALID_ARGUMENT if `seq` is too short
 * for a conv's kernel. */
ferry_status ferry_output_floats(const ferry_model* model, size_t batch, size_t seq,
                                 size_t* floats_out);

/* State of every layer that has one, for `batch` samples, in chain order:
 * a recurrent layer [num_layers*D][B][H_out] hidden, then for LSTM
 * [num_layers*D][B][H] cell; a causal Conv1d [B][(kernel-1)*dilation][in]
 * (its last inputs, oldest first); mean / max pooling over time [B][F+1]
 * (the running sum or maximum, then the count of steps).
 * ferry_model_info.state_floats per sample. set is how h0/c0 are passed. */
ferry_status ferry_state_get(const ferry_session* session, size_t batch,
                             float* state_out, size_t capacity);
ferry_status ferry_state_set(ferry_session* session, size_t batch,
                             const float* state, size_t count);
ferry_status ferry_state_reset(ferry_session* session);

/* ------------------------------------------------------------- selftest -- */

/* The on-device conformance check (`ferry selftest`). `ferry convert` stores
 * golden vectors in the model: a seeded input (batch 1, a few steps) and the
 * output the reference backend gives for it, with a tolerance. ferry_selftest
 * runs that input on `backend` in the caller's arena and compares.
 * FERRY_UNSUPPORTED when the model holds no vectors (converted by an older
 * ferry). */

/* Arena bytes ferry_selftest needs on any backend this runtime can run here:
 * a session for the stored batch and sequence length, plus room for the
 * output. */
ferry_status ferry_selftest_arena_size(const ferry_model* model, size_t* bytes_out);

/* Returns FERRY_OK when the vectors ran, whatever the verdict: `passed_out`
 * (may be NULL) gets 1 when every output is within the stored tolerance,
 * `max_error_out` (may be NULL) the largest absolute error (+infinity when an
 * output is NaN). `arena` is FERRY_ALIGNMENT-aligned and at least
 * ferry_selftest_arena_size() bytes; nothing is allocated (beyond what
 * ferry_session_init does for `backend`). */
ferry_status ferry_selftest(const ferry_model* model, ferry_backend backend,
                            void* arena, size_t arena_size,
                            int* passed_out, float* max_error_out);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* FERRY_FERRY_H_ */
