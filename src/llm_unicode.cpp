// nibble (internal): Unicode class lookup, lenient UTF-8 decoding, GPT-2 byte mapping.
#include "llm_unicode.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace nibble::detail {

namespace {

constexpr std::uint32_t kMaxCodePoint = 0x110000;
constexpr std::uint32_t kBlockBits = 8;  // 256 code points per block
constexpr std::uint32_t kBlocks = kMaxCodePoint >> kBlockBits;

// Two-stage lookup built once from the range list: block number -> index of a 256-byte block
// of class bytes (identical blocks are stored once: a few hundred of them).
struct ClassTable {
  std::array<std::uint16_t, kBlocks> index{};
  std::vector<std::uint8_t> blocks;

  ClassTable() {
    std::string block(1u << kBlockBits, '\0');
    std::unordered_map<std::string, std::uint16_t> seen;
    std::size_t r = 0;
    for (std::uint32_t b = 0; b < kBlocks; ++b) {
      for (std::uint32_t i = 0; i < block.size(); ++i) {
        const std::uint32_t cp = (b << kBlockBits) | i;
        while (r + 1 < kUnicodeRangeCount && (kUnicodeRanges[r + 1] >> 8) <= cp) ++r;
        block[i] = static_cast<char>(kUnicodeRanges[r] & 0xff);
      }
      const auto ins = seen.emplace(block, static_cast<std::uint16_t>(seen.size()));
      if (ins.second) blocks.insert(blocks.end(), block.begin(), block.end());
      index[b] = ins.first->second;
    }
  }
};

const ClassTable& class_table() {
  static const ClassTable t;
  return t;
}

struct ByteMap {
  std::array<std::string, 256> to_utf8;
  std::array<std::int16_t, 512> from_cp{};  // code points 0..511 -> byte or -1

  ByteMap() {
    from_cp.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
      const std::uint32_t cp = printable ? static_cast<std::uint32_t>(b) : 256u + n++;
      append_utf8(to_utf8[b], cp);
      from_cp[cp] = static_cast<std::int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

std::uint8_t unicode_class(std::uint32_t cp) {
  if (cp >= kMaxCodePoint) return kCatUndefined;
  const ClassTable& t = class_table();
  return t.blocks[(static_cast<std::size_t>(t.index[cp >> kBlockBits]) << kBlockBits) |
                  (cp & ((1u << kBlockBits) - 1))];
}

void decode_utf8_lenient(std::string_view s, std::vector<std::uint32_t>& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  auto cont = [&](std::size_t k) { return (p[k] & 0xc0) == 0x80; };
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      out.push_back(c);
      i += 1;
    } else if (c < 0xc0) {
      out.push_back(0xfffd);  // continuation byte without a lead
      i += 1;
    } else if (c < 0xe0) {
      if (i + 1 < n && cont(i + 1)) {
        out.push_back(((c & 0x1fu) << 6) | (p[i + 1] & 0x3fu));
        i += 2;
      } else {
        out.push_back(0xfffd);
        i += 1;
      }
    } else if (c < 0xf0) {
      if (i + 2 < n && cont(i + 1) && cont(i + 2)) {
        out.push_back(((c & 0x0fu) << 12) | ((p[i + 1] & 0x3fu) << 6) | (p[i + 2] & 0x3fu));
        i += 3;
      } else {
        out.push_back(0xfffd);
        i += 1;
      }
    } else if (c < 0xf8) {
      if (i + 3 < n && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
        out.push_back(((c & 0x07u) << 18) | ((p[i + 1] & 0x3fu) << 12) | ((p[i + 2] & 0x3fu) << 6) |
                      (p[i + 3] & 0x3fu));
        i += 4;
      } else {
        out.push_back(0xfffd);
        i += 1;
      }
    } else {
      out.push_back(0xfffd);
      i += 1;
    }
  }
}

bool append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < kMaxCodePoint) {
    out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    return false;
  }
  return true;
}

std::uint32_t unicode_tolower(std::uint32_t cp) {
  const auto* end = kUnicodeLower + kUnicodeLowerCount;
  const auto* it = std::lower_bound(
      kUnicodeLower, end, cp, [](const std::uint32_t(&e)[2], std::uint32_t c) { return e[0] < c; });
  return it != end && (*it)[0] == cp ? (*it)[1] : cp;
}

std::uint32_t unicode_nfd_first(std::uint32_t cp) {
  const auto* end = kUnicodeNfd + kUnicodeNfdCount;
  const auto* it = std::upper_bound(
      kUnicodeNfd, end, cp, [](std::uint32_t c, const std::uint32_t(&e)[3]) { return c < e[0]; });
  if (it == kUnicodeNfd) return cp;
  --it;
  return cp <= (*it)[1] ? (*it)[2] : cp;
}

const std::string& byte_to_unicode(std::uint8_t b) {
  return byte_map().to_utf8[b];
}

int unicode_to_byte(std::uint32_t cp) {
  return cp < 512 ? byte_map().from_cp[cp] : -1;
}

}  // namespace nibble::detail
