// nibble-bench: shared harness pieces (see common.hpp).
#include "common.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace nibble_bench {

const std::vector<Shape>& model_shapes() {
  static const std::vector<Shape> shapes = {
      {4096, 4096}, {11008, 4096}, {4096, 11008}, {14336, 4096}};
  return shapes;
}

const std::vector<int>& batch_sizes() {
  static const std::vector<int> ns = {1, 8, 64, 512};
  return ns;
}

namespace {
std::vector<int>& thread_counts_storage() {
  static std::vector<int> t = {1, 2};
  return t;
}
}  // namespace

const std::vector<int>& thread_counts() {
  return thread_counts_storage();
}

bool set_thread_counts(const std::string& list) {
  std::vector<int> t;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t end = std::min(list.find(',', pos), list.size());
    const std::string item = list.substr(pos, end - pos);
    char* stop = nullptr;
    const long v = std::strtol(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0' || v < 1 || v > 1024) return false;
    t.push_back(static_cast<int>(v));
    pos = end + 1;
  }
  std::sort(t.begin(), t.end());
  t.erase(std::unique(t.begin(), t.end()), t.end());
  thread_counts_storage() = t;
  return true;
}

const std::vector<nibble::Format>& weight_formats() {
  using nibble::Format;
  // The ggml formats of issue 10 (q4_0 .. q3_K, iq4_*, mxfp4, bf16) after the original set.
  static const std::vector<Format> f = {
      Format::f32,  Format::f16,  Format::q8_0, Format::q4_K,   Format::q5_K,   Format::q6_K,
      Format::nf4,  Format::fp4,  Format::bf16, Format::q4_0,   Format::q4_1,   Format::q5_0,
      Format::q5_1, Format::q2_K, Format::q3_K, Format::iq4_nl, Format::iq4_xs, Format::mxfp4};
  return f;
}

Config& config() {
  static Config c;
  return c;
}

namespace {

// Parses "491520K", "32M", "1024" as in /sys/devices/system/cpu/cpu0/cache/index*/size.
std::size_t parse_size(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end && (*end == 'K' || *end == 'k')) v <<= 10;
  if (end && (*end == 'M' || *end == 'm')) v <<= 20;
  if (end && (*end == 'G' || *end == 'g')) v <<= 30;
  return static_cast<std::size_t>(v);
}

}  // namespace

std::size_t detect_llc_bytes() {
  std::size_t best = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) best = static_cast<std::size_t>(l3);
#endif
  if (best == 0) {
    for (int i = 0; i < 8; ++i) {
      std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size");
      std::string s;
      if (in >> s) best = std::max(best, parse_size(s));
    }
  }
  return best ? best : (std::size_t{32} << 20);
}

std::size_t detect_l2_bytes() {
  std::size_t l2 = 0;
#if defined(_SC_LEVEL2_CACHE_SIZE)
  long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (v > 0) l2 = static_cast<std::size_t>(v);
#endif
  for (int i = 0; l2 == 0 && i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), size(dir + "size");
    int lv = 0;
    std::string s;
    if ((level >> lv) && lv == 2 && (size >> s)) l2 = parse_size(s);
  }
  return l2 ? l2 : (std::size_t{1} << 20);
}

std::size_t warm_target_bytes(bool l3) {
  if (!l3) return std::max<std::size_t>(config().l2_bytes / 2, 64 << 10);
  return std::min<std::size_t>(std::max<std::size_t>(config().llc_bytes / 2, 1 << 20),
                               std::size_t{16} << 20);
}

Shape warm_shape(nibble::Format f, bool l3) {
  const std::int64_t cols = 4096;
  const std::size_t rb = nibble::row_bytes(f, cols);
  const std::int64_t rows = static_cast<std::int64_t>(warm_target_bytes(l3) / rb) / 16 * 16;
  return Shape{std::max<std::int64_t>(rows, 16), cols};
}

void Buffer::Free::operator()(void* p) const {
  std::free(p);
}

Buffer make_buffer(std::size_t bytes) {
  const std::size_t huge = std::size_t{2} << 20;
  const bool large = bytes >= 4 * huge;
  const std::size_t align = large ? huge : 64;
  const std::size_t padded = (std::max<std::size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, padded);
  if (!p) {
    std::fprintf(stderr, "nibble-bench: out of memory allocating %zu bytes\n", padded);
    std::abort();
  }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (large) madvise(p, padded, MADV_HUGEPAGE);
#endif
  std::memset(p, 0, padded);
  Buffer b;
  b.ptr.reset(p);
  b.bytes = bytes;
  return b;
}

void fill_gaussian(float* dst, std::size_t n, std::uint64_t seed, float sigma) {
  // splitmix64 stream; the sum of four U(0,1) has mean 2 and variance 1/3.
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  auto next = [&state]() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const float k = sigma * std::sqrt(3.0f) / 4294967296.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t a = next(), b = next();
    const double s = static_cast<double>(a & 0xFFFFFFFFu) + static_cast<double>(a >> 32) +
                     static_cast<double>(b & 0xFFFFFFFFu) + static_cast<double>(b >> 32);
    dst[i] = static_cast<float>((s - 2.0 * 4294967296.0) * k);
  }
}

int cold_copies(std::size_t bytes) {
  const double span = config().cold_factor * static_cast<double>(config().llc_bytes);
  const double c = std::ceil(span / static_cast<double>(std::max<std::size_t>(bytes, 1)));
  return static_cast<int>(std::min(4096.0, std::max(2.0, c)));
}

namespace {

struct SourceSlot {
  Shape shape{0, 0};
  Buffer data;
};
SourceSlot& source_slot() {
  static SourceSlot s;
  return s;
}
std::unique_ptr<WeightSet>& weight_slot() {
  static std::unique_ptr<WeightSet> w;
  return w;
}

const float* source_weights(Shape s) {
  SourceSlot& slot = source_slot();
  if (!slot.data.data() || slot.shape.rows != s.rows || slot.shape.cols != s.cols) {
    slot.data = Buffer{};
    const std::size_t n = static_cast<std::size_t>(s.rows * s.cols);
    slot.data = make_buffer(n * sizeof(float));
    fill_gaussian(slot.data.as<float>(), n, static_cast<std::uint64_t>(s.rows * 131 + s.cols),
                  0.02f);
    slot.shape = s;
  }
  return slot.data.as<const float>();
}

}  // namespace

namespace {
// Copy 0 of a weight set: quantized from src, then packed when the set is packed.
void fill_copy0(WeightSet& w, const float* src) {
  char* base = w.buffer.as<char>();
  nibble::quantize(w.format, src, w.shape.rows, w.shape.cols, base);
  if (w.packed) {
    std::vector<char> plain(base, base + w.bytes);
    nibble::pack(nibble::Context{}, w.format, plain.data(), w.shape.rows, w.shape.cols, base);
  }
}
}  // namespace

const WeightSet& weight_set(nibble::Format f, Shape s, bool packed) {
  std::unique_ptr<WeightSet>& slot = weight_slot();
  if (slot && slot->format == f && slot->packed == packed && slot->shape.rows == s.rows &&
      slot->shape.cols == s.cols) {
    return *slot;
  }
  slot.reset();
  membw_slot() = Buffer{};
  release_decode();
  const float* src = source_weights(s);
  auto w = std::make_unique<WeightSet>();
  w->format = f;
  w->packed = packed;
  w->shape = s;
  w->bytes = static_cast<std::size_t>(s.rows) * nibble::row_bytes(f, s.cols);
  w->stride = (w->bytes + 4095) / 4096 * 4096;
  w->copies = cold_copies(w->bytes);
  w->buffer = make_buffer(w->stride * static_cast<std::size_t>(w->copies));
  char* base = w->buffer.as<char>();
  fill_copy0(*w, src);
  for (int i = 1; i < w->copies; ++i) {
    std::memcpy(base + static_cast<std::size_t>(i) * w->stride, base, w->bytes);
  }
  slot = std::move(w);
  return *slot;
}

const WeightSet& warm_weight_set(nibble::Format f, Shape s, bool packed) {
  static std::unique_ptr<WeightSet> slot;
  if (slot && slot->format == f && slot->packed == packed && slot->shape.rows == s.rows &&
      slot->shape.cols == s.cols) {
    return *slot;
  }
  slot.reset();
  const std::size_t n = static_cast<std::size_t>(s.rows * s.cols);
  std::vector<float> src(n);
  fill_gaussian(src.data(), n, static_cast<std::uint64_t>(s.rows * 131 + s.cols), 0.02f);
  auto w = std::make_unique<WeightSet>();
  w->format = f;
  w->packed = packed;
  w->shape = s;
  w->bytes = static_cast<std::size_t>(s.rows) * nibble::row_bytes(f, s.cols);
  w->stride = (w->bytes + 4095) / 4096 * 4096;
  w->copies = 1;
  w->buffer = make_buffer(w->stride);
  fill_copy0(*w, src.data());
  slot = std::move(w);
  return *slot;
}

Buffer& membw_slot() {
  static Buffer b;
  return b;
}

void release_weights() {
  weight_slot().reset();
  source_slot() = SourceSlot{};
}

std::vector<float> activations(std::int64_t n, std::int64_t cols, std::uint64_t seed) {
  std::vector<float> x(static_cast<std::size_t>(n * cols));
  fill_gaussian(x.data(), x.size(), seed, 1.0f);
  return x;
}

std::string bench_name(const std::string& kernel, const std::string& format,
                       const std::string& impl, Shape s, int n, int threads,
                       const std::string& cache) {
  std::ostringstream os;
  os << kernel << '/' << format << '/' << impl << '/' << s.rows << 'x' << s.cols;
  if (n >= 0) os << "/n:" << n;
  os << "/threads:" << threads;
  if (!cache.empty()) os << '/' << cache;
  return os.str();
}

void set_rates(benchmark::State& st, double bytes, double flops) {
  st.SetBytesProcessed(static_cast<std::int64_t>(bytes * static_cast<double>(st.iterations())));
  if (flops > 0) {
    st.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate,
                                               benchmark::Counter::kIs1000);
  }
}

std::string cache_label(const WeightSet& w, bool cold) {
  if (!cold) return "warm: one weight copy";
  std::ostringstream os;
  os << "cold: " << w.copies << " rotated copies, "
     << (static_cast<double>(w.stride) * w.copies / (1 << 20)) << " MiB > LLC "
     << (config().llc_bytes >> 20) << " MiB";
  return os.str();
}

double product_tolerance(nibble::Format f) {
  switch (f) {
    case nibble::Format::f32:
    case nibble::Format::f16:
    case nibble::Format::bf16:
    case nibble::Format::nf4:
    case nibble::Format::fp4:
      return 1e-3;  // fp32 activations (NF4/FP4 GEMV on x86: int16), fp32 accumulation
    default:
      return 2e-2;  // activations quantized to 8 bits (q8_0 / q8_1 / q8_K)
  }
}

std::string check_product(const WeightSet& w, const float* X, std::int64_t n, const float* Y,
                          double tol) {
  const std::int64_t rows = w.shape.rows, cols = w.shape.cols;
  const std::size_t rb = nibble::row_bytes(w.format, cols);
  std::vector<std::int64_t> check_rows = {0, 1, rows / 2, rows - 1};
  std::vector<std::int64_t> check_n = {0, n - 1};
  std::vector<float> wr(static_cast<std::size_t>(cols));
  std::vector<char> plain;
  const char* w0 = static_cast<const char*>(w.copy(0));
  if (w.packed) {  // the reference reads the plain blocks
    plain.resize(static_cast<std::size_t>(rows) * rb);
    nibble::unpack(nibble::Context{}, w.format, w0, rows, cols, plain.data());
    w0 = plain.data();
  }
  for (std::int64_t r : check_rows) {
    nibble::dequantize(w.format, w0 + r * rb, 1, cols, wr.data());
    for (std::int64_t j : check_n) {
      double ref = 0, mag = 0;
      const float* x = X + j * cols;
      for (std::int64_t k = 0; k < cols; ++k) {
        const double p = static_cast<double>(wr[k]) * x[k];
        ref += p;
        mag += std::fabs(p);
      }
      const double got = Y[j * rows + r];
      if (!(std::fabs(got - ref) <= tol * mag + 1e-6)) {
        std::ostringstream os;
        os << "wrong result at row " << r << ", activation " << j << ": got " << got
           << ", expected " << ref << " (tolerance " << tol << " * " << mag << ")";
        return os.str();
      }
    }
  }
  return {};
}

}  // namespace nibble_bench
