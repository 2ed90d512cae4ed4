"""Register tiling of a weighted reduction (conv, dense, matmul by a constant): a block of
outputs accumulated in a small local array, vectorised along the output channels.

A lowered convolution is two nests over its output, an init and an accumulation:

    for n, oc, oh, ow:               out[n, oc, oh, ow] = bias[oc]
    for n, oc, oh, ow, ic, kh, kw:   out[n, oc, oh, ow] += x[n, ic, oh+kh, ow+kw] * w[oc, ic, kh, kw]

The "channel" loop (oc) is the output loop that no data operand depends on, only constants
(the weights); the "column" loop (ow) is the output's fastest other dimension. Both are split,
by C and P, and the pair of nests becomes

    for n, oc.o, oh, ow.o:
        for ow.i, oc.i:              acc[ow.i, oc.i] = bias[oc]
        for ic, kh, kw, ow.i, oc.i:  acc[ow.i, oc.i] += x[n, ic, oh+kh, ow+kw] * w'[oc.o, ic, kh, kw, oc.i]
        for ow.i, oc.i:              out[n, oc, oh, ow] = acc[ow.i, oc.i]

with oc = oc.o*C + oc.i, ow = ow.o*P + ow.i and w' the weights in blocks of C output
channels, the block innermost: w'[oc.o, ic, kh, kw, oc.i] (a Relayout, done once, on the
constant, at compile time). The P x C
accumulators stay in vector registers across the whole reduction; each step loads one input
element per column (broadcast) and the next contiguous vector of C weights: compute bound,
where the plain nest is one scalar reduction per output element. Every output element still adds
its terms in the same order as the nest it came from, so results are bit-identical.

The statements keep their meaning because they are the original ones with variables
substituted (split) and constant indices permuted (relayout); the verifier and the
interpreter check the result like any other kernel.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ir import Access, Affine, Kernel, Load, Loop, Store, Tensor, accesses, loads, walk
from .schedule import Axis, Band, ScheduleError, map_accesses, nest, perfect_band, substitute


@dataclass(frozen=True, slots=True)
class Relayout:
    """The kernel reads constant `source` as tensor `name`: its dimension `dim` split into
    blocks of `block` (outer part in place, the block innermost), e.g. conv weights
    [K, C, R, S] -> [K/16, C, R, S, 16]: each block of output channels is one contiguous
    stream, read a vector at a time."""
    name: str
    source: str
    dim: int
    block: int

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        d = self.dim
        return shape[:d] + (shape[d] // self.block,) + shape[d + 1:] + (self.block,)

    def apply(self, data: np.ndarray) -> np.ndarray:
        d, s = self.dim, data.shape
        split = data.reshape(s[:d] + (s[d] // self.block, self.block) + s[d + 1:])
        return np.ascontiguousarray(np.moveaxis(split, d + 1, -1))


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A kernel as a schedule left it, and the constants it reads in another layout (what the
    code generator must pack into the weights blob)."""
    kernel: Kernel
    relayouts: tuple[Relayout, ...] = ()


def largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _channel_var(band: Band, store: Store, constants: frozenset[str]) -> Axis | None:
    """The output loop read only through constants, each time as the plain index (coefficient
    1) of exactly one of their dimensions."""
    out = store.dst.flat()
    data = [ld.access for ld in loads(store.value) if ld.access.tensor.name not in constants]
    consts = [ld.access for ld in loads(store.value) if ld.access.tensor.name in constants]
    for a in band.axes:
        if not out.coeff(a.var) or a.extent < 2 or any(a.var in acc.vars for acc in data):
            continue
        users = [acc for acc in consts if a.var in acc.vars]
        if users and all(sum(a.var in i.vars for i in acc.index) == 1 and
                         any(i.coeff(a.var) == 1 for i in acc.index) for acc in users):
            return a
    return None


def _blocked_index(acc: Access, lane: str, block: int) -> tuple[int, tuple[Affine, ...]] | None:
    """The dimension of `acc` that `lane` indexes, and the index into its blocked copy: that
    dimension's index `rest + lane` becomes `rest / block` in place and `lane` last. None
    when `rest` is not a multiple of `block`."""
    d = next(i for i, ix in enumerate(acc.index) if lane in ix.vars)
    rest = acc.index[d] - Affine.of(lane)
    if rest.const % block or any(c % block for _, c in rest.terms):
        return None
    outer = Affine._make({v: c // block for v, c in rest.terms}, rest.const // block)
    return d, acc.index[:d] + (outer,) + acc.index[d + 1:] + (Affine.of(lane),)


def tile_pair(init: Band, main: Band, constants: frozenset[str], channels: int, columns: int,
              taken: set[str]) -> tuple[tuple[Loop, ...], Tensor, tuple[Relayout, ...]] | None:
    """The init + accumulation nests `init`, `main` register-tiled, with the local
    accumulator and the relayouts it needs; None when they do not have the form above."""
    if len(init.body) != 1 or len(main.body) != 1:
        return None
    first, store = init.body[0], main.body[0]
    if not (isinstance(first, Store) and isinstance(store, Store) and first.reduce is None
            and store.reduce == "+" and first.dst == store.dst):
        return None
    out = store.dst.flat()
    indep = [a for a in main.axes if out.coeff(a.var)]
    red = [a for a in main.axes if not out.coeff(a.var)]
    if not red or tuple(indep) != init.axes or main.axes[:len(indep)] != tuple(indep):
        return None
    chan = _channel_var(main, store, constants)
    if chan is None:
        return None
    others = [a for a in indep if a is not chan and a.extent > 1]
    col = min(others, key=lambda a: abs(out.coeff(a.var)), default=None)
    c = largest_divisor(chan.extent, channels)
    p = largest_divisor(col.extent, columns) if col is not None else 1

    names = {f"{chan.var}_o", f"{chan.var}_i"} | ({f"{col.var}_o", f"{col.var}_i"} if col else set())
    if names & taken:
        return None
    at = {chan.var: Affine.of(f"{chan.var}_o") * c + f"{chan.var}_i"}
    inner = [Axis(f"{chan.var}_i", c)]
    if col is not None:
        at[col.var] = Affine.of(f"{col.var}_o") * p + f"{col.var}_i"
        inner.insert(0, Axis(f"{col.var}_i", p))
    outer = []
    for a in indep:
        if a is chan or a is col:
            outer.append(Axis(f"{a.var}_o", a.extent // (c if a is chan else p), a.kind))
        else:
            outer.append(a)

    acc_t = Tensor(_fresh("acc", taken), tuple(ax.extent for ax in inner), store.dst.tensor.dtype,
                   "local")
    acc = Access(acc_t, tuple(Affine.of(ax.var) for ax in inner))
    relayouts: dict[str, Relayout] = {}

    lane = f"{chan.var}_i"

    def packed(a: Access) -> Access:
        """A constant read along the channel: from its blocked copy."""
        blocked = _blocked_index(a, lane, c) if a.tensor.name in constants and \
            lane in a.vars else None
        if blocked is None:
            return a
        d, index = blocked
        r = relayouts.get(a.tensor.name)
        if r is None:
            # named by its blocking, so kernels that share a weight share its packed copy
            r = relayouts[a.tensor.name] = Relayout(
                _fresh(f"{a.tensor.name}.block{c}", taken), a.tensor.name, d, c)
        elif r.dim != d:
            return a      # read along another dimension elsewhere: keep the original
        return Access(Tensor(r.name, r.shape(a.tensor.shape), a.tensor.dtype), index)

    start = Store(acc, substitute(first, at).value)
    step = map_accesses(Store(acc, substitute(store, at).value, "+"), packed)
    finish = Store(substitute(store, at).dst, Load(acc))
    body = (nest(inner, (start,)) + nest(red + inner, (step,)) + nest(inner, (finish,)))
    return nest(outer, body), acc_t, tuple(relayouts.values())


def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}{i}"
    taken.add(name)
    return name


def register_tile(kernel: Kernel, constants: frozenset[str], channels: int = 16,
                  columns: int = 8) -> Scheduled:
    """`kernel` with each (init, accumulation) pair of top-level nests that has the form of
    the module docstring register-tiled; other statements unchanged. `constants` names the
    kernel inputs that are compile-time constants (only those may be relaid out)."""
    taken = {t.name for t in kernel.params + kernel.locals}
    taken |= {s.var for s, _ in walk(kernel.body) if isinstance(s, Loop)}
    body, locals_, relayouts = [], list(kernel.locals), []
    stmts = list(kernel.body)
    i = 0
    while i < len(stmts):
        pair = None
        if i + 1 < len(stmts) and isinstance(stmts[i], Loop) and isinstance(stmts[i + 1], Loop):
            try:
                pair = tile_pair(perfect_band(stmts[i]), perfect_band(stmts[i + 1]), constants,
                                 channels, columns, taken)
            except ScheduleError:
                pair = None
        if pair is None:
            body.append(stmts[i])
            i += 1
            continue
        loops, acc_t, rel = pair
        body += loops
        locals_.append(acc_t)
        relayouts += rel
        taken |= {r.name for r in rel}
        i += 2
    if not relayouts and len(locals_) == len(kernel.locals):
        return Scheduled(kernel)
    read = {acc.tensor.name for s, _ in walk(body) for acc, _ in accesses(s)}
    inputs = tuple(t for t in kernel.inputs if t.name in read)
    packed = {}
    for s, _ in walk(body):
        for acc, _ in accesses(s):
            if any(acc.tensor.name == r.name for r in relayouts):
                packed[acc.tensor.name] = acc.tensor
    tiled = Kernel(kernel.name, inputs + tuple(packed.values()), kernel.outputs, tuple(body),
                   tuple(locals_))
    return Scheduled(tiled, tuple(relayouts))


__all__ = ["Relayout", "Scheduled", "largest_divisor", "register_tile", "tile_pair"]
