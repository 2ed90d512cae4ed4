"""Elementwise ops: activations and broadcasting arithmetic."""
from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .common import broadcast_shapes, same_as_input
from .registry import OpDef, register


def _relu(x):
    return np.maximum(x, np.zeros((), x.dtype))


register(OpDef("Relu", _relu, same_as_input, doc="max(x, 0)"))


def _binary(name: str, fn) -> OpDef:
    def infer(attrs, types, consts):
        a, b = types
        return [TensorType(broadcast_shapes(a.shape, b.shape), a.dtype)]

    def compute(a, b):
        return np.asarray(fn(a, b)).astype(a.dtype, copy=False)

    return register(OpDef(name, compute, infer, num_inputs=(2, 2)))


_binary("Add", np.add)
