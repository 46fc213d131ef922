// The phases of a recurrent step as block-level device functions (phase A:
// the gates of a block's hidden panels, the cell update, h and y; phase B:
// an LSTM projection), shared by the kernels that run them: the launched
// step and persistent kernels (recurrent.cu) and the resident streaming
// kernel (resident.cu). What a phase computes and in which order is
// device_math.h (phase_a_unit, phase_b_row, cell_update) and
// device_weights.h (the chains); this file maps it onto threads. Data a
// phase reads after other blocks wrote it (the hidden state between steps,
// h_full before a projection) is read with __ldcg, from L2, never from a
// stale L1 line.
//
// Included by .cu files only, inside no namespace; everything here is in
// an anonymous namespace of ferry::cuda, one copy per including file.
#pragma once

#include "backend/cuda/kernels.h"

namespace ferry {
namespace cuda {
namespace {

__device__ __forceinline__ int min_int(int a, int b) { return a < b ? a : b; }

// Partial products of `vecs` vectors of `w` (G gates, K columns, any weight
// type) with `nb` staged activation rows (`act`, `act_stride` bytes apart:
// floats, or quantized bytes for int8 / int4), into part[s][tile][vecs * 8]:
// warp items (vector quad, column split, group of kBatchGroup samples);
// lane l takes vector 4*quad + l/8, lane j = l%8. One chain per (output,
// sample, split), chunks ascending: lane_partial's, several samples per
// weight load.
template <class R>
__device__ __forceinline__ void panel_products(const DeviceWeight& w, int vecs, const uint8_t* act, size_t act_stride,
                                               int nb, int tile, typename R::Partial* part) {
  const uint32_t K = static_cast<uint32_t>(w.cols);
  const int splits = static_cast<int>(k_splits_for(K));
  const int rows = vecs * 8, quads = (vecs + kVectorsPerWarp - 1) / kVectorsPerWarp;
  const int groups = (nb + kBatchGroup - 1) / kBatchGroup;
  const int items = quads * splits * groups;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int it = warp; it < items; it += kWarps) {
    const int group = it % groups, s = (it / groups) % splits, quad = it / (groups * splits);
    const int v = quad * kVectorsPerWarp + (lane >> 3), j = lane & 7;
    if (v >= vecs) continue;
    uint32_t c0 = 0, c1 = 0;
    split_chunks(R::kType, K, static_cast<uint32_t>(splits), static_cast<uint32_t>(s), &c0, &c1);
    const int bb0 = group * kBatchGroup, nq = min_int(kBatchGroup, nb - bb0);
    const Lane l = R::lane(w, static_cast<uint32_t>(v), static_cast<uint32_t>(j));
    const uint8_t* a0 = act + static_cast<size_t>(bb0) * act_stride;
    typename R::Partial acc[kBatchGroup];
#pragma unroll
    for (int q = 0; q < kBatchGroup; ++q) acc[q] = R::zero();
    // Unrolled so that several loads of W are in flight at once (a step
    // reads W_hh from L2: without it one load waited on the last, 15 us for
    // H = 64 on an H100); the chain is the same.
#pragma unroll 8
    for (uint32_t c = c0; c < c1; ++c) {
      const typename R::Chunk wk = R::load(l, c);
#pragma unroll
      for (int q = 0; q < kBatchGroup; ++q) {
        if (q < nq) acc[q] = R::mac(wk, a0 + static_cast<size_t>(q) * act_stride, c, acc[q]);
      }
    }
#pragma unroll
    for (int q = 0; q < kBatchGroup; ++q) {
      if (q < nq) part[(static_cast<size_t>(s) * tile + bb0 + q) * rows + v * 8 + j] = acc[q];
    }
  }
}

// Stages rows [b0, b0 + nb) of `src` (K floats each, written by other blocks
// or kernels: from L2) into hs, and for int8 / int4 quantizes them into
// hq (ldq bytes a row) and hscale: a warp per row, the maximum exact in any
// order, so every block makes the bytes quantize_row makes.
template <class R>
__device__ void stage_rows(const float* src, int K, int b0, int nb, float* hs, const PhaseShared& L, uint8_t* smem) {
#pragma unroll 8
  for (int e = threadIdx.x; e < nb * K; e += kThreads) hs[e] = __ldcg(src + static_cast<size_t>(b0) * K + e);
  __syncthreads();
  if (!R::kQuantized) return;
  float* hscale = reinterpret_cast<float*>(smem + L.scales);
  int8_t* hq = reinterpret_cast<int8_t*>(smem + L.q);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int bb = warp; bb < nb; bb += kWarps) {
    const float* x = hs + static_cast<size_t>(bb) * K;
    uint32_t m = 0;
    for (int k = lane; k < K; k += 32) {
      const uint32_t b = magnitude_bits(x[k]);
      m = b > m ? b : m;
    }
    for (int off = 16; off > 0; off >>= 1) {
      const uint32_t o = __shfl_xor_sync(0xffffffffu, m, off);
      m = o > m ? o : m;
    }
    float scale = 0.0f, inv = 0.0f;
    row_quantizer(m, &scale, &inv);
    if (lane == 0) hscale[bb] = scale;
    int8_t* q = hq + static_cast<size_t>(bb) * L.ldq;
    for (int k = lane; k < static_cast<int>(L.ldq); k += 32) q[k] = k < K ? quantize_value(x[k], inv) : 0;
  }
  __syncthreads();
}

// Phase A of step i for the hidden panels [p0, p1), whose W_hh panels are
// `w` (a slice of global memory or the block's shared copy); samples
// [b_begin, b_end). smem: phase_shared's regions.
template <class R>
__device__ void phase_a(const RecurrentParams& p, const DeviceWeight& w, int p0, int p1, int b_begin, int b_end,
                        const CallView& call, int i, uint8_t* smem) {
  const int G = p.gates, P = p.h_out;
  const StepView sv = step_view(p, call, i);
  const int vecs = (p1 - p0) * G, rows = vecs * 8, units = (p1 - p0) * 8;
  const int tile = p.batch_tile;
  const PhaseShared L = phase_shared(R::kType, static_cast<uint32_t>(P), static_cast<uint32_t>(tile),
                                     static_cast<uint32_t>(rows));
  float* hs = reinterpret_cast<float*>(smem);
  const float* hscale = reinterpret_cast<const float*>(smem + L.scales);
  typename R::Partial* part = reinterpret_cast<typename R::Partial*>(smem + L.part);
  const uint8_t* act = R::kQuantized ? smem + L.q : smem;
  const size_t act_stride = R::kQuantized ? L.ldq : static_cast<size_t>(P) * sizeof(float);
  for (int b0 = b_begin; b0 < b_end; b0 += tile) {
    const int nb = min_int(tile, b_end - b0);
    stage_rows<R>(sv.h_prev, P, b0, nb, hs, L, smem);
    panel_products<R>(w, vecs, act, act_stride, nb, tile, part);
    __syncthreads();
    for (int e = threadIdx.x; e < nb * units; e += kThreads) {
      const int bb = e / units;
      phase_a_unit<R>(p, w, call, sv, p0, tile, rows, hs, R::kQuantized ? hscale[bb] : 0.0f, part, bb, b0 + bb,
                      e % units);
    }
    __syncthreads();
  }
}

// Phase B of step i (LSTM projection) for the projection panels [q0, q1):
// h = W_hr h_full.
template <class R>
__device__ void phase_b(const RecurrentParams& p, int q0, int q1, const CallView& call, int i, uint8_t* smem) {
  const int H = p.hidden, B = call.batch;
  const StepView sv = step_view(p, call, i);
  const int vecs = q1 - q0, rows = vecs * 8;
  const int tile = p.proj_batch_tile;
  const DeviceWeight w = panel_slice(p.w_hr, static_cast<uint32_t>(q0));  // G = 1: panel q is 8 rows
  const PhaseShared L = phase_shared(R::kType, static_cast<uint32_t>(H), static_cast<uint32_t>(tile),
                                     static_cast<uint32_t>(rows));
  float* hs = reinterpret_cast<float*>(smem);
  const float* hscale = reinterpret_cast<const float*>(smem + L.scales);
  typename R::Partial* part = reinterpret_cast<typename R::Partial*>(smem + L.part);
  const uint8_t* act = R::kQuantized ? smem + L.q : smem;
  const size_t act_stride = R::kQuantized ? L.ldq : static_cast<size_t>(H) * sizeof(float);
  for (int b0 = 0; b0 < B; b0 += tile) {
    const int nb = min_int(tile, B - b0);
    stage_rows<R>(p.h_full, H, b0, nb, hs, L, smem);
    panel_products<R>(w, vecs, act, act_stride, nb, tile, part);
    __syncthreads();
    for (int e = threadIdx.x; e < nb * rows; e += kThreads) {
      const int bb = e / rows;
      phase_b_row<R>(p, w, call, sv, q0, tile, rows, R::kQuantized ? hscale[bb] : 0.0f, part, bb, b0 + bb, e % rows);
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

}  // namespace
}  // namespace cuda
}  // namespace ferry
