#!/usr/bin/env python3
"""Writes a variant of a vocab-only GGUF file (no tensors) with some tokenizer metadata changed.

    derive_vocab.py IN.gguf OUT.gguf [--pre NAME | --no-pre] [--bool KEY=0|1]...
                    [--token-type ID=TYPE]... [--name NAME]

--pre sets tokenizer.ggml.pre (added if absent), --no-pre removes it; --bool sets a boolean key
(added if absent); --token-type changes entries of tokenizer.ggml.token_type (1 normal, 2 unknown,
3 control, 4 user-defined, 5 unused, 6 byte); --name sets general.name. The other keys are copied
byte for byte. test_tokenizer.cpp applies the same changes to the parsed file in memory, so the
ids llama.cpp gives on OUT.gguf are the expected ids of that variant.
"""

import argparse
import struct

SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def parse(data):
    pos = 0

    def take(n):
        nonlocal pos
        pos += n
        return data[pos - n:pos]

    def skip_value(t):
        if t == 8:
            take(struct.unpack('<Q', take(8))[0])
        elif t == 9:
            et, n = struct.unpack('<IQ', take(12))
            if et in SCALAR:
                take(SCALAR[et] * n)
            else:
                for _ in range(n):
                    skip_value(et)
        else:
            take(SCALAR[t])

    magic, version, n_tensors, n_kv = struct.unpack('<4sIQQ', take(24))
    assert magic == b'GGUF' and version == 3, 'GGUF v3 expected'
    assert n_tensors == 0, 'a vocab-only file (no tensors) expected'
    kvs = []
    for _ in range(n_kv):
        klen = struct.unpack('<Q', take(8))[0]
        key = take(klen).decode()
        t = struct.unpack('<I', take(4))[0]
        start = pos
        skip_value(t)
        kvs.append([key, t, data[start:pos]])
    return kvs


def gguf_string(s):
    b = s.encode()
    return struct.pack('<Q', len(b)) + b


def set_kv(kvs, key, t, raw):
    for kv in kvs:
        if kv[0] == key:
            kv[1], kv[2] = t, raw
            return
    kvs.append([key, t, raw])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('src')
    ap.add_argument('dst')
    ap.add_argument('--pre')
    ap.add_argument('--no-pre', action='store_true')
    ap.add_argument('--bool', action='append', default=[])
    ap.add_argument('--token-type', action='append', default=[])
    ap.add_argument('--name')
    a = ap.parse_args()
    kvs = parse(open(a.src, 'rb').read())
    if a.pre is not None:
        set_kv(kvs, 'tokenizer.ggml.pre', 8, gguf_string(a.pre))
    if a.no_pre:
        kvs = [kv for kv in kvs if kv[0] != 'tokenizer.ggml.pre']
    if a.name is not None:
        set_kv(kvs, 'general.name', 8, gguf_string(a.name))
    for b in a.bool:
        key, v = b.split('=')
        set_kv(kvs, key, 7, bytes([int(v)]))
    if a.token_type:
        kv = next(kv for kv in kvs if kv[0] == 'tokenizer.ggml.token_type')
        et, n = struct.unpack('<IQ', kv[2][:12])
        assert et == 5
        types = list(struct.unpack(f'<{n}i', kv[2][12:]))
        for tt in a.token_type:
            i, v = tt.split('=')
            types[int(i)] = int(v)
        kv[2] = kv[2][:12] + struct.pack(f'<{n}i', *types)
    out = struct.pack('<4sIQQ', b'GGUF', 3, 0, len(kvs))
    for key, t, raw in kvs:
        out += gguf_string(key) + struct.pack('<I', t) + raw
    out += b'\0' * (-len(out) % 32)
    open(a.dst, 'wb').write(out)


if __name__ == '__main__':
    main()
