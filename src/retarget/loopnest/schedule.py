"""Schedule primitives on loop-nest Kernels: each is a pure function returning a new
Kernel, and none changes what the kernel computes except where its docstring says the caller
must know the transformation is legal (`reorder`).

- `split(k, var, factor)`: `for var < n` becomes `for var_o < n/factor: for var_i < factor`,
  indices rewritten with var = var_o * factor + var_i. The factor must divide the extent: a
  ragged tail would need a second copy of the body (or guarded copies), and the buffering
  algorithms only ever ask for divisors.
- `reorder(k, order)`: permute a perfectly nested band of loops.
- `parallel(k, var)`: mark a loop parallel (the verifier checks the writes are disjoint).
- `distribute(k)`: loop fission, where provably legal, so that a kernel becomes a sequence of
  perfect nests (GEMM's `C = 0` init separated from its reduction nest).
- `perfect_band(stmt)` / `Band`: the shape the buffering algorithms work on: a chain of loops,
  each the only statement of its parent, around a list of loop-free statements.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from ..errors import RetargetError
from .ir import (Access, Affine, Binary, Copy, Expr, Kernel, Load, Loop, Select, Stmt, Store,
                 Unary, accesses, walk)


class ScheduleError(RetargetError, ValueError):
    """A schedule primitive asked for something the nest does not allow."""


# ---- rewriting accesses ---------------------------------------------------------------------
def map_expr(e: Expr, fn: Callable[[Access], Access]) -> Expr:
    if isinstance(e, Load):
        return Load(fn(e.access), e.fill)
    if isinstance(e, Unary):
        return Unary(e.fn, map_expr(e.x, fn))
    if isinstance(e, Binary):
        return Binary(e.op, map_expr(e.a, fn), map_expr(e.b, fn))
    if isinstance(e, Select):
        return Select(e.cmp, *(map_expr(x, fn) for x in (e.a, e.b, e.then, e.other)))
    return e


def map_accesses(s: Stmt, fn: Callable[[Access], Access]) -> Stmt:
    """`s` with every access (loop bodies included) replaced by `fn(access)`."""
    if isinstance(s, Loop):
        return Loop(s.var, s.extent, tuple(map_accesses(b, fn) for b in s.body), s.kind)
    if isinstance(s, Store):
        return Store(fn(s.dst), map_expr(s.value, fn), s.reduce)
    if isinstance(s, Copy):
        return Copy(fn(s.dst), fn(s.src), s.extents)
    raise TypeError(f"not a statement: {s!r}")


def substitute(s: Stmt, mapping: Mapping[str, Affine | str | int]) -> Stmt:
    """`s` with loop variables replaced by affine expressions in every index."""
    return map_accesses(s, lambda a: Access(a.tensor,
                                            tuple(i.substitute(mapping) for i in a.index)))


def bound_vars(stmts: Iterable[Stmt]) -> set[str]:
    return {s.var for s, _ in walk(stmts) if isinstance(s, Loop)}


# ---- perfect bands ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Axis:
    """A loop header without its body."""
    var: str
    extent: int
    kind: str = "serial"


@dataclass(frozen=True, slots=True)
class Band:
    """Loops `axes` (outermost first), each the only statement of the one outside it, around
    `body`, a list of statements none of which is a loop. No axes: a bare statement list."""
    axes: tuple[Axis, ...]
    body: tuple[Stmt, ...]

    @property
    def vars(self) -> tuple[str, ...]:
        return tuple(a.var for a in self.axes)

    def stmts(self) -> tuple[Stmt, ...]:
        return nest(self.axes, self.body)


def nest(axes: Sequence[Axis], body: Sequence[Stmt]) -> tuple[Stmt, ...]:
    """The statements `for axes: body`."""
    out = tuple(body)
    for a in reversed(axes):
        out = (Loop(a.var, a.extent, out, a.kind),)
    return out


def perfect_band(stmts: Stmt | Sequence[Stmt]) -> Band:
    """The perfect band rooted at `stmts` (one statement or a list); ScheduleError when a loop
    body mixes loops with other statements (run `distribute` first)."""
    body = (stmts,) if isinstance(stmts, (Loop, Store, Copy)) else tuple(stmts)
    axes: list[Axis] = []
    while len(body) == 1 and isinstance(body[0], Loop):
        lp = body[0]
        axes.append(Axis(lp.var, lp.extent, lp.kind))
        body = lp.body
    if any(isinstance(s, Loop) for s in body):
        where = f"inside loop {axes[-1].var!r}" if axes else "at the top"
        raise ScheduleError(f"not a perfect loop nest: {where} loops are mixed with other "
                            "statements")
    return Band(tuple(axes), body)


# ---- split / reorder / parallel -----------------------------------------------------------
def _map_loops(stmts: Sequence[Stmt],
               fn: Callable[[Loop], Stmt | None]) -> tuple[tuple[Stmt, ...], int]:
    """Apply `fn` to every loop, outermost first; where it returns a statement, that replaces
    the loop (and is not descended into). Returns the new statements and how many loops
    `fn` replaced."""
    out, hits = [], 0
    for s in stmts:
        if isinstance(s, Loop):
            new = fn(s)
            if new is not None:
                out.append(new)
                hits += 1
                continue
            body, n = _map_loops(s.body, fn)
            hits += n
            s = Loop(s.var, s.extent, body, s.kind)
        out.append(s)
    return tuple(out), hits


def _replace_body(k: Kernel, body: tuple[Stmt, ...]) -> Kernel:
    return Kernel(k.name, k.inputs, k.outputs, body, k.locals)


def split(k: Kernel, var: str, factor: int, outer: str | None = None,
          inner: str | None = None) -> Kernel:
    """Split every loop binding `var` into `outer` (default f"{var}_o") of extent n / factor
    around `inner` (default f"{var}_i") of extent `factor`; the outer loop keeps the kind."""
    outer, inner = outer or f"{var}_o", inner or f"{var}_i"
    if not isinstance(factor, int) or isinstance(factor, bool) or factor < 1:
        raise ScheduleError(f"split of loop {var!r} in kernel {k.name!r}: factor {factor!r} "
                            "must be a positive int")
    taken = bound_vars(k.body) & {outer, inner}
    if taken:
        raise ScheduleError(f"split of loop {var!r} in kernel {k.name!r}: the new name(s) "
                            f"{sorted(taken)} are already loop variables")

    def one(lp: Loop) -> Stmt | None:
        if lp.var != var:
            return None
        if lp.extent % factor:
            raise ScheduleError(f"split of loop {var!r} in kernel {k.name!r}: factor {factor} "
                                f"does not divide its extent {lp.extent} (ragged tails are not "
                                "supported)")
        at = {var: Affine.of(outer) * factor + inner}
        body = tuple(substitute(s, at) for s in lp.body)
        return Loop(outer, lp.extent // factor, (Loop(inner, factor, body),), lp.kind)

    body, hits = _map_loops(k.body, one)
    if not hits:
        raise ScheduleError(f"split: kernel {k.name!r} has no loop {var!r}")
    return _replace_body(k, body)


def reorder(k: Kernel, order: Sequence[str]) -> Kernel:
    """Permute the perfectly nested band of loops `order` names (outermost first), wherever
    it occurs; each loop keeps its kind. The caller vouches that the permutation is legal
    (no dependence crosses it; reductions are reassociated): this only checks structure."""
    order = tuple(order)
    if len(set(order)) != len(order):
        raise ScheduleError(f"reorder in kernel {k.name!r}: {list(order)} names a loop twice")
    missing = set(order) - bound_vars(k.body)
    if missing:
        raise ScheduleError(f"reorder in kernel {k.name!r}: no loop {sorted(missing)}")

    def one(lp: Loop) -> Stmt | None:
        if lp.var not in order:
            return None
        axes, body = [], (lp,)
        while len(axes) < len(order) and len(body) == 1 and isinstance(body[0], Loop) \
                and body[0].var in order:
            axes.append(Axis(body[0].var, body[0].extent, body[0].kind))
            body = body[0].body
        if len(axes) < len(order):
            found = [a.var for a in axes]
            raise ScheduleError(f"reorder in kernel {k.name!r}: loops {list(order)} are not "
                                f"perfectly nested: below {found} the body is not a single "
                                f"loop from the list")
        by_var = {a.var: a for a in axes}
        return nest([by_var[v] for v in order], body)[0]

    return _replace_body(k, _map_loops(k.body, one)[0])


def parallel(k: Kernel, var: str) -> Kernel:
    """Mark every loop binding `var` parallel."""
    body, hits = _map_loops(k.body, lambda lp: Loop(lp.var, lp.extent, lp.body, "parallel")
                            if lp.var == var else None)
    if not hits:
        raise ScheduleError(f"parallel: kernel {k.name!r} has no loop {var!r}")
    return _replace_body(k, body)


# ---- loop distribution --------------------------------------------------------------------
def _pins(acc: Access, var: str, inner: set[str]) -> bool:
    """Whether the element `acc` touches determines `var`, for fixed values of the variables
    outside the loop: some dimension's index uses `var` and no loop variable bound inside."""
    return any(i.coeff(var) and not (i.vars & inner) for i in acc.index)


def _distributable(lp: Loop, groups: list[tuple[Stmt, ...]]) -> bool:
    """Fission of `lp` into one loop per group keeps every dependence when each tensor that
    one group writes and another touches is accessed everywhere in the loop through one index
    that pins the loop variable: then the same element is only ever touched in the same
    iteration, whose statements keep their order."""
    inner = bound_vars(lp.body)
    touched: dict[str, list[tuple[int, Access, str]]] = {}
    for g, stmts in enumerate(groups):
        for s, _ in walk(stmts):
            for acc, rw in accesses(s):
                touched.setdefault(acc.tensor.name, []).append((g, acc, rw))
    for uses in touched.values():
        if len({g for g, _, _ in uses}) < 2 or all(rw == "r" for _, _, rw in uses):
            continue
        if len({acc for _, acc, _ in uses}) != 1 or not _pins(uses[0][1], lp.var, inner):
            return False
    return True


def _distribute(s: Stmt) -> tuple[Stmt, ...]:
    if not isinstance(s, Loop):
        return (s,)
    body = tuple(x for b in s.body for x in _distribute(b))
    if len(body) > 1 and any(isinstance(b, Loop) for b in body):
        groups: list[tuple[Stmt, ...]] = []
        for b in body:     # each loop alone; runs of loop-free statements stay together
            if groups and not isinstance(b, Loop) and not isinstance(groups[-1][-1], Loop):
                groups[-1] += (b,)
            else:
                groups.append((b,))
        if _distributable(s, groups):
            return tuple(Loop(s.var, s.extent, g, s.kind) for g in groups)
    return (Loop(s.var, s.extent, body, s.kind),)


def distribute(k: Kernel) -> Kernel:
    """Loop fission, innermost first, wherever it is provably legal (see `_distributable`),
    so that as much of the kernel as possible is a sequence of perfect nests. Where it is not
    legal the loop is left as it is (and `perfect_band` will say so)."""
    return _replace_body(k, tuple(x for s in k.body for x in _distribute(s)))
