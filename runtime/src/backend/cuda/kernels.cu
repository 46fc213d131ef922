// The CUDA backend's matrix products (kernels.h lists every kernel): the
// f32 GEMMs over plain rows or a Conv1d's patch rows, the GEMMs of the
// other weight types (device_weights.h's readers), and the quantization of
// activation rows for int8 / int4 products. What they compute and in which
// order is device_weights.h / device_ops.h; this file maps it onto threads.
// They are written to be correct by construction rather than fast by every
// trick: every loop is bounded by its arguments, and every block of a
// kernel that synchronises takes the same path through each
// __syncthreads.
//
// Compiled with --fmad=false (cmake/cuda.cmake): the only fused
// multiply-adds are the explicit fmaf of the products, so a value is
// computed with the same operations whichever kernel computes it.
#include "backend/cuda/kernels.h"
#include "backend/cuda/block_ops.cuh"


namespace ferry {
namespace cuda {
namespace {

__device__ __forceinline__ int min_int(int a, int b) { return a < b ? a : b; }

// Where the rows of A come from: a buffer of rows, or a Conv1d's patch
// rows (group `group` of the conv, read through conv_patch: no im2col
// buffer). Both give A[row][k] for row < m, k < K.
struct RowsA {
  const float* a;
  int64_t lda;
  __device__ __forceinline__ float load(int64_t row, int k) const { return a[row * lda + k]; }
};

struct ConvA {
  ConvParams p;
  int32_t group;
  __device__ __forceinline__ float load(int64_t row, int k) const { return conv_patch(p, group, row, k); }
};

// ------------------------------------------------------------- f32 GEMM --

constexpr int kTile = 64;   // rows and columns of C per block
constexpr int kTileK = 16;  // columns of A per pass

// C = bias + A W (GemmParams, f32 Panel8 W). 256 threads, each a 4x4 grid of
// outputs (rows ty + 16i, columns tx + 16j); per output one fmaf chain over
// k from 0 upwards (the zero padding past K adds exact zeros), the bias
// added last.
template <class A>
__global__ void __launch_bounds__(kThreads) gemm_f32_panel8(GemmParams g, A src) {
  __shared__ float as[kTileK][kTile + 1];
  __shared__ float ws[kTileK][kTile];
  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int col0 = blockIdx.x * kTile;
  const float* w = static_cast<const float*>(g.w.data);
  const uint32_t G = static_cast<uint32_t>(g.w.gates);
  const int K = g.w.cols;
  const int64_t tiles_m = (g.m + kTile - 1) / kTile;
  for (int64_t tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
    const int64_t row0 = tm * kTile;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += kTileK) {
      for (int e = tid; e < kTile * kTileK; e += kThreads) {
        const int r = e / kTileK, kk = e % kTileK;
        const int64_t row = row0 + r;
        const int k = k0 + kk;
        as[kk][r] = row < g.m && k < K ? src.load(row, k) : 0.0f;
      }
      for (int e = tid; e < kTile * kTileK; e += kThreads) {
        const int kk = e / kTile, cc = e % kTile;
        const int c = col0 + cc, k = k0 + kk;
        ws[kk][cc] = c < g.n && k < K ? w[gemm_weight_index(G, static_cast<uint32_t>(K), static_cast<uint32_t>(c),
                                                             static_cast<uint32_t>(k))]
                                      : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < kTileK; ++kk) {
        float a[4], wv[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = as[kk][ty + 16 * i];
#pragma unroll
        for (int j = 0; j < 4; ++j) wv[j] = ws[kk][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], wv[j], acc[i][j]);
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

template <class A>
__global__ void __launch_bounds__(kThreads) gemm_f32_panel8_few_rows(GemmParams g, A src) {
  __shared__ float ws[kFewK][kFewCols];
  __shared__ float as[kRowsFew][kFewK];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int a_row = threadIdx.x / kFewK, a_col = threadIdx.x % kFewK;  // this thread's A values: rows a_row + kFewARows j
  const int64_t m = g.m;
  const int K = g.w.cols;
  const uint32_t G = static_cast<uint32_t>(g.w.gates);
  const size_t k_stride = static_cast<size_t>(G) * 8;  // between W's k rows of one column
  for (int col0 = blockIdx.x * kFewCols; col0 < g.n; col0 += gridDim.x * kFewCols) {
    const int c = col0 + lane;
    const float* wc = c < g.n ? static_cast<const float*>(g.w.data) +
                                    gemm_weight_index(G, static_cast<uint32_t>(K), static_cast<uint32_t>(c), 0)
                              : nullptr;
    float wr[kFewW], ar[kFewA];
    auto fetch = [&](int k0) {  // slice [k0, k0 + kFewK) into registers
#pragma unroll
      for (int j = 0; j < kFewW; ++j) {
        const int k = k0 + warp + kWarps * j;
        wr[j] = wc && k < K ? wc[k * k_stride] : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kFewA; ++j) {
        const int r = a_row + kFewARows * j, k = k0 + a_col;
        ar[j] = r < m && k < K ? src.load(r, k) : 0.0f;
      }
    };
    fetch(0);
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += kFewK) {
#pragma unroll
      for (int j = 0; j < kFewW; ++j) ws[warp + kWarps * j][lane] = wr[j];
#pragma unroll
      for (int j = 0; j < kFewA; ++j) as[a_row + kFewARows * j][a_col] = ar[j];
      __syncthreads();
      if (k0 + kFewK < K) fetch(k0 + kFewK);  // in flight while the chains run
      if (warp < m) {
        const int kn = min_int(kFewK, K - k0);
        for (int kk = 0; kk < kn; ++kk) acc = fmaf(as[warp][kk], ws[kk][lane], acc);
      }
      __syncthreads();
    }
    if (K % kTileK != 0) acc = fmaf(0.0f, 0.0f, acc);  // gemm_f32_panel8's zero padding
    if (warp < m && c < g.n) g.c[warp * g.ldc + c] = (g.bias ? g.bias[c] : 0.0f) + acc;
  }
}

template <class A>
cudaError_t launch_gemm_f32(const GemmParams& p, const A& src, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (p.m <= kRowsFew) {
    const int groups = (p.n + kFewCols - 1) / kFewCols;
    gemm_f32_panel8_few_rows<A><<<static_cast<unsigned>(groups < 65535 ? groups : 65535), kThreads, 0, stream>>>(p, src);
    return cudaGetLastError();
  }
  const int64_t tiles_m = (p.m + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>((p.n + kTile - 1) / kTile),
                  static_cast<unsigned>(tiles_m < 65535 ? tiles_m : 65535));
  gemm_f32_panel8<A><<<grid, kThreads, 0, stream>>>(p, src);
  return cudaGetLastError();
}

// ------------------------------------------- f16, int8, int4 products --

// C = init + A W for a non-f32 W: one thread per output (gemm_output: the
// reader's chain over all of K, then its finish), a warp per row and 32
// columns, so the warp reads one A row (a broadcast) and 32 contiguous
// lanes of W.
template <class R>
__global__ void __launch_bounds__(kThreads) gemm_typed(GemmParams g) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = static_cast<int>(blockIdx.x) * 32 + lane;
  if (c >= g.n) return;  // no barrier below
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * kWarps + warp; r < g.m;
       r += static_cast<int64_t>(gridDim.y) * kWarps) {
    g.c[r * g.ldc + c] = gemm_output<R>(g, r, c);
  }
}

template <class R>
cudaError_t launch_gemm_typed(const GemmParams& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  const int64_t row_groups = (p.m + kWarps - 1) / kWarps;
  const dim3 grid(static_cast<unsigned>((p.n + 31) / 32), static_cast<unsigned>(row_groups < 65535 ? row_groups : 65535));
  gemm_typed<R><<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// ---------------------------------------------- activation quantization --

// Row r's quantization (block_ops.cuh): one block per row.
__global__ void __launch_bounds__(kThreads) quantize_rows(QuantizeParams p) {
  quantize_rows_blocks(p, blockIdx.x, gridDim.x);
}

}  // namespace

cudaError_t launch_gemm(const GemmParams& p, cudaStream_t stream) {
  switch (p.w.type) {
    case kWeightF16: return launch_gemm_typed<Reader<kWeightF16>>(p, stream);
    case kWeightI8: return launch_gemm_typed<Reader<kWeightI8>>(p, stream);
    case kWeightI4: return launch_gemm_typed<Reader<kWeightI4>>(p, stream);
    default: return launch_gemm_f32(p, RowsA{p.a, p.lda}, stream);
  }
}

cudaError_t launch_conv(const ConvParams& p, cudaStream_t stream) {
  const int32_t out_g = p.out_channels / p.groups, in_g = p.channels / p.groups;
  for (int32_t g = 0; g < p.groups; ++g) {
    GemmParams gp{};
    gp.m = p.steps_out * p.batch;
    gp.w.data = p.weight + g * p.group_stride;
    gp.w.type = kWeightF32;
    gp.w.gates = 1;
    gp.w.cols = in_g * p.kernel;
    gp.bias = p.bias ? p.bias + g * p.bias_group_stride : nullptr;
    gp.c = p.out + g * out_g;
    gp.ldc = p.out_channels;
    gp.n = out_g;
    const cudaError_t e = launch_gemm_f32(gp, ConvA{p, g}, stream);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t launch_quantize(const QuantizeParams& p, cudaStream_t stream) {
  if (p.rows == 0) return cudaSuccess;
  quantize_rows<<<static_cast<unsigned>(p.rows < 65535 ? p.rows : 65535), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t check_kernel_image() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(gemm_f32_panel8<RowsA>));
}

}  // namespace cuda
}  // namespace ferry
