// nibble (internal): the Unicode facts the tokenizer needs -- general-category classes and the
// White_Space property of every code point (Unicode 15.1, the table generated into
// src/unicode_data.cpp by python/tools/gen_unicode_table.py), UTF-8 decoding with llama.cpp's
// treatment of malformed input, and the GPT-2 byte <-> code point mapping of byte-level BPE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nibble::detail {

/// General-category classes (the low three bits of a class byte).
enum UnicodeCategory : std::uint8_t {
  kCatUndefined = 0,  ///< Cn (unassigned), and code points above U+10FFFF
  kCatNumber = 1,     ///< Nd Nl No
  kCatLetter = 2,     ///< Lu Ll Lt Lm Lo
  kCatSeparator = 3,  ///< Zs Zl Zp
  kCatMark = 4,       ///< Mn Mc Me
  kCatPunct = 5,      ///< Pc Pd Ps Pe Pi Pf Po
  kCatSymbol = 6,     ///< Sm Sc Sk So
  kCatOther = 7,      ///< Cc Cf Co Cs
};

/// Bit of a class byte set for the code points with the White_Space property.
constexpr std::uint8_t kUnicodeWhiteSpace = 0x08;

/// The generated table: entries `first_code_point << 8 | class`, sorted; a range ends where the
/// next begins; the last entry starts at 0x110000.
extern const std::uint32_t kUnicodeRanges[];
/// Number of entries of kUnicodeRanges.
extern const std::size_t kUnicodeRangeCount;

/// Simple lower-case mappings: {code point, lower case}, sorted (generated).
extern const std::uint32_t kUnicodeLower[][2];
/// Number of entries of kUnicodeLower.
extern const std::size_t kUnicodeLowerCount;
/// NFD first code points: {first, last, code point}, sorted (generated).
extern const std::uint32_t kUnicodeNfd[][3];
/// Number of entries of kUnicodeNfd.
extern const std::size_t kUnicodeNfdCount;

/// The simple lower case of `cp` (UnicodeData.txt), or cp itself.
std::uint32_t unicode_tolower(std::uint32_t cp);

/// The first code point of the canonical decomposition (NFD) of `cp`, or cp itself.
std::uint32_t unicode_nfd_first(std::uint32_t cp);

/// Class byte of code point `cp` (category | kUnicodeWhiteSpace); code points above U+10FFFF
/// are kCatUndefined.
std::uint8_t unicode_class(std::uint32_t cp);

/// Decodes UTF-8 the way llama.cpp's tokenizer does: a lead byte announcing n bytes followed by
/// n-1 continuation bytes is decoded without further checks (overlong forms, surrogates and
/// values up to 0x1FFFFF pass); any other byte (a stray continuation byte, a truncated sequence,
/// 0xF8..0xFF) becomes U+FFFD and decoding resumes at the next byte. Appends to `out`.
void decode_utf8_lenient(std::string_view s, std::vector<std::uint32_t>& out);

/// Appends the UTF-8 encoding of `cp`; false (nothing appended) when cp > 0x10FFFF.
bool append_utf8(std::string& out, std::uint32_t cp);

/// Length in bytes that a UTF-8 lead byte announces (1 for ASCII and continuation bytes, 2 for
/// 0xC0..0xDF, 3 for 0xE0..0xEF, 4 for 0xF0..0xFF), as llama.cpp's symbol splitting uses it.
inline std::size_t utf8_len_from_lead(unsigned char c) {
  static constexpr unsigned char kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

/// GPT-2 byte-level encoding: the UTF-8 text of the code point that stands for byte `b`.
const std::string& byte_to_unicode(std::uint8_t b);

/// Inverse of byte_to_unicode on code points: the byte for `cp`, or -1 when cp stands for none.
int unicode_to_byte(std::uint32_t cp);

}  // namespace nibble::detail
