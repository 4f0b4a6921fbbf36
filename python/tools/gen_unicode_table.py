#!/usr/bin/env python3
"""Generates src/unicode_data.cpp: the Unicode general-category classes and the White_Space
property that the tokenizer's pre-tokenizers (src/llm_pretokenize.cpp) split text with, and the
simple lower-case mapping and first code point of the canonical decomposition (NFD) that the
WordPiece (BERT) tokenizer normalises text with.

    python3 python/tools/gen_unicode_table.py [--ucd DIR] [-o src/unicode_data.cpp]

Input: the Unicode Character Database files UnicodeData.txt (general categories) and
PropList.txt (White_Space), by default from Debian's `unicode-data` package (/usr/share/unicode,
Unicode 15.0 on Debian 12). llama.cpp's tables (src/unicode-data.cpp, made by its
scripts/gen-unicode-data.py from the UCD "latest" at the time) are Unicode 15.1, so that the
pre-tokenizers split text exactly as llama.cpp does this script adds the code points that
Unicode 15.1 assigned (listed below, from the 15.1 release notes; nothing else changed category
between 15.0 and 15.1). With a 15.1 UCD directory the additions are already there and checked.

Python's own `unicodedata` (Python 3.11: Unicode 14.0) is not used for the table: it lacks the
4489 code points of Unicode 15.0 and the 627 of 15.1. The script prints how many code points
differ from it, for the record.

Output: kUnicodeRanges, a sorted array of ranges, each entry `first_code_point << 8 | class`, a
range running to the next entry's first code point (the last entry starts at 0x110000); `class`
is in its low three bits a category (see src/llm_unicode.hpp) and in bit 3 the White_Space
property. kUnicodeLower: pairs (code point, simple lower case), sorted. kUnicodeNfd: triples
(first, last, code point): the code points first..last all start their NFD with that code point
(Hangul syllables by the algorithm, others by the canonical decomposition mappings applied
recursively), sorted. Unicode 15.1 changed none of the last two.
"""

import argparse
import os
import re
import sys
import unicodedata

MAX_CP = 0x110000

# Category classes (the same numbers as nibble::detail::UnicodeCategory in src/llm_unicode.hpp).
CAT_UNDEFINED, CAT_NUMBER, CAT_LETTER, CAT_SEPARATOR, CAT_MARK, CAT_PUNCT, CAT_SYMBOL, CAT_OTHER = \
    range(8)
WHITESPACE = 0x08

CATEGORY_CLASS = {
    'Cn': CAT_UNDEFINED,
    'Cc': CAT_OTHER, 'Cf': CAT_OTHER, 'Co': CAT_OTHER, 'Cs': CAT_OTHER,
    'Lu': CAT_LETTER, 'Ll': CAT_LETTER, 'Lt': CAT_LETTER, 'Lm': CAT_LETTER, 'Lo': CAT_LETTER,
    'Mn': CAT_MARK, 'Mc': CAT_MARK, 'Me': CAT_MARK,
    'Nd': CAT_NUMBER, 'Nl': CAT_NUMBER, 'No': CAT_NUMBER,
    'Pc': CAT_PUNCT, 'Pd': CAT_PUNCT, 'Ps': CAT_PUNCT, 'Pe': CAT_PUNCT, 'Pi': CAT_PUNCT,
    'Pf': CAT_PUNCT, 'Po': CAT_PUNCT,
    'Sm': CAT_SYMBOL, 'Sc': CAT_SYMBOL, 'Sk': CAT_SYMBOL, 'So': CAT_SYMBOL,
    'Zs': CAT_SEPARATOR, 'Zl': CAT_SEPARATOR, 'Zp': CAT_SEPARATOR,
}

# Code points assigned by Unicode 15.1 (all other 15.1 changes leave general categories alone):
# CJK Unified Ideographs Extension I, the new Ideographic Description Characters.
UNICODE_15_1_ADDITIONS = [
    (0x2EBF0, 0x2EE5D, 'Lo'),
    (0x2FFC, 0x2FFF, 'So'),
    (0x31EF, 0x31EF, 'So'),
]


def ucd_version(ucd):
    with open(os.path.join(ucd, 'PropList.txt'), encoding='utf-8') as f:
        m = re.match(r'# PropList-(\d+\.\d+\.\d+)\.txt', f.readline())
    if not m:
        sys.exit(f'{ucd}/PropList.txt: no version line')
    return m.group(1)


def read_categories(ucd):
    cats = ['Cn'] * MAX_CP
    first = None
    with open(os.path.join(ucd, 'UnicodeData.txt'), encoding='utf-8') as f:
        for line in f:
            fields = line.rstrip('\n').split(';')
            cp, name, cat = int(fields[0], 16), fields[1], fields[2]
            if name.endswith(', First>'):
                first = cp
                continue
            if name.endswith(', Last>'):
                for c in range(first, cp + 1):
                    cats[c] = cat
                first = None
                continue
            cats[cp] = cat
    return cats


def read_lowercase(ucd):
    lower = {}
    with open(os.path.join(ucd, 'UnicodeData.txt'), encoding='utf-8') as f:
        for line in f:
            fields = line.rstrip('\n').split(';')
            if fields[13]:
                lower[int(fields[0], 16)] = int(fields[13], 16)
    return lower


def read_decompositions(ucd):
    dec = {}
    with open(os.path.join(ucd, 'UnicodeData.txt'), encoding='utf-8') as f:
        for line in f:
            fields = line.split(';')
            if fields[5] and not fields[5].startswith('<'):  # canonical mappings only
                dec[int(fields[0], 16)] = int(fields[5].split()[0], 16)
    return dec


def nfd_first(cp, dec):
    if 0xAC00 <= cp <= 0xD7A3:  # Hangul syllable: its leading consonant
        return 0x1100 + (cp - 0xAC00) // 588
    while cp in dec:
        cp = dec[cp]
    return cp


def read_white_space(ucd):
    ws = set()
    with open(os.path.join(ucd, 'PropList.txt'), encoding='utf-8') as f:
        for line in f:
            line = line.split('#')[0].strip()
            if not line:
                continue
            rng, prop = [x.strip() for x in line.split(';')]
            if prop != 'White_Space':
                continue
            a, _, b = rng.partition('..')
            ws.update(range(int(a, 16), int(b or a, 16) + 1))
    return ws


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--ucd', default='/usr/share/unicode', help='UCD directory (15.0 or 15.1)')
    ap.add_argument('-o', '--output', default=os.path.join(
        os.path.dirname(__file__), '..', '..', 'src', 'unicode_data.cpp'))
    args = ap.parse_args()

    version = ucd_version(args.ucd)
    cats = read_categories(args.ucd)
    if version == '15.0.0':
        for a, b, cat in UNICODE_15_1_ADDITIONS:
            for c in range(a, b + 1):
                assert cats[c] == 'Cn', hex(c)
                cats[c] = cat
    elif version == '15.1.0':
        for a, b, cat in UNICODE_15_1_ADDITIONS:
            assert all(cats[c] == cat for c in range(a, b + 1))
    else:
        sys.exit(f'UCD version {version}: this table must be Unicode 15.1 (as llama.cpp\'s); '
                 'give a 15.0 or 15.1 UCD directory')
    ws = read_white_space(args.ucd)

    # The contraction rules ('s 't 're 've 'm 'll 'd, case-insensitive in the llama3 / qwen2
    # pre-tokenizers) lower-case the following code point with the simple UnicodeData mapping;
    # the code only handles ASCII: check that nothing else lower-cases into those letters.
    lowercase = read_lowercase(args.ucd)
    for cp, lo in lowercase.items():
        if chr(lo) in 'stmdrevl':
            assert cp < 0x80, f'U+{cp:04X} lower-cases to {chr(lo)}'
    dec = read_decompositions(args.ucd)
    nfd = []  # (first, last, nfd)
    for cp in range(MAX_CP):
        n = nfd_first(cp, dec)
        if n == cp:
            continue
        if nfd and nfd[-1][1] == cp - 1 and nfd[-1][2] == n:
            nfd[-1] = (nfd[-1][0], cp, n)
        else:
            nfd.append((cp, cp, n))

    classes = [CATEGORY_CLASS[c] | (WHITESPACE if cp in ws else 0) for cp, c in enumerate(cats)]
    ranges = [(0, classes[0])]
    for cp in range(1, MAX_CP):
        if classes[cp] != ranges[-1][1]:
            ranges.append((cp, classes[cp]))
    ranges.append((MAX_CP, CAT_UNDEFINED))

    py_diff = sum(1 for cp in range(MAX_CP)
                  if CATEGORY_CLASS[unicodedata.category(chr(cp))] != (classes[cp] & 7))
    print(f'UCD {version} (+15.1 additions): {len(ranges)} ranges, {len(ws)} White_Space, '
          f'{len(lowercase)} lower-case mappings, {len(nfd)} NFD ranges; '
          f'Python unicodedata {unicodedata.unidata_version} differs on {py_diff} code points')

    out = []
    out.append('// Generated by python/tools/gen_unicode_table.py from the Unicode Character '
               'Database')
    out.append(f'// {version} + the code points assigned by Unicode 15.1 (= Unicode 15.1): '
               'general-category classes,')
    out.append('// White_Space, simple lower case, first code point of NFD. Do not edit; regenerate.')
    out.append('#include "llm_unicode.hpp"')
    out.append('')
    out.append('namespace nibble::detail {')
    out.append('')
    out.append('// clang-format off')
    out.append('// first_code_point << 8 | class; each range ends where the next one starts.')
    out.append('const std::uint32_t kUnicodeRanges[] = {')
    row = []
    for cp, cl in ranges:
        row.append(f'0x{(cp << 8) | cl:08x},')
        if len(row) == 8:
            out.append('    ' + ' '.join(row))
            row = []
    if row:
        out.append('    ' + ' '.join(row))
    out.append('};')
    out.append('const std::size_t kUnicodeRangeCount = sizeof(kUnicodeRanges) / '
               'sizeof(kUnicodeRanges[0]);')
    out.append('')
    out.append('// code point, its simple lower case')
    out.append('const std::uint32_t kUnicodeLower[][2] = {')
    items = [f'{{0x{a:x}, 0x{b:x}}},' for a, b in sorted(lowercase.items())]
    for i in range(0, len(items), 6):
        out.append('    ' + ' '.join(items[i:i + 6]))
    out.append('};')
    out.append('const std::size_t kUnicodeLowerCount = sizeof(kUnicodeLower) / '
               'sizeof(kUnicodeLower[0]);')
    out.append('')
    out.append('// first, last, the first code point of their NFD')
    out.append('const std::uint32_t kUnicodeNfd[][3] = {')
    items = [f'{{0x{a:x}, 0x{b:x}, 0x{c:x}}},' for a, b, c in nfd]
    for i in range(0, len(items), 4):
        out.append('    ' + ' '.join(items[i:i + 4]))
    out.append('};')
    out.append('const std::size_t kUnicodeNfdCount = sizeof(kUnicodeNfd) / sizeof(kUnicodeNfd[0]);')
    out.append('// clang-format on')
    out.append('')
    out.append('}  // namespace nibble::detail')
    with open(args.output, 'w', encoding='utf-8') as f:
        f.write('\n'.join(out) + '\n')


if __name__ == '__main__':
    main()
