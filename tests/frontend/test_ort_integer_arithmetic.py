"""What onnxruntime's u8 x s8 integer kernels compute on this CPU (OrtIntegerArithmetic): on every
x86-64 CPU, either the exact int32 sum, or (AVX2, AVX-512 without VNNI) the sum of neighbouring
pairs of products each saturated to int16. The probe says which; these tests hold it to that,
output for output, so the claim in docs/quantization.md is checked wherever the suite runs."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from retarget.frontend.ort_check import ort_integer_arithmetic, run_onnxruntime

pytest.importorskip("onnxruntime")


def _matmul_integer(m, k, n):
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "mmi",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k]),
         helper.make_tensor_value_info("b", TensorProto.INT8, [k, n])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def pair_saturating_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b the way vpmaddubsw-based kernels compute it: products k and k+1 (k even) are added
    into an int16 with saturation, then the pairs are summed exactly."""
    k = a.shape[1]
    a2 = np.zeros((a.shape[0], k + k % 2), np.int64)
    b2 = np.zeros((k + k % 2, b.shape[1]), np.int64)
    a2[:, :k], b2[:k] = a, b
    pairs = a2[:, 0::2, None] * b2[None, 0::2, :] + a2[:, 1::2, None] * b2[None, 1::2, :]
    return np.clip(pairs, -32768, 32767).sum(axis=1)


@pytest.mark.parametrize("m,k,n", [(3, 7, 5), (17, 33, 9), (64, 147, 64), (1, 300, 1)])
def test_onnxruntime_u8s8_arithmetic_is_exact_or_pair_saturating(m, k, n):
    rng = np.random.default_rng(k)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    got = run_onnxruntime(_matmul_integer(m, k, n), {"a": a, "b": b})["y"]
    exact = a.astype(np.int64) @ b.astype(np.int64)
    want = exact if ort_integer_arithmetic().exact else pair_saturating_matmul(a, b)
    np.testing.assert_array_equal(got, want)
    # the random operands overflow int16 pairs, so the two models really differ here
    assert (exact != pair_saturating_matmul(a, b)).any()


def test_seven_bit_weights_are_exact_on_every_cpu():
    # onnxruntime's reduce_range: weights in [-64, 63] keep every pair within int16
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (8, 64)).astype(np.uint8)
    b = rng.integers(-64, 64, (64, 8)).astype(np.int8)
    got = run_onnxruntime(_matmul_integer(8, 64, 8), {"a": a, "b": b})["y"]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_the_probe_says_what_it_measured():
    arith = ort_integer_arithmetic()
    assert arith.exact == (arith.probe == 64770)
    assert ("exactly" in str(arith)) == arith.exact


def test_a_model_with_seven_bit_weights_is_exact_for_onnxruntime_everywhere():
    arith = ort_integer_arithmetic()
    small = helper.make_model(helper.make_graph(
        [], "w", [], [], [helper.make_tensor("w", TensorProto.INT8, [3], [-64, 0, 64])]))
    large = helper.make_model(helper.make_graph(
        [], "w", [], [], [helper.make_tensor("w", TensorProto.INT8, [3], [-65, 0, 64])]))
    assert arith.exact_for(small)
    assert arith.exact_for(large) == arith.exact
