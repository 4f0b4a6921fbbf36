"""Packed weights: nibble.pack / unpack (lossless, byte positions of the layout), gemv / gemm with
packed=True against the plain layout, errors, the GIL, and packed GGUF files (gguf.pack_file)."""

import os
import threading
import time

import numpy as np
import pytest

import nibble
from conftest import DATA

PACKABLE = ["q8_0", "q4_K", "q5_K", "q6_K", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K", "q3_K",
            "iq4_nl", "iq4_xs", "mxfp4", "nf4", "fp4", "f16", "bf16"]


def blocks_of(fmt, rows, cols, seed=1):
    rng = np.random.default_rng(seed)
    return nibble.quantize((rng.standard_normal((rows, cols)) * 0.02).astype(np.float32), fmt)


def test_packable():
    for f in PACKABLE:
        assert nibble.packable(f)
    for f in ["f32", "q8_K", "q8_1"]:
        assert not nibble.packable(f)


@pytest.mark.parametrize("fmt", PACKABLE)
@pytest.mark.parametrize("rows", [1, 16, 37])
def test_round_trip(fmt, rows):
    W = blocks_of(fmt, rows, 512)
    P = nibble.pack(W, fmt, threads=2)
    assert P.shape == W.shape and P.dtype == np.uint8
    assert np.array_equal(nibble.unpack(P, fmt), W)
    if rows >= 16:
        assert not np.array_equal(P, W)
    assert np.array_equal(P[32:], W[32:])  # rows after the last full group stay plain
    # a flat array with cols
    flat = nibble.pack(W.reshape(-1), fmt, cols=512)
    assert flat.shape == (W.size,) and np.array_equal(flat, P.reshape(-1))
    assert np.array_equal(nibble.unpack(flat, fmt, cols=512), W.reshape(-1))


@pytest.mark.parametrize("fmt", ["q4_K", "q3_K", "nf4"])
def test_in_place(fmt):
    W = blocks_of(fmt, 37, 512)
    P = nibble.pack(W, fmt)
    B = W.copy()
    out = nibble.pack(B, fmt, threads=2, inplace=True)
    assert out is B and np.array_equal(B, P)
    assert nibble.unpack(B, fmt, inplace=True) is B and np.array_equal(B, W)
    flat = W.reshape(-1).copy()
    nibble.pack(flat, fmt, cols=512, inplace=True)
    assert np.array_equal(flat, P.reshape(-1))
    # what cannot be rewritten in place is refused, and left as it was
    ro = W.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        nibble.pack(ro, fmt, inplace=True)
    strided = np.zeros((W.shape[0], 2 * W.shape[1]), np.uint8)[:, ::2]
    strided[:] = W
    with pytest.raises(ValueError, match="C-contiguous"):
        nibble.pack(strided, fmt, inplace=True)
    assert np.array_equal(strided, W)
    with pytest.raises(ValueError, match="numpy array"):
        nibble.pack(W.tolist(), fmt, inplace=True)
    with pytest.raises(ValueError, match="dtype"):
        nibble.pack(W.astype(np.int16), fmt, inplace=True)


def test_q4_K_byte_positions():
    # q4_K: the whole 144-byte block in 4-byte units; unit u of row i of a group at
    # (16 u + i) * 4 within the group's block b (16 * 144 bytes per block column).
    rows, nb = 16, 2
    W = np.random.default_rng(3).integers(0, 256, (rows, nb * 144), dtype=np.uint8)
    P = nibble.pack(W, "q4_K").reshape(-1)
    for b in range(nb):
        for i in range(rows):
            for u in range(36):
                got = P[b * 16 * 144 + (16 * u + i) * 4:][:4]
                assert np.array_equal(got, W[i, b * 144 + 4 * u:][:4]), (b, i, u)


@pytest.mark.parametrize("fmt", PACKABLE)
def test_products_match_plain(fmt):
    rows, cols = 50, 768
    W = blocks_of(fmt, rows, cols, seed=2)
    P = nibble.pack(W, fmt)
    X = np.random.default_rng(4).standard_normal((3, cols)).astype(np.float32)
    y = nibble.gemv(W, fmt, X[0])
    yp = nibble.gemv(P, fmt, X[0], packed=True)
    assert yp.shape == (rows,) and yp.dtype == np.float32
    # NF4 / FP4 GEMV on x86: both layouts round the activations to int16, each its own way
    # (per block of 64 on the packed layout, per 256 on the plain one): ~1e-4 of sum |w x|
    tol = 2e-3 if fmt in ("nf4", "fp4") else 1e-4
    np.testing.assert_allclose(yp, y, rtol=tol, atol=tol)
    Y = nibble.gemm(W, fmt, X)
    Yp = nibble.gemm(P, fmt, X, packed=True, threads=2)
    np.testing.assert_allclose(Yp, Y, rtol=1e-4, atol=1e-4)
    for isa in nibble.available_isas():
        np.testing.assert_allclose(nibble.gemm(P, fmt, X, packed=True, isa=isa), Y, rtol=1e-4,
                                   atol=1e-4)


def test_errors():
    W = blocks_of("q4_K", 20, 256)
    with pytest.raises(ValueError, match="no packed layout") as err:
        nibble.pack(np.zeros((20, 4 * 256), np.uint8), "f32")
    listed = str(err.value).split("packable: ")[1].rstrip(")").split(", ")
    assert sorted(listed) == sorted(PACKABLE)
    with pytest.raises(ValueError, match="no packed layout"):
        nibble.unpack(W, "f32")
    with pytest.raises(ValueError, match="uint8"):
        nibble.pack(W.astype(np.int16), "q4_K")
    with pytest.raises(ValueError, match="pass cols"):
        nibble.pack(W.reshape(-1), "q4_K")
    with pytest.raises(ValueError, match="not a whole number"):
        nibble.pack(W[:, :100], "q4_K")
    with pytest.raises(ValueError, match="does not match"):
        nibble.pack(W, "q4_K", cols=512)
    with pytest.raises(ValueError, match="threads"):
        nibble.pack(W, "q4_K", threads=-1)
    x = np.ones(256, np.float32)
    with pytest.raises(ValueError, match="no packed layout"):
        nibble.gemv(np.ones((4, 256), np.float32), "f32", x, packed=True)
    with pytest.raises(ValueError):
        nibble.gemv(W, "q4_K", np.ones(512, np.float32), packed=True)
    x[3] = np.nan
    with pytest.raises(nibble.Error):
        nibble.gemv(W, "q4_K", x, packed=True)


def test_gil_released():
    W = blocks_of("q8_0", 2048, 4096)
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=spin, daemon=True)
    t.start()
    try:
        time.sleep(0.05)
        before = counter[0]
        t0 = time.perf_counter()
        for _ in range(20):
            nibble.pack(W, "q8_0", threads=1)
        elapsed = time.perf_counter() - t0
        during = counter[0] - before
    finally:
        stop.set()
        t.join()
    assert elapsed > 0.02, "pack too fast for this test"
    assert during > 1000, during


@pytest.mark.skipif("gguf" not in getattr(nibble, "__all__", []), reason="gguf not bound")
def test_packed_gguf_file(tmp_path):
    src = os.path.join(DATA, "capi_small.gguf")
    if not os.path.exists(src):
        pytest.skip("tests/data/capi_small.gguf not present")
    out, back = str(tmp_path / "p.gguf"), str(tmp_path / "u.gguf")
    s = nibble.gguf.pack_file(src, out, threads=2)
    assert s["converted"] == 1 and s["copied"] == 2 and s["file_bytes"] == os.path.getsize(src)
    g0, g = nibble.gguf.open(src), nibble.gguf.open(out)
    t = {d["name"]: d for d in g.tensors}
    assert t["blk.0.attn_q.weight"]["packed"] and t["blk.0.attn_q.weight"]["type_name"] == "q4_K.x16"
    assert t["blk.0.attn_q.weight"]["type"] == 0x1000 | 12
    assert not t["blk.0.ffn_up.weight"]["packed"]
    name = "blk.0.attn_q.weight"
    plain = g0.tensor_data(name).reshape(64, -1)
    packed = g.tensor_data(name).reshape(64, -1)
    assert np.array_equal(packed, nibble.pack(plain, "q4_K"))
    assert np.array_equal(g.tensor(name), g0.tensor(name))  # dequantized through unpack
    x = np.linspace(-1, 1, 2048, dtype=np.float32)
    np.testing.assert_allclose(nibble.gemv(packed, "q4_K", x, packed=True),
                               nibble.gemv(plain, "q4_K", x), rtol=1e-4, atol=1e-4)
    assert nibble.gguf.unpack_file(out, back)["converted"] == 1
    with open(src, "rb") as a, open(back, "rb") as b:
        assert a.read() == b.read()
    with pytest.raises(nibble.Error, match="cannot open"):
        nibble.gguf.pack_file(str(tmp_path / "missing.gguf"), str(tmp_path / "x.gguf"))
    assert not os.path.exists(str(tmp_path / "x.gguf"))
