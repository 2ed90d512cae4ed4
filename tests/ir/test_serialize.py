import json

import numpy as np
import pytest

from retarget.errors import GraphError, ModelLoadError
from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.printer import format_graph
from retarget.ir.serialize import arrays_path, load_graph, save_graph
from retarget.ir.types import TensorType
from retarget.ops.reference import run_graph


def _graph():
    x = Value("x", TensorType((2, 3), "float32"))
    c = constant("c", np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    k = constant("k", np.array([7, -3], np.int8))
    t = Value("t", TensorType((2, 3), "float32"))
    y = Value("y", TensorType((2, 3), "float32"))
    attrs = {"ints": [1, 2], "tup": (3, 4), "f": 0.1, "nan": float("nan"), "s": "linear",
             "arr": np.arange(6, dtype=np.int64).reshape(2, 3), "scalar": np.float32(2.5),
             "flag": True, "none": None, "nested": [[1.5, 2], ("a",)]}
    add = Node("Add", "add", [x, c], [t], attrs)
    relu = Node("Relu", "relu", [t], [y])
    keep = Node("Identity", "id", [k], [Value("kk", TensorType((2,), "int8"))])
    return Graph([add, relu, keep], [x], [y, keep.outputs[0]], name="g")


def test_round_trip_exact(tmp_path):
    g = _graph()
    save_graph(g, tmp_path / "net.json")
    assert arrays_path(tmp_path / "net.json").exists()
    h = load_graph(tmp_path / "net.json")
    assert format_graph(h) == format_graph(g)
    assert [n.name for n in h.nodes] == [n.name for n in g.nodes]
    a0, a1 = g.nodes[0].attrs, h.nodes[0].attrs
    assert set(a0) == set(a1)
    for key in ("ints", "tup", "f", "s", "flag", "none", "nested"):
        assert a1[key] == a0[key] and type(a1[key]) is type(a0[key]), key
    assert np.isnan(a1["nan"])
    assert a1["arr"].dtype == np.int64 and np.array_equal(a1["arr"], a0["arr"])
    assert isinstance(a1["scalar"], np.float32) and a1["scalar"] == a0["scalar"]
    for v0, v1 in zip(g.constants(), h.constants()):
        assert v0.name == v1.name and v0.const.dtype == v1.const.dtype
        assert np.array_equal(v0.const, v1.const)
    # The inputs/outputs of the loaded graph are the same objects its nodes use.
    assert h.nodes[0].inputs[0] is h.inputs[0] and h.nodes[1].outputs[0] is h.outputs[0]


def test_round_trip_runs_identically(tmp_path):
    g = _graph()
    for n in g.nodes:
        if n.op == "Add":
            n.attrs = {}
    save_graph(g, tmp_path / "g.json")
    h = load_graph(tmp_path / "g.json")
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for name, want in run_graph(g, {"x": x}).items():
        got = run_graph(h, {"x": x})[name]
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_json_is_plain_and_npz_has_no_pickle(tmp_path):
    save_graph(_graph(), tmp_path / "g.json")
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["format"] == "retarget.graph" and doc["inputs"] == ["x"]
    with np.load(tmp_path / "g.npz", allow_pickle=False) as z:
        assert all(z[k].dtype != object for k in z.files)


def test_object_attribute_is_refused(tmp_path):
    g = _graph()
    g.nodes[0].attrs = {"bad": {"a": 1}}
    with pytest.raises(GraphError, match="Add 'add'.*'bad'"):
        save_graph(g, tmp_path / "g.json")


def test_load_errors(tmp_path):
    (tmp_path / "text.json").write_text("hello")
    with pytest.raises(ModelLoadError, match="not a retarget graph"):
        load_graph(tmp_path / "text.json")
    (tmp_path / "other.json").write_text('{"format": "something"}')
    with pytest.raises(ModelLoadError, match="format"):
        load_graph(tmp_path / "other.json")
    save_graph(_graph(), tmp_path / "g.json")
    (tmp_path / "g.npz").unlink()
    with pytest.raises(ModelLoadError, match="missing"):
        load_graph(tmp_path / "g.json")
    save_graph(_graph(), tmp_path / "h.json")
    doc = json.loads((tmp_path / "h.json").read_text())
    doc["nodes"][0]["inputs"][0] = "nowhere"
    (tmp_path / "h.json").write_text(json.dumps(doc))
    with pytest.raises(ModelLoadError, match="nowhere"):
        load_graph(tmp_path / "h.json")


def test_zoo_network_round_trips_bit_exactly(tmp_path):
    from retarget import zoo
    from retarget.frontend.onnx import import_model
    g = import_model(zoo.build("resnet18", size=32, num_classes=10, width=0.25))
    save_graph(g, tmp_path / "r18.json")
    h = load_graph(tmp_path / "r18.json")
    assert format_graph(h) == format_graph(g)
    x = np.random.default_rng(1).standard_normal(g.inputs[0].type.shape).astype(np.float32)
    a = run_graph(g, {g.inputs[0].name: x})
    b = run_graph(h, {h.inputs[0].name: x})
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
