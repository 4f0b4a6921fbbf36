"""GGUF reading (bound when include/nibble/io/gguf.hpp exists), on files assembled here byte by
byte from the GGUF v3 specification."""

import struct

import numpy as np
import pytest

import nibble

pytestmark = pytest.mark.skipif("gguf" not in getattr(nibble, "__all__", []),
                                reason="gguf not bound")

U8, I32, U32, F32, BOOL, STRING, ARRAY, U64 = 0, 5, 4, 6, 7, 8, 9, 10


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return gstr(key) + struct.pack("<I", vtype) + payload


def build(tensors, align=32):
    """tensors: list of (name, ne list, ggml type id, bytes)."""
    meta = [
        kv("general.architecture", STRING, gstr("llama")),
        kv("llama.block_count", U32, struct.pack("<I", 2)),
        kv("test.scale", F32, struct.pack("<f", 0.5)),
        kv("test.flag", BOOL, struct.pack("<B", 1)),
        kv("test.big", U64, struct.pack("<Q", 2**63 + 5)),
        kv("test.ints", ARRAY, struct.pack("<IQ", I32, 3) + struct.pack("<3i", -1, 0, 7)),
        kv("test.words", ARRAY, struct.pack("<IQ", STRING, 2) + gstr("a") + gstr("bc")),
    ]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta)) + b"".join(meta)
    infos, data, off = b"", b"", 0
    for name, ne, ttype, raw in tensors:
        infos += gstr(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        infos += struct.pack("<IQ", ttype, off)
        pad = (-len(raw)) % align
        data += raw + b"\0" * pad
        off += len(raw) + pad
    out = head + infos
    out += b"\0" * ((-len(out)) % align)
    return out + data


def make():
    rng = np.random.default_rng(31)
    w = rng.standard_normal((3, 256)).astype(np.float32)
    q = nibble.quantize(w, "q4_K")
    b = rng.standard_normal(5).astype(np.float32)
    blob = build([("w", [256, 3], 12, q.tobytes()), ("b", [5], 0, b.tobytes())])
    return blob, q, b


def check(f, q, b):
    assert f.version == 3 and f.alignment == 32
    md = f.metadata
    assert list(md)[:2] == ["general.architecture", "llama.block_count"]
    assert md["general.architecture"] == "llama" and md["llama.block_count"] == 2
    assert md["test.scale"] == 0.5 and md["test.flag"] is True and md["test.big"] == 2**63 + 5
    assert md["test.ints"].dtype == np.int32 and list(md["test.ints"]) == [-1, 0, 7]
    assert md["test.words"] == ["a", "bc"]
    ts = f.tensors
    assert [t["name"] for t in ts] == ["w", "b"]
    assert ts[0]["shape"] == [256, 3] and ts[0]["type_name"] == "q4_K"
    assert ts[0]["nbytes"] == q.nbytes and ts[1]["offset"] % 32 == 0
    raw = f.tensor_data("w")
    assert np.array_equal(raw, q.reshape(-1)) and not raw.flags.writeable
    assert np.array_equal(f.tensor("w"), nibble.dequantize(q, "q4_K", (3, 256)))
    assert np.array_equal(f.tensor("b"), b)
    with pytest.raises(KeyError):
        f.tensor_data("nope")


def test_parse_bytes():
    blob, q, b = make()
    check(nibble.gguf.parse(blob), q, b)


def test_open_file(tmp_path):
    blob, q, b = make()
    p = tmp_path / "t.gguf"
    p.write_bytes(blob)
    f = nibble.gguf.open(str(p))
    check(f, q, b)
    data = f.tensor_data("w")
    del f  # the view keeps the mapping alive
    assert np.array_equal(data, q.reshape(-1))


def test_malformed():
    blob, _, _ = make()
    with pytest.raises(nibble.Error):
        nibble.gguf.parse(blob[:-40])  # truncated tensor data
    with pytest.raises(nibble.Error):
        nibble.gguf.parse(b"GGUX" + blob[4:])


def test_write_round_trip(tmp_path):
    """nibble.gguf.write: typed metadata, f32/f16 arrays and quantized bytes, read back by the
    checked reader; values, types, shapes and bytes must survive unchanged."""
    rng = np.random.default_rng(31)
    W = rng.standard_normal((4, 256)).astype(np.float32)
    H = rng.standard_normal((3, 32)).astype(np.float16)
    qb = nibble.quantize(W, "q4_K")
    meta = {
        "general.architecture": "llama",
        "llama.block_count": ("u32", 2),
        "llama.rope.freq_base": 10000.0,
        "x.i64": 2**40,
        "x.flag": True,
        "x.f64": ("f64", 0.1),
        "x.u16arr": np.array([1, 2, 65535], np.uint16),
        "x.strs": ["a", "bc"],
        "x.nested": [[1, 2], [3]],
    }
    p = str(tmp_path / "w.gguf")
    nibble.gguf.write(p, meta, [("w", W), ("h", H), ("q", qb.reshape(-1), "q4_K", (4, 256))])
    f = nibble.gguf.open(p)
    md = f.metadata
    assert list(md.keys()) == list(meta.keys())
    assert md["general.architecture"] == "llama" and md["llama.block_count"] == 2
    assert md["llama.rope.freq_base"] == np.float32(10000.0) and md["x.i64"] == 2**40
    assert md["x.flag"] is True and md["x.f64"] == 0.1
    assert np.array_equal(md["x.u16arr"], [1, 2, 65535]) and md["x.strs"] == ["a", "bc"]
    assert [list(a) for a in md["x.nested"]] == [[1, 2], [3]]
    t = {d["name"]: d for d in f.tensors}
    assert t["w"]["type_name"] == "f32" and list(t["w"]["shape"]) == [256, 4]
    assert t["h"]["type_name"] == "f16" and t["q"]["type_name"] == "q4_K"
    assert all(d["offset"] % 32 == 0 for d in f.tensors)
    assert np.array_equal(f.tensor("w"), W)
    assert np.array_equal(f.tensor("h"), H.astype(np.float32))
    assert np.array_equal(np.asarray(f.tensor_data("q")), qb.reshape(-1))
    assert np.array_equal(f.tensor("q"), nibble.dequantize(qb, "q4_K", W.shape))
    # Writing the same content again gives the same bytes.
    p2 = str(tmp_path / "w2.gguf")
    nibble.gguf.write(p2, meta, [("w", W), ("h", H), ("q", qb.reshape(-1), "q4_K", (4, 256))])
    assert open(p, "rb").read() == open(p2, "rb").read()


def test_write_rejects_bad_input(tmp_path):
    p = str(tmp_path / "bad.gguf")
    W = np.zeros((2, 256), np.float32)
    with pytest.raises(ValueError):
        nibble.gguf.write(p, {"k": ("u8", 300)}, [])  # out of range
    with pytest.raises(ValueError):
        nibble.gguf.write(p, {"k": ("q9", 1)}, [])  # unknown type name
    with pytest.raises(ValueError):
        nibble.gguf.write(p, {"k": []}, [])  # untyped empty list
    with pytest.raises(ValueError):
        nibble.gguf.write(p, {}, [("w", W.astype(np.int32))])  # plain arrays: f32/f16 only
    with pytest.raises(ValueError):
        nibble.gguf.write(p, {}, [("q", np.zeros(100, np.uint8), "q4_K", (2, 256))])  # size
    with pytest.raises(ValueError):
        nibble.gguf.write(p, {}, [("q", np.zeros(144, np.uint8), "q4_K", (1, 200))])  # row length
    import os
    assert not os.path.exists(p)
