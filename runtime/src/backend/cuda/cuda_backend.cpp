// The CUDA backend's entry (backend/backend.h), in builds with FERRY_CUDA:
// the CUDA runtime calls around the plain C++ of plan.h (what goes where)
// and executor.h (what runs per call), and the kernels of kernels.cu.
//
// Every CUDA call is checked. A failure before the session exists (no
// device, no kernel image for it, no device memory) is FERRY_UNSUPPORTED; a
// failure of a copy or kernel during a call is FERRY_INVALID_STATE and marks
// the session broken (its state may be half-updated), so every later call
// on it says so instead of computing from it. ferry_last_error() carries
// cudaGetErrorString's text and the error's name.
//
// Control block (in the arena after the ferry_session header): CudaSession,
// then the cells' CellRuntime, then the staging block (plan.h); with
// FERRY_CUDA_STEP=resident also the resident kernel's host regions (its
// mailbox's page, the step program and the cells' arguments as recorded),
// and a device region after the session's (ResidentRegions).
//
// The resident streaming kernel (FERRY_CUDA_STEP=resident, off by
// default): at the first ferry_step it is launched on a stream of its own
// and stays; each ferry_step stages the call, rings the mailbox and waits
// for the reply (mailbox.h), with no launch, copy or other driver call. A
// ferry_run stops it first (the sequence's persistent kernels need the
// SMs), and the next ferry_step starts it again. State copies run beside
// it on the session's stream while it waits between steps. Where the plan
// (resident.h) or the step program (resident_program.h) does not fit, or
// the occupancy API disagrees, the session keeps launched steps.
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <new>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/executor.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mailbox.h"
#include "backend/cuda/plan.h"
#include "backend/cuda/resident.h"
#include "backend/cuda/resident_program.h"
#include "common/status.h"

#ifndef FERRY_CUDA_ARCHITECTURES
#define FERRY_CUDA_ARCHITECTURES "unknown"
#endif

namespace ferry {
namespace cuda {
namespace {

struct CudaSession {
  ExecState x;
  DeviceCaps caps;
  int device = 0;
  cudaStream_t stream = nullptr;
  const ferry_device_allocator* allocator = nullptr;  // the caller's, or null: cudaMalloc
  void* device_memory = nullptr;
  size_t device_bytes = 0;
  void* registered = nullptr;  // the page-locked, mapped staging block (zero copy)
  bool released = false;
  ferry_status broken = FERRY_OK;  // the first failed CUDA call of a run or state copy
  char broken_message[256] = {};
  ferry_status state_status = FERRY_OK;
  // The resident streaming kernel.
  bool resident = false;           // FERRY_CUDA_STEP=resident, and it fits
  bool resident_running = false;
  bool resident_stuck = false;     // a stop that was not confirmed: nothing it may write is given back
  char resident_note[160] = {};    // why a session that asked for it steps with launches
  cudaStream_t resident_stream = nullptr;
  Mailbox* mailbox = nullptr;      // host view: its page of the arena, registered and mapped
  MailboxHost mail;
  ResidentArgs args{};
  uint32_t resident_blocks = 0;
  size_t resident_shared = 0;
};

// Where the resident kernel's regions lie (plan_regions): host offsets in
// the arena, a device offset in the session's allocation.
struct ResidentRegions {
  size_t mailbox_region = 0;  // two pages: a page-aligned one inside is registered
  size_t program = 0, program_capacity = 0;  // ProgramOp[program_capacity]
  size_t cells = 0;                          // ResidentCellArgs[num_cells]
  size_t device = 0;  // [program][cells][CallDesc][request: 4 uint32], each 256-aligned
  size_t device_cells = 0, device_desc = 0, device_request = 0;
};

CudaSession* cuda_of(const ferry_session* s) { return static_cast<CudaSession*>(s->impl); }

// "<what>: <cudaGetErrorString> (<error name>)"; `what` says where ("backend
// cuda: ..." before a session exists, "cuda: ..." after).
ferry_status cuda_fail(ferry_status status, const char* what, cudaError_t e) {
  return fail(status, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

// The session's device for the duration of a call; the caller's current
// device comes back afterwards.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    status_ = saved_ == device ? cudaSuccess : cudaSetDevice(device);
  }
  ~DeviceScope() {
    if (saved_ >= 0) cudaSetDevice(saved_);
  }
  cudaError_t status() const { return status_; }

 private:
  int saved_ = -1;
  cudaError_t status_ = cudaSuccess;
};

ferry_status query_caps(int device, DeviceCaps* caps, char* name, size_t name_size) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return cuda_fail(FERRY_UNSUPPORTED, "backend cuda: no usable CUDA device (cudaGetDeviceCount)", e);
  if (count <= 0) return fail(FERRY_UNSUPPORTED, "backend cuda: no CUDA device is visible");
  if (device >= count) {
    return fail(FERRY_INVALID_ARGUMENT, "backend cuda: options->device is %d, this machine has %d CUDA device(s)",
                device, count);
  }
  cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) {
    return cuda_fail(FERRY_UNSUPPORTED, "backend cuda: cudaGetDeviceProperties", e);
  }
  snprintf(name, name_size, "%s", prop.name);
  struct Attribute {
    cudaDeviceAttr attr;
    int value;
  } attrs[] = {
      {cudaDevAttrComputeCapabilityMajor, 0},        {cudaDevAttrComputeCapabilityMinor, 0},
      {cudaDevAttrMultiProcessorCount, 0},           {cudaDevAttrMaxSharedMemoryPerBlockOptin, 0},
      {cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0}, {cudaDevAttrIntegrated, 0},
      {cudaDevAttrCanMapHostMemory, 0},              {cudaDevAttrHostRegisterSupported, 0},
      {cudaDevAttrCooperativeLaunch, 0},
  };
  for (Attribute& a : attrs) {
    if ((e = cudaDeviceGetAttribute(&a.value, a.attr, device)) != cudaSuccess) {
      return cuda_fail(FERRY_UNSUPPORTED, "backend cuda: cudaDeviceGetAttribute", e);
    }
  }
  caps->cc_major = attrs[0].value;
  caps->cc_minor = attrs[1].value;
  caps->sm_count = static_cast<uint32_t>(attrs[2].value);
  caps->shared_per_block_optin = static_cast<size_t>(attrs[3].value);
  caps->shared_per_sm = static_cast<size_t>(attrs[4].value);
  caps->integrated = attrs[5].value != 0;
  caps->can_map_host_memory = attrs[6].value != 0;
  caps->host_register_supported = attrs[7].value != 0;
  caps->cooperative_launch = attrs[8].value != 0;
  const long page = sysconf(_SC_PAGESIZE);
  caps->host_page_size = page > 0 ? static_cast<size_t>(page) : 4096;
  return FERRY_OK;
}

// Everything probe checks, and the capabilities and I/O path it found.
ferry_status examine(const ferry_model* m, const SessionConfig& config, DeviceCaps* caps, bool* zero_copy,
                     StepMode* mode) {
  char name[256] = {};
  ferry_status st = query_caps(config.device, caps, name, sizeof(name));
  if (st != FERRY_OK) return st;
  DeviceScope scope(config.device);
  if (scope.status() != cudaSuccess) return cuda_fail(FERRY_UNSUPPORTED, "backend cuda: cudaSetDevice", scope.status());
  const cudaError_t e = check_kernel_image();
  if (e != cudaSuccess) {
    return fail(FERRY_UNSUPPORTED,
                "backend cuda: this build has no kernel image for %s (sm_%d%d); it was built for "
                "CMAKE_CUDA_ARCHITECTURES=%s: %s (%s)",
                name, caps->cc_major, caps->cc_minor, FERRY_CUDA_ARCHITECTURES, cudaGetErrorString(e),
                cudaGetErrorName(e));
  }
  if ((st = check_model(m, config, *caps)) != FERRY_OK) return st;
  if ((st = choose_io(*caps, config.device_io, getenv("FERRY_CUDA_IO"), zero_copy)) != FERRY_OK) return st;
  return choose_step(*caps, config.device_io, getenv("FERRY_CUDA_STEP"), mode, zero_copy);
}

size_t align_device(size_t n) { return (n + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign; }

ferry_status plan_regions(const ferry_model* m, const SessionConfig& config, const DeviceCaps& caps, bool resident,
                          ArenaPlan* arena, DeviceLayout* dev, HostLayout* host, ResidentRegions* rr) {
  ferry_status st = plan_device(m, config.max_batch, config.max_seq, dev, nullptr);
  if (st != FERRY_OK) return st;
  if ((st = plan_host(m, config.max_batch, config.max_seq, *dev, caps.host_page_size, sizeof(CudaSession),
                      sizeof(CellRuntime), arena, host)) != FERRY_OK) {
    return st;
  }
  if (!resident) return FERRY_OK;
  rr->program_capacity = program_capacity(m);
  rr->mailbox_region = arena->reserve(2 * caps.host_page_size);
  rr->program = arena->reserve(rr->program_capacity * sizeof(ProgramOp));
  rr->cells = arena->reserve(size_t{m->num_cells} * sizeof(ResidentCellArgs));
  rr->device = align_device(dev->total);
  rr->device_cells = align_device(rr->device + rr->program_capacity * sizeof(ProgramOp));
  rr->device_desc = align_device(rr->device_cells + size_t{m->num_cells} * sizeof(ResidentCellArgs));
  rr->device_request = align_device(rr->device_desc + sizeof(CallDesc));
  dev->total = align_device(rr->device_request + 4 * sizeof(uint32_t));
  return arena->overflowed() ? fail(FERRY_INVALID_ARGUMENT, "cuda: the session's arena size overflows") : FERRY_OK;
}

// ------------------------------------------------------- device ops --

ferry_status op_to_device(void* ctx, void* dst, const void* src, size_t bytes) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<CudaSession*>(ctx)->stream);
  return e == cudaSuccess ? FERRY_OK : cuda_fail(FERRY_INVALID_STATE, "cuda: copy to the device (cudaMemcpyAsync)", e);
}

ferry_status op_to_host(void* ctx, void* dst, const void* src, size_t bytes) {
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, static_cast<CudaSession*>(ctx)->stream);
  return e == cudaSuccess ? FERRY_OK : cuda_fail(FERRY_INVALID_STATE, "cuda: copy from the device (cudaMemcpyAsync)", e);
}

ferry_status op_zero(void* ctx, void* dst, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(dst, 0, bytes, static_cast<CudaSession*>(ctx)->stream);
  return e == cudaSuccess ? FERRY_OK : cuda_fail(FERRY_INVALID_STATE, "cuda: cudaMemsetAsync", e);
}

ferry_status launched(cudaError_t e, const char* kernel) {
  return e == cudaSuccess ? FERRY_OK : cuda_fail(FERRY_INVALID_STATE, kernel, e);
}

ferry_status op_copy(void* ctx, void* dst, const void* src, size_t bytes) {
  const cudaError_t e =
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, static_cast<CudaSession*>(ctx)->stream);
  return e == cudaSuccess ? FERRY_OK : cuda_fail(FERRY_INVALID_STATE, "cuda: copy on the device (cudaMemcpyAsync)", e);
}

cudaStream_t stream_of(void* ctx) { return static_cast<CudaSession*>(ctx)->stream; }

// The kernel names of launch errors, by weight type (WeightType order).
const char* const kGemmNames[kWeightTypes] = {"cuda: launch of gemm_f32_panel8", "cuda: launch of gemm_f16_panel8",
                                              "cuda: launch of gemm_i8_panel8x4", "cuda: launch of gemm_i4_panel8x8q4"};
const char* const kPersistentNames[kWeightTypes] = {
    "cuda: cooperative launch of recurrent_f32_panel8_persistent",
    "cuda: cooperative launch of recurrent_f16_panel8_persistent",
    "cuda: cooperative launch of recurrent_i8_panel8x4_persistent",
    "cuda: cooperative launch of recurrent_i4_panel8x8q4_persistent"};

const char* name_of(const char* const (&names)[kWeightTypes], int32_t type) {
  return type >= 0 && type < kWeightTypes ? names[type] : names[0];
}

ferry_status op_gemm(void* ctx, const GemmParams& p) {
  return launched(launch_gemm(p, stream_of(ctx)), name_of(kGemmNames, p.w.type));
}

ferry_status op_quantize(void* ctx, const QuantizeParams& p) {
  return launched(launch_quantize(p, stream_of(ctx)), "cuda: launch of quantize_rows");
}

ferry_status op_conv(void* ctx, const ConvParams& p) {
  return launched(launch_conv(p, stream_of(ctx)), "cuda: launch of gemm_f32_panel8 (Conv1d patches)");
}

ferry_status op_conv_state(void* ctx, const ConvParams& p) {
  return launched(launch_conv_state(p, stream_of(ctx)), "cuda: launch of conv_state_f32");
}

ferry_status op_recurrent(void* ctx, const CellRuntime& cell, StepLaunch how) {
  CudaSession* cs = static_cast<CudaSession*>(ctx);
  switch (how) {
    case StepLaunch::kPersistent:
      return launched(launch_recurrent_persistent(cell.resident, cell.recurrence.resident.blocks,
                                                  cell.recurrence.resident_shared, cs->stream),
                      name_of(kPersistentNames, cell.resident.w_hh.type));
    case StepLaunch::kGraphMany:
      return launched(cudaGraphLaunch(static_cast<cudaGraphExec_t>(cell.graph_many), cs->stream),
                      "cuda: cudaGraphLaunch (steps of a recurrent cell)");
    case StepLaunch::kGraphOne:
      break;
  }
  return launched(cudaGraphLaunch(static_cast<cudaGraphExec_t>(cell.graph_one), cs->stream),
                  "cuda: cudaGraphLaunch (one step of a recurrent cell)");
}

ferry_status op_pointwise(void* ctx, const OpParams& op, float* x, size_t rows) {
  return launched(launch_pointwise(op, x, rows, stream_of(ctx)), "cuda: launch of pointwise_f32");
}

ferry_status op_rows(void* ctx, const OpParams& op, float* x, size_t rows) {
  return launched(launch_rows(op, x, rows, stream_of(ctx)), "cuda: launch of rows_f32");
}

ferry_status op_add(void* ctx, float* x, const float* y, size_t n) {
  return launched(launch_add(x, y, n, stream_of(ctx)), "cuda: launch of add_f32");
}

ferry_status op_last(void* ctx, const LastParams& p) {
  return launched(launch_last(p, stream_of(ctx)), "cuda: launch of last_f32");
}

ferry_status op_pool(void* ctx, const PoolParams& p) {
  return launched(launch_pool(p, stream_of(ctx)), "cuda: launch of pool_f32");
}

ferry_status op_embed(void* ctx, const EmbedParams& p) {
  return launched(launch_embed(p, stream_of(ctx)), "cuda: launch of embed_f32");
}

ferry_status op_ingest(void* ctx, const IngestParams& p) {
  return launched(launch_ingest(p, stream_of(ctx)), "cuda: launch of ingest_f32");
}

ferry_status op_emit(void* ctx, const EmitParams& p) {
  return launched(launch_emit(p, stream_of(ctx)), "cuda: launch of emit_f32");
}

ferry_status op_finish(void* ctx) {
  const cudaError_t e = cudaStreamSynchronize(static_cast<CudaSession*>(ctx)->stream);
  return e == cudaSuccess ? FERRY_OK
                          : cuda_fail(FERRY_INVALID_STATE, "cuda: a kernel or copy of this call failed (cudaStreamSynchronize)", e);
}

const DeviceOps kCudaOps = {op_to_device, op_to_host,  op_copy,      op_zero,  op_gemm,  op_quantize,
                            op_conv,      op_conv_state, op_recurrent, op_pointwise, op_rows, op_add,
                            op_last,      op_pool,     op_embed,     op_ingest, op_emit, op_finish};

// ------------------------------------------------------------ session --

// Gives back everything init acquired, in reverse order; never sets an
// error message (it also runs after a failure whose message must stay).
void stop_resident(CudaSession* cs);

void release_resources(CudaSession* cs) {
  DeviceScope scope(cs->device);
  stop_resident(cs);
  if (cs->resident_stuck) {
    // The kernel did not confirm its stop: it may still write the device
    // memory and the mapped pages, so they are not given back (a leak,
    // not a use after free); the rest goes, and so does its entry in the
    // table stopped at exit (the arena holding it is the caller's again).
    cs->mail.abandon();
    resident_unregister(&cs->mail);
    cudaGetLastError();
    cs->released = true;
    return;
  }
  if (cs->resident_stream) cudaStreamDestroy(cs->resident_stream);
  cs->resident_stream = nullptr;
  if (cs->mailbox) cudaHostUnregister(cs->mailbox);
  cs->mailbox = nullptr;
  if (cs->stream) cudaStreamSynchronize(cs->stream);
  for (uint32_t c = 0; cs->x.cells && c < cs->x.model->num_cells; ++c) {
    CellRuntime& cell = cs->x.cells[c];
    if (cell.graph_one) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(cell.graph_one));
    if (cell.graph_many) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(cell.graph_many));
    cell.graph_one = cell.graph_many = nullptr;
  }
  if (cs->stream) cudaStreamDestroy(cs->stream);
  cs->stream = nullptr;
  if (cs->registered) cudaHostUnregister(cs->registered);
  cs->registered = nullptr;
  if (cs->device_memory) {
    if (cs->allocator) {
      cs->allocator->deallocate(cs->allocator->context, cs->device_memory, cs->device_bytes);
    } else {
      cudaFree(cs->device_memory);
    }
  }
  cs->device_memory = nullptr;
  cudaGetLastError();  // leave no error of ours behind for the caller's next CUDA call
  cs->released = true;
}

// ---------------------------------------------------- resident kernel --

// The mailbox's probe: whether the resident kernel still runs (its stream
// is busy while it does).
ferry_status resident_alive(void* ctx) {
  CudaSession* cs = static_cast<CudaSession*>(ctx);
  const cudaError_t e = cudaStreamQuery(cs->resident_stream);
  if (e == cudaErrorNotReady) return FERRY_OK;
  if (e == cudaSuccess) return fail(FERRY_INVALID_STATE, "the kernel has ended without replying");
  return cuda_fail(FERRY_INVALID_STATE, "the kernel failed", e);
}

void stop_all_at_exit() { resident_stop_all(1000000); }

// Stops the kernel and waits for it; a stop that is not confirmed within
// the bound leaves the session stuck (release keeps its memory).
void stop_resident(CudaSession* cs) {
  if (!cs->resident_running) return;
  if (cs->mail.stop(1000000) != FERRY_OK) {
    cs->resident_stuck = true;
    return;
  }
  resident_unregister(&cs->mail);
  cudaStreamSynchronize(cs->resident_stream);  // it returns after its reply
  cs->resident_running = false;
}

ferry_status start_resident(CudaSession* cs) {
  if (cs->resident_running) return FERRY_OK;
  memset(cs->mailbox, 0, sizeof(Mailbox));  // no kernel reads it now
  WaitPolicy policy;  // spin 50 us, then yield and nap; a 2 s bound
  MailboxProbe probe;
  probe.check = resident_alive;
  probe.ctx = cs;
  cs->mail.init(cs->mailbox, policy, probe);
  if (!resident_register(&cs->mail)) {
    return fail(FERRY_INVALID_STATE, "cuda: more than %d sessions run the resident kernel at once",
                kMaxResidentSessions);
  }
  static int at_exit_registered = 0;
  if (__atomic_exchange_n(&at_exit_registered, 1, __ATOMIC_ACQ_REL) == 0) atexit(stop_all_at_exit);
  const cudaError_t e = launch_resident(cs->args, cs->resident_blocks, cs->resident_shared, cs->resident_stream);
  if (e != cudaSuccess) {
    // Typically the SMs are taken (by other sessions' resident kernels):
    // the step is refused and the session stays as it was.
    resident_unregister(&cs->mail);
    cudaGetLastError();
    char what[128];
    snprintf(what, sizeof(what), "cuda: the resident kernel's cooperative launch of %u blocks (one per SM)",
             cs->resident_blocks);
    return cuda_fail(FERRY_UNSUPPORTED, what, e);
  }
  cs->resident_running = true;
  return FERRY_OK;
}

// At init, after build_exec_state: the plan, the step program, the cells'
// arguments and the mailbox; the kernel starts at the first step. Where it
// does not fit, the session keeps launched steps and resident_note says
// why.
ferry_status setup_resident(CudaSession* cs, const SessionConfig& config, uint8_t* base, const ResidentRegions& rr) {
  const ferry_model* m = cs->x.model;
  size_t static_shared = 0;
  cudaError_t e = resident_static_shared(&static_shared);
  if (e != cudaSuccess) return cuda_fail(FERRY_UNSUPPORTED, "cuda: attributes of the resident kernel", e);
  ResidentOptions options;
  options.kernel_static_shared = static_shared;
  ResidentPlan plan;
  ferry_status st = plan_resident(m, config.max_batch, cs->caps, options, &plan);
  if (st != FERRY_OK) return st;
  if (!plan.fits) {
    snprintf(cs->resident_note, sizeof(cs->resident_note), "%s", plan.reason);
    return FERRY_OK;
  }
  ProgramOp* program = reinterpret_cast<ProgramOp*>(base + rr.program);
  size_t n = 0;
  if (record_step_program(cs->x, program, rr.program_capacity, &n) != FERRY_OK) {
    snprintf(cs->resident_note, sizeof(cs->resident_note), "%s", ferry_last_error());
    clear_error();
    return FERRY_OK;
  }
  int per_sm = 0;
  if ((e = resident_occupancy(plan.shared_per_block, cs->caps.shared_per_block_optin, &per_sm)) != cudaSuccess) {
    return cuda_fail(FERRY_UNSUPPORTED, "cuda: occupancy of the resident kernel", e);
  }
  if (per_sm < 1 || static_cast<uint64_t>(per_sm) * cs->caps.sm_count < plan.blocks) {
    snprintf(cs->resident_note, sizeof(cs->resident_note),
             "the occupancy API holds fewer blocks than the resident kernel's %u", plan.blocks);
    return FERRY_OK;
  }
  uint8_t* device = static_cast<uint8_t*>(cs->device_memory);
  CallDesc* desc = reinterpret_cast<CallDesc*>(device + rr.device_desc);
  ResidentCellArgs* cells = reinterpret_cast<ResidentCellArgs*>(base + rr.cells);
  uint32_t offset = 0;
  for (uint32_t c = 0; c < m->num_cells; ++c) {
    cells[c].p = resident_cell_params(cs->x.cells[c].step, plan, c);
    cells[c].p.desc = desc;
    cells[c].in_shared = plan.cells[c].in_shared ? 1 : 0;
    cells[c].shared_offset = offset;
    if (plan.cells[c].in_shared) offset += static_cast<uint32_t>(plan.cells[c].slice_bytes);
  }
  if ((e = cudaMemcpyAsync(device + rr.device, program, n * sizeof(ProgramOp), cudaMemcpyHostToDevice,
                           cs->stream)) != cudaSuccess ||
      (e = cudaMemcpyAsync(device + rr.device_cells, cells, m->num_cells * sizeof(ResidentCellArgs),
                           cudaMemcpyHostToDevice, cs->stream)) != cudaSuccess ||
      (e = cudaStreamSynchronize(cs->stream)) != cudaSuccess) {
    return cuda_fail(FERRY_UNSUPPORTED, "cuda: uploading the resident kernel's program", e);
  }
  // The mailbox: one page of the arena, registered and mapped.
  const size_t page = cs->caps.host_page_size;
  uint8_t* mailbox_page = staging_in_region(base + rr.mailbox_region, page);
  if ((e = cudaHostRegister(mailbox_page, page, cudaHostRegisterMapped)) != cudaSuccess) {
    return cuda_fail(FERRY_UNSUPPORTED, "cuda: cudaHostRegister of the resident kernel's mailbox", e);
  }
  cs->mailbox = reinterpret_cast<Mailbox*>(mailbox_page);
  void* box_device = nullptr;
  if ((e = cudaHostGetDevicePointer(&box_device, mailbox_page, 0)) != cudaSuccess) {
    return cuda_fail(FERRY_UNSUPPORTED, "cuda: cudaHostGetDevicePointer of the mailbox", e);
  }
  if ((e = cudaStreamCreateWithFlags(&cs->resident_stream, cudaStreamNonBlocking)) != cudaSuccess) {
    cs->resident_stream = nullptr;
    return cuda_fail(FERRY_UNSUPPORTED, "cuda: the resident kernel's stream", e);
  }
  ResidentArgs& a = cs->args;
  a.box = static_cast<Mailbox*>(box_device);
  a.program = reinterpret_cast<const ProgramOp*>(device + rr.device);
  a.program_size = static_cast<int32_t>(n);
  a.max_batch = static_cast<int32_t>(config.max_batch);
  a.desc_mapped = cs->x.desc_for_kernels();
  a.desc = desc;
  a.request = reinterpret_cast<uint32_t*>(device + rr.device_request);
  a.cells = reinterpret_cast<const ResidentCellArgs*>(device + rr.device_cells);
  a.num_cells = static_cast<int32_t>(m->num_cells);
  a.work_offset = plan.weights_per_block;
  a.spin_polls = 4096;
  a.max_sleep_ns = 2000;
  cs->resident_blocks = plan.blocks;
  cs->resident_shared = plan.shared_per_block;
  cs->resident = true;
  return FERRY_OK;
}

// A graph of `steps` steps of `cell`, captured from the session's stream.
ferry_status capture_steps(CudaSession* cs, const CellRuntime& cell, int steps, void** exec_out) {
  cudaError_t e = cudaStreamBeginCapture(cs->stream, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) return cuda_fail(FERRY_UNSUPPORTED, "cuda: cudaStreamBeginCapture", e);
  const Decomposition& d = cell.recurrence.step;
  cudaError_t launch = cudaSuccess;
  for (int i = 0; i < steps && launch == cudaSuccess; ++i) {
    launch = launch_recurrent_step(cell.step, d.blocks, d.shared_a, d.proj_blocks, d.shared_b, cs->stream);
  }
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(cs->stream, &graph);
  if (launch != cudaSuccess || e != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    return cuda_fail(FERRY_UNSUPPORTED, "cuda: capturing a recurrent step into a CUDA Graph", launch != cudaSuccess ? launch : e);
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) return cuda_fail(FERRY_UNSUPPORTED, "cuda: cudaGraphInstantiateWithFlags", e);
  *exec_out = exec;
  return FERRY_OK;
}

// Everything of init that acquires CUDA resources; the caller releases them
// when this fails.
ferry_status acquire(ferry_session* s, CudaSession* cs, const SessionConfig& config, bool zero_copy, StepMode mode,
                     uint8_t* base, uint8_t* staging, CellRuntime* cells, const DeviceLayout& dev,
                     const HostLayout& host, const ResidentRegions& rr) {
  const ferry_model* m = s->model;
  cudaError_t e = cudaSuccess;
  // The one device allocation.
  if (cs->allocator) {
    cs->device_memory = cs->allocator->allocate(cs->allocator->context, dev.total, kDeviceAlign);
    if (!cs->device_memory) {
      return fail(FERRY_UNSUPPORTED, "cuda: options->device_allocator returned NULL for %zu bytes", dev.total);
    }
    if (reinterpret_cast<uintptr_t>(cs->device_memory) % kDeviceAlign != 0) {
      cs->allocator->deallocate(cs->allocator->context, cs->device_memory, dev.total);
      cs->device_memory = nullptr;
      return fail(FERRY_INVALID_ARGUMENT, "cuda: options->device_allocator returned memory not %zu-byte aligned",
                  kDeviceAlign);
    }
  } else if ((e = cudaMalloc(&cs->device_memory, dev.total)) != cudaSuccess) {
    cs->device_memory = nullptr;
    char what[96];
    snprintf(what, sizeof(what), "cuda: cudaMalloc of the session's %zu bytes of device memory", dev.total);
    return cuda_fail(FERRY_UNSUPPORTED, what, e);
  }
  cs->device_bytes = dev.total;
  uint8_t* device = static_cast<uint8_t*>(cs->device_memory);
  // The session's stream (non-blocking: it never waits for the legacy
  // default stream, so everything below is ordered on it, then awaited).
  if ((e = cudaStreamCreateWithFlags(&cs->stream, cudaStreamNonBlocking)) != cudaSuccess) {
    cs->stream = nullptr;
    return cuda_fail(FERRY_UNSUPPORTED, "cuda: cudaStreamCreateWithFlags", e);
  }
  // The weights, once, as stored; everything after them starts at zero
  // (the state, the step counters).
  if (dev.weights_bytes && (e = cudaMemcpyAsync(device, m->bytes + dev.weights_begin, dev.weights_bytes,
                                                cudaMemcpyHostToDevice, cs->stream)) != cudaSuccess) {
    return cuda_fail(FERRY_UNSUPPORTED, "cuda: uploading the weights (cudaMemcpyAsync)", e);
  }
  const size_t weights_end = (dev.weights_bytes + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
  if ((e = cudaMemsetAsync(device + weights_end, 0, dev.total - weights_end, cs->stream)) != cudaSuccess) {
    return cuda_fail(FERRY_UNSUPPORTED, "cuda: cudaMemsetAsync of the state", e);
  }
  if ((e = cudaStreamSynchronize(cs->stream)) != cudaSuccess) {
    return cuda_fail(FERRY_UNSUPPORTED, "cuda: uploading the weights", e);
  }
  void* staging_device = nullptr;
  if (zero_copy) {
    const size_t page = cs->caps.host_page_size;
    const size_t bytes = (host.staging_bytes + page - 1) / page * page;
    if ((e = cudaHostRegister(staging, bytes, cudaHostRegisterMapped)) != cudaSuccess) {
      return cuda_fail(FERRY_UNSUPPORTED, "cuda: zero copy: cudaHostRegister of the staging buffers", e);
    }
    cs->registered = staging;
    if ((e = cudaHostGetDevicePointer(&staging_device, staging, 0)) != cudaSuccess) {
      return cuda_fail(FERRY_UNSUPPORTED, "cuda: zero copy: cudaHostGetDevicePointer", e);
    }
  }
  ferry_status st = build_exec_state(m, config, cs->caps, zero_copy, device, staging,
                                     static_cast<uint8_t*>(staging_device), cells, &cs->x);
  if (st != FERRY_OK) return st;
  // Persistent kernels where the occupancy API agrees that one block per SM
  // fits; CUDA Graphs of the steps for the others (and one-step graphs for
  // every cell: ferry_step). FERRY_CUDA_RECURRENCE=graph turns the
  // persistent kernels off, so that tests run both on one GPU.
  const char* recurrence = getenv("FERRY_CUDA_RECURRENCE");
  const bool graphs_only = recurrence && strcmp(recurrence, "graph") == 0;
  for (uint32_t c = 0; c < m->num_cells; ++c) {
    CellRuntime& cell = cells[c];
    if (cell.use_persistent && graphs_only) {
      cell.use_persistent = false;
      cell.recurrence.reason = "FERRY_CUDA_RECURRENCE=graph";
    }
    if (cell.use_persistent) {
      int per_sm = 0;
      e = persistent_occupancy(cell.resident.w_hh.type, cell.recurrence.resident_shared,
                               cs->caps.shared_per_block_optin, &per_sm);
      if (e != cudaSuccess) return cuda_fail(FERRY_UNSUPPORTED, "cuda: occupancy of the persistent kernel", e);
      if (per_sm < 1 || static_cast<uint64_t>(per_sm) * cs->caps.sm_count < cell.recurrence.resident.blocks) {
        cell.use_persistent = false;
        cell.recurrence.reason = "the occupancy API holds fewer blocks than the persistent kernel needs";
      }
    }
    if ((st = capture_steps(cs, cell, 1, &cell.graph_one)) != FERRY_OK) return st;
    if (!cell.use_persistent && (st = capture_steps(cs, cell, kGraphSteps, &cell.graph_many)) != FERRY_OK) return st;
  }
  if ((e = cudaStreamSynchronize(cs->stream)) != cudaSuccess) return cuda_fail(FERRY_UNSUPPORTED, "cuda: session init", e);
  if (mode == StepMode::kLaunch) return FERRY_OK;
  if ((st = setup_resident(cs, config, base, rr)) != FERRY_OK) return st;
  if (!cs->resident && mode == StepMode::kResidentOnly) {
    return fail(FERRY_UNSUPPORTED, "cuda: FERRY_CUDA_STEP=resident_only: the resident kernel does not fit: %s",
                cs->resident_note);
  }
  return FERRY_OK;
}

// Whether the session may run; the message says why not.
ferry_status usable(const CudaSession* cs) {
  if (cs->released) return fail(FERRY_INVALID_STATE, "cuda: the session was released (ferry_session_release)");
  if (cs->broken != FERRY_OK) {
    return fail(FERRY_INVALID_STATE, "cuda: the session is unusable after an earlier CUDA error: %s",
                cs->broken_message);
  }
  return FERRY_OK;
}

ferry_status mark(CudaSession* cs, ferry_status st) {
  if (st != FERRY_OK && cs->broken == FERRY_OK) {
    cs->broken = st;
    snprintf(cs->broken_message, sizeof(cs->broken_message), "%s", ferry_last_error());
  }
  return st;
}

// ------------------------------------------------------------- entry --

ferry_status probe(const ferry_model* m, const SessionConfig& config) {
  DeviceCaps caps;
  bool zero_copy = false;
  StepMode mode = StepMode::kLaunch;
  return examine(m, config, &caps, &zero_copy, &mode);
}

ferry_status plan(const ferry_model* m, const SessionConfig& config, ArenaPlan* arena, size_t* device_bytes) {
  DeviceCaps caps;
  bool zero_copy = false;
  StepMode mode = StepMode::kLaunch;
  ferry_status st = examine(m, config, &caps, &zero_copy, &mode);
  const bool resident = mode != StepMode::kLaunch;
  if (st != FERRY_OK) return st;
  DeviceLayout dev;
  HostLayout host;
  ResidentRegions rr;
  if ((st = plan_regions(m, config, caps, resident, arena, &dev, &host, &rr)) != FERRY_OK) return st;
  *device_bytes = dev.total;
  return FERRY_OK;
}

ferry_status init(ferry_session* s, const SessionConfig& config, uint8_t* base) {
  const ferry_model* m = s->model;
  DeviceCaps caps;
  bool zero_copy = false;
  StepMode mode = StepMode::kLaunch;
  ferry_status st = examine(m, config, &caps, &zero_copy, &mode);
  const bool resident = mode != StepMode::kLaunch;
  if (st != FERRY_OK) return st;
  ArenaPlan arena;
  arena.reserve(sizeof(ferry_session));
  DeviceLayout dev;
  HostLayout host;
  ResidentRegions rr;
  if ((st = plan_regions(m, config, caps, resident, &arena, &dev, &host, &rr)) != FERRY_OK) return st;
  CudaSession* cs = new (base + host.control) CudaSession();
  s->impl = cs;
  cs->caps = caps;
  cs->device = config.device;
  cs->allocator = config.device_allocator;
  cs->x.model = m;
  CellRuntime* cells = reinterpret_cast<CellRuntime*>(base + host.cells);
  for (uint32_t c = 0; c < m->num_cells; ++c) new (&cells[c]) CellRuntime();
  cs->x.cells = cells;
  uint8_t* staging = staging_in_region(base + host.staging_region, caps.host_page_size);
  DeviceScope scope(config.device);
  if (scope.status() != cudaSuccess) return cuda_fail(FERRY_UNSUPPORTED, "cuda: cudaSetDevice", scope.status());
  if ((st = acquire(s, cs, config, zero_copy, mode, base, staging, cells, dev, host, rr)) != FERRY_OK) {
    release_resources(cs);
    return st;
  }
  return FERRY_OK;
}

ferry_status run(ferry_session* s, const RunCall& call) {
  CudaSession* cs = cuda_of(s);
  ferry_status st = usable(cs);
  if (st != FERRY_OK) return st;
  DeviceScope scope(cs->device);
  if (scope.status() != cudaSuccess) return cuda_fail(FERRY_INVALID_STATE, "cuda: cudaSetDevice", scope.status());
  if (cs->resident_running) {  // a sequence's kernels need the SMs the resident kernel holds
    stop_resident(cs);
    if (cs->resident_stuck) {
      return mark(cs, fail(FERRY_INVALID_STATE, "cuda: the resident kernel did not stop for ferry_run"));
    }
  }
  return mark(cs, execute(cs->x, kCudaOps, cs, call));
}

// ferry_step: through the resident kernel when the session has one.
ferry_status step(ferry_session* s, const RunCall& call) {
  CudaSession* cs = cuda_of(s);
  if (!cs->resident) return run(s, call);
  ferry_status st = usable(cs);
  if (st != FERRY_OK) return st;
  if (!cs->resident_running) {
    DeviceScope scope(cs->device);
    if (scope.status() != cudaSuccess) return cuda_fail(FERRY_INVALID_STATE, "cuda: cudaSetDevice", scope.status());
    if ((st = start_resident(cs)) != FERRY_OK) return st;  // nothing has changed: the session stays usable
  }
  stage_call(cs->x, call);
  if ((st = cs->mail.call(kMailStep, static_cast<uint32_t>(call.batch))) != FERRY_OK) return mark(cs, st);
  complete_call(cs->x, call);
  return FERRY_OK;
}

void state_get(const ferry_session* s, size_t batch, float* state) {
  CudaSession* cs = cuda_of(s);
  if ((cs->state_status = usable(cs)) != FERRY_OK) return;
  DeviceScope scope(cs->device);
  cs->state_status = mark(cs, copy_state(cs->x, kCudaOps, cs, batch, state, true));
}

void state_set(ferry_session* s, size_t batch, const float* state) {
  CudaSession* cs = cuda_of(s);
  if ((cs->state_status = usable(cs)) != FERRY_OK) return;
  DeviceScope scope(cs->device);
  cs->state_status = mark(cs, copy_state(cs->x, kCudaOps, cs, batch, const_cast<float*>(state), false));
}

void state_reset(ferry_session* s) {
  CudaSession* cs = cuda_of(s);
  if ((cs->state_status = usable(cs)) != FERRY_OK) return;
  DeviceScope scope(cs->device);
  cs->state_status = mark(cs, reset_state(cs->x, kCudaOps, cs));
}

ferry_status state_status(const ferry_session* s) { return cuda_of(s)->state_status; }

void release(ferry_session* s) {
  CudaSession* cs = cuda_of(s);
  if (cs && !cs->released) release_resources(cs);
}

}  // namespace

const Backend kCudaBackend = {"cuda",    probe,     plan,        init,    run, step, state_get,
                              state_set, state_reset, release, state_status};

}  // namespace cuda
}  // namespace ferry
