// nibble: pack_gguf / unpack_gguf (nibble/io/packed_gguf.hpp): a GGUF file with its packable
// tensors in the packed layout, and back.
//
// The input is mapped; the output is the input's bytes in file order with the converted tensors'
// type ids patched in the header and their data replaced by pack() / unpack() of it, converted in
// chunks of whole 16-row groups into two buffers: one is being written (a background write) while
// the next is converted.
#include "nibble/io/packed_gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <vector>

#include "nibble/packed.hpp"

namespace nibble {
namespace {

using detail::fail;
using Clock = std::chrono::steady_clock;

bool format_of_type(std::uint32_t type, Format* out) {
  for (int k = 0; k <= static_cast<int>(kLastFormat); ++k) {
    const Format f = static_cast<Format>(k);
    if (traits(f).gguf_type >= 0 && static_cast<std::uint32_t>(traits(f).gguf_type) == type) {
      *out = f;
      return true;
    }
  }
  return false;
}

// Strips the "nibble: " prefix of an Error message (to wrap it in another one).
const char* bare(const Error& e) {
  const char* m = e.what();
  return std::strncmp(m, "nibble: ", 8) == 0 ? m + 8 : m;
}

// The input file, mapped read-only.
class Input {
 public:
  Input(const std::string& path, const char* fn) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(fn, ": cannot open \"", path, "\": ", std::strerror(errno));
    struct stat st;
    if (fstat(fd_, &st) != 0) fail(fn, ": cannot stat \"", path, "\": ", std::strerror(errno));
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* a = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (a == MAP_FAILED) fail(fn, ": cannot map \"", path, "\": ", std::strerror(errno));
      addr_ = a;
#if defined(MADV_SEQUENTIAL)
      madvise(a, size_, MADV_SEQUENTIAL);
#endif
    }
    static const std::uint8_t empty = 0;
    try {
      file = gguf::File::parse(addr_ ? addr_ : &empty, size_);
    } catch (const Error& e) {
      fail(fn, ": \"", path, "\": ", bare(e));
    }
  }
  ~Input() {
    if (addr_) munmap(addr_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  const std::uint8_t* bytes() const {
    return static_cast<const std::uint8_t*>(addr_);
  }
  std::size_t size() const {
    return size_;
  }
  gguf::File file;

 private:
  int fd_ = -1;
  void* addr_ = nullptr;
  std::size_t size_ = 0;
};

// The output: `path`.tmp, written in order by a background write of the last queued range,
// renamed to `path` by finish(); removed if destroyed before.
class Output {
 public:
  Output(const std::string& path, const char* fn) : path_(path), tmp_(path + ".tmp"), fn_(fn) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) fail(fn_, ": cannot create \"", tmp_, "\": ", std::strerror(errno));
  }
  ~Output() {
    if (pending_.valid()) {
      try {
        pending_.get();
      } catch (...) {
      }
    }
    if (fd_ >= 0) {
      ::close(fd_);
      std::remove(tmp_.c_str());
    }
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  // Queues n bytes at p after everything queued before. The bytes must stay unchanged until the
  // next put() or finish() returns (that call waits for this write).
  void put(const void* p, std::size_t n) {
    wait();
    if (n == 0) return;
    pending_ = std::async(std::launch::async, [this, p, n] { write_all(p, n); });
  }
  // Waits for the queued write, closes and renames.
  void finish() {
    wait();
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      const int e = errno;
      std::remove(tmp_.c_str());
      fail(fn_, ": closing \"", tmp_, "\" failed: ", std::strerror(e));
    }
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int e = errno;
      std::remove(tmp_.c_str());
      fail(fn_, ": cannot rename \"", tmp_, "\" to \"", path_, "\": ", std::strerror(e));
    }
  }

 private:
  void wait() {
    if (pending_.valid()) pending_.get();
  }
  void write_all(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    while (n > 0) {
      const ssize_t w = ::write(fd_, b, std::min<std::size_t>(n, std::size_t{1} << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail(fn_, ": writing \"", tmp_, "\" failed: ", std::strerror(errno));
      b += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  std::string path_, tmp_;
  const char* fn_;
  int fd_ = -1;
  std::future<void> pending_;
};

// One tensor of the input, in data order.
struct Item {
  std::size_t index = 0;    // in the file's tensor list
  std::uint64_t begin = 0;  // absolute byte range of its data
  std::uint64_t end = 0;
  bool convert = false;         // packed / unpacked here
  Format format = Format::f32;  // its (base) format when converted
  std::uint32_t out_type = 0;   // its type id in the output
};

PackGgufSummary convert_file(const std::string& in_path, const std::string& out_path,
                             const Context& ctx, const PackGgufCallback& progress,
                             std::size_t chunk_bytes, bool to_packed) {
  const auto t0 = Clock::now();
  const char* fn = to_packed ? "pack_gguf" : "unpack_gguf";
  const Input in(in_path, fn);
  const gguf::File& file = in.file;
  const std::uint8_t* base = in.bytes();

  // Which tensors change, and their byte ranges in data order.
  std::vector<Item> items;
  PackGgufSummary sum;
  sum.file_bytes = in.size();
  for (std::size_t i = 0; i < file.tensors.size(); ++i) {
    const gguf::TensorInfo& t = file.tensors[i];
    Item it;
    it.index = i;
    it.begin = static_cast<std::uint64_t>(t.data - base);
    it.end = it.begin + t.nbytes;
    it.out_type = t.type;
    if (to_packed ? pack_gguf_selects(t) : t.packed()) {
      it.convert = true;
      it.out_type = to_packed ? gguf::packed_type(t.type) : gguf::base_type(t.type);
      const bool ok = format_of_type(gguf::base_type(t.type), &it.format);
      if (!ok || !packable(it.format))  // the reader accepts packed types of packable formats only
        fail(fn, ": tensor \"", t.name, "\": type ", t.type, " is not packable");
    }
    sum.tensor_bytes += t.nbytes;
    items.push_back(it);
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.begin < b.begin; });
  // A converted tensor must not share bytes with another one (its bytes change).
  const Item* reach = nullptr;  // the item reaching furthest so far
  for (const Item& it : items) {
    if (it.begin == it.end) continue;
    if (reach && it.begin < reach->end && (it.convert || reach->convert)) {
      fail(fn, ": tensors \"", file.tensors[reach->index].name, "\" and \"",
           file.tensors[it.index].name, "\" share bytes; cannot convert \"",
           file.tensors[(it.convert ? it : *reach).index].name, "\"");
    }
    if (!reach || it.end > reach->end) reach = &it;
  }

  // The header with the new type ids.
  const std::size_t head =
      static_cast<std::size_t>(std::min<std::uint64_t>(file.data_offset, in.size()));
  std::vector<std::uint8_t> header(base, base + head);
  for (const Item& it : items) {
    if (!it.convert) continue;
    const std::uint64_t at = file.tensors[it.index].type_at;
    if (at + 4 > head) fail(fn, ": internal error: type id outside the header");
    std::memcpy(header.data() + at, &it.out_type, 4);  // little-endian host, as the reader
  }

  std::vector<std::uint8_t> buf[2];  // before `out`: its destructor may wait on a write of them
  Output out(out_path, fn);
  out.put(header.data(), header.size());
  int next_buf = 0;
  std::uint64_t pos = head;   // input bytes up to here are queued
  std::uint64_t plain = pos;  // start of the verbatim range not queued yet ([plain, pos))
  std::uint64_t done = 0;
  std::size_t n_done = 0;
  auto flush_plain = [&] {
    if (pos > plain) out.put(base + plain, static_cast<std::size_t>(pos - plain));
    plain = pos;
  };
  for (const Item& it : items) {
    const gguf::TensorInfo& t = file.tensors[it.index];
    if (!it.convert) {
      pos = std::max(pos, it.end);  // gap and tensor verbatim
      ++sum.copied;
    } else {
      pos = it.begin;  // the gap before it verbatim
      flush_plain();
      const std::int64_t rows = t.rows(), cols = t.shape[0];
      const std::size_t rb = row_bytes(it.format, cols);
      const std::int64_t chunk_rows = std::max<std::int64_t>(
          kPackedGroupRows, static_cast<std::int64_t>(chunk_bytes / std::max<std::size_t>(rb, 1)) /
                                kPackedGroupRows * kPackedGroupRows);
      for (std::int64_t r = 0; r < rows;) {
        std::int64_t n = std::min(chunk_rows, rows - r);
        if (rows - r - n < kPackedGroupRows) n = rows - r;  // the last chunk takes the tail
        std::vector<std::uint8_t>& b = buf[next_buf];
        next_buf ^= 1;
        b.resize(static_cast<std::size_t>(n) * rb);
        const std::uint8_t* src = t.data + static_cast<std::size_t>(r) * rb;
        if (to_packed) {
          pack(ctx, it.format, src, n, cols, b.data());
        } else {
          unpack(ctx, it.format, src, n, cols, b.data());
        }
        out.put(b.data(), b.size());
        r += n;
      }
      pos = plain = it.end;
      ++sum.converted;
      sum.converted_bytes += t.nbytes;
    }
    done += t.nbytes;
    if (progress) {
      PackGgufProgress p;
      p.index = ++n_done;
      p.count = items.size();
      p.name = t.name;
      p.type = it.out_type;
      p.converted = it.convert;
      p.bytes_done = done;
      p.bytes_total = sum.tensor_bytes;
      p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      progress(p);
    }
  }
  pos = std::max<std::uint64_t>(pos, in.size());  // the rest of the file verbatim
  flush_plain();
  out.finish();
  sum.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return sum;
}

}  // namespace

bool pack_gguf_selects(const gguf::TensorInfo& t) {
  if (t.packed() || t.shape.empty()) return false;
  Format f;
  if (!format_of_type(t.type, &f) || !packable(f)) return false;
  if (t.rows() < kPackedGroupRows) return false;
  std::size_t dims = t.shape.size();
  while (dims > 2 && t.shape[dims - 1] == 1) --dims;
  return dims <= 2 || t.shape[1] % kPackedGroupRows == 0;
}

PackGgufSummary pack_gguf(const std::string& in_path, const std::string& out_path,
                          const Context& ctx, const PackGgufCallback& progress,
                          std::size_t chunk_bytes) {
  return convert_file(in_path, out_path, ctx, progress, chunk_bytes, true);
}

PackGgufSummary unpack_gguf(const std::string& in_path, const std::string& out_path,
                            const Context& ctx, const PackGgufCallback& progress,
                            std::size_t chunk_bytes) {
  return convert_file(in_path, out_path, ctx, progress, chunk_bytes, false);
}

}  // namespace nibble
