#include "quantize/gptq.h"

#include <Eigen/Cholesky>
#include <algorithm>
#include <cmath>

#include "error.h"
#include "weight_layout.h"
#include "weight_quant.h"

namespace ferry::conv {

InputMoments::InputMoments(uint32_t cols) : cols_(cols), sum_(Eigen::MatrixXd::Zero(cols, cols)) {}

void InputMoments::add(const float* x, uint64_t n, uint64_t stride) {
  // Rows in chunks, each a rank-k update of the lower triangle (one product
  // per chunk; the order of the chunks is the order of the rows).
  constexpr uint64_t kChunk = 256;
  Eigen::MatrixXd chunk(cols_, kChunk);
  for (uint64_t begin = 0; begin < n; begin += kChunk) {
    const uint64_t m = std::min(kChunk, n - begin);
    for (uint64_t i = 0; i < m; ++i) {
      const float* row = x + (begin + i) * stride;
      for (uint32_t k = 0; k < cols_; ++k) chunk(k, static_cast<Eigen::Index>(i)) = row[k];
    }
    sum_.selfadjointView<Eigen::Lower>().rankUpdate(chunk.leftCols(static_cast<Eigen::Index>(m)));
  }
  count_ += n;
}

Eigen::MatrixXd InputMoments::matrix() const {
  Eigen::MatrixXd full = sum_.selfadjointView<Eigen::Lower>();
  return full;
}

namespace {

// U, the upper Cholesky factor of (H + lambda I)^-1 (dead inputs: diag 1),
// damped more (x10, up to 1e6 times) while the factorisations fail.
Eigen::MatrixXd inverse_cholesky_upper(const std::string& what, const Eigen::MatrixXd& h) {
  const Eigen::Index K = h.rows();
  Eigen::MatrixXd hd = h;
  for (Eigen::Index k = 0; k < K; ++k)
    if (hd(k, k) == 0.0) hd(k, k) = 1.0;
  if (!hd.allFinite()) throw Error(what + ": the calibration inputs' second moment is not finite");
  const double mean_diag = hd.diagonal().mean();
  double damp = kGptqDamp;
  for (int attempt = 0; attempt < 7; ++attempt, damp *= 10) {
    Eigen::MatrixXd a = hd;
    a.diagonal().array() += damp * mean_diag;
    Eigen::LLT<Eigen::MatrixXd> llt(a);
    if (llt.info() != Eigen::Success) continue;
    Eigen::MatrixXd inv = llt.solve(Eigen::MatrixXd::Identity(K, K));
    inv = 0.5 * (inv + inv.transpose()).eval();
    Eigen::LLT<Eigen::MatrixXd> llt_inv(inv);
    if (llt_inv.info() != Eigen::Success) continue;
    return llt_inv.matrixU();
  }
  throw Error(what + ": the calibration inputs' second moment stays indefinite however it is damped");
}

// q = round_even(w / d) clamped to [lo, hi]: the quotient in float, as
// rounding to nearest computes it (with no error to spread, a diagonal H,
// the two roundings agree bit for bit); bounded first, as round_even takes
// |t| < 2^22.
int on_grid(double w, float d, int lo, int hi) {
  float t = static_cast<float>(w) / d;
  t = t > 1024.0f ? 1024.0f : t < -1024.0f ? -1024.0f : t;
  const int q = quant::round_even(t);
  return q > hi ? hi : q < lo ? lo : q;
}

// The f16 scale of one row's group [k0, k1) (its current weights `w`): the
// candidate d_a = f16(m (1 - a/50) / -8), a = 0 .. kGptqScaleCandidates - 1,
// whose GPTQ pass over the group (in-group feedback, U's diagonal block)
// leaves the least loss sum e_k^2, the first on ties. Returns 0 for a group
// whose d_0 is 0 in f16 (stored as 1.0 with q = 0).
uint16_t group_scale(const std::string& what, const double* w, uint32_t k0, uint32_t k1, const Eigen::MatrixXd& U) {
  float m = 0.0f;
  for (uint32_t j = k0; j < k1; ++j) {
    const float v = static_cast<float>(w[j - k0]);
    if (quant::magnitude(v) > quant::magnitude(m)) m = v;
  }
  const uint16_t d0 = layout::half_from_float(m / -8.0f);
  if (!quant::finite(layout::float_from_half(d0))) {
    throw Error("tensor '" + what + "' cannot be stored as int4: int4 needs finite weights of magnitude below 524032");
  }
  if (layout::float_from_half(d0) == 0.0f) return 0;
  uint16_t best = d0;
  double best_loss = INFINITY;
  double g[layout::kGroup];
  for (uint32_t a = 0; a < kGptqScaleCandidates; ++a) {
    const uint16_t dh = layout::half_from_float(m * (1.0f - 0.02f * static_cast<float>(a)) / -8.0f);
    const float d = layout::float_from_half(dh);
    if (d == 0.0f) continue;
    for (uint32_t j = k0; j < k1; ++j) g[j - k0] = w[j - k0];
    double loss = 0;
    for (uint32_t j = k0; j < k1; ++j) {
      const double e = (g[j - k0] - on_grid(g[j - k0], d, -8, 7) * static_cast<double>(d)) / U(j, j);
      loss += e * e;
      for (uint32_t i = j + 1; i < k1; ++i) g[i - k0] -= e * U(j, i);
    }
    if (loss < best_loss) {
      best_loss = loss;
      best = dh;
    }
  }
  return best;
}

}  // namespace

RoundedMatrix round_gptq(const std::string& what, const float* w, uint32_t rows, uint32_t cols, DType dtype,
                         const Eigen::MatrixXd& h) {
  if (dtype != DType::I8 && dtype != DType::I4) throw Error("internal: " + what + ": GPTQ rounds to int8 or int4");
  if (h.rows() != cols || h.cols() != cols) throw Error("internal: " + what + ": moment matrix of the wrong size");
  if (dtype == DType::I8 && cols > layout::kMaxI8Cols) throw Error("internal: " + what + ": too wide for int8");
  RoundedMatrix out;
  out.dtype = dtype;
  out.rows = rows;
  out.cols = cols;
  out.q.assign(uint64_t{rows} * cols, 0);
  const uint64_t groups = layout::group_count(cols);
  if (rows == 0 || cols == 0) return out;

  Eigen::MatrixXd W(rows, cols);  // column-major: a column of W is contiguous
  for (uint32_t r = 0; r < rows; ++r) {
    for (uint32_t k = 0; k < cols; ++k) {
      const float v = w[uint64_t{r} * cols + k];
      if (!quant::finite(v)) throw Error("tensor '" + what + "' cannot be stored as " + dtype_name(dtype) +
                                         ": it holds a non-finite weight");
      W(r, k) = v;
    }
  }
  // int8: scales from the original rows, exactly as rounding to nearest.
  const Eigen::MatrixXd U = inverse_cholesky_upper(what, h);
  std::vector<float> scale(rows, 1.0f);  // the current column's scale per row
  if (dtype == DType::I8) {
    out.row_scales.assign(rows, 1.0f);
    for (uint32_t r = 0; r < rows; ++r) {
      float m = 0.0f;
      for (uint32_t k = 0; k < cols; ++k) m = std::max(m, quant::magnitude(w[uint64_t{r} * cols + k]));
      out.row_scales[r] = m > 0.0f ? m / 127.0f : 1.0f;
      scale[r] = out.row_scales[r];
    }
  } else {
    out.group_scales.assign(uint64_t{rows} * groups, 0x3c00);
  }
  const int lo = dtype == DType::I8 ? -127 : -8, hi = dtype == DType::I8 ? 127 : 7;
  std::vector<bool> zero_group(rows, false);  // int4: the row's current group has d = 0 in f16

  Eigen::VectorXd err(rows);
  Eigen::MatrixXd block_err(rows, kGptqBlock);
  for (uint32_t b0 = 0; b0 < cols; b0 += kGptqBlock) {
    const uint32_t b1 = std::min(cols, b0 + kGptqBlock);
    for (uint32_t k = b0; k < b1; ++k) {
      if (dtype == DType::I4 && k % layout::kGroup == 0) {
        // This group's scales, from its current weights.
        const uint32_t k1 = std::min(cols, k + layout::kGroup);
        double current[layout::kGroup];
        for (uint32_t r = 0; r < rows; ++r) {
          for (uint32_t j = k; j < k1; ++j) current[j - k] = W(r, j);
          const uint16_t dh = group_scale(what, current, k, k1, U);
          zero_group[r] = dh == 0;
          out.group_scales[uint64_t{r} * groups + k / layout::kGroup] = zero_group[r] ? 0x3c00 : dh;
          scale[r] = layout::float_from_half(dh);
        }
      }
      const double ukk = U(k, k);
      for (uint32_t r = 0; r < rows; ++r) {
        const double v = W(r, k);
        const int q = zero_group[r] ? 0 : on_grid(v, scale[r], lo, hi);
        out.q[uint64_t{r} * cols + k] = static_cast<int8_t>(q);
        err(r) = (v - q * static_cast<double>(scale[r])) / ukk;
      }
      // The error of column k onto the block's later columns now ...
      if (k + 1 < b1) {
        W.middleCols(k + 1, b1 - k - 1).noalias() -= err * U.row(k).segment(k + 1, b1 - k - 1);
      }
      block_err.col(k - b0) = err;
    }
    // ... and onto every column after the block in one product.
    if (b1 < cols) {
      W.rightCols(cols - b1).noalias() -=
          block_err.leftCols(b1 - b0) * U.block(b0, b1, b1 - b0, cols - b1);
    }
  }
  return out;
}

}  // namespace ferry::conv
