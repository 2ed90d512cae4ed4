"""zoo/skeleton.py: what strip_weights keeps, what fill_weights regenerates."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from retarget.zoo.skeleton import (KEEP_ELEMENTS, fill_weights, load_filled, save_stripped,
                                   strip_weights, stripped_names)


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = {
        "w": rng.normal(0.3, 0.05, (64, 32)).astype(np.float32),               # stripped
        "var": rng.uniform(0.5, 1.5, (KEEP_ELEMENTS + 1,)).astype(np.float32),  # stripped, > 0
        "mask": np.where(rng.random((8, 49)) < 0.5, 0, -100).astype(np.float32),  # 2 values: kept
        "small": rng.standard_normal(KEEP_ELEMENTS).astype(np.float32),         # small: kept
        "index": rng.integers(0, 49, (49, 49)).astype(np.int64),                 # not float: kept
    }
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 32])
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    g = helper.make_graph([node], "g", [x], [y],
                          [numpy_helper.from_array(a, k) for k, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _arrays(model) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_strip_keeps_structure_and_drops_only_large_varied_floats():
    model = _model()
    stripped = strip_weights(model)
    assert sorted(stripped_names(stripped)) == ["var", "w"]
    before, after = _arrays(model), {t.name: t for t in stripped.graph.initializer}
    for name in ("mask", "small", "index"):
        assert np.array_equal(numpy_helper.to_array(after[name]), before[name])
    assert list(after["w"].dims) == [64, 32] and not after["w"].raw_data
    assert after["w"].ByteSize() < 200            # 8 kB of weights became a note
    assert stripped.graph.node == model.graph.node
    assert stripped_names(model) == []            # the input is not modified


def test_fill_restores_shapes_statistics_and_range_deterministically():
    model = _model()
    filled = fill_weights(strip_weights(model), seed=3)
    got, want = _arrays(filled), _arrays(model)
    onnx.checker.check_model(filled)
    for name in ("w", "var"):
        assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype
        assert not np.array_equal(got[name], want[name])
        assert abs(got[name].mean() - want[name].mean()) < 0.1 * want[name].std() + 1e-3
        assert abs(got[name].std() / want[name].std() - 1) < 0.2
        assert got[name].min() >= want[name].min() and got[name].max() <= want[name].max()
    assert np.array_equal(got["mask"], want["mask"])
    again = _arrays(fill_weights(strip_weights(model), seed=3))
    other = _arrays(fill_weights(strip_weights(model), seed=4))
    assert np.array_equal(again["w"], got["w"]) and not np.array_equal(other["w"], got["w"])


def test_save_and_load_round_trip(tmp_path):
    path = tmp_path / "m.onnx.gz"
    n = save_stripped(_model(), path)
    assert n == path.stat().st_size
    assert save_stripped(_model(), tmp_path / "again.onnx.gz") == n   # reproducible bytes
    assert (tmp_path / "again.onnx.gz").read_bytes() == path.read_bytes()
    loaded = load_filled(path, seed=1)
    assert stripped_names(loaded) == []
    assert _arrays(loaded)["w"].shape == (64, 32)
