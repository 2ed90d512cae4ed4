"""The c target's Program as checked data: loop nests survive JSON exactly, malformed
documents are refused, and validate() refuses bindings the generated code could not run
safely (outside a buffer, writing an input or the weights, aliasing a `restrict` output)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from retarget.errors import GraphError
from retarget.loopnest import Binary, Const, Kernel, Load, Loop, Store, Tensor
from retarget.targets.c.emit import sources
from retarget.targets.aot.ir_json import kernel_from_json, kernel_to_json
from retarget.targets.aot.program import Call, Constant, Place, Program, TensorSpec

from .handmade import conv2d, elementwise, gemm, maxpool, tiled_scale, window_copy


@pytest.mark.parametrize("kernel", [gemm(3, 4, 5), conv2d(2, 3, 5, 5, 3, 3, 2, 1), maxpool(2, 5, 5),
                                    elementwise(4), tiled_scale(4, 8, 2, True), window_copy(3, 5)],
                         ids=lambda k: k.name)
def test_kernels_survive_json_exactly(kernel):
    doc = json.loads(json.dumps(kernel_to_json(kernel)))
    again = kernel_from_json(doc)
    assert again == kernel


@pytest.mark.parametrize("damage, message", [
    (lambda d: d["tensors"][0].update(dtype="complex64"), "not supported"),
    (lambda d: d["tensors"][0].update(shape=[0, 4]), "positive"),
    (lambda d: d["body"][0].update(kind="vector"), "not in"),
    (lambda d: d["body"][0].update(extent="7"), "must be an integer"),
    (lambda d: d["body"][0]["body"][0]["body"][1]["body"][0]["value"].update(binary="%"), "not in"),
    (lambda d: d["body"][0]["body"][0]["body"][0]["store"].update(tensor="nope"), "unknown tensor"),
    (lambda d: d.update(outputs=["A"]), "exactly one input, output or local"),
    (lambda d: d.update(locals=["A"]), "not a declared local"),
])
def test_malformed_kernels_are_refused(damage, message):
    doc = kernel_to_json(gemm(3, 4, 5))
    damage(doc)
    with pytest.raises((ValueError, TypeError), match=message):
        kernel_from_json(doc)


def one_call_program(args: tuple[Place, ...], kernel: Kernel | None = None, **changes) -> Program:
    k = kernel or gemm(2, 3, 4)
    p = Program("r", "optimized", (TensorSpec("A", (2, 3), "float32"),),
                (TensorSpec("C", (2, 4), "float32"),), (Call("k0_gemm", "Gemm 'g'", k, args),), (),
                (Constant(TensorSpec("B", (3, 4), "float32"), 0),), 64, 0, 0)
    return dataclasses.replace(p, **changes)


def test_a_valid_program_and_its_json():
    p = one_call_program((Place("input", 0), Place("weights", 0), Place("output", 0)))
    p.validate()
    again = Program.from_json(json.loads(json.dumps(p.to_json())))
    assert again == p and sources(again) == sources(p)
    assert "(const float *)(w + 0),  /* B */" in sources(p)["model.c"]


@pytest.mark.parametrize("args, changes, message", [
    ((Place("input", 0), Place("weights", 32), Place("output", 0)), {}, "outside the 64-byte weights"),
    ((Place("input", 0), Place("weights", 0), Place("input", 0)), {}, "is 'A' float32"),
    ((Place("input", 0), Place("weights", 0), Place("arena", 0)), {"arena_bytes": 16}, "outside the 16-byte arena"),
    ((Place("input", 0), Place("arena", 0), Place("arena", 16)), {"arena_bytes": 128}, "overlap and one of them is written"),
    ((Place("input", 0), Place("weights", 0), Place("arena", 0)), {"arena_bytes": 32}, "outputs \\['C'\\] are never written"),
    ((Place("input", 1), Place("weights", 0), Place("output", 0)), {}, "not one of the 1 inputs"),
    ((Place("input", 0), Place("weights", 0)), {}, "2 arguments for 3 parameters"),
])
def test_unsafe_bindings_are_refused(args, changes, message):
    with pytest.raises(GraphError, match=message):
        one_call_program(args, **changes).validate()


def test_an_output_bound_to_the_weights_is_refused():
    X, Y = Tensor("A", (2, 3)), Tensor("B", (3, 4))
    writes_b = Kernel("w", (X,), (Y,), (Loop("i", 3, (Loop("j", 4, (Store(Y["i", "j"], Const(1.0)),)),)),))
    p = one_call_program((Place("input", 0), Place("weights", 0)), kernel=writes_b)
    with pytest.raises(GraphError, match="read-only weights"):
        p.validate()


def test_kernels_are_verified():
    A, C = Tensor("A", (2, 3)), Tensor("C", (2, 4))
    overrun = Kernel("o", (A,), (C,), (Loop("i", 2, (Loop("j", 4, (
        Store(C["i", "j"], Binary("+", Load(A["i", "j"]), Const(1.0))),)),)),))
    p = one_call_program((Place("input", 0), Place("output", 0)), kernel=overrun)
    with pytest.raises(GraphError, match="ranges over 0..3"):
        p.validate()


def test_weights_blob_layout_is_checked():
    p = one_call_program((Place("input", 0), Place("weights", 0), Place("output", 0)),
                         constants=(Constant(TensorSpec("B", (3, 4), "float32"), 8),))
    with pytest.raises(GraphError, match="misaligned"):
        p.validate()
