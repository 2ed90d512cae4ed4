"""Bad input to `retarget inspect` / `retarget run`: a non-zero exit code and one clear line on
stderr naming the problem (and the node/op where there is one), never a traceback unless
--debug is given.

In-process runs go through cli.main; an exception escaping it would be a traceback for the
user, so it fails the test as such. Two cases also run as a real subprocess."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

from retarget import cli


def _save(model_or_bytes, path):
    data = model_or_bytes if isinstance(model_or_bytes, bytes) else \
        model_or_bytes.SerializeToString()
    path.write_bytes(data)
    return path


def _graph_model(nodes, inputs=("x",), outputs=("y",), shape=(2, 3), opset=17):
    """A model from raw nodes, *without* running onnx.checker (some are deliberately invalid)."""
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in inputs]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    model = helper.make_model(helper.make_graph(nodes, "bad", ins, outs),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _fails_cleanly(argv, capsys, *must_mention: str) -> str:
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse usage errors exit 2 with a usage line
        code = e.code
    except BaseException as e:  # noqa: BLE001 - anything escaping main is a user-visible traceback
        pytest.fail(f"{argv[0]}: {type(e).__name__} escaped cli.main (the user would see a "
                    f"traceback): {e}")
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, f"exit code {code} for bad input (expected 2); stdout: {captured.out}"
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    print(f"{argv[0]}: {err}")  # shown with -s and on failure
    low = err.lower()
    for word in must_mention:
        assert word.lower() in low, f"stderr does not mention {word!r}: {err}"
    return err


@pytest.fixture()
def image_npy(tmp_path):
    def make(shape=(1, 3, 32, 32), dtype=np.float32, name="x.npy"):
        path = tmp_path / name
        np.save(path, np.zeros(shape, dtype))
        return str(path)
    return make


# ---- the model file --------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["inspect", "run"])
def test_not_an_onnx_file(tmp_path, capsys, command):
    path = tmp_path / "notes.onnx"
    path.write_text("these are my notes, not a neural network\n" * 20)
    extra = ["--random"] if command == "run" else []
    _fails_cleanly([command, str(path)] + extra, capsys, "notes.onnx", "onnx")


def test_truncated_file(tmp_path, capsys, resnet_file):
    data = resnet_file.read_bytes()
    path = _save(data[: len(data) // 2], tmp_path / "cut.onnx")
    _fails_cleanly(["inspect", str(path)], capsys, "cut.onnx")


def test_missing_file(tmp_path, capsys):
    _fails_cleanly(["inspect", str(tmp_path / "nowhere.onnx")], capsys, "nowhere.onnx")


def test_unsupported_op_is_named_with_its_node(tmp_path, capsys):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu0"),
             helper.make_node("Det", ["r"], ["y"], name="the_determinant")]
    path = _save(_graph_model(nodes, shape=(3, 3)), tmp_path / "det.onnx")
    _fails_cleanly(["inspect", str(path)], capsys, "Det", "the_determinant")


def test_graph_with_a_cycle(tmp_path, capsys):
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="loop_a"),
             helper.make_node("Add", ["x", "a"], ["b"], name="loop_b"),
             helper.make_node("Relu", ["b"], ["y"], name="out")]
    path = _save(_graph_model(nodes), tmp_path / "cycle.onnx")
    _fails_cleanly(["inspect", str(path)], capsys, "cycle", "loop_")


def test_undefined_input(tmp_path, capsys):
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adds_a_ghost")]
    path = _save(_graph_model(nodes), tmp_path / "undefined.onnx")
    _fails_cleanly(["inspect", str(path)], capsys, "ghost", "adds_a_ghost")


def test_shape_error_names_node_and_shapes(tmp_path, capsys):
    w = helper.make_tensor("w", TensorProto.FLOAT, [5, 4], np.zeros(20, np.float32))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="bad_matmul")]
    model = _graph_model(nodes)
    model.graph.initializer.append(w)
    path = _save(model, tmp_path / "matmul.onnx")
    _fails_cleanly(["inspect", str(path)], capsys, "bad_matmul", "MatMul")


# ---- the inputs ------------------------------------------------------------------------------
def test_wrong_input_shape(resnet_file, image_npy, capsys):
    err = _fails_cleanly(["run", str(resnet_file), "--input", image_npy((1, 3, 16, 16))],
                         capsys, "input", "shape")
    assert "16" in err and "32" in err


def test_wrong_input_dtype(resnet_file, image_npy, capsys):
    _fails_cleanly(["run", str(resnet_file), "--input", image_npy(dtype=np.float64)],
                   capsys, "dtype", "float64", "float32")


def test_unknown_input_name(resnet_file, image_npy, capsys):
    _fails_cleanly(["run", str(resnet_file), "--input", f"pixels={image_npy()}"],
                   capsys, "pixels", "input")


def test_no_input_data(resnet_file, capsys):
    _fails_cleanly(["run", str(resnet_file)], capsys, "--random")


def test_input_file_that_is_not_numpy(resnet_file, tmp_path, capsys):
    bad = tmp_path / "x.npy"
    bad.write_text("1 2 3")
    _fails_cleanly(["run", str(resnet_file), "--input", str(bad)], capsys, "x.npy")


def test_pickled_input_is_refused(resnet_file, tmp_path, capsys):
    path = tmp_path / "obj.npy"
    np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    _fails_cleanly(["run", str(resnet_file), "--input", str(path)], capsys, "obj.npy")


def test_bad_output_name(resnet_file, tmp_path, capsys):
    _fails_cleanly(["run", str(resnet_file), "--random", "-o", str(tmp_path / "y.txt")],
                   capsys, "y.txt", ".npz")


@pytest.mark.parametrize("shape", ["input=1,3,abc", "input=1,3,64,64", "pixels=1,3,32,32"])
def test_bad_input_shape_option(resnet_file, capsys, shape):
    _fails_cleanly(["inspect", str(resnet_file), "--input-shape", shape], capsys,
                   shape.split("=")[0])


# ---- as the user sees it ---------------------------------------------------------------------
def test_subprocess_error_has_no_traceback_unless_debug(tmp_path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(b"\x08\x07\x12\x03abc" * 50)
    cmd = [sys.executable, "-m", "retarget", "inspect", str(path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "junk.onnx" in r.stderr
    r = subprocess.run([sys.executable, "-m", "retarget", "--debug", "inspect", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Traceback" in r.stderr
