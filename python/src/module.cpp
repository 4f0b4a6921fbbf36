// nibble Python bindings (module nibble._nibble, re-exported by the nibble package).
//
// NumPy in and out: fp32 inputs are converted (c_style | forcecast) after a dtype-kind check,
// quantized blocks are uint8 arrays of shape (rows, row_bytes). Shapes and dtypes are checked
// here and raise ValueError; errors of the library (nibble::Error) raise nibble.Error, a
// subclass of ValueError. The GIL is released around every compute call.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "nibble/nibble.hpp"
#include "nibble/packed.hpp"

namespace py = pybind11;

namespace {

using nibble::Format;
using nibble::Isa;
using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using U8Array = py::array_t<std::uint8_t, py::array::c_style | py::array::forcecast>;

[[noreturn]] void value_error(const std::string& msg) {
  throw py::value_error(msg);
}

// Every implemented nibble::Format, in enumerator order.
const std::vector<Format>& all_formats() {
  static const std::vector<Format> f = [] {
    std::vector<Format> v;
    for (int k = 0; k <= static_cast<int>(nibble::kLastFormat); ++k)
      if (nibble::format_implemented(static_cast<Format>(k))) v.push_back(static_cast<Format>(k));
    return v;
  }();
  return f;
}

// The packable formats' names, comma-separated (for error messages).
std::string packable_names() {
  std::string out;
  for (Format f : all_formats())
    if (nibble::packable(f)) out += std::string(out.empty() ? "" : ", ") + nibble::traits(f).name;
  return out;
}

Format parse_format(const std::string& name) {
  for (Format f : all_formats()) {
    if (name == nibble::traits(f).name) return f;
  }
  std::string known;
  for (Format f : all_formats())
    known += std::string(known.empty() ? "" : ", ") + nibble::traits(f).name;
  value_error("unknown format '" + name + "', expected one of: " + known);
}

std::optional<Isa> parse_isa(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  for (Isa i : nibble::kAllIsas) {
    if (*name == nibble::isa_name(i)) return i;
  }
  value_error("unknown isa '" + *name + "', expected scalar, avx2, avxvnni, avx512 or neon");
}

nibble::Context make_context(int threads, const std::optional<std::string>& isa,
                             bool exact_nf4 = false) {
  if (threads < 0) value_error("threads = " + std::to_string(threads) + " must be >= 0");
  nibble::Context ctx;
  ctx.threads = threads;
  ctx.isa = parse_isa(isa);
  ctx.exact_nf4 = exact_nf4;
  return ctx;
}

std::string shape_str(const py::array& a) {
  std::ostringstream os;
  os << "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) os << (i ? ", " : "") << a.shape(i);
  os << (a.ndim() == 1 ? ",)" : ")");
  return os.str();
}

std::string dtype_str(const py::array& a) {
  return py::str(a.dtype()).cast<std::string>();
}

// Floating-point (or integer) array -> C-contiguous float32; ValueError for other dtypes.
F32Array as_f32(const py::handle& obj, const char* what) {
  py::array a = py::array::ensure(obj);
  if (!a) value_error(std::string(what) + " must be an array of numbers");
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u') {
    value_error(std::string(what) + " has dtype " + dtype_str(a) + ", expected a float array");
  }
  return F32Array::ensure(a);
}

// uint8 block array; any other dtype is a ValueError (blocks are raw bytes, never converted).
U8Array as_blocks(const py::handle& obj, const char* what) {
  py::array a = py::array::ensure(obj);
  if (!a) value_error(std::string(what) + " must be a uint8 array");
  if (!a.dtype().is(py::dtype::of<std::uint8_t>())) {
    value_error(std::string(what) + " has dtype " + dtype_str(a) + ", expected uint8 blocks");
  }
  return U8Array::ensure(a);
}

std::int64_t checked_row_bytes(Format f, std::int64_t cols) {
  const auto t = nibble::traits(f);
  if (cols <= 0 || cols % t.block_elems != 0) {
    value_error("cols = " + std::to_string(cols) + " must be a positive multiple of " +
                std::to_string(t.block_elems) + " (block size of " + t.name + ")");
  }
  return static_cast<std::int64_t>(nibble::row_bytes(f, cols));
}

// quantize(x, format, importance=None, threads=0, isa=None): x is (cols,) or (rows, cols).
py::array quantize(const py::handle& x_obj, const std::string& format, const py::object& importance,
                   int threads, const std::optional<std::string>& isa) {
  const Format f = parse_format(format);
  F32Array x = as_f32(x_obj, "x");
  if (x.ndim() != 1 && x.ndim() != 2) {
    value_error("x has shape " + shape_str(x) + ", expected (cols,) or (rows, cols)");
  }
  const std::int64_t rows = x.ndim() == 2 ? x.shape(0) : 1;
  const std::int64_t cols = x.shape(x.ndim() - 1);
  const std::int64_t rb = checked_row_bytes(f, cols);
  std::optional<F32Array> imp;
  if (!importance.is_none()) {
    imp = as_f32(importance, "importance");
    if (imp->ndim() != 1 || imp->shape(0) != cols) {
      value_error("importance has shape " + shape_str(*imp) + ", expected (" +
                  std::to_string(cols) + ",)");
    }
  }
  const nibble::Context ctx = make_context(threads, isa);
  std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(rb)};
  if (x.ndim() == 2) shape.insert(shape.begin(), static_cast<py::ssize_t>(rows));
  py::array_t<std::uint8_t> out(shape);
  const float* src = x.data();
  const float* w = imp ? imp->data() : nullptr;
  std::uint8_t* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    nibble::quantize(ctx, f, src, rows, cols, dst, w);
  }
  return std::move(out);
}

// Parses `shape` (int or tuple of 1 or 2 ints) into (rows, cols, ndim).
void parse_shape(const py::object& shape, std::int64_t& rows, std::int64_t& cols, int& ndim) {
  std::vector<std::int64_t> s;
  try {
    if (PySequence_Check(shape.ptr())) {
      s = shape.cast<std::vector<std::int64_t>>();
    } else {
      s = {shape.cast<std::int64_t>()};  // a Python or NumPy integer
    }
  } catch (const py::cast_error&) {
    value_error("shape must be an int or a tuple (cols,) / (rows, cols)");
  }
  if (s.size() == 1) {
    rows = 1;
    cols = s[0];
    ndim = 1;
  } else if (s.size() == 2) {
    rows = s[0];
    cols = s[1];
    ndim = 2;
  } else {
    value_error("shape has " + std::to_string(s.size()) + " dimensions, expected 1 or 2");
  }
  if (rows < 0) value_error("shape: rows = " + std::to_string(rows) + " must be >= 0");
}

// dequantize(blocks, format, shape, threads=0, isa=None) -> float32 array of `shape`.
py::array dequantize(const py::handle& blocks_obj, const std::string& format,
                     const py::object& shape, int threads, const std::optional<std::string>& isa) {
  const Format f = parse_format(format);
  U8Array blocks = as_blocks(blocks_obj, "blocks");
  std::int64_t rows = 0, cols = 0;
  int ndim = 0;
  parse_shape(shape, rows, cols, ndim);
  const std::int64_t rb = checked_row_bytes(f, cols);
  if (blocks.size() != rows * rb) {
    value_error("blocks has " + std::to_string(blocks.size()) + " bytes, expected rows * " +
                "row_bytes = " + std::to_string(rows) + " * " + std::to_string(rb) + " for " +
                nibble::traits(f).name + " of shape (" + std::to_string(rows) + ", " +
                std::to_string(cols) + ")");
  }
  const nibble::Context ctx = make_context(threads, isa);
  std::vector<py::ssize_t> out_shape = {static_cast<py::ssize_t>(cols)};
  if (ndim == 2) out_shape.insert(out_shape.begin(), static_cast<py::ssize_t>(rows));
  py::array_t<float> out(out_shape);
  const std::uint8_t* src = blocks.data();
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    nibble::dequantize(ctx, f, src, rows, cols, dst);
  }
  return std::move(out);
}

// Weights for gemv/gemm: uint8 blocks of shape (rows, row_bytes) or flat (rows * row_bytes,),
// or for format f32 a float32 (rows, cols) matrix. `keep` holds the (possibly converted) array.
struct Weights {
  py::array keep;
  const void* data = nullptr;
  std::int64_t rows = 0;
};

Weights weight_bytes(const py::handle& w_obj, Format f, std::int64_t cols) {
  py::array a = py::array::ensure(w_obj);
  if (!a) value_error("W must be an array");
  Weights w;
  if (f == Format::f32 && a.dtype().kind() == 'f') {
    if (a.ndim() != 2 || a.shape(1) != cols) {
      value_error("W has shape " + shape_str(a) + ", expected (rows, " + std::to_string(cols) +
                  ") to match x");
    }
    F32Array c = F32Array::ensure(a);
    w.rows = c.shape(0);
    w.data = c.data();
    w.keep = std::move(c);
    return w;
  }
  U8Array b = as_blocks(a, "W");
  const std::int64_t rb = checked_row_bytes(f, cols);
  if (b.ndim() == 2) {
    if (b.shape(1) != rb) {
      value_error("W has shape " + shape_str(b) + ", expected (rows, " + std::to_string(rb) +
                  "): row_bytes of " + nibble::traits(f).name +
                  " with cols = " + std::to_string(cols));
    }
    w.rows = b.shape(0);
  } else if (b.ndim() == 1) {
    if (b.size() % rb != 0) {
      value_error("W has " + std::to_string(b.size()) + " bytes, not a multiple of row_bytes " +
                  std::to_string(rb));
    }
    w.rows = b.size() / rb;
  } else {
    value_error("W has shape " + shape_str(b) + ", expected (rows, row_bytes)");
  }
  w.data = b.data();
  w.keep = std::move(b);
  return w;
}

// Packed weights for gemv/gemm(packed=True): uint8 blocks only, of a packable format.
Weights packed_weight_bytes(const py::handle& w_obj, Format f, std::int64_t cols) {
  if (!nibble::packable(f)) {
    value_error(std::string("packed=True: format ") + nibble::traits(f).name +
                " has no packed layout (packable: " + packable_names() + ")");
  }
  return weight_bytes(w_obj, f, cols);
}

// gemv(W, format, x, threads=0, isa=None, packed=False, exact_nf4=False) -> y (rows,) float32,
// y = W x.
py::array gemv(const py::handle& w_obj, const std::string& format, const py::handle& x_obj,
               int threads, const std::optional<std::string>& isa, bool packed, bool exact_nf4) {
  const Format f = parse_format(format);
  F32Array x = as_f32(x_obj, "x");
  if (x.ndim() != 1) value_error("x has shape " + shape_str(x) + ", expected (cols,)");
  const std::int64_t cols = x.shape(0);
  const Weights w = packed ? packed_weight_bytes(w_obj, f, cols) : weight_bytes(w_obj, f, cols);
  const std::int64_t rows = w.rows;
  const nibble::Context ctx = make_context(threads, isa, exact_nf4);
  py::array_t<float> y(static_cast<py::ssize_t>(rows));
  const void* W = w.data;
  const float* xp = x.data();
  float* yp = y.mutable_data();
  {
    py::gil_scoped_release release;
    if (packed) {
      nibble::gemv(ctx, nibble::PackedWeights::view(f, W, rows, cols), xp, yp);
    } else {
      nibble::gemv(ctx, f, W, rows, cols, xp, yp);
    }
  }
  return std::move(y);
}

// gemm(W, format, X, threads=0, isa=None, packed=False, exact_nf4=False) -> Y (n, rows) float32,
// Y = X W^T.
py::array gemm(const py::handle& w_obj, const std::string& format, const py::handle& x_obj,
               int threads, const std::optional<std::string>& isa, bool packed, bool exact_nf4) {
  const Format f = parse_format(format);
  F32Array X = as_f32(x_obj, "X");
  if (X.ndim() != 2) value_error("X has shape " + shape_str(X) + ", expected (n, cols)");
  const std::int64_t n = X.shape(0), cols = X.shape(1);
  const Weights w = packed ? packed_weight_bytes(w_obj, f, cols) : weight_bytes(w_obj, f, cols);
  const std::int64_t rows = w.rows;
  const nibble::Context ctx = make_context(threads, isa, exact_nf4);
  py::array_t<float> Y({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(rows)});
  const void* W = w.data;
  const float* xp = X.data();
  float* yp = Y.mutable_data();
  {
    py::gil_scoped_release release;
    if (packed) {
      nibble::gemm(ctx, nibble::PackedWeights::view(f, W, rows, cols), xp, n, yp);
    } else {
      nibble::gemm(ctx, f, W, rows, cols, xp, n, yp);
    }
  }
  return std::move(Y);
}

// pack(blocks, format, cols=None, threads=0) / unpack(...): uint8 (rows, row_bytes) -> the same
// shape in the other layout. A flat (rows * row_bytes,) array needs cols.
// inplace: b_obj itself (a writeable C-contiguous uint8 ndarray, never a converted copy) is
// rewritten and returned.
py::array permute(const py::handle& b_obj, const std::string& format,
                  const std::optional<std::int64_t>& cols_arg, int threads, bool to_packed,
                  bool inplace) {
  const char* what = to_packed ? "blocks" : "packed";
  const Format f = parse_format(format);
  if (!nibble::packable(f)) {
    value_error(std::string(to_packed ? "pack" : "unpack") + ": format " + nibble::traits(f).name +
                " has no packed layout (packable: " + packable_names() + ")");
  }
  if (inplace) {
    // the checks below would otherwise work on a converted copy and lose the result
    if (!py::isinstance<py::array>(b_obj)) {
      value_error(std::string("inplace=True needs ") + what + " as a numpy array");
    }
    const auto a = py::reinterpret_borrow<py::array>(b_obj);  // its dtype: as_blocks below
    if (!a.writeable()) value_error(std::string("inplace=True: ") + what + " is read-only");
    if (!(a.flags() & py::array::c_style)) {
      value_error(std::string("inplace=True: ") + what + " is not C-contiguous");
    }
  }
  U8Array b = as_blocks(b_obj, what);
  const auto t = nibble::traits(f);
  std::int64_t rows = 0, cols = 0;
  if (b.ndim() == 2) {
    const std::int64_t rb = b.shape(1);
    if (rb % static_cast<std::int64_t>(t.block_bytes) != 0) {
      value_error(std::string(what) + " has shape " + shape_str(b) + ": " + std::to_string(rb) +
                  " bytes per row is not a whole number of " + t.name + " blocks (" +
                  std::to_string(t.block_bytes) + " bytes)");
    }
    rows = b.shape(0);
    cols = rb / static_cast<std::int64_t>(t.block_bytes) * t.block_elems;
    if (cols_arg && *cols_arg != cols) {
      value_error("cols = " + std::to_string(*cols_arg) + " does not match " + what + " of shape " +
                  shape_str(b) + " (" + std::to_string(cols) + " values per row)");
    }
  } else if (b.ndim() == 1) {
    if (!cols_arg) {
      value_error(std::string(what) + " is flat (shape " + shape_str(b) +
                  "): pass cols, or a (rows, row_bytes) array");
    }
    cols = *cols_arg;
    const std::int64_t rb = checked_row_bytes(f, cols);
    if (b.size() % rb != 0) {
      value_error(std::string(what) + " has " + std::to_string(b.size()) +
                  " bytes, not a multiple of row_bytes " + std::to_string(rb));
    }
    rows = b.size() / rb;
  } else {
    value_error(std::string(what) + " has shape " + shape_str(b) +
                ", expected (rows, row_bytes) or flat");
  }
  const nibble::Context ctx = make_context(threads, std::nullopt);
  if (inplace) {
    auto a = py::reinterpret_borrow<py::array>(b_obj);
    void* p = a.mutable_data();
    {
      py::gil_scoped_release release;
      if (to_packed) {
        nibble::pack_in_place(ctx, f, p, rows, cols);
      } else {
        nibble::unpack_in_place(ctx, f, p, rows, cols);
      }
    }
    return a;
  }
  std::vector<py::ssize_t> shape(b.shape(), b.shape() + b.ndim());
  py::array_t<std::uint8_t> out(shape);
  const std::uint8_t* src = b.data();
  std::uint8_t* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    if (to_packed) {
      nibble::pack(ctx, f, src, rows, cols, dst);
    } else {
      nibble::unpack(ctx, f, src, rows, cols, dst);
    }
  }
  return std::move(out);
}

// ---- nf4 (bitsandbytes QuantState-like) ----

// Python-side NF4/FP4 tensor: the C++ nf4::Quantized plus the original array shape.
struct PyQuantized {
  nibble::nf4::Quantized q;
  std::vector<py::ssize_t> shape;
};

template <class T>
py::array_t<T> to_numpy(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(T));
  return a;
}

template <class T, class A>
std::vector<T> from_numpy(const A& a) {
  return std::vector<T>(a.data(), a.data() + a.size());
}

PyQuantized nf4_quantize(const py::handle& x_obj, int blocksize, bool double_quant,
                         const std::string& quant_type) {
  if (quant_type != "nf4" && quant_type != "fp4") {
    value_error("quant_type = '" + quant_type + "', expected 'nf4' or 'fp4'");
  }
  F32Array x = as_f32(x_obj, "x");
  PyQuantized out;
  for (py::ssize_t i = 0; i < x.ndim(); ++i) out.shape.push_back(x.shape(i));
  const float* p = x.data();
  const std::int64_t n = x.size();
  const bool fp4 = quant_type == "fp4";
  {
    py::gil_scoped_release release;
    out.q = nibble::nf4::quantize(p, n, blocksize, double_quant, fp4);
  }
  return out;
}

py::array nf4_dequantize(const PyQuantized& q) {
  py::array_t<float> out(q.shape.empty() ? std::vector<py::ssize_t>{static_cast<py::ssize_t>(q.q.n)}
                                         : q.shape);
  if (out.size() != q.q.n) {
    value_error("shape has " + std::to_string(out.size()) +
                " elements, expected n = " + std::to_string(q.q.n));
  }
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release release;
    nibble::nf4::dequantize(q.q, dst);
  }
  return std::move(out);
}

}  // namespace

// Optional bindings of the calibration and file-format headers (bindings_extra.cpp).
void bind_extras(py::module_& m);

PYBIND11_MODULE(_nibble, m) {
  m.doc() = "nibble: LLM weight quantization formats (GGUF K-quants, NF4), kernels, calibration";
  py::register_exception<nibble::Error>(m, "Error", PyExc_ValueError);

  m.def(
      "formats",
      [] {
        std::vector<std::string> v;
        for (Format f : all_formats()) v.emplace_back(nibble::traits(f).name);
        return v;
      },
      "Names of the storage formats.");
  m.def(
      "format_info",
      [](const std::string& name) {
        const auto t = nibble::traits(parse_format(name));
        py::dict d;
        d["name"] = t.name;
        d["block_elems"] = t.block_elems;
        d["block_bytes"] = t.block_bytes;
        d["gguf_type"] = t.gguf_type;
        d["activation"] = nibble::traits(t.activation).name;
        return d;
      },
      py::arg("format"),
      "Block size, block bytes, GGUF type id and activation format of a format.");
  m.def(
      "row_bytes",
      [](const std::string& format, std::int64_t cols) {
        return nibble::row_bytes(parse_format(format), cols);
      },
      py::arg("format"), py::arg("cols"), "Bytes of one row of `cols` values in `format`.");
  m.def(
      "available_isas",
      [] {
        std::vector<std::string> v;
        for (Isa i : nibble::available_isas()) v.emplace_back(nibble::isa_name(i));
        return v;
      },
      "ISAs this build and CPU can run, best last.");
  m.def(
      "best_isa", [] { return std::string(nibble::isa_name(nibble::best_isa())); },
      "The ISA used by default (NIBBLE_ISA restricts it).");

  m.def("quantize", &quantize, py::arg("x"), py::arg("format"), py::arg("importance") = py::none(),
        py::arg("threads") = 0, py::arg("isa") = py::none(),
        "Quantizes x, float (cols,) or (rows, cols), to `format`. Returns uint8 blocks of shape\n"
        "(row_bytes,) or (rows, row_bytes), byte-identical to ggml's reference quantizers.\n"
        "importance: optional (cols,) non-negative weights (imatrix) for q4_K/q5_K/q6_K.");
  m.def(
      "dequantize", &dequantize, py::arg("blocks"), py::arg("format"), py::arg("shape"),
      py::arg("threads") = 0, py::arg("isa") = py::none(),
      "Dequantizes uint8 blocks of `format` to a float32 array of `shape` (cols or (rows, cols)).");
  m.def(
      "gemv", &gemv, py::arg("W"), py::arg("format"), py::arg("x"), py::arg("threads") = 0,
      py::arg("isa") = py::none(), py::arg("packed") = false, py::arg("exact_nf4") = false,
      "y = W x. W: uint8 blocks (rows, row_bytes) of `format` (or float32 (rows, cols) for f32),\n"
      "x: (cols,). Returns float32 (rows,). packed=True: W is in the packed layout (from\n"
      "nibble.pack, or a packed GGUF tensor). exact_nf4=True: NF4/FP4 in fp32 (bitsandbytes'\n"
      "product) instead of x86's int16 dot (relative error about 1e-4).");
  m.def("gemm", &gemm, py::arg("W"), py::arg("format"), py::arg("X"), py::arg("threads") = 0,
        py::arg("isa") = py::none(), py::arg("packed") = false, py::arg("exact_nf4") = false,
        "Y = X W^T. W as in gemv (packed=True: the packed layout; exact_nf4 as in gemv), X:\n"
        "(n, cols). Returns float32 (n, rows).");
  m.def(
      "packable", [](const std::string& format) { return nibble::packable(parse_format(format)); },
      py::arg("format"),
      "True if `format` has a packed layout (q8_0, q4_K, q5_K, q6_K, q4_0, q4_1, q5_0, q5_1, "
      "iq4_nl, mxfp4).");
  m.def(
      "pack",
      [](const py::handle& b, const std::string& format, const std::optional<std::int64_t>& cols,
         int threads, bool inplace) { return permute(b, format, cols, threads, true, inplace); },
      py::arg("blocks"), py::arg("format"), py::arg("cols") = py::none(), py::arg("threads") = 0,
      py::arg("inplace") = false,
      "The packed (row-interleaved, 16-row groups) layout of uint8 blocks (rows, row_bytes) of\n"
      "`format`: the same bytes permuted, same shape (a flat array needs cols). Decode GEMV on it\n"
      "(gemv(..., packed=True)) streams at the memory bandwidth. Lossless: unpack gives the\n"
      "blocks back. inplace=True rewrites `blocks` itself (a writeable C-contiguous uint8\n"
      "array) and returns it: no second copy of the matrix.");
  m.def(
      "unpack",
      [](const py::handle& b, const std::string& format, const std::optional<std::int64_t>& cols,
         int threads, bool inplace) { return permute(b, format, cols, threads, false, inplace); },
      py::arg("packed"), py::arg("format"), py::arg("cols") = py::none(), py::arg("threads") = 0,
      py::arg("inplace") = false,
      "The plain GGUF blocks of a packed array (the inverse of pack, byte for byte); inplace as\n"
      "for pack.");

  py::module_ nf4 = m.def_submodule("nf4", "bitsandbytes-compatible NF4 / FP4 (quantize_4bit)");
  py::class_<PyQuantized>(nf4, "Quantized",
                          "A 4-bit tensor; field names follow bitsandbytes' QuantState.")
      .def(py::init([](const py::handle& packed, const py::handle& absmax, std::int64_t n,
                       int blocksize, const std::string& quant_type, const py::object& qabsmax,
                       const py::object& nested_absmax, float offset, const py::object& shape) {
             PyQuantized q;
             if (quant_type != "nf4" && quant_type != "fp4") {
               value_error("quant_type = '" + quant_type + "', expected 'nf4' or 'fp4'");
             }
             q.q.packed = from_numpy<std::uint8_t>(as_blocks(packed, "packed"));
             q.q.n = n;
             q.q.blocksize = blocksize;
             q.q.fp4 = quant_type == "fp4";
             q.q.double_quant = !qabsmax.is_none();
             if (q.q.double_quant) {
               q.q.qabsmax = from_numpy<std::uint8_t>(as_blocks(qabsmax, "qabsmax"));
               if (nested_absmax.is_none()) value_error("nested_absmax is required with qabsmax");
               q.q.nested_absmax = from_numpy<float>(as_f32(nested_absmax, "nested_absmax"));
               q.q.offset = offset;
             } else if (!absmax.is_none()) {
               q.q.absmax = from_numpy<float>(as_f32(absmax, "absmax"));
             } else {
               value_error("either absmax or qabsmax + nested_absmax is required");
             }
             if (!shape.is_none()) q.shape = shape.cast<std::vector<py::ssize_t>>();
             return q;
           }),
           py::arg("packed"), py::arg("absmax") = py::none(), py::arg("n"),
           py::arg("blocksize") = 64, py::arg("quant_type") = "nf4",
           py::arg("qabsmax") = py::none(), py::arg("nested_absmax") = py::none(),
           py::arg("offset") = 0.0f, py::arg("shape") = py::none())
      .def_property_readonly(
          "packed", [](const PyQuantized& q) { return to_numpy(q.q.packed); },
          "uint8 (n+1)/2: element 2i in the high nibble of byte i")
      .def_property_readonly(
          "absmax", [](const PyQuantized& q) { return to_numpy(q.q.absmax); },
          "float32 absmax per block (empty with double_quant)")
      .def_property_readonly(
          "qabsmax", [](const PyQuantized& q) { return to_numpy(q.q.qabsmax); },
          "uint8 codes of absmax - offset (double_quant)")
      .def_property_readonly(
          "nested_absmax", [](const PyQuantized& q) { return to_numpy(q.q.nested_absmax); },
          "float32 absmax of each 256-block of absmax - offset (double_quant)")
      .def_property_readonly("offset", [](const PyQuantized& q) { return q.q.offset; })
      .def_property_readonly("blocksize", [](const PyQuantized& q) { return q.q.blocksize; })
      .def_property_readonly("n", [](const PyQuantized& q) { return q.q.n; })
      .def_property_readonly("quant_type",
                             [](const PyQuantized& q) { return q.q.fp4 ? "fp4" : "nf4"; })
      .def_property_readonly("double_quant", [](const PyQuantized& q) { return q.q.double_quant; })
      .def_property_readonly("shape",
                             [](const PyQuantized& q) { return py::tuple(py::cast(q.shape)); })
      .def("__repr__", [](const PyQuantized& q) {
        return std::string("<nibble.nf4.Quantized ") + (q.q.fp4 ? "fp4" : "nf4") +
               " n=" + std::to_string(q.q.n) + " blocksize=" + std::to_string(q.q.blocksize) +
               (q.q.double_quant ? " double_quant" : "") + ">";
      });
  nf4.def("quantize", &nf4_quantize, py::arg("x"), py::arg("blocksize") = 64,
          py::arg("double_quant") = false, py::arg("quant_type") = "nf4",
          "Quantizes x (any shape, flattened in C order) as bitsandbytes' quantize_4bit\n"
          "(compress_statistics = double_quant).");
  nf4.def("dequantize", &nf4_dequantize, py::arg("q"),
          "Dequantizes to a float32 array of q.shape (bitsandbytes' dequantize_4bit).");

  bind_extras(m);
}
