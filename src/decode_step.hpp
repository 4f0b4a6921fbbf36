// nibble (internal, not installed): the "model decode step" benchmark shared by nibble-bench
// (bench/bench_decode.cpp) and `nibble bench MODEL.gguf` (src/cli/main.cpp).
//
// One decode step = one GEMV (n = 1) through every linear weight of a model, each with its own
// storage format, in order. The weights live in DRAM (a 7B-class stack is hundreds of MiB, far
// beyond any last-level cache), so the step time is what a token of single-batch generation
// costs in weight streaming; attention, norms and the KV cache are not part of it. The result is
// read against the read bandwidth of the same machine (read_bandwidth below, or nibble-bench's
// membw rows): weight bytes / step time / bandwidth = the fraction of the roofline reached.
//
// Layouts: a weight is plain (GGUF blocks) or packed (nibble/packed.hpp, `Linear::packed`); a
// packed GGUF file's packed tensors are used as mapped, and with_layout() gives a stack with every
// weight in one layout (packing / unpacking at setup), so that both can be timed in one run.
//
// Two sources of a stack:
//   - a GGUF file: every 2-D tensor in file order (3-D+ tensors, e.g. stacked MoE experts, are
//     listed as skipped) whose type nibble can multiply (f32, f16, bf16, q8_0, q4_0, q4_1,
//     q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, mxfp4, and the packed types of
//     the packable formats), except token_embd.weight (an
//     embedding lookup reads one row per token) unless the file has no output.weight (tied
//     embeddings: then it is the output projection); the weights are used in place (zero-copy views
//     into the mapped file);
//   - a built-in llama-2-7B-shaped stack of `layers` layers quantized with llama-quantize's
//     Q4_K_M type mix (see make_llama7b_q4km_stack).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "read_bandwidth.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "nibble/io/gguf.hpp"
#include "nibble/nibble.hpp"
#include "nibble/packed.hpp"

namespace nibble::decode {

/// One linear layer of a decode step: y (rows) = W (rows x cols, format `format`) x (cols).
struct Linear {
  std::string name;             ///< tensor name
  Format format = Format::f32;  ///< storage format of W
  std::int64_t rows = 0;        ///< output features (GGUF ne[1])
  std::int64_t cols = 0;        ///< input features (GGUF ne[0])
  const void* data = nullptr;   ///< the weights, rows * row_bytes(format, cols) bytes
  std::uint64_t bytes = 0;      ///< bytes of W
  bool packed = false;          ///< W is in the packed layout (nibble/packed.hpp)
};

/// A model's linear layers in execution (or file) order, with the storage they point into.
struct Stack {
  std::string label;            ///< short description ("llama-2-7B shapes, 4 of 32 layers, Q4_K_M")
  std::vector<Linear> linears;  ///< in order
  std::vector<std::string> skipped;  ///< 2-D tensors left out (name and reason)
  std::shared_ptr<void> storage;     ///< owned weights (built-in stack)
  std::shared_ptr<gguf::File> file;  ///< mapped file (GGUF stack)
  std::shared_ptr<void> converted;   ///< weights packed / unpacked by with_layout()

  /// Bytes of all weights (what one decode step reads).
  std::uint64_t bytes() const {
    std::uint64_t b = 0;
    for (const Linear& l : linears) b += l.bytes;
    return b;
  }
  /// Largest input / output width (activation and output buffer sizes).
  std::int64_t max_cols() const {
    std::int64_t m = 0;
    for (const Linear& l : linears) m = std::max(m, l.cols);
    return m;
  }
  std::int64_t max_rows() const {
    std::int64_t m = 0;
    for (const Linear& l : linears) m = std::max(m, l.rows);
    return m;
  }
  /// Number of packed linears.
  std::size_t packed_count() const {
    std::size_t n = 0;
    for (const Linear& l : linears) n += l.packed ? 1 : 0;
    return n;
  }
};

/// llama.cpp's use_more_bits(i_layer, n_layers) rule of the K-quant mixes: layer i of n gets the
/// larger type when it is in the first or last eighth, or every third layer in between.
inline bool use_more_bits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/// nibble format of a ggml type id, or false when nibble has no GEMV for it.
inline bool format_of_gguf_type(std::uint32_t type, Format* out) {
  for (Format f : {Format::f32, Format::f16, Format::bf16, Format::q8_0, Format::q4_0, Format::q4_1,
                   Format::q5_0, Format::q5_1, Format::q2_K, Format::q3_K, Format::q4_K,
                   Format::q5_K, Format::q6_K, Format::iq4_nl, Format::iq4_xs, Format::mxfp4}) {
    if (traits(f).gguf_type == static_cast<int>(type)) {
      *out = f;
      return true;
    }
  }
  return false;
}

namespace detail {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// 2 MiB-aligned buffer with huge pages requested; zero-filled (first touch) when `zero`, else
// left for the caller to write.
inline std::shared_ptr<void> alloc_weights(std::size_t bytes, bool zero = true) {
  const std::size_t align = std::size_t{2} << 20;
  const std::size_t padded = (std::max<std::size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, padded);
  if (!p) throw Error("decode: out of memory allocating " + std::to_string(padded) + " bytes");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  madvise(p, padded, MADV_HUGEPAGE);
#endif
  if (zero) std::memset(p, 0, padded);
  return std::shared_ptr<void>(p, FreeDeleter{});
}

// Deterministic pseudo-random N(0, sigma^2)-ish values (splitmix64, sum of 4 uniforms).
inline void fill_random(float* dst, std::size_t n, std::uint64_t seed, float sigma) {
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&state]() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const double k = sigma * std::sqrt(3.0) / 4294967296.0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t a = next(), b = next();
    const double s = static_cast<double>(a & 0xFFFFFFFFu) + static_cast<double>(a >> 32) +
                     static_cast<double>(b & 0xFFFFFFFFu) + static_cast<double>(b >> 32);
    dst[i] = static_cast<float>((s - 2.0 * 4294967296.0) * k);
  }
}

}  // namespace detail

/// llama-2-7B dimensions.
struct Llama7bShape {
  std::int64_t d_model = 4096, d_ff = 11008, vocab = 32000;
  int n_layer = 32;
};

/// The built-in decode stack: the first `layers` (1..32) transformer layers of a llama-2-7B-shaped
/// model (per layer attn_q, attn_k, attn_v, attn_output 4096x4096, ffn_gate, ffn_up 11008x4096,
/// ffn_down 4096x11008, in execution order) plus output.weight 32000x4096, with llama-quantize's
/// Q4_K_M types: output Q6_K; attn_v and ffn_down Q6_K where use_more_bits(i, layers) holds (the
/// rule applied to the measured stack as a model of `layers` layers), everything else Q4_K.
/// The measured stack is what is reported: its bytes are not scaled to 32 layers.
///
/// Weights come from nibble::quantize (the fast path, `quant_threads` threads, 0 = all) on
/// pseudo-random N(0, 0.02^2) data: one slab of up to `slab_rows` rows is quantized per (format,
/// shape) and copied over the tensor's rows and to every tensor of that format and shape, so
/// generation costs a few MB of quantization plus memcpy. Throws nibble::Error for layers outside
/// 1..32.
inline Stack make_llama7b_q4km_stack(int layers, int quant_threads = 0,
                                     std::int64_t slab_rows = 256) {
  const Llama7bShape m;
  if (layers < 1 || layers > m.n_layer) {
    throw Error("decode: --layers must be in 1.." + std::to_string(m.n_layer) + ", got " +
                std::to_string(layers));
  }
  Stack s;
  auto add = [&](const std::string& name, Format f, std::int64_t rows, std::int64_t cols) {
    Linear l;
    l.name = name;
    l.format = f;
    l.rows = rows;
    l.cols = cols;
    l.bytes = static_cast<std::uint64_t>(rows) * row_bytes(f, cols);
    s.linears.push_back(l);
  };
  for (int i = 0; i < layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const Format more = use_more_bits(i, layers) ? Format::q6_K : Format::q4_K;
    add(p + "attn_q.weight", Format::q4_K, m.d_model, m.d_model);
    add(p + "attn_k.weight", Format::q4_K, m.d_model, m.d_model);
    add(p + "attn_v.weight", more, m.d_model, m.d_model);
    add(p + "attn_output.weight", Format::q4_K, m.d_model, m.d_model);
    add(p + "ffn_gate.weight", Format::q4_K, m.d_ff, m.d_model);
    add(p + "ffn_up.weight", Format::q4_K, m.d_ff, m.d_model);
    add(p + "ffn_down.weight", more, m.d_model, m.d_ff);
  }
  add("output.weight", Format::q6_K, m.vocab, m.d_model);

  // Lay the tensors out 4 KiB-aligned in one buffer.
  std::vector<std::uint64_t> offset(s.linears.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < s.linears.size(); ++i) {
    offset[i] = total;
    total += (s.linears[i].bytes + 4095) / 4096 * 4096;
  }
  // Not zeroed: every tensor is written below (the 4 KiB padding between them is never read).
  s.storage = detail::alloc_weights(static_cast<std::size_t>(total), false);
  char* base = static_cast<char*>(s.storage.get());

  // One quantized slab per (format, rows, cols), tiled over each tensor.
  Context qctx;
  qctx.threads = quant_threads;
  std::map<std::tuple<int, std::int64_t, std::int64_t>, std::vector<char>> slabs;
  std::vector<float> src;
  for (std::size_t i = 0; i < s.linears.size(); ++i) {
    Linear& l = s.linears[i];
    const std::size_t rb = row_bytes(l.format, l.cols);
    const std::int64_t srows = std::min(l.rows, std::max<std::int64_t>(slab_rows, 1));
    auto key = std::make_tuple(static_cast<int>(l.format), l.rows, l.cols);
    auto it = slabs.find(key);
    if (it == slabs.end()) {
      src.resize(static_cast<std::size_t>(srows * l.cols));
      detail::fill_random(src.data(), src.size(), 1000 + slabs.size(), 0.02f);
      std::vector<char> q(static_cast<std::size_t>(srows) * rb);
      quantize(qctx, l.format, src.data(), srows, l.cols, q.data());
      it = slabs.emplace(key, std::move(q)).first;
    }
    char* dst = base + offset[i];
    const std::vector<char>& slab = it->second;
    for (std::int64_t r = 0; r < l.rows; r += srows) {
      const std::int64_t nr = std::min(srows, l.rows - r);
      std::memcpy(dst + static_cast<std::size_t>(r) * rb, slab.data(),
                  static_cast<std::size_t>(nr) * rb);
    }
    l.data = dst;
  }
  s.label = "llama-2-7B shapes, " + std::to_string(layers) + " of " + std::to_string(m.n_layer) +
            " layers + output, Q4_K_M mix";
  return s;
}

/// The linear layers of a GGUF file (see the file comment for which tensors are used). The file
/// stays mapped as long as the Stack lives. Throws nibble::Error when the file cannot be read or
/// holds no usable linear weight.
inline Stack load_gguf_stack(const std::string& path) {
  auto file = std::make_shared<gguf::File>(gguf::File::open(path));
  Stack s;
  s.file = file;
  const bool has_output = file->find_tensor("output.weight") != nullptr;
  for (const gguf::TensorInfo& t : file->tensors) {
    // 2-D weights (trailing dimensions of 1 allowed).
    std::size_t dims = t.shape.size();
    while (dims > 1 && t.shape[dims - 1] == 1) --dims;
    if (dims > 2) {
      s.skipped.push_back(t.name + " (" + std::to_string(dims) +
                          "-D: stacked experts are not one GEMV per token)");
      continue;
    }
    if (dims != 2) continue;
    if (t.name == "token_embd.weight" && has_output) {
      s.skipped.push_back(t.name + " (embedding lookup, not a GEMV)");
      continue;
    }
    Format f;
    const bool packed = t.packed();  // the reader accepts packed types of packable formats only
    if (!format_of_gguf_type(gguf::base_type(t.type), &f) || (packed && !packable(f))) {
      const char* tn = gguf::type_info(t.type).name;
      s.skipped.push_back(t.name + " (type " + (tn ? tn : std::to_string(t.type)) +
                          " has no nibble GEMV)");
      continue;
    }
    Linear l;
    l.name = t.name;
    l.format = f;
    l.cols = t.shape[0];
    l.rows = t.shape[1];
    l.data = t.data;
    l.bytes = t.nbytes;
    l.packed = packed;
    if (l.bytes != static_cast<std::uint64_t>(l.rows) * row_bytes(f, l.cols)) {
      throw Error("decode: tensor " + t.name + " has " + std::to_string(t.nbytes) +
                  " bytes, expected rows * row_bytes");
    }
    s.linears.push_back(l);
  }
  if (s.linears.empty()) {
    throw Error("decode: " + path + " holds no 2-D weight tensor nibble can multiply");
  }
  const std::size_t slash = path.find_last_of('/');
  s.label = slash == std::string::npos ? path : path.substr(slash + 1);
  return s;
}

/// `s` with every linear in one layout: `packed` = true packs each plain linear of a packable
/// format with at least kPackedGroupRows rows (the others stay plain); false unpacks each packed
/// one. The converted weights are copied into new 4 KiB-aligned storage (with `threads` threads,
/// 0 = all) at setup; the rest still points into `s`'s storage or file, which the result keeps
/// alive. The label gets " [packed]" or " [plain]".
inline Stack with_layout(const Stack& s, bool packed, int threads = 0) {
  Stack r = s;
  auto convert = [&](const Linear& l) {
    if (packed) return !l.packed && packable(l.format) && l.rows >= kPackedGroupRows;
    return l.packed;
  };
  std::vector<std::uint64_t> offset(r.linears.size());
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < r.linears.size(); ++i) {
    if (!convert(r.linears[i])) continue;
    offset[i] = total;
    total += (r.linears[i].bytes + 4095) / 4096 * 4096;
  }
  if (total > 0) {
    r.converted = detail::alloc_weights(static_cast<std::size_t>(total), false);
    char* base = static_cast<char*>(r.converted.get());
    Context ctx;
    ctx.threads = threads;
    for (std::size_t i = 0; i < r.linears.size(); ++i) {
      Linear& l = r.linears[i];
      if (!convert(l)) continue;
      char* dst = base + offset[i];
      if (packed) {
        pack(ctx, l.format, l.data, l.rows, l.cols, dst);
      } else {
        unpack(ctx, l.format, l.data, l.rows, l.cols, dst);
      }
      l.data = dst;
      l.packed = packed;
    }
  }
  r.label += packed ? " [packed]" : " [plain]";
  return r;
}

/// Runs decode steps over a Stack: fixed pseudo-random activations (one vector of max_cols
/// values; each layer reads its first `cols`), one output buffer. Packed linears run through the
/// packed gemv (nibble::PackedWeights views of their bytes, made once here).
class Runner {
 public:
  /// `ctx` picks the ISA and thread count of every GEMV.
  Runner(const Stack& s, const Context& ctx)
      : s_(s),
        ctx_(ctx),
        x_(static_cast<std::size_t>(s.max_cols())),
        y_(static_cast<std::size_t>(s.max_rows())),
        views_(s.linears.size()) {
    detail::fill_random(x_.data(), x_.size(), 7, 1.0f);
    for (std::size_t i = 0; i < s.linears.size(); ++i) {
      const Linear& l = s.linears[i];
      if (l.packed) views_[i] = PackedWeights::view(l.format, l.data, l.rows, l.cols);
    }
  }
  /// One token: a GEMV through every linear in order.
  void step() {
    for (std::size_t i = 0; i < s_.linears.size(); ++i) {
      const Linear& l = s_.linears[i];
      if (l.packed) {
        gemv(ctx_, views_[i], x_.data(), y_.data());
      } else {
        gemv(ctx_, l.format, l.data, l.rows, l.cols, x_.data(), y_.data());
      }
    }
  }
  /// Output of the last GEMV (rows of the last linear).
  const float* y() const { return y_.data(); }

 private:
  const Stack& s_;
  Context ctx_;
  std::vector<float> x_, y_;
  std::vector<PackedWeights> views_;
};

/// Median seconds per step over at least `min_steps` steps and `min_seconds` seconds, after one
/// untimed warm-up step.
inline double time_steps(Runner& r, double min_seconds, int min_steps = 3) {
  using clock = std::chrono::steady_clock;
  r.step();
  std::vector<double> t;
  const auto start = clock::now();
  while (static_cast<int>(t.size()) < min_steps ||
         std::chrono::duration<double>(clock::now() - start).count() < min_seconds) {
    const auto a = clock::now();
    r.step();
    t.push_back(std::chrono::duration<double>(clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Memory read bandwidth in bytes/s: `threads` threads sum disjoint slices of a `bytes` array of
/// 64-bit words in each read pattern of src/read_bandwidth.hpp (one untimed pass, then `reps`
/// passes per pattern, alternated); the best pass of all. The array is allocated here and freed
/// on return. Compiled for the build's baseline ISA: on some machines one thread reads a little
/// slower than with wide vector loads; nibble-bench's membw rows clone the loop per ISA.
inline double read_bandwidth(std::size_t bytes, int threads, int reps = 3) {
  threads = std::max(threads, 1);
  std::shared_ptr<void> buf = detail::alloc_weights(bytes);
  const std::size_t words = bytes / 8 / 64 * 64;
  const auto* p = static_cast<const std::uint64_t*>(buf.get());
  std::vector<std::uint64_t> part(static_cast<std::size_t>(threads));
  auto pass = [&](int pattern) {
    const std::size_t chunk = (words / 64 + static_cast<std::size_t>(threads) - 1) /
                              static_cast<std::size_t>(threads) * 64;
    auto work = [&](int t) {
      const std::size_t b = std::min(words, chunk * static_cast<std::size_t>(t));
      const std::size_t e = std::min(words, b + chunk);
      part[static_cast<std::size_t>(t)] = membw::sum_pattern(pattern, p + b, e - b);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
    work(0);
    for (auto& th : pool) th.join();
  };
  pass(0);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    for (int k = 0; k < membw::kNumReadPatterns; ++k) {
      const auto a = std::chrono::steady_clock::now();
      pass(k);
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
      if (sec > 0) best = std::max(best, static_cast<double>(words * 8) / sec);
    }
  }
  volatile std::uint64_t sink = part[0];
  (void)sink;
  return best;
}

}  // namespace nibble::decode
