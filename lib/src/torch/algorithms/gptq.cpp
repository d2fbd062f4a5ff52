// GPTQ (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization
// for Generative Pre-trained Transformers", Algorithm 1): round a weight
// matrix column by column; after each column, spread its rounding error
// over the columns not yet rounded, using the upper Cholesky factor of the
// inverse Hessian H = sum x x^T of the layer's inputs. Columns are updated
// lazily in blocks. All arithmetic is float64; values are rounded on the
// grid of the nearest rounding (its scales stay), so the result is stored
// exactly like a round-to-nearest weight.
#include <ATen/ATen.h>

#include <algorithm>
#include <limits>

#include "taoquant/error.h"
#include "taoquant/weight_algorithms.h"

namespace tq {

namespace {

// The upper Cholesky factor of H^-1, after dampening: damp * mean(diag(H))
// added to the diagonal; inputs that never vary (zero diagonal) get 1.
// A Hessian that is not positive definite after dampening (rank-deficient
// inputs) is dampened 10x more, up to 1000x, as GPTQ implementations do.
at::Tensor inverse_factor(at::Tensor h, double damp) {
  at::Tensor diag = h.diagonal();
  diag.masked_fill_(diag == 0, 1.0);
  const double mean = diag.mean().item<double>();
  for (int attempt = 0;; ++attempt) {
    at::Tensor hd = h.clone();
    hd.diagonal() += damp * mean;
    auto [l, info] = at::linalg_cholesky_ex(hd);
    if (info.item<int64_t>() == 0) {
      auto [u, info2] = at::linalg_cholesky_ex(at::cholesky_inverse(l), /*upper=*/true);
      if (info2.item<int64_t>() == 0) return u;
    }
    if (attempt == 3)
      throw RuntimeError("gptq: the Hessian is not positive definite even with damp " +
                         std::to_string(damp));
    damp *= 10;
  }
}

// One block [i1, i2) of columns of W ([rows, K], float64, contiguous): rounds
// each column on the grid, updates the block's later columns, returns the
// scaled errors [rows, i2 - i1] for the lazy update of the columns after it.
at::Tensor round_block(at::Tensor& w, const at::Tensor& u, int64_t i1, int64_t i2,
                       const std::vector<int64_t>& col_index, int64_t row0, int64_t K_full,
                       const wformat::WeightGrid& grid) {
  const int64_t rows = w.size(0), K = w.size(1), n = i2 - i1;
  at::Tensor err = at::zeros({rows, n}, at::kDouble);
  double* W = w.data_ptr<double>();
  double* E = err.data_ptr<double>();
  const auto U = u.accessor<double, 2>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = i1 + i;
    const double d = U[c][c];
    const auto flat_col = static_cast<size_t>(col_index[static_cast<size_t>(c)]);
    for (int64_t r = 0; r < rows; ++r) {
      double& x = W[r * K + c];
      const size_t flat = static_cast<size_t>(row0 + r) * static_cast<size_t>(K_full) + flat_col;
      const double q = grid.nearest(flat, static_cast<float>(x));
      const double e = (x - q) / d;
      x = q;
      E[r * n + i] = e;
      for (int64_t j = c + 1; j < i2; ++j) W[r * K + j] -= e * U[c][j];
    }
  }
  return err;
}

// GPTQ on one group of rows [row0, row0 + w.size(0)) with its Hessian.
void gptq_group(at::Tensor& w, at::Tensor h, int64_t row0, int64_t K_full,
                const wformat::WeightGrid& grid, const GptqSettings& s) {
  const int64_t K = w.size(1);
  std::vector<int64_t> order(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) order[static_cast<size_t>(k)] = k;
  at::Tensor perm;
  if (s.act_order) {
    perm = std::get<1>(h.diagonal().sort(/*stable=*/true, /*dim=*/0, /*descending=*/true));
    const auto* p = perm.data_ptr<int64_t>();
    order.assign(p, p + K);
    w = w.index_select(1, perm).contiguous();
    h = h.index_select(0, perm).index_select(1, perm);
  }
  at::Tensor u = inverse_factor(h.clone(), s.damp).contiguous();
  const int64_t B = std::max(1, s.block_size);
  for (int64_t i1 = 0; i1 < K; i1 += B) {
    const int64_t i2 = std::min(i1 + B, K);
    at::Tensor err = round_block(w, u, i1, i2, order, row0, K_full, grid);
    if (i2 < K)
      w.narrow(1, i2, K - i2).sub_(at::matmul(err, u.narrow(0, i1, i2 - i1).narrow(1, i2, K - i2)));
  }
  if (s.act_order) w = w.index_select(1, at::argsort(perm)).contiguous();
}

}  // namespace

std::vector<float> gptq_round(const at::Tensor& weight, const at::Tensor& h,
                              const wformat::WeightGrid& grid, const GptqSettings& s) {
  const int64_t rows = weight.size(0);
  const int64_t K = weight.numel() / std::max<int64_t>(rows, 1);
  const int64_t groups = h.size(0);
  if (h.dim() != 3 || h.size(1) != K || h.size(2) != K || rows % groups != 0)
    throw RuntimeError("gptq: a Hessian of shape " + std::to_string(h.size(0)) + "x" +
                       std::to_string(h.size(1)) + " does not fit a weight of " +
                       std::to_string(rows) + " rows of " + std::to_string(K));
  // A copy: the caller's weight stays as it is (GPTQ updates in place).
  at::Tensor w = weight.detach().reshape({rows, K}).to(at::kDouble).clone().contiguous();
  const int64_t per = rows / groups;
  std::vector<float> out(static_cast<size_t>(rows * K));
  for (int64_t g = 0; g < groups; ++g) {
    at::Tensor wg = w.narrow(0, g * per, per).contiguous();
    gptq_group(wg, h[g].to(at::kDouble), g * per, K, grid, s);
    const double* p = wg.data_ptr<double>();
    for (int64_t i = 0; i < per * K; ++i)
      out[static_cast<size_t>(g * per * K + i)] = static_cast<float>(p[i]);
  }
  return out;
}

// Sequential GPTQ (the asymmetric objective of GPTAQ, Li et al. 2025): the
// weight whose outputs on the rounded model's inputs x~ come closest to the
// float layer's outputs W x: argmin_V ||W X - V X~||^2 + lambda ||V - W||^2
// = (W X X~^T + lambda W)(H~ + lambda I)^-1 = W + R (H~ + lambda I)^-1, with
// R = W (X - X~) X~^T and H~ = X~ X~^T; lambda = damp * mean(diag H~). With
// no error coming in (X~ = X) it is W. GPTQ then rounds V against H~:
// ||W X - Q X~||^2 is ||W X - V X~||^2 (fixed) plus ||(V - Q) X~||^2 (exactly
// so as lambda -> 0), so rounding V minimizes the layer's output error in
// the partly rounded model, incoming error included.
at::Tensor gptq_corrected_target(const at::Tensor& w, const at::Tensor& h, const at::Tensor& r,
                                 double damp) {
  const int64_t rows = w.size(0), K = w.numel() / std::max<int64_t>(rows, 1);
  const int64_t per = rows / h.size(0);
  at::Tensor w2 = w.reshape({rows, K}).to(at::kDouble), out = w2.clone();
  for (int64_t g = 0; g < h.size(0); ++g) {
    at::Tensor hg = h[g].clone();
    const double mean = hg.diagonal().mean().item<double>();
    const double lambda = damp * (mean > 0 ? mean : 1.0);
    hg.diagonal() += lambda;
    // V_g^T = W_g^T + (H~ + lambda I)^-1 R_g^T; H~ + lambda I is positive definite.
    out.narrow(0, g * per, per) += at::cholesky_solve(r[g].t(), at::linalg_cholesky(hg)).t();
  }
  return out.reshape(w.sizes()).to(at::kFloat).contiguous();
}

// The grid GPTQ rounds on: the nearest rounding's scales, each slice's
// (channel's or group's) shrunk by the factor in {1, 0.95, ..., 0.5} whose
// nearest rounding has the least error weighted by the Hessian's diagonal
// (each column's input energy). At 4 bits, clipping a channel's few largest
// weights often costs less than coarse steps for all the others (the grid
// search of GPTQ's reference code, weighted as GPTQ's objective is).
wformat::QuantizedWeight gptq_searched_grid(const wformat::QuantizedWeight& nearest,
                                            const at::Tensor& w, const at::Tensor& h) {
  wformat::QuantizedWeight trial = nearest;
  const wformat::WeightGrid grid(trial);  // reads trial's scales as they change
  const int64_t rows = w.size(0), K = w.numel() / std::max<int64_t>(rows, 1);
  const int64_t per = rows / std::max<int64_t>(h.size(0), 1);
  const at::Tensor diag = h.diagonal(0, 1, 2).to(at::kDouble).contiguous();  // [groups, K]
  const double* D = diag.data_ptr<double>();
  const float* W = w.data_ptr<float>();
  const size_t slices = nearest.scales.size();
  std::vector<double> best(slices, std::numeric_limits<double>::infinity()), factor(slices, 1.0);
  for (int step = 0; step <= 10; ++step) {
    const double f = 1.0 - 0.05 * step;
    for (size_t i = 0; i < slices; ++i) trial.scales[i] = static_cast<float>(nearest.scales[i] * f);
    std::vector<double> err(slices, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < K; ++k) {
        const auto flat = static_cast<size_t>(r * K + k);
        const double d = W[flat] - grid.nearest(flat, W[flat]);
        err[grid.slice(flat)] += D[(r / per) * K + k] * d * d;
      }
    for (size_t i = 0; i < slices; ++i)
      if (err[i] < best[i]) best[i] = err[i], factor[i] = f;
  }
  for (size_t i = 0; i < slices; ++i)
    trial.scales[i] = static_cast<float>(nearest.scales[i] * factor[i]);
  return trial;
}

}  // namespace tq
