"""Loop nests written by hand for the `c` target's tests: single kernels for the printer, and a
small op lowering (Conv, Relu, Add, Gemm, and Flatten as a view) standing in for
retarget.loopnest.ops, plus the graph it can compile, so the whole path from graph to C is
tested whether or not ops.py exists."""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np

from retarget.ir.graph import Graph, Node, Value, constant
from retarget.ir.types import TensorType
from retarget.loopnest import (Binary, Const, Copy, Kernel, Load, Loop, Select, Store, Tensor,
                               Unary, aff)
from retarget.loopnest.c_printer import print_unit
from retarget.loopnest.schedule import Axis, nest
from retarget.ops import resolve_attrs
from retarget.targets.aot.lower import OpLowering
from retarget.targets.c import CTarget

FAST_CFLAGS = "-O1 -std=c99"


# ---- kernels for the printer -------------------------------------------------------------------
def gemm(m: int, k: int, n: int, init: bool = True, parallel: bool = False) -> Kernel:
    """C[i, j] = sum_k A[i, k] * B[k, j]; without `init` it accumulates into C as given."""
    A, B, C = Tensor("A", (m, k)), Tensor("B", (k, n)), Tensor("C", (m, n))
    red = Loop("k", k, (Store(C["i", "j"], Binary("*", Load(A["i", "k"]), Load(B["k", "j"])), "+"),))
    body = (Store(C["i", "j"], Const(0.0)), red) if init else (red,)
    return Kernel("gemm", (A, B), (C,),
                  (Loop("i", m, (Loop("j", n, body),), "parallel" if parallel else "serial"),))


def conv2d(c: int, f: int, h: int, w: int, kh: int, kw: int, stride: int, pad: int) -> Kernel:
    """y[0, f, oh, ow] = b[f] + sum x[0, c, oh*s + r - pad, ow*s + q - pad] * w[f, c, r, q],
    zero padding as a Load fill; parallel over output channels."""
    oh, ow = (h + 2 * pad - kh) // stride + 1, (w + 2 * pad - kw) // stride + 1
    X, Wt, B = Tensor("x", (1, c, h, w)), Tensor("w", (f, c, kh, kw)), Tensor("b", (f,))
    Y = Tensor("y", (1, f, oh, ow))
    window = X[0, "c", aff("oh") * stride + "r" - pad, aff("ow") * stride + "q" - pad]
    acc = Store(Y[0, "f", "oh", "ow"], Binary("*", Load(window, 0.0), Load(Wt["f", "c", "r", "q"])), "+")
    body = (Store(Y[0, "f", "oh", "ow"], Load(B["f"])),) + nest(
        [Axis("c", c), Axis("r", kh), Axis("q", kw)], (acc,))
    return Kernel("conv", (X, Wt, B), (Y,),
                  nest([Axis("f", f, "parallel"), Axis("oh", oh), Axis("ow", ow)], body))


def maxpool(c: int, h: int, w: int) -> Kernel:
    """3x3 stride-2 max pool with padding 1: a max reduction over -inf fills."""
    oh, ow = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    X, Y = Tensor("x", (c, h, w)), Tensor("y", (c, oh, ow))
    win = Load(X["c", aff("oh") * 2 + "r" - 1, aff("ow") * 2 + "q" - 1], float("-inf"))
    body = (Store(Y["c", "oh", "ow"], Const(float("-inf"))),) + nest(
        [Axis("r", 3), Axis("q", 3)], (Store(Y["c", "oh", "ow"], win, "max"),))
    return Kernel("maxpool", (X,), (Y,),
                  nest([Axis("c", c, "parallel"), Axis("oh", oh), Axis("ow", ow)], body))


UNARY_SAFE = ("neg", "abs", "exp", "tanh", "erf", "sigmoid", "floor", "ceil", "round", "sin",
              "cos")


def elementwise(n: int) -> Kernel:
    """Every unary function, binary op and a Select, one output each: y_<fn>[i]."""
    X, Z = Tensor("x", (n,)), Tensor("z", (n,))
    x, z = Load(X["i"]), Load(Z["i"])
    pos = Binary("+", Unary("abs", x), Const(0.5))          # positive: log, sqrt, rsqrt, recip
    exprs = {f"y_{fn}": Unary(fn, x) for fn in UNARY_SAFE}
    exprs.update({f"y_{fn}": Unary(fn, pos) for fn in ("log", "sqrt", "rsqrt", "recip")})
    exprs.update({"y_sub": Binary("-", x, z), "y_div": Binary("/", x, pos),
                  "y_max": Binary("max", x, z), "y_min": Binary("min", x, z),
                  "y_pow": Binary("pow", pos, Const(1.5)),
                  "y_select": Select(">", x, z, Binary("*", x, Const(2.0)), Const(-1.25))})
    outs = tuple(Tensor(name, (n,)) for name in exprs)
    body = tuple(Store(t["i"], e) for t, e in zip(outs, exprs.values()))
    return Kernel("elementwise", (X, Z), outs, (Loop("i", n, body),))


def tiled_scale(rows: int, cols: int, tile: int, parallel: bool) -> Kernel:
    """B = 2 * A + 1 through a local tile of `tile` rows: copy in, compute, copy out."""
    A, B = Tensor("A", (rows, cols)), Tensor("B", (rows, cols))
    L = Tensor("L", (tile, cols), scope="local")
    body = (Copy(L[0, 0], A[aff("io") * tile, 0], (tile, cols)),
            Loop("ii", tile, (Loop("j", cols, (
                Store(L["ii", "j"], Binary("+", Binary("*", Load(L["ii", "j"]), Const(2.0)),
                                           Const(1.0))),)),)),
            Copy(B[aff("io") * tile, 0], L[0, 0], (tile, cols)))
    return Kernel("tiled_scale", (A,), (B,),
                  (Loop("io", rows // tile, body, "parallel" if parallel else "serial"),), (L,))


def window_copy(rows: int, cols: int) -> Kernel:
    """B[i, j] = A[i + 1, j + 2] for a 3 x 5 box at a time, through a function-scope local
    whose box is not contiguous in A (one memcpy per row)."""
    A = Tensor("A", (rows + 4, cols + 8))
    B = Tensor("B", (rows, cols))
    L = Tensor("L", (3, 5), scope="local")
    body = (Copy(L[0, 0], A[aff("bi") * 3 + 1, aff("bj") * 5 + 2], (3, 5)),
            Copy(B[aff("bi") * 3, aff("bj") * 5], L[0, 0], (3, 5)))
    return Kernel("window_copy", (A,), (B,),
                  (Loop("bi", rows // 3, (Loop("bj", cols // 5, body),)),), (L,))


def int_scale(n: int) -> Kernel:
    """y = x * 0.5 with an int32 input: int parameters get int C types."""
    X, Y = Tensor("x", (n,), "int32"), Tensor("y", (n,))
    return Kernel("int_scale", (X,), (Y,), (Loop("i", n, (Store(Y["i"], Binary("*", Load(X["i"]), Const(0.5))),)),))


# ---- building and calling printed kernels ------------------------------------------------------
def build(kernels, directory: Path, openmp: bool = False, cflags: str = FAST_CFLAGS) -> ctypes.CDLL:
    """print_unit(kernels) compiled with gcc into a shared library, loaded."""
    src = directory / "unit.c"
    src.write_text(print_unit(kernels))
    lib = directory / "unit.so"
    cmd = ["gcc", *cflags.split(), "-Wall", "-Werror", "-fPIC", "-shared",
           *(["-fopenmp"] if openmp else []), "-o", str(lib), str(src), "-lm"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr + "\n" + src.read_text()
    return ctypes.CDLL(str(lib))


def call(lib: ctypes.CDLL, kernel: Kernel, inputs: dict[str, np.ndarray],
         outputs: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run the compiled kernel on copies of `inputs`; outputs start as `outputs` (or NaN,
    so an element the kernel never writes shows)."""
    arrays = [np.ascontiguousarray(inputs[t.name], dtype=t.dtype).copy() for t in kernel.inputs]
    outs = [np.ascontiguousarray(outputs[t.name], dtype=t.dtype).copy()
            if outputs and t.name in outputs else np.full(t.shape, np.nan, t.dtype)
            for t in kernel.outputs]
    fn = getattr(lib, kernel.name)
    fn.restype = None
    fn(*[ctypes.c_void_p(a.ctypes.data) for a in arrays + outs])
    return {t.name: a for t, a in zip(kernel.outputs, outs)}


def random_inputs(kernel: Kernel, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for t in kernel.inputs:
        if t.dtype.startswith("int"):
            out[t.name] = rng.integers(-50, 50, t.shape).astype(t.dtype)
        else:
            out[t.name] = rng.standard_normal(t.shape).astype(t.dtype)
    return out


# ---- a hand-made op lowering and a graph it compiles ---------------------------------------------
def _tensor(v: Value) -> Tensor:
    return Tensor(v.name, tuple(v.type.shape), v.type.dtype)


def _index(rank: int) -> tuple[str, ...]:
    return tuple(f"d{i}" for i in range(rank))


def _lower_conv(node: Node) -> Kernel:
    x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    a = resolve_attrs(node)
    assert a["group"] == 1 and list(a["dilations"] or [1, 1]) == [1, 1]
    (sh, sw), (ph, pw) = a["strides"], a["pads"][:2]
    X, Wt, Y = _tensor(x), _tensor(w), _tensor(y)
    n, f, oh, ow = y.type.shape
    c, kh, kw = w.type.shape[1:]
    window = X["n", "c", aff("oh") * sh + "r" - ph, aff("ow") * sw + "q" - pw]
    acc = Store(Y["n", "f", "oh", "ow"], Binary("*", Load(window, 0.0), Load(Wt["f", "c", "r", "q"])), "+")
    init_value = Load(_tensor(b)["f"]) if b is not None else Const(0.0)
    body = (Store(Y["n", "f", "oh", "ow"], init_value),) + nest(
        [Axis("c", c), Axis("r", kh), Axis("q", kw)], (acc,))
    inputs = (X, Wt) + ((_tensor(b),) if b is not None else ())
    return Kernel(f"conv_{node.name}", inputs, (Y,), nest(
        [Axis("n", n), Axis("f", f, "parallel"), Axis("oh", oh), Axis("ow", ow)], body))


def _lower_elementwise(node: Node) -> Kernel:
    y = node.outputs[0]
    Y = _tensor(y)
    idx = _index(len(y.type.shape))
    ins = tuple(_tensor(v) for v in node.inputs)
    if node.op == "Relu":
        value = Binary("max", Load(ins[0][idx]), Const(0.0))
    else:
        assert all(v.type.shape == y.type.shape for v in node.inputs), "no broadcasting here"
        value = Binary("+", Load(ins[0][idx]), Load(ins[1][idx]))
    axes = [Axis(v, n, "parallel" if i == 1 else "serial") for i, (v, n) in enumerate(zip(idx, y.type.shape))]
    return Kernel(f"{node.op.lower()}_{node.name}", ins, (Y,), nest(axes, (Store(Y[idx], value),)))


def _lower_gemm(node: Node) -> Kernel:
    a_, b_, c_, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    at = resolve_attrs(node)
    assert not at["transA"] and at["transB"] and at["alpha"] == 1 and at["beta"] == 1
    A, B, C, Y = _tensor(a_), _tensor(b_), _tensor(c_), _tensor(y)
    k = a_.type.shape[1]
    body = (Store(Y["m", "n"], Load(C["n"])),
            Loop("k", k, (Store(Y["m", "n"], Binary("*", Load(A["m", "k"]), Load(B["n", "k"])), "+"),)))
    return Kernel(f"gemm_{node.name}", (A, B, C), (Y,),
                  nest([Axis("m", y.type.shape[0]), Axis("n", y.type.shape[1], "parallel")], body))


def lower_node(node: Node) -> Kernel | None:
    if node.op in ("Flatten", "Identity"):
        return None
    return {"Conv": _lower_conv, "Relu": _lower_elementwise, "Add": _lower_elementwise,
            "Gemm": _lower_gemm}[node.op](node)


HANDMADE = OpLowering(lower_node, frozenset({"Conv", "Relu", "Add", "Gemm", "Flatten", "Identity"}),
                      "tests/targets/c/handmade.py")


class HandmadeCTarget(CTarget):
    """The c target with the hand-made lowering (registered name stays "c", so its artifacts
    load with the real target)."""

    def op_lowering(self) -> OpLowering:
        return HANDMADE


def small_net(seed: int = 0) -> Graph:
    """x[1,3,8,8] -> conv -> relu -> conv -> add(relu1) -> relu -> [maxpool: CPU] -> flatten
    -> gemm -> logits. Also outputs Flatten(add) (a view of a value only the region reads: the
    Add writes straight into that output buffer) and Identity(x) (a region input copied to an
    output)."""
    rng = np.random.default_rng(seed)

    def v(name, shape):
        return Value(name, TensorType(shape, "float32"))

    def w(name, shape, scale=0.3):
        return constant(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    x = v("x", (1, 3, 8, 8))
    c1, r1, c2, s, r2 = (v(n, (1, 4, 8, 8)) for n in ("c1", "r1", "c2", "s", "r2"))
    p, flat, logits = v("p", (1, 4, 4, 4)), v("flat", (1, 64)), v("logits", (1, 10))
    sflat, same = v("sflat", (1, 256)), v("same", (1, 3, 8, 8))
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}
    nodes = [
        Node("Conv", "conv1", [x, w("w1", (4, 3, 3, 3)), w("b1", (4,))], [c1], dict(conv)),
        Node("Relu", "relu1", [c1], [r1]),
        Node("Conv", "conv2", [r1, w("w2", (4, 4, 3, 3))], [c2], dict(conv)),
        Node("Add", "add", [c2, r1], [s]),
        Node("Flatten", "sflatten", [s], [sflat], {"axis": 1}),
        Node("Relu", "relu2", [s], [r2]),
        Node("MaxPool", "pool", [r2], [p], {"kernel_shape": [2, 2], "strides": [2, 2]}),
        Node("Flatten", "flatten", [p], [flat], {"axis": 1}),
        Node("Gemm", "fc", [flat, w("fc_w", (10, 64)), w("fc_b", (10,))], [logits], {"transB": 1}),
        Node("Identity", "same", [x], [same]),
    ]
    return Graph(nodes, [x], [logits, sflat, same], name="small_net")
