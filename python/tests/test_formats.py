"""Quantize / dequantize against ggml's golden vectors (tests/data) and against the independent
NumPy decoders in refs.py. All comparisons here are exact (bitwise) unless stated."""

import numpy as np
import pytest

import nibble
from conftest import CASES, data_file, same_bits
from refs import DEQUANT

GGUF_FORMATS = ["q8_0", "q4_K", "q5_K", "q6_K"]


def test_format_table():
    # Block sizes and bytes from the GGUF layouts (MANIFEST.md), not from nibble.
    expect = {"q8_0": (32, 34), "q4_K": (256, 144), "q5_K": (256, 176), "q6_K": (256, 210),
              "q8_K": (256, 292), "f32": (1, 4), "f16": (1, 2), "nf4": (64, 36)}
    for name, (elems, nbytes) in expect.items():
        info = nibble.format_info(name)
        assert (info["block_elems"], info["block_bytes"]) == (elems, nbytes), name
        assert nibble.row_bytes(name, 4096) == 4096 // elems * nbytes
    assert nibble.best_isa() in nibble.available_isas()
    assert nibble.available_isas()[0] == "scalar"


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("fmt", GGUF_FORMATS + ["q8_K"])
def test_golden_quantize(case, fmt):
    if fmt == "q8_K" and case != "gauss_s0.02":
        pytest.skip("q8_K golden only for gauss_s0.02")
    x = data_file(f"{case}.input.f32", np.float32)
    want = data_file(f"{case}.{fmt}.blocks", np.uint8)
    got = nibble.quantize(x, fmt)
    assert got.dtype == np.uint8 and got.shape == (nibble.row_bytes(fmt, x.size),)
    assert np.array_equal(got, want)
    # dequantize == ggml's dequantizer output, bit for bit (including -0.0)
    deq = data_file(f"{case}.{fmt}.dequant.f32", np.float32)
    assert same_bits(nibble.dequantize(want, fmt, x.size), deq)
    # the NumPy decoder agrees with ggml too (validates refs.py itself)
    assert same_bits(DEQUANT[fmt](want), deq)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("fmt", ["q4_K", "q5_K", "q6_K"])
def test_golden_importance(case, fmt):
    x = data_file(f"{case}.input.f32", np.float32)
    imp = data_file(f"{case}.{fmt}.imatrix.f32", np.float32)
    want = data_file(f"{case}.{fmt}.iq.blocks", np.uint8)
    assert np.array_equal(nibble.quantize(x, fmt, importance=imp), want)


@pytest.mark.parametrize("fmt", GGUF_FORMATS + ["f16", "f32", "nf4"])
def test_roundtrip_2d_vs_numpy(fmt):
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((16, 512)) * 0.02).astype(np.float32)
    blocks = nibble.quantize(w, fmt)
    assert blocks.shape == (16, nibble.row_bytes(fmt, 512))
    deq = nibble.dequantize(blocks, fmt, w.shape)
    assert deq.shape == w.shape and deq.dtype == np.float32
    # nibble's dequantizer equals the independent NumPy decoder bit for bit
    assert same_bits(deq.reshape(-1), DEQUANT[fmt](blocks))
    # and the round trip error is what the format allows (relative RMS bound per format)
    bound = {"q8_0": 0.01, "q4_K": 0.12, "q5_K": 0.06, "q6_K": 0.03, "f16": 1e-3, "f32": 0.0,
             "nf4": 0.15}[fmt]
    rel = np.sqrt(np.mean((deq - w) ** 2)) / np.sqrt(np.mean(w ** 2))
    assert rel <= bound, rel
    if fmt == "f16":
        assert same_bits(deq, w.astype(np.float16).astype(np.float32))
    if fmt == "f32":
        assert same_bits(deq, w)


def test_float64_input_is_converted():
    rng = np.random.default_rng(6)
    w = rng.standard_normal((2, 256))
    assert np.array_equal(nibble.quantize(w, "q4_K"), nibble.quantize(w.astype(np.float32), "q4_K"))
    # non-contiguous input is copied to C order first
    wt = np.asfortranarray(w.astype(np.float32))
    assert np.array_equal(nibble.quantize(wt, "q8_0"), nibble.quantize(w.astype(np.float32), "q8_0"))


@pytest.mark.parametrize("fmt", GGUF_FORMATS + ["nf4"])
def test_isa_and_threads_do_not_change_bytes(fmt):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((8, 1024)).astype(np.float32)
    ref = nibble.quantize(w, fmt, isa="scalar", threads=1)
    for isa in nibble.available_isas():
        for t in (1, 2):
            assert np.array_equal(nibble.quantize(w, fmt, isa=isa, threads=t), ref), (isa, t)
            assert same_bits(nibble.dequantize(ref, fmt, w.shape, isa=isa, threads=t),
                             nibble.dequantize(ref, fmt, w.shape, isa="scalar"))


def test_shape_argument_forms():
    x = np.linspace(-1, 1, 128, dtype=np.float32)
    b = nibble.quantize(x, "q8_0")
    ref = nibble.dequantize(b, "q8_0", 128)
    assert ref.shape == (128,)
    assert np.array_equal(nibble.dequantize(b, "q8_0", np.int64(128)), ref)
    assert np.array_equal(nibble.dequantize(b, "q8_0", (128,)), ref)
    assert np.array_equal(nibble.dequantize(b, "q8_0", [1, 128]).reshape(-1), ref)
    with pytest.raises(ValueError):
        nibble.dequantize(b, "q8_0", (1, 1, 128))
    with pytest.raises(ValueError):
        nibble.dequantize(b, "q8_0", "128")


LEGACY_CASES = ["zeros", "single", "huge", "tiny", "ties", "negonly", "outlier", "gauss", "mixed"]
LEGACY_FORMATS = ["q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "iq4_xs", "mxfp4", "bf16", "q8_1",
                  "q2_K", "q3_K"]


def test_legacy_format_table():
    # ggml-common.h block sizes and ggml.h type ids (tests/data/MANIFEST.md, "Legacy formats").
    expect = {"q4_0": (32, 18, 2), "q4_1": (32, 20, 3), "q5_0": (32, 22, 6), "q5_1": (32, 24, 7),
              "iq4_nl": (32, 18, 20), "iq4_xs": (256, 136, 23), "mxfp4": (32, 17, 39),
              "bf16": (1, 2, 30), "q8_1": (32, 36, 9), "q2_K": (256, 84, 10),
              "q3_K": (256, 110, 11)}
    for name, (elems, nbytes, gid) in expect.items():
        assert name in nibble.formats()
        info = nibble.format_info(name)
        assert (info["block_elems"], info["block_bytes"], info["gguf_type"]) == (elems, nbytes, gid)


@pytest.mark.parametrize("case", LEGACY_CASES)
@pytest.mark.parametrize("fmt", LEGACY_FORMATS)
def test_legacy_golden(case, fmt):
    x = data_file(f"legacy/{case}.input.f32", np.float32)
    want = data_file(f"legacy/{case}.{fmt}.blocks", np.uint8)
    assert np.array_equal(nibble.quantize(x, fmt), want)
    if fmt != "q8_1":  # ggml has no q8_1 dequantizer
        deq = data_file(f"legacy/{case}.{fmt}.dequant.f32", np.float32)
        assert same_bits(nibble.dequantize(want, fmt, x.size), deq)
