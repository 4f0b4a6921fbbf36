"""Shared helpers for the nibble Python tests: golden data from tests/data of the repository."""

import os

import numpy as np
import pytest

import nibble

if not hasattr(nibble, "quantize"):
    raise ImportError(f"the nibble found at {list(getattr(nibble, '__path__', []))} has no compiled "
                      "extension: build target nibble_python or pip install ./python "
                      "(see docs/python.md), and run pytest from the repository root")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.environ.get("NIBBLE_TEST_DATA_DIR", os.path.join(REPO, "tests", "data"))

CASES = ["gauss_s1", "gauss_s0.02", "uniform_pm1", "zeros", "const_0.75", "student_t3"]


def data_file(name, dtype):
    path = os.path.join(DATA, name)
    if not os.path.exists(path):
        pytest.skip(f"golden file {path} not present")
    return np.fromfile(path, dtype=dtype)


def same_bits(a, b):
    """Bitwise float32 equality (keeps -0.0 vs +0.0 apart, NaN-safe)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
