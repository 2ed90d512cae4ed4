"""ONNX's own backend node tests, run on the CPU reference executor.

The onnx wheel does not ship the test data directories, but
`onnx.backend.test.case.node.collect_testcases` generates the identical cases. Each case is

- UNSUPPORTED when it uses an op retarget does not register, a non-tensor value, a dtype the
  IR lacks (strings, bfloat16, float8, int4...), or anything the importer or shape inference
  rejects with UnsupportedOpError (training-mode Dropout, Cast to an unsupported type...);
- otherwise a test that must pass: import with frontend.onnx.from_onnx_model, type with
  passes.infer_shapes.infer_shapes, run with ops.reference.run_graph, and compare with
  the case's outputs (same dtype, same shape, values within the case's rtol/atol), also
  checking that the inferred output types are the computed ones.

The IR has static shapes, so a case that feeds a shape-like tensor (Reshape's shape, Slice's
starts...) as a graph input is imported a second time with the integer and bool graph inputs
bound to the data set's values as constants; every node still runs through its op's compute.

benchmarks/onnx_backend_coverage.py reuses `classify` and `run_case` to print the counts.
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from retarget.errors import ShapeError, UnsupportedOpError
from retarget.frontend.onnx import from_onnx_model
from retarget.frontend.onnx_upgrades import UPGRADES
from retarget.ir.graph import Graph
from retarget.ops import OPS
from retarget.passes.fold_constants import fold_constants
from retarget.passes.infer_shapes import infer_shapes
from retarget.ops.reference import run_graph

# Cases that are expected to fail, with the reason; each runs as a strict xfail so fixing one
# makes the suite say so.
KNOWN_FAILURES: dict[str, str] = {}


@functools.lru_cache(maxsize=1)
def backend_cases() -> tuple:
    """ONNX's node test cases, generated once per process (takes a few seconds)."""
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        # Several generators compute expected outputs with overflowing NumPy arithmetic.
        warnings.simplefilter("ignore")
        return tuple(sorted(collect_testcases(None), key=lambda c: c.name))


def _model_inputs(model) -> list[str]:
    inits = {i.name for i in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in inits]


def _unknown_ops(model) -> list[str]:
    ops = set()
    for n in model.graph.node:
        if n.domain not in ("", "ai.onnx"):
            ops.add(f"{n.domain}.{n.op_type}")
        elif n.op_type not in OPS and n.op_type != "Constant" and n.op_type not in UPGRADES:
            # (an op the importer rewrites, like Upsample -> Resize, is judged by the importer)
            ops.add(n.op_type)
    return sorted(ops)


def _array(x) -> np.ndarray:
    # A few generators store data as TensorProto (types NumPy has no dtype for).
    return numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x)


def typed_graph(model, inputs: list) -> tuple[Graph, dict[str, np.ndarray]]:
    """Import and type `model`; returns the typed graph and the run-time inputs it still takes.

    Raises UnsupportedOpError for what retarget does not support."""
    inputs = [_array(x) for x in inputs]
    feeds = dict(zip(_model_inputs(model), inputs))
    graph = from_onnx_model(model)
    try:
        return infer_shapes(graph), feeds
    except ShapeError as e:
        if "must be a constant" not in str(e):
            raise
    # The shape of some value is computed in the graph (the Shape -> Gather -> Concat ->
    # Reshape chains of function-expanded cases): fold what the static input shapes determine.
    try:
        return infer_shapes(fold_constants(graph)), feeds
    except ShapeError as e:
        if "must be a constant" not in str(e):
            raise
    # A shape-determining tensor (Reshape's shape, Resize's scales, Range's limit...) arrives
    # as a graph input: bind to this data set's values the integer, bool and scalar inputs and
    # those no node reads as its first (data) input.
    graph = from_onnx_model(model)
    data_inputs = {id(n.inputs[0]) for n in graph.nodes if n.inputs and n.inputs[0] is not None}
    feeds = {}
    for v, a in zip(list(graph.inputs), inputs):
        if a.dtype.kind in "iub" or a.ndim == 0 or id(v) not in data_inputs:
            v.const = a
            graph.inputs.remove(v)
        else:
            feeds[v.name] = a
    return infer_shapes(fold_constants(graph)), feeds


def classify(case) -> str | None:
    """Why `case` is unsupported, or None when it is a test retarget must pass."""
    unknown = _unknown_ops(case.model)
    if unknown:
        return "op " + ", ".join(unknown)
    try:
        typed_graph(case.model, list(case.data_sets[0][0]))
    except UnsupportedOpError as e:
        return f"rejected: {e}"
    except Exception:
        return None  # supported ops, but something is wrong: the test will show what
    return None


def run_case(case) -> None:
    """Run every data set of `case` and compare; AssertionError (or any error) on mismatch."""
    for k, (inputs, expected) in enumerate(case.data_sets):
        graph, feeds = typed_graph(case.model, list(inputs))
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            # Cases probe inf/nan inputs on purpose: the values are compared, not the warnings.
            warnings.simplefilter("ignore", RuntimeWarning)
            got = run_graph(graph, feeds)
        assert len(graph.outputs) == len(expected), f"data set {k}: output count"
        for v, want in zip(graph.outputs, expected):
            want = _array(want)
            have = got[v.name]
            where = f"data set {k}, output {v.name!r}"
            assert have.dtype == want.dtype, f"{where}: dtype {have.dtype}, expected {want.dtype}"
            assert have.shape == want.shape, f"{where}: shape {have.shape}, expected {want.shape}"
            assert v.type.shape == have.shape and v.type.dtype == have.dtype.name, (
                f"{where}: inferred type {v.type} but computed {have.dtype}{list(have.shape)}")
            if want.dtype.kind in "iub":
                np.testing.assert_array_equal(have, want, err_msg=where)
            else:
                np.testing.assert_allclose(have, want, rtol=case.rtol, atol=case.atol,
                                           equal_nan=True, err_msg=where)


def _params():
    params = []
    for case in backend_cases():
        if classify(case) is not None:
            continue
        marks = ()
        if case.name in KNOWN_FAILURES:
            marks = (pytest.mark.xfail(reason=KNOWN_FAILURES[case.name], strict=True),)
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


@pytest.mark.parametrize("case", _params())
def test_backend_node_case(case):
    try:
        run_case(case)
    except UnsupportedOpError as e:
        # An op that rejects a feature only when it runs (not in its shape rule): reported as
        # skipped, and counted as unsupported by the coverage script, never as passed.
        pytest.skip(f"unsupported at run time: {e}")


def test_unsupported_cases_are_really_unsupported():
    # Guards the classifier: a case it calls unsupported must name an op missing from OPS or
    # carry the UnsupportedOpError message; nothing else may be quietly set aside.
    reasons = [classify(c) for c in backend_cases()]
    assert all(r is None or r.startswith(("op ", "rejected: ")) for r in reasons)
    assert sum(r is None for r in reasons) > 300  # the bulk of the ops we register is exercised
