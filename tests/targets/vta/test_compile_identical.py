"""The compiled output does not change when the compiler gets faster.

Small zoo networks are compiled for vta on the default presets and saved; the SHA-256 of each
artifact's instruction streams, micro-op images, program and kernel JSON, the quantised graph
and every constant array (weights, biases: the DRAM image's contents) is compared with the
digest pinned below.

The pinned digests were produced BEFORE the compile-speed work (tree at commit
7b7d651, no speed changes applied) by running this file as a script:

    python tests/targets/vta/test_compile_identical.py

which prints the DIGESTS table. A change to what the compiler emits (a different tile choice,
instruction order, packing) is meant to fail here; if it is intended, regenerate the table the
same way and say why in the commit.
"""
from __future__ import annotations

import hashlib
import json
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

import retarget
from retarget import zoo
from retarget.frontend.onnx import import_model
from retarget.passes.calibrate import random_samples

NETS = {
    "resnet18": dict(size=32, width=0.25),
    "resnet18@64": dict(size=64, width=0.5),
    "mobilenet_v1": dict(size=32, width=0.5),
    "googlenet": dict(size=48, width=0.25),
}
PRESETS = ("pynq", "1x32", "2x16", "pynq_alu")


def _graph(key: str):
    name = key.split("@")[0]
    return import_model(zoo.build(name, num_classes=10, seed=0, **NETS[key]))


def _calibration(graph):
    return random_samples(graph, 2, seed=1)


def _array_digest(h, name: str, a: np.ndarray) -> None:
    h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
    h.update(np.ascontiguousarray(a).tobytes())


def artifact_digest(key: str, preset: str) -> str:
    """SHA-256 over the saved artifact's kernel files, graph and arrays (file contents; npz
    files by their arrays, so the zip container's metadata does not count)."""
    g = _graph(key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = retarget.compile(g, f"vta:{preset}", calibration=_calibration(g))
    h = hashlib.sha256()
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        m.save(root)
        m.close()
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root).as_posix()
            if rel == "manifest.json":
                # the manifest's own hashes would count the npz containers; its regions and
                # report are hashed as JSON
                doc = json.loads(path.read_text())
                doc.pop("files", None)
                h.update(rel.encode())
                h.update(json.dumps(doc, sort_keys=True).encode())
            elif path.suffix == ".npz":
                with np.load(path, allow_pickle=False) as z:
                    for k in sorted(z.files):
                        _array_digest(h, f"{rel}/{k}", z[k])
            else:
                h.update(rel.encode())
                h.update(path.read_bytes())
    return h.hexdigest()


# Produced by `python tests/targets/vta/test_compile_identical.py` before the compile-speed changes.
DIGESTS = {
    ('resnet18', 'pynq'):
        '205278820f8dec515fcc6a68d9a75b6c9cca359d6bf8433804d20bd876376e5d',
    ('resnet18', '1x32'):
        'd6fd2956b75dfe77a066852b06c3026afd4cbce5531f1c5e4147021eeba9bf86',
    ('resnet18', '2x16'):
        '9bee42c7bb74dadb42dc3ecc87e9d817e36ff34ff27f0e76ff08ad840765702f',
    ('resnet18', 'pynq_alu'):
        'b19588a7cb8d9eb2c1a77e1b1f6d40fc05daf01cd252a2b0f744631d904449ba',
    ('resnet18@64', 'pynq'):
        '976b0c34f90d88801147b38849c5f135c022809c39bb5eeaee525518e40ebd68',
    ('resnet18@64', '1x32'):
        '59b08266fe77c96700707cfe65733d81f894149a2a931d295347591d0e928c18',
    ('resnet18@64', '2x16'):
        'd02210495ecf4b1ca71f4da3033cf0b884f21a55e2e75264aefc3cecd3ad5f72',
    ('resnet18@64', 'pynq_alu'):
        'e95e54c6593d7b5960c6e46fbd0cf173cecb75e0b9c4145843a19f9346c90114',
    ('mobilenet_v1', 'pynq'):
        'c961c58040c4bd126ae6e0343fad5035a46634f8e4845632b4ce3ae4d07ccb02',
    ('mobilenet_v1', '1x32'):
        'ff3d67860ff23d883270969b193e7608651d3863a7eae433b3d97fbe5ce16305',
    ('mobilenet_v1', '2x16'):
        'a78ec37bec1926dc76317baa2bbea835e0ac60cd4212a5e9af8cac156b548e63',
    ('mobilenet_v1', 'pynq_alu'):
        '24ec2f7b2de1dc77987118462d5ac53ec1aa136cb52741a4844a75f89a38e5ec',
    ('googlenet', 'pynq'):
        'eb805af80c99d466b8bed28f2315050568c2942452a02b3d6bef43fcff94aaf7',
    ('googlenet', '1x32'):
        'e45bb0f48052e59cd417e731f6951dc53ca37d6be4b325b4efa91624eef2073d',
    ('googlenet', '2x16'):
        'edd12a00934af57292d22bdfabb9e01f832fd895bfdb8443fe52af01cb9adb83',
    ('googlenet', 'pynq_alu'):
        'd9a16943d2f425b18be73248cdc39a0859024c77e4c2ba7a2508d30b06f30c4d',
}


@pytest.mark.parametrize("key,preset", sorted(DIGESTS))
def test_compiled_artifact_unchanged(key, preset):
    assert artifact_digest(key, preset) == DIGESTS[key, preset]


def test_every_case_pinned():
    assert set(DIGESTS) == {(k, p) for k in NETS for p in PRESETS}


if __name__ == "__main__":
    print("DIGESTS = {")
    for k in NETS:
        for p in PRESETS:
            print(f"    ({k!r}, {p!r}):\n        {artifact_digest(k, p)!r},", flush=True)
    print("}")
