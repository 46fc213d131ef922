// Calibration-aware rounding of a weight matrix onto the stored int8 / int4
// grids (`ferry convert --quantize int8|int4 --calibration X.npy`, the
// default there; `--rounding gptq`).
//
// A weight matrix W [R, K] meets inputs x (K-vectors) and computes W x.
// Rounding each weight to nearest (shared/weight_quant.h) minimises each
// weight's own error; what the model feels is the output error
// sum over the calibration inputs of ||(W - Q) x||^2 = tr((W - Q) H (W - Q)^T)
// with H = sum x x^T, the second moment of the inputs (InputMoments).
// GPTQ (Frantar, Ashkboos, Hoefler, Alistarh 2022, "GPTQ: Accurate
// Post-Training Quantization for Generative Pre-trained Transformers",
// the Optimal Brain Surgeon update applied column by column) chooses Q
// greedily in column order k = 0, 1, ..., K-1:
//
//   H'  = H + lambda I, lambda = kDamp * mean(diag H) (diag entries that are 0,
//         inputs the calibration never drove, are set to 1 first);
//   U   = the upper Cholesky factor of H'^-1 (H'^-1 = U^T U);
//   for k in order:  (int4: at k = 32 j, the scales of group j are chosen
//                     from the current W[:, 32 j .. 32 j + 31], below)
//     Q[:, k] = grid(W[:, k]) (the stored grid: per-row int8 scale, per-group
//               int4 f16 scale, round half to even, clamped);
//     e       = (W[:, k] - Q[:, k]) / U[k, k];
//     W[:, j] -= e * U[k, j] for every j > k (the error of column k, spread
//               over the columns not yet quantized, where H says the inputs
//               can absorb it).
//
// The grids are exactly shared/weight_quant.h's, so the result is stored in
// today's layouts (store_i8_panel8x4, store_i4_panel8x8q4) and every backend
// reads it unchanged:
//   int8  s = max |w| / 127 over the row's original weights (1.0 for an
//         all-zero row); q = round_even(w / s) clamped to [-127, 127].
//   int4  per (row, group of 32 k), when the group is reached: m = the
//         current element of largest magnitude (sign kept, the first one on
//         ties); the candidates d_a = f16(m * (1 - a/50) / -8) (in float,
//         then rounded to f16), a = 0 .. kGptqScaleCandidates - 1 (d_0 is
//         rounding to nearest's scale; the others clip the largest weights
//         for a finer step); each is tried by running this loop over the
//         group alone for that row (feedback inside the group only) and the
//         one leaving the least loss sum_k e_k^2 is kept, the first on ties;
//         q = round_even(w / d) clamped to [-8, 7]. d = 1.0 and q = 0 when
//         d_0 is 0 in f16.
// Rows are independent (H is shared), so the gate packing of a cell's
// matrix changes nothing: W is the logical [G*units, K] matrix.
//
// The columns are processed in blocks of kBlock (a multiple of 32, so no
// group straddles two blocks): inside a block each column updates the
// block's later columns at once, and the block's errors update the columns
// after it in one product, the same arithmetic regrouped. Double precision
// throughout; single-threaded Eigen, no data-dependent order: the same W and
// H give the same bits on every run.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <string>
#include <vector>

#include "plan/model_plan.h"  // RoundedMatrix

namespace ferry::conv {

// sum x x^T over the inputs a matrix meets, and their count.
class InputMoments {
 public:
  explicit InputMoments(uint32_t cols = 0);
  // Adds `n` input vectors of `cols` floats, `stride` floats apart.
  void add(const float* x, uint64_t n, uint64_t stride);
  uint32_t cols() const { return cols_; }
  uint64_t count() const { return count_; }
  // The symmetric K x K sum (both triangles filled).
  Eigen::MatrixXd matrix() const;

 private:
  uint32_t cols_;
  uint64_t count_ = 0;
  Eigen::MatrixXd sum_;  // lower triangle accumulated
};

constexpr double kGptqDamp = 0.01;   // lambda / mean(diag H)
constexpr uint32_t kGptqBlock = 128; // columns per lazy-update block (a multiple of 32)
constexpr uint32_t kGptqScaleCandidates = 20;  // int4 scales tried per group: m/-8 down to 0.62 m/-8

// GPTQ-rounds `w` ([rows, cols], row-major) for inputs of second moment
// `h` ([cols, cols], symmetric positive semi-definite) onto `dtype`'s grid
// (I8 or I4). Throws Error naming `what` for a non-finite weight or moment,
// a weight beyond the grid's range (as rounding to nearest refuses it), or
// an H that stays indefinite however it is damped.
RoundedMatrix round_gptq(const std::string& what, const float* w, uint32_t rows, uint32_t cols, DType dtype,
                         const Eigen::MatrixXd& h);

}  // namespace ferry::conv
