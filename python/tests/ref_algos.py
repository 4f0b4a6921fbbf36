"""Independent NumPy ports of the reference calibration algorithms, for cross-checking nibble.

Written from reference/ALGORITHMS.md sections 1-4 (IST-DASLab/gptq gptq.py + quant.py,
mit-han-lab/llm-awq auto_scale.py + auto_clip.py + quantizer.py, AutoAWQ's duo_scaling,
mit-han-lab/smoothquant smooth.py + fake_quant.py). No nibble code is used here. Torch semantics
are kept where they decide results: float32 everywhere, round half to even (np.round), division
(not reciprocal multiplication) in the quantizers, LAPACK potrf/potri for cholesky /
cholesky_inverse (torch's CPU path), strict "<" when picking the best candidate.

Error measure used by the tools/tests (same as nibble's rtn::relative_output_error):
    rel_err(W, Q, X) = ||(W - Q) X^T||_F^2 / ||W X^T||_F^2   (in float64)
"""

import numpy as np

try:  # LAPACK spotrf / spotri, as torch.linalg.cholesky / torch.cholesky_inverse on CPU
    from scipy.linalg import lapack as _lapack
except ImportError:  # pragma: no cover - NumPy-only fallback (float32 LAPACK via numpy.linalg)
    _lapack = None

F32 = np.float32


def rel_err(W, Q, X):
    """||(W - Q) X^T||_F^2 / ||W X^T||_F^2 in float64 (X: tokens x in)."""
    Xd = np.asarray(X, np.float64)
    Wd = np.asarray(W, np.float64)
    D = Wd - np.asarray(Q, np.float64)
    return float(np.sum((Xd @ D.T) ** 2) / np.sum((Xd @ Wd.T) ** 2))


def hessian(X):
    """GPTQ layer Hessian 2/n X^T X (n = tokens, GPTQModel convention), float32."""
    X = np.asarray(X, F32)
    return (X.T @ X) * F32(2.0 / X.shape[0])


# --------------------------------------------------------------------------- GPTQ (2.1-2.4)


def gptq_find_params(x, bits, sym):
    """quant.py Quantizer.find_params(weight=True, mse=False) on a [rows, cols] slice.
    Returns (scale[rows], zero[rows]) float32."""
    x = np.asarray(x, F32)
    maxq = F32(2**bits - 1)
    xmin = np.minimum(x.min(axis=1), F32(0))
    xmax = np.maximum(x.max(axis=1), F32(0))
    if sym:
        xmax = np.maximum(np.abs(xmin), xmax)
        neg = xmin < 0
        xmin = np.where(neg, -xmax, xmin)
    both0 = (xmin == 0) & (xmax == 0)
    xmin = np.where(both0, F32(-1), xmin)
    xmax = np.where(both0, F32(1), xmax)
    scale = ((xmax - xmin) / maxq).astype(F32)
    if sym:
        zero = np.full_like(scale, F32((maxq + 1) / 2))
    else:
        zero = np.round(-xmin / scale).astype(F32)
    return scale, zero


def gptq_quantize(x, scale, zero, maxq):
    """quant.py quantize: scale * (clamp(round(x / scale) + zero, 0, maxq) - zero)."""
    q = np.clip(np.round(x / scale) + zero, F32(0), F32(maxq))
    return (scale * (q - zero)).astype(F32)


def gptq_rtn(W, bits, group_size, sym=False):
    """RTN on the GPTQ grid: find_params per row and group of consecutive columns, quantize."""
    W = np.asarray(W, F32)
    cols = W.shape[1]
    gs = cols if group_size is None or group_size <= 0 else group_size
    maxq = 2**bits - 1
    Q = np.empty_like(W)
    for g in range(0, cols, gs):
        blk = W[:, g:g + gs]
        s, z = gptq_find_params(blk, bits, sym)
        Q[:, g:g + gs] = gptq_quantize(blk, s[:, None], z[:, None], maxq)
    return Q


def _chol_lower(A):
    if _lapack is not None:
        L, info = _lapack.spotrf(A, lower=1, clean=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"spotrf info {info}")
        return L
    return np.linalg.cholesky(A)


def _chol_inverse(L):
    """(L L^T)^-1 from the lower factor (torch.cholesky_inverse = LAPACK potri)."""
    if _lapack is not None:
        inv, info = _lapack.spotri(L, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError(f"spotri info {info}")
        return np.tril(inv) + np.tril(inv, -1).T  # potri fills one triangle
    Li = np.linalg.inv(L)
    return Li.T @ Li


def gptq_fasterquant(W, H, bits=4, group_size=128, sym=False, act_order=False,
                     static_groups=False, blocksize=128, percdamp=0.01):
    """GPTQ.fasterquant (IST-DASLab/gptq; scale/zero/g_idx as AutoGPTQ returns them).

    W: (rows, cols), H: (cols, cols). Returns (Q dequantized (rows, cols) float32,
    scale (rows, n_groups), zero (rows, n_groups), g_idx (cols,) int32)."""
    W = np.array(W, F32, copy=True)
    H = np.array(H, F32, copy=True)
    rows, cols = W.shape
    maxq = 2**bits - 1
    gs_on = group_size is not None and group_size > 0

    # per-row parameters from the whole (not yet dead-zeroed) W
    scale, zero = gptq_find_params(W, bits, sym)
    scale, zero = scale[:, None], zero[:, None]

    dead = np.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0

    groups = []
    if static_groups and gs_on:
        for g in range(0, cols, group_size):
            s, z = gptq_find_params(W[:, g:g + group_size], bits, sym)
            groups.append((s[:, None], z[:, None]))

    perm = None
    if act_order:
        # torch.argsort(descending=True) is not stable; tests avoid exact ties in diag(H)
        perm = np.argsort(-np.diag(H), kind="stable")
        W = W[:, perm]
        H = H[perm][:, perm]
        invperm = np.argsort(perm)

    damp = F32(percdamp) * np.mean(np.diag(H), dtype=F32)
    H[np.arange(cols), np.arange(cols)] += damp
    L = _chol_lower(H)
    Hinv_full = _chol_inverse(L)
    U = _chol_lower(Hinv_full).T.copy()  # upper factor: Hinv_full = U^T U

    Q = np.zeros_like(W)
    seen_scales, seen_zeros = [], []
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        count = i2 - i1
        W1 = W[:, i1:i2].copy()
        Q1 = np.zeros_like(W1)
        Err1 = np.zeros_like(W1)
        U1 = U[i1:i2, i1:i2]
        for i in range(count):
            w = W1[:, i]
            d = U1[i, i]
            if gs_on:
                if not static_groups:
                    if (i1 + i) % group_size == 0:
                        s, z = gptq_find_params(W[:, i1 + i:i1 + i + group_size], bits, sym)
                        scale, zero = s[:, None], z[:, None]
                        seen_scales.append(s)
                        seen_zeros.append(z)
                else:
                    idx = i1 + i
                    if act_order:
                        idx = perm[idx]
                    scale, zero = groups[idx // group_size]
            q = gptq_quantize(w[:, None], scale, zero, maxq)[:, 0]
            Q1[:, i] = q
            e = ((w - q) / d).astype(F32)
            W1[:, i:] -= np.outer(e, U1[i, i:]).astype(F32)
            Err1[:, i] = e
        Q[:, i1:i2] = Q1
        W[:, i2:] -= Err1 @ U[i1:i2, i2:]

    if act_order:
        Q = Q[:, invperm]

    if not gs_on:
        out_scale, out_zero = scale.copy(), zero.copy()
        g_idx = np.zeros(cols, np.int32)
    elif static_groups:
        out_scale = np.stack([g[0][:, 0] for g in groups], axis=1)
        out_zero = np.stack([g[1][:, 0] for g in groups], axis=1)
        g_idx = (np.arange(cols) // group_size).astype(np.int32)
    else:
        out_scale = np.stack(seen_scales, axis=1)
        out_zero = np.stack(seen_zeros, axis=1)
        if act_order:
            g_idx = (invperm // group_size).astype(np.int32)
        else:
            g_idx = (np.arange(cols) // group_size).astype(np.int32)
    return Q, out_scale.astype(F32), out_zero.astype(F32), g_idx


def gptq_codes(Q, scale, zero, g_idx, bits):
    """Integer codes of a GPTQ result: clamp(round(Q / scale) + zero, 0, maxq) (2.4 identity)."""
    s = scale[:, g_idx]
    z = zero[:, g_idx]
    return np.clip(np.round(Q / s) + z, 0, 2**bits - 1).astype(np.int32)


# --------------------------------------------------------------------------- AWQ (3.1-3.5)


def awq_pseudo_quantize(w, bits=4, group_size=128):
    """llm-awq pseudo_quantize_tensor, zero_point=True: raw min/max per group (not extended to
    0), scale = clamp(max - min, 1e-5) / maxq, zero = clamp(-round(min / scale), 0, maxq)."""
    w = np.asarray(w, F32)
    shape = w.shape
    gs = shape[-1] if group_size is None or group_size <= 0 else group_size
    g = w.reshape(-1, gs)
    maxq = F32(2**bits - 1)
    max_val = g.max(axis=1, keepdims=True)
    min_val = g.min(axis=1, keepdims=True)
    scales = (np.maximum(max_val - min_val, F32(1e-5)) / maxq).astype(F32)
    zeros = np.clip(-np.round(min_val / scales), F32(0), maxq).astype(F32)
    q = (np.clip(np.round(g / scales) + zeros, F32(0), maxq) - zeros) * scales
    return q.astype(F32).reshape(shape)


awq_rtn = awq_pseudo_quantize


def awq_w_mean(W, group_size, exact=False):
    """AutoAWQ duo_scaling statistic: mean over rows of |w| / (max|w| of its group + 1e-6)."""
    W = np.asarray(W, F32)
    gs = W.shape[1] if group_size is None or group_size <= 0 else group_size
    g = np.abs(W.reshape(-1, gs))
    ws = (g / (g.max(axis=1, keepdims=True) + F32(1e-6))).reshape(W.shape)
    if exact:
        return ws.astype(np.float64).mean(axis=0).astype(F32)
    return ws.mean(axis=0, dtype=F32)


def awq_clip_search(Ws, Xs, bits=4, group_size=128, max_shrink=0.5, clip_grid=20,
                    n_sample_token=512):
    """auto_clip_layer on scaled weights Ws (co, ci) and scaled inputs Xs (n, ci).
    Returns best_max (co, G) float32."""
    Ws = np.asarray(Ws, F32)
    Xs = np.asarray(Xs, F32)
    co, ci = Ws.shape
    gs = ci if group_size is None or group_size <= 0 else group_size
    G = ci // gs
    step = max(1, Xs.shape[0] // n_sample_token)  # AutoAWQ; llm-awq needs n >= 512
    x = Xs[0::step].reshape(-1, G, gs)  # (n', G, gs)
    w = Ws.reshape(co, G, gs)
    best = np.empty((co, G), F32)
    ob = 256 if co % 256 == 0 else 64
    if co % ob:
        ob = co  # reference requires co % 64 == 0; batching does not change the result
    for b0 in range(0, co, ob):
        wb = w[b0:b0 + ob]  # (b, G, gs)
        org_max = np.abs(wb).max(axis=-1, keepdims=True)  # (b, G, 1)
        best_max = org_max.copy()
        min_err = np.full(org_max.shape, F32(1e9), F32)
        # org_out[b, n, G] = sum_k x[n, G, k] * w[b, G, k]
        org_out = np.einsum("ngk,bgk->bng", x, wb, dtype=F32)
        for i_s in range(int(max_shrink * clip_grid)):
            mx = (org_max * F32(1 - i_s / clip_grid)).astype(F32)
            cw = np.clip(wb, -mx, mx)
            qw = awq_pseudo_quantize(cw, bits, gs)
            cur = np.einsum("ngk,bgk->bng", x, qw, dtype=F32)
            err = ((cur - org_out) ** 2).mean(axis=1, dtype=F32)[..., None]  # (b, G, 1)
            better = err < min_err
            min_err = np.where(better, err, min_err)
            best_max = np.where(better, mx, best_max)
        best[b0:b0 + ob] = best_max[..., 0]
    return best


def awq_search(W, X, bits=4, group_size=128, n_grid=20, duo_scaling=False, clip=True,
               max_shrink=0.5, clip_grid=20, n_sample_token=512, x_mean=None,
               exact_stats=False):
    """AWQ scale search (+ clip search) for ONE linear whose inspected module is the linear
    itself (loss = mean of (X W^T - X Wq^T)^2). Returns dict scales, best_ratio, clip_max,
    W_eff (= Q(clip(W s)) / s), losses (per grid point). x_mean: optional precomputed
    activation statistic (default: float32 mean of |X| over tokens, as llm-awq).

    exact_stats=True takes the statistics and powers at float64 precision rounded once to
    float32 (x_mean, w_mean accumulated in float64; x^r as the correctly rounded float32 of the
    float64 power) instead of NumPy's float32 pairwise sums and SIMD powf (1-2 ulp, like torch's
    Sleef pow). Same algorithm; used to isolate the algorithm from last-ulp differences."""
    W = np.asarray(W, F32)
    X = np.asarray(X, F32)
    if x_mean is None:
        if exact_stats:
            x_mean = np.abs(X).astype(np.float64).mean(axis=0).astype(F32)
        else:
            x_mean = np.abs(X).mean(axis=0, dtype=F32)
    x_mean = np.asarray(x_mean, F32)
    w_mean = awq_w_mean(W, group_size, exact_stats) if duo_scaling else None

    def powf(b, e):  # b ** e with b float32 array, e a float32 exponent
        if exact_stats:
            return np.power(b.astype(np.float64), np.float64(e)).astype(F32)
        return np.power(b, e)

    org_out = X @ W.T
    best, best_s, best_r = np.inf, None, -1
    losses = []
    for r in range(n_grid):
        ratio = r * 1 / n_grid
        if duo_scaling:
            # torch: pow(tensor, python float) uses the exponent as float32: f32(1 - ratio)
            s = powf(x_mean, F32(ratio)) / (powf(w_mean, F32(1 - ratio)) + F32(1e-4))
            s = np.maximum(s, F32(1e-4)).astype(F32)
        else:
            s = np.maximum(powf(x_mean, F32(ratio)), F32(1e-4)).astype(F32)
        s = (s / np.sqrt(s.max() * s.min())).astype(F32)
        s[~np.isfinite(s)] = 1  # AutoAWQ
        Wq = awq_pseudo_quantize(W * s[None, :], bits, group_size) / s[None, :]
        out = X @ Wq.T
        loss = float(((org_out - out) ** 2).mean(dtype=F32))
        losses.append(loss)
        if loss < best:
            best, best_s, best_r = loss, s, r
    if best_s is None:
        raise RuntimeError("awq: no finite loss")
    s = best_s
    Ws = (W * s[None, :]).astype(F32)
    gs = W.shape[1] if group_size is None or group_size <= 0 else group_size
    G = W.shape[1] // gs
    if clip:
        Xs = (X / s[None, :]).astype(F32)
        clip_max = awq_clip_search(Ws, Xs, bits, gs, max_shrink, clip_grid, n_sample_token)
        m = np.repeat(clip_max, gs, axis=1)
        Wc = np.clip(Ws, -m, m)
    else:
        clip_max = np.abs(Ws).reshape(W.shape[0], G, gs).max(axis=-1)
        Wc = Ws
    W_eff = (awq_pseudo_quantize(Wc, bits, gs) / s[None, :]).astype(F32)
    return {"scales": s, "best_ratio": best_r / n_grid, "clip_max": clip_max, "W_eff": W_eff,
            "losses": np.array(losses)}


# --------------------------------------------------------------------------- SmoothQuant (4)


def act_absmax(X):
    return np.abs(np.asarray(X, F32)).max(axis=0)


def smoothquant_scales(act_absmax_, W, alpha=0.5):
    """smooth_ln_fcs: s = clamp(act_max^a / clamp(max_o |W|, 1e-5)^(1-a), 1e-5)."""
    w_max = np.maximum(np.abs(np.asarray(W, F32)).max(axis=0), F32(1e-5))
    a = F32(alpha)
    s = np.power(np.asarray(act_absmax_, F32), a) / np.power(w_max, F32(1) - a)
    return np.maximum(s, F32(1e-5)).astype(F32)


def fq_per_channel(M):
    """fake_quant per row (weights per output channel / activations per token), int8 [-127,127]."""
    M = np.asarray(M, F32)
    d = np.maximum(np.abs(M).max(axis=1, keepdims=True), F32(1e-5)) / F32(127)
    return (np.round(M / d) * d).astype(F32)


def fq_per_tensor(M):
    M = np.asarray(M, F32)
    d = np.maximum(np.abs(M).max(), F32(1e-5)) / F32(127)
    return (np.round(M / d) * d).astype(F32)


def fake_w8a8(W, X, act="per_token"):
    """y_q = fq_act(X) fq_w(W)^T with per-channel weights (fake_quant.py W8A8Linear)."""
    if act == "per_token":
        Xq = fq_per_channel(X)
    elif act == "per_tensor":
        Xq = fq_per_tensor(X)
    else:
        raise ValueError(act)
    return Xq @ fq_per_channel(W).T


def smoothquant_ratio(W, X, alpha=0.5, act="per_token", scales=None):
    """err(W8A8 after smoothing) / err(naive W8A8); err = ||y_q - X W^T||_F^2 (float64 Y)."""
    W = np.asarray(W, F32)
    X = np.asarray(X, F32)
    Y = X.astype(np.float64) @ W.astype(np.float64).T
    s = smoothquant_scales(act_absmax(X), W, alpha) if scales is None else scales
    e0 = np.sum((fake_w8a8(W, X, act).astype(np.float64) - Y) ** 2)
    e1 = np.sum((fake_w8a8(W * s[None, :], X / s[None, :], act).astype(np.float64) - Y) ** 2)
    return float(e1 / e0), float(e0 / np.sum(Y**2)), float(e1 / np.sum(Y**2))
