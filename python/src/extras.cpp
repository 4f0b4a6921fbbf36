// nibble Python bindings: calibration (Hessian, GPTQ, AWQ, SmoothQuant, RTN baselines, synthetic
// layers) and GGUF reading, each bound only when its header exists in this source tree.
#include <pybind11/eigen.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "nibble/nibble.hpp"

#if __has_include("nibble/quant/hessian.hpp") && __has_include("nibble/quant/gptq.hpp")
#define NIBBLE_PY_GPTQ 1
#include "nibble/quant/gptq.hpp"
#include "nibble/quant/hessian.hpp"
#endif
#if __has_include("nibble/quant/awq.hpp")
#define NIBBLE_PY_AWQ 1
#include "nibble/quant/awq.hpp"
#endif
#if __has_include("nibble/quant/smoothquant.hpp")
#define NIBBLE_PY_SMOOTHQUANT 1
#include "nibble/quant/smoothquant.hpp"
#endif

#if __has_include("nibble/quant/synthetic.hpp")
#define NIBBLE_PY_SYNTHETIC 1
#include "nibble/quant/synthetic.hpp"
#endif
#if __has_include("nibble/quant/rtn.hpp")
#define NIBBLE_PY_RTN 1
#include "nibble/quant/rtn.hpp"
#endif

#if __has_include("nibble/io/gguf.hpp")
#define NIBBLE_PY_GGUF 1
#include "nibble/io/gguf.hpp"
#include "nibble/io/packed_gguf.hpp"
#include "nibble/packed.hpp"
#endif

namespace py = pybind11;

namespace {

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

[[maybe_unused]] nibble::Format format_by_name(const std::string& name) {
  for (int k = 0; k <= static_cast<int>(nibble::kLastFormat); ++k) {
    const auto f = static_cast<nibble::Format>(k);
    if (nibble::format_implemented(f) && name == nibble::traits(f).name) return f;
  }
  throw py::value_error("unknown format '" + name + "'");
}

// (rows, cols) float matrix argument -> Eigen (column-major copy); ValueError on other shapes.
[[maybe_unused]] Eigen::MatrixXf as_matrix(const py::handle& obj, const char* what) {
  py::array a = py::array::ensure(obj);
  if (!a || (a.dtype().kind() != 'f' && a.dtype().kind() != 'i' && a.dtype().kind() != 'u')) {
    throw py::value_error(std::string(what) + " must be a float array");
  }
  F32Array f = F32Array::ensure(a);
  if (f.ndim() != 2) {
    throw py::value_error(std::string(what) + " must be 2-D, got " + std::to_string(f.ndim()) +
                          " dimensions");
  }
  Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> m(
      f.data(), f.shape(0), f.shape(1));
  return Eigen::MatrixXf(m);
}

#if defined(NIBBLE_PY_GGUF)

// A parsed GGUF file plus whatever keeps its bytes alive (the mapping, or a Python bytes object).
struct PyGguf {
  nibble::gguf::File file;
  py::object owner;  // parse(): the bytes object the File points into
};

py::dtype gguf_dtype(nibble::gguf::ValueType t) {
  using VT = nibble::gguf::ValueType;
  switch (t) {
    case VT::u8:
      return py::dtype::of<std::uint8_t>();
    case VT::i8:
      return py::dtype::of<std::int8_t>();
    case VT::u16:
      return py::dtype::of<std::uint16_t>();
    case VT::i16:
      return py::dtype::of<std::int16_t>();
    case VT::u32:
      return py::dtype::of<std::uint32_t>();
    case VT::i32:
      return py::dtype::of<std::int32_t>();
    case VT::f32:
      return py::dtype::of<float>();
    case VT::boolean:
      return py::dtype::of<bool>();
    case VT::u64:
      return py::dtype::of<std::uint64_t>();
    case VT::i64:
      return py::dtype::of<std::int64_t>();
    case VT::f64:
      return py::dtype::of<double>();
    default:
      break;
  }
  throw py::value_error("gguf: no NumPy dtype for this value type");
}

py::object utf8(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(o);
}

// Metadata value -> Python: int / float / bool / str, NumPy array for arrays of scalars, list
// for arrays of strings or of arrays.
py::object gguf_value(const nibble::gguf::Value& v) {
  using VT = nibble::gguf::ValueType;
  switch (v.type) {
    case VT::boolean:
      return py::bool_(v.bits != 0);
    case VT::u64:
      return py::int_(static_cast<unsigned long long>(v.bits));
    case VT::f32:
    case VT::f64:
      return py::float_(v.as_double());
    case VT::string:
      return utf8(v.str);
    case VT::array: {
      if (v.elem == VT::string) {
        py::list l;
        for (const std::string& s : v.strings) l.append(utf8(s));
        return std::move(l);
      }
      if (v.elem == VT::array) {
        py::list l;
        for (const auto& item : v.items) l.append(gguf_value(item));
        return std::move(l);
      }
      const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(v.count)};
      py::array a(gguf_dtype(v.elem), shape);
      if (!v.raw.empty()) std::memcpy(a.mutable_data(), v.raw.data(), v.raw.size());
      return std::move(a);
    }
    default:
      return py::int_(v.as_int());
  }
}

const nibble::gguf::TensorInfo& gguf_tensor(const PyGguf& g, const std::string& name) {
  const nibble::gguf::TensorInfo* t = g.file.find_tensor(name);
  if (!t) throw py::key_error("gguf: no tensor named '" + name + "'");
  return *t;
}

#endif

#if defined(NIBBLE_PY_GGUF)
namespace gw = nibble::gguf;

// GGUF scalar type of a NumPy dtype (kind + itemsize).
gw::ValueType value_type_of(const py::dtype& dt, const std::string& key) {
  const char k = dt.kind();
  const auto n = dt.itemsize();
  if (k == 'b') return gw::ValueType::boolean;
  if (k == 'u' && n == 1) return gw::ValueType::u8;
  if (k == 'u' && n == 2) return gw::ValueType::u16;
  if (k == 'u' && n == 4) return gw::ValueType::u32;
  if (k == 'u' && n == 8) return gw::ValueType::u64;
  if (k == 'i' && n == 1) return gw::ValueType::i8;
  if (k == 'i' && n == 2) return gw::ValueType::i16;
  if (k == 'i' && n == 4) return gw::ValueType::i32;
  if (k == 'i' && n == 8) return gw::ValueType::i64;
  if (k == 'f' && n == 4) return gw::ValueType::f32;
  if (k == 'f' && n == 8) return gw::ValueType::f64;
  throw py::value_error("gguf.write: metadata \"" + key + "\": unsupported dtype " +
                        std::string(1, k) + std::to_string(n));
}

const char* const kTypeNames[] = {"u8",   "i8",  "u16", "i16", "u32", "i32", "f32",
                                  "bool", "str", "arr", "u64", "i64", "f64"};

gw::Value to_gguf_value(const py::handle& o, const std::string& key);

// A typed value: ("u32", 5), ("f32", [1, 2]), ("str", "x"), ...
gw::Value typed_value(const std::string& t, const py::handle& v, const std::string& key) {
  int id = -1;
  for (int i = 0; i < 13; ++i)
    if (t == kTypeNames[i] && i != 9) id = i;
  if (id < 0)
    throw py::value_error("gguf.write: metadata \"" + key + "\": unknown type name \"" + t +
                          "\" (expected u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str)");
  const auto vt = static_cast<gw::ValueType>(id);
  if (vt == gw::ValueType::string) {
    if (py::isinstance<py::str>(v)) return gw::Value::string(v.cast<std::string>());
    return gw::Value::string_array(v.cast<std::vector<std::string>>());
  }
  if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v) &&
      !py::isinstance<py::array>(v)) {
    // A scalar: pybind11's casters check the range of integer types.
    try {
      switch (vt) {
        case gw::ValueType::u8:
          return gw::Value::u8(v.cast<std::uint8_t>());
        case gw::ValueType::i8:
          return gw::Value::i8(v.cast<std::int8_t>());
        case gw::ValueType::u16:
          return gw::Value::u16(v.cast<std::uint16_t>());
        case gw::ValueType::i16:
          return gw::Value::i16(v.cast<std::int16_t>());
        case gw::ValueType::u32:
          return gw::Value::u32(v.cast<std::uint32_t>());
        case gw::ValueType::i32:
          return gw::Value::i32(v.cast<std::int32_t>());
        case gw::ValueType::u64:
          return gw::Value::u64(v.cast<std::uint64_t>());
        case gw::ValueType::i64:
          return gw::Value::i64(v.cast<std::int64_t>());
        case gw::ValueType::f32:
          return gw::Value::f32(v.cast<float>());
        case gw::ValueType::f64:
          return gw::Value::f64(v.cast<double>());
        case gw::ValueType::boolean:
          return gw::Value::boolean(v.cast<bool>());
        default:
          break;
      }
    } catch (const py::cast_error&) {
      throw py::value_error("gguf.write: metadata \"" + key + "\": value not representable as " +
                            t);
    }
  }
  static const char* np_names[] = {"uint8",  "int8",    "uint16", "int16", "uint32",
                                   "int32",  "float32", "bool",   "",      "",
                                   "uint64", "int64",   "float64"};
  py::module_ np = py::module_::import("numpy");
  py::object arr = np.attr("asarray")(v, py::arg("dtype") = np_names[id]);
  py::array a = arr.cast<py::array>();
  if (vt != gw::ValueType::boolean && vt != gw::ValueType::f32 && vt != gw::ValueType::f64) {
    // integer range check: the cast must round-trip
    py::object back = np.attr("asarray")(v);
    if (!np.attr("array_equal")(arr, back).cast<bool>())
      throw py::value_error("gguf.write: metadata \"" + key + "\": value out of range for " + t);
  }
  if (a.ndim() != 1)
    throw py::value_error("gguf.write: metadata \"" + key + "\": arrays must be 1-D");
  py::array c = np.attr("ascontiguousarray")(a).cast<py::array>();
  return gw::Value::scalar_array(vt, c.data(), static_cast<std::uint64_t>(c.shape(0)));
}

gw::Value to_gguf_value(const py::handle& o, const std::string& key) {
  if (py::isinstance<py::tuple>(o) && py::len(o) == 2 &&
      py::isinstance<py::str>(o.cast<py::tuple>()[0]))
    return typed_value(o.cast<py::tuple>()[0].cast<std::string>(), o.cast<py::tuple>()[1], key);
  if (py::isinstance<py::bool_>(o)) return gw::Value::boolean(o.cast<bool>());
  if (py::isinstance<py::int_>(o)) {
    const long long v = o.cast<long long>();
    if (v >= INT32_MIN && v <= INT32_MAX) return gw::Value::i32(static_cast<std::int32_t>(v));
    return gw::Value::i64(v);
  }
  if (py::isinstance<py::float_>(o)) return gw::Value::f32(o.cast<float>());
  if (py::isinstance<py::str>(o)) return gw::Value::string(o.cast<std::string>());
  if (py::isinstance<py::array>(o) || py::hasattr(o, "dtype")) {
    py::array a = py::array::ensure(o);
    if (!a) throw py::value_error("gguf.write: metadata \"" + key + "\": not convertible");
    const char* tn = kTypeNames[static_cast<int>(value_type_of(a.dtype(), key))];
    if (a.ndim() == 0) return typed_value(tn, a.attr("item")(), key);
    return typed_value(tn, a, key);
  }
  if (py::isinstance<py::list>(o)) {
    py::list l = o.cast<py::list>();
    if (l.size() == 0)
      throw py::value_error("gguf.write: metadata \"" + key +
                            "\": empty list (give a typed value, e.g. (\"u32\", []))");
    bool all_str = true, all_list = true, all_bool = true, all_int = true;
    for (auto it : l) {
      all_str = all_str && py::isinstance<py::str>(it);
      all_list = all_list && py::isinstance<py::list>(it);
      all_bool = all_bool && py::isinstance<py::bool_>(it);
      all_int = all_int && py::isinstance<py::int_>(it) && !py::isinstance<py::bool_>(it);
    }
    if (all_str) return gw::Value::string_array(l.cast<std::vector<std::string>>());
    if (all_list) {
      std::vector<gw::Value> items;
      for (auto it : l) items.push_back(to_gguf_value(it, key));
      return gw::Value::array_of_arrays(std::move(items));
    }
    if (all_bool) return typed_value("bool", l, key);
    if (all_int) {
      try {
        return typed_value("i32", l, key);
      } catch (const py::value_error&) {
        return typed_value("i64", l, key);
      }
    }
    return typed_value("f32", l, key);
  }
  throw py::value_error("gguf.write: metadata \"" + key + "\": unsupported value of type " +
                        py::str(o.get_type()).cast<std::string>());
}

std::uint32_t gguf_type_by_name(const std::string& name) {
  for (std::uint32_t t = 0; t < 64; ++t) {
    for (std::uint32_t id : {t, t | gw::kPackedTypeFlag}) {  // "q4_K", "q4_K.x16"
      const char* n = gw::type_info(id).name;
      if (n && name == n) return id;
    }
  }
  throw py::value_error("gguf.write: unknown tensor type \"" + name + "\"");
}
#endif
}  // namespace

void bind_extras(py::module_& m) {
  std::vector<std::string> bound;

#if defined(NIBBLE_PY_GPTQ)
  bound.emplace_back("Hessian");
  py::class_<nibble::Hessian>(m, "Hessian",
                              "GPTQ layer Hessian H = 2/n sum_t x_t x_t^T over calibration tokens.")
      .def(py::init<std::int64_t>(), py::arg("cols"))
      .def(
          "add_batch",
          [](nibble::Hessian& h, const py::handle& x_obj) {
            py::array a = py::array::ensure(x_obj);
            if (!a || a.dtype().kind() != 'f') throw py::value_error("X must be a float array");
            F32Array x = F32Array::ensure(a);
            if (x.ndim() != 2 || x.shape(1) != h.cols()) {
              throw py::value_error("X must have shape (tokens, " + std::to_string(h.cols()) + ")");
            }
            const float* p = x.data();
            const std::int64_t tokens = x.shape(0);
            py::gil_scoped_release release;
            h.add_batch(p, tokens);
          },
          py::arg("X"), "Adds (tokens, cols) activations.")
      .def_property_readonly(
          "matrix", [](const nibble::Hessian& h) { return h.matrix(); },
          "H as a (cols, cols) float32 array (a copy).")
      .def_property_readonly("tokens", &nibble::Hessian::tokens)
      .def_property_readonly("cols", &nibble::Hessian::cols);

  bound.emplace_back("gptq");
  py::module_ g = m.def_submodule("gptq", "GPTQ (IST-DASLab/gptq and AutoGPTQ conventions)");
  auto make_cfg = [](int bits, int group_size, bool sym, bool act_order, bool static_groups,
                     int block_size, float percdamp, bool mse) {
    nibble::gptq::Config c;
    c.bits = bits;
    c.group_size = group_size;
    c.sym = sym;
    c.act_order = act_order;
    c.static_groups = static_groups;
    c.block_size = block_size;
    c.percdamp = percdamp;
    c.mse = mse;
    return c;
  };
  g.def(
      "quantize",
      [make_cfg](const py::handle& W, const py::handle& H, int bits, int group_size, bool sym,
                 bool act_order, bool static_groups, int block_size, float percdamp, bool mse) {
        const Eigen::MatrixXf w = as_matrix(W, "W"), h = as_matrix(H, "H");
        const nibble::gptq::Config cfg =
            make_cfg(bits, group_size, sym, act_order, static_groups, block_size, percdamp, mse);
        nibble::gptq::Result r;
        {
          py::gil_scoped_release release;
          r = nibble::gptq::quantize(w, h, cfg);
        }
        py::dict d;
        d["Q"] = r.Q;
        d["scale"] = r.scale;
        d["zero"] = r.zero;
        d["g_idx"] =
            py::array_t<std::int32_t>(static_cast<py::ssize_t>(r.g_idx.size()), r.g_idx.data());
        d["loss"] = r.loss;
        return d;
      },
      py::arg("W"), py::arg("H"), py::arg("bits") = 4, py::arg("group_size") = 128,
      py::arg("sym") = false, py::arg("act_order") = false, py::arg("static_groups") = false,
      py::arg("block_size") = 128, py::arg("percdamp") = 0.01f, py::arg("mse") = false,
      "GPTQ of W (out, in) with Hessian H (in, in). Returns a dict: Q (dequantized weights),\n"
      "scale, zero (out, n_groups), g_idx (in,), loss.");
  g.def(
      "quantize_blocks",
      [make_cfg](const std::string& format, const py::handle& W, const py::handle& H,
                 int block_size, float percdamp) {
        const nibble::Format f = format_by_name(format);
        const Eigen::MatrixXf w = as_matrix(W, "W"), h = as_matrix(H, "H");
        const nibble::gptq::Config cfg =
            make_cfg(4, 128, false, false, false, block_size, percdamp, false);
        std::vector<std::uint8_t> b;
        {
          py::gil_scoped_release release;
          b = nibble::gptq::quantize_blocks(f, w, h, cfg);
        }
        const auto rows = static_cast<py::ssize_t>(w.rows());
        const auto rb = static_cast<py::ssize_t>(nibble::row_bytes(f, w.cols()));
        py::array_t<std::uint8_t> out({rows, rb});
        if (!b.empty()) std::memcpy(out.mutable_data(), b.data(), b.size());
        return out;
      },
      py::arg("format"), py::arg("W"), py::arg("H"), py::arg("block_size") = 128,
      py::arg("percdamp") = 0.01f,
      "GPTQ into GGUF blocks (q2_K / q3_K / q4_K / q5_K / q6_K; q8_0 / q5_0 / q4_0). Returns "
      "uint8\n"
      "(rows, row_bytes).");
#endif

#if defined(NIBBLE_PY_AWQ)
  bound.emplace_back("awq");
  py::module_ a = m.def_submodule("awq", "AWQ scale and clip search (llm-awq)");
  a.def(
      "activation_mean",
      [](const py::handle& X) { return nibble::awq::activation_mean(as_matrix(X, "X")); },
      py::arg("X"), "Mean |x| per input channel of X (tokens, in).");
  a.def(
      "search",
      [](const py::handle& W, const py::handle& X, int bits, int group_size, bool zero_point,
         int n_grid, bool clip, float max_shrink, int clip_grid, int n_sample_token,
         bool duo_scaling) {
        const Eigen::MatrixXf w = as_matrix(W, "W"), x = as_matrix(X, "X");
        nibble::awq::Config cfg;
        cfg.bits = bits;
        cfg.group_size = group_size;
        cfg.zero_point = zero_point;
        cfg.n_grid = n_grid;
        cfg.clip = clip;
        cfg.max_shrink = max_shrink;
        cfg.clip_grid = clip_grid;
        cfg.n_sample_token = n_sample_token;
        cfg.duo_scaling = duo_scaling;
        nibble::awq::Result r;
        {
          py::gil_scoped_release release;
          r = nibble::awq::search(w, x, cfg);
        }
        py::dict d;
        d["scales"] = r.scales;
        d["best_ratio"] = r.best_ratio;
        d["clip_max"] = r.clip_max;
        d["W_eff"] = r.W_eff;
        return d;
      },
      py::arg("W"), py::arg("X"), py::arg("bits") = 4, py::arg("group_size") = 128,
      py::arg("zero_point") = true, py::arg("n_grid") = 20, py::arg("clip") = true,
      py::arg("max_shrink") = 0.5f, py::arg("clip_grid") = 20, py::arg("n_sample_token") = 512,
      py::arg("duo_scaling") = false,
      "AWQ search for W (out, in) with calibration inputs X (tokens, in). Returns a dict:\n"
      "scales (in,), best_ratio, clip_max (out, n_groups), W_eff (out, in).\n"
      "duo_scaling=True: AutoAWQ's candidates s = x_mean^r / (w_mean^(1-r) + 1e-4).");
#endif

#if defined(NIBBLE_PY_SMOOTHQUANT)
  bound.emplace_back("smoothquant");
  py::module_ s = m.def_submodule("smoothquant", "SmoothQuant smoothing factors");
  s.def(
      "act_absmax",
      [](const py::handle& X) { return nibble::smoothquant::act_absmax(as_matrix(X, "X")); },
      py::arg("X"), "max over tokens of |x| per input channel of X (tokens, in).");
  s.def(
      "scales",
      [](const py::handle& act_absmax, const py::handle& W, float alpha) {
        py::array v = py::array::ensure(act_absmax);
        if (!v || v.ndim() != 1) throw py::value_error("act_absmax must be a 1-D float array");
        F32Array f = F32Array::ensure(v);
        const Eigen::VectorXf am = Eigen::Map<const Eigen::VectorXf>(f.data(), f.shape(0));
        return nibble::smoothquant::scales(am, as_matrix(W, "W"), alpha);
      },
      py::arg("act_absmax"), py::arg("W"), py::arg("alpha") = 0.5f,
      "Smoothing factors s (in,): x' = x / s, W' = W * s.");
  s.def(
      "w8a8_forward",
      [](const py::handle& X, const py::handle& W, bool per_token) {
        const Eigen::MatrixXf x = as_matrix(X, "X"), w = as_matrix(W, "W");
        Eigen::MatrixXf y;
        {
          py::gil_scoped_release release;
          y = nibble::smoothquant::w8a8_forward(x, w, per_token);
        }
        return y;
      },
      py::arg("X"), py::arg("W"), py::arg("per_token") = true,
      "W8A8 fake-quantized output fq_act(X) fq_w(W)^T (tokens, out): int8 [-127, 127] with\n"
      "per-channel weights and per-token (or per-tensor) activations.");
#endif

#if defined(NIBBLE_PY_RTN)
  bound.emplace_back("rtn");
  py::module_ rt = m.def_submodule("rtn", "Round-to-nearest baselines on the GPTQ and AWQ grids");
  rt.def(
      "gptq_rtn",
      [](const py::handle& W, int bits, int group_size, bool sym) {
        return nibble::rtn::gptq_rtn(as_matrix(W, "W"), bits, group_size, sym);
      },
      py::arg("W"), py::arg("bits") = 4, py::arg("group_size") = 128, py::arg("sym") = false,
      "GPTQ-quantizer RTN of W (out, in) per row and group (-1: whole rows); dequantized.");
  rt.def(
      "awq_rtn",
      [](const py::handle& W, int bits, int group_size, bool zero_point) {
        return nibble::rtn::awq_rtn(as_matrix(W, "W"), bits, group_size, zero_point);
      },
      py::arg("W"), py::arg("bits") = 4, py::arg("group_size") = 128, py::arg("zero_point") = true,
      "AWQ pseudo_quantize_tensor of W (out, in) per row and group; dequantized.");
  rt.def(
      "relative_output_error",
      [](const py::handle& W, const py::handle& Q, const py::handle& X) {
        return nibble::rtn::relative_output_error(as_matrix(W, "W"), as_matrix(Q, "Q"),
                                                  as_matrix(X, "X"));
      },
      py::arg("W"), py::arg("Q"), py::arg("X"),
      "||(W - Q) X^T||_F^2 / ||W X^T||_F^2 in double (X: tokens, in).");
#endif

#if defined(NIBBLE_PY_SYNTHETIC)
  bound.emplace_back("synthetic");
  py::module_ sy = m.def_submodule("synthetic", "Synthetic LLM-like layers (synthetic.hpp)");
  sy.def(
      "layer",
      [](int out, int in, int tokens, float row_sigma, float chan_sigma, int rank, float lowrank,
         float outlier_frac, float outlier_lo, float outlier_hi, std::uint64_t seed) {
        if (out < 1 || in < 1 || tokens < 1 || rank < 0) {
          throw py::value_error("synthetic.layer: out, in_, tokens must be >= 1 and rank >= 0");
        }
        nibble::synthetic::LayerSpec spec;
        spec.out = out;
        spec.in = in;
        spec.tokens = tokens;
        spec.row_sigma = row_sigma;
        spec.chan_sigma = chan_sigma;
        spec.rank = rank;
        spec.lowrank = lowrank;
        spec.outlier_frac = outlier_frac;
        spec.outlier_lo = outlier_lo;
        spec.outlier_hi = outlier_hi;
        spec.seed = seed;
        nibble::synthetic::Layer L;
        {
          py::gil_scoped_release release;
          L = nibble::synthetic::make_layer(spec);
        }
        using RowMajorXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
        return py::make_tuple(RowMajorXf(L.W), RowMajorXf(L.X));
      },
      py::arg("out") = 256, py::arg("in_") = 512, py::arg("tokens") = 2048,
      py::arg("row_sigma") = 0.5f, py::arg("chan_sigma") = 0.5f, py::arg("rank") = 16,
      py::arg("lowrank") = 3.5f, py::arg("outlier_frac") = 0.01f, py::arg("outlier_lo") = 20.0f,
      py::arg("outlier_hi") = 50.0f, py::arg("seed") = 1,
      "The synthetic layer of nibble::synthetic::make_layer: (W float32 (out, in_),\n"
      "X float32 (tokens, in_)), identical to the one the C++ tests use for the same spec.");
#endif

#if defined(NIBBLE_PY_GGUF)
  bound.emplace_back("gguf");
  py::module_ gg =
      m.def_submodule("gguf", "GGUF v2/v3 reading (checked, zero-copy) and v3 writing");
  py::class_<PyGguf>(gg, "File", "A parsed GGUF file; tensor data are views into its bytes.")
      .def_property_readonly("version", [](const PyGguf& g) { return g.file.version; })
      .def_property_readonly("alignment", [](const PyGguf& g) { return g.file.alignment; })
      .def_property_readonly("data_offset", [](const PyGguf& g) { return g.file.data_offset; })
      .def_property_readonly("file_size", [](const PyGguf& g) { return g.file.file_size; })
      .def_property_readonly(
          "metadata",
          [](const PyGguf& g) {
            py::dict d;  // insertion order = file order
            for (const auto& kv : g.file.metadata) d[utf8(kv.key)] = gguf_value(kv.value);
            return d;
          },
          "dict key -> value, in file order")
      .def_property_readonly(
          "tensors",
          [](const PyGguf& g) {
            py::list l;
            for (const auto& t : g.file.tensors) {
              py::dict d;
              d["name"] = utf8(t.name);
              d["shape"] = t.shape;
              d["type"] = t.type;
              const auto info = nibble::gguf::type_info(t.type);
              d["type_name"] = info.name ? py::str(info.name) : py::str("?");
              d["packed"] = t.packed();
              d["offset"] = t.offset;
              d["nbytes"] = t.nbytes;
              l.append(d);
            }
            return l;
          },
          "list of dicts: name, shape (ne[0] first, as in GGUF), type, type_name, packed (the\n"
          "packed layout: type_name q4_K.x16 etc.), offset, nbytes")
      .def(
          "tensor_data",
          [](py::object self, const std::string& name) {
            const PyGguf& g = self.cast<const PyGguf&>();
            const auto& t = gguf_tensor(g, name);
            const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(t.nbytes)};
            const std::vector<py::ssize_t> strides = {1};
            py::array a(py::dtype::of<std::uint8_t>(), shape, strides, t.data, self);
            py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
            return a;
          },
          py::arg("name"), "The raw bytes of a tensor: a read-only uint8 view (no copy).")
      .def(
          "tensor",
          [](const PyGguf& g, const std::string& name) {
            const auto& t = gguf_tensor(g, name);
            const auto info = nibble::gguf::type_info(t.type);
            const std::uint32_t base = nibble::gguf::base_type(t.type);  // packed: unpacked below
            nibble::Format f{};
            bool found = false;
            for (nibble::Format c : {nibble::Format::f32, nibble::Format::f16, nibble::Format::q8_0,
                                     nibble::Format::q4_K, nibble::Format::q5_K,
                                     nibble::Format::q6_K, nibble::Format::q8_K}) {
              if (nibble::traits(c).gguf_type == static_cast<int>(base)) {
                f = c;
                found = true;
              }
            }
            if (!found) {
              throw py::value_error("gguf: tensor '" + name + "' has type " +
                                    (info.name ? info.name : "?") +
                                    ", which nibble cannot dequantize");
            }
            std::vector<py::ssize_t> shape(t.shape.rbegin(), t.shape.rend());
            py::array_t<float> out(shape);
            const std::int64_t cols = t.shape.empty() ? 0 : t.shape[0];
            const std::int64_t rows = cols ? t.elements() / cols : 0;
            const void* src = t.data;
            float* dst = out.mutable_data();
            const bool packed = t.packed();
            py::gil_scoped_release release;
            std::vector<std::uint8_t> plain;
            if (packed) {
              plain.resize(t.nbytes);
              nibble::unpack(nibble::Context{}, f, src, rows, cols, plain.data());
              src = plain.data();
            }
            nibble::dequantize(f, src, rows, cols, dst);
            return out;
          },
          py::arg("name"),
          "A tensor dequantized to float32, shape reversed to NumPy order (rows, cols). Packed\n"
          "tensors are unpacked first.");
  gg.def(
      "write",
      [](const std::string& path, const py::dict& metadata, const py::list& tensors) {
        std::vector<gw::KeyValue> meta;
        for (auto kv : metadata) {
          const std::string key = py::str(kv.first).cast<std::string>();
          meta.push_back({key, to_gguf_value(kv.second, key)});
        }
        std::vector<py::array> keep;
        std::vector<gw::TensorInfo> infos;
        for (auto item : tensors) {
          py::tuple t = py::reinterpret_borrow<py::object>(item).cast<py::tuple>();
          if (t.size() != 2 && t.size() != 4)
            throw py::value_error(
                "gguf.write: each tensor is (name, float32/float16 array) or "
                "(name, uint8 bytes, type name, shape)");
          gw::TensorInfo ti;
          ti.name = t[0].cast<std::string>();
          py::array a = py::array::ensure(t[1], py::array::c_style);
          if (!a) throw py::value_error("gguf.write: tensor " + ti.name + ": not an array");
          std::vector<std::int64_t> np_shape;
          if (t.size() == 2) {
            const char k = a.dtype().kind();
            if (k == 'f' && a.itemsize() == 4) {
              ti.type = 0;
            } else if (k == 'f' && a.itemsize() == 2) {
              ti.type = 1;
            } else {
              throw py::value_error("gguf.write: tensor " + ti.name +
                                    ": plain arrays must be float32 or float16 (give "
                                    "(name, bytes, type, shape) for other types)");
            }
            for (py::ssize_t d = 0; d < a.ndim(); ++d) np_shape.push_back(a.shape(d));
          } else {
            if (a.dtype().kind() != 'u' || a.itemsize() != 1)
              throw py::value_error("gguf.write: tensor " + ti.name + ": bytes must be uint8");
            ti.type = gguf_type_by_name(t[2].cast<std::string>());
            np_shape = t[3].cast<std::vector<std::int64_t>>();
          }
          if (np_shape.empty() || np_shape.size() > 4)
            throw py::value_error("gguf.write: tensor " + ti.name + ": 1 to 4 dimensions");
          for (auto d : np_shape)
            if (d < 1) throw py::value_error("gguf.write: tensor " + ti.name + ": empty dimension");
          ti.shape.assign(np_shape.rbegin(), np_shape.rend());  // GGUF: ne[0] = last NumPy axis
          if (ti.shape[0] % gw::type_info(ti.type).block_elems != 0)
            throw py::value_error("gguf.write: tensor " + ti.name + ": row length " +
                                  std::to_string(ti.shape[0]) + " is not a multiple of " +
                                  std::to_string(gw::type_info(ti.type).block_elems));
          ti.nbytes = gw::tensor_nbytes(ti.type, ti.shape);
          if (static_cast<std::uint64_t>(a.nbytes()) != ti.nbytes)
            throw py::value_error("gguf.write: tensor " + ti.name + ": " +
                                  std::to_string(a.nbytes()) + " bytes given, " +
                                  std::to_string(ti.nbytes) + " expected for its type and shape");
          ti.data = static_cast<const std::uint8_t*>(a.data());
          keep.push_back(a);
          infos.push_back(std::move(ti));
        }
        py::gil_scoped_release release;
        gw::write_file(path, meta, std::move(infos));
      },
      py::arg("path"), py::arg("metadata"), py::arg("tensors"),
      "Writes a GGUF v3 file. metadata: dict in file order; values: bool, int (i32, or i64 when\n"
      "large), float (f32), str, lists (of str, of numbers, of lists), NumPy scalars/arrays "
      "(their\n"
      "dtype), or a typed pair such as (\"u32\", 5), (\"f64\", [1, 2]), (\"str\", [\"a\"]).\n"
      "tensors: list of (name, float32/float16 array) or (name, uint8 bytes, type name such as\n"
      "\"q4_K\", NumPy-order shape). Tensor data are aligned to general.alignment (default 32);\n"
      "the file is written to PATH.tmp and renamed.");
  auto summary = [](const nibble::PackGgufSummary& s) {
    py::dict d;
    d["converted"] = s.converted;
    d["copied"] = s.copied;
    d["converted_bytes"] = s.converted_bytes;
    d["file_bytes"] = s.file_bytes;
    d["seconds"] = s.seconds;
    return d;
  };
  gg.def(
      "pack_file",
      [summary](const std::string& in, const std::string& out, int threads) {
        if (threads < 0) throw py::value_error("threads must be >= 0");
        nibble::Context ctx;
        ctx.threads = threads;
        nibble::PackGgufSummary s;
        {
          py::gil_scoped_release release;
          s = nibble::pack_gguf(in, out, ctx);
        }
        return summary(s);
      },
      py::arg("in_path"), py::arg("out_path"), py::arg("threads") = 0,
      "`nibble pack`: writes in_path with its tensors of >= 16 rows in a packable GGUF type\n"
      "(nibble.packable) in the packed layout (type q4_K.x16, ...; every other byte unchanged).\n"
      "Returns a dict: converted, copied, converted_bytes, file_bytes, seconds.");
  gg.def(
      "unpack_file",
      [summary](const std::string& in, const std::string& out, int threads) {
        if (threads < 0) throw py::value_error("threads must be >= 0");
        nibble::Context ctx;
        ctx.threads = threads;
        nibble::PackGgufSummary s;
        {
          py::gil_scoped_release release;
          s = nibble::unpack_gguf(in, out, ctx);
        }
        return summary(s);
      },
      py::arg("in_path"), py::arg("out_path"), py::arg("threads") = 0,
      "`nibble unpack`: the inverse of pack_file, byte for byte.");
  gg.def(
      "open",
      [](const std::string& path) {
        PyGguf g;
        g.file = nibble::gguf::File::open(path);
        return g;
      },
      py::arg("path"), "Maps and parses a GGUF file (nibble.Error if malformed).");
  gg.def(
      "parse",
      [](py::bytes data) {
        PyGguf g;
        char* p = nullptr;
        Py_ssize_t n = 0;
        if (PyBytes_AsStringAndSize(data.ptr(), &p, &n) != 0) throw py::error_already_set();
        g.file = nibble::gguf::File::parse(p, static_cast<std::size_t>(n));
        g.owner = data;
        return g;
      },
      py::arg("data"), "Parses GGUF bytes (kept alive by the returned File).");
#endif

  m.attr("_extras") = bound;
}
