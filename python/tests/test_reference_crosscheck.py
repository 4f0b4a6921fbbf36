"""nibble's GPTQ, AWQ and SmoothQuant against independent NumPy ports of the reference algorithms
(ref_algos.py, written from reference/ALGORITHMS.md), on identical synthetic layers.

Tolerances were measured on these layers (numbers in the comments) and are set a few times above
the measured differences, so that a real algorithmic difference (a wrong group window, damping,
rounding mode, loss, clip candidate, ...) fails them. Float32 is used throughout on both sides; the
remaining differences are summation order (BLAS vs Eigen), NumPy's SIMD powf vs libm powf, and
float32 vs float64 accumulation of the AWQ statistics.
"""

import numpy as np
import pytest

import nibble
import ref_algos as R

for _name in ("gptq", "awq", "smoothquant", "synthetic", "rtn", "Hessian"):
    assert _name in nibble.__all__, f"nibble.{_name} is not bound (extras: {nibble.__all__})"

SEEDS = [1, 2, 3]


def _layer(**kw):
    W, X = nibble.synthetic.layer(**kw)
    assert W.dtype == np.float32 and X.dtype == np.float32
    return W, X


def test_synthetic_layer_binding():
    W, X = _layer(out=64, in_=256, tokens=512, seed=5)
    assert W.shape == (64, 256) and X.shape == (512, 256)
    W2, X2 = _layer(out=64, in_=256, tokens=512, seed=5)
    assert np.array_equal(W, W2) and np.array_equal(X, X2)  # deterministic
    W3, _ = _layer(out=64, in_=256, tokens=512, seed=6)
    assert not np.array_equal(W, W3)
    # ~1% outlier channels with 20-50x gain: the largest channel scales stand far out
    am = np.abs(X).max(axis=0)
    assert np.sort(am)[-1] > 10 * np.median(am)
    with pytest.raises(ValueError):
        nibble.synthetic.layer(out=0)


# ------------------------------------------------------------------------------------------ GPTQ

# (bits, group_size, act_order, static_groups, sym). gs=64 with blocksize 128 exercises the
# "group parameters from the outer W" rule (the second group of a block is not at i = 0).
GPTQ_CASES = [
    (4, 128, False, False, False),
    (4, 128, True, False, False),
    (4, 128, False, True, False),
    (4, 128, True, True, False),
    (4, 128, False, False, True),
    (4, 64, False, False, False),
    (4, 64, True, False, False),
    (3, -1, False, False, False),
    (8, -1, False, False, False),
    (3, 128, True, False, True),
]


@pytest.mark.parametrize("seed", SEEDS)
def test_gptq_matches_reference(seed):
    W, X = _layer(out=128, in_=512, tokens=1024, seed=seed)
    h = nibble.Hessian(W.shape[1])
    h.add_batch(X)
    H = h.matrix
    # the Hessian itself: 2/n X^T X (float32 sgemm vs nibble's accumulation)
    Hr = R.hessian(X)
    assert np.abs(H - Hr).max() <= 1e-5 * np.abs(Hr).max()
    assert len(np.unique(np.diag(H))) == H.shape[0]  # no act-order ties (argsort is unstable)
    for bits, gs, ao, st, sym in GPTQ_CASES:
        what = f"seed {seed} bits {bits} gs {gs} act_order {ao} static {st} sym {sym}"
        Qr, sr, zr, gr = R.gptq_fasterquant(W, H, bits, gs, sym, ao, st)
        r = nibble.gptq.quantize(W, H, bits=bits, group_size=gs, act_order=ao,
                                 static_groups=st, sym=sym)
        assert np.array_equal(r["g_idx"], gr), what
        assert r["scale"].shape == sr.shape and r["zero"].shape == zr.shape, what
        cr = R.gptq_codes(Qr, sr, zr, gr, bits)
        cn = R.gptq_codes(r["Q"], r["scale"], r["zero"], r["g_idx"], bits)
        # both results lie exactly on their own grids
        assert np.allclose(R.gptq_quantize(r["Q"], r["scale"][:, r["g_idx"]],
                                           r["zero"][:, r["g_idx"]], 2**bits - 1), r["Q"]), what
        # Identical integer codes: measured 99.94-100% over these 30 cases (a single float32
        # tie flipped by summation order makes GPTQ diverge locally afterwards).
        agree = (cr == cn).mean()
        assert agree >= 0.998, f"{what}: {agree:.5f} of the codes agree"
        # group parameters: the first group's are computed before any GPTQ update -> identical
        # (per-channel: the only group, from the raw W)
        assert np.array_equal(sr[:, 0], r["scale"][:, 0]) or st, what
        assert np.array_equal(zr[:, 0], r["zero"][:, 0]) or st, what
        # Output error ratio to RTN on the same grid: measured max relative difference 9.1e-4
        # (8-bit per-channel), typically < 1e-4.
        e_rtn = R.rel_err(W, R.gptq_rtn(W, bits, gs, sym), X)
        a = R.rel_err(W, Qr, X) / e_rtn
        b = R.rel_err(W, r["Q"], X) / e_rtn
        assert abs(a - b) <= 5e-3 * a, f"{what}: ratio ref {a:.5f} nibble {b:.5f}"
        assert a < 0.5, what  # GPTQ clearly beats RTN on these correlated layers


def test_gptq_static_groups_params_exact():
    # static groups come from the dead-zeroed, unpermuted, un-updated W: bitwise identical
    W, X = _layer(out=64, in_=256, tokens=512, seed=4)
    X[:, 7] = 0  # a dead input channel
    H = R.hessian(X)
    Qr, sr, zr, gr = R.gptq_fasterquant(W, H, 4, 64, False, True, True)
    r = nibble.gptq.quantize(W, H, bits=4, group_size=64, act_order=True, static_groups=True)
    assert np.array_equal(sr, r["scale"]) and np.array_equal(zr, r["zero"])
    assert np.array_equal(gr, r["g_idx"])
    assert np.all(r["Q"][:, 7] == 0) and np.all(Qr[:, 7] == 0)


def test_gptq_rtn_baseline_identical():
    W, _ = _layer(out=64, in_=512, tokens=16, seed=2)
    for bits, gs, sym in [(4, 128, False), (4, 128, True), (3, -1, False), (8, -1, False)]:
        assert np.array_equal(nibble.rtn.gptq_rtn(W, bits, gs, sym), R.gptq_rtn(W, bits, gs, sym))
    assert np.array_equal(nibble.rtn.awq_rtn(W, 4, 128), R.awq_rtn(W, 4, 128))


# ------------------------------------------------------------------------------------------- AWQ


def _awq_err_ratio(W, X, W_eff):
    return R.rel_err(W, W_eff, X) / R.rel_err(W, R.awq_rtn(W, 4, 128), X)


@pytest.mark.parametrize("duo", [False, True])
@pytest.mark.parametrize("seed", SEEDS)
def test_awq_matches_reference_f32(seed, duo):
    """Reference with torch-like float32 statistics (float32 mean of |x|, SIMD powf)."""
    W, X = _layer(out=128, in_=256, tokens=1024, seed=seed)
    rn = nibble.awq.search(W, X, duo_scaling=duo)
    rr = R.awq_search(W, X, duo_scaling=duo)
    assert np.float32(rr["best_ratio"]) == np.float32(rn["best_ratio"])
    # measured: at most 14 ulp (1.7e-6 relative) from the float32 statistics
    assert np.allclose(rr["scales"], rn["scales"], rtol=1e-5, atol=0)
    # clip thresholds: 97.3-99.2% within 1e-5 (the rest are near-tied candidates that the
    # ulp-level scale differences tip the other way)
    close = np.isclose(rr["clip_max"], rn["clip_max"], rtol=1e-5, atol=0).mean()
    assert close >= 0.95, close
    # error ratio to RTN: measured relative difference <= 2.9e-3
    a, b = _awq_err_ratio(W, X, rr["W_eff"]), _awq_err_ratio(W, X, rn["W_eff"])
    assert abs(a - b) <= 1e-2 * a, (a, b)


@pytest.mark.parametrize("duo", [False, True])
@pytest.mark.parametrize("clip", [True, False])
@pytest.mark.parametrize("seed", SEEDS + [4])
def test_awq_matches_reference_exact_stats(seed, duo, clip):
    """With the statistics and powers taken at float64 precision (rounded once), the reference
    reproduces nibble (nearly) bitwise: measured 0 ulp scale differences except one channel at 1
    ulp (libm powf is not always correctly rounded), clip_max >= 99.2% bitwise identical."""
    W, X = _layer(out=128, in_=256, tokens=1024, seed=seed)
    rn = nibble.awq.search(W, X, duo_scaling=duo, clip=clip)
    rr = R.awq_search(W, X, duo_scaling=duo, clip=clip, exact_stats=True)
    assert np.float32(rr["best_ratio"]) == np.float32(rn["best_ratio"])
    ulp = np.abs(rr["scales"].view(np.int32).astype(np.int64) - rn["scales"].view(np.int32))
    assert ulp.max() <= 2 and (ulp == 0).mean() >= 0.99, ulp.max()
    assert (rr["clip_max"] == rn["clip_max"]).mean() >= 0.98
    a, b = _awq_err_ratio(W, X, rr["W_eff"]), _awq_err_ratio(W, X, rn["W_eff"])
    assert abs(a - b) <= 1e-4 * a, (a, b)  # measured <= 2e-11


@pytest.mark.parametrize("duo,bits,gs", [(False, 4, 128), (True, 4, 128), (False, 3, 64)])
def test_awq_clip_search_bitwise_given_scales(duo, bits, gs):
    """Given nibble's scales, the reference clip search and final quantization reproduce
    nibble's clip_max and W_eff bit for bit (measured: 100% on every layer tried). 3-bit g64
    picks every shrink candidate down to 0.55, so the candidate grid is checked end to end."""
    W, X = _layer(out=128, in_=256, tokens=1024, seed=7)
    rn = nibble.awq.search(W, X, bits=bits, group_size=gs, duo_scaling=duo)
    s = rn["scales"]
    Ws = (W * s[None, :]).astype(np.float32)
    Xs = (X / s[None, :]).astype(np.float32)
    cm = R.awq_clip_search(Ws, Xs, bits, gs)
    m = np.repeat(cm, gs, axis=1)
    W_eff = R.awq_pseudo_quantize(np.clip(Ws, -m, m), bits, gs) / s[None, :]
    assert np.array_equal(cm, rn["clip_max"])
    assert np.array_equal(W_eff, rn["W_eff"])
    shrink = np.unique(np.round(cm / np.abs(Ws).reshape(W.shape[0], -1, gs).max(-1), 3))
    if bits == 3:
        assert shrink.min() == np.float32(0.55), shrink


def test_awq_duo_scaling_changes_search():
    W, X = _layer(out=128, in_=256, tokens=1024, seed=2)
    a = nibble.awq.search(W, X, clip=False, duo_scaling=False)
    b = nibble.awq.search(W, X, clip=False, duo_scaling=True)
    assert not np.array_equal(a["scales"], b["scales"])
    # duo_scaling scales = x_mean^r / (w_mean^(1-r) + 1e-4), normalised by sqrt(max * min)
    xm = nibble.awq.activation_mean(X).astype(np.float64)
    wm = R.awq_w_mean(W, 128, exact=True).astype(np.float64)
    r = float(np.float32(b["best_ratio"]))
    s = np.maximum(xm**r / (wm ** float(np.float32(1 - r)) + 1e-4), 1e-4)
    s /= np.sqrt(s.max() * s.min())
    assert np.allclose(b["scales"], s, rtol=1e-5)


# ------------------------------------------------------------------------------------ SmoothQuant


@pytest.mark.parametrize("seed", SEEDS + [0])
def test_smoothquant_matches_reference(seed):
    W, X = _layer(out=128, in_=256, tokens=1024, seed=max(seed, 1))
    if seed == 0:  # the clamps: a dead input channel and an (almost) zero weight column
        X[:, 5] = 0
        W[:, 9] = 1e-7
    am = nibble.smoothquant.act_absmax(X)
    assert np.array_equal(am, R.act_absmax(X))
    sn = nibble.smoothquant.scales(am, W, 0.5)
    sr = R.smoothquant_scales(am, W, 0.5)
    assert np.allclose(sn, sr, rtol=1e-6, atol=0)  # measured <= 2.8e-7 (powf 1-2 ulp)
    Y = X.astype(np.float64) @ W.astype(np.float64).T
    for act in ("per_token", "per_tensor"):
        pt = act == "per_token"
        # the fake-quantized outputs themselves (float32 matmuls in different orders)
        yn = nibble.smoothquant.w8a8_forward(X, W, pt)
        yr = R.fake_w8a8(W, X, act)
        assert np.abs(yn - yr).max() <= 1e-4 * np.abs(Y).max()
        # error ratio smoothed / naive W8A8 with the same s: measured relative difference
        # <= 4.9e-6
        e0 = np.sum((yn.astype(np.float64) - Y) ** 2)
        e1 = np.sum((nibble.smoothquant.w8a8_forward(X / sn, W * sn, pt).astype(np.float64)
                     - Y) ** 2)
        ratio_ref = R.smoothquant_ratio(W, X, 0.5, act)[0]
        assert abs(e1 / e0 - ratio_ref) <= 1e-4 * ratio_ref, (act, e1 / e0, ratio_ref)
        assert ratio_ref < 0.5  # smoothing helps on the outlier layer
