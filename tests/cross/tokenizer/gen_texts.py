#!/usr/bin/env python3
"""Random texts for the tokenizer cross-check (tests/cross/tokenizer/run.sh).

    gen_texts.py VOCAB.gguf COUNT SEED OUT.bin

Writes COUNT texts to OUT.bin, each as a little-endian uint32 byte count and the bytes. The texts
mix pieces of the vocabulary's own tokens (so that long merges happen), ASCII words, digits,
punctuation and white-space runs, contractions in both cases, many scripts (Latin, Greek,
Cyrillic, Arabic, Devanagari, Thai, CJK, Hangul, emoji with joiners, combining marks), non-ASCII
white space, code points new in Unicode 15.0 / 15.1, unassigned and private-use code points, and
malformed UTF-8 (stray continuation bytes, truncated sequences, overlong forms, encoded
surrogates, 0xF5..0xFF, 4-byte forms above U+10FFFF).
"""

import random
import struct
import sys

GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_tokens(path):
    """tokenizer.ggml.tokens and .model of a GGUF file (a minimal reader)."""
    data = open(path, 'rb').read()
    pos = 0

    def take(n):
        nonlocal pos
        pos += n
        return data[pos - n:pos]

    def u32():
        return struct.unpack('<I', take(4))[0]

    def u64():
        return struct.unpack('<Q', take(8))[0]

    def string():
        return take(u64())

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = u32(), u64()
            return [value(et) for _ in range(n)]
        return take(GGUF_SCALAR[t])

    assert take(4) == b'GGUF'
    u32()
    u64()
    nkv = u64()
    out = {}
    for _ in range(nkv):
        key = string().decode()
        t = u32()
        if key in ('tokenizer.ggml.tokens', 'tokenizer.ggml.model'):
            out[key] = value(t)
        else:
            value(t)
    return out['tokenizer.ggml.tokens'], out.get('tokenizer.ggml.model', b'').decode()


def bytes_to_unicode():
    bs = list(range(0x21, 0x7f)) + list(range(0xa1, 0xad)) + list(range(0xae, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


SCRIPTS = [
    (0x41, 0x5a), (0x61, 0x7a), (0xc0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x530, 0x58f),
    (0x5d0, 0x5ea), (0x600, 0x6ff), (0x900, 0x97f), (0xe00, 0xe7f), (0x10a0, 0x10ff),
    (0x1100, 0x11ff), (0x13a0, 0x13ff), (0x1e00, 0x1fff), (0x2000, 0x206f), (0x2100, 0x214f),
    (0x2190, 0x23ff), (0x2c00, 0x2cff), (0x3000, 0x303f), (0x3040, 0x30ff), (0x3400, 0x4dbf),
    (0x4e00, 0x9fff), (0xa640, 0xa6ff), (0xac00, 0xd7a3), (0xf900, 0xfaff), (0xfb00, 0xfb4f),
    (0xff00, 0xffef), (0x10400, 0x1044f), (0x1d400, 0x1d7ff), (0x1f300, 0x1faff),
    (0x1e900, 0x1e95f), (0x20000, 0x2a6df),
    # new in Unicode 15.0 / 15.1 (Python 3.11's unicodedata is 14.0)
    (0x11f00, 0x11f59), (0x1e030, 0x1e08f), (0x2ebf0, 0x2ee5d), (0x2ffc, 0x2fff), (0x31ef, 0x31ef),
    # combining marks, unassigned, private use
    (0x300, 0x36f), (0x1ab0, 0x1aff), (0x0378, 0x0379), (0xe000, 0xe0ff), (0x10ffff, 0x10ffff),
]
SPACES = [' ', ' ', ' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', '\r', '\v', '\f', '\x1c', '\x85',
          '\xa0', '\u1680', '\u2000', '\u2009', '\u200a', '\u2028', '\u2029', '\u202f', '\u205f',
          '\u3000', '\u180e', '\u200b', '\ufeff']
PUNCT = list('!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~') + ['…', '。', '，', '、', '।', '۔', '،', '‘',
                                                     '”', '！', '？', '：', '—', '«', '»', '¿']
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M",
                "'LL", "'D", "'x", "'"]
WORDS = ['the', 'Hello', 'world', 'don', 'tokenizer', 'llama', 'ÄÖÜ', 'naïve', 'café', 'über',
         'Москва', 'Ελλάδα', '東京', '서울', 'नमस्ते', 'สวัสดี', 'مرحبا', 'שלום', '🦙', '👩‍👩‍👧',
         '😶‍🌫️', 'ﬁ', 'Ⅻ', '½', '²', '٣', '१२३', '0x1F', '3.14159', '1,000,000',
         # special-token texts (not parsed as such: parse_special = false)
         '<|endoftext|>', '<s>', '</s>', '<unk>', '<|assistant|>', '<|end|>', '<|user|>']
BAD_UTF8 = [b'\x80', b'\xbf', b'\xc3', b'\xe2\x82', b'\xf0\x9f\x98', b'\xc0\xaf', b'\xe0\x80\xaf',
            b'\xed\xa0\x80', b'\xf5\x80\x80\x80', b'\xf8\x88\x80\x80\x80', b'\xff', b'\xfe',
            b'\xf4\x90\x80\x80', b'\xf7\xbf\xbf\xbf', b'\xc1\xbf', b'\xe2\x28\xa1']


def rand_cp(rng):
    a, b = rng.choice(SCRIPTS)
    return chr(rng.randint(a, b))


def make_text(rng, pieces, allow_bad):
    out = []
    for _ in range(rng.choice([1, 2, 4, 8, 16, 32, 64])):
        r = rng.random()
        if r < 0.30 and pieces:
            s = rng.choice(pieces)
        elif r < 0.45:
            s = rng.choice(SPACES)
        elif r < 0.55:
            s = ''.join(rng.choice(PUNCT) for _ in range(rng.randint(1, 3)))
        elif r < 0.62:
            s = rng.choice(CONTRACTIONS)
        elif r < 0.70:
            s = str(rng.randint(0, 10 ** rng.randint(1, 12)))
        elif r < 0.80:
            s = rng.choice(WORDS)
        elif r < 0.93:
            s = ''.join(rand_cp(rng) for _ in range(rng.randint(1, 6)))
        else:
            s = ''.join(chr(rng.randint(1, 0x7f)) for _ in range(rng.randint(1, 4)))
        out.append(s.encode('utf-8', 'surrogatepass'))
        if allow_bad and rng.random() < 0.03:
            out.append(rng.choice(BAD_UTF8))
    return b''.join(out)


def main():
    vocab, count, seed, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    tokens, model = read_tokens(vocab)
    rng = random.Random(seed)
    b2u = bytes_to_unicode()
    pieces = []
    for t in tokens:
        try:
            s = t.decode('utf-8')
        except UnicodeDecodeError:
            continue
        if model == 'gpt2' and all(c in b2u for c in s):
            try:
                s = bytes(b2u[c] for c in s).decode('utf-8')
            except UnicodeDecodeError:
                continue
        s = s.replace('\u2581', ' ')
        if s:
            pieces.append(s)
    with open(path, 'wb') as f:
        for i in range(count):
            # a quarter of the texts with malformed UTF-8; a few long ones
            text = make_text(rng, pieces, allow_bad=i % 4 == 3)
            if i % 97 == 0:
                text = b''.join(make_text(rng, pieces, False) for _ in range(40))
            f.write(struct.pack('<I', len(text)) + text)


if __name__ == '__main__':
    main()
