// nibble: reader/writer for llama.cpp importance-matrix files (legacy binary and GGUF).
#include "nibble/io/imatrix.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "nibble/core/error.hpp"
#include "nibble/io/gguf.hpp"

namespace nibble {

using detail::fail;

namespace {

// Bounds-checked little-endian reader for the legacy format.
struct Reader {
  const std::uint8_t* p;
  std::size_t n;
  std::size_t pos = 0;
  std::int32_t i32(const char* what) {
    if (n - pos < 4) {
      fail("imatrix: truncated file: ", what, " at byte offset ", pos, " (file size ", n, ")");
    }
    std::int32_t v;
    std::memcpy(&v, p + pos, 4);
    pos += 4;
    return v;
  }
  const std::uint8_t* bytes(std::uint64_t len, const char* what) {
    if (len > n - pos) {
      fail("imatrix: truncated file: ", what, " of ", len, " bytes at byte offset ", pos,
           " (file size ", n, ")");
    }
    const std::uint8_t* r = p + pos;
    pos += static_cast<std::size_t>(len);
    return r;
  }
};

Imatrix parse_legacy(const std::uint8_t* p, std::size_t n) {
  Reader r{p, n};
  Imatrix m;
  const std::int32_t n_entries = r.i32("entry count");
  if (n_entries < 1) fail("imatrix: entry count ", n_entries, " at byte offset 0 (expected >= 1)");
  // Each entry needs at least 4 + 4 + 4 + 4 bytes.
  if (static_cast<std::uint64_t>(n_entries) * 16u > n - 4) {
    fail("imatrix: entry count ", n_entries, " cannot fit in a file of ", n, " bytes");
  }
  for (std::int32_t i = 0; i < n_entries; ++i) {
    const std::size_t at = r.pos;
    const std::int32_t len = r.i32("name length");
    if (len < 0) fail("imatrix: entry ", i, " name length ", len, " at byte offset ", at);
    const std::uint8_t* s = r.bytes(static_cast<std::uint64_t>(len), "name");
    // llama-quantize keeps the name up to the first NUL.
    std::string name(reinterpret_cast<const char*>(s), static_cast<std::size_t>(len));
    name = std::string(name.c_str());
    const std::int32_t ncall = r.i32("ncall");
    const std::size_t vat = r.pos;
    const std::int32_t nval = r.i32("value count");
    if (nval < 1) fail("imatrix: entry \"", name, "\" has ", nval, " values at byte offset ", vat);
    const std::uint8_t* v = r.bytes(static_cast<std::uint64_t>(nval) * 4u, "values");
    std::vector<float> e(static_cast<std::size_t>(nval));
    std::memcpy(e.data(), v, e.size() * 4);
    if (ncall > 0) {
      const float fc = static_cast<float>(ncall);
      for (auto& x : e) x /= fc;
    }
    m.entries[name] = std::move(e);
  }
  if (r.pos < n) {
    m.chunks = r.i32("chunk count");
    const std::size_t at = r.pos;
    const std::int32_t dlen = r.i32("dataset name length");
    if (dlen < 0) fail("imatrix: dataset name length ", dlen, " at byte offset ", at);
    const std::uint8_t* s = r.bytes(static_cast<std::uint64_t>(dlen), "dataset name");
    m.datasets.emplace_back(reinterpret_cast<const char*>(s), static_cast<std::size_t>(dlen));
  }
  return m;
}

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

Imatrix parse_gguf(const void* data, std::size_t size) {
  const gguf::File f = gguf::File::parse(data, size);
  Imatrix m;
  m.gguf_format = true;
  if (f.tensors.empty()) fail("imatrix: GGUF imatrix has no tensors");
  const gguf::KeyValue* ds = f.find("imatrix.datasets");
  const gguf::KeyValue* cc = f.find("imatrix.chunk_count");
  const gguf::KeyValue* cs = f.find("imatrix.chunk_size");
  if (!ds || !cc || !cs) {
    fail("imatrix: GGUF imatrix lacks imatrix.datasets, imatrix.chunk_count or imatrix.chunk_size");
  }
  if (ds->value.type != gguf::ValueType::array || ds->value.elem != gguf::ValueType::string) {
    fail("imatrix: imatrix.datasets is not a string array");
  }
  m.datasets = ds->value.strings;
  if (!cc->value.is_integer()) fail("imatrix: imatrix.chunk_count is not an integer");
  m.chunks = static_cast<int>(cc->value.as_int());

  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;
  const std::string sums = ".in_sum2", counts = ".counts";
  for (const auto& t : f.tensors) {
    if (ends_with(t.name, sums)) {
      pairs[t.name.substr(0, t.name.size() - sums.size())].first = &t;
    } else if (ends_with(t.name, counts)) {
      pairs[t.name.substr(0, t.name.size() - counts.size())].second = &t;
    }
  }
  for (const auto& kv : pairs) {
    const gguf::TensorInfo* s = kv.second.first;
    const gguf::TensorInfo* c = kv.second.second;
    if (!s || !c) fail("imatrix: \"", kv.first, "\" lacks its .in_sum2 or .counts tensor");
    if (s->type != 0 || c->type != 0) fail("imatrix: tensors of \"", kv.first, "\" are not f32");
    const std::int64_t ne0 = s->shape[0];
    const std::int64_t ne1 = s->shape.size() > 1 ? s->shape[1] : 1;
    if (s->elements() != ne0 * ne1) fail("imatrix: \"", kv.first, "\".in_sum2 is not 2-D");
    if (c->elements() < ne1) {
      fail("imatrix: \"", kv.first, "\".counts has ", c->elements(), " values, need ", ne1);
    }
    std::vector<float> e(static_cast<std::size_t>(ne0 * ne1));
    for (std::int64_t j = 0; j < ne1; ++j) {
      float count;
      std::memcpy(&count, c->data + 4 * j, 4);
      for (std::int64_t i = 0; i < ne0; ++i) {
        if (count > 0.0f) {
          float v;
          std::memcpy(&v, s->data + 4 * (j * ne0 + i), 4);
          e[static_cast<std::size_t>(j * ne0 + i)] = v / count;
        } else {
          e[static_cast<std::size_t>(j * ne0 + i)] = 1.0f;  // never saw input during calibration
        }
      }
    }
    m.entries[kv.first] = std::move(e);
  }
  return m;
}

}  // namespace

const std::vector<float>* Imatrix::find(const std::string& tensor_name) const {
  auto it = entries.find(tensor_name);
  return it == entries.end() ? nullptr : &it->second;
}

Imatrix parse_imatrix(const void* data, std::size_t size) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  if (!p && size) fail("imatrix: data is null");
  Imatrix m =
      (size >= 4 && std::memcmp(p, "GGUF", 4) == 0) ? parse_gguf(p, size) : parse_legacy(p, size);
  for (const auto& kv : m.entries) {
    for (std::size_t i = 0; i < kv.second.size(); ++i) {
      if (!std::isfinite(kv.second[i])) {
        fail("imatrix: entry \"", kv.first, "\" value ", i, " is not finite (", kv.second[i], ")");
      }
    }
  }
  return m;
}

Imatrix read_imatrix(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("imatrix: cannot open \"", path, "\"");
  std::vector<char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    return parse_imatrix(buf.data(), buf.size());
  } catch (const Error& e) {
    fail("\"", path, "\": ", e.what());
  }
}

void write_legacy_imatrix(const std::string& path, const Imatrix& m) {
  std::vector<std::uint8_t> b;
  auto put32 = [&](std::int32_t v) {
    const auto* q = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), q, q + 4);
  };
  put32(static_cast<std::int32_t>(m.entries.size()));
  for (const auto& kv : m.entries) {
    put32(static_cast<std::int32_t>(kv.first.size()));
    b.insert(b.end(), kv.first.begin(), kv.first.end());
    put32(1);
    put32(static_cast<std::int32_t>(kv.second.size()));
    const auto* q = reinterpret_cast<const std::uint8_t*>(kv.second.data());
    b.insert(b.end(), q, q + 4 * kv.second.size());
  }
  if (!m.datasets.empty() || m.chunks > 0) {
    put32(m.chunks);
    const std::string d = m.datasets.empty() ? std::string() : m.datasets[0];
    put32(static_cast<std::int32_t>(d.size()));
    b.insert(b.end(), d.begin(), d.end());
  }
  std::FILE* fp = std::fopen(path.c_str(), "wb");
  if (!fp) fail("imatrix: cannot create \"", path, "\"");
  const bool ok = std::fwrite(b.data(), 1, b.size(), fp) == b.size();
  if (std::fclose(fp) != 0 || !ok) fail("imatrix: writing \"", path, "\" failed");
}

void ImatrixStats::add(const std::string& name, const float* x, std::int64_t n, std::int64_t cols) {
  if (n < 0 || cols < 1 || (!x && n > 0)) {
    fail("imatrix: add(\"", name, "\"): invalid n = ", n, ", cols = ", cols);
  }
  Entry& e = entries[name];
  if (e.sums.empty()) {
    e.sums.assign(static_cast<std::size_t>(cols), 0.0f);
    e.counts.assign(1, 0);
  } else if (e.sums.size() != static_cast<std::size_t>(cols) || e.counts.size() != 1) {
    fail("imatrix: inconsistent size for \"", name, "\" (", e.sums.size(), " vs ", cols, ")");
  }
  for (std::int64_t r = 0; r < n; ++r) {
    const float* row = x + r * cols;
    for (std::int64_t j = 0; j < cols; ++j) e.sums[static_cast<std::size_t>(j)] += row[j] * row[j];
  }
  for (float v : e.sums) {
    if (!std::isfinite(v)) fail("imatrix: non-finite sum of squares in \"", name, "\"");
  }
  e.counts[0] += n;
}

namespace {

void check_stats(const ImatrixStats& s, const char* what) {
  if (s.entries.empty()) fail("imatrix: ", what, ": no statistics to write");
  for (const auto& kv : s.entries) {
    const auto& e = kv.second;
    if (e.counts.empty() || e.sums.empty() || e.sums.size() % e.counts.size() != 0) {
      fail("imatrix: ", what, ": entry \"", kv.first, "\" has ", e.sums.size(), " sums and ",
           e.counts.size(), " counts");
    }
  }
}

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& b) {
  const std::string tmp = path + ".tmp";
  std::FILE* fp = std::fopen(tmp.c_str(), "wb");
  if (!fp) fail("imatrix: cannot create \"", tmp, "\"");
  const bool ok = std::fwrite(b.data(), 1, b.size(), fp) == b.size();
  if (std::fclose(fp) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("imatrix: writing \"", path, "\" failed");
  }
}

}  // namespace

void write_imatrix_gguf(const std::string& path, const ImatrixStats& s) {
  check_stats(s, "write_imatrix_gguf");
  std::vector<gguf::KeyValue> meta;
  meta.push_back({"general.type", gguf::Value::string("imatrix")});
  meta.push_back({"imatrix.datasets", gguf::Value::string_array(s.datasets)});
  meta.push_back({"imatrix.chunk_count", gguf::Value::u32(static_cast<std::uint32_t>(s.chunks))});
  meta.push_back(
      {"imatrix.chunk_size", gguf::Value::u32(static_cast<std::uint32_t>(s.chunk_size))});
  std::vector<std::vector<float>> counts;  // keeps the float counts alive
  counts.reserve(s.entries.size());
  std::vector<gguf::TensorInfo> tensors;
  for (const auto& kv : s.entries) {  // std::map: name order
    const auto& e = kv.second;
    const std::int64_t nmat = static_cast<std::int64_t>(e.counts.size());
    const std::int64_t nval = static_cast<std::int64_t>(e.sums.size());
    gguf::TensorInfo t;
    t.name = kv.first + ".in_sum2";
    // ggml writes ggml_n_dims dimensions: trailing ones dropped.
    t.shape =
        nmat > 1 ? std::vector<std::int64_t>{nval / nmat, nmat} : std::vector<std::int64_t>{nval};
    t.type = 0;
    t.nbytes = static_cast<std::uint64_t>(nval) * 4;
    t.data = reinterpret_cast<const std::uint8_t*>(e.sums.data());
    tensors.push_back(t);
    counts.emplace_back(e.counts.begin(), e.counts.end());
    gguf::TensorInfo c;
    c.name = kv.first + ".counts";
    c.shape = nmat > 1 ? std::vector<std::int64_t>{1, nmat} : std::vector<std::int64_t>{1};
    c.type = 0;
    c.nbytes = static_cast<std::uint64_t>(nmat) * 4;
    c.data = reinterpret_cast<const std::uint8_t*>(counts.back().data());
    tensors.push_back(c);
  }
  write_bytes(path, gguf::write_memory(meta, std::move(tensors)));
}

void write_imatrix_dat(const std::string& path, const ImatrixStats& s) {
  check_stats(s, "write_imatrix_dat");
  if (s.chunk_size < 1) fail("imatrix: write_imatrix_dat: chunk_size ", s.chunk_size, " < 1");
  std::vector<std::uint8_t> b;
  auto put32 = [&](std::int32_t v) {
    const auto* q = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), q, q + 4);
  };
  std::vector<const std::string*> names;
  for (const auto& kv : s.entries) {
    bool any = false;
    for (auto c : kv.second.counts) any = any || c != 0;
    if (any) names.push_back(&kv.first);
  }
  if (names.empty()) fail("imatrix: write_imatrix_dat: no entry has data");
  put32(static_cast<std::int32_t>(names.size()));
  for (const std::string* name : names) {
    const auto& e = s.entries.at(*name);
    put32(static_cast<std::int32_t>(name->size()));
    b.insert(b.end(), name->begin(), name->end());
    const std::int64_t mx = *std::max_element(e.counts.begin(), e.counts.end());
    const std::int32_t ncall = static_cast<std::int32_t>((mx + (s.chunk_size - 1)) / s.chunk_size);
    put32(ncall);
    const std::size_t nval = e.sums.size(), per = nval / e.counts.size();
    put32(static_cast<std::int32_t>(nval));
    for (std::size_t i = 0; i < nval; ++i) {
      float count = static_cast<float>(e.counts[i / per]);
      float value = e.sums[i];
      if (count == 0.0f) {
        value = 1.0f;
        count = 1.0f;
      }
      const float v = (value / count) * static_cast<float>(ncall);
      const auto* q = reinterpret_cast<const std::uint8_t*>(&v);
      b.insert(b.end(), q, q + 4);
    }
  }
  put32(s.chunks);
  const std::string d = s.datasets.empty() ? std::string() : s.datasets.back();
  put32(static_cast<std::int32_t>(d.size()));
  b.insert(b.end(), d.begin(), d.end());
  write_bytes(path, b);
}

}  // namespace nibble
