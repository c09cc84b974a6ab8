"""A small GGUF (v3) reader and writer for the fixture scripts and tests.

Reads the metadata of any GGUF file (every value type) and the tensor table;
writes a file of metadata plus f32 tensors. Written from the GGUF specification
(ggml's docs/gguf.md); quantised tensor data is read by kvtier itself, not here.
"""
from __future__ import annotations

import struct
from collections import OrderedDict

import numpy as np

MAGIC = b"GGUF"
VERSION = 3
ALIGNMENT = 32

# value type id -> struct format (scalars)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
U32, F32, BOOL = 4, 6, 7
GGML_F32 = 0


class Value:
    """A typed metadata value: `type` is the GGUF value type, `item` the element type of an array."""

    def __init__(self, type_: int, value, item: int | None = None):
        self.type, self.value, self.item = type_, value, item

    def __repr__(self):
        return f"Value({self.type}, {self.value!r:.60})"


def u32(v: int) -> Value:
    return Value(U32, int(v))


def f32(v: float) -> Value:
    return Value(F32, float(v))


def string(v: str) -> Value:
    return Value(STRING, v)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str:
        n = self.take("<Q")
        if self.pos + n > len(self.data):
            raise ValueError("GGUF string runs past the end of the file")
        s = self.data[self.pos:self.pos + n].decode("utf-8", errors="surrogateescape")
        self.pos += n
        return s

    def value(self, t: int):
        if t in _SCALARS:
            return self.take(_SCALARS[t])
        if t == STRING:
            return self.string()
        raise ValueError(f"GGUF value type {t} is not a scalar or string")

    def kv(self) -> tuple[str, Value]:
        key, t = self.string(), self.take("<I")
        if t != ARRAY:
            return key, Value(t, self.value(t))
        item, n = self.take("<I"), self.take("<Q")
        return key, Value(ARRAY, [self.value(item) for _ in range(n)], item)


def read(path: str) -> tuple[OrderedDict, list[dict]]:
    """(metadata, tensors): metadata maps key -> Value; each tensor is {name, shape (ne0 first), type, offset}."""
    with open(path, "rb") as f:
        data = f.read()
    r = _Reader(data)
    if data[:4] != MAGIC:
        raise ValueError(f"{path}: not a GGUF file")
    r.pos = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    if version not in (2, 3):
        raise ValueError(f"{path}: GGUF version {version} unsupported")
    meta = OrderedDict(r.kv() for _ in range(n_kv))
    tensors = []
    for _ in range(n_tensors):
        name, dims = r.string(), r.take("<I")
        shape = [r.take("<Q") for _ in range(dims)]
        tensors.append({"name": name, "shape": shape, "type": r.take("<I"), "offset": r.take("<Q")})
    return meta, tensors


def _pack_value(t: int, v) -> bytes:
    if t in _SCALARS:
        return struct.pack(_SCALARS[t], v)
    if t == STRING:
        b = v.encode("utf-8", errors="surrogateescape")
        return struct.pack("<Q", len(b)) + b
    raise ValueError(f"cannot write GGUF value type {t}")


def _pack_kv(key: str, v: Value) -> bytes:
    out = _pack_value(STRING, key) + struct.pack("<I", v.type)
    if v.type != ARRAY:
        return out + _pack_value(v.type, v.value)
    out += struct.pack("<IQ", v.item, len(v.value))
    return out + b"".join(_pack_value(v.item, x) for x in v.value)


def _pad(n: int) -> int:
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def write(path: str, meta: OrderedDict, tensors: list[tuple[str, np.ndarray]]) -> None:
    """Writes metadata and f32 tensors; an array of shape [rows][cols] is stored as GGUF ne = [cols, rows]."""
    meta = OrderedDict(meta)
    meta["general.alignment"] = u32(ALIGNMENT)
    head = bytearray(MAGIC + struct.pack("<IQQ", VERSION, len(tensors), len(meta)))
    for key, v in meta.items():
        head += _pack_kv(key, v)
    offset, blobs = 0, []
    for name, array in tensors:
        a = np.ascontiguousarray(array, dtype=np.float32)
        head += _pack_value(STRING, name) + struct.pack("<I", a.ndim)
        head += b"".join(struct.pack("<Q", d) for d in reversed(a.shape))
        head += struct.pack("<IQ", GGML_F32, offset)
        blobs.append(a.tobytes())
        offset += len(blobs[-1]) + _pad(len(blobs[-1]))
    with open(path, "wb") as f:
        f.write(head + b"\0" * _pad(len(head)))
        for blob in blobs:
            f.write(blob + b"\0" * _pad(len(blob)))
