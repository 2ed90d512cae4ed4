"""Whole networks from the zoo, imported from an .onnx file and run on the reference executor,
against onnxruntime on the same file and input.

Sizes are small (32 px; AlexNet needs 64) so the file runs in seconds; full sizes are in
benchmarks/bench_reference.py."""
from __future__ import annotations

import numpy as np
import pytest

import retarget
from retarget import zoo

ort = pytest.importorskip("onnxruntime")

REL_TOL = 1e-4  # max|ours - ref| <= REL_TOL * max|ref|
# Half width for the nets whose full-width weights dominate the file's run time (VGG's 4096-wide
# classifier, for one); the architecture is unchanged.
WIDTH = {"vgg11": 0.5, "vgg16": 0.5, "alexnet": 0.5, "resnet50": 0.5}


def _size(name: str) -> int:
    return max(32, zoo.MIN_SIZE.get(name, 32))


def _input(shape, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _ort_run(path, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, {"input": x})
    return out


def _compare(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != onnxruntime's {ref.shape}"
    assert ours.dtype == ref.dtype, f"{what}: dtype {ours.dtype} != onnxruntime's {ref.dtype}"
    assert np.isfinite(ref).all()
    # A zero reference would make the relative check vacuous: the zoo keeps activations O(1).
    scale = float(np.abs(ref).max())
    assert scale > 1e-2, f"{what}: reference output is ~0 (max {scale}); the test would be vacuous"
    err = float(np.abs(ours - ref).max())
    assert err <= REL_TOL * scale, f"{what}: max|ours-ref| = {err:.3g} > {REL_TOL} * {scale:.3g}"
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-5, err_msg=what)


def _check(tmp_path, name: str, *, size: int | None = None, batch: int = 1, opset: int = 17,
           width: float = 1.0, num_classes: int = 10, fast: bool = True) -> np.ndarray:
    size = size or _size(name)
    model = zoo.build(name, size=size, batch=batch, opset=opset, width=width,
                      num_classes=num_classes, seed=3)
    path = tmp_path / f"{name}_op{opset}.onnx"
    path.write_bytes(model.SerializeToString())
    x = _input((batch, 3, size, size))
    ref = _ort_run(path, x)
    graph = retarget.load(path)
    outs = retarget.run(graph, {"input": x}, fast=fast)
    assert list(outs) == ["output"]
    ours = outs["output"]
    _compare(ours, ref, f"{name} size={size} batch={batch} opset={opset} fast={fast}")
    return ours


@pytest.mark.parametrize("name", zoo.NAMES)
def test_zoo_network_matches_onnxruntime(tmp_path, name):
    _check(tmp_path, name, width=WIDTH.get(name, 1.0))


# Opset 11 and 13 differ where the nets use them: Clip's min/max (MobileNet v2), Unsqueeze's
# axes attribute vs input (AlexNet's flatten chain), Resize's mandatory roi (U-Net).
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("name", ["mobilenet_v2", "alexnet", "unet_resize"])
def test_older_opsets_match_onnxruntime(tmp_path, name, opset):
    _check(tmp_path, name, opset=opset, width=0.5)


# A batch > 1 exercises the batch dim through Shape -> Gather -> Reshape and the Gemm heads.
@pytest.mark.parametrize("name", ["alexnet", "googlenet"])
def test_batch_of_two_matches_onnxruntime(tmp_path, name):
    _check(tmp_path, name, batch=2, width=0.5)


def test_naive_definitions_match_fast_paths(tmp_path):
    """fast=False runs every op's naive definition: it must agree with onnxruntime and with
    the fast paths (im2col convs, ...) on a whole network."""
    naive = _check(tmp_path, "resnet18", width=0.25, fast=False)
    fast = _check(tmp_path, "resnet18", width=0.25, fast=True)
    np.testing.assert_allclose(naive, fast, rtol=1e-5, atol=1e-5)
