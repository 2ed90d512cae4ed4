"""Module artifacts: save -> load -> run gives identical outputs; only JSON and .npz are
read; malformed or hostile artifacts fail with clear errors; the BYOC-style region export."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import retarget
from retarget.errors import ModelLoadError, TargetError
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.runtime.module import Module
from retarget.targets.registry import load_plugin

ROOT = Path(__file__).resolve().parents[2]


def toy():
    """The example target (examples/toy_accelerator.py), registered once per process."""
    return load_plugin(ROOT / "examples" / "toy_accelerator.py")


def small_net() -> Graph:
    """conv+relu -> add (cpu) -> flatten (cpu) -> gemm: two device regions and a cpu one."""
    rng = np.random.default_rng(0)
    x = Value("x", TensorType((1, 2, 4, 4), "float32"))
    w = constant("w", rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    b = constant("b", rng.standard_normal(3).astype(np.float32))
    fw = constant("fw", rng.standard_normal((5, 48)).astype(np.float32))
    c = Node("Conv", "conv", [x, w, b], [Value("c")], {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]})
    r = Node("Relu", "relu", [c.outputs[0]], [Value("r")])
    a = Node("Add", "add", [r.outputs[0], r.outputs[0]], [Value("a")])
    f = Node("Flatten", "flat", [a.outputs[0]], [Value("f")], {"axis": 1})
    g = Node("Gemm", "fc", [f.outputs[0], fw], [Value("y")], {"transB": 1})
    return Graph([c, r, a, f, g], [x], [g.outputs[0]])


X = {"x": np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float32)}


@pytest.fixture
def module():
    toy()
    return retarget.compile(small_net(), "toy", min_region_macs=0)


def test_save_load_run_identical(module, tmp_path):
    out = module.run(X)["y"]
    np.testing.assert_allclose(out, retarget.run(small_net(), X)["y"], rtol=1e-5, atol=1e-6)
    module.save(tmp_path / "m")
    names = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert names == ["graph.json", "graph.npz", "kernels", "manifest.json", "weights.npz"]
    loaded = Module.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.run(X)["y"], out)
    assert [r.name for r in loaded.regions] == [r.name for r in module.regions]
    assert loaded.report.to_dict() == module.report.to_dict()
    assert loaded.target.config == module.target.config


def test_manifest_records_target_and_kernels(module, tmp_path):
    module.save(tmp_path)
    man = json.loads((tmp_path / "manifest.json").read_text())
    assert man["format"] == "retarget-module" and man["version"] == 2
    assert man["target"] == {"name": "toy", "preset": None, "config": module.target.config_dict()}
    kernels = [r["kernel"] for r in man["regions"] if r["target"] == "toy"]
    assert kernels and all(k["kind"] == "toy.program" for k in kernels)
    # the Gemm without bias got a zero bias from lowering: stored under its region's prefix
    with np.load(tmp_path / "weights.npz", allow_pickle=False) as z:
        assert all("/" in k for k in z.files) and z.files


def test_unknown_kernel_kind_is_refused_not_imported(module, tmp_path):
    module.save(tmp_path)
    man = json.loads((tmp_path / "manifest.json").read_text())
    for r in man["regions"]:
        if "kernel" in r:
            r["kernel"]["kind"] = "os.system"
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(TargetError, match="no kernel kind 'os.system'"):
        Module.load(tmp_path)


def test_paths_in_manifest_stay_inside_the_artifact(module, tmp_path):
    module.save(tmp_path)
    man = json.loads((tmp_path / "manifest.json").read_text())
    man["graph"] = "../../etc/passwd"
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ModelLoadError, match="escapes the artifact directory"):
        Module.load(tmp_path)


def test_pickled_weights_are_refused(module, tmp_path):
    module.save(tmp_path)
    obj = np.empty(1, dtype=object)
    obj[0] = {"evil": 1}
    np.savez(tmp_path / "weights.npz", x=obj)   # a pickled object array
    with pytest.raises(ModelLoadError, match="weights.npz"):
        Module.load(tmp_path)


def test_malformed_artifacts(tmp_path):
    with pytest.raises(ModelLoadError, match="no manifest.json"):
        Module.load(tmp_path)
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        Module.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "retarget-module", "version": 99}))
    with pytest.raises(ModelLoadError, match="version 99"):
        Module.load(tmp_path)


def test_unregistered_target_fails_listing_known(module, tmp_path):
    module.save(tmp_path)
    man = json.loads((tmp_path / "manifest.json").read_text())
    man["target"]["name"] = "ghost"
    (tmp_path / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(ModelLoadError, match="target name 'ghost' is not a registered target "
                                             "\\(known: .*toy"):
        Module.load(tmp_path)


def test_export_regions_for_an_outside_compiler(module, tmp_path):
    path = module.export_regions(tmp_path / "regions.json")
    doc = json.loads(path.read_text())
    assert doc["format"] == "retarget.regions" and doc["target"] == "toy"
    assert [r["name"] for r in doc["regions"]] == [r.name for r in module.offloaded]
    first = doc["regions"][0]
    conv = first["nodes"][0]
    assert conv["op"] == "Conv" and conv["attrs"]["pads"] == [1, 1, 1, 1]
    assert conv["attrs"]["group"] == 1          # defaults filled in
    kinds = [i["kind"] for i in conv["inputs"]]
    assert kinds == ["input", "weight", "weight"]
    assert first["nodes"][1]["inputs"][0]["kind"] == "internal"   # the fused relu
    assert first["inputs"] == [{"name": "x", "shape": [1, 2, 4, 4], "dtype": "float32"}]
    with np.load(tmp_path / doc["weights"], allow_pickle=False) as z:
        np.testing.assert_array_equal(z[conv["inputs"][1]["weight"]], module.graph.value("w").const)
    with pytest.raises(Exception, match="must end in .json"):
        module.export_regions(tmp_path / "regions.txt")
