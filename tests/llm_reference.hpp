// Test helper: a naive double-precision reference forward pass of the tiny llama / qwen2 models
// of tiny_llama.hpp, written independently of nibble's (Hugging Face layout: Q/K rows
// un-permuted the way llama.cpp's converter permutes them, "rotate half" rotary embedding).
// Weights are read through nibble::dequantize, so quantized files work too.
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "nibble/io/gguf.hpp"
#include "nibble/llm/model.hpp"
#include "nibble/nibble.hpp"
#include "tiny_llama.hpp"

namespace nibble::test {

/// Row-major double matrix.
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Weight tensor as a double matrix (rows = output features).
inline Mat weight(const nibble::gguf::File& f, const std::string& name) {
  const nibble::gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) throw std::runtime_error("test: no tensor " + name);
  const std::int64_t cols = t->shape[0], rows = t->rows();
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  nibble::dequantize(nibble::llm::weight_format(t->type, name), t->data, rows, cols, v.data());
  Mat m(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) m(r, c) = v[static_cast<std::size_t>(r * cols + c)];
  return m;
}

inline Eigen::RowVectorXd vec(const nibble::gguf::File& f, const std::string& name) {
  Mat m = weight(f, name);
  return Eigen::Map<Eigen::RowVectorXd>(m.data(), m.size());
}

// Undo llama.cpp's convert permutation of Q/K rows: GGUF row h*hd + 2i + s holds HF row
// h*hd + s*hd/2 + i.
inline Mat unpermute(const Mat& w, std::int64_t n_heads) {
  const std::int64_t hd = w.rows() / n_heads;
  Mat out(w.rows(), w.cols());
  for (std::int64_t h = 0; h < n_heads; ++h)
    for (std::int64_t i = 0; i < hd / 2; ++i)
      for (std::int64_t s = 0; s < 2; ++s)
        out.row(h * hd + s * hd / 2 + i) = w.row(h * hd + 2 * i + s);
  return out;
}

inline Mat rms(const Mat& x, const Eigen::RowVectorXd& w, double eps) {
  Mat y(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    const double ms = x.row(t).squaredNorm() / static_cast<double>(x.cols());
    y.row(t) = x.row(t).cwiseProduct(w) / std::sqrt(ms + eps);
  }
  return y;
}

// Hugging Face rotary embedding ("rotate half") on every head of x (n x heads*hd).
inline void rope_hf(Mat& x, std::int64_t heads, double base, double freq_scale) {
  const std::int64_t hd = x.cols() / heads;
  for (Eigen::Index t = 0; t < x.rows(); ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < hd / 2; ++i) {
        const double th = freq_scale * static_cast<double>(t) *
                          std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
        const double a = x(t, h * hd + i), b = x(t, h * hd + i + hd / 2);
        x(t, h * hd + i) = a * std::cos(th) - b * std::sin(th);
        x(t, h * hd + i + hd / 2) = b * std::cos(th) + a * std::sin(th);
      }
}

// Naive reference logits (n x n_vocab) of the tiny model for `tokens`.
/// Called by reference_logits with a block weight's name and its input (tokens x cols) before
/// each of the products attn_q (for q/k/v), attn_output, ffn_gate (for gate/up) and ffn_down.
using InputCapture = std::function<void(const std::string& weight, const Mat& x)>;

/// Naive reference logits (n x n_vocab) of the tiny model at `path` for `tokens`; `capture`
/// (optional) sees the block inputs.
inline Mat reference_logits(const std::string& path, const TinyLlama& p,
                            const std::vector<std::int32_t>& tokens,
                            const InputCapture& capture = {}) {
  const nibble::gguf::File f = nibble::gguf::File::open(path);
  const bool llama = p.arch == "llama";
  const std::int64_t n = static_cast<std::int64_t>(tokens.size()), hd = p.n_embd / p.n_head;
  const double freq_scale = p.rope_linear_factor > 0 ? 1.0 / p.rope_linear_factor : 1.0;
  const Mat emb = weight(f, "token_embd.weight");
  Mat x(n, p.n_embd);
  for (std::int64_t t = 0; t < n; ++t) x.row(t) = emb.row(tokens[static_cast<std::size_t>(t)]);
  for (std::int64_t l = 0; l < p.n_layer; ++l) {
    const std::string s = "blk." + std::to_string(l) + ".";
    Mat h = rms(x, vec(f, s + "attn_norm.weight"), p.rms_eps);
    if (capture) capture(s + "attn_q.weight", h);
    Mat wq = weight(f, s + "attn_q.weight"), wk = weight(f, s + "attn_k.weight");
    if (llama) {
      wq = unpermute(wq, p.n_head);
      wk = unpermute(wk, p.n_head_kv);
    }
    Mat q = h * wq.transpose(), k = h * wk.transpose(),
        v = h * weight(f, s + "attn_v.weight").transpose();
    if (!llama) {
      q.rowwise() += vec(f, s + "attn_q.bias");
      k.rowwise() += vec(f, s + "attn_k.bias");
      v.rowwise() += vec(f, s + "attn_v.bias");
    }
    rope_hf(q, p.n_head, p.rope_base, freq_scale);
    rope_hf(k, p.n_head_kv, p.rope_base, freq_scale);
    Mat att = Mat::Zero(n, p.n_embd);
    for (std::int64_t hh = 0; hh < p.n_head; ++hh) {
      const std::int64_t kvh = hh / (p.n_head / p.n_head_kv);
      for (std::int64_t i = 0; i < n; ++i) {
        std::vector<double> w(static_cast<std::size_t>(i + 1));
        double mx = -1e300, sum = 0;
        for (std::int64_t j = 0; j <= i; ++j) {
          w[j] = q.row(i).segment(hh * hd, hd).dot(k.row(j).segment(kvh * hd, hd)) /
                 std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, w[j]);
        }
        for (auto& e : w) sum += (e = std::exp(e - mx));
        for (std::int64_t j = 0; j <= i; ++j)
          att.row(i).segment(hh * hd, hd) += w[j] / sum * v.row(j).segment(kvh * hd, hd);
      }
    }
    if (capture) capture(s + "attn_output.weight", att);
    x += att * weight(f, s + "attn_output.weight").transpose();
    h = rms(x, vec(f, s + "ffn_norm.weight"), p.rms_eps);
    if (capture) capture(s + "ffn_gate.weight", h);
    Mat g = h * weight(f, s + "ffn_gate.weight").transpose();
    const Mat u = h * weight(f, s + "ffn_up.weight").transpose();
    for (Eigen::Index i = 0; i < g.size(); ++i) {
      g.data()[i] = g.data()[i] / (1.0 + std::exp(-g.data()[i])) * u.data()[i];
    }
    if (capture) capture(s + "ffn_down.weight", g);
    x += g * weight(f, s + "ffn_down.weight").transpose();
  }
  x = rms(x, vec(f, "output_norm.weight"), p.rms_eps);
  return x * weight(f, p.tied ? "token_embd.weight" : "output.weight").transpose();
}

}  // namespace nibble::test
