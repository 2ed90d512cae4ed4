"""The loadable (loadable.py): what the compiler writes round-trips exactly; a damaged or
inconsistent one is refused with LoadableError naming what is wrong, before anything runs;
one built for another hardware config is refused by the target and the device."""
from __future__ import annotations

import json
import zlib
from dataclasses import replace

import numpy as np
import pytest

from retarget.errors import DeviceError, ModelLoadError, TargetError
from retarget.runtime.module import Module
from retarget.targets.nvdla.config import PRESETS
from retarget.targets.nvdla.device import NvdlaDevice
from retarget.targets.nvdla.loadable import (HEADER, MAGIC, MEM_DTYPE, SECTION, VERSION,
                                             Loadable, LoadableError, validate)
from retarget.targets.nvdla.program import NvdlaProgram
from retarget.targets.nvdla.target import NvdlaTarget


@pytest.fixture(scope="module")
def resnet(compiled):
    g, m = compiled("resnet18", "nv_small")
    # the region holding the convolutions (the largest)
    return max((m.kernels[r.name].program.loadable for r in m.offloaded),
               key=lambda ld: len(ld.layers))


@pytest.fixture
def data(resnet):
    return resnet.to_bytes()


def test_round_trip_is_exact(resnet):
    data = resnet.to_bytes()
    assert data == resnet.to_bytes()              # writing twice gives the same bytes
    ld = Loadable.from_bytes(data)
    assert ld.config_name == resnet.config_name == "nv_small"
    assert ld.hardware == resnet.hardware
    assert ld.memories == resnet.memories and ld.addresses == resnet.addresses
    assert ld.layers.dtype == resnet.layers.dtype
    np.testing.assert_array_equal(ld.layers, resnet.layers)
    np.testing.assert_array_equal(ld.dependencies, resnet.dependencies)
    assert ld.blob == resnet.blob and ld.strings == resnet.strings
    assert ld.inputs == resnet.inputs and ld.outputs == resnet.outputs
    assert [ld.deps(i) for i in range(len(ld.layers))] == \
        [resnet.deps(i) for i in range(len(resnet.layers))]
    assert ld.to_bytes() == data
    # the compiled loadable is not trivial: several layers, dependencies, a weight blob
    assert len(ld.layers) > 10 and len(ld.dependencies) > 0 and len(ld.blob) > 0


def _header(data: bytes, **change) -> bytes:
    names = ("magic", "version", "count", "body", "crc", "reserved")
    h = dict(zip(names, HEADER.unpack_from(data)))
    h.update(change)
    return HEADER.pack(*(h[k] for k in names)) + data[HEADER.size:]


def test_header_damage_is_refused(data):
    with pytest.raises(LoadableError, match="not an nvdla loadable"):
        Loadable.from_bytes(b"GGUF\0\0\0\0" + data[8:])
    with pytest.raises(LoadableError, match="not an nvdla loadable"):
        Loadable.from_bytes(_header(data, magic=b"RTNVDLA1"))
    with pytest.raises(LoadableError, match=f"loadable version 2; this runtime reads version "
                                            f"{VERSION}"):
        Loadable.from_bytes(_header(data, version=2))
    with pytest.raises(LoadableError, match="shorter than the 24-byte header"):
        Loadable.from_bytes(data[:10])
    with pytest.raises(LoadableError, match="shorter than the 24-byte header"):
        Loadable.from_bytes(b"")


@pytest.mark.parametrize("cut", [1, 8, 1000])
def test_a_truncated_body_is_refused(data, cut):
    with pytest.raises(LoadableError, match="truncated"):
        Loadable.from_bytes(data[:-cut])


def test_a_flipped_byte_anywhere_in_the_body_fails_the_crc(data):
    rng = np.random.default_rng(0)
    for pos in rng.integers(HEADER.size, len(data), 20):
        bad = bytearray(data)
        bad[pos] ^= 1 << int(rng.integers(8))
        with pytest.raises(LoadableError, match="CRC-32 mismatch"):
            Loadable.from_bytes(bytes(bad))
    bad = bytearray(data)
    bad[-1] ^= 0xFF                       # the last byte of the blob's padding / the blob
    with pytest.raises(LoadableError, match="CRC-32 mismatch"):
        Loadable.from_bytes(bytes(bad))


def _copy(ld: Loadable, **change) -> Loadable:
    fields = dict(config_name=ld.config_name, hardware=dict(ld.hardware),
                  memories=list(ld.memories), addresses=list(ld.addresses),
                  layers=ld.layers.copy(), strings=list(ld.strings), inputs=list(ld.inputs),
                  outputs=list(ld.outputs), dependencies=ld.dependencies.copy(), blob=ld.blob)
    fields.update(change)
    return Loadable(**fields)


def _refused(ld: Loadable, pattern: str) -> None:
    """Refused both by validate() and by from_bytes() of its (CRC-correct) bytes."""
    with pytest.raises(LoadableError, match=pattern):
        validate(ld)
    with pytest.raises(LoadableError, match=pattern):
        Loadable.from_bytes(ld.to_bytes())


def test_an_address_outside_its_memory_is_refused(resnet):
    addrs = list(resnet.addresses)
    i = next(k for k, a in enumerate(addrs) if resnet.memories[a.memory].kind == "scratch")
    a = addrs[i]
    size = resnet.memories[a.memory].size
    addrs[i] = replace(a, offset=size - a.nbytes + 1)       # its last byte is one past the end
    _refused(_copy(resnet, addresses=addrs), rf"address '{a.name}' .* does not lie within "
                                             rf"memory 'scratch' of {size} bytes")
    addrs[i] = replace(a, offset=-32)
    _refused(_copy(resnet, addresses=addrs), "does not lie within memory")
    addrs[i] = replace(a, memory=len(resnet.memories))
    _refused(_copy(resnet, addresses=addrs), rf"address {i} .*memory {len(resnet.memories)}")
    addrs[i] = replace(a, shape=(1, 0, 4, 4))
    _refused(_copy(resnet, addresses=addrs), "does not lie within memory")


def test_a_layer_naming_an_unknown_address_is_refused(resnet):
    n = len(resnet.addresses)
    for f, bad in (("src", n), ("dst", n + 100), ("wgt", -5)):
        layers = resnet.layers.copy()
        layers[3][f] = bad
        _refused(_copy(resnet, layers=layers), rf"layer 3 \(.*\): {f} names address {bad} of {n}")


def test_a_dependency_on_a_later_layer_is_refused(resnet):
    i = next(k for k in range(len(resnet.layers)) if resnet.layers[k]["dep_count"] > 0)
    start = int(resnet.layers[i]["dep_start"])
    for target in (i, i + 1, len(resnet.layers) + 3, -2):
        deps = resnet.dependencies.copy()
        deps[start] = target
        _refused(_copy(resnet, dependencies=deps),
                 rf"layer {i} \(.*\): depends on \[{target}\], not earlier layers")
    layers = resnet.layers.copy()
    layers[i]["dep_count"] = len(resnet.dependencies) + 1
    _refused(_copy(resnet, layers=layers), rf"layer {i} .*dependencies .* outside the list")


def test_other_inconsistencies_are_refused(resnet):
    layers = resnet.layers.copy()
    layers[0]["op"] = 9
    _refused(_copy(resnet, layers=layers), "layer 0: unknown engine 9")
    _refused(_copy(resnet, blob=resnet.blob[:-1]), "the weight blob is")
    _refused(_copy(resnet, outputs=[(resnet.outputs[0][0], len(resnet.addresses))]),
             "binding .* names address")


# ---- damage that keeps the CRC right: still a LoadableError ------------------------------------

def _sections(data: bytes) -> list[tuple[bytes, bytes]]:
    count = HEADER.unpack_from(data)[2]
    body, pos, out = data[HEADER.size:], 0, []
    for _ in range(count):
        tag, n = SECTION.unpack_from(body, pos)
        out.append((tag, body[pos + SECTION.size:pos + SECTION.size + n]))
        pos += SECTION.size + n + (-n % 8)
    return out


def _rebuild(secs: list[tuple[bytes, bytes]]) -> bytes:
    """Sections -> a loadable whose header (count, length, CRC-32) is consistent."""
    body = b"".join(SECTION.pack(t, len(p)) + p + b"\0" * (-len(p) % 8) for t, p in secs)
    return HEADER.pack(MAGIC, VERSION, len(secs), len(body), zlib.crc32(body), 0) + body


def _with_section(data: bytes, tag: bytes, payload: bytes) -> bytes:
    return _rebuild([(t, payload if t == tag else p) for t, p in _sections(data)])


def _renamed(data: bytes, tag: bytes, new: bytes) -> bytes:
    return _rebuild([(new if t == tag else t, p) for t, p in _sections(data)])


def _memories_with_kind(data: bytes, kind: int) -> bytes:
    mems = np.frombuffer(dict(_sections(data))[b"MEMS"], MEM_DTYPE).copy()
    mems[-1]["kind"] = kind
    return _with_section(data, b"MEMS", mems.tobytes())


def test_the_section_rewriter_round_trips(data):
    assert _with_section(data, b"BIND", dict(_sections(data))[b"BIND"]) == data
    with pytest.raises(LoadableError, match="sections missing: DEPS"):
        Loadable.from_bytes(DAMAGE["a section missing"](data))


DAMAGE = {
    "a section missing": lambda d: _renamed(d, b"DEPS", b"XXXX"),
    "a LAYR section of partial records": lambda d: _with_section(
        d, b"LAYR", dict(_sections(d))[b"LAYR"][:-4]),
    "hardware JSON that is not JSON": lambda d: _with_section(d, b"HWCF", b"{not json"),
    "hardware JSON that is a list": lambda d: _with_section(d, b"HWCF", b"[1, 2]"),
    "a memory kind past the list": lambda d: _memories_with_kind(d, 3),
    # the four below escape as UnicodeDecodeError / struct.error / ValueError, or are
    # accepted (a negative kind indexes MEMORY_KINDS from its end): see the report
    "hardware bytes that are not UTF-8": lambda d: _with_section(d, b"HWCF", b"\xff{}"),
    "an empty string table": lambda d: _with_section(d, b"STRS", b""),
    "hardware fields that are not a mapping": lambda d: _with_section(
        d, b"HWCF", json.dumps({"name": "nv_small", "hardware": "fast"}).encode()),
    "a negative memory kind": lambda d: _memories_with_kind(d, -1),
}


@pytest.mark.parametrize("what", list(DAMAGE))
def test_crc_valid_malformed_sections_are_a_loadable_error(data, what):
    bad = DAMAGE[what](data)
    with pytest.raises(LoadableError):
        Loadable.from_bytes(bad)


# ---- the config a loadable was built for --------------------------------------------------------

def test_a_loadable_for_nv_small_is_refused_by_an_nv_full_target(compiled):
    g, m = compiled("tiny", "nv_small")
    region = m.offloaded[0]
    kernel = m.kernels[region.name]
    data = kernel.program.loadable.to_bytes()
    # the matching config loads it (whatever its compiler command) ...
    small = NvdlaTarget(replace(PRESETS["nv_small"], compiler="elsewhere {json} -o {out}"))
    assert small.load_binary(region, data, kernel.compiler_run).program.loadable.to_bytes() \
        == data
    # ... another refuses it, naming both
    with pytest.raises(TargetError, match=rf"nvdla region '{region.name}': the loadable was "
                                          rf"built for nv_small .*the target is nv_full"):
        NvdlaTarget(PRESETS["nv_full"]).load_binary(region, data, kernel.compiler_run)
    with pytest.raises(TargetError, match="the loadable was built for nv_small"):
        NvdlaTarget(replace(PRESETS["nv_small"], atomic_k=16, name="nv_small")).load_binary(
            region, data, kernel.compiler_run)
    # and the device of the other config will not load its program
    dev = NvdlaDevice(PRESETS["nv_full"], memory_bytes=1 << 22)
    with pytest.raises(DeviceError, match="program built for config 'nv_small'"):
        dev.load_program(NvdlaProgram(kernel.program.loadable))


def test_a_damaged_loadable_in_an_artifact_is_refused_on_load(compiled, tmp_path):
    g, m = compiled("tiny", "nv_full")
    m.save(tmp_path / "art")
    region = m.offloaded[0].name
    f = tmp_path / "art" / "kernels" / region / "program.loadable"
    bad = bytearray(f.read_bytes())
    bad[HEADER.size + 40] ^= 0x10
    f.write_bytes(bytes(bad))
    with pytest.raises(ModelLoadError, match="program.loadable"):
        Module.load(tmp_path / "art")
    with pytest.raises(ModelLoadError, match="CRC-32 mismatch"):
        Module.load(tmp_path / "art", verify=False)
