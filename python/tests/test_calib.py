"""Calibration bindings: Hessian, GPTQ, AWQ, SmoothQuant, checked against NumPy formulas and
invariants. The bindings are always built, so a missing submodule is a failure, not a skip."""

import numpy as np
import pytest

import nibble

extras = getattr(nibble, "__all__", [])


def require(name):
    assert name in extras, f"nibble.{name} is not bound (extras: {extras})"


def test_hessian_vs_numpy():
    require("Hessian")
    rng = np.random.default_rng(21)
    X1 = rng.standard_normal((37, 64)).astype(np.float32)
    X2 = rng.standard_normal((11, 64)).astype(np.float32)
    h = nibble.Hessian(64)
    h.add_batch(X1)
    h.add_batch(X2)
    X = np.vstack([X1, X2]).astype(np.float64)
    ref = 2.0 / X.shape[0] * X.T @ X
    assert h.tokens == 48 and h.cols == 64
    assert np.allclose(h.matrix, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    with pytest.raises(ValueError):
        h.add_batch(np.zeros((3, 10), np.float32))


@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_grid_and_error(act_order):
    require("gptq")
    rng = np.random.default_rng(22)
    out, cols, tokens = 32, 256, 512
    W = rng.standard_normal((out, cols)).astype(np.float32)
    X = rng.standard_normal((tokens, cols)).astype(np.float32)
    h = nibble.Hessian(cols)
    h.add_batch(X)
    r = nibble.gptq.quantize(W, h.matrix, bits=4, group_size=128, act_order=act_order)
    Q, scale, zero, g_idx = r["Q"], r["scale"], r["zero"], r["g_idx"]
    assert Q.shape == W.shape and scale.shape == (out, 2) and g_idx.shape == (cols,)
    # every weight lies on its group's 4-bit grid: Q = scale * (q - zero), q in 0..15
    q = Q / scale[:, g_idx] + zero[:, g_idx]
    assert np.allclose(q, np.round(q), atol=1e-3)
    assert q.min() >= -1e-3 and q.max() <= 15 + 1e-3
    # GPTQ's output error (the H-weighted loss) beats round-to-nearest on the same groups
    H = h.matrix.astype(np.float64)

    def out_err(Wq):
        D = (W - Wq).astype(np.float64)
        return np.einsum("ij,jk,ik->", D, H, D)

    s_rtn = np.zeros_like(W)
    for g in range(2):
        blk = W[:, 128 * g:128 * (g + 1)]
        lo, hi = np.minimum(blk.min(1), 0), np.maximum(blk.max(1), 0)
        sc = (hi - lo) / 15
        z = np.round(-lo / sc)
        s_rtn[:, 128 * g:128 * (g + 1)] = sc[:, None] * (
            np.clip(np.round(blk / sc[:, None]) + z[:, None], 0, 15) - z[:, None])
    assert out_err(Q) < out_err(s_rtn)


def test_smoothquant_scales():
    require("smoothquant")
    rng = np.random.default_rng(23)
    X = rng.standard_normal((64, 32)).astype(np.float32) * np.linspace(0.1, 10, 32, dtype=np.float32)
    W = rng.standard_normal((16, 32)).astype(np.float32)
    am = nibble.smoothquant.act_absmax(X)
    assert np.array_equal(am, np.abs(X).max(axis=0))
    s = nibble.smoothquant.scales(am, W, 0.5)
    wmax = np.maximum(np.abs(W).max(axis=0), 1e-5)
    ref = np.maximum(am.astype(np.float64) ** 0.5 / wmax ** 0.5, 1e-5)
    assert np.allclose(s, ref, rtol=1e-5)


def test_awq_small():
    require("awq")
    rng = np.random.default_rng(24)
    W = (rng.standard_normal((16, 256)) * 0.02).astype(np.float32)
    X = rng.standard_normal((64, 256)).astype(np.float32)
    mean = nibble.awq.activation_mean(X)
    assert np.allclose(mean, np.abs(X).mean(axis=0), rtol=1e-5)
    r = nibble.awq.search(W, X, bits=4, group_size=128, n_grid=4, clip_grid=4, n_sample_token=64)
    assert r["scales"].shape == (256,) and r["W_eff"].shape == W.shape
    assert r["clip_max"].shape == (16, 2)
    assert 0.0 <= r["best_ratio"] < 1.0
    # the effective weights stay close to W (4-bit group quantization of N(0, 0.02) weights)
    rel = np.linalg.norm(r["W_eff"] - W) / np.linalg.norm(W)
    assert rel < 0.2, rel


def test_gptq_kquant_blocks():
    require("gptq")
    rng = np.random.default_rng(25)
    out, cols = 8, 512
    W = (rng.standard_normal((out, cols)) * 0.02).astype(np.float32)
    X = rng.standard_normal((1024, cols)).astype(np.float32)
    h = nibble.Hessian(cols)
    h.add_batch(X)
    try:
        b = nibble.gptq.quantize_blocks("q4_K", W, h.matrix)
    except nibble.Error as e:
        if "not supported" in str(e):
            pytest.skip(str(e))
        raise
    assert b.shape == (out, nibble.row_bytes("q4_K", cols)) and b.dtype == np.uint8
    Q = nibble.dequantize(b, "q4_K", W.shape)
    H = h.matrix.astype(np.float64)

    def out_err(Wq):
        D = (W - Wq).astype(np.float64)
        return np.einsum("ij,jk,ik->", D, H, D)

    rtn = nibble.dequantize(nibble.quantize(W, "q4_K"), "q4_K", W.shape)
    assert out_err(Q) < out_err(rtn)
    # the low-bit K-quants: GPTQ on their grid beats plain rounding too
    for fmt in ("q2_K", "q3_K"):
        bq = nibble.gptq.quantize_blocks(fmt, W, h.matrix)
        assert bq.shape == (out, nibble.row_bytes(fmt, cols))
        r = nibble.dequantize(nibble.quantize(W, fmt), fmt, W.shape)
        assert out_err(nibble.dequantize(bq, fmt, W.shape)) < out_err(r)
    with pytest.raises(ValueError):
        nibble.gptq.quantize_blocks("no_such_format", W, h.matrix)
    with pytest.raises(nibble.Error):  # a format without a GPTQ grid
        nibble.gptq.quantize_blocks("iq4_nl", W, h.matrix)
