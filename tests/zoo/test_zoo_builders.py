"""The zoo's builders: valid ONNX, deterministic, the PyTorch-export features they promise,
O(1) activations, and clear errors for sizes a network cannot take."""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest

from retarget import zoo

ort = pytest.importorskip("onnxruntime")


def _size(name):
    return max(32, zoo.MIN_SIZE.get(name, 32))


def _ops(model) -> Counter:
    return Counter(n.op_type for n in model.graph.node)


def _out_shape(model) -> tuple[int, ...]:
    return tuple(d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim)


@pytest.mark.parametrize("opset", [11, 13, 17])
@pytest.mark.parametrize("name", zoo.NAMES)
def test_builds_valid_onnx_with_consistent_shapes(name, opset):
    model = zoo.build(name, size=_size(name), opset=opset, width=0.25, num_classes=7)
    assert model.opset_import[0].version == opset
    # strict mode fails if ONNX's own shape inference disagrees with the declared output shape.
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    expected = (1, 7, _size(name), _size(name)) if name.startswith("unet") else (1, 7)
    assert _out_shape(model) == expected


@pytest.mark.parametrize("name", zoo.NAMES)
def test_activations_stay_order_one(name):
    """He-scaled weights keep the output O(1), so relative comparisons mean something."""
    size = _size(name)
    model = zoo.build(name, size=size, width=0.5, num_classes=100)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    (y,) = sess.run(None, {"input": x})
    assert np.isfinite(y).all()
    assert 0.05 < float(y.std()) < 20, f"{name}: output std {y.std():.3g} is not O(1)"


def test_seed_determines_weights():
    a = zoo.build("mobilenet_v1", size=32, width=0.25, seed=5)
    b = zoo.build("mobilenet_v1", size=32, width=0.25, seed=5)
    c = zoo.build("mobilenet_v1", size=32, width=0.25, seed=6)
    assert a.SerializeToString() == b.SerializeToString()
    wa = onnx.numpy_helper.to_array(a.graph.initializer[0])
    wc = onnx.numpy_helper.to_array(c.graph.initializer[0])
    assert wa.shape == wc.shape and not np.array_equal(wa, wc)


def test_keywords_change_the_model():
    base = zoo.build("resnet18", size=32)
    params = sum(int(np.prod(t.dims)) for t in base.graph.initializer)
    # torchvision's ResNet-18 has 11,689,512 parameters (BN running stats excluded).
    bn_stats = sum(int(np.prod(t.dims)) for t in base.graph.initializer
                   if t.name.endswith(("running_mean", "running_var")))
    assert params - bn_stats == 11_689_512
    slim = zoo.build("resnet18", size=32, width=0.5, batch=3, num_classes=5)
    assert sum(int(np.prod(t.dims)) for t in slim.graph.initializer) < params / 3
    assert _out_shape(slim) == (3, 5)
    dims = slim.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [3, 3, 32, 32]


def test_resnet50_parameter_count_matches_torchvision():
    model = zoo.build("resnet50", size=32)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer
                 if not t.name.endswith(("running_mean", "running_var")))
    assert params == 25_557_032


def test_pytorch_export_features_are_present():
    r = _ops(zoo.build("resnet50", size=32, width=0.25))
    assert r["BatchNormalization"] == r["Conv"] == 53 and r["Gemm"] == 1 and r["Flatten"] == 1
    assert r["Add"] == 16
    a = _ops(zoo.build("alexnet", size=64, width=0.25))
    assert a["LRN"] == 2
    for op in ("Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Constant"):
        assert a[op] >= 1, f"alexnet lacks the {op} of the old PyTorch flatten chain"
    for name in ("mobilenet_v1", "mobilenet_v2"):
        m = _ops(zoo.build(name, size=32, width=0.25))
        assert m["Clip"] > 10 and m["Relu"] == 0
    m1 = zoo.build("mobilenet_v1", size=32, width=0.25)
    groups = [a.i for n in m1.graph.node for a in n.attribute if a.name == "group"]
    assert sum(g > 1 for g in groups) == 13  # one depthwise conv per block
    assert _ops(zoo.build("unet", size=32))["ConvTranspose"] == 3
    assert _ops(zoo.build("unet_resize", size=32))["Resize"] == 3


def test_googlenet_inception_blocks_concatenate_four_branches_with_a_pool_branch():
    model = zoo.build("googlenet", size=32, width=0.25)
    producer = {o: n for n in model.graph.node for o in n.output}
    concats = [n for n in model.graph.node if n.op_type == "Concat"]
    assert len(concats) == 9
    for cat in concats:
        assert len(cat.input) == 4
        # The 4th branch: MaxPool 3x3 stride 1 -> conv 1x1 -> BN -> Relu.
        relu = producer[cat.input[3]]
        bn = producer[relu.input[0]]
        conv = producer[bn.input[0]]
        pool = producer[conv.input[0]]
        assert (relu.op_type, bn.op_type, conv.op_type, pool.op_type) == (
            "Relu", "BatchNormalization", "Conv", "MaxPool")
        attrs = {a.name: list(a.ints) for a in pool.attribute if a.ints}
        assert attrs["kernel_shape"] == [3, 3] and attrs["strides"] == [1, 1]


@pytest.mark.parametrize("name, size", [("alexnet", 32), ("vgg11", 16), ("unet", 36)])
def test_too_small_or_misfit_sizes_fail_naming_the_problem(name, size):
    with pytest.raises(ValueError, match="size"):
        zoo.build(name, size=size)


def test_unknown_name_and_opset():
    with pytest.raises(KeyError, match="resnet18"):
        zoo.build("resnet19")
    with pytest.raises(ValueError, match="opset 9"):
        zoo.build("resnet18", size=32, opset=9)
