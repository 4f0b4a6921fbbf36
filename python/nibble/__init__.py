"""nibble: LLM weight quantization formats, kernels and calibration (Python bindings).

NumPy in, NumPy out::

    import numpy as np, nibble
    w = np.random.randn(4096, 4096).astype(np.float32)
    blocks = nibble.quantize(w, "q4_K")              # uint8 (rows, row_bytes)
    w2 = nibble.dequantize(blocks, "q4_K", w.shape)  # float32 (rows, cols)
    y = nibble.gemv(blocks, "q4_K", np.ones(4096, np.float32))
    q = nibble.nf4.quantize(w, blocksize=64)         # bitsandbytes-style NF4
    w3 = nibble.nf4.dequantize(q)
    p = nibble.pack(blocks, "q4_K")                  # packed layout: fast decode
    y2 = nibble.gemv(p, "q4_K", np.ones(4096, np.float32), packed=True)

Errors raised by the library are ``nibble.Error`` (a ``ValueError``); argument shape and dtype
problems raise ``ValueError``. Compute releases the GIL. ``threads=0`` uses every hardware
thread; ``isa="avx2"`` (etc.) forces an instruction set.
"""

from ._nibble import (  # noqa: F401
    Error,
    available_isas,
    best_isa,
    dequantize,
    format_info,
    formats,
    gemm,
    gemv,
    nf4,
    pack,
    packable,
    quantize,
    row_bytes,
    unpack,
)
from . import _nibble

for _name in getattr(_nibble, "_extras", []):
    globals()[_name] = getattr(_nibble, _name)

__all__ = [
    "Error", "available_isas", "best_isa", "dequantize", "format_info", "formats", "gemm", "gemv",
    "nf4", "pack", "packable", "quantize", "row_bytes", "unpack",
] + list(getattr(_nibble, "_extras", []))

__version__ = "0.1.0"
