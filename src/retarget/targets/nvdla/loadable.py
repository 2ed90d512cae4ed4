"""The loadable: what the nvdla compiler writes and the runtime loads (docs/nvdla.md has the
byte layout). Like NVDLA's own loadable it is lists, not code: hardware-layer descriptors with
their dependencies, a memory list, an address list (named tensors inside those memories) and
the weight blob; nothing in it is executed on the host.

File layout (little-endian): an 24-byte header

    magic "RTNVDLA\\0" | u16 version | u16 section count | u32 body bytes | u32 CRC-32 of body
    | u32 reserved

then the body, a sequence of sections `tag (4 ASCII bytes) | u32 length | payload` padded to
8 bytes: HWCF (the hardware fields it was compiled for, JSON), STRS (string table), MEMS
(memory list), ADDR (address list), LAYR (fixed-size layer descriptors), BIND (region inputs
and outputs -> addresses), BLOB (the content of the weights memory).
"""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass

import numpy as np

MAGIC = b"RTNVDLA\0"
VERSION = 1
HEADER = struct.Struct("<8sHHIII")
SECTION = struct.Struct("<4sI")
ALIGN = 32                      # every address in a memory is aligned to this (bytes)

# Engines a hardware layer runs on.
CONV, SDP, PDP, CDP = 1, 2, 3, 4
ENGINES = {CONV: "CONV", SDP: "SDP", PDP: "PDP", CDP: "CDP"}
# flags
HAS_CVT, HAS_EW, HALF_EVEN, MAX_POOL, SUM_POOL = 1, 2, 4, 8, 16
NONE = -1                       # an absent address or dependency

# One hardware layer: the convolution core + SDP (CONV), SDP alone, PDP or CDP. Every field is an
# int32; address fields hold an address-list id in the loadable and a device byte address in
# the relocated stream the device runs. A layer's dependencies (the layers that write what it
# reads) are dependencies[dep_start : dep_start + dep_count].
LAYER_FIELDS = (
    "op", "flags", "dep_start", "dep_count", "name", "value",
    "src", "src_n", "src_c", "src_h", "src_w",
    "dst", "dst_c", "dst_h", "dst_w", "dst_ch0", "dst_ctotal",
    "wgt", "kernel_h", "kernel_w", "stride_h", "stride_w",
    "pad_t", "pad_l", "pad_b", "pad_r", "groups",
    "bias", "cvt_mul", "cvt_shift", "cvt_m", "cvt_s", "cvt_lo", "cvt_hi",
    "ew", "ew_mul_a", "ew_mul_b", "ew_shift", "ew_lo", "ew_hi",
    "lut", "lut_shift",               # CDP: its lookup table (an address) and index shift
    "reserved0", "reserved1", "reserved2", "reserved3", "reserved4", "reserved5")
LAYER_DTYPE = np.dtype([(f, "<i4") for f in LAYER_FIELDS])
LAYER_BYTES = LAYER_DTYPE.itemsize
ADDRESS_FIELDS = ("src", "dst", "wgt", "bias", "cvt_mul", "cvt_shift", "ew", "lut")

MEMORY_KINDS = ("weights", "io", "scratch")
DTYPES = ("int8", "int32")
MEM_DTYPE = np.dtype([("id", "<i4"), ("name", "<i4"), ("kind", "<i4"), ("size", "<i4"),
                      ("offset", "<i4")])
ADDR_DTYPE = np.dtype([("id", "<i4"), ("name", "<i4"), ("memory", "<i4"), ("offset", "<i4"),
                       ("dtype", "<i4"), ("ndim", "<i4"), ("dims", "<i4", (4,))])
BIND_DTYPE = np.dtype([("direction", "<i4"), ("value", "<i4"), ("address", "<i4")])


class LoadableError(ValueError):
    """A loadable that cannot be read: wrong magic or version, damaged, or inconsistent."""


@dataclass(frozen=True, slots=True)
class Memory:
    """A block of device memory: the weights (filled from the blob), the region's inputs and
    outputs (io), or intermediate feature maps (scratch). `offset`: where the runtime places
    it in the program's image."""
    id: int
    name: str
    kind: str
    size: int
    offset: int


@dataclass(frozen=True, slots=True)
class Address:
    """A named tensor inside a memory: `offset` bytes into it, C-ordered, NCHW for maps."""
    id: int
    name: str
    memory: int
    offset: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(slots=True)
class Loadable:
    config_name: str
    hardware: dict[str, float]
    memories: list[Memory]
    addresses: list[Address]
    layers: np.ndarray                       # LAYER_DTYPE records, in execution order
    strings: list[str]                       # names the descriptors refer to by index
    inputs: list[tuple[str, int]]            # region input value -> address id
    outputs: list[tuple[str, int]]
    dependencies: np.ndarray                 # int32 layer indices (see LAYER_FIELDS)
    blob: bytes = b""                        # content of the weights memory
    nbytes: int = 0                          # size of the file it was read from (0: built)

    def deps(self, i: int) -> list[int]:
        rec = self.layers[i]
        return [int(d) for d in
                self.dependencies[rec["dep_start"]:rec["dep_start"] + rec["dep_count"]]]

    # ---- lookups ----------------------------------------------------------------------------
    def string(self, i: int) -> str:
        return self.strings[i] if 0 <= i < len(self.strings) else f"<string {i}>"

    def image_offset(self, address_id: int) -> int:
        a = self.addresses[address_id]
        return self.memories[a.memory].offset + a.offset

    @property
    def image_bytes(self) -> int:
        return max((m.offset + m.size for m in self.memories), default=0)

    def weights_memory(self) -> Memory:
        return next(m for m in self.memories if m.kind == "weights")

    # ---- bytes ------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        # the tables first: naming their entries may add to the string table
        mems = np.array([(m.id, self._sid(m.name), MEMORY_KINDS.index(m.kind), m.size,
                          m.offset) for m in self.memories], MEM_DTYPE)
        addrs = np.array([(a.id, self._sid(a.name), a.memory, a.offset, DTYPES.index(a.dtype),
                           len(a.shape), tuple(a.shape) + (0,) * (4 - len(a.shape)))
                          for a in self.addresses], ADDR_DTYPE)
        binds = np.array([(0, self._sid(v), a) for v, a in self.inputs]
                         + [(1, self._sid(v), a) for v, a in self.outputs], BIND_DTYPE)
        strs = b"".join(struct.pack("<I", len(s.encode())) + s.encode() for s in self.strings)
        sections = [
            (b"HWCF", json.dumps({"name": self.config_name, "hardware": self.hardware},
                                 sort_keys=True).encode()),
            (b"STRS", struct.pack("<I", len(self.strings)) + strs),
            (b"MEMS", mems.tobytes()),
            (b"ADDR", addrs.tobytes()),
            (b"LAYR", np.ascontiguousarray(self.layers, LAYER_DTYPE).tobytes()),
            (b"DEPS", np.asarray(self.dependencies, "<i4").tobytes()),
            (b"BIND", binds.tobytes()),
            (b"BLOB", bytes(self.blob)),
        ]
        body = b"".join(SECTION.pack(tag, len(p)) + p + b"\0" * (-len(p) % 8)
                        for tag, p in sections)
        return HEADER.pack(MAGIC, VERSION, len(sections), len(body),
                           zlib.crc32(body), 0) + body

    def _sid(self, s: str) -> int:
        try:
            return self.strings.index(s)
        except ValueError:
            self.strings.append(s)
            return len(self.strings) - 1

    @staticmethod
    def from_bytes(data: bytes) -> "Loadable":
        return _parse(bytes(data))


def _parse(data: bytes) -> Loadable:
    if len(data) < HEADER.size:
        raise LoadableError(f"{len(data)} bytes is shorter than the {HEADER.size}-byte header")
    magic, version, count, body_len, crc, _ = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise LoadableError(f"not an nvdla loadable (magic {magic!r}, expected {MAGIC!r})")
    if version != VERSION:
        raise LoadableError(f"loadable version {version}; this runtime reads version {VERSION}")
    body = data[HEADER.size:]
    if len(body) != body_len:
        raise LoadableError(f"body is {len(body)} bytes, the header says {body_len}: truncated")
    if zlib.crc32(body) != crc:
        raise LoadableError("CRC-32 mismatch: the loadable is damaged")
    sections, pos = {}, 0
    for _ in range(count):
        if pos + SECTION.size > len(body):
            raise LoadableError("section table runs past the end of the body")
        tag, n = SECTION.unpack_from(body, pos)
        pos += SECTION.size
        if pos + n > len(body):
            raise LoadableError(f"section {tag!r} of {n} bytes runs past the end of the body")
        sections[tag] = body[pos:pos + n]
        pos += n + (-n % 8)
    need = (b"HWCF", b"STRS", b"MEMS", b"ADDR", b"LAYR", b"DEPS", b"BIND", b"BLOB")
    missing = [t.decode() for t in need if t not in sections]
    if missing:
        raise LoadableError(f"sections missing: {', '.join(missing)}")
    try:
        hw = json.loads(sections[b"HWCF"])
        strings = _strings(sections[b"STRS"])
        mems = _records(sections[b"MEMS"], MEM_DTYPE, "MEMS")
        addrs = _records(sections[b"ADDR"], ADDR_DTYPE, "ADDR")
        layers = _records(sections[b"LAYR"], LAYER_DTYPE, "LAYR").copy()
        deps = _records(sections[b"DEPS"], np.dtype("<i4"), "DEPS").astype(np.int32)
        binds = _records(sections[b"BIND"], BIND_DTYPE, "BIND")

        def s(i):
            if not 0 <= i < len(strings):
                raise LoadableError(f"string index {i} outside the table of {len(strings)}")
            return strings[i]
        def pick(table, i, what):
            if not 0 <= i < len(table):
                raise LoadableError(f"{what} code {i}; known: {', '.join(map(str, table))}")
            return table[i]
        memories = [Memory(int(m["id"]), s(m["name"]), pick(MEMORY_KINDS, m["kind"], "memory kind"),
                           int(m["size"]), int(m["offset"])) for m in mems]
        addresses = [Address(int(a["id"]), s(a["name"]), int(a["memory"]), int(a["offset"]),
                             pick(DTYPES, a["dtype"], "dtype"),
                             tuple(int(d) for d in a["dims"][:a["ndim"]]))
                     for a in addrs if 0 <= a["ndim"] <= 4 or _bad_rank(a["ndim"])]
        if binds.size and not np.isin(binds["direction"], (0, 1)).all():
            raise LoadableError(f"binding directions {sorted(set(binds['direction']))}: "
                                f"0 (input) or 1 (output)")
        if not isinstance(hw, dict) or not isinstance(hw.get("hardware"), dict):
            raise LoadableError("section HWCF is not {\"name\": ..., \"hardware\": {...}}")
        ld = Loadable(str(hw["name"]), dict(hw["hardware"]), memories, addresses, layers,
                      strings, [(s(b["value"]), int(b["address"])) for b in binds
                                if b["direction"] == 0],
                      [(s(b["value"]), int(b["address"])) for b in binds if b["direction"] == 1],
                      deps, sections[b"BLOB"], len(data))
    except (KeyError, IndexError, TypeError, ValueError, struct.error) as e:
        # ValueError covers JSON and UTF-8 decoding; a CRC only says the bytes are the ones
        # written, not that whoever wrote them wrote a well-formed loadable
        raise LoadableError(f"malformed section ({type(e).__name__}: {e})") from None
    validate(ld)
    return ld


def _bad_rank(rank: int) -> bool:
    raise LoadableError(f"address of rank {rank}; ranks 0..4")


def _strings(payload: bytes) -> list[str]:
    (n,), pos, out = struct.unpack_from("<I", payload), 4, []
    for _ in range(n):
        if pos + 4 > len(payload):
            raise LoadableError("string table truncated")
        (k,) = struct.unpack_from("<I", payload, pos)
        if pos + 4 + k > len(payload):
            raise LoadableError("string table truncated")
        out.append(payload[pos + 4:pos + 4 + k].decode("utf-8", "replace"))
        pos += 4 + k
    return out


def _records(payload: bytes, dtype: np.dtype, tag: str) -> np.ndarray:
    if len(payload) % dtype.itemsize:
        raise LoadableError(f"section {tag}: {len(payload)} bytes is not a whole number of "
                            f"{dtype.itemsize}-byte records")
    return np.frombuffer(payload, dtype)


def validate(ld: Loadable) -> None:
    """Refuse a loadable whose lists do not agree: ids in order, every address inside its
    memory, every descriptor's addresses and dependencies known, the blob the weights size."""
    for i, m in enumerate(ld.memories):
        if m.id != i or m.size < 0 or m.offset < 0:
            raise LoadableError(f"memory {i} ({m.name!r}): id {m.id}, size {m.size}, offset "
                                f"{m.offset}")
    for i, a in enumerate(ld.addresses):
        if a.id != i or not 0 <= a.memory < len(ld.memories):
            raise LoadableError(f"address {i} ({a.name!r}): id {a.id}, memory {a.memory}")
        if a.offset < 0 or min(a.shape, default=1) <= 0 or \
                a.offset + a.nbytes > ld.memories[a.memory].size:
            raise LoadableError(f"address {a.name!r} ({a.dtype} {list(a.shape)} at {a.offset}) "
                                f"does not lie within memory {ld.memories[a.memory].name!r} of "
                                f"{ld.memories[a.memory].size} bytes")
    weights = [m for m in ld.memories if m.kind == "weights"]
    if len(weights) != 1 or weights[0].size != len(ld.blob):
        raise LoadableError(f"the weight blob is {len(ld.blob)} bytes; the weights memory is "
                            f"{weights[0].size if weights else 'missing'}")
    n = len(ld.addresses)
    for i, rec in enumerate(ld.layers):
        if rec["op"] not in ENGINES:
            raise LoadableError(f"layer {i}: unknown engine {rec['op']}")
        for f in ADDRESS_FIELDS:
            if rec[f] != NONE and not 0 <= rec[f] < n:
                raise LoadableError(f"layer {i} ({ld.string(rec['name'])}): {f} names address "
                                    f"{rec[f]} of {n}")
        start, count = int(rec["dep_start"]), int(rec["dep_count"])
        if start < 0 or count < 0 or start + count > len(ld.dependencies):
            raise LoadableError(f"layer {i} ({ld.string(rec['name'])}): dependencies "
                                f"[{start}, +{count}) outside the list of "
                                f"{len(ld.dependencies)}")
        bad = [d for d in ld.deps(i) if not 0 <= d < i]
        if bad:
            raise LoadableError(f"layer {i} ({ld.string(rec['name'])}): depends on {bad}, "
                                f"not earlier layers")
    for v, a in ld.inputs + ld.outputs:
        if not 0 <= a < n:
            raise LoadableError(f"binding {v!r} names address {a} of {n}")


__all__ = ["ADDRESS_FIELDS", "Address", "CDP", "CONV", "ENGINES", "HAS_CVT", "HAS_EW", "HALF_EVEN",
           "LAYER_BYTES", "LAYER_DTYPE", "LAYER_FIELDS", "Loadable", "LoadableError", "MAX_POOL",
           "Memory", "NONE", "PDP", "SDP", "SUM_POOL"]
