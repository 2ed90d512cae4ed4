"""The loop-nest IR: what an ahead-of-time C target (and swTVM's Sunway target) generates code from.

A `Kernel` is a tree of statements over tensors:

- `Loop(var, extent, body, kind)`: `for var in range(extent)`; kind "serial" or "parallel"
  (the outermost parallel loop is split over threads / compute cores).
- `Store(dst, value, reduce)`: `dst = value`, or with reduce "+" / "max" / "min",
  `dst = dst <op> value`.
- `Copy(dst, src, extents)`: a box copy between two tensors (the host's "DMA"): for every i in
  the box `extents`, `dst[dst.index + i] = src[src.index + i]`. Both accesses have the box's
  rank; a dimension of extent 1 may be dropped on one side only through an index of a
  dimension whose size is 1.

Indices are `Affine` expressions of loop variables: sum(coeff * var) + const. Expressions
(`Expr`) are loads, constants, and unary / binary / select operations on them; a `Load` with
`fill` set reads that value wherever an index is out of bounds (a convolution's zero padding,
a max pool's -inf), and one without may never be out of bounds (the verifier checks).

Tensors are "global" (a kernel parameter: a network value in main memory) or "local" (a
buffer the kernel declares: a tile in fast local memory, an LDM array on Sunway). Everything
is a frozen dataclass, so passes return new trees and never mutate their input.
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Iterator, Mapping, Union

SCOPES = ("global", "local")
LOOP_KINDS = ("serial", "parallel")
UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "floor",
         "ceil", "round", "sin", "cos", "recip")
BINARY = ("+", "-", "*", "/", "max", "min", "pow")
COMPARE = ("<", "<=", ">", ">=", "==", "!=")
REDUCE = ("+", "max", "min")


# ---- affine index expressions ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Affine:
    """sum(coeff * var for var, coeff in terms) + const, with integer coefficients. Terms are
    kept sorted by variable name with no zero coefficient, so equal expressions compare equal."""
    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(x: "Affine | str | int") -> "Affine":
        if isinstance(x, Affine):
            return x
        if isinstance(x, str):
            return Affine(((x, 1),), 0)
        if isinstance(x, int) and not isinstance(x, bool):
            return Affine((), x)
        raise TypeError(f"not an affine index: {x!r}")

    @staticmethod
    def _make(coeffs: Mapping[str, int], const: int) -> "Affine":
        return Affine(tuple(sorted((v, c) for v, c in coeffs.items() if c)), const)

    def __add__(self, other) -> "Affine":
        o = Affine.of(other)
        coeffs = dict(self.terms)
        for v, c in o.terms:
            coeffs[v] = coeffs.get(v, 0) + c
        return Affine._make(coeffs, self.const + o.const)

    __radd__ = __add__

    def __neg__(self) -> "Affine":
        return Affine._make({v: -c for v, c in self.terms}, -self.const)

    def __sub__(self, other) -> "Affine":
        return self + (-Affine.of(other))

    def __rsub__(self, other) -> "Affine":
        return Affine.of(other) - self

    def __mul__(self, k: int) -> "Affine":
        if not isinstance(k, int) or isinstance(k, bool):
            raise TypeError(f"an affine index scales by an integer, not {k!r}")
        return Affine._make({v: c * k for v, c in self.terms}, self.const * k)

    __rmul__ = __mul__

    @property
    def vars(self) -> frozenset[str]:
        return frozenset(v for v, _ in self.terms)

    def coeff(self, var: str) -> int:
        return dict(self.terms).get(var, 0)

    def substitute(self, mapping: Mapping[str, "Affine | str | int"]) -> "Affine":
        out = Affine((), self.const)
        for v, c in self.terms:
            out = out + (Affine.of(mapping[v]) if v in mapping else Affine.of(v)) * c
        return out

    def evaluate(self, env: Mapping[str, int]) -> int:
        return self.const + sum(c * env[v] for v, c in self.terms)

    def bounds(self, extents: Mapping[str, int]) -> tuple[int, int]:
        """Smallest and largest value over var in [0, extents[var])."""
        lo = hi = self.const
        for v, c in self.terms:
            top = c * (extents[v] - 1)
            lo, hi = lo + min(0, top), hi + max(0, top)
        return lo, hi

    def __str__(self) -> str:
        parts = []
        for v, c in self.terms:
            parts.append(v if c == 1 else f"-{v}" if c == -1 else f"{c}*{v}")
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


def aff(x: "Affine | str | int") -> Affine:
    return Affine.of(x)


# ---- tensors and accesses -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    scope: str = "global"

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"tensor {self.name!r}: scope {self.scope!r} not in {SCOPES}")
        if any(not isinstance(d, int) or d < 1 for d in self.shape):
            raise ValueError(f"tensor {self.name!r}: shape {self.shape} must be positive ints")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * {"float32": 4, "float64": 8, "int8": 1, "int32": 4, "int64": 8}[self.dtype]

    @property
    def strides(self) -> tuple[int, ...]:
        """Row-major element strides."""
        out, s = [], 1
        for d in reversed(self.shape):
            out.append(s)
            s *= d
        return tuple(reversed(out))

    def __getitem__(self, index) -> "Access":
        index = index if isinstance(index, tuple) else (index,)
        return Access(self, tuple(Affine.of(i) for i in index))


@dataclass(frozen=True, slots=True)
class Access:
    tensor: Tensor
    index: tuple[Affine, ...]

    def __post_init__(self):
        if len(self.index) != len(self.tensor.shape):
            raise ValueError(f"access to {self.tensor.name!r} {list(self.tensor.shape)} with "
                             f"{len(self.index)} indices")

    @property
    def vars(self) -> frozenset[str]:
        return frozenset().union(*(i.vars for i in self.index))

    def flat(self) -> Affine:
        """The row-major element offset, as an affine expression."""
        out = Affine()
        for i, s in zip(self.index, self.tensor.strides):
            out = out + i * s
        return out

    def __str__(self) -> str:
        return f"{self.tensor.name}[{', '.join(map(str, self.index))}]"


# ---- expressions ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Load:
    access: Access
    fill: float | None = None     # the value read where an index is out of bounds; None: never

    def __str__(self) -> str:
        return str(self.access) if self.fill is None else f"{self.access}?{self.fill:g}"


@dataclass(frozen=True, slots=True)
class Const:
    value: float

    def __str__(self) -> str:
        return f"{self.value:g}"


@dataclass(frozen=True, slots=True)
class Unary:
    fn: str
    x: "Expr"

    def __post_init__(self):
        if self.fn not in UNARY:
            raise ValueError(f"unary {self.fn!r} not in {UNARY}")

    def __str__(self) -> str:
        return f"{self.fn}({self.x})"


@dataclass(frozen=True, slots=True)
class Binary:
    op: str
    a: "Expr"
    b: "Expr"

    def __post_init__(self):
        if self.op not in BINARY:
            raise ValueError(f"binary {self.op!r} not in {BINARY}")

    def __str__(self) -> str:
        if self.op in ("max", "min", "pow"):
            return f"{self.op}({self.a}, {self.b})"
        return f"({self.a} {self.op} {self.b})"


@dataclass(frozen=True, slots=True)
class Select:
    """`then` where `a <cmp> b`, else `other` (the comparison is on values, not indices)."""
    cmp: str
    a: "Expr"
    b: "Expr"
    then: "Expr"
    other: "Expr"

    def __post_init__(self):
        if self.cmp not in COMPARE:
            raise ValueError(f"comparison {self.cmp!r} not in {COMPARE}")

    def __str__(self) -> str:
        return f"({self.a} {self.cmp} {self.b} ? {self.then} : {self.other})"


Expr = Union[Load, Const, Unary, Binary, Select]


def loads(e: Expr) -> Iterator[Load]:
    """Every Load in `e`, left to right."""
    if isinstance(e, Load):
        yield e
    elif isinstance(e, Unary):
        yield from loads(e.x)
    elif isinstance(e, Binary):
        yield from loads(e.a)
        yield from loads(e.b)
    elif isinstance(e, Select):
        for x in (e.a, e.b, e.then, e.other):
            yield from loads(x)


# ---- statements ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Store:
    dst: Access
    value: Expr
    reduce: str | None = None

    def __post_init__(self):
        if self.reduce is not None and self.reduce not in REDUCE:
            raise ValueError(f"reduce {self.reduce!r} not in {REDUCE}")

    def __str__(self) -> str:
        op = "=" if self.reduce is None else ("+=" if self.reduce == "+" else f"{self.reduce}=")
        return f"{self.dst} {op} {self.value}"


@dataclass(frozen=True, slots=True)
class Copy:
    dst: Access
    src: Access
    extents: tuple[int, ...]

    def __post_init__(self):
        if not (len(self.extents) == len(self.dst.index) == len(self.src.index)):
            raise ValueError(f"copy {self.src} -> {self.dst}: box {self.extents} must have "
                             "the rank of both tensors")

    @property
    def elements(self) -> int:
        n = 1
        for e in self.extents:
            n *= e
        return n

    def __str__(self) -> str:
        return f"copy {self.dst} <- {self.src} box {list(self.extents)}"


@dataclass(frozen=True, slots=True)
class Loop:
    var: str
    extent: int
    body: tuple["Stmt", ...]
    kind: str = "serial"

    def __post_init__(self):
        if self.kind not in LOOP_KINDS:
            raise ValueError(f"loop {self.var}: kind {self.kind!r} not in {LOOP_KINDS}")
        if not isinstance(self.extent, int) or self.extent < 1:
            raise ValueError(f"loop {self.var}: extent {self.extent!r} must be a positive int")


Stmt = Union[Store, Copy, Loop]


@dataclass(frozen=True, slots=True)
class Kernel:
    """One layer's code: parameters (global tensors: inputs first, then outputs), the local
    buffers it declares, and its statements."""
    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    body: tuple[Stmt, ...]
    locals: tuple[Tensor, ...] = field(default=())

    @property
    def params(self) -> tuple[Tensor, ...]:
        return self.inputs + self.outputs

    @property
    def local_bytes(self) -> int:
        return sum(t.nbytes for t in self.locals)


def walk(stmts, loops: tuple[Loop, ...] = ()) -> Iterator[tuple[Stmt, tuple[Loop, ...]]]:
    """Every statement (loops included) with the loops enclosing it, outermost first."""
    for s in stmts:
        yield s, loops
        if isinstance(s, Loop):
            yield from walk(s.body, loops + (s,))


def accesses(s: Stmt) -> Iterator[tuple[Access, str]]:
    """The accesses of one statement (not of a loop's body) with "r" or "w"."""
    if isinstance(s, Store):
        if s.reduce is not None:
            yield s.dst, "r"
        for ld in loads(s.value):
            yield ld.access, "r"
        yield s.dst, "w"
    elif isinstance(s, Copy):
        yield s.src, "r"
        yield s.dst, "w"
