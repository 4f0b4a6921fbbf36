"""Argument checking: shape/dtype problems raise ValueError, library errors nibble.Error."""

import numpy as np
import pytest

import nibble


def test_error_is_value_error():
    assert issubclass(nibble.Error, ValueError)


def test_bad_dtype():
    with pytest.raises(ValueError, match="dtype"):
        nibble.quantize(np.array(["a"] * 256), "q8_0")
    with pytest.raises(ValueError, match="dtype"):
        nibble.quantize(np.zeros(256, np.complex64), "q8_0")
    with pytest.raises(ValueError, match="uint8"):
        nibble.dequantize(np.zeros(34, np.int32), "q8_0", 32)


def test_bad_shapes():
    with pytest.raises(ValueError, match="shape"):
        nibble.quantize(np.zeros((2, 2, 256), np.float32), "q8_0")
    with pytest.raises(ValueError, match="multiple of 256"):
        nibble.quantize(np.zeros((2, 100), np.float32), "q4_K")
    with pytest.raises(ValueError, match="bytes"):
        nibble.dequantize(np.zeros(100, np.uint8), "q4_K", (1, 256))
    with pytest.raises(ValueError, match="importance"):
        nibble.quantize(np.zeros(256, np.float32), "q4_K", importance=np.ones(10, np.float32))
    w = nibble.quantize(np.ones((4, 256), np.float32), "q8_0")
    with pytest.raises(ValueError):
        nibble.gemv(w, "q8_0", np.ones(128, np.float32))  # cols mismatch
    with pytest.raises(ValueError):
        nibble.gemm(w, "q8_0", np.ones(256, np.float32))  # X must be 2-D


def test_bad_names():
    with pytest.raises(ValueError, match="unknown format"):
        nibble.quantize(np.zeros(256, np.float32), "q3_K_XL")
    with pytest.raises(ValueError, match="unknown isa"):
        nibble.quantize(np.zeros(256, np.float32), "q8_0", isa="sse9")
    with pytest.raises(ValueError, match="threads"):
        nibble.quantize(np.zeros(256, np.float32), "q8_0", threads=-1)


def test_library_errors():
    x = np.zeros(256, np.float32)
    x[3] = np.nan
    with pytest.raises(nibble.Error, match="nibble"):
        nibble.quantize(x, "q4_K")
    with pytest.raises(nibble.Error):
        nibble.quantize(np.zeros(256, np.float32), "q4_K", importance=-np.ones(256, np.float32))
    missing = "neon" if "avx2" in nibble.available_isas() else "avx2"
    with pytest.raises(nibble.Error):
        nibble.quantize(np.zeros(256, np.float32), "q8_0", isa=missing)
