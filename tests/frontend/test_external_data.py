"""ONNX external data (tensors kept in files beside the model): read only from regular files
inside the model's directory; anything else is refused saying so."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import retarget
from retarget.errors import ModelLoadError


@pytest.fixture
def model_dir(tmp_path):
    """model/ok.onnx with its weight in model/w.bin, and a secret.bin beside model/."""
    d = tmp_path / "model"
    d.mkdir()
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, d / "ok.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="w.bin", size_threshold=0)
    (tmp_path / "secret.bin").write_bytes(np.ones(16, np.float32).tobytes())
    return d


def _with_location(d, location: str):
    m = onnx.load(d / "ok.onnx", load_external_data=False)
    for e in m.graph.initializer[0].external_data:
        if e.key == "location":
            e.value = location
    onnx.save(m, d / "edited.onnx")
    return d / "edited.onnx"


def test_external_data_inside_the_directory_is_read(model_dir):
    g = retarget.load(model_dir / "ok.onnx")
    (w,) = [v for v in g.constants() if v.name == "w"]
    assert np.array_equal(w.const, np.arange(16, dtype=np.float32).reshape(4, 4))


@pytest.mark.parametrize("location", ["../secret.bin", "sub/../../secret.bin", "ABSOLUTE"])
def test_a_location_escaping_the_directory_is_named_as_such(model_dir, location):
    if location == "ABSOLUTE":
        location = str(model_dir.parent / "secret.bin")
    with pytest.raises(ModelLoadError) as e:
        retarget.load(_with_location(model_dir, location))
    msg = str(e.value)
    assert "escapes the model's directory" in msg and repr(location) in msg and "'w'" in msg
    assert "truncated or corrupt" not in msg


def test_a_symlink_leading_out_or_a_fifo_is_refused(model_dir):
    os.symlink(model_dir.parent / "secret.bin", model_dir / "link.bin")
    with pytest.raises(ModelLoadError, match="escapes the model's directory"):
        retarget.load(_with_location(model_dir, "link.bin"))
    os.mkfifo(model_dir / "fifo.bin")
    with pytest.raises(ModelLoadError, match="not a regular file"):
        retarget.load(_with_location(model_dir, "fifo.bin"))


def test_external_data_shorter_than_the_tensor_is_a_clear_error(model_dir):
    (model_dir / "w.bin").write_bytes(b"\0" * 8)
    with pytest.raises(ModelLoadError, match="external data"):
        retarget.load(model_dir / "ok.onnx")
