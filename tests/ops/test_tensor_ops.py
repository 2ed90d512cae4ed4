"""Tensor ops against onnxruntime, their static-shape rules and errors, and the opset
upgrades that touch them (Squeeze/Unsqueeze/Split/Slice/Pad/Dropout attributes, Upsample)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from retarget.errors import ShapeError, UnsupportedOpError
from retarget.frontend.onnx import from_onnx_model
from retarget.ops import OPS
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(1)


def model_of(op, inputs: dict, consts: dict | None = None, n_out=1, opset=17, **attrs):
    """One `op` node reading graph inputs `inputs` then initializers `consts` (None = omitted)."""
    consts = consts or {}
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items() if v is not None]
    names = list(inputs) + [("" if v is None else k) for k, v in consts.items()]
    outs = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_out)]
    node = helper.make_node(op, names, [o.name for o in outs], **attrs)
    graph = helper.make_graph([node], "g", ins, outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


def check_against_ort(model, inputs: dict) -> list[np.ndarray]:
    """Run on onnxruntime and on retarget; assert identical dtype, shape and values."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, inputs)
    graph = infer_shapes(from_onnx_model(model))
    got = run_graph(graph, inputs)
    for v, w in zip(graph.outputs, want):
        g = got[v.name]
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        assert v.type.shape == g.shape  # the shape rule agrees with the definition
        np.testing.assert_array_equal(g, w)
    return want


X = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
I64 = np.int64


@pytest.mark.parametrize("shape, allowzero", [([4, 0, -1], 0), ([-1], 0), ([0, 12], 0),
                                              ([2, 3, 4, 1], 1)])
def test_reshape(shape, allowzero):
    check_against_ort(model_of("Reshape", {"x": X}, {"s": np.array(shape, I64)}, allowzero=allowzero),
                      {"x": X})


def test_flatten_transpose_identity_shape_size():
    for axis in (0, 1, -1, 3):
        check_against_ort(model_of("Flatten", {"x": X}, axis=axis), {"x": X})
    check_against_ort(model_of("Transpose", {"x": X}, perm=[2, 0, 1]), {"x": X})
    check_against_ort(model_of("Transpose", {"x": X}), {"x": X})
    check_against_ort(model_of("Identity", {"x": X}), {"x": X})
    check_against_ort(model_of("Shape", {"x": X}, start=-2), {"x": X})
    check_against_ort(model_of("Shape", {"x": X}, start=1, end=-1), {"x": X})
    check_against_ort(model_of("Size", {"x": X}), {"x": X})


def test_squeeze_unsqueeze_concat():
    x = X.reshape(2, 1, 3, 1, 4)
    check_against_ort(model_of("Squeeze", {"x": x}, {"a": np.array([1, -2], I64)}), {"x": x})
    check_against_ort(model_of("Squeeze", {"x": x}), {"x": x})
    check_against_ort(model_of("Unsqueeze", {"x": X}, {"a": np.array([0, -1], I64)}), {"x": X})
    y = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    check_against_ort(model_of("Concat", {"x": X, "y": y}, axis=-2), {"x": X, "y": y})


def test_split_sizes_and_uneven_num_outputs():
    x = np.arange(14, dtype=np.float32).reshape(2, 7)
    check_against_ort(model_of("Split", {"x": x}, {"s": np.array([2, 5], I64)}, n_out=2, axis=1),
                      {"x": x})
    out = check_against_ort(model_of("Split", {"x": x}, n_out=3, opset=18, axis=1, num_outputs=3),
                            {"x": x})
    assert [o.shape[1] for o in out] == [3, 3, 1]  # ceil-sized chunks, the last takes the rest


@pytest.mark.parametrize("starts, ends, axes, steps", [
    ([1, 0], [100, -1], [0, 2], [1, 2]),          # end clamped, negative end
    ([-1], [-100], [1], [-1]),                    # negative step through index 0
    ([2, -5], [0, 10], [2, 1], [-1, 1]),
    ([5], [1], [2], [1]),                         # empty result
])
def test_slice(starts, ends, axes, steps):
    consts = {"s": np.array(starts, I64), "e": np.array(ends, I64), "a": np.array(axes, I64),
              "t": np.array(steps, I64)}
    check_against_ort(model_of("Slice", {"x": X}, consts), {"x": X})


@pytest.mark.parametrize("mode, pads", [("constant", [0, 1, 2, 0, 2, 1]),
                                        ("reflect", [0, 2, 1, 0, 1, 2]),
                                        ("edge", [1, 0, 3, 0, 2, 1]),
                                        ("constant", [0, -1, 1, 0, 0, -2])])  # negative pads crop
def test_pad(mode, pads):
    consts = {"p": np.array(pads, I64)}
    if mode == "constant":
        consts["v"] = np.array(7.5, np.float32)
    check_against_ort(model_of("Pad", {"x": X}, consts, mode=mode), {"x": X})


def test_pad_with_axes():
    consts = {"p": np.array([1, 2, 0, 1], I64), "v": None, "a": np.array([0, -1], I64)}
    check_against_ort(model_of("Pad", {"x": X}, consts, opset=18), {"x": X})


def test_gather_family():
    idx = np.array([[0, -1], [2, 1]], I64)
    check_against_ort(model_of("Gather", {"x": X}, {"i": idx}, axis=1), {"x": X})
    ge = RNG.integers(-4, 4, (2, 3, 2)).astype(I64)
    check_against_ort(model_of("GatherElements", {"x": X}, {"i": ge}, axis=2), {"x": X})
    nd = np.array([[1, 2], [0, -1]], I64)
    check_against_ort(model_of("GatherND", {"x": X}, {"i": nd}), {"x": X})


def test_gather_index_out_of_range_names_the_node():
    graph = infer_shapes(from_onnx_model(model_of("Gather", {"x": X}, {"i": np.array([3], I64)},
                                                  axis=1)))
    with pytest.raises(ShapeError, match=r"Gather 'Gather_0'.*index 3 is out of range.*length 3"):
        run_graph(graph, {"x": X})


def test_expand_tile_range_constant_of_shape():
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    check_against_ort(model_of("Expand", {"x": x}, {"s": np.array([2, 1, 4], I64)}), {"x": x})
    check_against_ort(model_of("Tile", {"x": X}, {"r": np.array([1, 2, 3], I64)}), {"x": X})
    dummy = np.zeros(1, np.float32)  # ORT needs a graph input; retarget gets the same one
    for start, limit, delta, dt in ((1, 10, 3, I64), (5.0, 1.0, -1.5, np.float32), (0, 0, 1, np.int32)):
        m = model_of("Range", {}, {"a": np.array(start, dt), "b": np.array(limit, dt),
                                   "c": np.array(delta, dt)})
        m.graph.input.append(helper.make_tensor_value_info("d", TensorProto.FLOAT, [1]))
        check_against_ort(m, {"d": dummy})
    value = numpy_helper.from_array(np.array([3], np.int32))
    m = model_of("ConstantOfShape", {}, {"s": np.array([2, 3], I64)}, value=value)
    m.graph.input.append(helper.make_tensor_value_info("d", TensorProto.FLOAT, [1]))
    check_against_ort(m, {"d": dummy})


def test_dropout_inference_is_identity_with_true_mask():
    out, mask = OPS["Dropout"].compute(X, np.array(0.3, np.float32), np.array(False))
    assert out is X and mask.dtype == bool and mask.all()
    with pytest.raises(UnsupportedOpError, match="training mode"):
        OPS["Dropout"].compute(X, np.array(0.3, np.float32), np.array(True))


def test_data_dependent_shapes_must_be_constant():
    m = model_of("Reshape", {"x": X, "s": np.array([4, 6], I64)})
    with pytest.raises(ShapeError, match=r"Reshape 'Reshape_0'.*shape input must be a constant"):
        infer_shapes(from_onnx_model(m))


@pytest.mark.parametrize("op, consts, attrs, message", [
    ("Reshape", {"s": np.array([5, -1], I64)}, {}, "cannot reshape"),
    ("Reshape", {"s": np.array([-1, -1], I64)}, {}, "more than one -1"),
    ("Squeeze", {"a": np.array([0], I64)}, {}, "has size 2, not 1"),
    ("Transpose", {}, {"perm": [0, 0, 1]}, "not a permutation"),
    ("Slice", {"s": np.array([0], I64), "e": np.array([1], I64), "a": np.array([5], I64)}, {},
     "out of range for rank 3"),
    ("Split", {"s": np.array([1, 2], I64)}, {"axis": 2}, "do not add up"),
])
def test_bad_static_arguments_are_shape_errors(op, consts, attrs, message):
    with pytest.raises(ShapeError, match=message):
        infer_shapes(from_onnx_model(model_of(op, {"x": X}, consts, **attrs)))


# ---- opset upgrades ----------------------------------------------------------------------
def test_opset11_axes_and_split_attributes():
    x = X.reshape(2, 1, 3, 4)
    check_against_ort(model_of("Squeeze", {"x": x}, opset=11, axes=[1]), {"x": x})
    check_against_ort(model_of("Unsqueeze", {"x": X}, opset=11, axes=[0, 4]), {"x": X})
    check_against_ort(model_of("Split", {"x": X}, n_out=2, opset=11, axis=2, split=[1, 3]), {"x": X})
    # No sizes at all: equal parts, as many as the node has outputs.
    check_against_ort(model_of("Split", {"x": X}, n_out=2, opset=13, axis=2), {"x": X})


def test_opset9_slice_and_opset10_pad_dropout_attributes():
    check_against_ort(model_of("Slice", {"x": X}, opset=9, starts=[1, -1], ends=[3, 0],
                               axes=[1, 2]), {"x": X})
    check_against_ort(model_of("Pad", {"x": X}, opset=10, pads=[0, 1, 1, 0, 0, 2], mode="reflect"),
                      {"x": X})
    check_against_ort(model_of("Pad", {"x": X}, opset=10, pads=[1, 0, 0, 0, 2, 1], value=-1.0),
                      {"x": X})
    check_against_ort(model_of("Dropout", {"x": X}, opset=10, ratio=0.25), {"x": X})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_becomes_resize(mode):
    x = RNG.standard_normal((1, 2, 3, 2)).astype(np.float32)
    scales = np.array([1, 1, 2, 3], np.float32)
    m = model_of("Upsample", {"x": x}, {"s": scales}, opset=9, mode=mode)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    graph = infer_shapes(from_onnx_model(m))
    assert [n.op for n in graph.nodes] == ["Resize"]
    got = run_graph(graph, {"x": x})[graph.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if mode == "nearest":  # output pixel i reads input pixel floor(i / scale)
        np.testing.assert_array_equal(got, x.repeat(2, axis=2).repeat(3, axis=3))
