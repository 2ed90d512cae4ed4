"""Resize: hand-checked values, every mode against onnxruntime, shape rules and errors."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from retarget.errors import ShapeError, UnsupportedOpError
from retarget.frontend.onnx import from_onnx_model
from retarget.ir.types import TensorType
from retarget.ops import OPS
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph


def resize(x, roi=None, scales=None, sizes=None, **attrs):
    d = OPS["Resize"]
    return d.run([x, roi, scales, sizes], dict(d.attrs, **attrs))[0]


def f32(*v):
    return np.array(v, dtype=np.float32)


def test_nearest_upsample_2x_repeats():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    y = resize(x, scales=f32(1, 1, 2, 2), coordinate_transformation_mode="asymmetric",
               nearest_mode="floor")
    np.testing.assert_array_equal(y[0, 0], x[0, 0].repeat(2, 0).repeat(2, 1))


def test_linear_align_corners_endpoints_and_midpoints():
    x = f32(0, 10).reshape(1, 2)
    y = resize(x, sizes=np.array([1, 5]), mode="linear",
               coordinate_transformation_mode="align_corners")
    np.testing.assert_allclose(y[0], [0, 2.5, 5, 7.5, 10])


def test_half_pixel_linear_clamps_at_edges():
    x = f32(0, 10).reshape(1, 2)
    y = resize(x, scales=f32(1, 2), mode="linear")
    np.testing.assert_allclose(y[0], [0, 2.5, 7.5, 10])


@pytest.mark.parametrize("nearest_mode,expect", [
    ("round_prefer_floor", [0, 1, 1, 2]), ("round_prefer_ceil", [0, 1, 2, 2]),
    ("floor", [0, 0, 1, 2]), ("ceil", [0, 1, 2, 2])])  # ceil(2.25) = 3 is clamped to 2
def test_nearest_rounding_modes(nearest_mode, expect):
    # asymmetric with scale 4/3: coordinates 0, .75, 1.5, 2.25
    x = f32(0, 1, 2).reshape(1, 3)
    y = resize(x, sizes=np.array([1, 4]), coordinate_transformation_mode="asymmetric",
               nearest_mode=nearest_mode)
    np.testing.assert_array_equal(y[0], expect)


def test_integer_nearest_keeps_dtype_and_values():
    x = np.arange(-4, 4, dtype=np.int8).reshape(1, 1, 2, 4)
    y = resize(x, scales=f32(1, 1, 2, 0.5))
    assert y.dtype == np.int8 and y.shape == (1, 1, 4, 2)
    assert set(np.unique(y)) <= set(np.unique(x))


def test_tf_crop_and_resize_extrapolates_outside():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    y = resize(x, roi=f32(0, 0, -0.5, 0.5, 1, 1, 0.5, 1.5), sizes=np.array([1, 1, 3, 3]),
               mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
               extrapolation_value=-1.0)
    assert (y[0, 0, 0] == -1).all() and (y[0, 0, :, 2] == -1).all()
    # sources: rows -1.5, 0, 1.5 and columns 1.5, 3, 4.5 of x[i, j] = 4i + j
    np.testing.assert_allclose(y[0, 0, 1, :2], [1.5, 3.0])
    np.testing.assert_allclose(y[0, 0, 2, :2], [7.5, 9.0])


def test_shape_rules_and_errors():
    d = OPS["Resize"]

    def infer(scales=None, sizes=None, **attrs):
        types = [TensorType((1, 3, 4, 6), "float32"), None,
                 None if scales is None else TensorType.of(scales),
                 None if sizes is None else TensorType.of(sizes)]
        return d.infer(dict(d.attrs, **attrs), types, [None, None, scales, sizes])[0].shape

    assert infer(scales=f32(1, 1, 1.5, 0.5)) == (1, 3, 6, 3)
    assert infer(sizes=np.array([3, 9]), axes=[2, 3]) == (1, 3, 3, 9)
    assert infer(sizes=np.array([8, 8]), axes=[2, 3],
                 keep_aspect_ratio_policy="not_larger") == (1, 3, 5, 8)
    assert infer(sizes=np.array([8, 8]), axes=[-2, -1],
                 keep_aspect_ratio_policy="not_smaller") == (1, 3, 8, 12)
    with pytest.raises(ShapeError, match="exactly one of"):
        infer()
    with pytest.raises(ShapeError, match="one positive scale per resized axis"):
        infer(scales=f32(2, 2))
    with pytest.raises(UnsupportedOpError, match="mode='area'"):
        infer(scales=f32(1, 1, 2, 2), mode="area")
    with pytest.raises(UnsupportedOpError, match="antialias"):
        infer(scales=f32(1, 1, 2, 2), antialias=1)
    with pytest.raises(UnsupportedOpError, match="only nearest for integers"):
        resize(np.zeros((1, 2), np.int8), scales=f32(1, 2), mode="linear")
    with pytest.raises(ShapeError, match="needs the 'roi' input"):
        resize(np.zeros((1, 2), np.float32), scales=f32(1, 2),
               coordinate_transformation_mode="tf_crop_and_resize")


# ---- against onnxruntime -----------------------------------------------------------------
ort = pytest.importorskip("onnxruntime")

CTMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
ORT_CASES = (
    [("nearest", ctm, nm, "scales") for ctm in CTMS
     for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")]
    + [("linear", ctm, None, how) for ctm in CTMS for how in ("scales", "sizes")]
    + [("cubic", ctm, None, "sizes") for ctm in CTMS]
    + [("linear", "tf_crop_and_resize", None, "sizes"),
       ("nearest", "tf_crop_and_resize", "round_prefer_ceil", "sizes")]
)


def _model(x_shape, attrs, roi, scales, sizes, opset):
    inits = [numpy_helper.from_array(roi, "roi")]
    names = ["x", "roi"]
    if scales is not None:
        inits.append(numpy_helper.from_array(scales, "scales"))
        names.append("scales")
    else:
        inits.append(numpy_helper.from_array(np.zeros(0, np.float32), "scales"))
        inits.append(numpy_helper.from_array(sizes, "sizes"))
        names += ["scales", "sizes"]
    node = helper.make_node("Resize", names, ["y"], **attrs)
    g = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", 1, x_shape)],
                          [helper.make_empty_tensor_value_info("y")], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("mode,ctm,nearest_mode,how", ORT_CASES)
def test_resize_matches_onnxruntime(mode, ctm, nearest_mode, how, opset):
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 6)).astype(np.float32)
    attrs = dict(mode=mode, coordinate_transformation_mode=ctm)
    if nearest_mode:
        attrs["nearest_mode"] = nearest_mode
    roi = f32(0, 0, 0.1, -0.2, 1, 1, 0.8, 1.1) if ctm == "tf_crop_and_resize" else f32()
    # integer scales: onnxruntime and the ONNX spec differ on align_corners' length otherwise
    # 1.5 rather than 1.6: 4 / 1.6f is 2.4999999 in float64 (the ONNX reference, and us) but
    # 2.5 in onnxruntime's float32, so nearest rounding ties would break differently.
    scales = (f32(1, 1, 2, 3) if ctm == "align_corners" else f32(1, 1, 1.5, 0.5)) \
        if how == "scales" else None
    sizes = np.array([1, 2, 8, 4], dtype=np.int64) if how == "sizes" else None
    model = _model(x.shape, attrs, roi, scales, sizes, opset)
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_graph(infer_shapes(from_onnx_model(model)), {"x": x})["y"]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_and_axes_match_onnxruntime_opset18(mode):
    x = np.random.default_rng(1).standard_normal((1, 2, 9, 11)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode, antialias=1,
                            axes=[3, 2], exclude_outside=int(mode == "cubic"))
    g = helper.make_graph([node], "r", [helper.make_tensor_value_info("x", 1, x.shape)],
                          [helper.make_empty_tensor_value_info("y")],
                          initializer=[numpy_helper.from_array(np.array([4, 5]), "sizes")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_graph(infer_shapes(from_onnx_model(model)), {"x": x})["y"]
    assert got.shape == expected.shape == (1, 2, 5, 4)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
