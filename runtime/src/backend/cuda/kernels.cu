// The CUDA backend's kernels (kernels.h lists them). What they compute and
// in which order is device_math.h; this file maps it onto threads. They are
// written to be correct by construction rather than fast by every trick:
// every loop is bounded by its arguments, every block of a kernel that
// synchronises takes the same path through each __syncthreads, and data a
// kernel reads after other blocks of the same kernel wrote it (the hidden
// state between the steps of the persistent kernel, h_full before a
// projection) is read with __ldcg, from L2, never from a stale L1 line.
//
// Compiled with --fmad=false (cmake/cuda.cmake): the only fused
// multiply-adds are the explicit fmaf of the products, so a value is
// computed with the same operations whichever kernel computes it.
#include <cooperative_groups.h>

#include "backend/cuda/kernels.h"

namespace cg = cooperative_groups;

namespace ferry {
namespace cuda {
namespace {

__device__ __forceinline__ int min_int(int a, int b) { return a < b ? a : b; }

// ------------------------------------------------------------------ GEMM --

constexpr int kTile = 64;   // rows and columns of C per block
constexpr int kTileK = 16;  // columns of A per pass

// C = bias + A W (GemmParams). 256 threads, each a 4x4 grid of outputs
// (rows ty + 16i, columns tx + 16j); per output one fmaf chain over k from 0
// upwards (the zero padding past K adds exact zeros), the bias added last.
__global__ void __launch_bounds__(kThreads) gemm_f32_panel8(GemmParams g) {
  __shared__ float as[kTileK][kTile + 1];
  __shared__ float ws[kTileK][kTile];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int col0 = blockIdx.x * kTile;
  const int64_t tiles_m = (g.m + kTile - 1) / kTile;
  for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
    const int64_t row0 = tm * kTile;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < g.k; k0 += kTileK) {
      for (int e = tid; e < kTile * kTileK; e += kThreads) {
        const int r = e / kTileK, kk = e % kTileK;
        const int64_t row = row0 + r;
        const int k = k0 + kk;
        as[kk][r] = row < g.m && k < g.k ? g.a[row * g.lda + k] : 0.0f;
      }
      for (int e = tid; e < kTile * kTileK; e += kThreads) {
        const int kk = e / kTile, cc = e % kTile;
        const int c = col0 + cc, k = k0 + kk;
        ws[kk][cc] = c < g.n && k < g.k ? g.w[gemm_weight_index(g.gates, g.k, c, k)] : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kTileK; ++kk) {
        float a[4], w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = as[kk][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 4; ++j) w[j] = ws[kk][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], w[j], acc[i][j]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t row = row0 + ty + 16 * i;
        const int c = col0 + tx + 16 * j;
        if (row < g.m && c < g.n) g.c[row * g.ldc + c] = (g.bias ? g.bias[c] : 0.0f) + acc[i][j];
      }
    }
  }
}

// C = bias + A W for at most kRowsFew rows of A (a streaming step's input
// projection: batch rows, one time step), the same values as
// gemm_f32_panel8 bit for bit: per output one fmaf chain over k from 0
// upwards, the bias added last. gemm_f32_panel8 pads k to a multiple of
// kTileK with exact zeros, and fmaf(0, 0, acc) is acc except that -0
// becomes +0: one such fmaf after the chain where K is not a multiple gives
// the same bits (NaN and the infinities pass through it unchanged).
//
// The 64x64 tile wastes 63 of its 64 rows on one row, and its 16-column
// passes wait on global memory 64 times for K = 1024 (an H100, H = 1024
// step: 245 us under ncu). Here a block takes 32 columns (thread: column
// lane, k rows warp + 8j): all 256 threads hold the next kFewK-column slice
// of W (16 loads each) and of A in registers while warp m runs row m's 32
// chains over the current slice in shared memory.
constexpr int kRowsFew = kWarps;  // 8: one warp of chains per row
constexpr int kFewCols = 32;
constexpr int kFewK = 128;
constexpr int kFewW = kFewK * kFewCols / kThreads;  // 16 W values per thread and slice: k rows warp + kWarps j
constexpr int kFewA = kRowsFew * kFewK / kThreads;  // 4 A values per thread and slice
constexpr int kFewARows = kThreads / kFewK;         // 2 rows of A per pass of the block
static_assert(kFewCols == 32 && kThreads % kFewK == 0 && kFewW * kWarps == kFewK && kFewA * kFewARows == kRowsFew,
              "gemm_f32_panel8_few_rows: a warp per 32 columns, the block's threads tile W's and A's slices");

__global__ void __launch_bounds__(kThreads) gemm_f32_panel8_few_rows(GemmParams g) {
  __shared__ float ws[kFewK][kFewCols];
  __shared__ float as[kRowsFew][kFewK];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int a_row = threadIdx.x / kFewK, a_col = threadIdx.x % kFewK;  // this thread's A values: rows a_row + kFewARows j
  const int64_t m = g.m;
  const size_t k_stride = static_cast<size_t>(g.gates) * 8;  // between W's k rows of one column
  for (int col0 = blockIdx.x * kFewCols; col0 < g.n; col0 += gridDim.x * kFewCols) {
    const int c = col0 + lane;
    const float* wc = c < g.n ? g.w + gemm_weight_index(g.gates, g.k, c, 0) : nullptr;
    float wr[kFewW], ar[kFewA];
    auto fetch = [&](int k0) {  // slice [k0, k0 + kFewK) into registers
#pragma unroll
      for (int j = 0; j < kFewW; ++j) {
        const int k = k0 + warp + kWarps * j;
        wr[j] = wc && k < g.k ? wc[k * k_stride] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kFewA; ++j) {
        const int r = a_row + kFewARows * j, k = k0 + a_col;
        ar[j] = r < m && k < g.k ? g.a[r * g.lda + k] : 0.0f;
      }
    };
    fetch(0);
    float acc = 0.0f;
    for (int k0 = 0; k0 < g.k; k0 += kFewK) {
#pragma unroll
      for (int j = 0; j < kFewW; ++j) ws[warp + kWarps * j][lane] = wr[j];
#pragma unroll
      for (int j = 0; j < kFewA; ++j) as[a_row + kFewARows * j][a_col] = ar[j];
      __syncthreads();
      if (k0 + kFewK < g.k) fetch(k0 + kFewK);  // in flight while the chains run
      if (warp < m) {
        const int kn = min_int(kFewK, g.k - k0);
        for (int kk = 0; kk < kn; ++kk) acc = fmaf(as[warp][kk], ws[kk][lane], acc);
      }
      __syncthreads();
    }
    if (g.k % kTileK != 0) acc = fmaf(0.0f, 0.0f, acc);  // gemm_f32_panel8's zero padding
    if (warp < m && c < g.n) g.c[warp * g.ldc + c] = (g.bias ? g.bias[c] : 0.0f) + acc;
  }
}

// ------------------------------------------------------------ recurrence --

// Partial products of `vecs` Panel8 vectors of `w` (gates G, K columns)
// with `nb` staged rows `hs` (stride K), into part[s][tile][vecs * 8]:
// warp items (vector quad, column split, group of kBatchGroup samples);
// lane l takes vector 4*quad + l/8, lane j = l%8. One fmaf chain per
// (output, sample, split), k ascending: panel_dot's, several samples per
// weight load.
__device__ __forceinline__ void panel_products(const float* w, int G, int K, int vecs, const float* hs, int nb,
                                               int tile, float* part) {
  const int splits = static_cast<int>(k_splits_for(K)), chunk = static_cast<int>(k_chunk_for(K));
  const int rows = vecs * 8, quads = (vecs + kVectorsPerWarp - 1) / kVectorsPerWarp;
  const int groups = (nb + kBatchGroup - 1) / kBatchGroup;
  const int items = quads * splits * groups;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const size_t stride = static_cast<size_t>(G) * 8;
  for (int it = warp; it < items; it += kWarps) {
    const int group = it % groups, s = (it / groups) % splits, quad = it / (groups * splits);
    const int v = quad * kVectorsPerWarp + (lane >> 3), j = lane & 7;
    if (v >= vecs) continue;
    const int k0 = s * chunk, k1 = min_int(K, k0 + chunk);
    const int bb0 = group * kBatchGroup, nq = min_int(kBatchGroup, nb - bb0);
    const float* wv = w + vector_offset(G, K, v) + j;
    const float* hb = hs + static_cast<size_t>(bb0) * K;
    float acc[kBatchGroup];
#pragma unroll
    for (int q = 0; q < kBatchGroup; ++q) acc[q] = 0.0f;
    // Unrolled so that 8 loads of W are in flight at once (a step reads W_hh
    // from L2: without it one load waited on the last, 15 us for H = 64 on
    // an H100); the chain is the same.
#pragma unroll 8
    for (int k = k0; k < k1; ++k) {
      const float wk = wv[k * stride];
#pragma unroll
      for (int q = 0; q < kBatchGroup; ++q) {
        if (q < nq) acc[q] = fmaf(wk, hb[static_cast<size_t>(q) * K + k], acc[q]);
      }
    }
#pragma unroll
    for (int q = 0; q < kBatchGroup; ++q) {
      if (q < nq) part[(static_cast<size_t>(s) * tile + bb0 + q) * rows + v * 8 + j] = acc[q];
    }
  }
}

// Phase A of step i for the hidden panels [p0, p1), whose W_hh panels are
// at `w` (global memory or the block's shared copy). smem: [tile][P] of h
// staged, then the partial products [splits][tile][rows].
__device__ void phase_a(const RecurrentParams& p, const float* w, int p0, int p1, int b_begin, int b_end,
                        const CallView& call, int i, float* smem) {
  const int G = p.gates, P = p.h_out;
  const StepView sv = step_view(p, call, i);
  const int vecs = (p1 - p0) * G, rows = vecs * 8, units = (p1 - p0) * 8;
  const int tile = p.batch_tile;
  float* hs = smem;
  float* part = smem + static_cast<size_t>(tile) * P;
  for (int b0 = b_begin; b0 < b_end; b0 += tile) {
    const int nb = min_int(tile, b_end - b0);
#pragma unroll 8
    for (int e = threadIdx.x; e < nb * P; e += kThreads) hs[e] = __ldcg(sv.h_prev + static_cast<size_t>(b0) * P + e);
    __syncthreads();
    panel_products(w, G, P, vecs, hs, nb, tile, part);
    __syncthreads();
    for (int e = threadIdx.x; e < nb * units; e += kThreads) {
      const int bb = e / units;
      phase_a_unit(p, call, sv, p0, tile, rows, hs, part, bb, b0 + bb, e % units);
    }
    __syncthreads();
  }
}

// Phase B of step i (LSTM projection) for the projection panels [q0, q1):
// h = W_hr h_full. smem: [tile][H] of h_full staged, then the partials.
__device__ void phase_b(const RecurrentParams& p, int q0, int q1, const CallView& call, int i, float* smem) {
  const int H = p.hidden, B = call.batch;
  const StepView sv = step_view(p, call, i);
  const int vecs = q1 - q0, rows = vecs * 8;
  const int tile = p.proj_batch_tile;
  const float* w = p.w_hr + static_cast<size_t>(q0) * H * 8;  // Panel8, G = 1: panel q at q * H * 8
  float* hs = smem;
  float* part = smem + static_cast<size_t>(tile) * H;
  for (int b0 = 0; b0 < B; b0 += tile) {
    const int nb = min_int(tile, B - b0);
#pragma unroll 8
    for (int e = threadIdx.x; e < nb * H; e += kThreads) hs[e] = __ldcg(p.h_full + static_cast<size_t>(b0) * H + e);
    __syncthreads();
    panel_products(w, 1, H, vecs, hs, nb, tile, part);
    __syncthreads();
    for (int e = threadIdx.x; e < nb * rows; e += kThreads) {
      const int bb = e / rows;
      phase_b_row(p, call, sv, q0, tile, rows, part, bb, b0 + bb, e % rows);
    }
    __syncthreads();
  }
}

__device__ __forceinline__ void block_panels(unsigned block, int per_block, int panels, int* p0, int* p1) {
  uint32_t a = 0, b = 0;
  block_range(block, static_cast<uint32_t>(per_block), static_cast<uint32_t>(panels), &a, &b);
  *p0 = static_cast<int>(a);
  *p1 = static_cast<int>(b);
}

// The end of a replayed step's last kernel: the last block to finish
// advances the cell's step counter (device_math.h, next_step).
__device__ __forceinline__ void finish_step(const RecurrentParams& p, int i, int steps) {
  __syncthreads();  // every thread of this block has read the counter
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned done = atomicAdd(reinterpret_cast<unsigned*>(p.counter + 1), 1u);
    if (done == gridDim.x - 1) {
      p.counter[1] = 0;
      p.counter[0] = next_step(i, steps);
      __threadfence();
    }
  }
}

__device__ __forceinline__ int read_step(const RecurrentParams& p) {
  return *reinterpret_cast<volatile const int32_t*>(p.counter);
}

__global__ void __launch_bounds__(kThreads) recurrent_f32_panel8_step_a(RecurrentParams p) {
  extern __shared__ float smem[];
  const CallView call = read_call(p);
  const int i = read_step(p);
  uint32_t p0, p1;
  int32_t b0, b1;
  phase_a_share(p, blockIdx.x, call.batch, &p0, &p1, &b0, &b1);
  if (p0 < p1) {
    const float* w = p.w_hh + static_cast<size_t>(p0) * p.h_out * p.gates * 8;
    phase_a(p, w, static_cast<int>(p0), static_cast<int>(p1), b0, b1, call, i, smem);
  }
  if (!p.w_hr) finish_step(p, i, call.steps);
}

__global__ void __launch_bounds__(kThreads) recurrent_f32_panel8_step_b(RecurrentParams p) {
  extern __shared__ float smem[];
  const CallView call = read_call(p);
  const int i = read_step(p);
  int q0, q1;
  block_panels(blockIdx.x, p.proj_panels_per_block, static_cast<int>(panels_of(p.h_out)), &q0, &q1);
  if (q0 < q1) phase_b(p, q0, q1, call, i, smem);
  finish_step(p, i, call.steps);
}

// All the steps of the call: each block copies its W_hh panels into shared
// memory once, then steps with one grid-wide sync after phase A (and one
// after phase B). Launched cooperatively: every block is resident. With a
// large batch the plan splits it (batch_slices): the blocks of each slice
// hold the same panels and take their slice's samples in phase A.
__global__ void __launch_bounds__(kThreads, 1) recurrent_f32_panel8_persistent(RecurrentParams p) {
  extern __shared__ float smem[];
  cg::grid_group grid = cg::this_grid();
  const CallView call = read_call(p);
  uint32_t p0, p1;
  int32_t b0, b1;
  phase_a_share(p, blockIdx.x, call.batch, &p0, &p1, &b0, &b1);
  const size_t panel_floats = static_cast<size_t>(p.h_out) * p.gates * 8;
  float* ws = smem;
  float* work = smem + static_cast<size_t>(p.panels_per_block) * panel_floats;
  const float* src = p.w_hh + static_cast<size_t>(p0) * panel_floats;
  const size_t n = static_cast<size_t>(p1 - p0) * panel_floats;
  for (size_t e = threadIdx.x; e < n; e += kThreads) ws[e] = __ldg(src + e);
  __syncthreads();
  int q0 = 0, q1 = 0;
  if (p.w_hr) block_panels(blockIdx.x, p.proj_panels_per_block, static_cast<int>(panels_of(p.h_out)), &q0, &q1);
  for (int i = 0; i < call.steps; ++i) {
    if (p0 < p1) phase_a(p, ws, static_cast<int>(p0), static_cast<int>(p1), b0, b1, call, i, work);
    grid.sync();
    if (p.w_hr) {
      if (q0 < q1) phase_b(p, q0, q1, call, i, work);
      grid.sync();
    }
  }
}

// ----------------------------------------------------------- elementwise --

__device__ __forceinline__ size_t global_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ size_t global_stride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

__global__ void __launch_bounds__(kThreads) ingest_f32(IngestParams p) {
  const size_t n = static_cast<size_t>(p.steps * p.batch * p.features);
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const size_t f = i % p.features, tb = i / p.features, b = tb % p.batch, t = tb / p.batch;
    const size_t src = p.batch_first ? (b * p.steps + t) * p.features + f : i;
    p.dst[i] = p.src[src];
  }
}

__global__ void __launch_bounds__(kThreads) emit_f32(EmitParams p) {
  const size_t n = static_cast<size_t>(p.steps * p.batch * p.features);
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const size_t f = i % p.features, tb = i / p.features, b = tb % p.batch, t = tb / p.batch;
    const float v = p.lengths && static_cast<int64_t>(t) >= p.lengths[b] ? 0.0f : p.src[i];
    p.dst[p.batch_first ? (b * p.steps + t) * p.features + f : i] = v;
  }
}

__global__ void __launch_bounds__(kThreads) last_f32(LastParams p) {
  const size_t n = static_cast<size_t>(p.batch * p.features);
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const size_t f = i % p.features, b = i / p.features;
    const size_t t = p.lengths ? static_cast<size_t>(p.lengths[b]) - 1 : static_cast<size_t>(p.steps) - 1;
    p.dst[i] = p.src[(t * p.batch + b) * p.features + f];
  }
}

__global__ void __launch_bounds__(kThreads) activation_f32(int32_t op, float* x, size_t n) {
  for (size_t i = global_index(); i < n; i += global_stride()) {
    const float v = x[i];
    x[i] = op == 0 ? (v < 0.0f ? 0.0f : v) : op == 1 ? tanhf(v) : sigmoid_f(v);
  }
}

// Softmax of each row (max-subtracted, as the reference), one block per row;
// the reductions run in a fixed tree order.
__global__ void __launch_bounds__(kThreads) softmax_f32(float* x, size_t rows, int n) {
  __shared__ float red[kThreads];
  const int tid = threadIdx.x;
  for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* v = x + r * n;
    float m = -INFINITY;
    for (int i = tid; i < n; i += kThreads) m = v[i] > m ? v[i] : m;
    red[tid] = m;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (tid < s) red[tid] = red[tid + s] > red[tid] ? red[tid + s] : red[tid];
      __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int i = tid; i < n; i += kThreads) {
      const float e = expf(v[i] - m);
      v[i] = e;
      sum += e;
    }
    red[tid] = sum;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (tid < s) red[tid] = red[tid] + red[tid + s];
      __syncthreads();
    }
    const float inv = 1.0f / red[0];
    for (int i = tid; i < n; i += kThreads) v[i] *= inv;
    __syncthreads();
  }
}

unsigned grid_for(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 4096 ? (blocks ? blocks : 1) : 4096);
}

}  // namespace

cudaError_t launch_gemm(const GemmParams& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (p.m <= kRowsFew) {
    const int groups = (p.n + kFewCols - 1) / kFewCols;
    gemm_f32_panel8_few_rows<<<static_cast<unsigned>(groups < 65535 ? groups : 65535), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }
  const int64_t tiles_m = (p.m + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>((p.n + kTile - 1) / kTile), static_cast<unsigned>(tiles_m < 65535 ? tiles_m : 65535));
  gemm_f32_panel8<<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_recurrent_step(const RecurrentParams& p, unsigned blocks_a, size_t shared_a, unsigned blocks_b,
                                  size_t shared_b, cudaStream_t stream) {
  recurrent_f32_panel8_step_a<<<blocks_a, kThreads, shared_a, stream>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || !p.w_hr) return e;
  recurrent_f32_panel8_step_b<<<blocks_b, kThreads, shared_b, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_recurrent_persistent(const RecurrentParams& p, unsigned blocks, size_t shared,
                                        cudaStream_t stream) {
  RecurrentParams arg = p;
  void* args[] = {&arg};
  const cudaError_t e = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(recurrent_f32_panel8_persistent),
                                                    dim3(blocks), dim3(kThreads), args, shared, stream);
  return e != cudaSuccess ? e : cudaGetLastError();
}

cudaError_t launch_ingest(const IngestParams& p, cudaStream_t stream) {
  ingest_f32<<<grid_for(static_cast<size_t>(p.steps * p.batch * p.features)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_emit(const EmitParams& p, cudaStream_t stream) {
  emit_f32<<<grid_for(static_cast<size_t>(p.steps * p.batch * p.features)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_last(const LastParams& p, cudaStream_t stream) {
  last_f32<<<grid_for(static_cast<size_t>(p.batch * p.features)), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_activation(int32_t op, float* x, size_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  activation_f32<<<grid_for(n), kThreads, 0, stream>>>(op, x, n);
  return cudaGetLastError();
}

cudaError_t launch_softmax(float* x, size_t rows, size_t n, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  softmax_f32<<<static_cast<unsigned>(rows < 65535 ? rows : 65535), kThreads, 0, stream>>>(x, rows,
                                                                                          static_cast<int>(n));
  return cudaGetLastError();
}

cudaError_t check_kernel_image() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(gemm_f32_panel8));
}

cudaError_t persistent_occupancy(size_t shared, size_t device_limit, int* blocks_per_sm) {
  *blocks_per_sm = 0;
  const void* kernel = reinterpret_cast<const void*>(recurrent_f32_panel8_persistent);
  // The attribute is the function's, shared by every session on the device:
  // always the device's limit, never one session's need.
  cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(device_limit));
  if (e != cudaSuccess) return e;
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, kernel, kThreads, shared);
}

}  // namespace cuda
}  // namespace ferry
