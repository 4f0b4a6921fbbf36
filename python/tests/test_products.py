"""gemv / gemm against float64 NumPy products of the independently decoded weights (refs.py)."""

import threading
import time

import numpy as np
import pytest

import nibble
from conftest import CASES, data_file
from refs import DEQUANT

FORMATS = ["f32", "f16", "q8_0", "q4_K", "q5_K", "q6_K", "nf4"]
ACT_BLOCK = {"q8_0": 32, "q4_K": 256, "q5_K": 256, "q6_K": 256}  # activations quantized to 8 bits


def call(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except nibble.Error as e:
        if "no matrix-product kernel" in str(e):
            pytest.skip(str(e))
        raise


def bound(fmt, Wd, X, int16=False):
    """Per-output error bound: float rounding (1e-5 relative to sum |w x|) plus, for the formats
    whose activations are quantized to 8 bits, sum_i |w_i| * amax(activation block of i) / 127
    (twice the worst rounding error of a symmetric 8-bit quantizer)."""
    W64, X64 = Wd.astype(np.float64), X.astype(np.float64)
    mag = np.abs(X64) @ np.abs(W64).T
    if fmt == "nf4" and int16:
        # NF4 GEMV on x86 rounds the code book to int16 steps of 1/16382 and the activations to
        # steps of at most max|x| / 32767 (docs/kernels.md, "NF4 / FP4 GEMV on x86: int16"):
        # per block, |absmax| * sum|x| / 16382 + max|x| / 65534 * sum|w|.
        absmax = np.abs(np.abs(W64).reshape(W64.shape[0], -1, 64).max(axis=2))  # (rows, cols/64)
        xsum = np.abs(X64).reshape(X.shape[0], -1, 64).sum(axis=2)  # (n, cols/64)
        wsum = np.abs(W64).reshape(W64.shape[0], -1, 64).sum(axis=2)
        xmax = np.abs(X64).max(axis=1, keepdims=True)
        extra = 1.01 * (xsum @ absmax.T / 16382.0 + xmax / 65534.0 * wsum.sum(axis=1)[None, :])
        return 1e-5 * mag + 1e-7 + extra
    if fmt not in ACT_BLOCK:
        return 1e-5 * mag + 1e-7
    b = ACT_BLOCK[fmt]
    amax = np.abs(X64).reshape(X.shape[0], -1, b).max(axis=2)  # (n, cols/b)
    wsum = np.abs(W64).reshape(W64.shape[0], -1, b).sum(axis=2)  # (rows, cols/b)
    return amax @ wsum.T / 127.0 + 1e-5 * mag + 1e-7


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", [1, 3, 17])
def test_products_vs_numpy(fmt, n):
    rng = np.random.default_rng(11)
    rows, cols = 40, 768
    w = (rng.standard_normal((rows, cols)) * 0.02).astype(np.float32)
    X = rng.standard_normal((n, cols)).astype(np.float32)
    W = nibble.quantize(w, fmt)
    Wd = DEQUANT[fmt](W).reshape(rows, cols)
    ref = X.astype(np.float64) @ Wd.astype(np.float64).T
    lim = bound(fmt, Wd, X)
    lim16 = bound(fmt, Wd, X, int16=True)  # gemv on x86 (NF4: int16 dot)
    Y = call(nibble.gemm, W, fmt, X)  # n = 1 runs the GEMV
    assert Y.shape == (n, rows) and Y.dtype == np.float32
    assert np.all(np.abs(Y - ref) <= lim16), np.max(np.abs(Y - ref) / lim16)
    Ye = call(nibble.gemm, W, fmt, X, exact_nf4=True)
    assert np.all(np.abs(Ye - ref) <= lim), np.max(np.abs(Ye - ref) / lim)
    y = call(nibble.gemv, W, fmt, X[0])
    assert y.shape == (rows,)
    assert np.all(np.abs(y - ref[0]) <= lim16[0])
    y = call(nibble.gemv, W, fmt, X[0], exact_nf4=True)  # fp32 products: the tight bound
    assert np.all(np.abs(y - ref[0]) <= lim[0])
    # every runnable ISA is within the same bound, and the thread count does not change results
    for isa in nibble.available_isas():
        Yi = call(nibble.gemm, W, fmt, X, isa=isa, threads=1)
        assert np.all(np.abs(Yi - ref) <= lim16), isa
        assert np.array_equal(Yi, call(nibble.gemm, W, fmt, X, isa=isa, threads=2)), isa


def test_f32_weights_as_float_matrix():
    rng = np.random.default_rng(12)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    x = rng.standard_normal(64).astype(np.float32)
    y = call(nibble.gemv, w, "f32", x)
    assert np.allclose(y, w.astype(np.float64) @ x, rtol=1e-5, atol=1e-5)
    assert np.array_equal(y, call(nibble.gemv, nibble.quantize(w, "f32"), "f32", x))


@pytest.mark.parametrize("case", [c for c in CASES if c not in ("zeros",)])
@pytest.mark.parametrize("fmt,pair", [("q4_K", "q4_K_q8_K"), ("q5_K", "q5_K_q8_K"),
                                      ("q6_K", "q6_K_q8_K"), ("q8_0", "q8_0_q8_0")])
def test_golden_dot(case, fmt, pair):
    # ggml's value for sum dequant(w) * dequant(act) in double; nibble quantizes the activation
    # the same way, so only float rounding separates them (1e-5 relative to sum |w a|).
    blocks = data_file(f"{case}.{fmt}.blocks", np.uint8)
    act = data_file(f"{case}.act.f32", np.float32)
    exact = data_file(f"{case}.{pair}.dotexact.f64", np.float64)[0]
    wd = data_file(f"{case}.{fmt}.dequant.f32", np.float32).astype(np.float64)
    got = call(nibble.gemv, blocks.reshape(1, -1), fmt, act)[0]
    tol = 1e-5 * float(np.abs(wd) @ np.abs(act.astype(np.float64))) + 1e-6
    assert abs(got - exact) <= tol, (got, exact, tol)


def test_gil_released():
    # While a long quantize runs, another Python thread must keep running.
    # One call must run long enough (> 50 ms) for the other thread to be scheduled inside it; the
    # matrix grows until it does on this machine (a fast core quantizes 2048 x 4096 in ~35 ms).
    rng = np.random.default_rng(13)
    w = rng.standard_normal((2048, 4096)).astype(np.float32)
    while True:
        t0 = time.perf_counter()
        nibble.quantize(w, "q4_K", threads=1)
        if time.perf_counter() - t0 > 0.08 or w.shape[0] >= 32768:
            break
        w = np.concatenate([w, w])
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
        nibble.quantize(w, "q4_K", threads=1)
        elapsed = time.perf_counter() - t0
        during = counter[0] - before
    finally:
        stop.set()
        t.join()
    assert elapsed > 0.05, "quantize too fast for this test"
    assert during > 1000, during
