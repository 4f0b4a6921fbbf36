// nibble CLI: `nibble report` — quantize synthetic LLM-like matrices with every format and print
// the accuracy and speed of each.
#include <Eigen/Dense>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "report.hpp"
#include "nibble/nibble.hpp"
#include "synth.hpp"

namespace nibble::cli {
namespace {

struct ReportOptions {
  std::int64_t rows = 1024;
  std::int64_t cols = 4096;
  std::uint64_t seed = 1;
  int threads = 0;
  std::vector<Format> formats = {Format::f16,  Format::q8_0, Format::q6_K, Format::q5_K,
                                 Format::q4_K, Format::nf4,  Format::fp4};
  std::optional<Isa> isa;
  bool calib = true;
  CalibOptions calib_opts;
};

void report_usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: nibble report [options]\n"
      "\n"
      "Builds LLM-like matrices in memory (gaussian and heavy-tailed rows, log-normal\n"
      "per-row scale spread, a few outlier columns), quantizes them with every format and\n"
      "prints, per matrix and format: bits per weight, RMSE and max |error| of the\n"
      "dequantized weights vs fp32, relative RMSE, the relative error of y = W x computed by\n"
      "nibble's gemv on the quantized weights vs Eigen in double on the fp32 weights, and\n"
      "quantize / dequantize throughput (GB/s of fp32 values).\n"
      "\n"
      "options:\n"
      "  --rows N        rows of each matrix (default 1024)\n"
      "  --cols N        columns, a multiple of 256 (default 4096)\n"
      "  --seed S        random seed (default 1)\n"
      "  --threads T     worker threads, 0 = all (default 0)\n"
      "  --isa NAME      force scalar|avx2|avx512|neon (default: best available)\n"
      "  --formats LIST  comma-separated formats (default f16,q8_0,q6_K,q5_K,q4_K,nf4,fp4;\n"
      "                  also q4_0,q4_1,q5_0,q5_1,q2_K,q3_K,iq4_nl,iq4_xs,mxfp4,bf16,q8_1)\n"
      "  --no-calib      skip the calibration table (GPTQ, AWQ, SmoothQuant, imatrix)\n"
      "  --calib-layer OUTxIN  shape of the calibration layer (default 512x1024;\n"
      "                  IN a multiple of 256)\n"
      "  --calib-tokens N  calibration tokens (default 2048)\n"
      "  -h, --help      this text\n");
}

bool parse_format(const std::string& s, Format* f) {
  for (int k = 0; k <= static_cast<int>(kLastFormat); ++k) {
    const Format c = static_cast<Format>(k);
    if (!format_implemented(c)) continue;
    std::string n = traits(c).name;
    std::string a = s, b = n;
    std::transform(a.begin(), a.end(), a.begin(), ::tolower);
    std::transform(b.begin(), b.end(), b.begin(), ::tolower);
    if (a == b) {
      *f = c;
      return true;
    }
  }
  return false;
}

bool parse_isa(const std::string& s, Isa* i) {
  for (Isa c : nibble::kAllIsas) {
    if (s == isa_name(c)) {
      *i = c;
      return true;
    }
  }
  return false;
}

std::int64_t parse_int(const char* opt, const char* v, std::int64_t lo, std::int64_t hi) {
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (!*v || *end || x < lo || x > hi)
    detail::fail(opt, " = '", v, "': expected an integer in [", lo, ", ", hi, "]");
  return x;
}

ReportOptions parse_report_args(int argc, char** argv) {
  ReportOptions o;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) detail::fail(a, ": missing value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      report_usage(stdout);
      std::exit(0);
    } else if (a == "--rows") {
      o.rows = parse_int("--rows", value(), 1, 1 << 20);
    } else if (a == "--cols") {
      o.cols = parse_int("--cols", value(), 256, 1 << 20);
      if (o.cols % 256) detail::fail("--cols = ", o.cols, ": expected a multiple of 256");
    } else if (a == "--seed") {
      o.seed = static_cast<std::uint64_t>(parse_int("--seed", value(), 0, INT64_MAX));
    } else if (a == "--threads") {
      o.threads = static_cast<int>(parse_int("--threads", value(), 0, 1024));
    } else if (a == "--isa") {
      const char* v = value();
      Isa isa;
      if (!parse_isa(v, &isa)) detail::fail("--isa = '", v, "': expected scalar|avx2|avx512|neon");
      o.isa = isa;
    } else if (a == "--no-calib") {
      o.calib = false;
    } else if (a == "--calib-layer") {
      const std::string v = value();
      const std::size_t x = v.find('x');
      if (x == std::string::npos) detail::fail("--calib-layer = '", v, "': expected OUTxIN");
      o.calib_opts.out = parse_int("--calib-layer OUT", v.substr(0, x).c_str(), 1, 1 << 16);
      o.calib_opts.in = parse_int("--calib-layer IN", v.substr(x + 1).c_str(), 256, 1 << 16);
      if (o.calib_opts.in % 256)
        detail::fail("--calib-layer IN = ", o.calib_opts.in, ": expected a multiple of 256");
    } else if (a == "--calib-tokens") {
      o.calib_opts.tokens = parse_int("--calib-tokens", value(), 1, 1 << 20);
    } else if (a == "--formats") {
      const std::string list = value();
      o.formats.clear();
      std::size_t p = 0;
      while (p <= list.size()) {
        const std::size_t q = std::min(list.find(',', p), list.size());
        const std::string item = list.substr(p, q - p);
        Format f;
        if (!parse_format(item, &f) || f == Format::q8_K || f == Format::f32)
          detail::fail("--formats: unknown format '", item, "'");
        o.formats.push_back(f);
        p = q + 1;
      }
    } else {
      detail::fail("report: unknown option '", a, "' (see nibble report --help)");
    }
  }
  return o;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Runs fn repeatedly for at least ~0.2 s (at least twice) and returns the median time of one call.
template <class Fn>
double median_time(Fn&& fn) {
  std::vector<double> t;
  const auto start = std::chrono::steady_clock::now();
  while (t.size() < 2 || (seconds_since(start) < 0.2 && t.size() < 50)) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

}  // namespace

int cmd_report(int argc, char** argv) {
  const ReportOptions o = parse_report_args(argc, argv);
  Context ctx;
  ctx.threads = o.threads;
  ctx.isa = o.isa;
  const Isa isa = best_isa(ctx);

  std::vector<SynthMatrix> mats;
  mats.push_back(make_llm_matrix("gauss", o.rows, o.cols, false, 0.02f, 0.5f, 0, o.seed));
  mats.push_back(make_llm_matrix("gauss+outliers", o.rows, o.cols, false, 0.02f, 0.5f,
                                 static_cast<int>(std::max<std::int64_t>(1, o.cols / 512)),
                                 o.seed + 1));
  mats.push_back(make_llm_matrix("student-t3", o.rows, o.cols, true, 0.02f, 0.5f, 0, o.seed + 2));

  std::printf("nibble report: %lld x %lld matrices, isa %s, threads %d\n\n",
              static_cast<long long>(o.rows), static_cast<long long>(o.cols), isa_name(isa),
              o.threads);
  std::printf("%-15s %-6s %6s %11s %11s %9s %10s %9s %9s\n", "matrix", "format", "bpw", "rmse",
              "max|err|", "rel.rmse", "gemv.rel", "q GB/s", "dq GB/s");

  std::mt19937_64 rng(o.seed + 100);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(o.cols));
  for (float& v : x) v = gauss(rng);
  const Eigen::VectorXd xd = Eigen::Map<const Eigen::VectorXf>(x.data(), o.cols).cast<double>();

  for (const SynthMatrix& m : mats) {
    using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Eigen::Map<const RowMat> W(m.w.data(), m.rows, m.cols);
    const Eigen::VectorXd y_ref = W.cast<double>() * xd;
    double wsq = 0;
    for (float v : m.w) wsq += static_cast<double>(v) * v;
    const double w_rms = std::sqrt(wsq / static_cast<double>(m.w.size()));

    for (Format f : o.formats) {
      const std::size_t rb = row_bytes(f, m.cols);
      std::vector<std::uint8_t> q(rb * static_cast<std::size_t>(m.rows));
      std::vector<float> dq(m.w.size());
      const double tq =
          median_time([&] { quantize(ctx, f, m.w.data(), m.rows, m.cols, q.data()); });
      const double tdq =
          median_time([&] { dequantize(ctx, f, q.data(), m.rows, m.cols, dq.data()); });
      double se = 0, maxe = 0;
      for (std::size_t i = 0; i < dq.size(); ++i) {
        const double e = std::fabs(static_cast<double>(dq[i]) - m.w[i]);
        se += e * e;
        maxe = std::max(maxe, e);
      }
      const double rmse = std::sqrt(se / static_cast<double>(dq.size()));
      std::vector<float> y(static_cast<std::size_t>(m.rows));
      gemv(ctx, f, q.data(), m.rows, m.cols, x.data(), y.data());
      const Eigen::VectorXd yd = Eigen::Map<const Eigen::VectorXf>(y.data(), m.rows).cast<double>();
      const double gemv_rel = (yd - y_ref).norm() / y_ref.norm();
      const double gb = static_cast<double>(m.w.size()) * 4.0 / 1e9;
      std::printf("%-15s %-6s %6.3f %11.4e %11.4e %8.4f%% %9.4f%% %9.3f %9.2f\n", m.name.c_str(),
                  traits(f).name, static_cast<double>(rb) * 8.0 / static_cast<double>(m.cols), rmse,
                  maxe, 100.0 * rmse / w_rms, 100.0 * gemv_rel, gb / tq, gb / tdq);
    }
  }
  std::printf(
      "\nbpw: bits per weight. rel.rmse: RMSE / RMS(weights). gemv.rel: ||y - y_ref|| / ||y_ref||\n"
      "with y = nibble::gemv on the quantized weights and y_ref = W x in double on the fp32\n"
      "weights. GB/s: fp32 values (4 bytes each) quantized or produced per second, median time.\n");
  if (o.calib) {
    CalibOptions c = o.calib_opts;
    c.seed = o.seed;
    report_calibration(c);
  }
  return 0;
}

}  // namespace nibble::cli
