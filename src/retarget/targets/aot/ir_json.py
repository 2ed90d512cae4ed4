"""Loop-nest Kernels as JSON: how a `c` artifact stores its kernels, as data.

A saved `c` module keeps each kernel's loop nest, not only the C printed from it: loading
rebuilds the Kernel objects from this JSON (every field type-checked, every op name checked by
the IR's own constructors), verifies them (`verify_kernel`: every index in bounds) and prints
the C again. So the native code a loaded module runs is always what retarget's printer makes
of a verified loop nest, never text taken from the artifact.

    {"name": "conv", "tensors": [{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32",
                                  "scope": "global"}, ...],
     "inputs": ["x", "w"], "outputs": ["y"], "locals": [],
     "body": [{"loop": "n", "extent": 1, "kind": "parallel", "body": [...]},
              {"store": {"tensor": "y", "index": [[[["n", 1]], 0], ...]},
               "value": {...}, "reduce": "+"}, ...]}

An affine index is `[[[var, coeff], ...], const]`; expressions are {"load": access, "fill":
x|null}, {"const": x}, {"unary": fn, "x": e}, {"binary": op, "a": e, "b": e},
{"select": cmp, "a", "b", "then", "other"}; copies {"copy": {"dst": access, "src": access,
"extents": [...]}}.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from ...loopnest.ir import (Access, Affine, Binary, Const, Copy, Kernel, Load, Loop, Select,
                            Store, Tensor, Unary)


# ---- to JSON ----------------------------------------------------------------------------------
def _affine(a: Affine) -> list:
    return [[[v, c] for v, c in a.terms], a.const]


def _access(acc: Access) -> dict:
    return {"tensor": acc.tensor.name, "index": [_affine(i) for i in acc.index]}


def _number(x: float) -> float | str:
    # JSON has no infinities or NaN: they travel as strings
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _expr(e) -> dict:
    if isinstance(e, Load):
        return {"load": _access(e.access), "fill": None if e.fill is None else _number(e.fill)}
    if isinstance(e, Const):
        return {"const": _number(e.value)}
    if isinstance(e, Unary):
        return {"unary": e.fn, "x": _expr(e.x)}
    if isinstance(e, Binary):
        return {"binary": e.op, "a": _expr(e.a), "b": _expr(e.b)}
    if isinstance(e, Select):
        return {"select": e.cmp, "a": _expr(e.a), "b": _expr(e.b), "then": _expr(e.then),
                "other": _expr(e.other)}
    raise TypeError(f"not an expression: {e!r}")


def _stmt(s) -> dict:
    if isinstance(s, Loop):
        return {"loop": s.var, "extent": s.extent, "kind": s.kind,
                "body": [_stmt(b) for b in s.body]}
    if isinstance(s, Store):
        return {"store": _access(s.dst), "value": _expr(s.value), "reduce": s.reduce}
    if isinstance(s, Copy):
        return {"copy": {"dst": _access(s.dst), "src": _access(s.src),
                         "extents": list(s.extents)}}
    raise TypeError(f"not a statement: {s!r}")


def kernel_to_json(k: Kernel) -> dict:
    tensors = k.params + k.locals
    return {"name": k.name,
            "tensors": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype,
                         "scope": t.scope} for t in tensors],
            "inputs": [t.name for t in k.inputs], "outputs": [t.name for t in k.outputs],
            "locals": [t.name for t in k.locals],
            "body": [_stmt(s) for s in k.body]}


# ---- from JSON (every field checked: the document is input) ----------------------------------
def _int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"{what} must be an integer, got {x!r}")
    return x


def _str(x: Any, what: str) -> str:
    if not isinstance(x, str) or not x:
        raise ValueError(f"{what} must be a non-empty string, got {x!r}")
    return x


def _list(x: Any, what: str) -> list:
    if not isinstance(x, list):
        raise ValueError(f"{what} must be a list, got {type(x).__name__}")
    return x


def _dict(x: Any, what: str) -> dict:
    if not isinstance(x, dict):
        raise ValueError(f"{what} must be an object, got {type(x).__name__}")
    return x


def _float(x: Any, what: str) -> float:
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{what} must be a number, got {x!r}")
    return float(x)


def _affine_from(x: Any) -> Affine:
    if len(_list(x, "affine index")) != 2:
        raise ValueError(f"an affine index is [[[var, coeff], ...], const], got {x!r}")
    terms, const = x
    out = Affine.of(_int(const, "affine constant"))
    seen = set()
    for t in _list(terms, "affine terms"):
        if not (isinstance(t, list) and len(t) == 2):
            raise ValueError(f"an affine term is [var, coeff], got {t!r}")
        v = _str(t[0], "loop variable")
        if v in seen:
            raise ValueError(f"variable {v!r} appears twice in one affine index")
        seen.add(v)
        out = out + Affine.of(v) * _int(t[1], "affine coefficient")
    return out


class _Reader:
    def __init__(self, tensors: Mapping[str, Tensor]):
        self.tensors = tensors

    def access(self, x: Any) -> Access:
        d = _dict(x, "access")
        name = _str(d.get("tensor"), "access tensor")
        if name not in self.tensors:
            raise ValueError(f"access to unknown tensor {name!r}")
        return Access(self.tensors[name], tuple(_affine_from(i) for i in _list(d.get("index"),
                                                                               "access index")))

    def expr(self, x: Any):
        d = _dict(x, "expression")
        if "load" in d:
            fill = d.get("fill")
            return Load(self.access(d["load"]), None if fill is None else _float(fill, "fill"))
        if "const" in d:
            return Const(_float(d["const"], "constant"))
        if "unary" in d:
            return Unary(_str(d["unary"], "unary fn"), self.expr(d.get("x")))
        if "binary" in d:
            return Binary(_str(d["binary"], "binary op"), self.expr(d.get("a")),
                          self.expr(d.get("b")))
        if "select" in d:
            return Select(_str(d["select"], "comparison"), self.expr(d.get("a")),
                          self.expr(d.get("b")), self.expr(d.get("then")), self.expr(d.get("other")))
        raise ValueError(f"unknown expression {sorted(d)}")

    def stmt(self, x: Any):
        d = _dict(x, "statement")
        if "loop" in d:
            return Loop(_str(d["loop"], "loop variable"), _int(d.get("extent"), "loop extent"),
                        tuple(self.stmt(s) for s in _list(d.get("body"), "loop body")),
                        _str(d.get("kind"), "loop kind"))
        if "store" in d:
            reduce = d.get("reduce")
            return Store(self.access(d["store"]), self.expr(d.get("value")),
                         None if reduce is None else _str(reduce, "reduce"))
        if "copy" in d:
            c = _dict(d["copy"], "copy")
            return Copy(self.access(c.get("dst")), self.access(c.get("src")),
                        tuple(_int(e, "copy extent") for e in _list(c.get("extents"), "extents")))
        raise ValueError(f"unknown statement {sorted(d)}")


def kernel_from_json(x: Any) -> Kernel:
    """The Kernel of `kernel_to_json`; ValueError (or TypeError) naming what is malformed."""
    d = _dict(x, "kernel")
    tensors: dict[str, Tensor] = {}
    for t in _list(d.get("tensors"), "tensors"):
        t = _dict(t, "tensor")
        name = _str(t.get("name"), "tensor name")
        if name in tensors:
            raise ValueError(f"tensor {name!r} is declared twice")
        tensors[name] = Tensor(name, tuple(_int(n, "dimension") for n in _list(t.get("shape"),
                                                                               "shape")),
                               _str(t.get("dtype"), "dtype"), _str(t.get("scope"), "scope"))
        if tensors[name].dtype not in ("float32", "float64", "int8", "int32", "int64"):
            raise ValueError(f"tensor {name!r}: dtype {tensors[name].dtype!r} is not supported")

    def pick(key: str, scope: str) -> tuple[Tensor, ...]:
        out = []
        for n in _list(d.get(key), key):
            if _str(n, key) not in tensors or tensors[n].scope != scope:
                raise ValueError(f"{key}: {n!r} is not a declared {scope} tensor")
            out.append(tensors[n])
        return tuple(out)

    inputs, outputs, local = pick("inputs", "global"), pick("outputs", "global"), pick("locals", "local")
    listed = [t.name for t in inputs + outputs + local]
    if sorted(listed) != sorted(tensors):
        raise ValueError(f"every declared tensor must be exactly one input, output or local; "
                         f"declared {sorted(tensors)}, listed {listed}")
    reader = _Reader(tensors)
    return Kernel(_str(d.get("name"), "kernel name"), inputs, outputs,
                  tuple(reader.stmt(s) for s in _list(d.get("body"), "body")), local)


__all__ = ["kernel_from_json", "kernel_to_json"]
