"""Independent NumPy decoders of the block formats, written from the layouts in
tests/data/MANIFEST.md (GGUF) and bitsandbytes' NF4 definition. Every operation is float32 in the
reference order (two products, then the subtract), so results are bit-comparable."""

import numpy as np

F = np.float32

# bitsandbytes' NF4 code book.
NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                0.7229568362236023, 1.0], dtype=np.float32)


def _f16(b, lo):
    return b[:, lo:lo + 2].copy().view(np.float16).astype(np.float32).reshape(-1, 1)


def dequant_q8_0(blocks):
    b = np.asarray(blocks, dtype=np.uint8).reshape(-1, 34)
    d = _f16(b, 0)
    qs = b[:, 2:].view(np.int8).astype(np.float32)
    return (qs * d).reshape(-1)


def _k_scales(sc12):
    s = sc12.astype(np.int32)
    sc = np.empty((s.shape[0], 8), np.int32)
    m = np.empty((s.shape[0], 8), np.int32)
    for j in range(4):
        sc[:, j] = s[:, j] & 63
        m[:, j] = s[:, j + 4] & 63
    for j in range(4, 8):
        sc[:, j] = (s[:, j + 4] & 0x0F) | ((s[:, j - 4] >> 6) << 4)
        m[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return sc.astype(np.float32), m.astype(np.float32)


def _k_dequant(q, d, dmin, sc, m):
    # q: (nb, 256) codes; sub-block j = values 32j .. 32j+31
    out = np.empty(q.shape, np.float32)
    for j in range(8):
        a = (d[:, 0] * sc[:, j]).astype(F)
        c = (dmin[:, 0] * m[:, j]).astype(F)
        out[:, 32 * j:32 * j + 32] = (a[:, None] * q[:, 32 * j:32 * j + 32]).astype(F) - c[:, None]
    return out


def dequant_q4_K(blocks):
    b = np.asarray(blocks, dtype=np.uint8).reshape(-1, 144)
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, m = _k_scales(b[:, 4:16])
    qs = b[:, 16:144]
    q = np.empty((b.shape[0], 256), np.float32)
    for g in range(4):
        q[:, 64 * g:64 * g + 32] = qs[:, 32 * g:32 * g + 32] & 0x0F
        q[:, 64 * g + 32:64 * g + 64] = qs[:, 32 * g:32 * g + 32] >> 4
    return _k_dequant(q, d, dmin, sc, m).reshape(-1)


def dequant_q5_K(blocks):
    b = np.asarray(blocks, dtype=np.uint8).reshape(-1, 176)
    d, dmin = _f16(b, 0), _f16(b, 2)
    sc, m = _k_scales(b[:, 4:16])
    qh = b[:, 16:48].astype(np.int32)
    qs = b[:, 48:176].astype(np.int32)
    q = np.empty((b.shape[0], 256), np.float32)
    for g in range(4):
        q[:, 64 * g:64 * g + 32] = (qs[:, 32 * g:32 * g + 32] & 0x0F) + 16 * ((qh >> (2 * g)) & 1)
        q[:, 64 * g + 32:64 * g + 64] = (qs[:, 32 * g:32 * g + 32] >> 4) + 16 * ((qh >> (2 * g + 1)) & 1)
    return _k_dequant(q, d, dmin, sc, m).reshape(-1)


def dequant_q6_K(blocks):
    b = np.asarray(blocks, dtype=np.uint8).reshape(-1, 210)
    ql = b[:, 0:128].astype(np.int32)
    qh = b[:, 128:192].astype(np.int32)
    scales = b[:, 192:208].view(np.int8).astype(np.float32)
    d = _f16(b, 208)
    q = np.empty((b.shape[0], 256), np.int32)
    for h in range(2):
        hb = qh[:, 32 * h:32 * h + 32]
        lo = ql[:, 64 * h:64 * h + 32]
        hi = ql[:, 64 * h + 32:64 * h + 64]
        q[:, 128 * h:128 * h + 32] = (lo & 0x0F) | ((hb & 3) << 4)
        q[:, 128 * h + 32:128 * h + 64] = (hi & 0x0F) | (((hb >> 2) & 3) << 4)
        q[:, 128 * h + 64:128 * h + 96] = (lo >> 4) | (((hb >> 4) & 3) << 4)
        q[:, 128 * h + 96:128 * h + 128] = (hi >> 4) | (((hb >> 6) & 3) << 4)
    s = (d * scales).astype(F)  # (nb, 16)
    return (np.repeat(s, 16, axis=1) * (q - 32).astype(np.float32)).astype(F).reshape(-1)


def dequant_q8_K(blocks):
    b = np.asarray(blocks, dtype=np.uint8).reshape(-1, 292)
    d = b[:, 0:4].copy().view(np.float32)
    qs = b[:, 4:260].view(np.int8).astype(np.float32)
    return (d * qs).astype(F).reshape(-1)


def dequant_f16(blocks):
    return np.asarray(blocks, dtype=np.uint8).reshape(-1).view(np.float16).astype(np.float32)


def dequant_nf4_rows(blocks):
    """nibble's row-block NF4 (fp32 absmax, 32 bytes, element 2i in the high nibble)."""
    b = np.asarray(blocks, dtype=np.uint8).reshape(-1, 36)
    absmax = b[:, 0:4].copy().view(np.float32)
    qs = b[:, 4:36]
    codes = np.empty((b.shape[0], 64), np.int64)
    codes[:, 0::2] = qs >> 4
    codes[:, 1::2] = qs & 0x0F
    return (NF4[codes] * absmax).astype(F).reshape(-1)


def unpack_nibbles(packed, n):
    """bitsandbytes packing: element 2i in the high nibble of byte i."""
    p = np.asarray(packed, dtype=np.uint8)
    codes = np.empty(2 * p.size, np.int64)
    codes[0::2] = p >> 4
    codes[1::2] = p & 0x0F
    return codes[:n]


DEQUANT = {
    "q8_0": dequant_q8_0,
    "q4_K": dequant_q4_K,
    "q5_K": dequant_q5_K,
    "q6_K": dequant_q6_K,
    "q8_K": dequant_q8_K,
    "f16": dequant_f16,
    "f32": lambda b: np.asarray(b, dtype=np.uint8).reshape(-1).view(np.float32),
    "nf4": dequant_nf4_rows,
}
