// nibble CLI: the calibration part of `nibble report` — output error and time of RTN,
// importance-weighted K-quants, GPTQ, AWQ, GPTQ/AWQ into Q4_K and SmoothQuant W8A8 on a synthetic
// LLM-like layer.
#include <chrono>
#include <cstdio>
#include <vector>

#include <Eigen/Dense>

#include "nibble/nibble.hpp"
#include "nibble/quant/awq.hpp"
#include "nibble/quant/gptq.hpp"
#include "nibble/quant/hessian.hpp"
#include "nibble/quant/rtn.hpp"
#include "nibble/quant/smoothquant.hpp"
#include "nibble/quant/synthetic.hpp"
#include "report.hpp"

namespace nibble::cli {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Dequantized K-quant blocks as an Eigen matrix.
Eigen::MatrixXf blocks_to_matrix(Format f, const std::vector<std::uint8_t>& q, Eigen::Index rows,
                                 Eigen::Index cols) {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> m(rows, cols);
  dequantize(f, q.data(), rows, cols, m.data());
  return m;
}

void row(const char* method, const char* grid, double err, double baseline, double secs) {
  std::printf("%-28s %-16s %12.4e %9.3f %9.2f\n", method, grid, err, err / baseline, secs);
}

}  // namespace

void report_calibration(const CalibOptions& o) {
  synthetic::LayerSpec spec;
  spec.out = static_cast<int>(o.out);
  spec.in = static_cast<int>(o.in);
  spec.tokens = static_cast<int>(o.tokens);
  spec.seed = o.seed;
  const synthetic::Layer L = synthetic::make_layer(spec);
  const Eigen::MatrixXf& W = L.W;
  const Eigen::MatrixXf& X = L.X;
  const Eigen::Index rows = W.rows(), cols = W.cols();

  std::printf(
      "\ncalibration: layer %d x %d, %d calibration tokens (log-normal row scales,\n"
      "correlated inputs, 1%% outlier channels 20-50x); error = ||(W-Q) X^T||^2 / "
      "||W X^T||^2\n\n",
      spec.out, spec.in, spec.tokens);
  std::printf("%-28s %-16s %12s %9s %9s\n", "method", "grid", "out.error", "vs RTN", "time s");

  auto t0 = Clock::now();
  // Hessian::add_batch wants row-major tokens x cols; Eigen's default is column-major.
  const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> Xr = X;
  Hessian hess(cols);
  hess.add_batch(Xr.data(), Xr.rows());
  const double t_hess = since(t0);
  const Eigen::MatrixXf& H = hess.matrix();
  std::printf("%-28s %-16s %12s %9s %9.2f\n", "Hessian (2/n sum x x^T)", "-", "-", "-", t_hess);

  // GPTQ grid (asymmetric, group 128).
  t0 = Clock::now();
  const Eigen::MatrixXf Q_rtn = rtn::gptq_rtn(W, 4, 128, false, false);
  const double e_rtn = rtn::relative_output_error(W, Q_rtn, X);
  row("RTN", "int4 g128", e_rtn, e_rtn, since(t0));
  gptq::Config gc;
  t0 = Clock::now();
  const gptq::Result g = gptq::quantize(W, H, gc);
  row("GPTQ", "int4 g128", rtn::relative_output_error(W, g.Q, X), e_rtn, since(t0));
  gc.act_order = true;
  t0 = Clock::now();
  const gptq::Result ga = gptq::quantize(W, H, gc);
  row("GPTQ act-order", "int4 g128", rtn::relative_output_error(W, ga.Q, X), e_rtn, since(t0));

  // AWQ grid (min/max, zero point, group 128).
  t0 = Clock::now();
  const Eigen::MatrixXf Q_awq_rtn = rtn::awq_rtn(W, 4, 128, true, nullptr, nullptr);
  const double e_awq_rtn = rtn::relative_output_error(W, Q_awq_rtn, X);
  row("RTN (AWQ grid)", "int4 g128 zp", e_awq_rtn, e_awq_rtn, since(t0));
  t0 = Clock::now();
  const awq::Result a = awq::search(W, X, awq::Config{});
  row("AWQ scale + clip search", "int4 g128 zp", rtn::relative_output_error(W, a.W_eff, X),
      e_awq_rtn, since(t0));

  // K-quants: plain reference rounding, importance-weighted, GPTQ and AWQ into Q4_K.
  if (cols % 256 == 0) {
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> Wr = W;
    std::vector<std::uint8_t> q(row_bytes(Format::q4_K, cols) * static_cast<std::size_t>(rows));
    t0 = Clock::now();
    quantize(Format::q4_K, Wr.data(), rows, cols, q.data());
    const double t_q = since(t0);
    const double e_q4 =
        rtn::relative_output_error(W, blocks_to_matrix(Format::q4_K, q, rows, cols), X);
    row("Q4_K reference rounding", "Q4_K", e_q4, e_q4, t_q);
    const Eigen::VectorXf imp = H.diagonal();  // imatrix = mean of x^2 per column, up to scale
    t0 = Clock::now();
    quantize(Format::q4_K, Wr.data(), rows, cols, q.data(), imp.data());
    const double t_iq = since(t0);
    row("Q4_K importance (imatrix)", "Q4_K",
        rtn::relative_output_error(W, blocks_to_matrix(Format::q4_K, q, rows, cols), X), e_q4,
        t_iq);
    gptq::Config kc;
    t0 = Clock::now();
    const std::vector<std::uint8_t> gq = gptq::quantize_blocks(Format::q4_K, W, H, kc);
    row("GPTQ into Q4_K", "Q4_K",
        rtn::relative_output_error(W, blocks_to_matrix(Format::q4_K, gq, rows, cols), X), e_q4,
        since(t0));
    t0 = Clock::now();
    awq::Result ar;
    (void)awq::search_blocks(Format::q4_K, W, X, awq::Config{}, &ar);
    row("AWQ into Q4_K", "Q4_K", rtn::relative_output_error(W, ar.W_eff, X), e_q4, since(t0));
  }

  // SmoothQuant W8A8 (per-channel int8 weights, int8 activations).
  const Eigen::MatrixXf Y = X * W.transpose();
  const double ny = Y.squaredNorm();
  for (bool per_token : {true, false}) {
    const char* grid = per_token ? "W8A8 per-token" : "W8A8 per-tensor";
    t0 = Clock::now();
    const double e_naive = (smoothquant::w8a8_forward(X, W, per_token) - Y).squaredNorm() / ny;
    row("naive W8A8", grid, e_naive, e_naive, since(t0));
    t0 = Clock::now();
    const Eigen::VectorXf s = smoothquant::scales(smoothquant::act_absmax(X), W, 0.5f);
    const Eigen::MatrixXf Ys = smoothquant::w8a8_forward(
        smoothquant::smooth_act(X, s), smoothquant::smooth_weight(W, s), per_token);
    row("SmoothQuant alpha=0.5", grid, (Ys - Y).squaredNorm() / ny, e_naive, since(t0));
  }
  std::printf(
      "\nvs RTN: error relative to the baseline row above it with the same grid (RTN for\n"
      "int4, Q4_K reference rounding for Q4_K, naive W8A8 for SmoothQuant).\n");
}

}  // namespace nibble::cli
