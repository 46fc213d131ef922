// The batched LSTM and GRU steps in one kernel (kernel_set.h: batch_step,
// BatchStepArgs) for an ISA of 16 8-lane vector registers: AVX2
// (avx2.cpp includes this file after kernels.inl; f32_avx512 takes the GRU
// one from there). Written over the `Vec` of vec_<isa>.h.
//
// Why (W3: LSTM(64, 256), batch 64; a step is 2.6 M FMAs). gemm + update
// run the step as three passes over a 256 KiB gate buffer: the input GEMM
// writes it, the recurrent GEMM reads and rewrites it, the update reads it,
// each from L2; and the GEMM's 6 x 2 tile needs 64 = 10 x 6 + 4 rows (the
// 4-row tile reaches 86% of the FMA peak where 6 x 2 reaches 97%). Here a
// tile holds every gate of its rows for one panel, so the update runs on
// the registers: nothing is stored but c and h.
//
// Tiles (16 registers: accumulators, weights, one broadcast):
//   LSTM  3 rows x 4 gates: 12 accumulators, the i, f, g weights in
//         registers and o's read by each row's FMA (a memory operand on x86):
//         per k 3 + 3 loads, 3 broadcasts, 12 FMAs.
//   GRU   4 rows x 3 gates (r, z, n): 12 accumulators, 3 weights, 1
//         broadcast: per k 3 loads, 4 broadcasts, 12 FMAs. n's input part
//         (b_in + W_in x) is complete when W_hh starts: it waits in the
//         scratch (below) while the n register takes b_hn + W_hn h.
// Alone on data in L1 (Zen 4, 256-bit FMAs, thread CPU time against 12
// FMA chains), such k loops reach 97.5% (3 x 4, one gate from memory) and
// 98% (4 x 3) of the FMA peak, the GEMM's 6 x 2 tile 97%, 2 x 4 83%,
// 4 x 2 86%. In these kernels, W3's shape with the update left out: LSTM
// 97%, GRU 100%; with it (its sigmoids and tanhs run on the FMA pipes too,
// 7-8% of the step): LSTM 410, GRU 298 us a step against 445 and 323 for
// gemm + update, 90% and 92% of the peak.
//
// Order: rows in blocks of kBatchBlockRows; per block, panels outside, and
// the k of the step (W_ih's, then W_hh's: the chain's order) in passes of at
// most kBatchPassK, rows inside each pass. A panel's weights for W3 are
// 40 KiB (LSTM; GRU 30), more than a 32 KiB L1: streamed whole for every
// tile they would come from L2 at 21 bytes a cycle (Zen 3's L2 gives 32); a
// pass's share (at most 20 KiB) stays in L1 while the block's tiles run
// over it, and between passes each tile's chains wait in a stack scratch
// (kBatchBlockRows x 32 floats, 8 KiB) -- a float stored and loaded back is
// the same float, so the chains are unchanged. Each pass prefetches the
// next one's weights (batch_step_blocks says why). (On Zen 4, passes of 96,
// 128, 160 k and one pass of 320 measured within 1% of each other without
// the prefetches; with them 160 is 1% ahead of 128.)
//
// Numerics: each gate is the chain of kernel_set.h (bias or 0, W_ih x k
// ascending, W_hh h k ascending; GRU n: b_in + W_in x and b_hn + W_hn h
// apart), the update is lstm_finish_n of math.inl, or gru_finish's
// operations, on the registers: bit for bit the input gemm, the recurrent gemm continuing it
// and update[] (tests/unit/test_kernel_sets.cpp: BatchStepsAreGemmPlusUpdate),
// whatever the row and panel split between threads. Rows past their length
// get no update.

constexpr size_t kBatchBlockRows = 64;
constexpr uint32_t kBatchPassK = 160;

FERRY_VEC_INLINE bool batch_row_active(const BatchStepArgs& s, size_t m) {
  return !s.lengths || s.t < static_cast<size_t>(s.lengths[m]);
}

// acc[m][g] += sum over k in [0, n) of a[m][k] * w[k][g], k ascending (w: a
// panel's Panel8 rows from the pass's first k, G * 8 floats a row). The
// last gate's weights stay in memory where the registers are short
// (MR * G accumulators + G weights + a broadcast > 16): each row's FMA
// reads them.
template <int MR, int G>
FERRY_VEC_INLINE void batch_pass(Vec (&acc)[MR][G], const float* w, const float* const (&a)[MR], uint32_t n) {
  constexpr bool kLastInMemory = MR * G + G + 1 > 16;
  constexpr int kInRegisters = kLastInMemory ? G - 1 : G;
  for (uint32_t k = 0; k < n; ++k) {
    Vec wr[G];
#pragma GCC unroll 4
    for (int g = 0; g < kInRegisters; ++g) wr[g] = vload(w + g * 8);
#pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const Vec x = vbroadcast(a[m] + k);
#pragma GCC unroll 4
      for (int g = 0; g < kInRegisters; ++g) acc[m][g] = vfma(x, wr[g], acc[m][g]);
      if constexpr (kLastInMemory) acc[m][G - 1] = vfma(x, vload(w + (G - 1) * 8), acc[m][G - 1]);
    }
    w += G * 8;
  }
}

// The W_ih and W_hh parts of the pass [kb, ke) of the step's k (W_ih's
// [0, in), then W_hh's [in, in + h_in)) for rows m .. m+MR-1 of panel p.
// `between` runs once the W_ih part is complete and before the first W_hh
// k (GRU: n changes chains), if the pass holds that point.
template <int MR, int G, typename Between>
FERRY_VEC_INLINE void batch_range(Vec (&acc)[MR][G], const BatchStepArgs& s, size_t m, uint32_t p, uint32_t kb,
                                  uint32_t ke, Between&& between) {
  const uint32_t in = s.w_ih->cols, hin = s.w_hh->cols;
  if (kb < in) {
    const uint32_t k1 = ke < in ? ke : in;
    const float* a[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) a[r] = s.x + (m + r) * s.ldx + kb;
    const float* w = s.w_ih->f32() + p * layout::panel8_panel_elements(G, in) + size_t{kb} * G * 8;
    batch_pass<MR, G>(acc, w, a, k1 - kb);
  }
  if (ke > in) {
    if (kb <= in) between();
    const uint32_t k0 = (kb > in ? kb : in) - in, k1 = ke - in;
    const float* a[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) a[r] = s.h + (m + r) * s.ldh + k0;
    const float* w = s.w_hh->f32() + p * layout::panel8_panel_elements(G, hin) + size_t{k0} * G * 8;
    batch_pass<MR, G>(acc, w, a, k1 - k0);
  }
}

// Rows m .. m+MR-1 of panel p, pass [kb, ke) of the step's K; `scr`: the
// tile's scratch rows (32 floats each), where the chains wait between passes.
template <int MR>
static void lstm_batch_tile(const BatchStepArgs& s, size_t m, uint32_t p, uint32_t kb, uint32_t ke, float* scr) {
  const uint32_t kk = s.w_ih->cols + s.w_hh->cols;
  Vec acc[MR][4];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      acc[r][g] = kb > 0 ? vload(scr + r * 32 + g * 8) : s.bias ? vload(s.bias->f32() + size_t{p} * 32 + g * 8) : vzero();
    }
  }
  batch_range<MR, 4>(acc, s, m, p, kb, ke, [] {});
  if (ke < kk) {
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) vstore(scr + r * 32 + g * 8, acc[r][g]);
    return;
  }
  const uint32_t lanes = panel_lanes(p, s.hidden);
  bool all = true;
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) all = all && batch_row_active(s, m + r);
  if (all) {  // the rows' updates stage by stage (lstm_finish_n): MR chains at a time
    float* c[MR];
    float* h[MR];
    uint32_t ln[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      c[r] = s.c + (m + r) * s.ldc + size_t{p} * 8;
      h[r] = s.h_new + (m + r) * s.ldh_new + size_t{p} * 8;
      ln[r] = lanes;
    }
    lstm_finish_n<MR>(acc, c, h, ln);
    return;
  }
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
    if (!batch_row_active(s, m + r)) continue;  // ended: keeps its state
    lstm_finish(acc[r][0], acc[r][1], acc[r][2], acc[r][3], s.c + (m + r) * s.ldc, s.h_new + (m + r) * s.ldh_new, p,
                s.hidden);
  }
}

// gru_finish's operations (math.inl) for MR rows of panel p, stage by
// stage as lstm_finish_n: the 2 MR sigmoids, then the MR n, then the MR
// new h, so that the rows' dependent chains overlap (GRU(64, 256), batch
// 64: 298 against 304 us a step, each row's gru_finish in turn). Lane by
// lane the same operations: the same bits.
template <int MR>
FERRY_VEC_INLINE void gru_finish_rows(const Vec (&acc)[MR][3], const float* scr, const BatchStepArgs& s, size_t m,
                                      uint32_t p) {
  const uint32_t lanes = panel_lanes(p, s.hidden);
  Vec r[MR], z[MR], n[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    r[i] = vsigmoid(acc[i][0]);
    z[i] = vsigmoid(acc[i][1]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) n[i] = vtanh(vfma(r[i], acc[i][2], vload(scr + i * 32 + 24)));
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const Vec h0 = vload_lanes(s.h + (m + i) * s.ldh + size_t{p} * 8, lanes);
    vstore_lanes(s.h_new + (m + i) * s.ldh_new + size_t{p} * 8, vfma(z[i], vsub(h0, n[i]), n[i]), lanes);
  }
}

// GRU: scratch row = r, z, n (the chains between passes), then n's input
// part once W_hh has started.
template <int MR>
static void gru_batch_tile(const BatchStepArgs& s, size_t m, uint32_t p, uint32_t kb, uint32_t ke, float* scr) {
  const uint32_t kk = s.w_ih->cols + s.w_hh->cols;
  Vec acc[MR][3];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int g = 0; g < 3; ++g) {
      acc[r][g] = kb > 0 ? vload(scr + r * 32 + g * 8) : s.bias ? vload(s.bias->f32() + size_t{p} * 24 + g * 8) : vzero();
    }
  }
  batch_range<MR, 3>(acc, s, m, p, kb, ke, [&] {
    const Vec bhn = s.b_hn ? vload(s.b_hn->f32() + size_t{p} * 8) : vzero();
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      vstore(scr + r * 32 + 24, acc[r][2]);
      acc[r][2] = bhn;
    }
  });
  if (ke < kk) {
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int g = 0; g < 3; ++g) vstore(scr + r * 32 + g * 8, acc[r][g]);
    return;
  }
  bool all = true;
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) all = all && batch_row_active(s, m + r);
  if (all) {
    gru_finish_rows<MR>(acc, scr, s, m, p);
    return;
  }
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
    if (!batch_row_active(s, m + r)) continue;  // ended: keeps its state
    gru_finish(acc[r][0], acc[r][1], vload(scr + r * 32 + 24), acc[r][2], s.h + (m + r) * s.ldh,
               s.h_new + (m + r) * s.ldh_new, p, s.hidden);
  }
}

// The cache lines of the weights a pass [kb, ke) of panel p reads: W_ih's
// part and W_hh's (either may be empty), each a contiguous range.
struct PassLines {
  const char* a;
  size_t a_lines;
  const char* b;
  size_t b_lines;
};

FERRY_VEC_INLINE void line_range(const float* first, size_t bytes, const char** start, size_t* lines) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(first) & ~uintptr_t{63};
  *start = reinterpret_cast<const char*>(lo);
  *lines = (reinterpret_cast<uintptr_t>(first) + bytes - lo + 63) / 64;
}

template <int G>
FERRY_VEC_INLINE PassLines pass_lines(const BatchStepArgs& s, uint32_t p, uint32_t kb, uint32_t ke) {
  const uint32_t in = s.w_ih->cols, hin = s.w_hh->cols;
  constexpr size_t kRow = size_t{G} * 8 * sizeof(float);  // a panel's weights at one k
  PassLines l{nullptr, 0, nullptr, 0};
  if (kb < in) {
    const uint32_t e = ke < in ? ke : in;
    line_range(s.w_ih->f32() + p * layout::panel8_panel_elements(G, in) + size_t{kb} * G * 8, (e - kb) * kRow, &l.a,
               &l.a_lines);
  }
  if (ke > in) {
    const uint32_t b = (kb > in ? kb : in) - in;
    line_range(s.w_hh->f32() + p * layout::panel8_panel_elements(G, hin) + size_t{b} * G * 8, (ke - in - b) * kRow,
               &l.b, &l.b_lines);
  }
  return l;
}

// Rows [m0, m1), panels [p0, p1): blocks of rows, panels, passes, then the
// block's rows in tiles of MR and one tile of the rest.
//
// Each tile of a pass first prefetches its share of the next pass's weights
// (the same panel's next k, else the next panel's first pass), so that the
// next pass finds them in L1 wherever they were. Why: the weights of W3
// (1.25 MiB) fit neither a Zen 3's L2 (512 KiB) nor, streamed in a cycle
// each step, a Zen 4's (1 MiB); they come from the L3 every step, which the
// core shares with the other cores (and, on a cloud VM, other tenants).
// When another core's work has evicted them, each pass starts on misses to
// DRAM: on Zen 4 (AVX2 set, thread CPU time, min of 100 interleaved steps,
// W3's weights flushed from every cache before each step against not)
// LSTM 461 against 407 us a step, GRU 347 against 298 (gemm + update: 533
// against 428); prefetched, 412 against 414 and 301 against 301: the
// step's time no longer depends on where its weights were. The prefetches
// cost 1-2% when nothing was evicted. Passes of 160 k (LSTM 20 KiB, GRU 15
// KiB of weights) measured 1% ahead of 128 with and without eviction.
template <int G, int MR, void (*Tile1)(const BatchStepArgs&, size_t, uint32_t, uint32_t, uint32_t, float*),
          void (*Tile2)(const BatchStepArgs&, size_t, uint32_t, uint32_t, uint32_t, float*),
          void (*Tile3)(const BatchStepArgs&, size_t, uint32_t, uint32_t, uint32_t, float*),
          void (*TileMain)(const BatchStepArgs&, size_t, uint32_t, uint32_t, uint32_t, float*)>
FERRY_VEC_INLINE void batch_step_blocks(const BatchStepArgs& s, size_t m0, size_t m1, uint32_t p0, uint32_t p1) {
  alignas(64) float scratch[kBatchBlockRows * 32];
  const uint32_t kk = s.w_ih->cols + s.w_hh->cols;
  const uint32_t passes = (kk + kBatchPassK - 1) / kBatchPassK;
  // Pass i's k range: passes of equal size (+-1).
  const auto pass_begin = [kk, passes](uint32_t i) { return static_cast<uint32_t>(uint64_t{kk} * i / passes); };
  for (size_t mb = m0; mb < m1; mb += kBatchBlockRows) {
    const size_t me = m1 - mb < kBatchBlockRows ? m1 : mb + kBatchBlockRows;
    const size_t tiles = (me - mb + MR - 1) / MR;
    for (uint32_t p = p0; p < p1; ++p) {
      for (uint32_t i = 0; i < passes; ++i) {
        const uint32_t kb = pass_begin(i), ke = pass_begin(i + 1);
        // The next pass's lines, `per` a tile.
        PassLines next{nullptr, 0, nullptr, 0};
        if (i + 1 < passes) {
          next = pass_lines<G>(s, p, ke, pass_begin(i + 2));
        } else if (p + 1 < p1) {
          next = pass_lines<G>(s, p + 1, 0, pass_begin(1));
        } else if (me < m1) {
          next = pass_lines<G>(s, p0, 0, pass_begin(1));
        }
        const size_t per = (next.a_lines + next.b_lines + tiles - 1) / tiles;
        const auto prefetch_share = [&next, per] {
          size_t n = per;
          for (; n > 0 && next.a_lines > 0; --n, --next.a_lines, next.a += 64) __builtin_prefetch(next.a, 0, 3);
          for (; n > 0 && next.b_lines > 0; --n, --next.b_lines, next.b += 64) __builtin_prefetch(next.b, 0, 3);
        };
        size_t m = mb;
        for (; m + MR <= me; m += MR) {
          prefetch_share();
          TileMain(s, m, p, kb, ke, scratch + (m - mb) * 32);
        }
        if (m < me) prefetch_share();
        float* scr = scratch + (m - mb) * 32;
        switch (me - m) {
          case 3: Tile3(s, m, p, kb, ke, scr); break;
          case 2: Tile2(s, m, p, kb, ke, scr); break;
          case 1: Tile1(s, m, p, kb, ke, scr); break;
          default: break;
        }
      }
    }
  }
}

void lstm_batch_step(const BatchStepArgs& s, size_t m0, size_t m1, uint32_t p0, uint32_t p1) {
  batch_step_blocks<4, 3, lstm_batch_tile<1>, lstm_batch_tile<2>, lstm_batch_tile<3>, lstm_batch_tile<3>>(s, m0, m1,
                                                                                                           p0, p1);
}

void gru_batch_step(const BatchStepArgs& s, size_t m0, size_t m1, uint32_t p0, uint32_t p1) {
  batch_step_blocks<3, 4, gru_batch_tile<1>, gru_batch_tile<2>, gru_batch_tile<3>, gru_batch_tile<4>>(s, m0, m1, p0,
                                                                                                        p1);
}
