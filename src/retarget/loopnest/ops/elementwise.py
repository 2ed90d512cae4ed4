"""Elementwise ops lowered to loop nests: unary, Clip, binary with broadcasting, variadic."""
from __future__ import annotations

import math
from typing import Callable, Sequence

from ...errors import ShapeError, node_context
from ...ir.graph import Node, Value
from ...ops.registry import resolve_attrs
from ..ir import Expr, Kernel, Load, Select, Store, aff
from .common import (FLOAT_DTYPES, OPERAND_DTYPES, _KernelBuilder, _bin, _c, _const_scalar, _un,
                     _unsupported, broadcast_index, nest)


# ---- elementwise ops ------------------------------------------------------------------------
def _relu(x, a):
    return _bin("max", x, _c(0))


def _leaky_relu(x, a):
    return Select("<", x, _c(0), _bin("*", x, _c(a["alpha"])), x)


def _elu(x, alpha: float) -> Expr:
    return Select("<", x, _c(0), _bin("*", _c(alpha), _bin("-", _un("exp", x), _c(1))), x)


def _softplus(x) -> Expr:
    # log(1 + e^x) as max(x, 0) + log(1 + e^-|x|): e^x would overflow float for x > 88
    return _bin("+", _bin("max", x, _c(0)),
                _un("log", _bin("+", _c(1), _un("exp", _un("neg", _un("abs", x))))))


def _clamp(x, lo: float, hi: float) -> Expr:
    return _bin("min", _bin("max", x, _c(lo)), _c(hi))


def _gelu(x, a):
    if a["approximate"] == "tanh":
        inner = _bin("*", _c(math.sqrt(2 / math.pi)),
                     _bin("+", x, _bin("*", _c(0.044715), _bin("*", x, _bin("*", x, x)))))
        gate = _un("tanh", inner)
    elif a["approximate"] == "none":
        gate = _un("erf", _bin("/", x, _c(math.sqrt(2))))
    else:
        raise ValueError(f"approximate={a['approximate']!r} (known: 'none', 'tanh')")
    return _bin("*", _bin("*", _c(0.5), x), _bin("+", _c(1), gate))


def _sign(x, a):
    # x itself where it is 0 or NaN (np.sign keeps NaN)
    return Select(">", x, _c(0), _c(1), Select("<", x, _c(0), _c(-1), x))


def _shrink(x, a):
    lam, bias = a["lambd"], a["bias"]
    return Select("<", x, _c(-lam), _bin("+", x, _c(bias)),
                  Select(">", x, _c(lam), _bin("-", x, _c(bias)), _c(0)))


def _simple(fn: str):
    return lambda x, a: _un(fn, x)


# op -> (x, attrs) -> expression; each mirrors its definition in ops/elementwise.py
UNARY_OPS: dict[str, Callable[[Expr, dict], Expr]] = {
    "Relu": _relu,
    "LeakyRelu": _leaky_relu,
    "Sigmoid": _simple("sigmoid"),
    "Tanh": _simple("tanh"),
    "Exp": _simple("exp"),
    "Log": _simple("log"),
    "Sqrt": _simple("sqrt"),
    "Erf": _simple("erf"),
    "Floor": _simple("floor"),
    "Ceil": _simple("ceil"),
    "Round": _simple("round"),
    "Sin": _simple("sin"),
    "Cos": _simple("cos"),
    "Tan": lambda x, a: _bin("/", _un("sin", x), _un("cos", x)),
    "Abs": _simple("abs"),
    "Neg": _simple("neg"),
    "Reciprocal": _simple("recip"),
    "Sign": _sign,
    "Gelu": _gelu,
    "HardSigmoid": lambda x, a: _clamp(_bin("+", _bin("*", _c(a["alpha"]), x), _c(a["beta"])),
                                       0, 1),
    "HardSwish": lambda x, a: _bin("*", x, _clamp(_bin("+", _bin("/", x, _c(6)), _c(0.5)), 0, 1)),
    "Elu": lambda x, a: _elu(x, a["alpha"]),
    "Selu": lambda x, a: _bin("*", _c(a["gamma"]), _elu(x, a["alpha"])),
    "Celu": lambda x, a: _bin("+", _bin("max", x, _c(0)), _bin("min", _c(0), _bin(
        "*", _c(a["alpha"]), _bin("-", _un("exp", _bin("/", x, _c(a["alpha"]))), _c(1))))),
    "ThresholdedRelu": lambda x, a: Select(">", x, _c(a["alpha"]), x, _c(0)),
    "Softsign": lambda x, a: _bin("/", x, _bin("+", _c(1), _un("abs", x))),
    "Softplus": lambda x, a: _softplus(x),
    "Mish": lambda x, a: _bin("*", x, _un("tanh", _softplus(x))),
    "Swish": lambda x, a: _bin("*", x, _un("sigmoid", _bin("*", _c(a["alpha"]), x))),
    "Shrink": _shrink,
}

# op -> (a, b) -> expression, with NumPy broadcasting of the operands
BINARY_OPS: dict[str, Callable[[Expr, Expr], Expr]] = {
    "Add": lambda a, b: _bin("+", a, b),
    "Sub": lambda a, b: _bin("-", a, b),
    "Mul": lambda a, b: _bin("*", a, b),
    "Div": lambda a, b: _bin("/", a, b),
    "Pow": lambda a, b: _bin("pow", a, b),
    "PRelu": lambda x, slope: Select("<", x, _c(0), _bin("*", x, slope), x),
}
VARIADIC_OPS = ("Max", "Min", "Sum", "Mean")


def _operand(kb: _KernelBuilder, v: Value, out_index: Sequence) -> Expr:
    """An elementwise operand: a constant scalar is baked in, anything else is loaded with
    broadcasting."""
    scalar = _const_scalar(v)
    if scalar is not None:
        return _c(scalar)
    t = kb.input(v)
    return Load(t[broadcast_index(t.shape, out_index)])


def _elementwise(kb: _KernelBuilder, out_value: Value,
                 fn: Callable[[list[Expr]], Expr], operands: Sequence[Value]) -> Kernel:
    """out = fn(operands) over the output's shape, one nest, every loop independent."""
    y = kb.output(out_value)
    axes = [(f"i{d}", n) for d, n in enumerate(y.shape)]
    index = tuple(aff(v) for v, _ in axes)
    value = fn([_operand(kb, v, index) for v in operands])
    return kb.kernel([y], nest(axes, [Store(y[index], value)], len(axes)))


def _lower_unary(node: Node) -> Kernel:
    kb = _KernelBuilder(node)
    kb.require([node.inputs[0], node.outputs[0]])
    attrs = resolve_attrs(node)
    try:
        fn = UNARY_OPS[node.op]
        fn(_c(0), attrs)   # attribute values it cannot express fail here
    except ValueError as e:
        raise _unsupported(node, str(e)) from None
    return _elementwise(kb, node.outputs[0], lambda xs: fn(xs[0], attrs), [node.inputs[0]])


def _lower_clip(node: Node) -> Kernel:
    """Clip = min(max(x, lo), hi) (every element becomes hi when lo > hi, as ONNX says);
    constant bounds are baked in, run-time ones read as scalars."""
    kb = _KernelBuilder(node)
    x = node.inputs[0]
    kb.require([x, node.outputs[0]])
    bounds = [node.input(1), node.input(2)]
    kb.require(bounds, OPERAND_DTYPES)
    for b in bounds:
        if b is not None and b.type.numel != 1:
            raise ShapeError(f"{node_context(node)}: Clip bounds must be scalars, got {b.type}")
    present = [b for b in bounds if b is not None]

    def clip(xs):
        e, rest = xs[0], iter(xs[1:])
        for b, op in zip(bounds, ("max", "min")):
            if b is not None:
                e = _bin(op, e, next(rest))
        return e
    return _elementwise(kb, node.outputs[0], clip, [x] + present)


def _lower_binary(node: Node) -> Kernel:
    kb = _KernelBuilder(node)
    a, b = node.inputs[0], node.inputs[1]
    kb.require([a, node.outputs[0]])
    # Pow's exponent may be another dtype (an integer power): it is read as a value
    kb.require([b], OPERAND_DTYPES if node.op == "Pow" else FLOAT_DTYPES)
    fn = BINARY_OPS[node.op]
    return _elementwise(kb, node.outputs[0], lambda xs: fn(xs[0], xs[1]), [a, b])


def _lower_variadic(node: Node) -> Kernel:
    """Max / Min / Sum / Mean of any number of broadcast inputs, folded left to right."""
    kb = _KernelBuilder(node)
    xs = [v for v in node.inputs if v is not None]
    kb.require(xs + [node.outputs[0]])
    op = {"Max": "max", "Min": "min", "Sum": "+", "Mean": "+"}[node.op]

    def fold(es):
        e = es[0]
        for other in es[1:]:
            e = _bin(op, e, other)
        return _bin("/", e, _c(len(es))) if node.op == "Mean" else e
    return _elementwise(kb, node.outputs[0], fold, xs)
